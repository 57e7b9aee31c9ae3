"""The language-model layers' fast CPU and OpenCL classes against the reference layers: one forward on odd shapes
through assert_every_path_matches_reference, then the cached attention over whole sequences of forwards through
one layer instance per path (prefill, decode steps, a rewind, a new sequence), its device cache against the
reference's, and a small decoder graph on OpenCL with nothing left on the host."""

import warnings

import numpy as np
import pytest

from conftest import (FP16_RTOL, OPENCL_DEVICES, assert_every_path_matches_reference, assert_outputs_close,
                      write_model)
from kuiper.core.errors import InputError
from kuiper.cpu import threads as cpu_threads
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(41)


def data(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def device_runtimes() -> list:
    """(label, runtime) for every usable device, and the first at fp16 storage."""
    from kuiper.opencl import get_runtime

    found = [(spec, get_runtime(spec)) for spec in OPENCL_DEVICES]
    return found + [(f"{OPENCL_DEVICES[0]} fp16", found[0][1].at_precision("fp16"))] if found else []


# ---- one forward, every path -----------------------------------------------------------------------------
@pytest.mark.parametrize("shape, normalized", [((1, 1, 576), [576]), ((1, 3, 96), [96]), ((2, 7, 33), [33]),
                                               ((3, 4, 5), [4, 5])])
def test_rms_norm_every_path(shape, normalized):
    assert_every_path_matches_reference("nn.RMSNorm", data(*shape, scale=3), params=dict(
        normalized_shape=normalized, eps=1e-6, elementwise_affine=True), attrs=dict(weight=data(*normalized)))
    assert_every_path_matches_reference("nn.RMSNorm", data(*shape), params=dict(normalized_shape=normalized, eps=None))
    assert_every_path_matches_reference("F.rms_norm", data(*shape), params=dict(normalized_shape=normalized, eps=1e-5,
                                                                                  weight=None))
    assert_every_path_matches_reference("F.rms_norm", data(*shape), data(*normalized),
                                        params=dict(normalized_shape=normalized, eps=1e-5))


@pytest.mark.parametrize("ids_shape", [(1,), (1, 3), (2, 7)])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_embedding_every_path(ids_shape, dtype):
    ids = RNG.integers(0, 37, ids_shape).astype(dtype)
    assert_every_path_matches_reference("nn.Embedding", ids, params=dict(num_embeddings=37, embedding_dim=19),
                                        attrs=dict(weight=data(37, 19)))
    assert_every_path_matches_reference("F.embedding", ids, data(37, 5), params=dict(sparse=False))


@pytest.mark.skipif(not OPENCL_DEVICES, reason="no usable OpenCL device")
@pytest.mark.parametrize("bad", [37, -1])
def test_an_id_out_of_range_is_the_callers_error_on_opencl_too(bad):
    layer = make_layer("nn.Embedding", backend="opencl", params=dict(num_embeddings=37, embedding_dim=4),
                       attrs=dict(weight=data(37, 4)), input_shapes=[(1, 3)])
    for _, rt in device_runtimes():
        with pytest.raises(InputError, match=f"nn.Embedding operator 'op': id {bad} is out of range.*37 rows"):
            layer.run_opencl(rt, np.array([[0, bad, 3]]))


LLAMA3 = dict(rope_theta=500000.0, rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=64)


@pytest.mark.parametrize("positions", [[0], [5, 6, 7], [0, 1, 2, 3, 4, 5, 6], [4093], [131070, 131071], [16000000]])
@pytest.mark.parametrize("params", [dict(head_dim=64, rope_theta=10000.0), dict(head_dim=32, **LLAMA3),
                                    dict(head_dim=6, rope_theta=100.0, rope_type="linear", factor=4.0)])
def test_rotary_embedding_every_path(positions, params):
    """Positions far from 0 too: the device works the angles out in float32, exactly enough (cl/rotary.cl)."""
    tokens = len(positions)
    for heads in (9, 3, 1):
        assert_every_path_matches_reference("kuiper.RotaryEmbedding", data(1, heads, tokens, params["head_dim"]),
                                            np.array(positions), params=params)
    assert_every_path_matches_reference("kuiper.RotaryEmbedding", data(2, 2, tokens, params["head_dim"]),
                                        np.array(positions, np.int32), params=params)


@pytest.mark.parametrize("params", [dict(end=7), dict(start=2, end=11, step=3, dtype="torch.long"),
                                    dict(start=0.5, end=2.0, step=0.5), dict(start=1, end=4, dtype="torch.float")])
def test_arange_every_path(params):
    assert_every_path_matches_reference("torch.arange", params=params)


def attention_params(heads, kv_heads, dim=16, max_positions=24):
    return dict(num_heads=heads, num_kv_heads=kv_heads, head_dim=dim, max_positions=max_positions)


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (3, 1), (9, 3), (2, 2)])
@pytest.mark.parametrize("tokens", [1, 3, 7])
def test_cached_attention_every_path(heads, kv_heads, tokens):
    dim = 16
    assert_every_path_matches_reference(
        "kuiper.CachedAttention", data(1, heads, tokens, dim), data(1, kv_heads, tokens, dim),
        data(1, kv_heads, tokens, dim), np.arange(tokens), params=attention_params(heads, kv_heads, dim))


# ---- whole sequences through one layer instance ------------------------------------------------------------
#: runs of positions, one forward each: prefill, decode steps, a rewind into the middle, a new sequence
SEQUENCES = {
    "prefill then decode": [range(0, 7), [7], [8], [9], [10]],
    "token by token": [[0], [1], [2], [3]],
    "rewind and restart": [range(0, 3), range(3, 6), [6], range(2, 5), [5], [6], range(0, 1), [1]],
}


def steps_for(heads, kv_heads, dim, runs, batch=1) -> list:
    return [[data(batch, heads, len(r), dim), data(batch, kv_heads, len(r), dim), data(batch, kv_heads, len(r), dim),
             np.array(r)] for r in runs]


def attention_layer(backend, heads, kv_heads, dim, max_positions=24):
    return make_layer("kuiper.CachedAttention", backend=backend, params=attention_params(heads, kv_heads, dim,
                                                                                         max_positions),
                      input_shapes=[(1, heads, 1, dim), (1, kv_heads, 1, dim), (1, kv_heads, 1, dim), (1,)])


def assert_every_path_follows_the_reference(heads, kv_heads, dim, steps, max_positions=24) -> list:
    """Each forward of `steps` through one layer per path (the fast CPU layer at 1, 2 and 3 threads; the OpenCL
    layer on every device, and at fp16 on the first) matches the reference layer's forward of the same step.
    Returns the OpenCL layers with their runtime's label, and the reference layer, for a look at the caches."""
    reference = attention_layer("reference", heads, kv_heads, dim, max_positions)
    expected = [reference.run_numpy(*step) for step in steps]
    for count in (1, 2, 3):
        fast = attention_layer("numpy", heads, kv_heads, dim, max_positions)
        cpu_threads.set_num_threads(count)
        try:
            with cpu_threads.active():
                for i, step in enumerate(steps):
                    assert_outputs_close(fast.run_numpy(*step), expected[i], 1e-4, f"fast, {count} threads, step {i}")
        finally:
            cpu_threads.set_num_threads(None)
        np.testing.assert_array_equal(fast.cache_k, reference.cache_k)
    layers = []
    for label, rt in device_runtimes():
        layer = attention_layer("opencl", heads, kv_heads, dim, max_positions)
        rtol = FP16_RTOL if rt.precision == "fp16" else 1e-4
        for i, step in enumerate(steps):
            assert_outputs_close(layer.run_opencl(rt, *step), expected[i], rtol, f"OpenCL on {label}, step {i}")
        assert layer.filled == reference.filled
        layers.append((label, rt, layer))
    return layers, reference


@pytest.mark.parametrize("sequence", SEQUENCES, ids=list(SEQUENCES))
@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (3, 1), (4, 4)])
def test_cached_attention_over_a_sequence_on_every_path(sequence, heads, kv_heads):
    steps = steps_for(heads, kv_heads, 16, SEQUENCES[sequence])
    assert_every_path_follows_the_reference(heads, kv_heads, 16, steps)


def test_cached_attention_with_two_sequences_a_batch():
    steps = steps_for(4, 2, 8, [range(0, 7), [7], [8]], batch=2)
    assert_every_path_follows_the_reference(4, 2, 8, steps, max_positions=9)


@pytest.mark.skipif(not OPENCL_DEVICES, reason="no usable OpenCL device")
def test_the_device_cache_holds_what_the_reference_cache_holds():
    """After a prefill and decode steps the keys and values on the device are the reference's, bit for bit at
    fp32 (a copy) and within half's rounding at fp16."""
    steps = steps_for(6, 2, 64, [range(0, 7)] + [[p] for p in range(7, 19)])
    layers, reference = assert_every_path_follows_the_reference(6, 2, 64, steps, max_positions=64)
    for label, rt, layer in layers:
        for got, expected in zip(layer.device_cache(), (reference.cache_k, reference.cache_v)):
            assert got.shape == (1, 2, 19, 64), label
            if rt.precision == "fp16":
                np.testing.assert_allclose(got, expected[:, :, :19], rtol=2 ** -11, err_msg=label)
            else:
                np.testing.assert_array_equal(got, expected[:, :, :19], err_msg=label)


@pytest.mark.skipif(not OPENCL_DEVICES, reason="no usable OpenCL device")
def test_reset_and_bad_positions_on_opencl():
    """The reference's checks hold on the device: positions read back, `filled` kept on the host."""
    for label, rt in device_runtimes():
        layer = attention_layer("opencl", 2, 1, 4, max_positions=6)
        first = steps_for(2, 1, 4, [range(0, 4)])[0]
        layer.run_opencl(rt, *first)
        with pytest.raises(InputError, match=r"positions must be consecutive.*got \[5\]"):
            layer.run_opencl(rt, *steps_for(2, 1, 4, [[5]])[0])
        with pytest.raises(InputError, match="position 6 is past the cache's max_positions=6"):
            layer.run_opencl(rt, *steps_for(2, 1, 4, [range(4, 7)])[0])
        layer.reset()
        assert layer.filled == 0
        with pytest.raises(InputError, match="start at most at 0"):
            layer.run_opencl(rt, *steps_for(2, 1, 4, [[1]])[0])
        # a new sequence after reset attends to its own keys alone, as the reference's does
        reference = attention_layer("reference", 2, 1, 4, max_positions=6)
        again = steps_for(2, 1, 4, [range(0, 2), [2]])
        for step in again:
            assert_outputs_close(layer.run_opencl(rt, *step), reference.run_numpy(*step),
                                 FP16_RTOL if rt.precision == "fp16" else 1e-4, label)


@pytest.mark.skipif(not OPENCL_DEVICES, reason="no usable OpenCL device")
def test_a_long_context_on_opencl():
    """Hundreds of keys: several chunks of the running softmax, on CPUs and GPUs alike, and a decode step that
    reads them all."""
    steps = steps_for(9, 3, 64, [range(0, 300), [300], [301]])
    assert_every_path_follows_the_reference(9, 3, 64, steps, max_positions=320)


@pytest.mark.skipif(not OPENCL_DEVICES, reason="no usable OpenCL device")
def test_the_gpu_kernels_on_every_device(monkeypatch):
    """On a GPU a row goes to a work-group of up to 256 work-items that share its reductions (RMSNorm) or its
    keys and coordinates (the cached attention); on CPUs to one work-item. With the runtimes told they are not
    CPUs, the GPU's way runs here too: barriers and local memory are the same on every device."""
    from kuiper.opencl import get_runtime

    for spec in OPENCL_DEVICES:
        monkeypatch.setattr(get_runtime(spec), "is_cpu", False)
    for shape in ((1, 1, 576), (2, 7, 33), (3, 300)):
        assert_every_path_matches_reference("nn.RMSNorm", data(*shape, scale=2), threads=(1,), params=dict(
            normalized_shape=[shape[-1]], eps=1e-6), attrs=dict(weight=data(shape[-1])))
    for heads, kv_heads, dim, runs in [(4, 2, 16, [range(0, 7), [7], [8]]), (3, 1, 8, [[0], [1], [2]]),
                                       (9, 3, 64, [range(0, 300), [300], range(150, 152)])]:
        layers, _ = assert_every_path_follows_the_reference(heads, kv_heads, dim, steps_for(heads, kv_heads, dim, runs),
                                                            max_positions=320)
        assert all(layer.cl_largest > 1 for _, _, layer in layers)


@pytest.mark.skipif(not OPENCL_DEVICES, reason="no usable OpenCL device")
def test_the_positions_are_read_back_once_per_forward(monkeypatch):
    """Every attention layer of a decoder reads the same positions: one download per forward serves them all."""
    from kuiper.opencl import DeviceTensor, Enqueuer, get_runtime
    from kuiper.opencl.indices import host_indices

    rt = get_runtime(OPENCL_DEVICES[0])
    positions = DeviceTensor(rt, rt.upload(np.arange(5, 9)), (4,), np.int64)
    downloads = []
    download = DeviceTensor.numpy
    monkeypatch.setattr(DeviceTensor, "numpy", lambda self: downloads.append(self) or download(self))
    forward = Enqueuer(rt)
    for _ in range(3):
        np.testing.assert_array_equal(host_indices(forward, positions), np.arange(5, 9))
    assert len(downloads) == 1
    host_indices(Enqueuer(rt), positions)  # the next forward reads them again: they may have changed
    assert len(downloads) == 2


# ---- a decoder block as a graph ----------------------------------------------------------------------------
DECODER = """7767517
18 17
pnnx.Input               ids        0 1 ids #ids=(1,7)i64
pnnx.Input               positions  0 1 positions #positions=(7)i64
nn.Embedding             embed      1 1 ids h num_embeddings=50 embedding_dim=32 @weight=(50,32)f32 #h=(1,7,32)f32
nn.RMSNorm               norm       1 1 h x normalized_shape=(32) eps=1e-05 elementwise_affine=True @weight=(32)f32 #x=(1,7,32)f32
nn.Linear                q_proj     1 1 x q0 bias=False in_features=32 out_features=32 @weight=(32,32)f32 #q0=(1,7,32)f32
nn.Linear                k_proj     1 1 x k0 bias=False in_features=32 out_features=16 @weight=(16,32)f32 #k0=(1,7,16)f32
nn.Linear                v_proj     1 1 x v0 bias=False in_features=32 out_features=16 @weight=(16,32)f32 #v0=(1,7,16)f32
Tensor.reshape           q_split    1 1 q0 q1 shape=(1,-1,4,8) #q1=(1,7,4,8)f32
Tensor.reshape           k_split    1 1 k0 k1 shape=(1,-1,2,8) #k1=(1,7,2,8)f32
Tensor.reshape           v_split    1 1 v0 v1 shape=(1,-1,2,8) #v1=(1,7,2,8)f32
Tensor.permute           q_heads    1 1 q1 q2 dims=(0,2,1,3) #q2=(1,4,7,8)f32
Tensor.permute           k_heads    1 1 k1 k2 dims=(0,2,1,3) #k2=(1,2,7,8)f32
Tensor.permute           v_heads    1 1 v1 v dims=(0,2,1,3) #v=(1,2,7,8)f32
kuiper.RotaryEmbedding   q_rotary   2 1 q2 positions q head_dim=8 rope_theta=10000.0 #q=(1,4,7,8)f32
kuiper.RotaryEmbedding   k_rotary   2 1 k2 positions k head_dim=8 rope_theta=10000.0 #k=(1,2,7,8)f32
kuiper.CachedAttention   attention  4 1 q k v positions o num_heads=4 num_kv_heads=2 head_dim=8 max_positions=16 #o=(1,4,7,8)f32
Tensor.permute           o_heads    1 1 o o1 dims=(0,2,1,3) #o1=(1,7,4,8)f32
pnnx.Output              output     1 0 o1
"""


@pytest.mark.skipif(not OPENCL_DEVICES, reason="no usable OpenCL device")
def test_a_decoder_block_runs_on_the_device_alone(tmp_path):
    """Embedding, RMSNorm, projections, rotary and cached attention as a graph: on OpenCL no operator falls back to
    the host, and a prefill then decode steps give the numpy backend's outputs."""
    import kuiper

    rng = np.random.default_rng(11)  # its own draws: the same weights and ids in any test order
    shapes = {"embed.weight": (50, 32), "norm.weight": (32,), "q_proj.weight": (32, 32), "k_proj.weight": (16, 32),
              "v_proj.weight": (16, 32)}
    path = write_model(tmp_path, "decoder", DECODER,
                       {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()})
    runs = [range(0, 7), [7], [8], [9]]  # a prefill of 7 tokens, then three decode steps
    ids = rng.integers(0, 50, (1, 10))
    feeds = [(ids[:, r[0]:r[0] + len(r)], np.array(r)) for r in runs]
    on_host = kuiper.load(path, backend="numpy")
    expected = [on_host.forward(*feed)[0] for feed in feeds]
    for spec in OPENCL_DEVICES:
        for precision in ("fp32", "fp16") if spec == OPENCL_DEVICES[0] else ("fp32",):
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a host fallback warns
                graph = kuiper.load(path, backend="opencl", device=spec, precision=precision)
            assert graph.host_fallbacks == []
            # at fp16 six tensors in a row are stored as half, and the softmax's exponent amplifies the scores'
            # rounding: a few times one layer's FP16_RTOL
            rtol = 4 * FP16_RTOL if precision == "fp16" else 1e-4
            for feed, want in zip(feeds, expected):
                assert_outputs_close([graph.forward(*feed)[0]], [want], rtol, f"{spec} {precision}")
