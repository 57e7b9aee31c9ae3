"""What RuntimeGraph gained for language models: integer graph inputs (token ids, positions), and a graph given
as .param text with its weights from a store instead of a .pnnx.bin, as kuiper.llm writes the decoder."""

import numpy as np
import pytest

from kuiper.core.errors import InputError, PnnxFormatError
from kuiper.runtime.graph import RuntimeGraph

TEXT = """7767517
5 4
pnnx.Input        input_ids   0 1 ids #ids=(1,?)i64
torch.arange      positions   0 1 pos end=4 dtype=torch.long #pos=(4)i64
nn.Embedding      tokens      1 1 ids 0 embedding_dim=3 num_embeddings=6 sparse=False @weight=(6,3)f32 #0=(1,?,3)f32
nn.Embedding      places      1 1 pos 1 embedding_dim=3 num_embeddings=4 @weight=(4,3)f16 #1=(4,3)f32
pnnx.Output       output      2 0 0 1
"""


class Store:
    """The interface kuiper/pnnx/reader.py load asks of a weight store: `path` and BinFile's `view`."""

    path = "in memory"

    def __init__(self, arrays):
        self.arrays = arrays

    def view(self, name, dtype, shape, declared_at=""):
        if name not in self.arrays:
            raise PnnxFormatError(f"{self.path}: no {name} ({declared_at})")
        return self.arrays[name]


WEIGHTS = {"tokens.weight": np.arange(18, dtype=np.float32).reshape(6, 3),
           "places.weight": np.arange(12, dtype=np.float16).reshape(4, 3)}


@pytest.mark.parametrize("backend", ["reference", "numpy"])
def test_a_graph_from_text_with_weights_from_a_store(backend):
    graph = RuntimeGraph("gpt.pnnx.param", backend=backend, text=TEXT, weights=Store(WEIGHTS)).build()
    ids = np.array([[5, 0, 2]])
    tokens, places = graph.forward(ids)
    np.testing.assert_array_equal(tokens, WEIGHTS["tokens.weight"][ids])
    np.testing.assert_array_equal(places, WEIGHTS["places.weight"].astype(np.float32))
    assert graph.bin_path == "in memory"
    # int32 ids are widened to the recorded int64; floats are refused
    np.testing.assert_array_equal(graph.forward(ids.astype(np.int32))[0], tokens)
    with pytest.raises(InputError, match=r"graph input 'input_ids' \(operand ids\): expected integer data \(int64\), "
                                         r"got float32"):
        graph.forward(ids.astype(np.float32))
    plan = graph.plan_for((1, 7))
    assert plan.shapes["0"] == (1, 7, 3)


def test_a_missing_weight_is_the_stores_error():
    with pytest.raises(PnnxFormatError, match=r"in memory: no places.weight \(gpt.pnnx.param:6\)"):
        RuntimeGraph("gpt.pnnx.param", text=TEXT, weights=Store({"tokens.weight": WEIGHTS["tokens.weight"]}),
                     backend="numpy").init()


def test_an_error_in_the_text_names_its_line():
    with pytest.raises(PnnxFormatError, match=r"gpt.pnnx.param:4: operator positions"):
        RuntimeGraph("gpt.pnnx.param", text=TEXT.replace("0 1 pos end=4", "0 1 pos end=4 end=5"),
                     weights=Store(WEIGHTS), backend="numpy").init()
