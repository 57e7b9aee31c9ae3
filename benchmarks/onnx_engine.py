"""onnxruntime as a benchmark engine: the model exported to ONNX by torch, run on the CPU.

onnxruntime is the usual yardstick for CPU inference (it fuses, pre-packs weights and picks kernels by the
CPU's SIMD); the benchmarks time it beside kuiper. It needs `pip install onnxruntime onnx` besides the
`export` extra; without them the engine is left out with a note.
"""

from __future__ import annotations

from pathlib import Path


def export_onnx(module, example, path: Path) -> Path:
    """Write `module` traced at `example` (a torch tensor) as ONNX, batch dim free; once per path."""
    import torch

    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        # the TorchScript exporter: the newer torch.export one needs onnxscript, not installed here. Not under
        # no_grad: there nn.MultiheadAttention takes a fused fast path that this exporter cannot write
        torch.onnx.export(module, (example,), str(partial), input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, dynamo=False)
        partial.replace(path)
    return path


def onnxruntime_forward(path: Path, threads: int):
    """(label, forward(x) -> first output) on onnxruntime's CPU provider with `threads` intra-op threads, or
    None when onnxruntime is not installed."""
    try:
        import onnxruntime
    except ImportError as e:
        print(f"onnxruntime not available ({e}); not timing it")
        return None
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return f"onnxruntime-{onnxruntime.__version__}", lambda x: session.run(None, {name: x})[0]
