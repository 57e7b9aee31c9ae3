"""The tokenizer (encode, decode, special tokens, chat template) and streaming text: the pieces joined equal the
full decode, and a character split over several tokens is never emitted in half, for a byte-level BPE and for
a SentencePiece-style one (spaces as "▁", the first one stripped when decoding)."""

import json
import shutil

import pytest

import kuiper
from kuiper.core.errors import CheckpointError, InputError
from kuiper.llm.streaming import REPLACEMENT, TextStream
from kuiper.llm.tokenizer import Tokenizer
from llm_tools import BOS, CORPUS, EOS, train_tokenizer, write_checkpoint

TEXTS = ["Once upon a time 🤖🚀 there was a robot.", "日本語 and crème brûlée",
         "  two spaces,\ttab\nnew line", "emoji at the end 🚀"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("text") / "model"
    write_checkpoint(directory, chat_template=True)
    return directory


@pytest.fixture(scope="module")
def tokenizer(checkpoint):
    return Tokenizer(checkpoint)


def sentencepiece_style():
    """A BPE tokenizer with Llama 2's layout: spaces become "▁", a "▁" prepended to the text, bytes as <0xNN>."""
    from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers, trainers

    tok = HFTokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", BOS, EOS] + bytes_, show_progress=False)
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    return tok


class Plain:
    """The decode a TextStream needs, over a bare `tokenizers` tokenizer."""

    def __init__(self, backend):
        self.backend = backend

    def decode(self, ids, skip_special_tokens=False):
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)


def streamed(tokenizer, ids, context=()):
    stream = TextStream(tokenizer, context)
    pieces = [stream.push(token) for token in ids]
    return pieces, stream.finish()


# ---- the tokenizer ------------------------------------------------------------------------------------------------
def test_encode_adds_bos_and_decode_gives_the_text_back(tokenizer):
    for text in TEXTS:
        ids = tokenizer.encode(text)
        assert ids[0] == tokenizer.bos_token_id and isinstance(ids[0], int)
        assert tokenizer.decode(ids, skip_special_tokens=True) == text
        assert tokenizer.decode(ids) == BOS + text
        assert tokenizer.encode(text, add_special_tokens=False) == ids[1:]


def test_special_tokens_come_from_tokenizer_config(tokenizer):
    assert tokenizer.bos_token == BOS and tokenizer.eos_token == EOS
    assert tokenizer.eos_token_ids == (tokenizer.backend.token_to_id(EOS),)


def test_the_chat_template_renders_the_conversation(tokenizer, checkpoint, tmp_path):
    messages = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi."},
                {"role": "user", "content": "Tell me a story."}]
    text = tokenizer.apply_chat_template(messages)
    assert text == (f"{BOS}<|user|>\nHello{EOS}\n<|assistant|>\nHi.{EOS}\n<|user|>\nTell me a story.{EOS}\n"
                    f"<|assistant|>\n")
    assert not tokenizer.apply_chat_template(messages, add_generation_prompt=False).endswith("<|assistant|>\n")
    # transformers 5 keeps the template in chat_template.jinja, which comes first
    shutil.copytree(checkpoint, tmp_path, dirs_exist_ok=True)
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}[{{ m['content'] }}]{% endfor %}")
    assert Tokenizer(tmp_path).apply_chat_template(messages) == "[Hello][Hi.][Tell me a story.]"
    (tmp_path / "chat_template.jinja").write_text("{{ raise_exception('roles must alternate') }}")
    with pytest.raises(CheckpointError, match="the chat template fails: roles must alternate"):
        Tokenizer(tmp_path).apply_chat_template(messages)


def test_variables_reach_the_chat_template(checkpoint, tmp_path):
    shutil.copytree(checkpoint, tmp_path, dirs_exist_ok=True)
    (tmp_path / "chat_template.jinja").write_text(
        "{% for m in messages %}[{{ m['content'] }}]{% endfor %}"
        "{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% endif %}")
    tokenizer, messages = Tokenizer(tmp_path), [{"role": "user", "content": "Hi"}]
    assert tokenizer.apply_chat_template(messages) == "[Hi]"
    assert tokenizer.apply_chat_template(messages, variables={"enable_thinking": False}) == "[Hi]<think></think>"
    with pytest.raises(InputError, match="may not be named bos_token, messages: the template gets those"):
        tokenizer.apply_chat_template(messages, variables={"messages": [], "bos_token": "x", "brief": True})


def test_no_chat_template(tmp_path):
    write_checkpoint(tmp_path / "base")
    with pytest.raises(CheckpointError, match="no chat template .*this is not a chat model"):
        Tokenizer(tmp_path / "base").apply_chat_template([{"role": "user", "content": "Hi"}])


def test_clean_up_tokenization_spaces_as_transformers_does(checkpoint, tmp_path):
    shutil.copytree(checkpoint, tmp_path, dirs_exist_ok=True)
    settings = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(settings | {"clean_up_tokenization_spaces": True}))
    tokenizer = Tokenizer(tmp_path)
    ids = tokenizer.encode("Yes , it is . It is n't , is it ?", add_special_tokens=False)
    assert tokenizer.decode(ids) == "Yes, it is. It isn't, is it?"


# ---- streaming ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", TEXTS)
def test_pieces_join_to_the_full_decode_and_no_character_is_split(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    pieces, tail = streamed(tokenizer, ids)
    assert "".join(pieces) + tail == tokenizer.decode(ids) == text
    assert all(REPLACEMENT not in piece for piece in pieces)


def test_a_character_over_several_tokens_is_held_back_until_complete(tokenizer):
    ids = tokenizer.encode("🤖", add_special_tokens=False)
    assert len(ids) > 1  # byte-level BPE: this emoji's 4 bytes are several tokens
    assert tokenizer.decode(ids[:1]).endswith(REPLACEMENT)
    pieces, tail = streamed(tokenizer, ids)
    assert pieces == [""] * (len(ids) - 1) + ["🤖"] and tail == ""


def test_a_cut_off_character_comes_out_at_the_end(tokenizer):
    ids = tokenizer.encode("a🤖", add_special_tokens=False)
    pieces, tail = streamed(tokenizer, ids[:-1])
    assert "".join(pieces) == "a" and tail.endswith(REPLACEMENT)


def test_sentencepiece_style_spaces_survive_streaming():
    plain = Plain(sentencepiece_style())
    for text in TEXTS:
        ids = plain.backend.encode(text, add_special_tokens=False).ids
        pieces, tail = streamed(plain, ids)
        assert "".join(pieces) + tail == plain.decode(ids)
        assert all(REPLACEMENT not in piece for piece in pieces)
        # after a prompt: the first word's space is kept, since the prompt's last tokens are decoded with it
        prompt = plain.backend.encode("Once upon", add_special_tokens=False).ids
        pieces, tail = streamed(plain, ids, context=prompt)
        assert "".join(pieces) + tail == plain.decode(prompt + ids)[len(plain.decode(prompt)):]


def test_the_models_stream_is_its_generated_text(checkpoint):
    lm = kuiper.llm.load(checkpoint, backend="numpy")
    prompt = "Once upon a time"
    pieces = list(lm.stream(prompt, max_new_tokens=24, temperature=1.0, seed=5))
    ids = lm.tokenizer.encode(prompt)
    new = lm.generate(ids, max_new_tokens=24, temperature=1.0, seed=5)
    assert "".join(pieces) == lm.tokenizer.decode(new, skip_special_tokens=True)
    assert all(pieces)  # only text is yielded, never an empty piece
