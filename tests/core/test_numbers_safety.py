"""Issue 22, items 8 and 9: the spread of the neighbours' scores is right at any finite scale,
and a fit that raises leaves the scorer as it was."""
from __future__ import annotations

import statistics
import warnings

import numpy as np
import pytest

from gpu_neighbors import NeighborsScorer, ParameterError
from gpu_neighbors.estimators import Threshold

TEXTS = [
    "the cat sat on the mat", "the cat sat on a mat", "a dog sat on the mat", "the dog ran in the park",
    "a cat ran in the park", "the bird sang in the tree", "a bird sang on the mat", "the cat sang a song",
    "dogs and cats sat together", "the park was green and quiet", "a quiet cat in a green park",
    "the mat was red", "birds sat in the tree", "the dog sang", "cats ran", "a red mat on the floor",
]
BASE = np.linspace(0.05, 0.95, len(TEXTS))[np.random.default_rng(3).permutation(len(TEXTS))]


def fitted(scores: np.ndarray) -> NeighborsScorer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return NeighborsScorer(kernel="bleu", estimator=Threshold(tau=0.05, min_neighbors=1, max_fraction=1.0),
                               device="cpu", score_range=None).fit(TEXTS, scores)


@pytest.mark.parametrize("scores", [
    BASE * 1e300, -BASE * 1e300, BASE * 1e200, BASE + 1e6, BASE * 1e-160, BASE * 1e-300, BASE * 1e-310,
    BASE - 0.5, np.where(BASE > 0.5, 1.7e308, -1.7e308) * BASE,
], ids=["1e300", "-1e300", "1e200", "1e6+q", "1e-160", "1e-300", "subnormal", "centred", "both-limits"])
def test_std_is_the_spread_of_the_neighbours_scores_at_any_scale(scores):
    """Reference: the exact (rational arithmetic) mean and population std of `statistics` over
    each text's neighbours, read off the similarity matrix (leave-one-out: a text is not its own
    neighbour)."""
    scorer = fitted(scores)
    prediction = scorer.leave_one_out()
    similarity = scorer.train_similarity().cpu().numpy()
    np.fill_diagonal(similarity, -np.inf)
    checked = 0
    for row, values in enumerate(similarity):
        chosen = scores[values >= scorer.tau_]
        assert prediction.num_neighbors[row] == chosen.size
        if chosen.size == 0:
            continue
        mean, spread = statistics.mean(chosen.tolist()), statistics.pstdev(chosen.tolist())
        assert prediction.scores[row] == pytest.approx(mean, rel=1e-12, abs=0)
        # one pass (E[d^2] - E[d]^2) leaves an error of a few ulps of the largest |score|
        assert prediction.std[row] == pytest.approx(spread, rel=1e-9, abs=np.abs(scores).max() * 1e-13)
        checked += 1
    assert checked >= 8


def test_scaling_scores_by_a_power_of_two_scales_std_exactly():
    one, scaled = fitted(BASE).leave_one_out(), fitted(BASE * 2.0**1000).leave_one_out()
    np.testing.assert_array_equal(scaled.std, one.std * 2.0**1000)
    np.testing.assert_array_equal(scaled.scores, one.scores * 2.0**1000)


def test_a_fit_that_raises_leaves_the_scorer_as_it_was():
    scorer = fitted(BASE)
    before = scorer.predict(["the cat sat", "a bird in the park"])
    other_texts = [text.upper() + " X" for text in TEXTS]
    given = scorer.estimator
    scorer.estimator = Threshold(tau=5.0)  # out of BLEU's [0, 1]: refused by fit, after the kernel is made
    with pytest.raises(ParameterError, match="tau must be in"):
        scorer.fit(other_texts, BASE[::-1].copy())
    scorer.estimator = given
    after = scorer.predict(["the cat sat", "a bird in the park"])
    np.testing.assert_array_equal(after.scores, before.scores)
    np.testing.assert_array_equal(after.num_neighbors, before.num_neighbors)
    unfitted = NeighborsScorer(kernel="bleu", estimator=Threshold(tau=5.0), device="cpu")
    with pytest.raises(ParameterError, match="tau must be in"):
        unfitted.fit(TEXTS, BASE)
    assert not hasattr(unfitted, "kernel_")
