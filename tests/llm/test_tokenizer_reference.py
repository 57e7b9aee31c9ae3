"""kuiper's tokenizer against transformers' on the strings tools/make_llm_checkpoints.py saved in
models/llm/tokenizer_reference.json (ASCII, accents, CJK, emoji, runs of spaces, tabs and newlines, the empty
string): the same ids, the same decoded text, with and without special tokens, and the same chat template
rendering. Every checkpoint in models/llm/ shares that tokenizer."""

import json

import pytest

from conftest import MODELS
from kuiper.llm.tokenizer import Tokenizer

REFERENCE = MODELS / "llm" / "tokenizer_reference.json"
SAVED = json.loads(REFERENCE.read_text()) if REFERENCE.exists() else {"cases": [], "chat": None}
CHECKPOINT = next(iter(sorted((MODELS / "llm").glob("*/tokenizer.json"))), None)
pytestmark = pytest.mark.skipif(CHECKPOINT is None, reason="no models/llm/ (tools/make_llm_checkpoints.py)")


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer(CHECKPOINT.parent)


@pytest.mark.parametrize("case", SAVED["cases"], ids=[repr(c["text"])[:24] for c in SAVED["cases"]])
def test_ids_and_text_are_transformers(tokenizer, case):
    assert tokenizer.encode(case["text"], add_special_tokens=False) == case["ids"]
    assert tokenizer.decode(case["ids"]) == case["decoded"]
    assert [tokenizer.decode([i]) for i in case["ids"]] == case["token_decodes"]
    assert tokenizer.encode(case["text"]) == case["ids_with_special"]
    assert tokenizer.decode(case["ids_with_special"]) == case["decoded_with_special"]
    assert tokenizer.decode(case["ids_with_special"], skip_special_tokens=True) == case["decoded_with_special_skipped"]


def test_the_chat_template_renders_as_transformers(tokenizer):
    chat = SAVED["chat"]
    text = tokenizer.apply_chat_template(chat["messages"], add_generation_prompt=chat["add_generation_prompt"])
    assert text == chat["text"]
    assert tokenizer.encode(text, add_special_tokens=False) == chat["ids"]
