"""The view layers on OpenCL: every layer that changes only the shape (kuiper/layers/reshape.py's ViewLayer:
Tensor.reshape and view, and torch.squeeze, torch.unsqueeze, torch.flatten and nn.Identity, each in its own
module there), and Tensor.reshape_as. Input and output are contiguous with the same element order, so forward is one
device-to-device copy, or nothing where the fusion pass made the output a view of the input's buffer
(kuiper/runtime/fusion.py)."""

from __future__ import annotations

from kuiper.layers import flatten, identity, reshape, squeeze, unsqueeze
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl


class OpenCLView(OpenCLLayer):
    """The input's bytes copied into the output, unless both are the same buffer."""

    def forward_opencl(self, q, inputs, outputs):
        if outputs[0].nbytes and outputs[0].buffer is not inputs[0].buffer:  # OpenCL refuses a copy of 0 bytes
            q.copy(outputs[0].buffer, inputs[0].buffer, outputs[0].nbytes)


@opencl("Tensor.reshape", "Tensor.view")
class Reshape(OpenCLView, reshape.Reshape):
    pass


@opencl("Tensor.reshape_as", "Tensor.view_as")
class ReshapeAs(OpenCLView, reshape.ReshapeAs):
    pass


@opencl("torch.squeeze")
class Squeeze(OpenCLView, squeeze.Squeeze):
    pass


@opencl("torch.unsqueeze")
class Unsqueeze(OpenCLView, unsqueeze.Unsqueeze):
    pass


@opencl("torch.flatten", "nn.Flatten")
class Flatten(OpenCLView, flatten.Flatten):
    pass


@opencl("nn.Identity", "nn.Dropout", "nn.Dropout2d", "F.dropout")
class Identity(OpenCLView, identity.Identity):
    pass
