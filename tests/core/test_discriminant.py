"""The degeneracy score: the penalised logistic regression against scikit-learn's, coefficients
that no row order changes, finite where the classes separate, and a score that reads only the
statistics' order-free arithmetic."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gpu_neighbors.core.discriminant import CLAMP, PENALTY, LinearScore


def two_classes(seed: int = 0, real: int = 300, copies: int = 900) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.normal([0.6, 0.3, 0.05, 0.4], 0.2, size=(real, 4)),
            rng.normal([0.5, 0.0, 0.2, 0.2], 0.25, size=(copies, 4)))


def test_the_fit_is_scikit_learns_penalised_logistic_regression():
    LogisticRegression = pytest.importorskip("sklearn.linear_model", reason="scikit-learn is not installed").LogisticRegression
    """Same objective: each real text weighs copies / real, the copies 1, and the penalty
    (PENALTY times a real text's weight) / 2 times the squared weights, the intercept unpenalised
    (scikit-learn's C is its inverse)."""
    real, copies = two_classes()
    ours = LinearScore.fit(real, copies)
    features = np.clip(np.vstack([real, copies]), *CLAMP)
    labels = np.r_[np.zeros(len(real)), np.ones(len(copies))]
    weights = np.r_[np.full(len(real), len(copies) / len(real)), np.ones(len(copies))]
    peer = LogisticRegression(C=1 / (PENALTY * len(copies) / len(real)), tol=1e-12, max_iter=10_000)
    peer.fit(features, labels, sample_weight=weights)
    np.testing.assert_allclose(ours.weights, peer.coef_[0], rtol=1e-6, atol=1e-8)
    assert ours.intercept == pytest.approx(peer.intercept_[0], rel=1e-6, abs=1e-8)


def test_no_row_order_changes_a_bit_of_the_coefficients():
    """Every sum is correctly rounded (math.fsum): the same coefficients whatever order the
    texts came in, and so on every machine."""
    real, copies = two_classes(1)
    order_real, order_copies = np.random.default_rng(2).permutation(len(real)), np.random.default_rng(3).permutation(len(copies))
    assert LinearScore.fit(real, copies) == LinearScore.fit(real[order_real], copies[order_copies])


def test_separable_classes_keep_finite_coefficients_and_score_the_copies_higher():
    """Repetition separates a repeated copy perfectly: the penalty keeps the weights finite."""
    real, copies = two_classes(4)
    copies[:, 2] = 0.9  # every copy repeats itself; no real text does
    real[:, 2] = np.clip(real[:, 2], 0.0, 0.3)
    score = LinearScore.fit(real, copies)
    assert all(np.isfinite(score.weights)) and score.weights[2] > 0
    assert score.score(torch.from_numpy(copies)).min() > score.score(torch.from_numpy(real)).max()


def test_rows_with_a_missing_statistic_are_left_out_and_score_nan():
    real, copies = two_classes(5)
    with_missing = np.vstack([real, np.full((3, 4), np.nan)])
    assert LinearScore.fit(with_missing, copies) == LinearScore.fit(real, copies)
    score = LinearScore.fit(real, copies).score(torch.tensor([[np.nan, 0.1, 0.0, 0.2], [0.5, 0.1, 0.0, 0.2]]))
    assert torch.isnan(score[0]) and torch.isfinite(score[1])


def test_the_score_clamps_each_statistic_and_adds_in_a_fixed_order():
    score = LinearScore(0.5, (2.0, -1.0, 3.0, 0.25))
    statistics = torch.tensor([[-7.0, 0.5, 0.25, 2.0], [0.3, -0.1, 0.0, 0.9]], dtype=torch.float64)
    expected = [0.5 + 2.0 * -1.0 + -1.0 * 0.5 + 3.0 * 0.25 + 0.25 * 1.0,
                0.5 + 2.0 * 0.3 + -1.0 * -0.1 + 3.0 * 0.0 + 0.25 * 0.9]
    assert score.score(statistics).tolist() == expected


def test_unequal_statistics_are_refused():
    with pytest.raises(ValueError, match="real texts have 4 statistics, copies 3"):
        LinearScore.fit(np.zeros((5, 4)), np.zeros((5, 3)))
