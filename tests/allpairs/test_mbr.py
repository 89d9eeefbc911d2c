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


def test_an_unhashable_group_label_is_named():
    with pytest.raises(TypeError, match=r"groups\[1\]: a group label must be hashable .*, not list"):
        mbr(["a", "b"], ["x", ["x"]], device="cpu")
