"""The byte-level BPE tokenizer that tools/make_llm_checkpoints.py and tools/train_llm.py train.

Imported by those two tools (they run as `python tools/NAME.py`, which puts tools/ on sys.path); needs
the `tokenizers` and `transformers` packages. Its layout is the one Llama 3 and Qwen2 ship in their
tokenizer.json:

    normalizer      NFC
    pre_tokenizer   Split on SPLIT_PATTERN (Llama 3's pattern, matches kept as pieces), then ByteLevel
                    with use_regex=false (bytes mapped to printable characters, GPT-2's table)
    model           BPE over those characters, merges in rank order, no unk token
    post_processor  TemplateProcessing: BOS before the text when special tokens are added
    decoder         ByteLevel (characters back to bytes, bytes decoded as UTF-8)

Special tokens come first in the vocabulary (ids 0..4), in the order of SPECIAL_TOKENS.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

BOS, EOS, IM_START, IM_END, PAD = "<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>", "<|pad|>"
SPECIAL_TOKENS = [BOS, EOS, IM_START, IM_END, PAD]

SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# ChatML turns, after BOS; the generation prompt opens the assistant's turn.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def train_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int = 2):
    """A `tokenizers.Tokenizer` trained on `texts`: the 256 byte characters, SPECIAL_TOKENS and merges
    up to `vocab_size` entries in all."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    return tok


def wrap(tok, model_max_length: int):
    """transformers' fast tokenizer around `tok`, with the special tokens and the chat template set."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[IM_START, IM_END],
        chat_template=CHAT_TEMPLATE,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
        add_bos_token=True,
    )


def save(hf_tok, directory: Path, jinja_file: bool = False) -> None:
    """tokenizer.json and tokenizer_config.json; the chat template inside tokenizer_config.json, or in
    chat_template.jinja beside it when `jinja_file` (transformers 5 writes that file by default; hub
    checkpoints have either)."""
    hf_tok.save_pretrained(str(directory), save_jinja_files=jinja_file)
