"""The words of a language: what tells a misspelt or mangled word from a new one.

A word no training text holds is common in real text (a name, a rarer inflection, another
topic's term), so the training set alone cannot tell "resturant" from "Tallinn"; a dictionary
of the language can. The typicality statistic `spelling` (`text.typicality`) counts a text's
tokens that no other training text holds and that are *misspelt*: one of their words, the runs
of letters between other characters (lower-cased, NFC), is not a word of the list but one edit
from one (a letter deleted, inserted or replaced, or two adjacent letters swapped: most
misspellings are one such edit: Damerau, 1964, "A technique for computer detection and correction
of spelling errors"), and has at least MIN_LETTERS letters. A name is
seldom one edit from a word ("tallinn", "mourinho"), while most strings of three letters or fewer
are (abbreviations and units: "km", "mln", "abn"), so neither counts: against 160 headlines both
were flagged as often as typos. So "restaurant." and "don't" are listed, "resturant," and
"societ.y" (a swap across punctuation) misspelt, and a token without a letter never: the list
cannot judge it.

The lists are pyspellchecker's word frequency lists, by language (`en`, the default: 160,572
words at version 0.9.1, inflections and names included); `NO_LIST` holds no word and judges no
token. In texts of another language than the list's some words are one edit from a listed one
by chance, and as many in the training texts their statistic is compared with (`core.outside`
ranks a text among them), so there the statistic says little and flags no more than its level.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from functools import cache, lru_cache
from itertools import groupby

import numpy as np

NO_LIST = "none"
MIN_LETTERS = 4  # shorter runs of letters are one edit from some word whatever they are


@cache
def words(language: str) -> frozenset[str]:
    """The language's list of words, lower-case (read once, on first use: about 0.1 s)."""
    try:
        from spellchecker import SpellChecker
    except ImportError:
        raise ImportError("the spelling statistic reads pyspellchecker's word lists: pip install pyspellchecker, "
                          "or turn it off with Intervals(words='none') (--words none)") from None
    return frozenset(SpellChecker(language=language, distance=1).word_frequency.dictionary)


def letter_runs(token: str) -> list[str]:
    """The token's words as the list spells them: its maximal runs of letters (`str.isalpha`),
    lower-cased, after NFC composition (so that a decomposed accent stays in its word)."""
    composed = unicodedata.normalize("NFC", token).lower()
    return ["".join(run) for is_letter, run in groupby(composed, str.isalpha) if is_letter]


@cache
def letters(language: str) -> str:
    """Every letter the language's list uses: what an edit may insert or put in place."""
    return "".join(sorted({letter for word in words(language) for letter in word}))


@cache
def longest(listed: frozenset[str]) -> int:
    """The length of the longest word of `listed` (0 for none)."""
    return max(map(len, listed), default=0)


def one_edit_from(run: str, listed: frozenset[str], alphabet: str) -> bool:
    """Whether a word of `listed` is `run` with one letter deleted, inserted or replaced, or
    two adjacent letters swapped (the cheap edits tried first). A run longer than every listed
    word by two or more is one edit from none: its edits (quadratic in its length, gigabytes for
    a run of a few thousand letters) are never made."""
    if len(run) > longest(listed) + 1:
        return False
    splits = [(run[:cut], run[cut:]) for cut in range(len(run) + 1)]
    edits = (
        lambda: {left + right[1:] for left, right in splits if right},
        lambda: {left + right[1] + right[0] + right[2:] for left, right in splits if len(right) > 1},
        lambda: {left + letter + right[1:] for left, right in splits if right for letter in alphabet},
        lambda: {left + letter + right for left, right in splits for letter in alphabet},
    )
    return any(not listed.isdisjoint(made() - {run}) for made in edits)


@lru_cache(maxsize=1 << 16)
def is_misspelt(token: str, language: str) -> bool:
    """Whether one of the token's letter runs of at least MIN_LETTERS letters is not a word of
    the language's list but one edit from one (never with `NO_LIST`; remembered for the most
    recent 65,536 tokens: a batch's unseen tokens are mostly the last batch's)."""
    if language == NO_LIST:
        return False
    listed, alphabet = words(language), letters(language)
    return any(len(run) >= MIN_LETTERS and run not in listed and one_edit_from(run, listed, alphabet)
               for run in letter_runs(token))


def misspelt_table(tokens: Iterable[str | None], language: str) -> np.ndarray:
    """bool per token (None: a token without a name, never misspelt)."""
    return np.array([isinstance(token, str) and is_misspelt(token, language) for token in tokens], dtype=bool)
