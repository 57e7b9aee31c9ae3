"""Text as it is generated, one piece per token, never half a character.

Decoding one token at a time does not work: a byte-level BPE token may hold half of a UTF-8 character (an emoji
is 4 bytes, often 2 tokens), and a SentencePiece-style token's leading space depends on what comes before it.
What works is to decode a window of the ids and emit what is new:

    prefix_text = decode(ids[prefix:read])     # what was already emitted, decoded in context
    text        = decode(ids[prefix:])         # the same window, with the new ids
    if text ends in U+FFFD (the replacement character: an incomplete UTF-8 sequence), wait for more ids;
    else emit text[len(prefix_text):], and move the window: prefix = read, read = len(ids)

The window stays a few tokens long, so each step decodes a few tokens, not the whole text. `finish()` emits
whatever is held back at the end (a replacement character the model really produced, or a cut-off one).
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"
#: tokens of context before the first new one, so that it decodes as it would within the text
CONTEXT = 4


class TextStream:
    """Feed token ids with push(); each returns the text that became certain (often "", sometimes several
    characters)."""

    def __init__(self, tokenizer, context_ids=(), skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids = list(context_ids)
        self.read = len(self.ids)                  # ids before this are emitted (or context)
        self.prefix = max(self.read - CONTEXT, 0)  # where the decoded window starts

    def _decode(self, ids) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def push(self, token: int) -> str:
        self.ids.append(int(token))
        return self._emit(final=False)

    def finish(self) -> str:
        return self._emit(final=True)

    def _emit(self, final: bool) -> str:
        if self.read == len(self.ids):
            return ""
        before = self._decode(self.ids[self.prefix:self.read])
        text = self._decode(self.ids[self.prefix:])
        if not final and (text.endswith(REPLACEMENT) or len(text) <= len(before)):
            return ""  # an incomplete character (or nothing visible yet): wait for the next token
        self.prefix, self.read = self.read, len(self.ids)
        return text[len(before):]
