"""A small custom operator written into a test's tmp_path, which each test breaks one way at a time.

Not a conftest.py (it would shadow tests/conftest.py for `from conftest import`): import what you need.
"""

from pathlib import Path

import numpy as np

from kuiper.custom import CustomLayer, read_config
from kuiper.core.operators import make_operator

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "custom_ops"
LEAKY_CLAMP = EXAMPLES / "leaky_clamp" / "leaky_clamp.toml"
CHANNEL_SCALE = EXAMPLES / "channel_scale" / "channel_scale.toml"

# y = x * alpha + OFFSET: alpha goes by value, offset as a #define
CONFIG = """type = "test.Scale"
reference = "reference.py:scale"
args = [
    { index = 0, output = 0 },
    { index = 1, input = 0 },
    { index = 2, param = "alpha" },
]

[kernel]
file = "scale.cl"
entry = "scale"

[params]
alpha = { type = "float", default = 2.0, define = false }
offset = { type = "float", default = 0.0 }

[worksize]
global = ["N*C*H*W"]
"""

# store_t and LOAD/STORE (cl/store.h): the tensors' storage at either precision, float arithmetic
KERNEL = """#include "store.h"

__kernel void scale(__global store_t* y, __global const store_t* x, const float alpha) {
    const int i = get_global_id(0);
    STORE(y, i, LOAD(x, i) * alpha + OFFSET);
}
"""

REFERENCE = """def scale(inputs, weights, params):
    return inputs[0] * params["alpha"] + params["offset"]
"""


def write_op(folder: Path, config: str = CONFIG, kernel: str = KERNEL, reference: str = REFERENCE) -> Path:
    """Write the three files into `folder`; return the config's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scale.cl").write_text(kernel)
    (folder / "reference.py").write_text(reference)
    path = folder / "scale.toml"
    path.write_text(config)
    return path


def edited(old: str, new: str, text: str = CONFIG) -> str:
    """`text` with one piece replaced (which must be there: a test that edits nothing tests nothing)."""
    assert old in text, old
    return text.replace(old, new)


def scale_layer(path: Path, params=None, attrs=None, input_shapes=((2, 3, 4, 5),)) -> CustomLayer:
    """The layer the config at `path` makes for a hand-made test.Scale operator."""
    op = make_operator("test.Scale", params=params, attrs=attrs, input_shapes=input_shapes)
    return CustomLayer(op, read_config(path))


def sample(shape=(2, 3, 4, 5), seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
