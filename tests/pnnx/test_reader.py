"""The .param reader on valid files: records, links between them, and where the .bin comes from."""

from pathlib import Path

import numpy as np
import pytest

from kuiper.core.errors import PnnxFormatError
from kuiper.pnnx import load, parse_param
from kuiper.pnnx.records import FLOAT, INT_LIST, STRING, Attribute, Operand, Parameter

from pnnx_files import TINY_ARRAYS, TINY_MEMBERS, TINY_PARAM, files, tiny  # noqa: F401  (fixtures)

# Features a real export uses, in one file: CRLF endings and tabs, trailing blank lines, an operator that
# takes one operand twice (its `#` repeated, `$` filling both slots in order), dynamic and symbolic dims,
# a scalar, an unknown element type, expression text with commas and brackets, inf as a parameter.
RICH = (
    "7767517\r\n"
    "8 7\r\n"
    "pnnx.Input  in0 0 1 x #x=(?,3,%h,%w)f32\r\n"
    "pnnx.Input\tin1 0 1 y #y=()i64\r\n"
    "torch.cat cat 2 1 x x c dim=1 $tensors=x $more=x #x=(?,3,%h,%w)f32 #x=(?,3,%h,%w)f32 #c=(?,6,%h,%w)f32\r\n"
    "pnnx.Expression shape 2 1 c y s expr=[int(size(@0,0)),-1,@1] #s=(2)null\r\n"
    "Tensor.reshape view 2 1 c s v $input=c $shape=s #v=(?,?)f32\r\n"
    "torch.clamp clip 1 1 v r max=inf min=-1.5e+03 $input=v\r\n"
    "prim::TupleConstruct pack 2 1 r s t\r\n"
    "pnnx.Output out 1 0 t\r\n"
    "\r\n\r\n"
)


def test_rich_file_records(files):
    graph = load(files.param(RICH))  # no attributes: no .bin needed
    assert graph.bin_path is None
    assert [op.name for op in graph.operators] == ["in0", "in1", "cat", "shape", "view", "clip", "pack", "out"]
    assert [op.line for op in graph.operators] == [3, 4, 5, 6, 7, 8, 9, 10]
    assert list(graph.operands) == ["x", "y", "c", "s", "v", "r", "t"]

    cat = graph.operators[2]
    assert (cat.inputs, cat.outputs, cat.input_names) == (["x", "x"], ["c"], ["tensors", "more"])
    assert graph.operands["x"] == Operand("x", (None, 3, "h", "w"), "f32", "in0", ["cat", "cat"])
    assert graph.operands["y"].shape == () and graph.operands["y"].dtype == "i64"
    assert graph.operands["s"] == Operand("s", (2,), None, "shape", ["view", "pack"])
    assert graph.operands["t"] == Operand("t", None, None, "pack", ["out"])

    expr = graph.operators[3].params["expr"]
    assert expr == Parameter(STRING, "[int(size(@0,0)),-1,@1]", "[int(size(@0,0)),-1,@1]")
    assert graph.operators[4].input_names == ["input", "shape"]
    clip = graph.operators[5].params
    assert clip["max"] == Parameter(STRING, "inf", "inf") and clip["max"].as_float() == np.inf
    assert clip["min"] == Parameter(FLOAT, -1500.0, "-1.5e+03")
    assert graph.operators[6].input_names == ["", ""]


def test_tiny_model_with_weights(tiny):
    param, bin_path = tiny
    graph = load(param)
    assert graph.param_path == str(param) and graph.bin_path == str(bin_path)
    fc = graph.operators[1]
    assert (fc.type, fc.inputs, fc.outputs, fc.input_names) == ("nn.Linear", ["0"], ["1"], ["input"])
    assert fc.params["in_features"].value == 3 and fc.params["bias"].value is True
    assert np.array_equal(fc.attrs["weight"].numpy(), TINY_ARRAYS["fc.weight"])
    assert np.array_equal(fc.attrs["bias"].numpy(), TINY_ARRAYS["fc.bias"])
    assert graph.operands["1"].producer == "fc" and graph.operands["1"].consumers == ["relu"]


def test_explicit_bin_path_and_str_paths(files):
    param = files.param(TINY_PARAM)
    elsewhere = files.bin(TINY_MEMBERS, name="other")
    graph = load(str(param), str(elsewhere))
    assert graph.bin_path == str(elsewhere)
    assert graph.operators[1].attrs["bias"].numpy().tolist() == [0.5, -1.0]


def test_default_bin_path_replaces_the_param_suffix(files):
    param = files.param(TINY_PARAM, name="net")
    files.bin(TINY_MEMBERS, name="net")
    assert Path(load(param).bin_path) == param.with_name("net.pnnx.bin")


def test_parse_param_reads_no_weights(tiny):
    param, _ = tiny
    graph = parse_param(param)
    weight = graph.operators[1].attrs["weight"]
    assert weight == Attribute("weight", "f32", (2, 3), None)
    assert graph.bin_path is None
    with pytest.raises(PnnxFormatError, match="no data"):
        weight.numpy()
    assert graph.operators[1].params["out_features"] == Parameter(2, 2, "2")


def test_empty_graph(files):
    graph = load(files.param("7767517\n0 0\n"))
    assert graph.operators == [] and graph.operands == {}


def test_list_parameters_keep_raw_text(files):
    graph = load(files.param("7767517\n1 1\npnnx.Input in 0 1 0 k=(1,2) e=() n=None\n"))
    params = graph.operators[0].params
    assert params["k"] == Parameter(INT_LIST, [1, 2], "(1,2)")
    assert params["e"].raw == "()" and params["n"].raw == "None" and params["e"].type == params["n"].type == 0


def test_only_ascii_whitespace_separates_tokens(files):
    # pnnx splits lines the C way: a no-break space is part of a name, as a tab is not
    graph = load(files.param("7767517\n1 1\npnnx.Input\tin\u00a0put 0 1 x\u00a0y\n"))
    assert graph.operators[0].name == "in\u00a0put" and list(graph.operands) == ["x\u00a0y"]
