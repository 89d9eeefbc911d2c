"""Degenerate copies of texts: the checklist's probes and the raw material of negative evidence.

A good quality metric rates a shuffled, repeated or word-salad copy of a good text well below
the text itself (Sai et al. 2021's perturbation checklists); a neighbour-based one need not,
since a training set of real outputs holds no degenerate text. These copies measure that.

Every copy is seeded and order-free: it depends only on the seed, the perturbation's name, the
text and, for the random-word ones, the vocabulary (as a set: it is sorted once), never on the
text's position in a batch or on the other texts, so a text perturbed inside a training set and
alone gets the same copy. Its random numbers come from a numpy Generator seeded with the seed
and a BLAKE2b digest of (name, text).

Texts are read as whitespace-separated words and copies written with single spaces. A copy
differs from its original (as a word sequence) wherever the perturbation can make it differ;
where it cannot, the copy is the original's words unchanged: an empty or whitespace-only text
under every perturbation, and per perturbation the cases its docstring names (a one-word text
under shuffling, for one).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

PHRASE_WORDS = 3  # `repeated` repeats the text's first three words (the probe)
DROP_SHARE = 0.3  # share of the words `dropped` removes
REPLACE_SHARE = 1 / 3  # share of the words `replaced` swaps for random vocabulary words
WORDS_PER_SWAP = 3  # `char_swaps` swaps one pair of adjacent characters per three words


@dataclass(frozen=True)
class WordPool:
    """The vocabulary random words are drawn from: distinct words, sorted, so that a copy does
    not depend on the order the words were given in."""

    words: tuple[str, ...]
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {word: i for i, word in enumerate(self.words)})

    @classmethod
    def of(cls, words: Iterable[str]) -> WordPool:
        return cls(tuple(sorted(set(words))))

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> WordPool:
        """Every whitespace-separated word of `texts` (e.g. the training texts)."""
        return cls.of(word for text in texts for word in text.split())

    def __len__(self) -> int:
        return len(self.words)

    def draw_other(self, word: str, rng: np.random.Generator) -> str:
        """A uniform pool word other than `word` (any pool word when `word` is not in it; `word`
        itself when it is the pool's only word)."""
        own = self._index.get(word)
        if own is None:
            return self.words[int(rng.integers(len(self.words)))]
        if len(self.words) == 1:
            return word
        drawn = int(rng.integers(len(self.words) - 1))
        return self.words[drawn + (drawn >= own)]


EMPTY_POOL = WordPool(())

Perturbation = Callable[[list[str], np.random.Generator, WordPool], list[str]]


def shuffled(words: list[str], rng: np.random.Generator, pool: WordPool) -> list[str]:
    """The words in a random order other than the original; unchanged where every word is the
    same (one word, or "a a a")."""
    if len(set(words)) < 2:
        return list(words)
    while True:  # a draw equals the original with probability at most 1/2
        copy = [words[i] for i in rng.permutation(len(words))]
        if copy != words:
            return copy


def repeated(words: list[str], rng: np.random.Generator, pool: WordPool) -> list[str]:
    """The first three words repeated to the text's length (the first n - 1 of a shorter text,
    so that "good food" becomes "good good"); unchanged where the text already repeats them
    (one word, "a b c a b c")."""
    if not words:
        return []
    phrase = words[:max(1, min(PHRASE_WORDS, len(words) - 1))]
    return [phrase[i % len(phrase)] for i in range(len(words))]


def dropped(words: list[str], rng: np.random.Generator, pool: WordPool) -> list[str]:
    """A random 30% of the words removed (at least one, never all); unchanged for one word."""
    if len(words) < 2:
        return list(words)
    count = min(len(words) - 1, max(1, round(DROP_SHARE * len(words))))
    gone = set(rng.choice(len(words), size=count, replace=False).tolist())
    return [word for i, word in enumerate(words) if i not in gone]


def truncated(words: list[str], rng: np.random.Generator, pool: WordPool) -> list[str]:
    """The first half of the words (rounded down, at least one); unchanged for one word."""
    return words[:max(1, len(words) // 2)]


def replaced(words: list[str], rng: np.random.Generator, pool: WordPool) -> list[str]:
    """A random third of the words (at least one) each replaced by another pool word."""
    if not words:
        return []
    count = max(1, round(REPLACE_SHARE * len(words)))
    chosen = set(rng.choice(len(words), size=count, replace=False).tolist())
    return [pool.draw_other(word, rng) if i in chosen else word for i, word in enumerate(words)]


def salad(words: list[str], rng: np.random.Generator, pool: WordPool) -> list[str]:
    """Word salad: every word replaced by another pool word (as many words as the text)."""
    return [pool.draw_other(word, rng) for word in words]


def duplicated(words: list[str], rng: np.random.Generator, pool: WordPool) -> list[str]:
    """The whole text twice."""
    return words + words


def char_swaps(words: list[str], rng: np.random.Generator, pool: WordPool) -> list[str]:
    """Typos: one pair of adjacent, different characters inside a word swapped per three words
    (at least one pair; disjoint pairs, so the copy always differs); unchanged where no word has
    two adjacent different characters ("a", "aa bb")."""
    text = " ".join(words)
    candidates = [i for i in range(len(text) - 1)
                  if text[i] != " " and text[i + 1] != " " and text[i] != text[i + 1]]
    wanted = max(1, round(len(words) / WORDS_PER_SWAP))
    chosen: set[int] = set()
    for position in rng.permutation(candidates).tolist() if candidates else []:
        if len(chosen) == wanted:
            break
        if not chosen & {position - 1, position + 1}:
            chosen.add(position)
    characters = list(text)
    for i in chosen:
        characters[i], characters[i + 1] = characters[i + 1], characters[i]
    return "".join(characters).split()


def reversed_words(words: list[str], rng: np.random.Generator, pool: WordPool) -> list[str]:
    """The words in reverse order; unchanged where they read the same backwards (one word)."""
    return words[::-1]


PERTURBATIONS: Mapping[str, Perturbation] = MappingProxyType({
    "shuffled": shuffled,
    "repeated": repeated,
    "dropped": dropped,
    "truncated": truncated,
    "replaced": replaced,
    "salad": salad,
    "duplicated": duplicated,
    "char_swaps": char_swaps,
    "reversed": reversed_words,
})
NEEDS_VOCABULARY = frozenset({"replaced", "salad"})  # the ones that draw pool words


def generator(seed: int, name: str, text: str) -> np.random.Generator:
    """The random numbers of one copy: from the seed and a digest of (name, text) alone."""
    digest = hashlib.blake2b(f"{name}\0{text}".encode("utf-8", "surrogatepass"), digest_size=16).digest()
    return np.random.default_rng([seed, *np.frombuffer(digest, dtype=np.uint32).tolist()])


def perturb(texts: Sequence[str], name: str, *, seed: int = 0,
            vocabulary: WordPool | Iterable[str] = EMPTY_POOL) -> list[str]:
    """The `name` perturbation of every text (see PERTURBATIONS); `vocabulary` is the words the
    random-word perturbations draw from (e.g. `WordPool.from_texts(training_texts)`)."""
    if name not in PERTURBATIONS:
        raise ValueError(f"unknown perturbation {name!r}: choose from {', '.join(PERTURBATIONS)}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, not {seed!r}")
    pool = vocabulary if isinstance(vocabulary, WordPool) else WordPool.of(vocabulary)
    if name in NEEDS_VOCABULARY and not len(pool):
        raise ValueError(f"the {name!r} perturbation draws random words: give it a non-empty vocabulary")
    change = PERTURBATIONS[name]
    return [" ".join(change(text.split(), generator(seed, name, text), pool)) for text in texts]


def all_copies(texts: Sequence[str], *, seed: int = 0, vocabulary: WordPool) -> tuple[list[str], np.ndarray]:
    """Every perturbation's copy of every text (perturbation by perturbation), with the position
    in `texts` of each copy's original: the negative evidence's degenerate texts."""
    copies = [copy for name in PERTURBATIONS for copy in perturb(texts, name, seed=seed, vocabulary=vocabulary)]
    return copies, np.tile(np.arange(len(texts)), len(PERTURBATIONS))
