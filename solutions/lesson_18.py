"""Lesson 18: Your own OpenCL operator. Reference solutions."""

from pathlib import Path

CONFIG = '''
type = "nn.Softsign"
reference = "reference.py:softsign"
args = [{ index = 0, output = 0 }, { index = 1, input = 0 }]

[kernel]
file = "softsign.cl"
entry = "softsign"

[params]
alpha = { type = "float", default = 1.0 }

[worksize]
global = ["(N*C*H*W + 63) / 64 * 64"]
'''

KERNEL = '''
__kernel void softsign(__global float* y, __global const float* x) {
    const int i = get_global_id(0);
    if (i < OUTPUT0_SIZE) y[i] = x[i] / (ALPHA + fabs(x[i]));
}
'''

REFERENCE = '''
import numpy as np


def softsign(inputs, weights, params):
    x = inputs[0]
    return x / (params["alpha"] + np.abs(x))
'''


def write_softsign_op(folder) -> Path:
    """Write a custom operator for `nn.Softsign` with a parameter: y = x / (alpha + |x|), `alpha` a float that
    defaults to 1.0 when the operator's line has none. Put into `folder` the config (softsign.toml), its OpenCL
    kernel, passed alpha as a define, and its numpy reference, and return the config's path.
    See course_notes/18-custom-opencl-operator.md, exercise 1."""
    folder = Path(folder)
    (folder / "softsign.cl").write_text(KERNEL)
    (folder / "reference.py").write_text(REFERENCE)
    (folder / "softsign.toml").write_text(CONFIG)
    return folder / "softsign.toml"
