"""Custom OpenCL operators: a kernel file and a small TOML config serve a PNNX type, with no Python layer.

    config.py    reads and checks a config into an OpConfig
    formula.py   the work-size and output-shape formulas over N, C, H, W
    defines.py   the -D options: the operator's parameters and the automatic tensor defines
    layer.py     CustomLayer, the layer an operator of a served type gets
    table.py     CustomOps, the configs one graph uses (KUIPER_CUSTOM_OPS, custom_ops=, --custom-op)

Lesson 18 (course_notes/18-custom-opencl-operator.md) is the user's guide and the reference of the keys.
"""

from kuiper.custom.config import OpConfig, read_config
from kuiper.custom.layer import CustomLayer
from kuiper.custom.table import ENV_VAR, CustomOps

__all__ = ["CustomLayer", "CustomOps", "ENV_VAR", "OpConfig", "read_config"]
