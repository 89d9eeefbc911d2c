"""Whitespace words of ASCII texts numbered by first occurrence, with no Python step per word.

`str.split()` then a dict lookup per token is most of aligned BLEU's text path (bench: two thirds
of it at 256 texts x 1,024 words). Compiled (`text.compiled`): one pass over the texts' bytes and
a hash table over the words' bytes. The numpy twin, which gives the same numbers: a word of at
most 7 bytes is first read as its own integer (an unaligned 8-byte load at its start, masked to
its length; below 2^56 and 0 bytes excluded, so equal words give equal integers and different
words different ones), a longer word as 2^56 + its number in a dict of the long words (Python
per long word only); then the integers are numbered by first occurrence.

Only for text `str.split()` would split the same way byte by byte: ASCII, no NUL, and not holding
the separator joined in between texts (ASCII file separator, whitespace to `str.split`); `None`
otherwise, and the caller tokenizes as usual.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpu_neighbors.text.compiled import native

SEPARATOR = "\x1c"  # whitespace to str.split, not expected inside a text
LONG_WORD_IDS = 1 << 56  # the numpy pass's integers of words of 8 bytes or more start here
# The ASCII characters str.split() splits at (str.isspace).
_SPACE = np.zeros(256, dtype=bool)
_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True


@dataclass(frozen=True)
class NumberedWords:
    """The texts' words numbered by first occurrence: `ids` (int64, concatenated: equal words get
    equal numbers, from 0 up), each text's word count, and where in `joined` each distinct
    word first occurs (characters starts[number]..ends[number] - 1)."""

    ids: np.ndarray
    counts: np.ndarray
    joined: str
    starts: np.ndarray
    ends: np.ndarray

    @property
    def distinct(self) -> int:
        return len(self.starts)

    def words(self) -> list[str]:
        """The distinct words, in order of their numbers."""
        joined = self.joined
        return [joined[start:end] for start, end in zip(self.starts.tolist(), self.ends.tolist())]


def word_ids(texts: Sequence[str]) -> NumberedWords | None:
    """Every text's `str.split()` words numbered by first occurrence; None where the texts are
    not ASCII, hold a NUL or the separator."""
    empty = np.zeros(0, dtype=np.int64)
    if not texts:
        return NumberedWords(empty, empty, "", empty, empty)
    joined = SEPARATOR.join(texts)
    if not joined.isascii() or "\x00" in joined or joined.count(SEPARATOR) != len(texts) - 1:
        return None
    if native is not None:
        most = (len(joined) + 1) // 2
        ids, starts, ends = (np.empty(most, dtype=np.int64) for _ in range(3))
        counts = np.empty(len(texts), dtype=np.int64)
        words, distinct = native.number_words(np.frombuffer(joined.encode("ascii"), dtype=np.uint8), ord(SEPARATOR),
                                              ids, counts, starts, ends)
        return NumberedWords(ids[:words], counts, joined, starts[:distinct], ends[:distinct])
    integers, counts, word_starts, word_ends = _word_integers(joined)
    distinct_integers, firsts, inverse = np.unique(integers, return_index=True, return_inverse=True)
    number = np.empty(distinct_integers.size, dtype=np.int64)
    number[np.argsort(firsts)] = np.arange(distinct_integers.size)
    first_words = np.sort(firsts)
    return NumberedWords(number[inverse.reshape(-1)], counts, joined, word_starts[first_words],
                         word_ends[first_words])


def _word_integers(joined: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each word's integer (equal exactly for equal words; module docstring), each text's word
    count, and where each word starts and ends, of ASCII texts joined by the separator."""
    data = np.frombuffer(joined.encode("ascii") + bytes(8), dtype=np.uint8)  # 8 zero bytes: loads stay inside
    size = len(joined)
    space = np.ones(size + 2, dtype=np.int8)  # a space before and after: the boundaries pair up
    below = data[:size] <= 32
    if (below & ~_SPACE[:33][np.minimum(data[:size], 32)]).any():  # a control character that is no space
        space[1:-1] = _SPACE[data[:size]]
    else:
        space[1:-1] = below
    boundaries = np.flatnonzero(np.diff(space))  # word starts and ends, alternately
    starts, ends = boundaries[0::2], boundaries[1::2]
    separators = np.flatnonzero(data[:size] == ord(SEPARATOR))
    counts = np.diff(np.searchsorted(starts, separators), prepend=0, append=len(starts)).astype(np.int64)
    lengths = ends - starts
    loads = np.ndarray(shape=(size,), dtype="<u8", buffer=data, strides=(1,))  # 8 bytes from each byte
    masks = np.left_shift(np.uint64(1), np.minimum(8 * lengths, 56).astype(np.uint64)) - np.uint64(1)  # 8+: below
    ids = (loads[starts] & masks).view(np.int64)
    long_words = np.flatnonzero(lengths >= 8)
    if len(long_words):
        words = [joined[start:end] for start, end in zip(starts[long_words].tolist(), ends[long_words].tolist())]
        numbers = {word: index for index, word in enumerate(dict.fromkeys(words))}
        ids[long_words] = LONG_WORD_IDS + np.fromiter(map(numbers.__getitem__, words), dtype=np.int64,
                                                      count=len(words))
    return ids, counts, starts, ends
