"""A fused operator: one layer's work followed by an epilogue of cheap steps on its output.

The fusion pass (kuiper/runtime/fusion.py) rewrites `conv -> add(@0,@1) -> relu` into one operator whose
layer is a `FusedLayer`: the convolution (`main`), then the steps, in order, on the convolution's output:

    add   out += inputs[extra]   the other operand of a sum: an ordinary input of the fused operator
    act   out = act(out)         an element-wise layer that can work in place (ReLU, clamps)

The graph, the memory plan and both backends see an ordinary operator with inputs and one output. By
default the steps run on the whole output after `main`; a main layer that defines
`forward_epilogue(inputs, outputs, epilogue)` runs them itself on each part of the output it has just
written, while that part is still in the CPU's cache (kuiper/cpu/conv2d.py does, band by band). The OpenCL
backend's fused layer (kuiper/opencl/fused.py) runs the steps inside the main layer's kernel where it can.
"""

from __future__ import annotations

from typing import NamedTuple

from kuiper.layers.base import Layer


class EpilogueStep(NamedTuple):
    """`layer` is the operator the step stands for; `extra` is the index, among the fused operator's inputs, of
    the tensor a sum adds (None for an activation)."""

    layer: Layer
    extra: int | None = None


class Epilogue:
    """The steps with the tensors they add, ready to apply to any part of the output."""

    def __init__(self, steps: list, inputs: list):
        self.steps = steps
        self.inputs = inputs  # the fused operator's inputs: steps index into them

    def reshaped(self, shape: tuple) -> "Epilogue":
        """The same steps with the added tensors viewed as `shape` (the main layer's view of its output)."""
        return Epilogue(self.steps, [x.reshape(shape) if i in self._extras() else x for i, x in enumerate(self.inputs)])

    def _extras(self) -> set:
        return {step.extra for step in self.steps if step.extra is not None}

    def apply(self, out, where=...) -> None:
        """Run the steps on `out`, the part `where` (an index into the whole output) of the output."""
        for step in self.steps:
            if step.extra is None:
                # an activation fused for the device may not work in place on the host (GELU reads x twice)
                step.layer.apply(out if step.layer.in_place else out.copy(), out)
            else:
                out += self.inputs[step.extra][where]


class FusedLayer(Layer):
    """`main` followed by `steps` (see the module docstring). `main_inputs` of the fused operator's inputs are
    main's own; the rest are the tensors the steps add."""

    num_inputs = None

    def __init__(self, op, main: Layer, steps: list, main_inputs: int):
        super().__init__(op)
        self.main = main
        self.steps = steps
        self.main_inputs = main_inputs

    def output_shapes(self, input_shapes):
        shapes = self.main.output_shapes(input_shapes[:self.main_inputs])
        for step in self.steps:
            if step.extra is not None and tuple(input_shapes[step.extra]) != tuple(shapes[0]):
                raise self.shape_error(f"the sum fused into it adds shape {tuple(input_shapes[step.extra])} to its "
                                       f"output {tuple(shapes[0])}")
        return shapes

    def output_dtypes(self, input_dtypes):
        return self.main.output_dtypes(input_dtypes[:self.main_inputs])

    def macs(self, input_shapes, output_shapes):
        return self.main.macs(input_shapes[:self.main_inputs], output_shapes)

    def workspace_bytes(self, input_shapes):
        return self.main.workspace_bytes(input_shapes[:self.main_inputs])

    @property
    def keeps_workspace(self) -> bool:
        return self.main.keeps_workspace

    @property
    def variants(self):
        return self.main.variants

    def forward_numpy(self, inputs, outputs):
        epilogue = Epilogue(self.steps, inputs)
        own = inputs[:self.main_inputs]
        if hasattr(self.main, "forward_epilogue"):
            self.main.forward_epilogue(own, outputs, epilogue)
        else:
            self.main.forward_numpy(own, outputs)
            epilogue.apply(outputs[0])
