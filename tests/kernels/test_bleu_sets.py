"""Multi-reference BLEU against a set (Self-BLEU) equals NLTK `sentence_bleu(others, text)` for
every weighting and smoothing, and fast-bleu's `SelfBLEU` wherever fast-bleu agrees with NLTK."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

from conftest import ADVERSARIAL_TEXTS
from gpu_neighbors.kernels.bleu_sets import check_weights, closest_other_lengths, self_bleu
from gpu_neighbors.text.tokenizers import WhitespaceTokenizer

TOLERANCE = 1e-9
WEIGHTS = [(0.25, 0.25, 0.25, 0.25), (0, 1 / 3, 1 / 3, 1 / 3), (1.0,), (0.5, 0.5), (0.2, 0.3, 0.5), (0.2,) * 5,
           (0.1, 0.1, 0.2, 0.2, 0.2, 0.1, 0.1)]
NLTK_SMOOTHING = {"none": "method0", "epsilon": "method1", "add1": "method2", "exp": "method3"}


@pytest.fixture(scope="module")
def texts(huse_texts) -> list[str]:
    """Real summaries, adversarial texts, a duplicate, and one-word and empty texts."""
    return huse_texts[:60] + ADVERSARIAL_TEXTS + [huse_texts[3], "a b c", "a", ""]


def nltk_self_bleu(texts: list[str], weights, smoothing: str) -> np.ndarray:
    tokens = [text.split() for text in texts]
    method = getattr(SmoothingFunction(), NLTK_SMOOTHING[smoothing])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # method0 warns about every zero precision
        return np.array([sentence_bleu(tokens[:i] + tokens[i + 1:], tokens[i], weights=weights,
                                       smoothing_function=method) for i in range(len(tokens))])


@pytest.mark.parametrize("smoothing", list(NLTK_SMOOTHING))
@pytest.mark.parametrize("weights", WEIGHTS)
def test_self_bleu_equals_nltk(texts, weights, smoothing):
    ours = self_bleu(texts, WhitespaceTokenizer(), weights, smoothing).numpy()
    np.testing.assert_allclose(ours, nltk_self_bleu(texts, weights, smoothing), rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("texts_case", [["a", "a"], ["", ""], ["x y", ""], ["the cat", "the cat", "a dog"]])
def test_small_sets_with_duplicates_and_empty_texts(texts_case):
    for smoothing in NLTK_SMOOTHING:
        ours = self_bleu(texts_case, WhitespaceTokenizer(), (0.25,) * 4, smoothing).numpy()
        expected = nltk_self_bleu(texts_case, (0.25,) * 4, smoothing)
        np.testing.assert_allclose(ours, expected, rtol=0, atol=TOLERANCE)


def test_fast_bleu_agrees_where_it_agrees_with_nltk(texts):
    """fast-bleu's C++ SelfBLEU with smoothing_func 0 (none) and 1 (epsilon) equals NLTK for
    BLEU-4; with BLEU*'s weights and epsilon smoothing it differs from NLTK by about 1e-8."""
    fast_bleu = pytest.importorskip("fast_bleu")
    tokens = [text.split() for text in texts]
    for function, smoothing in ((0, "none"), (1, "epsilon")):
        theirs = np.array(fast_bleu.SelfBLEU(tokens, {"w": (0.25,) * 4}, smoothing_func=function)
                          .get_score()["w"])
        ours = self_bleu(texts, WhitespaceTokenizer(), (0.25,) * 4, smoothing).numpy()
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=TOLERANCE)
    star = (0, 1 / 3, 1 / 3, 1 / 3)
    theirs = np.array(fast_bleu.SelfBLEU(tokens, {"w": star}, smoothing_func=1).get_score()["w"])
    nltk = nltk_self_bleu(texts, star, "epsilon")
    assert 1e-9 < np.abs(theirs - nltk).max() < 1e-7  # the stated difference, measured


def test_closest_other_length_prefers_the_shorter_on_a_tie():
    lengths = torch.tensor([3, 5, 7, 7, 1])
    # 3: others 5,7,7,1 -> 1 and 5 both 2 away -> 1; 5: 3 and 7 -> 3; 7: another 7; 1: 3
    assert closest_other_lengths(lengths).tolist() == [1, 3, 7, 7, 3]


@pytest.mark.parametrize("weights, message", [
    ((), "give at least one weight"), ((0.5, 0.4), "must sum to 1"),
    ((1.5, -0.5), "non-negative"), ((float("nan"),), "non-negative"),
])
def test_bad_weights_are_named(weights, message):
    with pytest.raises(ValueError, match=message):
        check_weights(weights)


@pytest.mark.parametrize("weight", [True, "0.5", None])
def test_a_weight_that_is_not_a_number_is_named_with_its_type(weight):
    with pytest.raises(TypeError, match=f"real numbers, not {weight!r} \\({type(weight).__name__}\\)"):
        check_weights((weight,))


def test_numpy_numbers_are_weights_and_come_back_as_floats():
    weights = check_weights((np.float32(0.5), np.float64(0.25), np.int64(0), 0.25))
    assert weights == (0.5, 0.25, 0.0, 0.25) and all(type(value) is float for value in weights)


def test_nltks_rule_takes_any_number_of_orders_and_any_sum():
    assert check_weights((0.2,) * 6, most_orders=None, normalised=False) == (0.2,) * 6
    assert check_weights((0.25, 0.25), most_orders=None, normalised=False) == (0.25, 0.25)
    with pytest.raises(ValueError, match="give at least one weight"):
        check_weights((), most_orders=None, normalised=False)


def test_one_text_is_not_a_set():
    with pytest.raises(ValueError, match="at least two texts"):
        self_bleu(["only one"], WhitespaceTokenizer())


def test_self_bleu_5_equals_fast_bleu(texts):
    """fast-bleu's own tests score Self-BLEU-5: any number of orders, as NLTK and fast-bleu allow
    (the 4-order cap refused it). Unsmoothed, fast-bleu equals NLTK and us; under epsilon it
    differs from NLTK by about 1e-8 (as for BLEU* above), where we equal NLTK."""
    fast_bleu = pytest.importorskip("fast_bleu")
    tokens = [text.split() for text in texts]
    for function, smoothing in ((0, "none"), (1, "epsilon")):
        theirs = fast_bleu.SelfBLEU(tokens, {"5": (0.2,) * 5, "6": (1 / 6,) * 6}, smoothing_func=function).get_score()
        for name, weights in (("5", (0.2,) * 5), ("6", (1 / 6,) * 6)):
            ours = self_bleu(texts, WhitespaceTokenizer(), weights, smoothing).numpy()
            np.testing.assert_allclose(ours, nltk_self_bleu(texts, weights, smoothing), rtol=0, atol=TOLERANCE)
            np.testing.assert_allclose(ours, theirs[name], rtol=0, atol=TOLERANCE if function == 0 else 3e-8)
