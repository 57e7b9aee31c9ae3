"""Text to token ids and back, through the `tokenizers` package and the checkpoint's tokenizer.json.

tokenizer.json holds the whole pipeline a model was trained with: a normalizer (e.g. Unicode NFC), a
pre-tokenizer (splits text into words, and for byte-level BPE maps every byte to a printable character), the
model (BPE: merge the most frequent adjacent pair, again and again, in the order the merges were learned), a
post-processor (adds a BOS token where the model expects one) and a decoder (back to bytes, then UTF-8 text).
kuiper reads it with Hugging Face's `tokenizers` rather than a BPE of its own: the lesson on tokens explains the
algorithm on a toy; a real vocabulary's edge cases (Unicode, byte fallback, added tokens) are that library's.

tokenizer_config.json names the special tokens (bos_token, eos_token) and carries the chat template, a Jinja
program that lays out a conversation the way the model was fine-tuned to read it (transformers 5 writes it to
chat_template.jinja instead). It is rendered here with jinja2 in a sandbox, with the options transformers uses
(trim_blocks, lstrip_blocks).
"""

from __future__ import annotations

import json
from pathlib import Path

from kuiper.core.errors import CheckpointError, InputError

#: transformers' clean_up_tokenization: the spaces its decode removes before punctuation and contractions when a
#: tokenizer_config.json sets clean_up_tokenization_spaces
CLEANUPS = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
            (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


#: the names apply_chat_template gives the template itself
TEMPLATE_NAMES = ("messages", "add_generation_prompt", "bos_token", "eos_token", "raise_exception")


class Tokenizer:
    """encode(text) -> ids, decode(ids) -> text, the special tokens, and the chat template."""

    def __init__(self, directory, config=None):
        from tokenizers import Tokenizer as HFTokenizer

        directory = Path(directory)
        path = directory / "tokenizer.json"
        if not path.is_file():
            raise CheckpointError(f"{path}: not found (kuiper reads the tokenizer from tokenizer.json)")
        try:
            self.backend = HFTokenizer.from_file(str(path))
        except Exception as e:  # noqa: BLE001 (the library raises plain Exceptions for a malformed file)
            raise CheckpointError(f"{path}: not a readable tokenizer ({str(e).splitlines()[0] if str(e) else e})") \
                from None
        self.path = str(path)
        settings = _read_json(directory / "tokenizer_config.json")
        self.cleanup = settings.get("clean_up_tokenization_spaces") is True
        self.chat_template = _chat_template(directory, settings)
        self.bos_token = _token_text(settings.get("bos_token"))
        self.eos_token = _token_text(settings.get("eos_token"))
        self.bos_token_id = self._id(self.bos_token)
        if self.bos_token_id is None and config is not None:
            self.bos_token_id = config.bos_token_id
        eos = self._id(self.eos_token)
        self.eos_token_ids = () if eos is None else (eos,)
        if config is not None and self.vocab_size > config.vocab_size:
            raise CheckpointError(f"{path}: {self.vocab_size} tokens, more than the model's vocab_size of "
                                  f"{config.vocab_size} ({config.path})")

    def _id(self, token: str | None) -> int | None:
        return None if token is None else self.backend.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list:
        """The token ids of `text`, with the special tokens the tokenizer adds (a BOS, for many models)."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}")
        check_unicode(text)
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        text = self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
        if self.cleanup:
            for before, after in CLEANUPS:
                text = text.replace(before, after)
        return text

    def apply_chat_template(self, messages: list, add_generation_prompt: bool = True, variables=None) -> str:
        """The conversation as the model reads it: [{"role": "user", "content": "..."}, ...] rendered by the
        checkpoint's chat template, ending with the assistant's turn opened when `add_generation_prompt`.
        `variables` ({name: value}) are more names the template may read, as transformers passes its extra keyword
        arguments: Qwen3's reads `enable_thinking`, for one."""
        taken = sorted(set(variables or ()) & set(TEMPLATE_NAMES))
        if taken:
            raise InputError(f"chat template variables may not be named {', '.join(taken)}: the template gets those "
                             f"from the conversation")
        if self.chat_template is None:
            raise CheckpointError(f"{Path(self.path).parent}: no chat template (tokenizer_config.json's "
                                  f"chat_template or chat_template.jinja): this is not a chat model")
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                    extensions=["jinja2.ext.loopcontrols"])
        environment.globals["raise_exception"] = raise_exception
        try:
            template = environment.from_string(self.chat_template)
            return template.render(**(variables or {}), messages=messages, add_generation_prompt=add_generation_prompt,
                                   bos_token=self.bos_token or "", eos_token=self.eos_token or "")
        except jinja2.exceptions.TemplateError as e:
            raise CheckpointError(f"{Path(self.path).parent}: the chat template fails: {e}") from None


def check_unicode(text: str, what: str = "the text") -> None:
    """An InputError if `text` holds a lone surrogate (JSON's "\\ud800", or undecodable bytes read with Python's
    surrogateescape), which no tokenizer can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(f"{what} is not valid Unicode: U+{ord(text[e.start]):04X} at character {e.start} is half "
                         f"of a surrogate pair") from None


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def _token_text(value) -> str | None:
    """A special token as tokenizer_config.json gives it: a string, or an object with its `content`."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _chat_template(directory: Path, settings: dict) -> str | None:
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = settings.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"),
                        None)
    return template if isinstance(template, str) else None
