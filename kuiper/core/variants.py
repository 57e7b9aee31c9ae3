"""A layer's variants: several ways to compute the same output, one chosen per input shape.

Which way runs fastest depends on the shape and on the machine: a BatchNorm over 512 planes of 7x7 pixels
wants another OpenCL kernel than one over 16 planes of 224x224, and a 3x3 convolution on a CPU is faster by
Winograd's method on a 56x56 image but not on a 7x7 one. A layer that offers several ways lists them as
`Variant`s in a `Variants`, its `variants` attribute, with a rule that names one for any input shapes. When
the graph plans an input signature it fixes the choice (kuiper/opencl/tuning.py can measure instead of
following the rule on OpenCL); forward then only looks it up (`Variants.pick`), and `--profile` shows it.
"""

from __future__ import annotations

from kuiper.core.errors import BackendError


class Variant:
    """One way to compute a layer's output. `build()` makes what the variant needs before it can run, once
    (`kernel()` returns it): on OpenCL its kernel, on the CPU prepared data such as transformed weights, or
    nothing (build=None). Calling an OpenCL variant, `variant(q, *args)`, runs `launch(q, kernel, *args)`,
    which enqueues the kernel with whatever arguments the layer passes; a CPU variant is `launch(*args)`, and
    fetches its prepared data with `kernel()` itself."""

    def __init__(self, name: str, build, launch, cpu: bool = False):
        self.name = name
        self.build = build
        self.launch = launch
        self.cpu = cpu
        self._kernel = None

    def kernel(self):
        if self._kernel is None and self.build is not None:
            self._kernel = self.build()
        return self._kernel

    @property
    def built(self) -> bool:
        """Whether build() has run (a variant without one never needs to)."""
        return self._kernel is not None

    def __call__(self, *args):
        if self.cpu:
            return self.launch(*args)
        q, *rest = args
        return self.launch(q, self.kernel(), *rest)

    def __repr__(self):
        return f"Variant({self.name!r})"


class Variants:
    """A layer's variants (on one OpenCL runtime `rt`, or rt=None on the CPU), and the one chosen for each
    tuple of input shapes.

    rule(shapes) names the variant the rule picks; candidates(shapes) names those able to compute these shapes
    (every variant, unless given). `files` are the OpenCL kernel files the variants are built from: a change
    to their source makes earlier measurements invalid."""

    #: how many times any layer's choice for some shapes has changed: a recorded forward made before a change
    #: may run other kernels than the layers now would (kuiper/opencl/replay.py)
    changes = 0

    def __init__(self, rt, files, variants, rule, candidates=None):
        self.rt = rt
        self.files = tuple(files)
        self.by_name = {v.name: v for v in variants}
        self.rule = rule
        self._candidates = candidates
        self.chosen = {}  # input shapes -> variant name

    def candidates(self, shapes) -> list:
        return list(self.by_name) if self._candidates is None else self._candidates(shapes)

    def fix(self, shapes, name: str | None = None) -> str:
        """Choose variant `name` (the rule's when None) for these input shapes, and build it now, when the
        plan is made, rather than in the first forward: an OpenCL kernel, or a CPU variant's prepared data
        (Winograd's transformed weights). Returns the name."""
        shapes = shape_key(shapes)
        name = name or self.rule(shapes)
        self._choose(shapes, name)
        self.by_name[name].kernel()
        return name

    def use(self, shapes, name: str) -> None:
        """Run variant `name` for these input shapes from now on."""
        shapes = shape_key(shapes)
        allowed = self.candidates(shapes)
        if name not in allowed:
            raise BackendError(f"variant {name!r} cannot run input shapes {shapes} (candidates: {', '.join(allowed)})")
        self._choose(shapes, name)

    def _choose(self, shapes: tuple, name: str) -> None:
        if self.chosen.get(shapes, name) != name:
            Variants.changes += 1
        self.chosen[shapes] = name

    def pick(self, shapes) -> Variant:
        """The variant chosen for these input shapes (a tuple of tuples); the rule's where nothing was chosen,
        as for a layer run on its own, outside a graph."""
        name = self.chosen.get(shapes)
        if name is None:
            name = self.chosen[shapes] = self.rule(shapes)
        return self.by_name[name]


def shape_key(shapes) -> tuple:
    """Input shapes as `Variants.chosen` keys them, and as forward sees them: a tuple of tuples of ints."""
    return tuple(tuple(int(d) for d in shape) for shape in shapes)
