"""`kuiper export` and kuiper/app/export.py: a model file of your own and a torchvision model to PNNX, checked against
PyTorch; what goes wrong says so in one line. Needs torch and pnnx (the `export` extra): skipped without them."""

import json
import os
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pnnx = pytest.importorskip("pnnx")
if not hasattr(pnnx, "export"):  # tests/pnnx/ on sys.path, not the exporter
    pytest.skip("pnnx is not installed", allow_module_level=True)

from kuiper.app import export as exporting  # noqa: E402
from kuiper.app import labels  # noqa: E402
from kuiper.app.cli import RANDOM_WEIGHTS_NOTE  # noqa: E402
from kuiper.core.errors import ExportError  # noqa: E402
from test_cli import one_line, run  # noqa: E402  (the command line's helpers: kuiper ARGV in this process)

MODEL_FILE = textwrap.dedent('''
    import torch
    import torch.nn as nn

    class Scaled(nn.Module):
        """Two convolutions, a BatchNorm and a layer scale as ConvNeXt's (1e-6): fresh, both hide errors."""

        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.conv2 = nn.Conv2d(8, 4, 1)
            self.layer_scale = nn.Parameter(torch.full((4, 1, 1), 1e-6))

        def forward(self, x):
            y = torch.relu(self.bn(self.conv1(x)))
            return self.conv2(y) * self.layer_scale + torch.mean(x, dim=1, keepdim=True)

    def two_convs():
        torch.manual_seed(0)
        return Scaled()

    class Running(nn.Module):
        def forward(self, x):
            return torch.cumsum(x, dim=1)

    def running():
        return Running()

    def number():
        return 3

    def broken():
        raise ValueError("no weights here")
''')


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(MODEL_FILE)
    return path


def test_a_model_file_is_exported_checked_and_run(model_file, tmp_path, capsys):
    out = tmp_path / "exported"
    status, text, err = run(["export", f"{model_file}:two_convs", "--input-shape", "2,3,12,10", "--out", str(out),
                             "--randomize"], capsys)
    assert status == 0, err
    names = {p.name for p in out.iterdir()}
    assert names == {"two_convs.pnnx.param", "two_convs.pnnx.bin", "two_convs_in0.npy", "two_convs_out0.npy",
                     "two_convs.export.json"}
    assert "output 0: kuiper (numpy) matches PyTorch (max abs diff" in text
    record = json.loads((out / "two_convs.export.json").read_text())
    assert record["spec"] == f"{model_file}:two_convs" and record["random_weights"] is True
    assert record["inputs"] == [{"file": "two_convs_in0.npy", "shape": [2, 3, 12, 10]}]
    assert record["torch_version"] == torch.__version__

    # the saved output is PyTorch's for the saved input, the layer scale no longer tiny
    module = exporting.build_module(f"{model_file}:two_convs")
    exporting.randomize(module, seed=0)
    x = np.load(out / "two_convs_in0.npy")
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    assert np.allclose(np.load(out / "two_convs_out0.npy"), want, atol=1e-6)
    assert float(module.layer_scale.detach().min()) >= 0.5

    # kuiper run finds the sample input and PyTorch's output beside the model
    status, text, _ = run(["run", str(out / "two_convs.pnnx.param")], capsys)
    assert status == 0 and "input 2x3x12x10" in text and "matches the saved PyTorch output" in text
    status, text, _ = run(["run", str(out / "two_convs.pnnx.param"), "--json"], capsys)
    assert json.loads(text)["reference"]["matches"] is True and json.loads(text)["random_weights"] is True


def test_randomize_gives_norms_and_layer_scales_values_that_show(model_file):
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.BatchNorm2d(4), torch.nn.GroupNorm(2, 4),
                                 torch.nn.LayerNorm([4, 3, 3]))
    module.register_parameter("gamma", torch.nn.Parameter(torch.full((4,), 1e-6)))
    module.register_parameter("zeros", torch.nn.Parameter(torch.zeros(4)))  # zero is not a tiny scale
    head = torch.nn.Linear(4, 3)
    torch.nn.init.zeros_(head.weight)  # as ViT's classifier head starts
    module.append(head)
    conv = module[0].weight.detach().clone()
    exporting.randomize(module, seed=1)
    bn, gn, ln = module[1], module[2], module[3]
    assert torch.equal(module[0].weight, conv)  # the convolution's weights are left as they were
    assert bn.running_mean.abs().max() > 0 and not torch.allclose(bn.running_var, torch.ones(4))
    for norm in (bn, gn, ln):
        assert bool(((norm.weight >= 0.5) & (norm.weight <= 1.5)).all()) and norm.bias.abs().max() > 0
    assert bool((module.gamma >= 0.5).all()) and torch.equal(module.zeros, torch.zeros(4))
    assert float(head.weight.detach().std()) > 0.1  # a zero weight matrix would hide every layer before it
    again = torch.nn.Sequential(torch.nn.BatchNorm2d(4))
    exporting.randomize(again, seed=1)
    assert torch.equal(again[0].running_mean, bn.running_mean)  # the same seed, the same values


@pytest.mark.parametrize("spec, message", [
    ("{file}:missing", "{file} has no function 'missing' (it defines: broken, number, running, two_convs)"),
    ("{file}:number", "{file}:number() returned int, not a torch.nn.Module"),
    ("{file}:broken", "{file}:broken() failed: ValueError: no weights here"),
    ("{dir}/nothing.py:f", "{dir}/nothing.py: no such file"),
    ("mine.txt", "'mine.txt': give torchvision:NAME or FILE.py:FUNCTION"),
    ("torchvision:resnet19", "torchvision has no model 'resnet19' (did you mean resnet18, "),
    ("torchvision:fasterrcnn_resnet50_fpn", "torchvision:fasterrcnn_resnet50_fpn: only classification and "
                                            "segmentation models can be exported this way"),
])
def test_what_cannot_be_built_says_why_in_one_line(spec, message, model_file, tmp_path, capsys):
    fill = dict(file=model_file, dir=tmp_path)
    status, out, err = run(["export", spec.format(**fill), "--out", str(tmp_path / "o")], capsys)
    assert status == 1 and not out
    assert one_line(err).startswith("kuiper: error: " + message.format(**fill))


def test_operator_types_without_a_layer_are_listed(model_file, tmp_path, capsys, monkeypatch):
    from kuiper.runtime import graph

    # kuiper gains layers: whatever it has by now, this test takes torch.cumsum to be without one
    monkeypatch.setattr(graph, "is_supported", lambda type_, real=graph.is_supported: type_ != "torch.cumsum"
                        and real(type_))
    status, out, err = run(["export", f"{model_file}:running", "--input-shape", "1,4,6,6", "--out",
                            str(tmp_path / "o")], capsys)
    assert status == 1 and "kuiper has no layer for 1 operator type(s) of this model:" in out
    assert "torch.cumsum: 1 operator(s) (torch.cumsum_0)" in out
    assert one_line(err) == ("kuiper: error: kuiper cannot run running yet: 1 operator type(s) have no layer (a "
                             "custom operator can serve one: lesson 18)")
    assert (tmp_path / "o" / "running.pnnx.param").exists()  # the files are kept, for inspect or a custom op


def fake_pnnx(monkeypatch, write: bool, raises: Exception):
    """pnnx.export replaced: prints as its C++ passes do (file descriptor 1), maybe writes the graph, raises."""
    def export(module, ptpath, inputs, **options):
        os.write(1, b"pass_level2\nsomething went wrong in pass_level5\n")
        if write:
            base = ptpath[:-len(".pt")]
            real(module, ptpath, inputs, **options)  # the true graph, so that the check below has one
            assert os.path.exists(base + ".pnnx.param")
        raise raises

    real = pnnx.export
    monkeypatch.setattr(pnnx, "export", export)


def test_pnnx_raising_after_writing_the_graph_is_a_warning(model_file, tmp_path, monkeypatch):
    fake_pnnx(monkeypatch, write=True, raises=SyntaxError("invalid decimal literal (x_pnnx.py, line 26)"))
    module = exporting.build_module(f"{model_file}:two_convs")
    with pytest.warns(Warning, match=r"pnnx raised SyntaxError: invalid decimal literal .* the graph is kept"):
        done = exporting.export(module, [(1, 3, 8, 8)], tmp_path, "two")
    assert exporting.check(done.param, done.inputs, done.outputs).ok


def test_pnnx_failing_raises_with_its_last_line_and_keeps_its_log(model_file, tmp_path, monkeypatch):
    fake_pnnx(monkeypatch, write=False, raises=RuntimeError("some\ntrace"))
    module = exporting.build_module(f"{model_file}:two_convs")
    with pytest.raises(ExportError, match=r"^pnnx could not export the model: something went wrong in pass_level5 "
                                          r"\(its log: .*two\.pnnx\.log\)$"):
        exporting.export(module, [(1, 3, 8, 8)], tmp_path, "two")
    assert "pass_level2" in (tmp_path / "two.pnnx.log").read_text()


def test_the_image_preparation_is_torchvisions(tmp_path):
    """kuiper/app/images.py against torchvision's own ImageNet evaluation transform, on an image to shrink."""
    from PIL import Image

    from kuiper.app.images import load_image

    transforms = exporting.import_torchvision().transforms
    pixels = np.random.default_rng(3).integers(0, 256, (333, 517, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "x.png")
    pipeline = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
                                   transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    want = pipeline(Image.open(tmp_path / "x.png").convert("RGB")).numpy()[None]
    assert np.allclose(load_image(tmp_path / "x.png"), want, atol=1e-5)


def test_a_torchvision_model_end_to_end(tmp_path, capsys):
    """The slow one (pnnx on a real network, 10-30 s): exported, matched, then run on an image with names."""
    out = tmp_path / "mv3"
    status, text, err = run(["export", "torchvision:mobilenet_v3_small", "--out", str(out)], capsys)
    assert status == 0, err
    assert "output 0: kuiper (numpy) matches PyTorch" in text
    param = out / "mobilenet_v3_small.pnnx.param"
    assert json.loads((out / "mobilenet_v3_small.export.json").read_text())["random_weights"] is True
    from PIL import Image

    Image.fromarray(np.random.default_rng(0).integers(0, 256, (240, 320, 3), dtype=np.uint8)).save(tmp_path / "a.jpg")
    status, text, _ = run(["run", str(param), "--input", str(tmp_path / "a.jpg"), "--json"], capsys)
    topk = json.loads(text)["outputs"][0]["topk"]
    assert status == 0 and topk["labels"][0] == [labels.imagenet_classes()[i] for i in topk["indices"][0]]
    status, text, _ = run(["run", str(param), "--input", str(tmp_path / "a.jpg")], capsys)
    assert RANDOM_WEIGHTS_NOTE in text.replace("\n", "")
