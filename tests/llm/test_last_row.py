"""A prefill that generates computes lm_head for the last position alone (Features.last_row_only): that row equals
the full forward's last row, float and int8, on every backend and usable OpenCL device, and `logits()` still
returns every row."""

import numpy as np
import pytest

import kuiper
from conftest import MODELS, OPENCL_DEVICES

BACKENDS = [("reference", None), ("numpy", None)] + [("opencl", spec) for spec in OPENCL_DEVICES]


@pytest.mark.parametrize("quantize", [None, "int8"])
@pytest.mark.parametrize("backend, device", BACKENDS)
def test_last_row_alone_is_the_full_forwards_last_row(backend, device, quantize):
    directory = MODELS / "llm" / "qwen2"  # biases on q, k and v; a tied lm_head
    prompt = [int(i) for i in np.load(directory / "reference.npz")["prompt_ids"]]
    lm = kuiper.llm.load(directory, backend=backend, device=device, quantize=quantize)
    full = lm.logits(prompt)
    assert full.shape == (len(prompt), lm.config.vocab_size)
    lm.reset()
    np.testing.assert_allclose(lm._last_logits(prompt), full[-1], rtol=0, atol=1e-6 * np.abs(full).max())
    assert not lm._head.last_row_only
    np.testing.assert_array_equal(lm.logits(prompt), full)  # every row again, as before
    lm.eos_token_ids = frozenset()
    greedy = lm.generate(prompt, max_new_tokens=4)
    assert greedy[0] == int(np.argmax(full[-1]))
