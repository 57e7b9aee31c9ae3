"""The heads pass (kuiper/runtime/heads.py): a split whose pieces are each cut into heads, q and k then rotated,
becomes one SplitHeads operator; where the pattern breaks the graph keeps its operators. Outputs against numpy's
formula (the rotation in float64), on every backend and usable OpenCL device."""

import numpy as np
import pytest

import kuiper
from tests.conftest import linear_weights, write_model

HEADS = "torch.split+Tensor.reshape+Tensor.permute"


def attention_inputs(batch: int = 1, k_reader: bool = False, positions_k: str = "positions",
                     normed: bool = False) -> str:
    """x (16 features) -> q (2 heads), k and v (1 head each) of head_dim 8, q and k rotated by `positions` (k by
    `positions_k`); `k_reader` adds an operator that also reads k's heads before their rotation; `normed` an
    RMSNorm of each of q's and k's heads (qn, kn) before the permute, as Qwen3 has."""
    lines = [
        f"pnnx.Input in0 0 1 x #x=({batch},?,16)f32",
        "pnnx.Input in1 0 1 positions #positions=(?)i64",
        "pnnx.Input in2 0 1 other #other=(?)i64",
        f"nn.Linear q 1 1 x q0 bias=True in_features=16 out_features=16 @weight=(16,16)f32 @bias=(16)f32 "
        f"#q0=({batch},?,16)f32",
        f"Tensor.reshape qs 1 1 q0 q1 shape=({batch},-1,2,8)",
        "Tensor.permute qh 1 1 q1 q2 dims=(0,2,1,3)",
        "kuiper.RotaryEmbedding qr 2 1 q2 positions q3 head_dim=8 rope_theta=10000.0",
        f"nn.Linear k 1 1 x k0 bias=True in_features=16 out_features=8 @weight=(8,16)f32 @bias=(8)f32 "
        f"#k0=({batch},?,8)f32",
        f"Tensor.reshape ks 1 1 k0 k1 shape=({batch},-1,1,8)",
        "Tensor.permute kh 1 1 k1 k2 dims=(0,2,1,3)",
        f"kuiper.RotaryEmbedding kr 2 1 k2 {positions_k} k3 head_dim=8 rope_theta=10000.0",
        f"nn.Linear v 1 1 x v0 bias=True in_features=16 out_features=8 @weight=(8,16)f32 @bias=(8)f32 "
        f"#v0=({batch},?,8)f32",
        f"Tensor.reshape vs 1 1 v0 v1 shape=({batch},-1,1,8)",
        "Tensor.permute vh 1 1 v1 v2 dims=(0,2,1,3)",
    ]
    if normed:  # q1 -> qn -> q1n -> qh, and k likewise
        for name in "qk":
            at = next(i for i, line in enumerate(lines) if line.startswith(f"Tensor.permute {name}h "))
            lines[at] = lines[at].replace(f" {name}1 ", f" {name}1n ")
            lines.insert(at, f"nn.RMSNorm {name}n 1 1 {name}1 {name}1n elementwise_affine=True eps=1e-06 "
                             f"normalized_shape=(8) @weight=(8)f32")
    outputs = ["q3", "k3", "v2"]
    if k_reader:
        lines.append("nn.ReLU kk 1 1 k2 k4")
        outputs.append("k4")
    lines.append(f"pnnx.Output out {len(outputs)} 0 {' '.join(outputs)}")
    return param(lines)


def param(lines: list) -> str:
    """A .param text of operator `lines` (type, name, input and output counts, operands, options)."""
    operands = sum(int(line.split()[3]) for line in lines)
    return "7767517\n" + f"{len(lines)} {operands}\n" + "\n".join(lines) + "\n"


def rotated(heads: np.ndarray, positions: np.ndarray) -> np.ndarray:
    half = heads.shape[-1] // 2
    inv_freq = 1.0 / 10000.0 ** (np.arange(0, 2 * half, 2) / (2 * half))
    angles = positions[:, None].astype(np.float64) * inv_freq
    cos, sin = np.cos(angles), np.sin(angles)
    x1, x2 = heads[..., :half].astype(np.float64), heads[..., half:].astype(np.float64)
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def expected(x, positions, w, k_reader: bool = False, positions_k=None) -> list:
    def heads(name, count):
        y = (x @ w[f"{name}.weight"].T + w[f"{name}.bias"]).reshape(x.shape[0], -1, count, 8)
        if f"{name}n.weight" in w:  # RMSNorm of each head, in float64
            y = y / np.sqrt(np.mean(y.astype(np.float64) ** 2, axis=-1, keepdims=True) + 1e-6) * w[f"{name}n.weight"]
        return y.transpose(0, 2, 1, 3)
    k = heads("k", 1)
    outs = [rotated(heads("q", 2), positions), rotated(k, positions if positions_k is None else positions_k),
            heads("v", 1)]
    return outs + ([np.maximum(k, 0)] if k_reader else [])


def graphs(path, cl_runtime):
    """The graph on numpy and, with a device, on that OpenCL device."""
    made = [kuiper.load(path, backend="numpy")]
    if cl_runtime is not None:
        from kuiper.opencl.devices import spec_of

        made.append(kuiper.load(path, backend="opencl", device=spec_of(cl_runtime.device)))
    return made


def run_and_check(graph, want, batch: int = 1, seed: int = 3) -> None:
    rng = np.random.default_rng(seed)
    for tokens in (1, 5, 9):
        x = rng.standard_normal((batch, tokens, 16), dtype=np.float32)
        positions = rng.permutation(40)[:tokens].astype(np.int64)
        other = positions[::-1].copy()
        got = graph.forward(x, positions, other)
        for g, e in zip(got, want(x, positions, other)):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch", [1, 2])
def test_q_k_v_become_one_operator(tmp_path, cl_runtime, batch):
    w = linear_weights({"q": (16, True), "k": (8, True), "v": (8, True)}, 16, seed=4)
    path = write_model(tmp_path, "heads", attention_inputs(batch), w)
    for graph in graphs(path, cl_runtime):
        types = {op.name: op.type for op in graph.order}
        assert types["q.split"] == HEADS + "+kuiper.RotaryEmbedding"
        assert not {"qr", "kr", "q.split[0]", "q.split[2]"} & set(types)
        layer = next(op.layer for op in graph.order if op.name == "q.split")
        assert layer.heads == [2, 1, 1] and [r is not None for r in layer.rotaries] == [True, True, False]
        run_and_check(graph, lambda x, p, _: expected(x, p, w), batch)


@pytest.mark.parametrize("batch", [1, 2])
def test_heads_normed_before_their_rotation_come_in_too(tmp_path, cl_runtime, batch):
    w = linear_weights({"q": (16, True), "k": (8, True), "v": (8, True)}, 16, seed=8)
    rng = np.random.default_rng(9)
    w.update({f"{name}n.weight": 1 + 0.3 * rng.standard_normal(8, dtype=np.float32) for name in "qk"})
    path = write_model(tmp_path, "heads", attention_inputs(batch, normed=True), w)
    for graph in graphs(path, cl_runtime):
        types = {op.name: op.type for op in graph.order}
        assert types["q.split"] == "torch.split+Tensor.reshape+nn.RMSNorm+Tensor.permute+kuiper.RotaryEmbedding"
        assert not {"qn", "kn", "qr", "kr"} & set(types)
        layer = next(op.layer for op in graph.order if op.name == "q.split")
        assert [n is not None for n in layer.norms] == [True, True, False]
        run_and_check(graph, lambda x, p, _: expected(x, p, w), batch)


def test_a_head_read_before_its_rotation_keeps_its_rotary(tmp_path, cl_runtime):
    w = linear_weights({"q": (16, True), "k": (8, True), "v": (8, True)}, 16, seed=5)
    path = write_model(tmp_path, "heads", attention_inputs(k_reader=True), w)
    for graph in graphs(path, cl_runtime):
        types = {op.name: op.type for op in graph.order}
        assert types["q.split"] == HEADS + "+kuiper.RotaryEmbedding" and types["kr"] == "kuiper.RotaryEmbedding"
        run_and_check(graph, lambda x, p, _: expected(x, p, w, k_reader=True))


def test_rotaries_on_other_positions_leave_the_split(tmp_path, cl_runtime):
    w = linear_weights({"q": (16, True), "k": (8, True), "v": (8, True)}, 16, seed=6)
    path = write_model(tmp_path, "heads", attention_inputs(positions_k="other"), w)
    for graph in graphs(path, cl_runtime):
        types = {op.name: op.type for op in graph.order}
        assert [types.get(f"q.split[{i}]") for i in range(3)] == [HEADS] * 3
        assert types["qr"] == types["kr"] == "kuiper.RotaryEmbedding"
        run_and_check(graph, lambda x, p, o: expected(x, p, w, positions_k=o))


def test_more_pieces_than_one_launch_cuts(tmp_path, cl_runtime):
    """Seven pieces of one head each, none rotated: SplitHeads launches three pieces at a time on OpenCL."""
    lines = ["pnnx.Input in0 0 1 x #x=(1,?,56)f32", "torch.split s 1 7 x " + " ".join(f"p{i}" for i in range(7)) +
             " dim=2 split_size_or_sections=8"]
    for i in range(7):
        lines += [f"Tensor.reshape r{i} 1 1 p{i} a{i} shape=(1,-1,1,8)",
                  f"Tensor.permute h{i} 1 1 a{i} b{i} dims=(0,2,1,3)"]
    lines.append("pnnx.Output out 7 0 " + " ".join(f"b{i}" for i in range(7)))
    path = tmp_path / "pieces.pnnx.param"
    path.write_text(param(lines))
    rng = np.random.default_rng(7)
    for graph in graphs(path, cl_runtime):
        assert {op.name: op.type for op in graph.order}["s"] == HEADS
        x = rng.standard_normal((1, 6, 56), dtype=np.float32)
        for i, got in enumerate(graph.forward(x)):
            np.testing.assert_array_equal(got, x[..., 8 * i:8 * i + 8].reshape(1, 6, 1, 8).transpose(0, 2, 1, 3))


def test_reference_backend_keeps_the_file(tmp_path):
    w = linear_weights({"q": (16, True), "k": (8, True), "v": (8, True)}, 16, seed=4)
    graph = kuiper.load(write_model(tmp_path, "heads", attention_inputs(), w), backend="reference")
    assert "kuiper.RotaryEmbedding" in {op.type for op in graph.order}
    run_and_check(graph, lambda x, p, _: expected(x, p, w))


def attention_block(dim: int, joined_read: bool = False) -> str:
    """x -> q (2 heads), k and v (1 head each) of head_dim `dim`, q and k rotated -> kuiper.CachedAttention -> the
    heads joined again (permute, reshape); `joined_read`: the permute's output is a graph output too."""
    lines = [
        "pnnx.Input in0 0 1 x #x=(1,?,16)f32",
        "pnnx.Input in1 0 1 positions #positions=(?)i64",
    ]
    for name, heads in (("q", 2), ("k", 1), ("v", 1)):
        lines += [f"nn.Linear {name} 1 1 x {name}0 bias=False in_features=16 out_features={heads * dim} "
                  f"@weight=({heads * dim},16)f32 #{name}0=(1,?,{heads * dim})f32",
                  f"Tensor.reshape {name}s 1 1 {name}0 {name}1 shape=(1,-1,{heads},{dim})",
                  f"Tensor.permute {name}h 1 1 {name}1 {name}2 dims=(0,2,1,3)"]
    lines += [f"kuiper.RotaryEmbedding qr 2 1 q2 positions q3 head_dim={dim} rope_theta=10000.0 #q3=(1,2,?,{dim})f32",
              f"kuiper.RotaryEmbedding kr 2 1 k2 positions k3 head_dim={dim} rope_theta=10000.0 #k3=(1,1,?,{dim})f32",
              f"kuiper.CachedAttention at 4 1 q3 k3 v2 positions o0 head_dim={dim} max_positions=16 num_heads=2 "
              "num_kv_heads=1",
              "Tensor.permute oh 1 1 o0 o1 dims=(0,2,1,3)",
              f"Tensor.reshape oj 1 1 o1 o2 shape=(1,-1,{2 * dim})"]
    outputs = ["o2", "o1"] if joined_read else ["o2"]
    lines.append(f"pnnx.Output out {len(outputs)} 0 {' '.join(outputs)}")
    return param(lines)


@pytest.mark.parametrize("dim, joined_read", [(8, False), (6, False), (8, True)])
def test_attention_writes_its_heads_joined(tmp_path, cl_runtime, dim, joined_read):
    """A prefill, then two decode steps of the layer's own sequence: against the reference backend, which runs
    the file's operators as they are. head_dim 8 takes the CPUs' blocks kernel on OpenCL, 6 the general one."""
    w = linear_weights({"q": (2 * dim, False), "k": (dim, False), "v": (dim, False)}, 16, seed=8)
    path = write_model(tmp_path, "block", attention_block(dim, joined_read), w)
    reference = kuiper.load(path, backend="reference")
    rng = np.random.default_rng(9)
    steps = [rng.standard_normal((1, tokens, 16), dtype=np.float32) for tokens in (5, 1, 1)]
    starts = np.cumsum([0, 5, 1])
    want = [reference.forward(x, np.arange(start, start + x.shape[1])) for x, start in zip(steps, starts)]
    for graph in graphs(path, cl_runtime):
        types = {op.name: op.type for op in graph.order}
        assert types["at"] == ("kuiper.CachedAttention" if joined_read
                               else "kuiper.CachedAttention+Tensor.permute+Tensor.reshape")
        for x, start, expect in zip(steps, starts, want):
            for got, e in zip(graph.forward(x, np.arange(start, start + x.shape[1])), expect):
                np.testing.assert_allclose(got, e, rtol=1e-5, atol=1e-5)
