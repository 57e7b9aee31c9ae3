"""Continuous batching: one loop steps every running generation together, one graph forward per step.

A server meets requests one at a time, at any moment, each with its own prompt and length. Running them one
after the other would leave the hardware to one sequence's decode step, a row of activations against every
weight of the model, memory-bound. The scheduler instead keeps a set of running generations and at each step
packs into one forward (LanguageModel.forward_packed):

* one token of every generation that is decoding (its last sampled token, at its next position);
* a chunk of the prompt of every generation still in prefill, as far as `step_tokens` allows.

Each linear layer then multiplies a (tokens, hidden) matrix by its weights: the weights read once serve every
sequence. Between steps, waiting requests are admitted, up to `max_batch` running, if the KV cache can promise
them their worst case (prompt + max_tokens positions, in blocks); finished or cancelled generations leave at
once and give their blocks back. Blocks are taken as a sequence grows (paged.py), so the memory held follows the
tokens, and the promise means a running generation never waits for memory.

The forwards run in the scheduler's thread, and the numpy backend holds BLAS at one thread during a forward
(kuiper/cpu/threads.py: `active`). OpenBLAS told so from a thread other than the main one runs that thread's
products several times slower (measured in docs/serve.md), so the scheduler opens that span in the thread that
makes it, for as long as it runs, and the forwards in its own thread find BLAS held already.

Each generation samples from its own logits with its own random generator (sampling.py), so its tokens do not
depend on what else is in the batch: greedy ones are those of LanguageModel.generate for the same prompt, and
seeded ones too. Its text goes out piece by piece (streaming.py), held back where it might be the start of a
stop string.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque

import numpy as np

from kuiper.core.errors import InputError, KuiperError
from kuiper.cpu import threads
from kuiper.llm.paged import BLOCK_SIZE, Sequence, blocks_for
from kuiper.llm.sampling import SamplingOptions, generator, next_token
from kuiper.llm.streaming import TextStream


class QueueFull(KuiperError):
    """The scheduler's queue of waiting requests is full: try again later."""


class Generation:
    """One request: the prompt's ids, its options, and what has been generated. `deliver(piece, finish)` is
    called from the scheduler's thread with each piece of text, then once with the finish reason ("stop" at an
    end-of-sequence token or a stop string, "length" at max_tokens or the end of the context, "cancelled", or
    "error" if its step or its sampling failed)."""

    def __init__(self, ids, max_tokens: int, options: SamplingOptions = SamplingOptions(), seed: int | None = None,
                 stop=(), deliver=None):
        self.ids, self.max_tokens, self.options, self.stop = list(ids), max_tokens, options, tuple(stop)
        self.rng = generator(seed)
        self.deliver = deliver or (lambda piece, finish: None)
        self.tokens = []            # the sampled tokens (an end-of-sequence token not included)
        self.sequence = None        # its blocks and length, once admitted
        self.fed = 0                # the prompt's tokens in the cache so far
        self.next = None            # the token the next decode step feeds
        self.finish_reason = None
        self.cancelled = False
        self.text = None            # its TextStream, from the first token sampled
        self.held = ""              # text held back: it might begin a stop string

    @property
    def promised(self) -> int:
        """The blocks its longest sequence needs (the last token sampled is never fed back)."""
        return blocks_for(len(self.ids) + self.max_tokens - 1)

    def text_out(self, piece: str, final: bool) -> bool:
        """Deliver what of `piece` cannot begin a stop string (all of it when `final`); True at a stop string."""
        text = self.held + piece
        found = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        if found:
            self.held = ""
            if min(found):
                self.deliver(text[:min(found)], None)
            return True
        keep = 0 if final else max((n for s in self.stop for n in range(1, len(s)) if text.endswith(s[:n])),
                                   default=0)
        self.held = text[len(text) - keep:] if keep else ""
        if len(text) > keep:
            self.deliver(text[:len(text) - keep], None)
        return False


class Scheduler:
    """Runs generations on `lm` in a thread of its own: submit() queues one (at most `max_queue` waiting, else
    QueueFull), cancel() ends one, close() stops the loop. The callables in `delivered` are called in its thread
    after each turn of the loop (admission and a step) has delivered its pieces, and after the last."""

    def __init__(self, lm, max_batch: int = 16, max_queue: int = 64, step_tokens: int = 256):
        for name, value in (("max_batch", max_batch), ("max_queue", max_queue), ("step_tokens", step_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name}={value!r}: give a whole number >= 1")
        self.lm, self.max_batch, self.max_queue, self.step_tokens = lm, max_batch, max_queue, step_tokens
        self.waiting, self.running = deque(), []
        self.promised = 0  # blocks promised to the running generations
        self.steps = 0
        self.error = None  # the last error that ended generations (a step's, or one's sampling), for /health
        self.delivered = []
        self.wake = threading.Condition()
        self.closing = False
        self.span = threads.active()
        self.span.__enter__()
        self.thread = threading.Thread(target=self._loop, name="kuiper-scheduler", daemon=True)
        self.thread.start()

    # ---- from any thread ---------------------------------------------------------------------------------
    def check(self, prompt_tokens: int, max_tokens: int) -> None:
        """An InputError if a request of this size can never run: past the context, or the cache's pool."""
        lm = self.lm
        if prompt_tokens < 1:
            raise InputError("the prompt has no tokens")
        if max_tokens < 1:
            raise InputError(f"the prompt's {prompt_tokens} tokens leave no room for a reply in the model's context "
                             f"of {lm.context} positions")
        if prompt_tokens + max_tokens > lm.context:
            raise InputError(f"the prompt's {prompt_tokens} tokens and max_tokens={max_tokens} make "
                             f"{prompt_tokens + max_tokens}, more than the model's context of {lm.context} positions")
        if blocks_for(prompt_tokens + max_tokens - 1) > lm.blocks.blocks:
            raise InputError(f"the prompt's {prompt_tokens} tokens and max_tokens={max_tokens} need more than the KV "
                             f"cache's {lm.blocks.blocks * BLOCK_SIZE} positions in flight")

    def submit(self, generation: Generation) -> Generation:
        self.check(len(generation.ids), generation.max_tokens)
        with self.wake:
            if self.closing:
                raise QueueFull("the server is shutting down")
            if len(self.waiting) >= self.max_queue:
                raise QueueFull(f"{len(self.waiting)} requests are waiting already (the queue holds "
                                f"{self.max_queue})")
            self.waiting.append(generation)
            self.wake.notify()
        return generation

    def cancel(self, generation: Generation) -> None:
        """End a generation (its client left): its blocks go back before the next step."""
        with self.wake:
            generation.cancelled = True
            self.wake.notify()

    def close(self) -> None:
        with self.wake:
            self.closing = True
            self.wake.notify()
        self.thread.join()
        if self.span is not None:
            self.span.__exit__(None, None, None)
            self.span = None

    def load(self) -> dict:
        """What the scheduler holds now, for /health."""
        blocks = self.lm.blocks
        return {"running": len(self.running), "waiting": len(self.waiting), "steps": self.steps,
                "kv_blocks_held": blocks.held, "kv_blocks": blocks.blocks, "last_error": self.error}

    # ---- the loop --------------------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while True:
                with self.wake:
                    while not self.closing and not self.running and not self.waiting:
                        self.wake.wait()
                    if self.closing:
                        break
                    self._admit()
                try:
                    self._step()
                except Exception as e:  # noqa: BLE001 (a failed step ends its generations, not the server)
                    self._failed(e)
                    for generation in list(self.running):
                        self._leave(generation, "error", flush=False)
                self._tell()
        finally:
            with self.wake:
                for generation in itertools.chain(self.running, self.waiting):
                    self._finish(generation, "cancelled")
                self.running, self.waiting = [], deque()
            self._tell()

    def _failed(self, e: Exception) -> None:
        self.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

    def _tell(self) -> None:
        for call in self.delivered:
            call()

    def _admit(self) -> None:
        """Move waiting generations to running while there is room in the batch and the pool (under the lock)."""
        for generation in [g for g in self.waiting if g.cancelled]:
            self.waiting.remove(generation)
            self._finish(generation, "cancelled")
        while self.waiting and len(self.running) < self.max_batch:
            generation = self.waiting[0]
            if self.promised + generation.promised > self.lm.blocks.blocks:
                break  # first come, first served: the next one waits for blocks to come back
            self.waiting.popleft()
            generation.sequence = Sequence(self.lm.blocks)
            self.promised += generation.promised
            self.running.append(generation)

    def _step(self) -> None:
        """One forward for every running generation, then a token for each one whose prompt is all in."""
        for generation in [g for g in self.running if g.cancelled]:
            self._leave(generation, "cancelled")
        entries, budget = [], self.step_tokens
        for generation in self.running:
            if generation.next is not None:
                entries.append((generation, [generation.next]))
                budget -= 1
        for generation in self.running:
            if generation.next is None and budget > 0:
                chunk = generation.ids[generation.fed:generation.fed + budget]
                entries.append((generation, chunk))
                budget -= len(chunk)
        if not entries:
            return
        rows = self.lm.forward_packed([(g.sequence, ids) for g, ids in entries], last_rows=True)
        self.steps += 1
        for (generation, ids), logits in zip(entries, rows):
            if generation.next is None:
                generation.fed += len(ids)
                if generation.fed < len(generation.ids):
                    continue  # more of the prompt to come
            try:
                self._sample(generation, logits)
            except Exception as e:  # noqa: BLE001 (its own sampling or text failed: it ends, the batch goes on)
                self._failed(e)
                if generation in self.running:
                    self._leave(generation, "error", flush=False)

    def _sample(self, generation: Generation, logits: np.ndarray) -> None:
        token = next_token(logits, generation.options, generation.rng)
        if generation.text is None:
            generation.text = TextStream(self.lm.tokenizer, generation.ids)
        if token in self.lm.eos_token_ids:
            self._leave(generation, "stop")
            return
        generation.tokens.append(token)
        if generation.text_out(generation.text.push(token), final=False):
            self._leave(generation, "stop", flush=False)
        elif len(generation.tokens) == generation.max_tokens or generation.sequence.length == self.lm.context:
            self._leave(generation, "length")
        else:
            generation.next = token

    def _leave(self, generation: Generation, reason: str, flush: bool = True) -> None:
        """The generation ends: the rest of its text out, its blocks back, out of the batch."""
        if flush and reason != "cancelled" and generation.text is not None:
            if generation.text_out(generation.text.finish(), final=True):
                reason = "stop"
        with self.wake:
            self.promised -= generation.promised
            self.running.remove(generation)
        self._finish(generation, reason)

    @staticmethod
    def _finish(generation: Generation, reason: str) -> None:
        """Its blocks back (if it held any), and the finish reason to its client."""
        if generation.sequence is not None:
            generation.sequence.release()
        generation.finish_reason = reason
        generation.deliver("", reason)
