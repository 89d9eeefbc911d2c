"""The word list behind the spelling statistic: which tokens it judges, and how."""
from __future__ import annotations

import sys

import pytest

from gpu_neighbors.core.validation import WORD_LISTS
from gpu_neighbors.text.lexicon import NO_LIST, is_misspelt, letter_runs, misspelt_table, one_edit_from, words


@pytest.mark.parametrize(("token", "runs"), [
    ("Restaurant.", ["restaurant"]), ("(teh)", ["teh"]), ("«Tallinn»", ["tallinn"]), ("don't", ["don", "t"]),
    ("societ.y", ["societ", "y"]), ("covid-19", ["covid"]), ("3pm", ["pm"]), ("x²y", ["x", "y"]), ("--", []),
    ("42", []), ("", []), ("cafe\u0301", ["café"]), ("Ünïcödé!", ["ünïcödé"]), ("\ud800ab", ["ab"]),
])
def test_a_tokens_words_are_its_runs_of_letters_lower_cased_and_composed(token, runs):
    assert letter_runs(token) == runs


def test_a_word_one_edit_from_a_listed_one_is_misspelt_and_real_words_and_names_are_not():
    listed = ["The", "restaurant", "restaurants,", "served", "Cambridge", "aardvark's", "A", "don't", "e-mail"]
    # a letter deleted, inserted, replaced; two swapped; across punctuation; in brackets; capitalised
    misspelt = ["resturant", "restaurannt", "restaurent", "retsaurant", "societ.y", "(resturant)", "Sevred"]
    names = ["Tallinn", "Mourinho", "Fitzbillies", "qzxv", "rseatuarnt"]  # not one edit from any listed word
    short = ["teh", "km", "abn", "mln"]  # three letters or fewer: one edit from some word whatever they are
    assert not any(is_misspelt(token, "en") for token in listed + names + short)
    assert all(is_misspelt(token, "en") for token in misspelt)
    assert not any(is_misspelt(token, "en") for token in ["42", "#", "3.14", "😀", ""])  # no letter: never judged
    assert misspelt_table(["resturant", None, "the", "Tallinn"], "en").tolist() == [True, False, False, False]


@pytest.mark.parametrize(("run", "edit"), [("resturant", "deleted"), ("restaurannt", "inserted"),
                                           ("restaurent", "replaced"), ("retsaurant", "swapped")])
def test_each_kind_of_edit_is_one_edit(run, edit):
    listed, alphabet = frozenset({"restaurant"}), "abcdefghijklmnopqrstuvwxyz"
    assert one_edit_from(run, listed, alphabet), edit
    assert not one_edit_from("restaurant", listed, alphabet)  # the word itself is no edit
    assert not one_edit_from("rseturant", listed, alphabet)  # two edits


def test_a_run_longer_than_every_listed_word_is_judged_without_making_its_edits():
    """A token of 8,000 letters took 10 s and 3 GB (every edit of it was made: quadratic in its
    length), and one of 100,000 letters had the process killed for memory."""
    longest_word = max(map(len, words("en")))
    assert not one_edit_from("x" * 100_000, words("en"), "abc")
    assert not is_misspelt("y" * 100_000, "en")
    word = max(words("en"), key=len)
    assert one_edit_from(word + "q", words("en"), "abc") and len(word) == longest_word  # the bound is exact
    assert not one_edit_from(word + "qq", frozenset({word}), "abc")


def test_each_language_has_its_own_list_and_none_judges_nothing():
    german = ["Straße", "Häuser", "schön", "und"]
    assert not any(is_misspelt(token, "de") for token in german)
    assert is_misspelt("Strase", "de") and is_misspelt("restaurnat", "fr")
    assert misspelt_table(["resturant", None], NO_LIST).tolist() == [False, False]


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
