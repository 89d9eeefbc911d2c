"""The word list behind the spelling statistic: which tokens it judges, and how."""
from __future__ import annotations

import sys

import pytest

from gpu_neighbors.core.validation import WORD_LISTS
from gpu_neighbors.text.lexicon import NO_LIST, is_unlisted, letter_runs, unlisted_table, words


@pytest.mark.parametrize(("token", "runs"), [
    ("Restaurant.", ["restaurant"]), ("(teh)", ["teh"]), ("«Tallinn»", ["tallinn"]), ("don't", ["don", "t"]),
    ("societ.y", ["societ", "y"]), ("covid-19", ["covid"]), ("3pm", ["pm"]), ("x²y", ["x", "y"]), ("--", []),
    ("42", []), ("", []), ("cafe\u0301", ["café"]), ("Ünïcödé!", ["ünïcödé"]), ("\ud800ab", ["ab"]),
])
def test_a_tokens_words_are_its_runs_of_letters_lower_cased_and_composed(token, runs):
    assert letter_runs(token) == runs


def test_misspelt_and_mangled_words_are_unlisted_and_real_ones_are_not():
    listed = ["The", "restaurant", "restaurants,", "served", "Cambridge", "aardvark's", "A", "don't", "e-mail"]
    unlisted = ["teh", "resturant", "rseatuarnt", "qzxv", "Fitzbilies", "societ.y", "(resturant)"]
    assert not any(is_unlisted(token, "en") for token in listed)
    assert all(is_unlisted(token, "en") for token in unlisted)
    assert not any(is_unlisted(token, "en") for token in ["42", "#", "3.14", "😀", ""])  # no letter: never judged
    assert unlisted_table(["teh", None, "the"], "en").tolist() == [True, False, False]


def test_each_language_has_its_own_list_and_none_judges_nothing():
    german = ["Straße", "Häuser", "schön", "und"]
    assert not any(is_unlisted(token, "de") for token in german)
    assert all(is_unlisted(token, "en") for token in ["Straße", "Häuser"])
    assert is_unlisted("Strasze", "de") and is_unlisted("restaurnat", "fr")
    assert unlisted_table(["teh", "qzxv", None], NO_LIST).tolist() == [False, False, False]


def test_every_language_offered_has_a_list_of_lower_case_words():
    """The settings' choices (`core.validation.WORD_LISTS`) are pyspellchecker's languages."""
    assert WORD_LISTS[-1] == NO_LIST and WORD_LISTS[0] == "en"
    for language in WORD_LISTS[:-1]:
        listed = words(language)
        assert len(listed) > 10_000, language
        assert all(word == word.lower() for word in list(listed)[:1000]), language


def test_without_pyspellchecker_the_error_says_what_to_do(monkeypatch):
    monkeypatch.setitem(sys.modules, "spellchecker", None)  # an import of it fails
    words.cache_clear()
    try:
        with pytest.raises(ImportError, match=r"pip install pyspellchecker, or turn it off with Intervals\(words='none'\)"):
            words("en")
    finally:
        words.cache_clear()
