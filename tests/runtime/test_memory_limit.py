"""The memory limit: a plan's shapes are checked against the file and its bytes against the limit before
anything is allocated (runtime/memory.py, RuntimeGraph._plan)."""

import re
import shutil

import numpy as np
import pytest

import kuiper
from kuiper import ConfigError, MemoryLimitError, ShapeError
from kuiper.runtime import memory
from kuiper.runtime.executor import NumpyExecutor

from conftest import model_paths, write_model


@pytest.fixture(autouse=True)
def two_threads():
    """The layers' work buffers are per thread: the byte counts below are for 2 threads, whatever the cores."""
    kuiper.set_num_threads(2)
    yield
    kuiper.set_num_threads(None)


def copy_model(tmp_path, name, edit, keep_shapes=True):
    """The committed model `name` copied into tmp_path with `edit(text)` applied to its .param; without
    keep_shapes the `#` shapes go, except the inputs' (so that build still plans at the recorded input)."""
    param, weights = model_paths(name)
    text = edit(param.read_text())
    if not keep_shapes:
        text = "\n".join(line if line.startswith("pnnx.Input") else re.sub(r" #\S+", "", line)
                         for line in text.split("\n"))
    target = tmp_path / param.name
    target.write_text(text)
    shutil.copy(weights, tmp_path / weights.name)
    return target


@pytest.fixture
def no_allocation(monkeypatch):
    """Fail the test if the numpy backend is asked for buffers."""
    def prepare(self, plan, order):
        raise AssertionError("a plan was allocated")

    monkeypatch.setattr(NumpyExecutor, "prepare", prepare)


@pytest.mark.parametrize("text, size", [("2G", 2 << 30), ("512M", 512 << 20), ("1.5g", 3 << 29), ("4096", 4096),
                                        (" 64KiB ", 64 << 10), ("1T", 1 << 40)])
def test_sizes(text, size):
    assert memory.parse_size(text, "memory_limit") == size


@pytest.mark.parametrize("bad", ["", "abc", "-1", "0", "2X", "1e9"])
def test_bad_sizes_name_the_option(bad):
    with pytest.raises(ConfigError, match=f"KUIPER_MEMORY_LIMIT={bad!r} is not a size"):
        memory.parse_size(bad, "KUIPER_MEMORY_LIMIT")


def test_limit_from_the_argument_the_environment_or_the_machine(monkeypatch):
    param, _ = model_paths("act_zoo")
    monkeypatch.setenv("KUIPER_MEMORY_LIMIT", "3M")
    assert kuiper.RuntimeGraph(param, backend="numpy").memory_limit == 3 << 20
    assert kuiper.RuntimeGraph(param, memory_limit="1M", backend="numpy").memory_limit == 1 << 20  # the argument wins
    assert kuiper.RuntimeGraph(param, memory_limit=5000, backend="numpy").memory_limit == 5000
    monkeypatch.setenv("KUIPER_MEMORY_LIMIT", "lots")
    with pytest.raises(ConfigError, match="KUIPER_MEMORY_LIMIT='lots'"):
        kuiper.RuntimeGraph(param, backend="numpy")
    monkeypatch.delenv("KUIPER_MEMORY_LIMIT")
    assert kuiper.RuntimeGraph(param, backend="numpy").memory_limit == memory.default_limit()
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ConfigError, match="memory_limit="):
            kuiper.RuntimeGraph(param, memory_limit=bad, backend="numpy")


def test_the_default_is_half_of_what_is_left_under_rlimit_as_and_cgroups(monkeypatch):
    import os
    import resource

    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    monkeypatch.setattr(memory, "_read", lambda path: None)  # no cgroup, no /proc
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert memory.default_limit() == physical // 2
    monkeypatch.setattr(resource, "getrlimit", lambda which: (4 << 30, 4 << 30))
    monkeypatch.setattr(memory, "address_space", lambda: 1 << 30)
    assert memory.default_limit() == min(physical // 2, 3 << 29)  # half of the 3 GiB left of 4
    monkeypatch.setattr(memory, "_read", lambda path: str(1 << 30) if path.endswith("memory.max") else None)
    assert memory.default_limit() == 1 << 29


def test_a_corrupt_padding_is_refused_by_the_recorded_shapes_before_allocation(tmp_path, no_allocation):
    # the case: padding=(1,1) made (20000,20000) asked numpy for 20.9 GiB
    param = copy_model(tmp_path, "conv_zoo", lambda t: t.replace("padding=(1,1)", "padding=(20000,20000)", 1))
    with pytest.raises(ShapeError, match=r"conv_zoo.pnnx.param:5: nn.Conv2d operator 'stride2' infers shape "
                                         r"\(2, 5, 20007, 20008\) for operand 2, the file records \(2, 5, 8, 9\)"):
        kuiper.load(param, backend="reference")


def test_without_recorded_shapes_the_memory_limit_refuses_naming_operator_shape_and_bytes(tmp_path, no_allocation):
    # the other case: a ConvTranspose2d with stride (100000, 100000) asked for terabytes
    param = copy_model(tmp_path, "conv_zoo", lambda t: t.replace("stride=(2,2) @bias=(6)", "stride=(100000,100000) "
                                                                 "@bias=(6)"), keep_shapes=False)
    with pytest.raises(MemoryLimitError) as caught:
        kuiper.load(param, memory_limit="1G", backend="numpy")
    message = str(caught.value)
    assert re.search(r"conv_zoo.pnnx.param:\d+: nn.ConvTranspose2d operator '\w+' makes \w+ of shape "
                     r"\(2,\d+,\d+,\d+\) \([\d.]+ TiB\), and at input shape\(s\) \(2,3,15,17\) the plan needs "
                     r"[\d.]+ TiB, over the memory limit of 1.0 GiB \(memory_limit=, KUIPER_MEMORY_LIMIT\)", message)
    assert isinstance(caught.value, MemoryError)  # code that catches MemoryError catches it too


def test_an_input_too_large_is_refused_at_once_and_smaller_ones_still_run():
    # the ResNet-18 fed a 1x3x4000x4000 image ran 19 s before a MemoryError
    graph = kuiper.load(model_paths("resnet18")[0], memory_limit="1G", backend="numpy")
    with pytest.raises(MemoryLimitError, match=r"resnet18.pnnx.param:4: .* makes \w+ of shape \(1,64,2000,2000\) "
                                               r"\(976.6 MiB\), and at input shape\(s\) \(1,3,4000,4000\)"):
        graph.forward(np.zeros((1, 3, 4000, 4000), np.float32))
    assert list(graph.plans) == [(((1, 3, 224, 224), np.dtype(np.float32)),)]  # nothing new kept
    (out,) = graph.forward(np.zeros((1, 3, 64, 64), np.float32))
    assert out.shape == (1, 1000)


def test_the_plan_counts_the_layers_work_buffers(tmp_path):
    text = ("7767517\n3 2\n"
            "pnnx.Input in0 0 1 x #x=(1,2,5,5)f32\n"
            "nn.Conv2d conv 1 1 x y bias=False dilation=(1,1) groups=1 in_channels=2 kernel_size=(3,3) "
            "out_channels=4 padding=(1,1) padding_mode=zeros stride=(1,1) @weight=(4,2,3,3)f32\n"
            "pnnx.Output out 1 0 y\n")
    param = write_model(tmp_path, "conv", text, {"conv.weight": np.ones((4, 2, 3, 3))})
    graph = kuiper.load(param, backend="reference")
    plan = next(iter(graph.plans.values()))
    # the output (4x5x5 floats, a fresh array) and the reference forward's temporaries: the zero-padded input
    # (2x7x7) and the column matrix (2*3*3 x 5*5)
    assert plan.pooled_bytes == 0
    assert graph.planned_bytes(plan) == 4 * (4 * 25) + 4 * 2 * (7 * 7 + 9 * 25)


def test_layout_for_allocates_nothing_and_ignores_the_limit(no_allocation):
    graph = kuiper.RuntimeGraph(model_paths("resnet18")[0], memory_limit="1M", backend="numpy").build(allocate=False)
    assert not graph.plans
    layout = graph.layout_for((64, 3, 1024, 1024))
    first = graph.order[1].output_operand.name  # the stem convolution's
    assert layout.shapes[first] == (64, 64, 512, 512) and not layout.slots and not layout.tensors
    assert graph.planned_bytes(layout) > 6 << 30 > graph.memory_limit
