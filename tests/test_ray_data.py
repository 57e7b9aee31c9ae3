"""kuiper inside Ray Data (kuiper/app/ray_data.py), on a local cluster of two CPUs: the trained Fashion-MNIST
CNN over its labelled samples, by one actor and by two, gives per image what `kuiper run --input FOLDER
--json` gives in one process (same classes, scores to 1e-6 of their size), and the classes torch gave the samples; an
unreadable file is left out as the single-process run leaves it out."""

import json
import shutil
import sys
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

import numpy as np
import pytest

import kuiper
from kuiper.app import ray_data
from kuiper.app.cli import main
from kuiper.core.errors import ConfigError, KuiperWarning

from conftest import MODELS

pytest.importorskip("PIL.Image")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")  # ray's settings warn of themselves
FASHION = MODELS / "fashion_cnn"
PARAM = FASHION / "fashion_cnn.pnnx.param"
TRAINING = json.loads((FASHION / "training.json").read_text())
PREP = TRAINING["preparation"]


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install \"kuiper[ray]\")")
    pytest.importorskip("ray.data", reason="ray is installed without its data library (ray[data])")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """The committed samples, plus one file in a class folder that is not an image."""
    folder = tmp_path_factory.mktemp("ray") / "samples"
    shutil.copytree(FASHION / "samples", folder)
    (folder / "Coat" / "broken.png").write_bytes(b"not a picture")
    return folder


@pytest.fixture(scope="module")
def single_process(samples):
    """`kuiper run MODEL --input FOLDER --json` in this process, the preparation spelled out: the rows by path,
    and what it skipped."""
    argv = ["run", str(PARAM), "--input", str(samples), "--labels", str(FASHION / "labels.txt"), "--json",
            "--resize", str(PREP["resize"]), "--crop", str(PREP["crop"]), "--mean", str(PREP["mean"]),
            "--std", str(PREP["std"])]
    out = StringIO()
    with redirect_stdout(out):
        assert main(argv) == 0
    result = json.loads(out.getvalue())
    return {Path(row["path"]).resolve(): row for row in result["rows"]}, [Path(p).resolve() for p in result["skipped"]]


@pytest.mark.parametrize("actors", [1, 2])
def test_actors_give_the_single_process_rows(ray_cluster, samples, single_process, actors):
    rows, skipped = single_process
    # the actors prepare the images and name the classes as the model's preprocess.json says
    run = ray_data.classify_folder(PARAM, samples, actors=actors)
    assert run.skipped == skipped == [(samples / "Coat" / "broken.png").resolve()]
    assert [row.path for row in run.rows] == list(rows)  # the folder's order, as the single process goes
    for row in run.rows:
        want = rows[row.path]
        assert row.indices == want["indices"] and row.labels == want["labels"]
        # float32 sums taken in another order (other threads, batches cut elsewhere) differ by an ulp or two
        np.testing.assert_allclose(row.values, want["values"], rtol=1e-6, atol=1e-6)
    predicted = {row.path.relative_to(samples.resolve()).as_posix(): row.indices[0] for row in run.rows}
    assert predicted == {path.removeprefix("samples/"): c for path, c in TRAINING["sample_predictions"].items()}


def test_without_ray_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets where it is not installed
    with pytest.raises(ConfigError, match=r'^running on Ray needs ray\[data\]: pip install "kuiper\[ray\]"$'):
        ray_data.classify_folder(PARAM, FASHION / "samples")


def test_the_actors_class_takes_bytes_read_elsewhere(samples, single_process):
    """What an actor does with a batch that brings the files' contents (read_binary_files), without Ray."""
    pytest.importorskip("pyarrow", reason="the ray extra is not installed (pip install \"kuiper[ray]\")")
    rows, skipped = single_process
    paths = [str(p) for p in [*rows, *skipped]]
    classifier = ray_data.Classifier(PARAM, batch=5)
    try:
        with pytest.warns(KuiperWarning, match="broken.png"):
            table = classifier({"path": np.array(paths, dtype=object), "bytes": [Path(p).read_bytes() for p in paths]})
    finally:  # an actor keeps its thread limits for life; this process gets its own back
        classifier._blas.restore_original_limits()
        kuiper.set_num_threads(None)
    assert table.column("path").to_pylist() == paths[:len(rows)]
    for got in table.to_pylist():
        want = rows[Path(got["path"])]
        assert got["indices"] == want["indices"] and got["label"] == want["labels"][0]
        np.testing.assert_allclose(got["values"], want["values"], rtol=1e-6, atol=1e-6)
