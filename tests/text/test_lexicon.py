"""The word list behind the spelling statistic: which tokens it judges, and how."""
from __future__ import annotations

import pytest

from gpu_neighbors.text.lexicon import is_unlisted, letter_runs, unlisted_table, words


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
    assert not any(map(is_unlisted, listed))
    assert all(map(is_unlisted, unlisted))
    assert not any(map(is_unlisted, ["42", "#", "3.14", "😀", ""]))  # no letter: never judged
    assert unlisted_table(["teh", None, "the"]).tolist() == [True, False, False]


def test_the_list_is_the_lower_case_english_one():
    english = words()
    assert len(english) > 100_000
    assert all(word == word.lower() for word in list(english)[:1000])
