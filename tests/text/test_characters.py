"""Tokens and words as runs of a character class equal what `re` and `str.split` return, for
every code point, at the ends of texts and in empty and all-space texts."""
from __future__ import annotations

import re
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_neighbors.text.characters import SPACE, WORD, CodePoints, classes

TOKEN = re.compile(r"(?u)\b\w+\b")  # the TF-IDF word analyzer's token pattern


def pieces(texts: list[str], inside_of) -> list[list[str]]:
    points = CodePoints.of(texts)
    runs = points.runs(inside_of(classes(points.codes)))
    joined = "".join(texts)
    found = [joined[start:start + length] for start, length in zip(runs.starts.tolist(), runs.lengths.tolist())]
    ends = np.cumsum(runs.per_text).tolist()
    return [found[end - count:end] for end, count in zip(ends, runs.per_text.tolist())]


def assert_runs_match(texts: list[str]) -> None:
    assert pieces(texts, lambda kinds: (kinds & WORD) > 0) == [TOKEN.findall(text) for text in texts]
    assert pieces(texts, lambda kinds: (kinds & SPACE) == 0) == [text.split() for text in texts]


def test_every_code_point_is_classed_as_re_and_str_split_class_it():
    codes = np.arange(sys.maxunicode + 1, dtype=np.int64)
    kinds = classes(codes)
    chars = [chr(code) for code in range(sys.maxunicode + 1)]
    assert ((kinds & WORD) > 0).tolist() == [char.isalnum() or char == "_" for char in chars]
    assert ((kinds & SPACE) > 0).tolist() == [char.isspace() for char in chars]
    # \w is exactly what re matches, for every code point (surrogates included)
    assert ((kinds & WORD) > 0).tolist() == [re.fullmatch(r"(?u)\w", char) is not None for char in chars]


def test_runs_at_text_ends_and_in_empty_texts():
    assert_runs_match([])
    assert_runs_match(["", "", ""])
    assert_runs_match(["ab", "cd", "", "e", " f", "g ", "  ", "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f\x85\xa0\u2028\u3000"])
    assert_runs_match(["x", "y"])  # a run ending one text and one starting the next stay apart
    assert_runs_match(["snake_case e-mail 3.14 ١٢٣ ²³ ½ Ⅻ", "İstanbul", "東京タワー", "🙂🙂 👍🏽", "a\u0301b x\u200dy", "\ud800 lone"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from("ab_ 1\t\n\u00a0\u3000é-.🙂\u0301"), max_size=12), max_size=6))
def test_runs_match_re_and_str_split_on_any_texts(texts):
    assert_runs_match(texts)


def assert_same_points(made: CodePoints, texts: list[str]) -> None:
    """`made` holds `texts`' code points and bounds, as int64."""
    assert made.codes.dtype == np.int64 and made.bounds.dtype == np.int64
    assert made.codes.tolist() == [ord(char) for char in "".join(texts)]
    assert made.bounds.tolist() == [0, *np.cumsum([len(text) for text in texts]).tolist()]


LOWERING = ["", "ABC def", "ΟΔΟΣ", "Σ", "ΑΣ", "ΣΑ", "İSTANBUL", "STRAßE ǅ ᾈ", "\ud800 lone", "x\x00Y"]


def test_lowered_points_are_those_of_each_text_lowered_alone():
    # Each group joined: ASCII alone (one lowering of the whole), and with the cases where
    # lowering depends on the text (a final sigma at a text's end) or changes lengths.
    for texts in ([], [""], ["ABC def", "", "XyZ \t\n", "\x00A"], LOWERING, LOWERING[:3] + LOWERING[4:6]):
        assert_same_points(CodePoints.lowered(texts), [text.lower() for text in texts])
    for texts in (["ABC def", "", "x"], ["é", "ΑΣ"]):  # `of` of ASCII and of other texts
        assert_same_points(CodePoints.of(texts), texts)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from("aB_ 1\tΣΑσİß\u0301é\x00"), max_size=8), max_size=6))
def test_lowered_points_on_any_texts(texts):
    assert_same_points(CodePoints.lowered(texts), [text.lower() for text in texts])
