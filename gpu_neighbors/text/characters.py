"""A chunk of texts as one array of code points, split into runs of a character class, with no
Python per character or per token: the TF-IDF analyzers' words and tokens (`text.tfidf`).

The classes are the standard library's own: a regex `\\w` is `str.isalnum() or "_"` (`re`'s
SRE_UNI_IS_WORD), and `str.split()` cuts at `str.isspace()`. They are asked of Python once per
distinct code point and kept in a table indexed by code point (filled as new ones appear), so a
chunk's classes are one array lookup. A run of a class within one text is what the token pattern
`\\b\\w+\\b` matches (a maximal run of word characters: the pattern's boundaries are where the
class changes), or what `str.split()` returns (a maximal run of non-space characters).
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

WORD, SPACE = 1, 2  # class bits
_CLASSES = np.full(sys.maxunicode + 1, -1, dtype=np.int8)  # per code point: its bits, -1 until asked


def classes(codes: np.ndarray) -> np.ndarray:
    """The class bits (int8) of every code point."""
    found = _CLASSES[codes]
    unknown = found < 0
    if unknown.any():
        for code in np.unique(codes[unknown]).tolist():
            char = chr(code)
            _CLASSES[code] = (WORD if char.isalnum() or char == "_" else 0) | (SPACE if char.isspace() else 0)
        found = _CLASSES[codes]
    return found


@dataclass(frozen=True)
class Runs:
    """Maximal runs of one class, in text order: run r is codes[starts[r]:starts[r] + lengths[r]];
    `per_text[t]` runs belong to text t."""

    starts: np.ndarray
    lengths: np.ndarray
    per_text: np.ndarray

    @property
    def texts(self) -> np.ndarray:
        """The text of every run."""
        return np.repeat(np.arange(self.per_text.size, dtype=np.int64), self.per_text)


@dataclass(frozen=True)
class CodePoints:
    """Texts joined into one int64 array of code points; text t is codes[bounds[t]:bounds[t + 1]]."""

    codes: np.ndarray
    bounds: np.ndarray

    @classmethod
    def of(cls, texts: Sequence[str]) -> CodePoints:
        return cls._joined("".join(texts), texts)

    @classmethod
    def lowered(cls, texts: Sequence[str]) -> CodePoints:
        """`of` the texts lower-cased (`str.lower`, each alone): where they are all ASCII, by one
        `str.lower` of them joined, which is the same there (an ASCII letter lowers to one
        letter, whatever is beside it), without a call per text."""
        joined = "".join(texts)
        if joined.isascii():
            return cls._joined(joined.lower(), texts)
        lowered = [text.lower() for text in texts]  # a final sigma or a longer lowering: text by text
        return cls._joined("".join(lowered), lowered)

    @classmethod
    def _joined(cls, joined: str, texts: Sequence[str]) -> CodePoints:
        """Those of `texts`, given them joined."""
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        if joined.isascii():  # one byte per code point (a string knows whether it is ASCII)
            units = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
        else:  # one 4-byte unit per code point
            units = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        return cls(units.astype(np.int64), np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(lengths)]))

    def runs(self, inside: np.ndarray) -> Runs:
        """The maximal runs of positions where `inside` holds, cut at the ends of texts."""
        size = self.codes.size
        begins = np.zeros(size + 1, dtype=bool)
        begins[self.bounds] = True  # begins[p]: a text begins at p (p = size: past the end)
        padded = np.zeros(size + 2, dtype=bool)
        padded[1:-1] = inside  # padded[p]: position p - 1 is inside; padded[p + 2]: p + 1 is
        opens = inside & ~(padded[:-2] & ~begins[:-1])  # the one before is outside, or in another text
        closes = inside & ~(padded[2:] & ~begins[1:])  # the one after likewise
        starts = np.flatnonzero(opens)
        lengths = np.flatnonzero(closes) + 1 - starts
        opened = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(opens, out=opened[1:])
        return Runs(starts, lengths, np.diff(opened[self.bounds]))
