"""Tied weights (kuiper/runtime/tied.py): the extra input pnnx writes for a module operator's own weight is taken
off at build, checked byte for byte, on graphs written the way pnnx writes GPT-2's lm_head and BERT's decoder."""

import numpy as np
import pytest

import kuiper
from conftest import write_model
from kuiper.core.errors import LayerError

rng = np.random.default_rng(3)
TABLE = rng.standard_normal((6, 4)).astype(np.float32)  # 6 tokens of 4 features
BIAS = rng.standard_normal(6).astype(np.float32)
X = rng.standard_normal((2, 3, 4)).astype(np.float32)


def lm_head(tmp_path, inputs: str, shared: dict, extra: str = ""):
    """A graph: the constants in `shared` (name -> array), then an nn.Linear 'head' over x of the table, with
    bias, reading `inputs` (operand names, the data last), and an `extra` line before the output."""
    constants = "".join(f"pnnx.Attribute {name} 0 1 {name}_v @data={fmt(a)} #{name}_v={fmt(a)}\n"
                        for name, a in shared.items())
    n_inputs = len(inputs.split())
    outputs = "y z" if extra else "y"
    operands = 2 + len(shared) + bool(extra)  # x, the constants, y and the extra line's z
    text = (f"7767517\n{operands + 1} {operands}\n"
            f"pnnx.Input in 0 1 x #x=(2,3,4)f32\n{constants}"
            f"nn.Linear head {n_inputs} 1 {inputs} y bias=True in_features=4 out_features=6 @weight=(6,4)f32 "
            f"@bias=(6)f32 #x=(2,3,4)f32 #y=(2,3,6)f32\n{extra}"
            f"pnnx.Output out {len(outputs.split())} 0 {outputs}\n")
    weights = {f"{name}.data": a for name, a in shared.items()} | {"head.weight": TABLE, "head.bias": BIAS}
    return write_model(tmp_path, "tied", text, weights)


def fmt(a) -> str:
    return "(" + ",".join(map(str, a.shape)) + ")f32"


def test_the_tied_table_before_the_data_is_taken_off(tmp_path):
    # GPT-2: nn.Linear model.lm_head 2 1 <wte's constant> <hidden> <logits>
    param = lm_head(tmp_path, "wte_v x", {"wte": TABLE})
    graph = kuiper.RuntimeGraph(param, backend="numpy").init()
    assert [op.name for op in graph.operators] == ["in", "wte", "head", "out"]
    graph = kuiper.load(param, backend="reference")
    assert graph.untied == ["head"]
    assert [op.name for op in graph.operators] == ["in", "head", "out"]  # the constant read by nobody goes
    np.testing.assert_allclose(graph.forward(X)[0], X @ TABLE.T + BIAS, rtol=1e-6)


def test_a_tied_weight_and_bias_are_both_taken_off(tmp_path):
    # BERT's masked-LM decoder: nn.Linear 3 1 <word table> <bias> <hidden>
    param = lm_head(tmp_path, "wte_v b_v x", {"wte": TABLE, "b": BIAS})
    graph = kuiper.load(param, backend="numpy")
    assert graph.untied == ["head"] and [op.name for op in graph.operators] == ["in", "head", "out"]
    np.testing.assert_allclose(graph.forward(X)[0], X @ TABLE.T + BIAS, rtol=1e-6)


def test_a_constant_that_others_read_stays(tmp_path):
    extra = "pnnx.Expression twice 1 1 wte_v z expr=mul(@0,2) #wte_v=(6,4)f32 #z=(6,4)f32\n"
    param = lm_head(tmp_path, "wte_v x", {"wte": TABLE}, extra)
    graph = kuiper.load(param, backend="reference")
    assert graph.untied == ["head"]
    assert [op.name for op in graph.operators] == ["in", "wte", "head", "twice", "out"]
    assert [s.name for s in graph.operators[1].successors] == ["twice"]
    y, z = graph.forward(X)
    np.testing.assert_allclose(y, X @ TABLE.T + BIAS, rtol=1e-6)
    np.testing.assert_array_equal(z, TABLE * 2)


def test_an_input_that_differs_from_the_weight_stays_for_the_layer_to_refuse(tmp_path):
    other = TABLE.copy()
    other[5, 3] = np.nextafter(other[5, 3], np.inf)  # one bit off
    param = lm_head(tmp_path, "wte_v x", {"wte": other})
    with pytest.raises(LayerError, match=r"nn.Linear operator 'head': expects 1 input\(s\), the graph gives 2"):
        kuiper.load(param, backend="numpy")
