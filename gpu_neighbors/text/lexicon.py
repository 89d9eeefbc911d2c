"""The words of a language: what tells a misspelt or mangled word from a new one.

A word no training text holds is common in real text (a name, a rarer inflection, another
topic's term), so the training set alone cannot tell "resturant" from "Tallinn"; a dictionary
of the language can. The typicality statistic `spelling` (`text.typicality`) counts a text's
tokens that no other training text holds and that are *unlisted*: their word form (lower-cased,
without leading and trailing punctuation) is all letters and not a word of the list. Tokens with
digits, inner punctuation or no letter are never unlisted: the list cannot judge them.

The list is English: pyspellchecker's word frequency list (its `en` resource, 160,572 words at
version 0.9.1, inflections and names included). Texts of another language have most of their
words unlisted, and so do the training texts their statistic is compared with (`core.outside`
ranks a text among them), so there the statistic says little and flags no more than its level.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache, lru_cache

import numpy as np

LANGUAGE = "en"
_EDGES = re.compile(r"^\W+|\W+$")


@cache
def words() -> frozenset[str]:
    """The list's words, lower-case (read once, on first use: about 0.1 s)."""
    from spellchecker import SpellChecker

    return frozenset(SpellChecker(language=LANGUAGE, distance=1).word_frequency.dictionary)


def word_form(token: str) -> str | None:
    """The token lower-cased without leading and trailing non-word characters, where that is all
    letters; None where the list cannot judge it."""
    form = _EDGES.sub("", token.lower())
    return form if form.isalpha() else None


@lru_cache(maxsize=1 << 16)
def is_unlisted(token: str) -> bool:
    """Whether the token's word form is letters the list does not hold (remembered for the most
    recent 65,536 tokens: a batch's unseen tokens are mostly the last batch's)."""
    form = word_form(token)
    return form is not None and form not in words()


def unlisted_table(tokens: Iterable[str | None]) -> np.ndarray:
    """bool per token (None: a token without a name, never unlisted)."""
    return np.array([isinstance(token, str) and is_unlisted(token) for token in tokens], dtype=bool)
