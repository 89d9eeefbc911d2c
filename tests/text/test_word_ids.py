"""`word_ids`: the whitespace words of ASCII texts numbered by first occurrence, equal exactly
where `str.split()`'s tokens are equal, by the compiled pass and its numpy twin alike, and
refused (None) where it cannot promise that."""
from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nltk.translate import bleu_score

import gpu_neighbors
from conftest import ADVERSARIAL_TEXTS
from gpu_neighbors.text import word_ids as word_ids_module
from gpu_neighbors.text.word_ids import word_ids

EDGES = ["", "   ", "a", "abcdefg", "abcdefgh", "abcdefghi", "abcdefg abcdefgh abcdefg", "x" * 300 + " " + "x" * 299,
         "tab\there\vand\ffeed\rcr\nnl", "unit\x1dgroup\x1erecord\x1fend", "bell\x07inside a\x01b \x7fdel",
         "the the the", " lead and trail ", "Zz zZ zz ZZ", "0123456 01234567 012345678", "~!@#$%^ &*()_+"]


def assert_same_partition(texts: list[str]) -> None:
    """Numbers by first occurrence, as a dict over `str.split()`'s words gives them, from the
    compiled pass where built and from the numpy twin."""
    tokens = [text.split() for text in texts]
    flat = [word for words in tokens for word in words]
    numbers: dict[str, int] = {}
    expected = [numbers.setdefault(word, len(numbers)) for word in flat]
    for native in {word_ids_module.native, None}:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(word_ids_module, "native", native)
            result = word_ids(texts)
        assert result is not None
        assert result.ids.dtype == np.int64 and result.counts.dtype == np.int64
        assert result.counts.tolist() == [len(words) for words in tokens]
        assert result.ids.tolist() == expected and result.distinct == len(numbers)
        assert result.words() == list(numbers)


def test_real_and_edge_texts(huse_texts):
    assert_same_partition(huse_texts + EDGES)
    assert_same_partition(EDGES)
    assert_same_partition([""])
    assert word_ids([]) is not None


@pytest.mark.parametrize("texts", [["a", "naïve"], ["a\x00b"], ["a\x1cb", "c"], ["東京"]])
def test_refused_where_bytes_are_not_str_split(texts):
    assert word_ids(texts) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab\t\n\x0b\x0c\r\x1d\x1e\x1f \x01\x7f~Z", max_size=40), max_size=6))
def test_any_ascii_batch_splits_as_str_split(texts):
    assert_same_partition(texts)


@pytest.mark.parametrize("lowercase", [False, True])
def test_aligned_bleu_on_ascii_texts_equals_nltk(huse_texts, lowercase):
    """The text path of a pure-ASCII batch takes these ids (no vocabulary): still NLTK's values."""
    rng = random.Random(4)
    ascii_texts = [text for text in huse_texts + ADVERSARIAL_TEXTS + EDGES if text.isascii() and "\x1c" not in text]
    candidates = [text if i % 2 else text.upper() for i, text in enumerate(ascii_texts)]
    references = [[rng.choice(ascii_texts), text] for text in ascii_texts]
    split = (lambda text: text.lower().split()) if lowercase else str.split
    method = bleu_score.SmoothingFunction().method3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = [bleu_score.sentence_bleu([split(r) for r in refs], split(c), smoothing_function=method)
                for c, refs in zip(candidates, references)]
    ours = gpu_neighbors.sentence_bleu(candidates, references, smoothing="exp", lowercase=lowercase).numpy()
    np.testing.assert_allclose(ours, want, rtol=0, atol=1e-9)
    assert max(want) > 0.5
