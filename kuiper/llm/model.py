"""A language model on kuiper's graph: load a checkpoint directory, then prefill and decode.

    lm = kuiper.llm.load("path/to/model_dir")            # backend="auto", "numpy", "reference" or "opencl"
    ids = lm.tokenizer.encode("Once upon a time")
    logits = lm.logits(ids)                              # (len(ids), vocab): one prefill, from an empty cache
    new = lm.generate(ids, max_new_tokens=32)            # greedy; temperature=, top_k=, top_p=, seed=
    for piece in lm.stream("Once upon a time", temperature=0.8, top_p=0.95, seed=0): print(piece, end="")

Loading checks before it allocates: config.json (config.py), every tensor's presence, shape and dtype in the
safetensors files (weights.py), the tokenizer (tokenizer.py), then the memory the weights (held in float32 by
the layers) and the KV cache need, against the graph's memory limit. Then kuiper writes the decoder's graph
(decoder.py), and RuntimeGraph reads and builds it like any .pnnx.param.

Generation is two kinds of forward through that one graph. Prefill runs the n prompt tokens at positions
0..n-1 as one batch, filling every layer's KV cache; each decode step runs one token at the next position,
attending to the cache. The graph keeps a plan per input shape, so decode steps reuse one plan.

The KV cache is paged (paged.py): a pool of blocks in every attention layer, of `context` positions unless
cache_tokens= asks for more, shared out by one allocator. generate(), logits() and stream() run one sequence,
`sequence`; forward_packed() runs the new tokens of many sequences in one forward, as a server does
(scheduler.py), each in the blocks of its own table. Where the backend replays the forwards of a plan met before
(`replays`: OpenCL), forward_packed pads the tokens up to a few lengths (paged.py: bucket), so that a server's
steps meet few lengths, and the pool holds one block more, where the padding rows keep their keys.
"""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kuiper.core.errors import CheckpointError, ConfigError, InputError, MemoryLimitError
from kuiper.layers.cached_attention import CachedAttention
from kuiper.llm.config import generation_eos, read_config
from kuiper.llm.decoder import decoder_param
from kuiper.llm.paged import BLOCK_SIZE, BUCKETS, BlockPool, Sequence, blocks_for, bucket, pack
from kuiper.llm.quantize import QuantizedWeights, check_scheme
from kuiper.llm.sampling import SamplingOptions, generator, next_token
from kuiper.llm.streaming import TextStream
from kuiper.llm.tokenizer import Tokenizer
from kuiper.llm.weights import CheckpointWeights, expected_tensors
from kuiper.runtime import memory
from kuiper.runtime.graph import RuntimeGraph

#: the positions the KV cache holds unless context= says otherwise (and the model allows as many): long
#: contexts (Llama 3.1's 131072) would hold gigabytes of cache that a course's prompts never use
DEFAULT_CONTEXT = 4096


@dataclass
class Timings:
    """The last generation's two phases: prefill (the prompt, one forward) and decode (one forward a token)."""

    prefill_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_tokens: int = 0
    decode_seconds: float = 0.0

    @staticmethod
    def rate(tokens: int, seconds: float) -> float:
        return tokens / seconds if seconds > 0 else 0.0

    @property
    def prefill_rate(self) -> float:
        return self.rate(self.prefill_tokens, self.prefill_seconds)

    @property
    def decode_rate(self) -> float:
        return self.rate(self.decode_tokens, self.decode_seconds)


def load(path, backend: str = "auto", device: str | None = None, precision: str = "fp32", context: int | None = None,
         memory_limit=None, cache_tokens: int | None = None, quantize: str | None = None) -> "LanguageModel":
    """Load a Hugging Face checkpoint directory (config.json, model.safetensors or shards, tokenizer.json).
    context: the positions a sequence may reach (default: the model's max_position_embeddings, at most
    DEFAULT_CONTEXT); cache_tokens: the positions the KV cache's pool holds for all sequences together (default
    and at least: context), in whole blocks; memory_limit: as RuntimeGraph's; quantize="int8": every Linear's
    weights int8 with a scale per 32 inputs, quantized as the model loads (quantize.py). backend="auto": as
    kuiper.load's, this machine's fastest (kuiper/runtime/auto.py); `lm.graph.backend` says which it became."""
    return LanguageModel(path, backend, device, precision, context, memory_limit, cache_tokens, quantize)


class LanguageModel:
    def __init__(self, path, backend="auto", device=None, precision="fp32", context=None, memory_limit=None,
                 cache_tokens=None, quantize=None):
        self.quantize = check_scheme(quantize)
        self.directory = Path(path)
        if not self.directory.is_dir():
            raise CheckpointError(f"{self.directory}: not a directory (a Hugging Face model directory holds "
                                  f"config.json, model.safetensors and tokenizer.json)")
        self.config = config = read_config(self.directory)
        self.weights = CheckpointWeights(self.directory)
        if config.tie_word_embeddings:
            self.weights.tie("lm_head.weight", "model.embed_tokens.weight")
        self.weights.check(expected_tensors(config))
        self.tokenizer = Tokenizer(self.directory, config)
        eos = generation_eos(self.directory)
        self.eos_token_ids = frozenset(eos if eos is not None else config.eos_token_ids or
                                       self.tokenizer.eos_token_ids)
        self.context = self._context(context)
        if cache_tokens is not None and (isinstance(cache_tokens, bool) or not isinstance(cache_tokens, int)
                                         or cache_tokens < 1):
            raise ConfigError(f"cache_tokens={cache_tokens!r}: give a whole number >= 1")
        #: the pool's blocks: room for one sequence of the whole context at least
        self.cache_blocks = blocks_for(max(cache_tokens or 0, self.context))
        self.param_text = decoder_param(config, self.context, lambda name: self.weights.entry(name).dtype, quantize)
        self.graph = RuntimeGraph(self.directory / "decoder.pnnx.param", backend=backend, device=device,
                                  precision=precision, memory_limit=memory_limit, text=self.param_text,
                                  weights=QuantizedWeights(self.weights) if quantize else self.weights).init()
        #: the block the padding rows of a packed step use, past the allocator's: only where forwards replay, and
        #: the context holds a block (the padding sits at its positions)
        self.scratch = self.cache_blocks if self.graph.executor.replays and self.context >= BLOCK_SIZE else None
        if self.scratch is not None:  # a plan for every bucket besides those the graph keeps anyway: a plan dropped
            self.graph.max_plans += len(BUCKETS)  # and met again walks, then is recorded anew, several walks' time
        self._check_memory()
        self.graph.build()
        self.attention = [op.layer for op in self.graph.order if isinstance(op.layer, CachedAttention)]
        for layer in self.attention:
            layer.use_pool(self.pool_blocks)
        self.blocks = BlockPool(self.cache_blocks)
        self.sequence = Sequence(self.blocks)  # the one generate(), logits() and stream() run
        self._head = next(op.layer for op in self.graph.order if op.name == "lm_head")
        # the ids are checked here before each forward (_packed), so that OpenCL need not read them back
        self._embedding = next(op.layer for op in self.graph.order if op.name == "model.embed_tokens")
        self._embedding.ids_checked = True
        self.last_timings = Timings()

    def _context(self, context) -> int:
        config = self.config
        limit = min(config.max_position_embeddings, config.sliding_window or config.max_position_embeddings)
        if context is None:
            return min(limit, DEFAULT_CONTEXT)
        if isinstance(context, bool) or not isinstance(context, int) or not 1 <= context <= limit:
            why = "sliding_window" if limit < config.max_position_embeddings else "max_position_embeddings"
            raise ConfigError(f"context={context!r}: give a whole number from 1 to {limit} (the model's {why}, "
                              f"{config.path})")
        return context

    @property
    def pool_blocks(self) -> int:
        """The blocks of every attention layer's pool: the allocator's, and the padding's (`scratch`)."""
        return self.cache_blocks + (self.scratch is not None)

    @property
    def parameters(self) -> int:
        """Weights in the checkpoint (a tied lm_head counted once)."""
        return sum(int(np.prod(self.weights.entry(name).shape)) for name in expected_tensors(self.config))

    def _check_memory(self) -> None:
        """The weights as the layers hold them (float32, int8 where quantized) and the KV cache, against the memory
        limit, before building the graph allocates either."""
        weights = sum(int(np.prod(a.shape)) * (1 if a.dtype == "i8" else 4)
                      for op in self.graph.operators for a in op.attrs.values())
        positions = self.pool_blocks * BLOCK_SIZE
        cache = self.config.kv_cache_bytes_per_token() * positions
        needed, limit = weights + cache, self.graph.memory_limit
        if needed > limit:
            raise MemoryLimitError(
                f"{self.config.path}: the weights in {'int8 and float32' if self.quantize else 'float32'} "
                f"({memory.format_bytes(weights)}) and a KV cache of {positions} positions "
                f"({memory.format_bytes(cache)}) need {memory.format_bytes(needed)}, over the memory limit of "
                f"{memory.format_bytes(limit)} (memory_limit=, {memory.ENV}; cache_tokens= or context= shrinks the "
                f"cache)")

    # ---- forward: prefill and decode ----------------------------------------------------------------------
    def reset(self) -> None:
        """Forget the sequence the KV caches hold for generate(): its blocks go back to the pool."""
        self.sequence.release()

    def forward(self, ids, start: int) -> np.ndarray:
        """One graph forward: the logits (len(ids), vocab) for these tokens at positions start, start + 1, ...,
        continuing `sequence` (start = 0 begins a new one, a start before its length rewinds to there)."""
        ids = [int(i) for i in ids]
        if not 0 <= start <= self.sequence.length or start + len(ids) > self.context:
            raise InputError(f"positions {start}..{start + len(ids) - 1}: a forward starts at most at "
                             f"{self.sequence.length} (the positions the cache holds) and ends within the "
                             f"{self.context} positions of the context")
        self.sequence.length = start
        # not padded: one sequence's decode steps are one plan already, and a prefill that generates computes
        # the last row alone (last_row_only), which padding rows would follow
        return self._packed([(self.sequence, ids)], False, 0)[0]

    def forward_packed(self, entries, last_rows: bool = False) -> list:
        """One graph forward for the new tokens of several sequences, [(Sequence, ids), ...], each continuing
        its sequence (paged.py): their logits, a (len(ids), vocab) array each, the sequences advanced. Each
        sequence attends to its own positions only, so its logits are those of a forward of it alone.
        last_rows=True: each sequence's last row alone, (vocab,), all a step samples from; lm_head then computes
        those rows alone (`gather_rows`). With a `scratch` block, the tokens are padded up to their bucket."""
        count = sum(len(ids) for _, ids in entries)
        padded = bucket(count) if self.scratch is not None else 0
        return self._packed(entries, last_rows, padded if padded <= self.cache_blocks * BLOCK_SIZE else 0)

    def _packed(self, entries, last_rows: bool, padded: int) -> list:
        tokens, positions, layout = pack(entries, padded, self.scratch)
        self._embedding.check_ids(tokens, self.config.vocab_size)
        for layer in self.attention:
            layer.use(layout)
        ends = np.cumsum([len(ids) for _, ids in entries])
        self._head.gather_rows = ends - 1 if last_rows else None
        try:
            (logits,) = self.graph.forward(tokens, positions)
        finally:
            self._head.gather_rows = None
        for sequence, ids in entries:
            sequence.length += len(ids)
        if last_rows:
            return list(logits[0, :len(entries)])
        return np.split(logits[0, :ends[-1]], ends[:-1])

    def _prompt(self, ids) -> list:
        if isinstance(ids, str):
            raise InputError("the prompt is text: give its token ids (tokenizer.encode(text)), or stream(text)")
        try:  # ints and numpy's integers; not floats, which int() would cut
            ids = [operator.index(i) for i in ids]
        except TypeError:
            raise InputError(f"the prompt must be token ids, whole numbers; got {str(ids)[:60]}") from None
        if not ids:
            raise InputError("the prompt has no tokens")
        if len(ids) > self.context:
            raise InputError(f"the prompt has {len(ids)} tokens, more than the {self.context} positions of the "
                             f"context (context=, at most the model's max_position_embeddings of "
                             f"{self.config.max_position_embeddings})")
        return ids

    def logits(self, ids) -> np.ndarray:
        """(len(ids), vocab) float32: the next-token logits after each prefix of `ids`, in one prefill."""
        self.reset()
        return self.forward(self._prompt(ids), 0)

    def tokens(self, ids, max_new_tokens: int = 32, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
               seed: int | None = None):
        """An iterator over the new token ids: prefill, then a decode step per token, until an end-of-sequence
        token (not yielded), max_new_tokens, or the end of the context. The options and the prompt are checked
        now, before the first token is asked for."""
        options = SamplingOptions(temperature, top_k, top_p)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ConfigError(f"max_new_tokens={max_new_tokens!r}: give a whole number >= 0")
        return self._tokens(self._prompt(ids), max_new_tokens, options, generator(seed))

    def _tokens(self, ids: list, max_new_tokens: int, options: SamplingOptions, rng):
        timings = self.last_timings = Timings()
        self.reset()
        started = time.perf_counter()
        logits = self._last_logits(ids)
        timings.prefill_tokens, timings.prefill_seconds = len(ids), time.perf_counter() - started
        position = len(ids)
        for count in range(1, max_new_tokens + 1):
            token = next_token(logits, options, rng)
            if token in self.eos_token_ids:
                return
            yield token
            if count == max_new_tokens or position == self.context:
                return
            started = time.perf_counter()
            logits = self.forward([token], position)[-1]
            timings.decode_tokens += 1
            timings.decode_seconds += time.perf_counter() - started
            position += 1

    def _last_logits(self, ids) -> np.ndarray:
        """The prefill's last row of logits, the only one generation reads: lm_head computes that row alone."""
        self._head.last_row_only = True
        try:
            return self.forward(ids, 0)[-1]
        finally:
            self._head.last_row_only = False

    def generate(self, ids, max_new_tokens: int = 32, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                 seed: int | None = None) -> list:
        """The new token ids (the prompt's not included)."""
        return list(self.tokens(ids, max_new_tokens, temperature, top_k, top_p, seed))

    def stream(self, prompt, max_new_tokens: int = 32, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
               seed: int | None = None):
        """An iterator over the generated text, piece by piece as it decodes (streaming.py). `prompt` is text
        (encoded with the tokenizer's special tokens) or a list of token ids."""
        ids = self._prompt(self.tokenizer.encode(prompt) if isinstance(prompt, str) else prompt)
        return self._pieces(TextStream(self.tokenizer, ids),
                            self.tokens(ids, max_new_tokens, temperature, top_k, top_p, seed))

    @staticmethod
    def _pieces(text: TextStream, tokens):
        for token in tokens:
            piece = text.push(token)
            if piece:
                yield piece
        tail = text.finish()
        if tail:
            yield tail

    def __repr__(self):
        c = self.config
        return (f"LanguageModel({self.directory.name}: {c.model_type}, {c.num_hidden_layers} layers, "
                f"{self.parameters:,} parameters, {self.graph.backend})")
