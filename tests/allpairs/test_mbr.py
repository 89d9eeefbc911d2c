"""MBR against brute force on the full matrix: utilities, selections (ties to the first), bad
input; tiles cut small (memory_budget) so groups cross chunk and block edges."""
from __future__ import annotations

import numpy as np
import pytest

from allpairs_cases import SMALL, full_matrix, texts  # noqa: F401  (texts is a fixture)
from gpu_neighbors.allpairs.mbr import mbr


def brute_force_mbr(matrix: np.ndarray, groups: list) -> tuple[np.ndarray, set[int]]:
    utility, selected = np.empty(len(groups)), set()
    for label in dict.fromkeys(groups):
        members = [i for i, g in enumerate(groups) if g == label]
        block = matrix[np.ix_(members, members)]
        utility[members] = (block.sum(axis=1) - np.diag(block)) / (len(members) - 1)
        selected.add(members[int(np.argmax(utility[members]))])
    return utility, selected


@pytest.mark.parametrize("settings", [{}, {"weights": (0.25,) * 4, "smoothing": "exp", "tokenizer": "13a"},
                                      {"kernel": "rouge"}])
def test_mbr_equals_brute_force(texts, settings):
    groups = [f"input{(i * 7) % 11}" for i in range(len(texts))]  # interleaved, uneven groups
    result = mbr(texts, groups, device="cpu", memory_budget=SMALL, **settings)
    utility, selected = brute_force_mbr(full_matrix(texts, texts, **settings), groups)
    np.testing.assert_allclose(result.utility, utility, rtol=0, atol=1e-12)
    assert set(np.flatnonzero(result.selected)) == selected
    assert result.labels == list(dict.fromkeys(groups))
    assert [groups[i] for i in result.selected_indices] == result.labels


def test_mbr_one_group_and_ties_to_the_first():
    result = mbr(["a b c", "x y z", "a b c", "a b c"], device="cpu")
    assert result.selected.tolist() == [True, False, False, False]
    assert result.labels == [None]


@pytest.mark.parametrize("candidates, groups, message", [
    ([], None, "need at least 2"),
    (["only one"], None, "need at least 2"),
    (["a", "b", "c"], ["x", "x", "y"], "group 'y' has one candidate"),
    (["a", "b"], ["x"], "one label per candidate"),
])
def test_mbr_bad_input(candidates, groups, message):
    with pytest.raises(ValueError, match=message):
        mbr(candidates, groups, device="cpu")


def test_groups_as_a_generator_like_the_candidates():
    """Was "TypeError: object of type 'generator' has no len()"."""
    texts, labels = ["a b c", "a b d", "x y z", "x y w"], [0, 0, 1, 1]
    want = mbr(texts, labels, device="cpu")
    got = mbr(iter(texts), (label for label in labels), device="cpu")
    assert got.selected.tolist() == want.selected.tolist() and got.labels == want.labels
    with pytest.raises(ValueError, match="one label per candidate .4., not one string"):
        mbr(texts, "aabb", device="cpu")


def test_an_unhashable_group_label_is_named():
    with pytest.raises(TypeError, match=r"groups\[1\]: a group label must be hashable .*, not list"):
        mbr(["a", "b"], ["x", ["x"]], device="cpu")


@pytest.mark.parametrize("weights", [(0.2,) * 5, (0.1, 0.2, 0.2, 0.2, 0.2, 0.1)])
@pytest.mark.parametrize("smoothing", ["epsilon", "exp"])
def test_mbr_bleu_of_any_order_equals_nltk(texts, weights, smoothing):
    """More than 4 orders, as NLTK allows (the bleu kernel counted 4 and refused more): each
    utility is the mean of NLTK's sentence_bleu([other], candidate) over its group."""
    import warnings

    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    chosen = texts[:24]
    method = getattr(SmoothingFunction(), {"epsilon": "method1", "exp": "method3"}[smoothing])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        matrix = np.array([[sentence_bleu([s.split()], x.split(), weights=weights, smoothing_function=method)
                            for s in chosen] for x in chosen])
    groups = [i % 3 for i in range(len(chosen))]
    result = mbr(chosen, groups, device="cpu", memory_budget=SMALL, weights=weights, smoothing=smoothing)
    utility, selected = brute_force_mbr(matrix, groups)
    np.testing.assert_allclose(result.utility, utility, rtol=0, atol=1e-9)
    assert set(np.flatnonzero(result.selected)) == selected


def test_weights_as_given_an_array_or_none_at_all():
    """mbr and pairs read weights by truth: an empty sequence ran the default BLEU* instead of
    being refused, as self_bleu refuses it, and a numpy array failed with numpy's "truth value
    of an array ... is ambiguous"; now an array is the weights it holds, as for self_bleu."""
    texts = ["a b c", "a b d", "x y z"]
    want = mbr(texts, weights=(0.5, 0.5), device="cpu").utility
    np.testing.assert_array_equal(mbr(texts, weights=np.array([0.5, 0.5]), device="cpu").utility, want)
    with pytest.raises(ValueError, match=r"weights must be .* not \(\)"):
        mbr(texts, weights=(), device="cpu")


@pytest.mark.parametrize("kernel", ["auto", "combined", "nope"])
def test_a_kernel_the_jobs_cannot_run_is_named_with_those_they_can(kernel, tmp_path):
    """kernel="auto" or "combined" was refused as "Auto.__init__() got an unexpected keyword
    argument 'smoothing'" (a setting nobody gave), and an unknown name listed auto and combined
    among the choices; the jobs run one kernel over every pair."""
    from gpu_neighbors.allpairs.pairs import pairs

    message = rf"kernel {kernel!r}: .*one of bleu, rouge, meteor, bertscore, tfidf$"
    with pytest.raises(ValueError, match=message):
        mbr(["a b", "a c"], kernel=kernel, device="cpu")
    with pytest.raises(ValueError, match=message):
        pairs(["a b", "a c"], output=tmp_path / "m.npy", kernel=kernel, device="cpu")
