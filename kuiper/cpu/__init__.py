"""Fast CPU code for the numpy backend: kuiper's worker threads (threads.py) and the fast versions of layers."""

from kuiper.cpu import elementwise, expression, pooling  # noqa: F401  (registers the fast layers)
from kuiper.cpu import conv2d, conv_transpose2d, int8_linear, linear  # noqa: F401  (registers the fast layers)
from kuiper.cpu import attention, layer_norm  # noqa: F401  (registers the fast layers)
from kuiper.cpu import matmul  # noqa: F401  (registers the fast layers)
from kuiper.cpu import activations  # noqa: F401  (registers the fast layers)
from kuiper.cpu import adaptive_pool  # noqa: F401  (registers the fast layers)
from kuiper.cpu import cached_attention, rms_norm  # noqa: F401  (registers the fast layers)
