"""The claims of lesson 21: the byte-level stand-ins and the order in which the `tokenizers` package numbers the
byte tokens, the toy corpus's merges, kuiper's Tokenizer (special tokens, the vocabulary check, the clean-up of
spaces, the chat template from either file, what `kuiper chat` encodes), and streamed text; the commands."""

import importlib
import json
import sys

import pytest

import kuiper.llm
from kuiper.app.cli.generate import _fitting
from kuiper.core.errors import CheckpointError
from kuiper.llm.streaming import CONTEXT, REPLACEMENT, TextStream
from kuiper.llm.tokenizer import Tokenizer
from lesson_tools import ROOT, check_shell_commands

sys.path.insert(0, str(ROOT / "tests" / "llm"))
from llm_tools import BOS, CORPUS, EOS, train_tokenizer, write_checkpoint  # noqa: E402

TOY = ("low low low low low lower lower newest newest newest newest newest newest "
       "widest widest widest")
PIECES = r" ?\w+| ?[^\s\w]+|\s+(?!\S)|\s+"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("lesson21") / "tiny"
    write_checkpoint(directory, chat_template=True)
    return directory


def stand_ins() -> dict:
    """GPT-2's table as the notes describe it: printable bytes as themselves, the 68 others from U+0100 on."""
    printable = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    others = [b for b in range(256) if b not in printable]
    assert len(others) == 68
    return {**{b: chr(b) for b in printable}, **{b: chr(0x100 + k) for k, b in enumerate(others)}}


def byte_level_bpe(text, merges, special=()):
    from tokenizers import Regex, Tokenizer as HF, decoders, models, pre_tokenizers, trainers

    tok = HF(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(PIECES), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=256 + len(special) + merges, show_progress=False,
                                  special_tokens=list(special), initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text], trainer=trainer)
    return tok


def test_the_stand_ins_are_the_packages_alphabet_and_number_the_bytes():
    from tokenizers import pre_tokenizers

    table = stand_ins()
    assert set(table.values()) == set(pre_tokenizers.ByteLevel.alphabet())
    assert table[32] == "Ġ" and table[10] == "Ċ"
    vocab = byte_level_bpe("ab", 0).get_vocab()
    by_id = sorted(range(256), key=lambda b: vocab[table[b]])
    assert [vocab[table[b]] for b in by_id] == list(range(256))              # the bytes are ids 0..255
    assert by_id == sorted(range(256), key=lambda b: table[b])               # in the order of their stand-ins
    assert by_id.index(32) == 220                                            # the space: byte 32, id 220
    for package in ("exercises", "solutions"):                               # the order the exercise gives
        assert importlib.import_module(f"{package}.lesson_21").BYTE_ORDER == bytes(by_id)
    # with special tokens they come first, and the bytes follow
    assert byte_level_bpe("ab", 0, special=[BOS, EOS]).get_vocab()[table[by_id[0]]] == 2


def test_the_toy_corpus():
    merges = [tuple(m) for m in json.loads(byte_level_bpe(TOY, 14).to_str())["model"]["merges"]]
    assert merges[:2] == [("e", "s"), ("es", "t")]
    assert byte_level_bpe(TOY, 10).encode(" widest").tokens == ["Ġ", "w", "i", "dest"]
    assert byte_level_bpe(TOY, 13).encode(" widest").tokens == ["Ġwidest"]           # three more merges
    assert ("e", "r") not in merges[:13] and ("e", "r") in merges                     # learned from "lower"
    assert byte_level_bpe(TOY, 10).get_vocab_size() == 266


def test_the_tokenizer_keeps_what_the_notes_say(model):
    tok = Tokenizer(model)
    assert (tok.vocab_size, tok.bos_token, tok.bos_token_id) == (320, BOS, 0)
    assert (tok.eos_token, tok.eos_token_ids) == (EOS, (1,))
    assert json.loads((model / "config.json").read_text())["vocab_size"] == tok.vocab_size + 3   # 3 spare rows
    for text in CORPUS:
        ids = tok.encode(text)
        assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
        assert tok.decode(ids) == BOS + text and tok.decode(ids, skip_special_tokens=True) == text
    assert tok.encode("a</s>b", add_special_tokens=False)[1] == tok.eos_token_ids[0]   # a special inside the text
    robot = tok.encode("🤖", add_special_tokens=False)
    assert len(robot) == 3 and all(tok.decode([i]) == REPLACEMENT for i in robot)


def test_a_vocabulary_larger_than_the_models_is_refused(tmp_path):
    write_checkpoint(tmp_path / "small", vocab_size=100)
    with pytest.raises(CheckpointError, match="320 tokens, more than the model's vocab_size of 100"):
        Tokenizer(tmp_path / "small", kuiper.llm.config.read_config(tmp_path / "small"))


def test_clean_up_of_spaces(tmp_path):
    write_checkpoint(tmp_path / "m", tokenizer=train_tokenizer())
    settings = json.loads((tmp_path / "m" / "tokenizer_config.json").read_text())
    ids = Tokenizer(tmp_path / "m").encode("Yes , it is .", add_special_tokens=False)
    assert Tokenizer(tmp_path / "m").decode(ids) == "Yes , it is ."
    (tmp_path / "m" / "tokenizer_config.json").write_text(json.dumps(settings | {"clean_up_tokenization_spaces": True}))
    assert Tokenizer(tmp_path / "m").decode(ids) == "Yes, it is."


def test_the_chat_template_from_either_file(model, tmp_path):
    messages = [{"role": "user", "content": "Hello"}]
    assert Tokenizer(model).apply_chat_template(messages) == f"{BOS}<|user|>\nHello{EOS}\n<|assistant|>\n"
    for file in model.iterdir():
        (tmp_path / file.name).write_bytes(file.read_bytes())
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}{{ m['role'] }}{% endfor %}"
                                                  "{% if add_generation_prompt %}+{% endif %}")
    assert Tokenizer(tmp_path).apply_chat_template(messages) == "user+"            # the .jinja file comes first
    (tmp_path / "chat_template.jinja").write_text("{{ raise_exception('no') }}")
    with pytest.raises(CheckpointError, match="the chat template fails: no"):
        Tokenizer(tmp_path).apply_chat_template(messages)


def test_kuiper_chat_encodes_the_rendered_text_without_a_second_bos(model):
    lm = kuiper.llm.load(model, backend="numpy")
    turns = [{"role": "user", "content": "Hello"}]
    ids = _fitting(lm, [], turns)
    text = lm.tokenizer.apply_chat_template(turns)
    assert ids == lm.tokenizer.encode(text, add_special_tokens=False)
    assert ids[0] == lm.tokenizer.bos_token_id and ids[1] != lm.tokenizer.bos_token_id


@pytest.mark.parametrize("text", CORPUS + ["🤖🚀🤖", "日本語 and émoji 🚀 at the end 🤖"])
def test_streamed_pieces_join_to_the_decode_and_never_split_a_character(model, text):
    tok = Tokenizer(model)
    ids = tok.encode(text, add_special_tokens=False)
    prompt = tok.encode("Once upon a time")
    stream = TextStream(tok, prompt)
    assert stream.prefix == len(prompt) - CONTEXT                          # the prompt's last CONTEXT ids
    pieces = []
    for i in ids:
        window, shown = stream.prefix, stream.read
        pieces.append(stream.push(i))
        assert stream.prefix == (shown if pieces[-1] else window)        # from where the last step showed
        assert len(stream.ids) - stream.prefix <= CONTEXT + 4            # a few tokens, not the whole text
    assert "".join(pieces) + stream.finish() == tok.decode(ids) == text
    assert not any(REPLACEMENT in piece for piece in pieces)


def test_the_model_streams_only_pieces_that_are_not_empty(model):
    lm = kuiper.llm.load(model, backend="numpy")
    pieces = list(lm.stream("Once upon a time", max_new_tokens=16, temperature=1.0, seed=1))
    assert pieces and all(pieces)
    assert "".join(pieces) == lm.tokenizer.decode(lm.generate(lm.tokenizer.encode("Once upon a time"),
                                                              max_new_tokens=16, temperature=1.0, seed=1),
                                                  skip_special_tokens=True)


def test_the_tokenizer_is_the_packages_reading_of_tokenizer_json(model):
    from tokenizers import Tokenizer as HF

    tok = Tokenizer(model)
    assert isinstance(tok.backend, HF) and tok.path == str(model / "tokenizer.json")
    assert tok.backend.to_str() == HF.from_file(str(model / "tokenizer.json")).to_str()


def test_the_commands_in_the_notes(capsys):
    check_shell_commands(21, capsys)
