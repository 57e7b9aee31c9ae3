"""A pure-Python reader for PNNX models (`.pnnx.param` text + `.pnnx.bin` zip of weights).

    graph = kuiper.pnnx.load("resnet18.pnnx.param")      # bin path defaults to resnet18.pnnx.bin
    conv = graph.operators[3]; conv.params["stride"].value; conv.attrs["weight"].numpy()

Every malformed input raises kuiper.core.errors.PnnxFormatError naming the file and the line or member.
"""

from kuiper.pnnx.bin import BinFile
from kuiper.pnnx.reader import load, parse_param
from kuiper.pnnx.records import (
    BOOL, COMPLEX, COMPLEX_LIST, FLOAT, FLOAT_LIST, INT, INT_LIST, NULL, STRING, STRING_LIST,
    Attribute, Graph, Operand, Operator, Parameter,
)
from kuiper.pnnx.values import parse_spec, parse_value

__all__ = [
    "load", "parse_param", "parse_value", "parse_spec", "BinFile",
    "Parameter", "Attribute", "Operand", "Operator", "Graph",
    "NULL", "BOOL", "INT", "FLOAT", "STRING", "INT_LIST", "FLOAT_LIST", "STRING_LIST", "COMPLEX", "COMPLEX_LIST",
]
