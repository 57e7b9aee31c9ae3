"""CustomLayer: the layer an operator gets when a custom operator config serves its type.

numpy    forward_numpy calls the config's reference function.
OpenCL   the kernel is compiled with the config's options, the parameter defines (fixed per operator)
         and the shape defines of the input shapes it runs at, so there is one program per shape
         signature. The runtime's program cache already keys programs by their options; the layer keeps
         its own small table of (kernel, work sizes) per signature so that a forward does no more than a
         dictionary lookup. When the .param file records the input shapes, build() compiles for them, so
         a kernel that does not compile fails the build, not the first forward.
         With precision fp16 float tensors and weights are stored as half: the kernel must declare them
         store_t* and read and write them with LOAD/STORE (cl/store.h); one that declares float* is refused.
         The defines describe the graph's tensors (INPUT0_TYPE=float) whatever the precision.
"""

from __future__ import annotations

import numpy as np

from kuiper.custom.config import OpConfig, tensor_name
from kuiper.custom.defines import param_defines, shape_defines
from kuiper.custom.formula import FormulaError, nchw
from kuiper.core.errors import KernelBuildError, LayerError
from kuiper.layers.base import Layer
from kuiper.opencl.layer import OpenCLLayer
from kuiper.pnnx.dtypes import numpy_dtype

_FLOAT_C_TYPES = ("half", "float", "double")


class CustomLayer(OpenCLLayer, Layer):
    num_inputs = None  # as many as the operator has; the config's bindings are checked against them

    def __init__(self, op, config: OpConfig):
        self.config = config
        super().__init__(op)
        count = len(op.input_operands)
        if len(op.output_operands) != 1:
            raise self.config_error("type", f"has {len(op.output_operands)} outputs; a custom operator has one")
        for arg in config.args:
            if arg.kind == "input" and arg.target >= count:
                raise self.config_error(f"{arg.key}.input", f"has {count} input(s), no input {arg.target}")
            if arg.kind == "weight" and arg.target not in op.attrs:
                raise self.config_error(f"{arg.key}.weight", f"has no weight '@{arg.target}' "
                                        f"(its weights: {', '.join(op.attrs) or 'none'})")
        kind, k = config.worksize_tensor
        if kind == "input" and k >= count:
            raise self.config_error("worksize.tensor", f"has {count} input(s), no input{k}")
        if config.output_input >= count:
            raise self.config_error("output", f"has {count} input(s), no input{config.output_input}")
        self.params = {spec.name: self._param(spec) for spec in config.params}
        self.weights = {key: self.weight(key) for key in op.attrs}
        self.param_options = param_defines(
            [(spec.define, spec.type, self.params[spec.name]) for spec in config.params if spec.define])
        self.device_weights = {}
        self._launches = {}  # ((shape, dtype) per input) -> (kernel, global size, local size)

    def config_error(self, key: str, message: str):
        """A CustomOpError about this operator: the config file, the key, the operator, the message."""
        return self.config.error(key, f"{self.op.type} operator '{self.op.name}' {message}")

    def _param(self, spec):
        if spec.name not in self.op.params:
            if spec.default is None:
                known = ", ".join(self.op.params) or "none"
                raise self.config_error(f"params.{spec.name}", f"has no parameter '{spec.name}' and the config "
                                        f"gives no default (its parameters: {known})")
            return spec.default
        read = {"int": self.int_param, "float": self.float_param,
                "int[]": self.ints_param, "float[]": self.floats_param}[spec.type]
        try:
            return read(spec.name)
        except LayerError as e:
            raise self.config.error(f"params.{spec.name}", str(e)) from None

    # ---- shapes -----------------------------------------------------------------------------------
    def _dims(self, shape, what: str) -> dict:
        try:
            return nchw(shape)
        except ValueError as e:
            raise self.shape_error(f"{what}: {e}") from None

    def _evaluate(self, formula, dims: dict, key: str) -> int:
        try:
            return formula(dims)
        except FormulaError as e:
            raise self.config.error(key, str(e)) from None

    def output_shapes(self, input_shapes):
        source = tuple(input_shapes[self.config.output_input])
        if self.config.output_shape is None:
            return [source]
        dims = self._dims(source, f"input{self.config.output_input}")
        shape = []
        for k, formula in enumerate(self.config.output_shape):
            size = self._evaluate(formula, dims, f"output.shape[{k}]")
            if size < 0:
                raise self.config_error(f"output.shape[{k}]", f"gets a negative size {size} from input shape "
                                        f"{source}")
            shape.append(size)
        return [tuple(shape)]

    def work_sizes(self, inputs: list, outputs: list) -> tuple:
        """(global, local or None) for these [(shape, dtype)] inputs and outputs."""
        kind, k = self.config.worksize_tensor
        shape = tuple((inputs if kind == "input" else outputs)[k][0])
        dims = self._dims(shape, tensor_name(self.config.worksize_tensor))
        global_size = self._sizes("global", self.config.global_size, dims, shape)
        if self.config.local_size is None:
            return global_size, None
        local_size = self._sizes("local", self.config.local_size, dims, shape)
        for i, (g, l) in enumerate(zip(global_size, local_size)):
            if g % l:
                raise self.config_error(f"worksize.local[{i}]", f"gets {l}, which does not divide the global "
                                        f"size {g} (OpenCL 1.x needs whole work-groups)")
        return global_size, local_size

    def _sizes(self, name: str, formulas: tuple, dims: dict, shape: tuple) -> tuple:
        sizes = tuple(self._evaluate(f, dims, f"worksize.{name}[{i}]") for i, f in enumerate(formulas))
        for i, size in enumerate(sizes):
            if size <= 0:
                raise self.config_error(f"worksize.{name}[{i}]", f"gets {size} from "
                                        f"{tensor_name(self.config.worksize_tensor)} of shape {shape}: "
                                        f"work sizes must be positive")
        return sizes

    def build_options(self, input_shapes, input_dtypes=None) -> list:
        """Every -D and compiler option the kernel gets for these input shapes (float32 by default)."""
        return self._plan_launch(self._signature(input_shapes, input_dtypes))[0]

    def _signature(self, shapes, dtypes=None) -> tuple:
        dtypes = dtypes or [np.float32] * len(shapes)
        return tuple((tuple(int(d) for d in s), np.dtype(t)) for s, t in zip(shapes, dtypes))

    def _plan_launch(self, inputs: tuple) -> tuple:
        """(options, global size, local size) for one signature of [(shape, dtype)] inputs."""
        shapes = [s for s, _ in inputs]
        outputs = list(zip(self.output_shapes(shapes), self.output_dtypes([t for _, t in inputs])))
        global_size, local_size = self.work_sizes(list(inputs), outputs)
        try:
            automatic = shape_defines(list(inputs), outputs, global_size, local_size)
        except ValueError as e:  # a dtype no kernel takes
            raise self.shape_error(str(e)) from None
        return [*self.config.options, *self.param_options, *automatic], global_size, local_size

    # ---- numpy ------------------------------------------------------------------------------------
    def forward_numpy(self, inputs, outputs):
        reference = self.config.reference
        if reference is None:
            raise self.config_error("reference", "has no numpy reference function: it runs only on backend='opencl'")
        result = np.asarray(reference(list(inputs), dict(self.weights), dict(self.params)))
        if result.shape != outputs[0].shape:
            raise self.config_error("reference", f"got shape {result.shape} from {self.config.reference_name}, "
                                    f"the output shape is {outputs[0].shape}")
        np.copyto(outputs[0], result, casting="same_kind")

    # ---- OpenCL -----------------------------------------------------------------------------------
    def build_opencl(self, rt):
        self._launches = {}  # compiled for the runtime it was built for
        self.device_weights = {arg.target: rt.upload(self.weights[arg.target])
                               for arg in self.config.args if arg.kind == "weight"}
        operands = self.op.input_operands
        if all(o.shape is not None and all(isinstance(d, int) for d in o.shape) for o in operands):
            self._launch(rt, self._signature([o.shape for o in operands], [numpy_dtype(o.dtype) for o in operands]))

    def _launch(self, rt, inputs: tuple) -> tuple:
        launch = self._launches.get(inputs)
        if launch is None:
            options, global_size, local_size = self._plan_launch(inputs)
            launch = self._launches[inputs] = (self._compile(rt, options), global_size, local_size)
        return launch

    def _compile(self, rt, options: list):
        import pyopencl as cl

        path, entry = self.config.kernel_file, self.config.entry
        try:
            program = rt.program(path, options)
        except KernelBuildError as e:
            raise self.config_error("kernel.file", f"needs {path.name}, which failed to build:\n{e.log}") from e
        names = program.get_info(cl.program_info.KERNEL_NAMES).split(";")
        if entry not in names:
            raise self.config.error("kernel.entry", f"{path.name} has no kernel '{entry}' (it has {', '.join(names)})")
        kernel = rt.kernel(path, entry, options)
        self._check_arguments(kernel, rt)
        return kernel

    def _check_arguments(self, kernel, rt) -> None:
        """Each binding must fit the argument's declared type: tensors and weights go to pointers,
        params to scalars of their kind. pyopencl would otherwise fail at launch, naming no config. With
        half storage a float* buffer would read half bits as floats: it must be store_t*."""
        import pyopencl as cl

        count = kernel.get_info(cl.kernel_info.NUM_ARGS)
        if count != len(self.config.args):
            raise self.config.error("args", f"binds {len(self.config.args)} argument(s), kernel "
                                    f"'{self.config.entry}' takes {count}")
        for arg in self.config.args:
            declared = kernel.get_arg_info(arg.index, cl.kernel_arg_info.TYPE_NAME).strip()
            if arg.kind == "param":
                wanted = "float" if self.config.param(arg.target).type == "float" else "int"
                fits = not declared.endswith("*") and (declared in _FLOAT_C_TYPES) == (wanted == "float")
            else:
                wanted = "buffer"
                fits = declared.endswith("*")
            if not fits:
                raise self.config.error(arg.key, f"binds {arg.kind} {arg.target!r} (a {wanted}) to argument "
                                        f"{arg.index}, which the kernel declares as '{declared}'")
            if wanted == "buffer" and declared.startswith("float") and rt.storage != np.float32:
                raise self.config_error(arg.key, f"binds {arg.kind} {arg.target!r} to argument {arg.index}, which "
                                        f"kernel '{self.config.entry}' declares as '{declared}': with precision "
                                        f"{rt.precision} float tensors are stored as half; declare it store_t* and "
                                        f"read and write it with LOAD/STORE (#include \"store.h\")")

    def forward_opencl(self, q, inputs, outputs):
        rt = q.runtime
        kernel, global_size, local_size = self._launch(rt, tuple((t.shape, rt.computed(t.dtype)) for t in inputs))
        values = []
        for arg in self.config.args:
            if arg.kind == "input":
                values.append(inputs[arg.target].buffer)
            elif arg.kind == "output":
                values.append(outputs[0].buffer)
            elif arg.kind == "weight":
                values.append(self.device_weights[arg.target])
            else:
                values.append(self.params[arg.target])
        q.run(kernel, global_size, local_size, *values)
