"""Lesson 13: The fast CPU path. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 13`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""

import numpy as np


def f23():
    """Winograd's F(2, 3) as three matrices (BT, G, AT) of shapes (4, 4), (4, 3) and (2, 4), such that for
    four inputs d and a 3-tap filter g, AT @ ((G @ g) * (BT @ d)) gives the two outputs
    [d[0:3] @ g, d[1:4] @ g] with four multiplications. Derive them from the points 0, 1, -1 and infinity.
    See course_notes/13-fast-cpu.md, exercise 3."""
    raise NotImplementedError('lesson 13: write f23() in exercises/lesson_13.py; '
                              'see course_notes/13-fast-cpu.md, exercise 3')


def winograd_conv3x3(x, w, f):
    """A 3x3 convolution at stride 1 with padding 1 of one image `x` (C, H, W) by `w` (Cout, C, 3, 3), computed
    with the Winograd matrices of `f` (kuiper.core.winograd.F2 or F4: f.m outputs per tile side, f.a = f.m + 2,
    f.bt, f.g, f.at): the kernel transformed once, U = G g Gᵀ; every a x a tile of the padded input (tiles m
    apart, the last ones hanging over the edge into zeros) transformed, V = Bᵀ d B; the sum over input
    channels of U ⊙ V taken in the transformed domain; Aᵀ (...) A gives each m x m block of the output,
    (Cout, H, W). See course_notes/13-fast-cpu.md, "From one tile to a layer"."""
    raise NotImplementedError('lesson 13: write winograd_conv3x3() in exercises/lesson_13.py; '
                              'see course_notes/13-fast-cpu.md, "From one tile to a layer"')
