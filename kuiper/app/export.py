"""From a PyTorch model to a PNNX graph kuiper runs, checked against PyTorch (`kuiper export`).

    build_module("torchvision:mobilenet_v3_small")   # or "path/to/model.py:factory"
    randomize(module, seed=0)                         # optional: statistics that show a wrong layer
    result = export(module, [(1, 3, 224, 224)], "out", "mobilenet_v3_small")
    check(result.param, result.inputs, result.outputs)

Needs the `export` extra (torch, pnnx, torchvision): `pip install "kuiper[export]"`. Every function imports
torch when it runs, so that `import kuiper` never needs it. `tools/export_models.py`, which makes the committed
models, shares `randomize` and `output_to` with this module.
"""

from __future__ import annotations

import contextlib
import ctypes
import difflib
import importlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import types
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kuiper.core.errors import ExportError, KuiperError, KuiperWarning
from kuiper.app.references import Comparison, compare

INSTALL = 'pip install "kuiper[export]"'
DEFAULT_SHAPE = (1, 3, 224, 224)
# torchvision models whose default input is not 224 x 224, and the keywords that make them exportable
TORCHVISION_SHAPES = {"inception_v3": (1, 3, 299, 299)}
TORCHVISION_OPTIONS = {
    # their auxiliary classifiers only train; init_weights=False skips scipy's truncated normal
    "inception_v3": {"aux_logits": False, "init_weights": False},
    "googlenet": {"aux_logits": False, "init_weights": False},
}


def require(*names: str) -> tuple:
    """The modules named (default: torch and pnnx), or an ExportError that says what to install."""
    names = names or ("torch", "pnnx")
    found, missing = {}, []
    for name in names:
        try:
            found[name] = importlib.import_module(name)
        except ImportError:
            missing.append(name)
    # a folder named pnnx on sys.path (a test suite's tests/pnnx/, say) imports as an empty namespace package
    if "pnnx" in found and not hasattr(found["pnnx"], "export"):
        missing.append("pnnx")
    if missing:
        raise ExportError(f"exporting needs {' and '.join(names)} ({' and '.join(missing)} not installed): {INSTALL}")
    return tuple(found[name] for name in names)


def import_torchvision():
    """torchvision, also where its wheel is a CUDA build on a machine without CUDA.

    Such a wheel cannot load its C++ operators (nms, roi_align, ...), and then `import torchvision` fails in
    `torchvision._meta_registrations`, which registers fake kernels for those operators, with "operator
    torchvision::nms does not exist". Classification and segmentation models use none of them, so after that
    failure (only then: a working torchvision is left as it is) an empty module stands in for that one."""
    try:
        import torchvision
    except ImportError:
        raise ExportError(f"torchvision:NAME needs torchvision: {INSTALL}") from None
    except RuntimeError as e:
        if "torchvision::" not in str(e):
            raise
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]  # the half-imported package, so that the import below starts afresh
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
        import torchvision
    return torchvision


# ---- building -----------------------------------------------------------------------------------------
def default_name(spec: str) -> str:
    """NAME of torchvision:NAME, FUNCTION of FILE.py:FUNCTION."""
    return spec.rsplit(":", 1)[-1]


def default_shape(spec: str) -> tuple:
    return TORCHVISION_SHAPES.get(spec.removeprefix("torchvision:"), DEFAULT_SHAPE)


def build_module(spec: str):
    """The torch.nn.Module a spec names, in eval mode: "torchvision:NAME" (a classification or segmentation
    model with random weights: nothing is downloaded) or "path/to/file.py:FUNCTION" (a function that takes no
    arguments and returns the module)."""
    require()
    if spec.startswith("torchvision:"):
        return _torchvision_module(spec.removeprefix("torchvision:")).eval()
    path, sep, function = spec.rpartition(":")
    if not sep or not path.endswith(".py") or not function:
        raise ExportError(f"{spec!r}: give torchvision:NAME or FILE.py:FUNCTION")
    return _factory_module(Path(path), function).eval()


def _torchvision_module(name: str):
    import torch

    models = import_torchvision().models
    classification = models.list_models(module=models)
    segmentation = models.list_models(module=models.segmentation)
    if name in classification:
        return models.get_model(name, weights=None, **TORCHVISION_OPTIONS.get(name, {}))
    if name in segmentation:
        model = models.get_model(name, weights=None, weights_backbone=None, aux_loss=False)

        class SegmentationOutput(torch.nn.Module):
            """torchvision's segmentation models return {"out": ...}: pnnx wants tensors, so only that."""

            def __init__(self, model):
                super().__init__()
                self.model = model

            def forward(self, x):
                return self.model(x)["out"]

        return SegmentationOutput(model)
    if name in models.list_models():
        raise ExportError(f"torchvision:{name}: only classification and segmentation models can be exported "
                          f"this way (detection, video and quantized models cannot); write a FILE.py:FUNCTION")
    close = difflib.get_close_matches(name, classification + segmentation, n=3)
    hint = f"did you mean {', '.join(close)}?" if close else f"e.g. {', '.join(classification[:3])}"
    raise ExportError(f"torchvision has no model {name!r} ({hint})")


def _factory_module(path: Path, function: str):
    import torch

    if not path.is_file():
        raise ExportError(f"{path}: no such file")
    loader_spec = importlib.util.spec_from_file_location(f"kuiper_export_{path.stem}", path)
    source = importlib.util.module_from_spec(loader_spec)
    sys.modules[source.__name__] = source  # dataclasses and pickling look their module up there
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)  # so that the file can import its neighbours
    try:
        loader_spec.loader.exec_module(source)
    except Exception as e:  # noqa: BLE001 (the user's file: whatever it raises is reported in one line)
        raise ExportError(f"{path}: importing it failed: {_said(e)}") from e
    finally:
        with contextlib.suppress(ValueError):  # unless the file took it out itself
            sys.path.remove(folder)
    factory = getattr(source, function, None)
    if not callable(factory):
        defined = sorted(n for n, v in vars(source).items() if isinstance(v, types.FunctionType)
                         and v.__module__ == source.__name__)
        raise ExportError(f"{path} has no function {function!r} (it defines: {', '.join(defined) or 'none'})")
    try:
        module = factory()
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"{path}:{function}() failed: {_said(e)}") from e
    if not isinstance(module, torch.nn.Module):
        raise ExportError(f"{path}:{function}() returned {type(module).__name__}, not a torch.nn.Module")
    return module


def _said(e: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"


# ---- random weights that show errors ----------------------------------------------------------------------
def randomize(module, seed: int | None = None) -> None:
    """Give the values a fresh model leaves trivial random ones, so that a layer kuiper gets wrong shows:

    * every BatchNorm: running mean ~ N(0, 0.1), running variance ~ U(0.5, 1.5), and its affine values (a
      fresh BatchNorm is the identity at eval: folding it wrongly would change nothing);
    * every LayerNorm and GroupNorm: weight ~ U(0.5, 1.5), bias ~ N(0, 0.1) (fresh: 1 and 0);
    * every parameter whose values are all tiny but not zero, as ConvNeXt's `layer_scale` (1e-6): ~ U(0.5, 1.5),
      or the branch it scales would vanish below any tolerance;
    * every weight matrix or kernel that is all zeros, as ViT's classifier head: ~ N(0, 1/fan_in), or every
      output would be its bias whatever the layers before it computed.

    With seed=None the values come from torch's global generator (tools/export_models.py seeds that once for
    the whole model); otherwise from a generator of their own."""
    (torch,) = require("torch")
    nn = torch.nn
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    norms = (nn.LayerNorm, nn.GroupNorm)
    handled = set()
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                if m.running_mean is not None:
                    m.running_mean.normal_(0.0, 0.1, generator=generator)
                    m.running_var.uniform_(0.5, 1.5, generator=generator)
            elif not isinstance(m, norms):
                continue
            if getattr(m, "weight", None) is not None:
                m.weight.uniform_(0.5, 1.5, generator=generator)
            if getattr(m, "bias", None) is not None:
                m.bias.normal_(0.0, 0.1, generator=generator)
            handled.update(id(p) for p in m.parameters(recurse=False))
        for p in module.parameters():
            magnitude = p.detach().abs()
            if id(p) in handled or not p.numel():
                continue
            if bool(((magnitude > 0) & (magnitude <= 1e-4)).all()):
                p.uniform_(0.5, 1.5, generator=generator)
            elif p.dim() >= 2 and not bool(magnitude.any()):
                p.normal_(0.0, (p[0].numel()) ** -0.5, generator=generator)


# ---- exporting ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def output_to(log_path: Path):
    """pnnx's C++ passes print straight to file descriptors 1 and 2: send them, and what Python prints
    meanwhile (the tracer's warnings), to a log, which says what went wrong when something does."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_path, "w") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                yield
        finally:
            libc.fflush(None)  # C stdio buffers would otherwise land on the restored terminal
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def sample_inputs(shapes, seed: int = 0) -> list:
    """One float32 array per shape, standard normal, the same for the same seed."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(shape), dtype=np.float32) for shape in shapes]


def torch_outputs(module, inputs: list) -> list:
    """The module's outputs on numpy inputs as float32 arrays, tuples and lists flattened in order."""
    (torch,) = require("torch")

    def flatten(value):
        if isinstance(value, torch.Tensor):
            return [np.ascontiguousarray(value.detach().numpy(), dtype=np.float32)]
        if isinstance(value, (tuple, list)):
            return [array for part in value for array in flatten(part)]
        raise ExportError(f"the model returns a {type(value).__name__}: pnnx exports tensors and tuples of "
                          f"them (wrap the model so that it returns those)")

    with torch.no_grad():
        try:
            result = module(*[torch.from_numpy(x) for x in inputs])
        except Exception as e:  # noqa: BLE001 (the user's model)
            shapes = ", ".join("x".join(map(str, x.shape)) for x in inputs)
            raise ExportError(f"the model fails on input(s) of shape {shapes}: {_said(e)}") from e
    return flatten(result)


@dataclass(frozen=True)
class Exported:
    """The files `export` wrote."""

    param: Path
    bin: Path
    inputs: list    # NAME_in0.npy, ...: the sample inputs
    outputs: list   # NAME_out0.npy, ...: PyTorch's outputs for them
    record: Path    # NAME.export.json


def export(module, input_shapes, out_dir, name: str, progress=None, seed: int = 0, spec: str | None = None,
           random_weights: bool = False) -> Exported:
    """Export `module` with pnnx, traced at `input_shapes` (one per input), into `out_dir`:

        NAME.pnnx.param, NAME.pnnx.bin      the graph (pnnx's other outputs are dropped)
        NAME_inK.npy, NAME_outK.npy         a seeded random sample input per shape, PyTorch's outputs for them
        NAME.export.json                    versions, shapes, files and whether the weights are random

    `progress(phase)`, when given, is told each phase as it starts. `spec` and `random_weights` only go into
    the record (`kuiper run` says when a model's weights are random)."""
    torch, pnnx = require()
    if not name or Path(name).name != name or name.startswith("."):
        raise ExportError(f"--name {name!r}: give a plain file name, without a folder")
    say = progress or (lambda phase: None)
    out_dir = Path(out_dir)
    module = module.eval()

    say("running the model in PyTorch")
    inputs = sample_inputs(input_shapes, seed)
    outputs = torch_outputs(module, inputs)

    say("tracing with pnnx")
    out_dir.mkdir(parents=True, exist_ok=True)
    param, bin_ = out_dir / f"{name}.pnnx.param", out_dir / f"{name}.pnnx.bin"
    with tempfile.TemporaryDirectory(prefix="kuiper-export-") as tmp:
        run_pnnx(module, inputs, Path(tmp), name, out_dir / f"{name}.pnnx.log")
        # pnnx also writes the traced .pt, ncnn files, onnx and Python scripts: only the graph is kept
        shutil.move(str(Path(tmp) / param.name), param)
        shutil.move(str(Path(tmp) / bin_.name), bin_)

    say("saving the sample input and PyTorch's output")
    files = {}
    for kind, arrays in (("in", inputs), ("out", outputs)):
        files[kind] = [out_dir / f"{name}_{kind}{k}.npy" for k in range(len(arrays))]
        for path, array in zip(files[kind], arrays):
            np.save(path, array)
    record = out_dir / f"{name}.export.json"
    record.write_text(json.dumps({
        "generator": "kuiper export", "spec": spec, "name": name,
        "torch_version": torch.__version__, "pnnx_version": getattr(pnnx, "__version__", None),
        "random_weights": random_weights, "seed": seed,
        "param": param.name, "bin": bin_.name,
        "inputs": [{"file": p.name, "shape": list(x.shape)} for p, x in zip(files["in"], inputs)],
        "outputs": [{"file": p.name, "shape": list(y.shape)} for p, y in zip(files["out"], outputs)],
    }, indent=2) + "\n")
    return Exported(param, bin_, files["in"], files["out"], record)


def run_pnnx(module, inputs: list, tmp: Path, name: str, failure_log: Path, module_operators=()) -> None:
    """pnnx.export in `tmp` on numpy `inputs`, with its printing in a log that is kept as `failure_log` when it
    fails; `module_operators`: module classes pnnx keeps whole (its moduleop option).

    pnnx may write the graph and then raise: for regnet_y_400mf it writes a Python script of the model that
    does not parse (a float literal printed badly) and raises SyntaxError importing it. The graph is whole
    then, so that counts as success, with a warning (and the check against PyTorch follows). Any other failure
    raises ExportError with the log's last line."""
    torch, pnnx = require()
    log = tmp / "pnnx.log"
    graph = [tmp / f"{name}{suffix}" for suffix in (".pnnx.param", ".pnnx.bin")]
    try:
        with output_to(log):
            # torch.jit.trace's own check re-traces and compares graphs: it fails on ViT's attention although the
            # trace is right, and kuiper's output is compared with PyTorch's afterwards anyway
            pnnx.export(module, str(tmp / f"{name}.pt"), tuple(torch.from_numpy(x) for x in inputs),
                        check_trace=False, moduleop=list(module_operators) or None)
    except Exception as e:  # noqa: BLE001 (pnnx raises whatever its steps raise)
        if not all(path.exists() for path in graph):
            shutil.copy(log, failure_log)
            raise ExportError(f"pnnx could not export the model: {_last_line(log) or _said(e)} "
                              f"(its log: {failure_log})") from e
        warnings.warn(f"pnnx raised {_said(e)} after writing the graph; the graph is kept", KuiperWarning,
                      stacklevel=3)
    for path in graph:
        if not path.exists():
            shutil.copy(log, failure_log)
            raise ExportError(f"pnnx wrote no {path.name}: {_last_line(log) or 'its log is empty'} "
                              f"(its log: {failure_log})")
    failure_log.unlink(missing_ok=True)  # from an earlier export that failed


def _last_line(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""


# ---- checking -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Checked:
    """kuiper on an exported model: the operator types it has no layer for ({type: [operator names]}, when
    nothing ran), or why it could not run it (`error`), or its outputs against PyTorch's (`comparison`)."""

    missing: dict
    error: str | None = None
    comparison: Comparison | None = None

    @property
    def ok(self) -> bool:
        return self.comparison is not None and self.comparison.ok


def check(param, inputs, outputs, backend: str = "numpy") -> Checked:
    """Load `param` with kuiper and run it on `inputs` (arrays or .npy paths); compare with `outputs`."""
    from kuiper.runtime.graph import RuntimeGraph

    def arrays(items):
        return [item if isinstance(item, np.ndarray) else np.load(item) for item in items]

    graph = RuntimeGraph(param, backend=backend).init()
    missing = graph.missing_types()
    if missing:
        return Checked(missing)
    try:
        results = graph.build().forward(*arrays(inputs))
    except KuiperError as e:  # a parameter a layer does not support, a shape it cannot handle, ...
        return Checked({}, error=(str(e).splitlines() or [""])[0])
    return Checked({}, comparison=compare(results, arrays(outputs)))


__all__ = ["Checked", "Exported", "build_module", "check", "default_name", "default_shape", "export",
           "import_torchvision", "output_to", "randomize", "require", "run_pnnx", "sample_inputs",
           "torch_outputs"]
