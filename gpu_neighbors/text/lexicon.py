"""The words of a language: what tells a misspelt or mangled word from a new one.

A word no training text holds is common in real text (a name, a rarer inflection, another
topic's term), so the training set alone cannot tell "resturant" from "Tallinn"; a dictionary
of the language can. The typicality statistic `spelling` (`text.typicality`) counts a text's
tokens that no other training text holds and that are *unlisted*: one of their words, the runs
of letters between other characters (lower-cased, NFC), is not a word of the list. So
"restaurant." and "don't" are listed, "resturant," and "societ.y" (a swap across punctuation)
are not, and a token without a letter is never unlisted: the list cannot judge it.

The lists are pyspellchecker's word frequency lists, by language (`en`, the default: 160,572
words at version 0.9.1, inflections and names included); `NO_LIST` holds no word and judges no
token. Texts of another language than the list's have most of their words unlisted, and so do
the training texts their statistic is compared with (`core.outside` ranks a text among them), so
there the statistic says little and flags no more than its level.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from functools import cache, lru_cache
from itertools import groupby

import numpy as np

NO_LIST = "none"


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


@lru_cache(maxsize=1 << 16)
def is_unlisted(token: str, language: str) -> bool:
    """Whether one of the token's letter runs is not a word of the language's list (never with
    `NO_LIST`; remembered for the most recent 65,536 tokens: a batch's unseen tokens are mostly
    the last batch's)."""
    if language == NO_LIST:
        return False
    listed = words(language)
    return any(run not in listed for run in letter_runs(token))


def unlisted_table(tokens: Iterable[str | None], language: str) -> np.ndarray:
    """bool per token (None: a token without a name, never unlisted)."""
    return np.array([isinstance(token, str) and is_unlisted(token, language) for token in tokens], dtype=bool)
