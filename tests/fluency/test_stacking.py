"""The stacked estimate (`estimators/stacking.py`) and the outlier test's fluency column within
length (`fluency/outlier.py`): exact leave-one-out, the same bits as the formula, NaN handling."""
from __future__ import annotations

import numpy as np
import torch

from gpu_neighbors.core.portable import log
from gpu_neighbors.estimators.stacking import Stacking
from gpu_neighbors.fluency.outlier import WithinLength, estimate_features


def test_leave_one_out_equals_refitting_without_each_text():
    rng = np.random.default_rng(0)
    estimates, fluency = rng.uniform(0, 1, 40), rng.normal(-4, 1, 40)
    truth = np.clip(0.5 * estimates + 0.1 * fluency + 0.6 + rng.normal(0, 0.05, 40), 0, 1)
    estimates[3], fluency[5] = np.nan, np.nan  # no estimate, no token: the neighbour estimate stays
    model, loo = Stacking.fit(estimates, fluency[:, None], truth, None)
    used = np.isfinite(estimates) & np.isfinite(fluency)
    for index in np.flatnonzero(used):
        keep = used & (np.arange(40) != index)
        design = np.column_stack([np.ones(keep.sum()), estimates[keep], fluency[keep]])
        coefficients = np.linalg.lstsq(design, truth[keep], rcond=None)[0]
        assert abs(loo[index] - coefficients @ [1, estimates[index], fluency[index]]) < 1e-10
    assert np.isnan(loo[3]) and loo[5] == estimates[5]
    applied = model.apply(torch.from_numpy(estimates), torch.from_numpy(fluency)[:, None]).numpy()
    expected = model.intercept + model.weights[0] * estimates + model.weights[1] * fluency
    np.testing.assert_array_equal(applied[used], expected[used])
    assert np.isnan(applied[3]) and applied[5] == estimates[5]


def test_stacked_estimates_stay_in_the_score_range():
    rng = np.random.default_rng(1)
    estimates, fluency = rng.uniform(0, 1, 30), rng.normal(-4, 1, 30)
    model, loo = Stacking.fit(estimates, fluency[:, None], np.clip(fluency + 4.5, 0, 1), (0.0, 1.0))
    assert loo.min() >= 0 and loo.max() <= 1
    far = model.apply(torch.tensor([0.5, 0.5]), torch.tensor([[-40.0], [40.0]])).numpy()
    assert set(far) == {0.0, 1.0}


def test_estimate_reads_the_mean_log_probability():
    fluency = torch.tensor([[-3.5, 12.0], [float("nan"), 0.0], [-2.0, 1.0]], dtype=torch.float64)
    features = estimate_features(fluency).numpy()
    assert features.shape == (3, 1) and features[0, 0] == -3.5 and features[2, 0] == -2.0
    assert np.isnan(features[1, 0])


def test_fluency_column_is_within_length():
    """Long texts read likelier per token: the column takes the line through the calibration
    texts' statistics against log(length) away, and scales by sqrt(length)."""
    counts = np.array([3, 5, 8, 12, 20, 30, 45, 60] * 5, dtype=np.float64)
    statistic = -6 + 0.8 * np.log(counts) + np.random.default_rng(2).normal(0, 0.3, counts.size)
    within = WithinLength.fit(np.column_stack([statistic, counts]))
    column = within.column(torch.from_numpy(np.column_stack([statistic, counts]))).numpy()
    slope = np.polyfit(log(counts), statistic, 1)[0]
    assert abs(within.center[60] - within.center[3] - slope * (np.log(60) - np.log(3))) < 1e-9
    np.testing.assert_array_equal(column, (statistic - within.center[counts.astype(int)]) * np.sqrt(counts))
    assert abs(np.corrcoef(column, np.log(counts))[0, 1]) < 0.1  # the length is gone
    nothing = within.column(torch.tensor([[np.nan, 0.0]], dtype=torch.float64))
    assert torch.isnan(nothing).all()
