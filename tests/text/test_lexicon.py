"""The word list behind the spelling statistic: which tokens it judges, and how."""
from __future__ import annotations

import pytest

from gpu_neighbors.text.lexicon import is_unlisted, unlisted_table, word_form, words


@pytest.mark.parametrize(("token", "form"), [
    ("Restaurant.", "restaurant"), ("(teh)", "teh"), ("«Tallinn»", "tallinn"), ("café", "café"),
    ("--", None), ("3pm", None), ("covid-19", None), ("don't", None), ("_x", None), ("", None), ("Ünïcödé!", "ünïcödé"),
])
def test_the_word_form_is_lower_case_letters_trimmed_of_punctuation(token, form):
    assert word_form(token) == form


def test_misspelt_and_mangled_words_are_unlisted_and_real_ones_are_not():
    listed = ["The", "restaurant", "restaurants,", "served", "Cambridge", "aardvark", "A"]
    unlisted = ["teh", "resturant", "rseatuarnt", "qzxv", "Fitzbilies"]
    assert not any(map(is_unlisted, listed))
    assert all(map(is_unlisted, unlisted))
    assert not any(map(is_unlisted, ["42", "#", "e-mail", "😀"]))  # not letters: never judged
    assert unlisted_table(["teh", None, "the"]).tolist() == [True, False, False]


def test_the_list_is_the_lower_case_english_one():
    english = words()
    assert len(english) > 100_000
    assert all(word == word.lower() for word in list(english)[:1000])
