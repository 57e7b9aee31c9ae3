"""Lesson 6: Layers and the registry. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 6`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""

import numpy as np
from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.layers.registry import register


@register("course.Softplus")
class Softplus(ElementwiseLayer):
    """softplus(x) = log(1 + e^(beta·x)) / beta, an activation registered as the type "course.Softplus".
    See course_notes/06-layers.md, exercises 1 and 2."""

    def __init__(self, op):
        """Read the parameter `beta` (default 1.0; an int such as 2 must work too) into self.beta, and refuse
        beta <= 0 with `raise self.error(...)`. See course_notes/06-layers.md, exercise 2."""
        super().__init__(op)
        raise NotImplementedError('lesson 6: write Softplus.__init__() in exercises/lesson_06.py; '
                                  'see course_notes/06-layers.md, exercise 2')

    def apply(self, x, out):
        """Write softplus(x) into `out`, without overflow for any float32 x (no inf or warning at x = ±100):
        log(1 + e^y) = max(y, 0) + log(1 + e^(-|y|)), and np.log1p computes log(1 + small) accurately.
        See course_notes/06-layers.md, exercise 1."""
        raise NotImplementedError('lesson 6: write Softplus.apply() in exercises/lesson_06.py; '
                                  'see course_notes/06-layers.md, exercise 1')
