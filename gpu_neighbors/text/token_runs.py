"""The `str.split()` tokens of many texts read from their code points, with no Python per token:
the typicality statistics' tokens for the whitespace tokenizer (`text.typicality`), whose
per-token lookups, string sorts and joins held the GIL longest of the host path's work.

A token is a maximal run of non-space code points (`text.characters`, which follows
`str.isspace`), so the texts' tokens, in order, are their non-space code points cut into runs.
Each run gets a 63-bit polynomial hash of its code points (wrapping uint64 arithmetic, from one
running sum over the batch: a run's terms are its slice of the sum, moved to its start by the
base's inverse, which exists mod 2^64 as the base is odd). Equal tokens have equal hashes, and
every match a hash suggests is checked code point by code point, so the answers are exact:
- a vocabulary token's id: the vocabulary's hashes are distinct (`RunVocabulary.of` returns None
  otherwise), so a run has at most one candidate, which counts where its code points are the
  same;
- the distinct tokens the vocabulary lacks: runs grouped by hash, each checked against its
  group's first; a group holding two different tokens makes the batch unanswerable here (None),
  and the caller tokenizes it as before.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpu_neighbors.text.characters import SPACE, WORD, CodePoints, classes
from gpu_neighbors.text.compiled import native
from gpu_neighbors.text.key_index import KeyIndex
from gpu_neighbors.text.vocabulary import UNKNOWN_ID

_BASE = 0x100000001B3  # odd (FNV-1's prime), so invertible mod 2^64
_INVERSE = pow(_BASE, -1, 1 << 64)
_LOW_63 = np.uint64((1 << 63) - 1)


@dataclass(frozen=True)
class Runs:
    """Tokens as runs of a flat code point array: token t is codes[firsts[t]:firsts[t] + lengths[t]],
    and `of_code[i]` is the token of code point i."""

    codes: np.ndarray
    firsts: np.ndarray
    lengths: np.ndarray
    of_code: np.ndarray

    @classmethod
    def of(cls, codes: np.ndarray, lengths: np.ndarray) -> Runs:
        """Runs of `lengths` (each >= 1) covering `codes` in order."""
        firsts = np.cumsum(lengths) - lengths
        marks = np.zeros(codes.size, dtype=np.int64)
        marks[firsts[1:]] = 1  # lengths >= 1: distinct positions
        return cls(codes, firsts, lengths, np.cumsum(marks))

    def hashes(self) -> np.ndarray:
        """int64 >= 0 per run: sum of (code + 1) * BASE^(place in the run), mod 2^63."""
        size = self.codes.size
        if not self.lengths.size:
            return np.zeros(0, dtype=np.int64)
        with np.errstate(over="ignore"):
            powers = np.empty(size, dtype=np.uint64)
            powers[0] = 1
            np.cumprod(np.full(size - 1, _BASE, dtype=np.uint64), out=powers[1:])
            inverses = np.empty(size, dtype=np.uint64)
            inverses[0] = 1
            np.cumprod(np.full(size - 1, _INVERSE, dtype=np.uint64), out=inverses[1:])
            running = np.zeros(size + 1, dtype=np.uint64)
            np.cumsum((self.codes.astype(np.uint64) + np.uint64(1)) * powers, out=running[1:])
            sums = (running[self.firsts + self.lengths] - running[self.firsts]) * inverses[self.firsts]
        return (sums & _LOW_63).astype(np.int64)

    def strings(self, chosen: np.ndarray) -> list[str]:
        """The tokens of runs `chosen`, as strings (one decoding for all; lone surrogates kept)."""
        lengths = self.lengths[chosen]
        starts = np.repeat(self.firsts[chosen] - (np.cumsum(lengths) - lengths), lengths)
        joined = self.codes[starts + np.arange(starts.size)].astype("<u4").tobytes().decode("utf-32-le",
                                                                                              "surrogatepass")
        ends = np.cumsum(lengths).tolist()
        return [joined[start:end] for start, end in zip([0, *ends[:-1]], ends)]

    def same_as(self, candidates: np.ndarray, valid: np.ndarray, other: Runs) -> np.ndarray:
        """Per run: whether `valid` and its code points are those of run `candidates[i]` of
        `other`."""
        if not other.lengths.size:
            return np.zeros(self.lengths.size, dtype=bool)
        same = valid & (self.lengths == other.lengths[np.where(valid, candidates, 0)])
        if not self.codes.size:
            return same
        token = self.of_code
        checked = same[token]
        partner = other.firsts[np.where(same, candidates, 0)][token] + (np.arange(self.codes.size) - self.firsts[token])
        differ = checked & (self.codes != other.codes[np.where(checked, partner, 0)])
        same[np.bincount(token[differ], minlength=self.lengths.size) > 0] = False
        return same


@dataclass(frozen=True)
class RunVocabulary:
    """Vocabulary tokens (in id order) as code point runs, found by their hashes."""

    runs: Runs
    index: KeyIndex  # over the sorted hashes
    ids: np.ndarray  # the token id of each sorted hash

    @classmethod
    def of(cls, tokens: Sequence[str]) -> RunVocabulary | None:
        """None where two of the tokens share a hash (or a token is empty or holds a space:
        no such token comes out of a split)."""
        points = CodePoints.of(list(tokens))
        lengths = np.diff(points.bounds)
        if (lengths == 0).any() or (classes(points.codes) & SPACE).any():
            return None
        runs = Runs.of(points.codes, lengths)
        hashes = runs.hashes()
        order = np.argsort(hashes, kind="stable")
        ordered = hashes[order]
        if (ordered[1:] == ordered[:-1]).any():
            return None
        return cls(runs, KeyIndex(ordered), order.astype(np.int64))


@dataclass(frozen=True)
class SplitTokens:
    """The tokens of texts: per token its vocabulary id (UNKNOWN_ID where the vocabulary lacks it),
    its rank among the batch's distinct unknown tokens (-1 for known ones) and whether it holds a
    word character; the distinct unknown tokens by rank; per text its token count and the code
    point ending its last token (-1: no token); the tokens' code points, in order, text t's from
    code_bounds[t] to code_bounds[t + 1]."""

    ids: np.ndarray
    unknown_rank: np.ndarray
    unknown_tokens: list[str]
    wordlike: np.ndarray
    lengths: np.ndarray
    endings: np.ndarray
    codes: np.ndarray
    code_bounds: np.ndarray

    @property
    def code_rows(self) -> np.ndarray:
        """The text of each of `codes`."""
        return np.repeat(np.arange(self.lengths.size, dtype=np.int64), np.diff(self.code_bounds))


def split_tokens(texts: Sequence[str], vocabulary: RunVocabulary) -> SplitTokens | None:
    """`str.split()` of every text, looked up in `vocabulary`; None where two different tokens
    the vocabulary lacks share a hash. In one compiled pass per text where the install built
    it (`text.compiled`: the same answers), else by numpy's passes."""
    points = CodePoints.of(list(texts))
    kinds = classes(points.codes)
    if native is not None:
        return _compiled_split(points, kinds, vocabulary)
    inside = (kinds & SPACE) == 0
    cuts = points.runs(inside)
    runs = Runs.of(points.codes[inside], cuts.lengths)
    hashes = runs.hashes()
    found = vocabulary.index.find(hashes)
    candidate = vocabulary.ids[np.maximum(found, 0)] if vocabulary.ids.size else np.zeros_like(found)
    known = runs.same_as(candidate, found >= 0, vocabulary.runs)
    ids = np.where(known, candidate, UNKNOWN_ID)
    unknown = np.flatnonzero(~known)
    _, first, rank = np.unique(hashes[unknown], return_index=True, return_inverse=True)
    rank = rank.reshape(-1)
    leaders = np.zeros(ids.size, dtype=np.int64)
    leaders[unknown] = unknown[first][rank]  # each unknown token's group's first token
    if not runs.same_as(leaders, ~known, runs)[unknown].all():  # the known ones matched the vocabulary
        return None
    unknown_rank = np.full(ids.size, -1, dtype=np.int64)
    unknown_rank[unknown] = rank
    unknown_tokens = runs.strings(unknown[first])
    words = np.zeros(runs.codes.size + 1, dtype=np.int64)
    np.cumsum((kinds[inside] & WORD) > 0, out=words[1:])
    wordlike = words[runs.firsts + runs.lengths] > words[runs.firsts]
    lengths = cuts.per_text.astype(np.int64)
    endings = np.full(lengths.size, -1, dtype=np.int64)
    some = lengths > 0
    last = (np.cumsum(lengths) - 1)[some]
    endings[some] = runs.codes[runs.firsts[last] + runs.lengths[last] - 1]
    inside_before = np.zeros(points.codes.size + 1, dtype=np.int64)  # the code points inside before each position
    np.cumsum(inside, out=inside_before[1:])
    return SplitTokens(ids, unknown_rank, unknown_tokens, wordlike, lengths, endings, runs.codes,
                       inside_before[points.bounds])


def _compiled_split(points: CodePoints, kinds: np.ndarray, vocabulary: RunVocabulary) -> SplitTokens | None:
    """`split_tokens` by `native.split_words` (the same tokens, ids, ranks and strings)."""
    assert native is not None
    texts = points.bounds.size - 1
    capacity = (points.codes.size + texts) // 2  # tokens at most: each but a text's last followed by a space
    ids, rank = np.empty(capacity, dtype=np.int64), np.empty(capacity, dtype=np.int64)
    wordlike = np.empty(capacity, dtype=np.uint8)
    firsts, lengths = np.empty(2 * capacity, dtype=np.int64), np.empty(2 * capacity, dtype=np.int64)
    per_text, endings = np.empty(texts, dtype=np.int64), np.empty(texts, dtype=np.int64)
    codes, code_bounds = np.empty(points.codes.size, dtype=np.int64), np.empty(texts + 1, dtype=np.int64)
    runs = vocabulary.runs
    tokens, distinct = native.split_words(points.codes, kinds, WORD, SPACE, points.bounds, _BASE, int(_LOW_63),
                                          runs.codes, runs.firsts,
                                          runs.lengths, *vocabulary.index.arrays(), vocabulary.ids, ids, rank,
                                          wordlike, firsts, lengths, per_text, endings, codes, code_bounds)
    if tokens < 0:
        return None
    inside = int(firsts[tokens - 1] + lengths[tokens - 1]) if tokens else 0
    codes = codes[:inside]
    leaders = Runs(codes, firsts[tokens:tokens + distinct], lengths[tokens:tokens + distinct], np.zeros(0, np.int64))
    return SplitTokens(ids[:tokens], rank[:tokens], leaders.strings(np.arange(distinct)), wordlike[:tokens].view(bool),
                       per_text, endings, codes, code_bounds)
