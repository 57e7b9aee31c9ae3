"""Lesson 8: Convolution. Reference solutions."""

import numpy as np


def im2col(xp, kernel, stride=(1, 1), dilation=(1, 1)):
    """The column matrix of one padded image `xp` (C, Hp, Wp) for a kernel of `kernel` (kh, kw) taps at
    `stride` and `dilation`: shape (C·kh·kw, Ho·Wo), row (c, i, j) holding what tap (i, j) of channel c reads
    at every output position, in row-major order of (c, i, j) and of (oh, ow).
    See course_notes/08-convolution.md, exercise 1."""
    c, hp, wp = xp.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    ho = (hp - dh * (kh - 1) - 1) // sh + 1
    wo = (wp - dw * (kw - 1) - 1) // sw + 1
    columns = np.empty((c * kh * kw, ho * wo), xp.dtype)
    for ci in range(c):
        for i in range(kh):
            for j in range(kw):
                rows = xp[ci, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw]
                columns[(ci * kh + i) * kw + j] = rows.reshape(-1)
    return columns


def conv2d(x, w, b, stride, padding, dilation, groups):
    """A convolution of `x` (N, Cin, H, W) by `w` (Cout, Cin/groups, kh, kw) plus `b` (Cout,) or None, as
    im2col and one matrix product per group and image. stride, padding and dilation are (height, width)
    pairs. See course_notes/08-convolution.md, exercise 2."""
    n, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    cout_g = cout // groups
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.empty((n, cout, ho, wo), np.float32)
    for image in range(n):
        columns = im2col(xp[image], (kh, kw), stride, dilation)
        for g in range(groups):
            rows = columns[g * cin_g * kh * kw:(g + 1) * cin_g * kh * kw]
            weight = w[g * cout_g:(g + 1) * cout_g].reshape(cout_g, -1)
            out[image, g * cout_g:(g + 1) * cout_g] = (weight @ rows).reshape(cout_g, ho, wo)
    if b is not None:
        out += b.reshape(1, cout, 1, 1)
    return out


def conv_macs(graph, input_shape) -> int:
    """The multiply-accumulates of all nn.Conv2d operators of `graph` (a built kuiper.RuntimeGraph) for
    `input_shape`: N·Cout·Ho·Wo·(Cin/groups)·kh·kw each, the output shapes from graph.plan_for(input_shape)
    and the sizes from each operator's params. See course_notes/08-convolution.md, exercise 3."""
    shapes = graph.plan_for(input_shape).shapes
    total = 0
    for op in graph.operators:
        if op.type != "nn.Conv2d":
            continue
        n, cout, ho, wo = shapes[op.output_operands[0].name]
        kh, kw = op.params["kernel_size"].value
        cin_g = op.params["in_channels"].value // op.params["groups"].value
        total += n * cout * ho * wo * cin_g * kh * kw
    return total
