"""The language model kuiper ships (models/shakespeare/, trained by tools/train_llm.py) decodes the greedy
continuation transformers produced from the same saved weights (training.json), on every backend and every
usable OpenCL device."""

import json

import pytest

import kuiper
from conftest import MODELS, OPENCL_DEVICES

SHIPPED = MODELS / "shakespeare"
BACKENDS = [("reference", None), ("numpy", None)] + [("opencl", spec) for spec in OPENCL_DEVICES]


@pytest.mark.parametrize("backend, device", BACKENDS)
def test_the_greedy_continuation_is_transformers(backend, device):
    samples = json.loads((SHIPPED / "training.json").read_text())["samples"]
    lm = kuiper.llm.load(SHIPPED, backend=backend, device=device)
    assert lm.tokenizer.encode(samples["prompt"]) == samples["prompt_ids"]
    expected = samples["greedy_60_ids"]
    assert lm.generate(samples["prompt_ids"], max_new_tokens=len(expected)) == expected
