"""Checkpoint of lesson 21: the toy byte-level BPE of exercises/lesson_21.py held to the `tokenizers` package's
BPE trained the same way on the same text (the merges, in order) and to kuiper's Tokenizer reading what that
package saved (the tokens of texts seen and unseen), and its streaming held to Python's incremental UTF-8 decoder
and to kuiper's TextStream."""

import codecs
import json
import random
import sys

import pytest

from kuiper.llm.streaming import TextStream
from kuiper.llm.tokenizer import Tokenizer
from lesson_tools import ROOT, exercise

sys.path.insert(0, str(ROOT / "tests" / "llm"))
from llm_tools import CORPUS  # noqa: E402

ex = exercise(21)

SEEN = [
    "low low low low low lower lower newest newest newest newest newest newest widest widest widest",
    " ".join(CORPUS),
    "aaaaaaa bbbb aaa ab ba aaaa  aa",
    "🤖🚀🤖🚀 日本語 日本 crème brûlée café café naïve",
]
UNSEEN = ["the lowest newer widest", "Once upon a robot, there was a café 🤖!", "日本 and 語", "  spaces\tand\nlines ",
          "x1 2024 ???"]


def stand_ins() -> dict:
    """GPT-2's byte -> printable character table, in which `tokenizers` writes byte-level tokens."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + k) for k, b in enumerate(others)}}


BYTE_OF = {c: b for b, c in stand_ins().items()}


def as_bytes(token: str) -> bytes:
    return bytes(BYTE_OF[c] for c in token)


def trained(text: str, merges: int):
    """The `tokenizers` package's byte-level BPE with the toy's pieces, trained on `text` until it has learned
    `merges` merges (or runs out of pairs)."""
    from tokenizers import Regex, Tokenizer as HF, decoders, models, pre_tokenizers, trainers

    tok = HF(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(ex.PIECES.pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=256 + merges, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text], trainer=trainer)
    return tok


def merges_of(tok) -> list:
    found = json.loads(tok.to_str())["model"]["merges"]
    pairs = [m.split(" ") if isinstance(m, str) else m for m in found]
    return [(as_bytes(a), as_bytes(b)) for a, b in pairs]


@pytest.mark.parametrize("n", [1, 5, 20, 80, 400])
@pytest.mark.parametrize("text", SEEN, ids=["low-lower", "corpus", "overlaps", "utf-8"])
def test_learn_merges_are_the_packages(text, n):
    mine = ex.learn_merges(text, n)
    assert all(isinstance(a, bytes) and isinstance(b, bytes) for a, b in mine)
    assert mine == merges_of(trained(text, n))


def test_learn_merges_on_many_random_texts():
    rng = random.Random(21)
    words = ["the", "cat", "sat", "on", "mat", "then", "that", "hat", "at", "a", "é", "naïve", "🤖", "x1", "2024",
             "!!", "?"]
    for _ in range(12):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(5, 80)))
        n = rng.choice([3, 12, 40, 150])
        assert ex.learn_merges(text, n) == merges_of(trained(text, n)), text


@pytest.mark.parametrize("merges", [0, 30, 120])
def test_encode_is_kuipers_tokenizer(tmp_path, merges):
    """kuiper's Tokenizer reads the tokenizer.json the package saves; your encode, given the same merges, must cut
    every text into the same tokens: those it was trained on and others."""
    tok = trained(" ".join(CORPUS * 3), merges)
    tok.save(str(tmp_path / "tokenizer.json"))
    kuipers = Tokenizer(tmp_path)
    vocab = {token: as_bytes(token) for token in tok.get_vocab()}
    for text in CORPUS + UNSEEN:
        ids = kuipers.encode(text, add_special_tokens=False)
        expected = [vocab[kuipers.backend.id_to_token(i)] for i in ids]
        got = ex.encode(text, merges_of(tok))
        assert got == expected, text
        assert b"".join(got) == text.encode("utf-8")


def test_encode_with_your_own_merges():
    """learn_merges then encode, the whole toy tokenizer, against the package's trained on the same text."""
    text = " ".join(CORPUS)
    theirs = trained(text, 60)
    merges = ex.learn_merges(text, 60)
    for sample in UNSEEN + CORPUS[:2]:
        assert ex.encode(sample, merges) == [as_bytes(t) for t in theirs.encode(sample).tokens]


def incremental(pieces) -> list:
    decoder = codecs.getincrementaldecoder("utf-8")()
    return [decoder.decode(piece) for piece in pieces]


@pytest.mark.parametrize("text", ["plain ascii", "crème brûlée", "日本語", "🤖🚀 robots", "a🤖b日c"])
def test_stream_text_is_the_incremental_decoder(text):
    data = text.encode("utf-8")
    rng = random.Random(len(data))
    for _ in range(20):  # the bytes cut into pieces at random places, one to five bytes each
        pieces, at = [], 0
        while at < len(data):
            step = rng.randint(1, 5)
            pieces.append(data[at:at + step])
            at += step
        got = ex.stream_text(pieces)
        assert got == incremental(pieces), pieces
        assert "".join(got) == text
    assert ex.stream_text([bytes([b]) for b in data]) == incremental([bytes([b]) for b in data])


def test_stream_text_of_real_tokens_joins_as_kuipers_textstream(tmp_path):
    tok = trained(" ".join(CORPUS * 3), 120)
    tok.save(str(tmp_path / "tokenizer.json"))
    kuipers = Tokenizer(tmp_path)
    for text in CORPUS + UNSEEN:
        ids = kuipers.encode(text, add_special_tokens=False)
        stream = TextStream(kuipers)
        theirs = [stream.push(i) for i in ids] + [stream.finish()]
        mine = ex.stream_text([as_bytes(kuipers.backend.id_to_token(i)) for i in ids])
        assert len(mine) == len(ids)
        assert "".join(mine) == "".join(theirs) == text
        assert "\ufffd" not in "".join(mine)
