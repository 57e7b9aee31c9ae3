"""Every layer kuiper has, one module per operator family: this list is the table of contents.

Importing a module registers its classes under their PNNX type strings (see registry.py).
"""

from kuiper.layers import (  # noqa: F401
    # element-wise activations (elementwise.py holds their shared base)
    relu,
    sigmoid,
    tanh,
    hardtanh,
    leaky_relu,
    silu,
    hardsigmoid,
    hardswish,
    gelu,
    clamp,
    softmax,
    # convolution and friends
    conv2d,
    conv1d,
    unfold,
    conv_transpose2d,
    linear,
    int8_linear,
    matmul,
    batchnorm2d,
    layer_norm,
    attention,
    multihead_attention,
    # language models (kuiper/llm/ writes graphs of these)
    embedding,
    rms_norm,
    rotary,
    cached_attention,
    # pooling and resizing
    pooling,
    adaptive_pool,
    upsample,
    # reductions
    reduce,
    # shape and data movement
    reshape,
    flatten,
    permute,
    transpose,
    squeeze,
    unsqueeze,
    cat,
    chunk,
    split,
    slice,
    stack,
    roll,
    shuffle,
    expand,
    pad,
    identity,
    # constants and arithmetic
    attribute,
    arange,
    expression,
    aten,
    # masks and casts (a text model's padding and causal masks)
    cast,
    where,
)
