"""The graph interpreter: runtime records, memory planning and RuntimeGraph."""

from kuiper.runtime.graph import GraphState, RuntimeGraph, load
from kuiper.core.operators import RuntimeAttribute, RuntimeOperand, RuntimeOperator, RuntimeParameter

__all__ = [
    "GraphState", "RuntimeGraph", "load",
    "RuntimeAttribute", "RuntimeOperand", "RuntimeOperator", "RuntimeParameter",
]
