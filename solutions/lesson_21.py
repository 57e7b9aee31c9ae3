"""Lesson 21: Text to tokens. Reference solutions."""

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
    pieces = [[bytes([b]) for b in piece.encode("utf-8")] for piece in PIECES.findall(text)]
    ids = {bytes([b]): i for i, b in enumerate(BYTE_ORDER)}
    merges = []
    for _ in range(n):
        counts = Counter()
        for piece in pieces:
            counts.update(zip(piece, piece[1:]))
        if not counts:
            break
        pair = max(counts, key=lambda p: (counts[p], -ids[p[0]], -ids[p[1]]))
        merges.append(pair)
        ids.setdefault(pair[0] + pair[1], len(ids))
        pieces = [_merge(piece, pair) for piece in pieces]
    return merges


def _merge(piece: list, pair: tuple) -> list:
    out, i = [], 0
    while i < len(piece):
        if i + 1 < len(piece) and (piece[i], piece[i + 1]) == pair:
            out.append(piece[i] + piece[i + 1])
            i += 2
        else:
            out.append(piece[i])
            i += 1
    return out


def encode(text: str, merges: list) -> list:
    """The tokens of `text` under `merges` (what learn_merges returns): split with PIECES, each piece into its
    UTF-8 bytes, then in each piece merge, again and again, the adjacent pair that comes first in `merges`
    (its leftmost occurrence first), until no adjacent pair is a merge. Returns the tokens as `bytes`, in order;
    b"".join of them is text's UTF-8. See course_notes/21-tokens.md, exercise 2."""
    rank = {pair: r for r, pair in enumerate(merges)}
    tokens = []
    for piece in PIECES.findall(text):
        parts = [bytes([b]) for b in piece.encode("utf-8")]
        while len(parts) > 1:
            best = min(zip(parts, parts[1:]), key=lambda p: rank.get(p, len(rank)))
            if best not in rank:
                break
            parts = _merge(parts, best)
        tokens += parts
    return tokens


def stream_text(pieces) -> list:
    """Text as it streams: `pieces` are the bytes of each token, in order; after each, return the characters that
    became complete and were not returned before (often "", since a token may end inside a UTF-8 character).
    One string per piece; the strings joined are the whole text decoded, when it is valid UTF-8.
    See course_notes/21-tokens.md, exercise 4."""
    held, out = b"", []
    for piece in pieces:
        held += piece
        cut = len(held)
        for back in range(1, min(4, len(held)) + 1):  # the last character's lead byte is at most 4 bytes back
            byte = held[-back]
            if byte & 0xC0 != 0x80:  # not a continuation byte (10xxxxxx): the lead byte
                length = 1 if byte < 0x80 else 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
                if length > back:
                    cut = len(held) - back  # the last character is not complete yet: hold its bytes back
                break
        out.append(held[:cut].decode("utf-8"))
        held = held[cut:]
    return out
