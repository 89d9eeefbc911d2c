"""Kernel ridge (core/kernel_ridge.py): the closed-form leave-one-out equals refitting without
each text, for symmetric and asymmetric kernels; with a linear kernel it is scikit-learn's ridge
regression with an intercept (an independent implementation, in primal form)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import needs
from gpu_neighbors.core import kernel_ridge


def brute_force_loo(matrix: np.ndarray, scores: np.ndarray, penalty: float) -> np.ndarray:
    """Refit on all texts but i (solving the bordered system directly), then estimate text i."""
    n = scores.size
    estimates = np.empty(n)
    for i in range(n):
        keep = np.delete(np.arange(n), i)
        system = np.zeros((n, n))
        system[: n - 1, : n - 1] = matrix[np.ix_(keep, keep)] + penalty * np.eye(n - 1)
        system[: n - 1, n - 1] = system[n - 1, : n - 1] = 1.0
        solution = np.linalg.solve(system, np.append(scores[keep], 0.0))
        estimates[i] = matrix[i, keep] @ solution[:-1] + solution[-1]
    return estimates


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("penalty", [0.01, 1.0])
def test_closed_form_loo_equals_refits(symmetric, penalty):
    rng = np.random.default_rng(3)
    features = rng.uniform(0, 1, (40, 6))
    matrix = np.exp(-((features[:, None] - features[None]) ** 2).sum(-1))
    if not symmetric:  # BLEU*-like: k(x, s) != k(s, x)
        matrix = matrix * rng.uniform(0.7, 1.0, matrix.shape)
    scores = features @ rng.normal(size=6) + rng.normal(scale=0.1, size=40)
    model = kernel_ridge.fit(matrix, scores, penalties=[penalty])
    np.testing.assert_allclose(model.loo, brute_force_loo(matrix, scores, penalty), rtol=0, atol=1e-9)
    # and the fitted model itself solves the bordered system
    assert abs(model.alpha.sum()) < 1e-9
    np.testing.assert_allclose(model.predict(matrix) + penalty * model.alpha, scores, atol=1e-9)


@needs('sklearn')
def test_linear_kernel_is_ridge_with_an_intercept():
    from sklearn.linear_model import Ridge, RidgeCV

    rng = np.random.default_rng(4)
    train, test = rng.normal(size=(60, 15)), rng.normal(size=(25, 15))
    scores = train @ rng.normal(size=15) + 3.0 + rng.normal(size=60)
    model = kernel_ridge.fit(train @ train.T, scores, penalties=[2.5])
    primal = Ridge(alpha=2.5, fit_intercept=True).fit(train, scores)
    np.testing.assert_allclose(model.predict(test @ train.T), primal.predict(test), atol=1e-9)
    # the penalty chosen by exact leave-one-out error is RidgeCV's (efficient leave-one-out)
    alphas = list(np.logspace(-3, 3, 13))
    chosen = kernel_ridge.fit(train @ train.T, scores, penalties=alphas)
    assert chosen.penalty == pytest.approx(RidgeCV(alphas=alphas).fit(train, scores).alpha_)


def test_default_penalties_scale_with_the_kernel():
    rng = np.random.default_rng(5)
    features = rng.uniform(size=(30, 4))
    matrix = features @ features.T
    scores = features.sum(1) + rng.normal(scale=0.1, size=30)
    small, large = kernel_ridge.fit(matrix, scores), kernel_ridge.fit(matrix * 100, scores)
    assert large.penalty == pytest.approx(100 * small.penalty)
    np.testing.assert_allclose(large.loo, small.loo, atol=1e-9)


@pytest.mark.parametrize("symmetric", [True, False])
def test_nested_leave_one_out_is_a_fit_on_the_others_at_the_penalty_they_choose(symmetric):
    """The baselines' leave-one-out: each item estimated by `fit` on the other items, its
    penalty chosen by their own exact leave-one-out, from one inverse per penalty (issue 53)."""
    rng = np.random.default_rng(3)
    points = rng.normal(size=(25, 6))
    matrix = points @ points.T / 6 + (0 if symmetric else 0.05 * rng.normal(size=(25, 25)))
    scores = rng.random(25)
    penalties = [0.01, 0.1, 1.0, 10.0]
    estimates = kernel_ridge.nested_leave_one_out(matrix, scores, penalties, block=7)
    for item in range(25):
        others = np.delete(np.arange(25), item)
        model = kernel_ridge.fit(matrix[np.ix_(others, others)], scores[others], penalties)
        assert estimates[item] == pytest.approx(model.predict(matrix[item, others][None, :])[0], abs=1e-12)
