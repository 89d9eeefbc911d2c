"""The stacked estimate (`estimators/stacking.py`) and the outlier test's fluency columns within
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


def test_estimate_reads_the_mean_log_probability_and_slor():
    fluency = torch.tensor([[-3.5, -0.5, 12.0], [float("nan"), float("nan"), 0.0], [-2.0, 1.25, 1.0]],
                           dtype=torch.float64)
    features = estimate_features(fluency).numpy()
    assert features.shape == (3, 2) and list(features[0]) == [-3.5, -0.5] and list(features[2]) == [-2.0, 1.25]
    assert np.isnan(features[1]).all()


def test_fluency_columns_are_within_length():
    """Long texts read likelier per token: each column takes the line through the calibration
    texts' statistic against log(length) away, and divides by the spread fitted against
    log(length) (here the statistic spreads as 1/length^0.3)."""
    rng = np.random.default_rng(2)
    counts = np.array([3, 5, 8, 12, 20, 30, 45, 60] * 40, dtype=np.float64)
    mean = -6 + 0.8 * np.log(counts) + rng.normal(0, 1, counts.size) * counts ** -0.3
    slor = 2 - 0.2 * np.log(counts) + rng.normal(0, 0.5, counts.size)
    statistics = np.column_stack([mean, slor, counts])
    within = WithinLength.fit(statistics)
    columns = within.columns(torch.from_numpy(statistics)).numpy()
    for index, (statistic, slope) in enumerate(((mean, 0.8), (slor, -0.2))):
        fitted = np.polyfit(log(counts), statistic, 1)[0]
        step = within.center[index, 60] - within.center[index, 3]
        assert abs(step - fitted * (np.log(60) - np.log(3))) < 1e-9 and abs(fitted - slope) < 0.1
        np.testing.assert_array_equal(columns[:, index], (statistic - within.center[index, counts.astype(int)])
                                      * within.scale[index, counts.astype(int)])
        assert abs(np.corrcoef(columns[:, index], np.log(counts))[0, 1]) < 0.1  # the length is gone
        spreads = [columns[counts == count, index].std() for count in (3, 60)]
        assert abs(np.log(spreads[1] / spreads[0])) < 0.25  # and so is the spread's dependence on it
    spread_ratio = within.scale[0, 60] / within.scale[0, 3]
    assert abs(np.log(spread_ratio) - 0.3 * np.log(20)) < 0.3  # the fitted slope, not sqrt(n)'s 0.5
    nothing = within.columns(torch.tensor([[np.nan, np.nan, 0.0]], dtype=torch.float64))
    assert torch.isnan(nothing).all()
