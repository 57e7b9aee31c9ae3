"""kuiper against transformers on the tiny checkpoints tools/make_llm_checkpoints.py saves in models/llm/<name>/
with transformers' outputs in reference.npz: the prefill logits, the logits of each decode step and the greedy
tokens. The logits must agree within 1e-4 of their largest value and the tokens exactly, on every backend and
every usable OpenCL device. Skipped where no such checkpoint has been made."""

import numpy as np
import pytest

import kuiper
from conftest import MODELS, OPENCL_DEVICES

CHECKPOINTS = sorted(path.parent for path in (MODELS / "llm").glob("*/reference.npz"))
BACKENDS = [("reference", None), ("numpy", None)] + [("opencl", spec) for spec in OPENCL_DEVICES]
RTOL = 1e-4


def assert_close_to_largest(got, expected, where):
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(got, expected, rtol=0, atol=RTOL * scale, err_msg=where)


@pytest.mark.skipif(not CHECKPOINTS, reason="no models/llm/*/reference.npz (tools/make_llm_checkpoints.py makes them)")
@pytest.mark.parametrize("directory", CHECKPOINTS, ids=[path.name for path in CHECKPOINTS])
@pytest.mark.parametrize("backend, device", BACKENDS)
def test_logits_and_greedy_tokens_match_transformers(directory, backend, device):
    saved = np.load(directory / "reference.npz")
    prompt, greedy = [int(i) for i in saved["prompt_ids"]], [int(i) for i in saved["greedy_ids"]]
    lm = kuiper.llm.load(directory, backend=backend, device=device)
    assert not lm.graph.host_fallbacks  # on OpenCL every operator runs on the device
    where = f"{directory.name} on {backend} {device or ''}"
    prefill = lm.logits(prompt)
    assert_close_to_largest(prefill, saved["prefill_logits"], where + ", prefill")
    # the logits that chose each greedy token: the prefill's last row, then one decode step per token
    chosen = [prefill[-1]]
    for step, token in enumerate(greedy[:-1]):
        chosen.append(lm.forward([token], len(prompt) + step)[0])
    assert [int(np.argmax(row)) for row in chosen] == greedy, where
    # decode_logits: row i chose greedy token i (row 0 is the prefill's last row, then one row a decode step)
    assert_close_to_largest(np.array(chosen), saved["decode_logits"], where + ", decode steps")
    lm.eos_token_ids = frozenset()  # the reference's tokens run for a fixed count, end-of-sequence or not
    assert lm.generate(prompt, max_new_tokens=len(greedy)) == greedy, where
