"""cl/gemm.cl through kuiper/opencl/gemm.py: both kernels on every device against numpy in float64, on sizes
around the kernels' blocks and tiles (1, 3, 17, 63, 64, 65, 129), with bias, padded leading dimensions,
offsets and stacks of groups x batch items; every block and tile size (each a variant) on one product;
split-K; and the fused epilogue (a residual sum, an activation) in every kernel."""

from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pytest

from kuiper.opencl import Enqueuer, devices, gemm as gemm_module
from kuiper.opencl.gemm import (COLUMN_BIAS, NO_BIAS, ROW_BIAS, Gemm, KernelEpilogue, Matrix, gpu_name,
                                tile_count)
from kuiper.opencl.gemv import GEMV, GEMV_MAX_ROWS
from kuiper.layers.fused import EpilogueStep
from kuiper.runtime.backends import make_layer

SIZES = (1, 3, 17, 63, 64, 65, 129)
VARIANTS = ("cpu", "gpu")
RNG = np.random.default_rng(5)


def enqueuer(rt):
    q = Enqueuer(rt)
    q.begin(SimpleNamespace(name="gemm"), ())
    return q


def gemm_on_device(rt, family, a, b, bias=None, bias_mode=NO_BIAS, pad=0, name=None):
    """C = A @ B (+ bias) for one product, with every leading dimension `pad` wider than its matrix, by the
    variant called `name` (else the rule's) of that kernel family ("cpu", "gpu", or None for both)."""
    (m, k), n = a.shape, b.shape[1]
    a_pad, b_pad = np.pad(a, ((0, 0), (0, pad))), np.pad(b, ((0, 0), (0, pad)))
    c = rt.allocate(4 * m * (n + pad))
    q = enqueuer(rt)
    gemm = Gemm(rt, family)
    gemm(q, m, n, k, Matrix(c, n + pad), Matrix(rt.upload(a_pad), k + pad), Matrix(rt.upload(b_pad), n + pad),
         bias=None if bias is None else rt.upload(bias), bias_mode=bias_mode,
         variant=None if name is None else gemm.variants[name])
    q.finish()
    out = np.empty((m, n + pad), np.float32)
    cl.enqueue_copy(rt.queue, out, c)
    return out[:, :n]


def assert_close(got, expected):
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(expected).max()))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("m", SIZES)
def test_awkward_sizes(cl_runtime, variant, m):
    for i, n in enumerate(SIZES):
        k = SIZES[(i + SIZES.index(m)) % len(SIZES)]  # every k meets every m and every n once
        a, b = RNG.standard_normal((m, k), dtype=np.float32), RNG.standard_normal((k, n), dtype=np.float32)
        assert_close(gemm_on_device(cl_runtime, variant, a, b), a.astype(np.float64) @ b)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("m, n, k", [(65, 33, 17), (6, 1, 129), (1, 47, 3), (200, 300, 70)])
def test_bias_per_row_and_column_with_padded_rows(cl_runtime, variant, m, n, k):
    a, b = RNG.standard_normal((m, k), dtype=np.float32), RNG.standard_normal((k, n), dtype=np.float32)
    exact = a.astype(np.float64) @ b
    rows, columns = RNG.standard_normal(m, dtype=np.float32), RNG.standard_normal(n, dtype=np.float32)
    assert_close(gemm_on_device(cl_runtime, variant, a, b, rows, ROW_BIAS, pad=5), exact + rows[:, None])
    assert_close(gemm_on_device(cl_runtime, variant, a, b, columns, COLUMN_BIAS, pad=3), exact + columns)


@pytest.mark.parametrize("rows", gemm_module.SHORT_ROWS)
@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 13, 16, 30])
def test_short_row_blocks_against_numpy(cl_runtime, rows, m):
    """The shorter blocks of a plain product of few rows (a decode step's Linear): rows that are not a multiple
    of the block, columns past the last whole block, a bias per column; a K long enough for the blocks of up to
    STREAM_ROWS rows to read B as two streams, odd so that one k is left after the two halves."""
    gemm = Gemm(cl_runtime, "cpu")
    for n, k in [(35, 40), (70, 40), (35, gemm_module.STREAMS_MIN_K + 3)]:
        width = next(block[0] for block in gemm.cpu_blocks if block[0] <= n)
        a, b = RNG.standard_normal((m, k), dtype=np.float32), RNG.standard_normal((k, n), dtype=np.float32)
        bias = RNG.standard_normal(n, dtype=np.float32)
        got = gemm_on_device(cl_runtime, None, a, b, bias, COLUMN_BIAS, pad=1, name=f"cpu {rows}x{width}")
        assert_close(got, a.astype(np.float64) @ b + bias)


@pytest.mark.parametrize("variant, k", [("cpu", 23), ("gpu", 23), ("gpu", 600)])
def test_stack_of_groups_and_items(cl_runtime, variant, k, monkeypatch):
    """The convolution layout: C[item, g] = A[g] @ B[item, g] + bias[g], with A shared by the items and
    everything read and written past a leading offset. With k = 600 the GPU kernel splits K in two."""
    monkeypatch.setattr(gemm_module, "SPLIT_GROUPS_PER_UNIT", 10 ** 6)  # split as far as SPLIT_SPAN lets it
    items, groups, m, n, offset = 3, 2, 19, 37, 7
    a = RNG.standard_normal((groups, m, k), dtype=np.float32)
    b = RNG.standard_normal((items, groups, k, n), dtype=np.float32)
    bias = RNG.standard_normal((groups, m), dtype=np.float32)
    rt = cl_runtime
    c = rt.allocate(4 * (offset + items * groups * m * n))
    q = enqueuer(rt)
    Gemm(rt, variant)(
        q, m, n, k,
        c=Matrix(c, n, group=m * n, item=groups * m * n, offset=offset),
        a=Matrix(rt.upload(np.concatenate([np.zeros(offset, np.float32), a.ravel()])), k, group=m * k,
                 offset=offset),
        b=Matrix(rt.upload(np.concatenate([np.zeros(offset, np.float32), b.ravel()])), n, group=k * n,
                 item=groups * k * n, offset=offset),
        groups=groups, items=items, bias=rt.upload(bias), bias_mode=ROW_BIAS)
    q.finish()
    out = np.empty(offset + items * groups * m * n, np.float32)
    cl.enqueue_copy(rt.queue, out, c)
    expected = np.matmul(a.astype(np.float64), b) + bias[:, :, None]
    assert_close(out[offset:].reshape(expected.shape), expected)


def test_every_block_and_tile_size_that_fits(cl_runtime):
    m, n, k = 37, 35, 19
    a, b = RNG.standard_normal((m, k), dtype=np.float32), RNG.standard_normal((k, n), dtype=np.float32)
    bias = RNG.standard_normal(m, dtype=np.float32)
    gemm = Gemm(cl_runtime)
    names = gemm.candidates(n)
    assert [name for name in names if name.startswith("cpu")] == [f"cpu {rows}x{width}" for rows in (6, 8, 4, 2)
                                                                   for width in (32, 16, 4, 1)]
    # gemm_cpu needs N >= its block
    assert gemm.candidates(5) == [f"cpu {rows}x{width}" for rows in (6, 8, 4, 2) for width in (4, 1)] + names[16:]
    for name in names:
        got = gemm_on_device(cl_runtime, None, a, b, bias, ROW_BIAS, pad=2, name=name)
        assert_close(got, a.astype(np.float64) @ b + bias[:, None])


def test_the_rule_follows_the_device_and_the_product(cl_runtime):
    gemm = Gemm(cl_runtime)
    if cl_runtime.is_cpu:
        widest = "cpu 6x32" if gemm.cpu_blocks[0][0] == 32 else "cpu 6x16"  # by the compiler's target (below)
        assert [gemm.rule(64, n, 1) for n in (1, 3, 17, 32, 1000)] == ["cpu 6x1", "cpu 6x1", "cpu 6x16", widest, widest]
        # fewer rows: the block height whose blocks cost least, rows computed in vain counted; 8 rows on Intel's
        # runtime with 32-column blocks, for products of few rows alone
        tall = gemm.cpu_blocks[0][0] == 32 and cl_runtime.device.platform.name == devices.INTEL_CPU_PLATFORM
        heights = (2, 4, 8, 8, 8, 8, 6, 6) if tall else (2, 4, 4, 4, 6, 4, 6, 6)
        assert [gemm.rule(m, 1000, 1) for m in (1, 3, 8, 16, 24, 32, 64, 192)] == [
            f"cpu {rows}x{gemm.cpu_blocks[0][0]}" for rows in heights]
    on_gpus = Gemm(cl_runtime, "gpu")
    assert on_gpus.rule(GEMV_MAX_ROWS, 1, 1) == GEMV  # few rows: gemv streams B
    assert on_gpus.rule(GEMV_MAX_ROWS + 1, 1, 1) == f"gpu {gemm.tiles[-1][0]}x{gemm.tiles[-1][1]}"  # the smallest


def test_tensor_cores_take_products_that_fill_a_tile_or_have_a_short_k(cl_runtime, monkeypatch):
    """gemm_mma (as if this device had tensor cores: the rule's logic, no kernel runs): the largest tile the
    product fills, with a tile for every other compute unit; few rows, where the layer's K is short, the smallest
    (MMA_SHORT_K); else gemm_gpu, and gemv for very few rows."""
    monkeypatch.setattr(Gemm, "_has_mma", lambda self: True)
    gemm, units = Gemm(cl_runtime, "gpu"), cl_runtime.device.max_compute_units
    small, large = gemm_module.mma_name(gemm_module.MMA_TILES[-1]), gemm_module.mma_name(gemm_module.MMA_TILES[0])
    assert gemm.rule(128, 128 * units, 1) == large
    assert gemm.rule(64, 64 * units, 1) == small
    assert gemm.rule(32, 1000, 1, k=512) == small  # ResNet-18's classifier at batch 32
    assert gemm.rule(16, 896, 1, k=gemm_module.MMA_SHORT_K + 1).startswith("gpu ")
    assert gemm.rule(32, 1000, 1).startswith("gpu ")  # K unknown (a MatMul's)
    assert gemm.rule(GEMV_MAX_ROWS, 1000, 1, k=512) == GEMV


def test_cpu_work_groups_follow_the_products_rows(cl_runtime):
    """Tall groups share B's columns down many rows of A; a product of few row blocks gets groups as wide as it
    is short, not groups whose work-items mostly return at once; too few groups for the cores: smaller ones."""
    gemm = Gemm(cl_runtime, "cpu")
    assert [gemm._cpu_group(10 ** 5, rows, 1) for rows in (40, 12, 11, 2, 1)] == [(1, 32), (1, 32), (16, 2), (16, 2),
                                                                                (32, 1)]
    assert gemm._cpu_group(1, 3, 1) == (1, 1)  # 3 work-items in all


@pytest.mark.parametrize("features, host, widest", [
    ({"avx2", "avx512f"}, {"avx2"}, "cpu 6x32"), ({"avx2"}, {"avx2", "avx512f"}, "cpu 6x16"),
    (set(), {"avx2", "avx512f"}, "cpu 6x32"), (set(), {"avx2"}, "cpu 6x16"),
])
def test_the_32_column_block_needs_a_compiler_that_targets_avx512(cl_runtime, monkeypatch, features, host, widest):
    """6 x 32's 24 accumulators fit AVX-512's 32 vector registers only: with AVX2's 16 the rule's widest block
    is 6 x 16; measurement may still take any block. What the compiler says it targets decides; a CPU compiler
    that says nothing (Intel's runtime) compiles for the CPU it runs on, whose flags then decide."""
    monkeypatch.setattr(type(cl_runtime), "target_features", property(lambda rt: frozenset(features)))
    monkeypatch.setattr(cl_runtime, "is_cpu", True)
    monkeypatch.setattr(gemm_module, "cpu_flags", lambda: frozenset(host))
    gemm = Gemm(cl_runtime, "cpu")
    assert gemm.rule(64, 1000, 1) == widest and gemm.rule(64, 20, 1) == "cpu 6x16"
    assert "cpu 6x32" in gemm.candidates(1000)


@pytest.mark.parametrize("arch, widest", [(None, "cpu 6x32"), ("core-avx2", "cpu 6x16"), ("corei7-avx", "cpu 6x16"),
                                          ("skx", "cpu 6x32")])
def test_intels_runtime_told_another_target_gets_its_blocks(cl_runtime, monkeypatch, arch, widest):
    """Intel's runtime names no target, so on an AVX-512 CPU the rule goes by the CPU's flags, unless
    CL_CONFIG_CPU_TARGET_ARCH tells the runtime to compile for another one."""
    intel = SimpleNamespace(platform=SimpleNamespace(name="Intel(R) OpenCL"))
    if arch is None:
        monkeypatch.delenv("CL_CONFIG_CPU_TARGET_ARCH", raising=False)
    else:
        monkeypatch.setenv("CL_CONFIG_CPU_TARGET_ARCH", arch)
    monkeypatch.setattr(type(cl_runtime), "target_features", property(lambda rt: frozenset()))
    monkeypatch.setattr(cl_runtime, "is_cpu", True)
    monkeypatch.setattr(gemm_module, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))
    monkeypatch.setattr(gemm_module, "configured_target", lambda device: devices.configured_target(intel))
    assert Gemm(cl_runtime, "cpu").rule(64, 1000, 1) == widest


@pytest.mark.parametrize("groups_per_unit", [1, 10 ** 6])
@pytest.mark.parametrize("m, n, k", [(40, 30, 1100), (129, 5, 2048), (3, 65, 513)])
def test_split_k_adds_the_slices_up(cl_runtime, monkeypatch, groups_per_unit, m, n, k):
    """Products with few tiles and a long K, split into as many slices as the device asks (or as SPLIT_SPAN
    allows): the slices' sums, the K tail in the last slice, the bias after the sum; by gemm_gpu's tiles and by
    gemv."""
    monkeypatch.setattr(gemm_module, "SPLIT_GROUPS_PER_UNIT", groups_per_unit)
    gemm = Gemm(cl_runtime, "gpu")
    tile = gemm._gpu_tiles(m, n, 1)
    if groups_per_unit > 1:
        assert gemm._slices(tile_count(tile, m, n, 1), k, gemm_module.SPLIT_SPAN) == k // gemm_module.SPLIT_SPAN > 1
    a, b = RNG.standard_normal((m, k), dtype=np.float32), RNG.standard_normal((k, n), dtype=np.float32)
    bias = RNG.standard_normal(m, dtype=np.float32)
    expected = a.astype(np.float64) @ b + bias[:, None]
    for name in (gpu_name(tile), GEMV):
        assert_close(gemm_on_device(cl_runtime, "gpu", a, b, bias, ROW_BIAS, pad=3, name=name), expected)


def epilogue_steps(activation):
    """A fused operator's steps: add its input 2, then `activation` (a layer, or None)."""
    steps = [EpilogueStep(None, extra=2)]
    return steps + [EpilogueStep(activation)] if activation is not None else steps


# every gemm_cpu block with every kind of formula (its full blocks run the epilogue on whole vectors, cl/epilogue.h;
# the block that slides back from n = 34 and the 1-column block value by value); gemm_cpu never splits. gemm_gpu,
# split or not, runs the scalar epilogue, whose formulas test_activations_opencl.py checks element by element.
EPILOGUE_CASES = [(f"cpu 6x{width}", False, act) for width in (32, 16, 4, 1)
                  for act in (None, "nn.LeakyReLU", "nn.SiLU", "nn.GELU", "nn.Tanh")]
EPILOGUE_CASES += [(f"cpu {rows}x{width}", False, act) for rows, width in ((4, 32), (2, 16)) for act in (None, "nn.SiLU")]
EPILOGUE_CASES += [("gpu", split, act) for split in (False, True) for act in (None, "nn.LeakyReLU", "nn.GELU")]


@pytest.mark.parametrize("name, split, activation", EPILOGUE_CASES)
def test_the_epilogue_adds_the_residual_then_activates(cl_runtime, monkeypatch, name, split, activation):
    monkeypatch.setattr(gemm_module, "SPLIT_GROUPS_PER_UNIT", 10 ** 6 if split else 1)
    params = {"negative_slope": 0.25} if activation == "nn.LeakyReLU" else {}
    layer = None if activation is None else make_layer(activation, backend="opencl", params=params, input_shapes=[(1,)])
    epilogue = KernelEpilogue.of(epilogue_steps(layer))
    items, m, n, k = 2, 21, 34, 600
    a = RNG.standard_normal((m, k), dtype=np.float32)
    b = RNG.standard_normal((items, k, n), dtype=np.float32)
    residual = RNG.standard_normal((items, m, n), dtype=np.float32)
    bias = RNG.standard_normal(m, dtype=np.float32)
    rt = cl_runtime
    c = rt.allocate(4 * items * m * n)
    q = enqueuer(rt)
    gemm = Gemm(rt, name.split()[0], epilogue=epilogue)
    fused_inputs = [None, None, SimpleNamespace(buffer=rt.upload(residual))]
    gemm(q, m, n, k, c=Matrix(c, n, item=m * n), a=Matrix(rt.upload(a), k), b=Matrix(rt.upload(b), n, item=k * n),
         items=items, bias=rt.upload(bias), bias_mode=ROW_BIAS, epilogue=epilogue.args(fused_inputs, None),
         variant=gemm.variants.get(name))
    q.finish()
    out = np.empty((items, m, n), np.float32)
    cl.enqueue_copy(rt.queue, out, c)
    summed = (np.matmul(a.astype(np.float64), b) + bias[:, None] + residual).astype(np.float32)
    # no activation here steepens an error by more than 1.13 (GELU's slope): measured against the sum's size
    expected = summed if layer is None else layer.run_numpy(summed)[0]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5 * np.abs(summed).max())


def test_only_a_sum_then_an_activation_fits_in_the_kernel():
    relu, sigmoid, gelu = (make_layer(t, backend="opencl", input_shapes=[(1,)]) for t in ("nn.ReLU", "nn.Sigmoid", "nn.GELU"))
    assert KernelEpilogue.of([EpilogueStep(relu)]).options == ["-DACT=act_relu"]
    assert KernelEpilogue.of(epilogue_steps(sigmoid)).options == ["-DADD", "-DACT=act_sigmoid"]
    assert KernelEpilogue.of([EpilogueStep(gelu)]).options == ["-DACT=act_gelu"]
    assert KernelEpilogue.of([EpilogueStep(None, extra=2)]).options == ["-DADD"]
    assert KernelEpilogue.of([EpilogueStep(relu), EpilogueStep(None, extra=2)]) is None  # activation, then sum
    assert KernelEpilogue.of([EpilogueStep(None, extra=2), EpilogueStep(None, extra=3)]) is None  # two sums
    assert KernelEpilogue.of([EpilogueStep(relu), EpilogueStep(sigmoid)]) is None  # two activations
