"""Lesson 21: Text to tokens. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 21`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or the definitions in the notes.
"""

import re
from collections import Counter

#: how the toy splits text into pieces before BPE sees it (merges never cross two pieces): a word with the space
#: before it, a run of other symbols with the space before it, or whitespace (a run followed by a word leaves its
#: last space to that word)
PIECES = re.compile(r" ?\w+| ?[^\s\w]+|\s+(?!\S)|\s+")

#: the bytes that byte-level BPE writes as themselves: printable ASCII and most of Latin-1
_PRINTABLE = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]

#: the 256 one-byte tokens in the order the `tokenizers` package numbers them: the printable bytes first (their
#: stand-in characters are themselves), then the others in byte order (their stand-ins are U+0100 onwards)
BYTE_ORDER = bytes(_PRINTABLE + [b for b in range(256) if b not in _PRINTABLE])


def learn_merges(text: str, n: int) -> list:
    """Byte-level BPE training on `text`: split it with PIECES, each piece into its UTF-8 bytes (one token per
    byte, `bytes` objects of length 1), then n times: count every adjacent pair of tokens in every piece, take
    the most frequent, merge all its occurrences (left to right) into one token, and record the pair. Ties go
    as the `tokenizers` package breaks them: to the pair whose left token has the smaller id, then the right
    token's; the one-byte tokens are numbered in BYTE_ORDER (0-255), each new token gets the next id when first
    made. Stops early when no piece has two tokens left. Returns [(left bytes, right bytes), ...] in the order
    learned. See course_notes/21-tokens.md, exercise 1."""
    raise NotImplementedError('lesson 21: write learn_merges() in exercises/lesson_21.py; '
                              'see course_notes/21-tokens.md, exercise 1')


def encode(text: str, merges: list) -> list:
    """The tokens of `text` under `merges` (what learn_merges returns): split with PIECES, each piece into its
    UTF-8 bytes, then in each piece merge, again and again, the adjacent pair that comes first in `merges`
    (its leftmost occurrence first), until no adjacent pair is a merge. Returns the tokens as `bytes`, in order;
    b"".join of them is text's UTF-8. See course_notes/21-tokens.md, exercise 2."""
    raise NotImplementedError('lesson 21: write encode() in exercises/lesson_21.py; '
                              'see course_notes/21-tokens.md, exercise 2')


def stream_text(pieces) -> list:
    """Text as it streams: `pieces` are the bytes of each token, in order; after each, return the characters that
    became complete and were not returned before (often "", since a token may end inside a UTF-8 character).
    One string per piece; the strings joined are the whole text decoded, when it is valid UTF-8.
    See course_notes/21-tokens.md, exercise 4."""
    raise NotImplementedError('lesson 21: write stream_text() in exercises/lesson_21.py; '
                              'see course_notes/21-tokens.md, exercise 4')
