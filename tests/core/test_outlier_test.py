"""The conformal outlier test: p-values against a count by hand, and the false-alarm rate it
promises on exchangeable data."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gpu_neighbors.core.outside import OutlierTest, OutsideRule, lowest_decile_mean


def brute_force_p(calibration: np.ndarray, value: float, low_is_atypical: bool) -> float:
    """(1 + calibration values at least as atypical, NaN ones counting as the most atypical) / (m + 1)."""
    lacking = int(np.isnan(calibration).sum())
    if np.isnan(value):
        return (1 + lacking) / (calibration.size + 1)
    finite = calibration[~np.isnan(calibration)]
    beyond = (finite <= value).sum() if low_is_atypical else (finite >= value).sum()
    return (1 + int(beyond) + lacking) / (calibration.size + 1)


def test_p_values_equal_a_count_by_hand_with_ties_and_missing_values():
    rng = np.random.default_rng(0)
    calibration = rng.integers(0, 6, size=(40, 2)).astype(np.float64)
    calibration[[3, 9], 0] = np.nan
    values = np.concatenate([np.arange(-1, 8, 0.5), [np.nan]])
    test = OutlierTest.fit(calibration, (True, False))
    for column, low in enumerate((True, False)):
        got = test.p_value_tensor(torch.as_tensor(values), column).numpy()
        expected = [brute_force_p(calibration[:, column], value, low) for value in values]
        np.testing.assert_array_equal(got, expected)


def test_false_alarm_rate_on_exchangeable_texts_is_at_most_the_level():
    """For texts drawn like the calibration texts, each statistic's p-value is uniform on
    {1/(m+1), ..., 1}: P(p <= t) = floor(t (m+1)) / (m+1); Bonferroni keeps the union under the
    level. A p-value without its +1 (or counting the other side) breaks one of the two."""
    rng = np.random.default_rng(1)
    m, trials, level = 199, 400, 0.2
    rates, per_column = [], []
    for _ in range(trials):
        sample = rng.normal(size=(m + 50, 3))
        test = OutlierTest.fit(sample[:m], (True, True, False))
        rule = OutsideRule(test, level, None, (0.0, 1.0))
        new = torch.as_tensor(sample[m:])
        rates.append(rule.flags(new).float().mean().item())
        per_column.append((test.p_value_tensor(new[:, 2].contiguous(), 2) <= level / 3).float().mean().item())
    exact = np.floor(level / 3 * (m + 1)) / (m + 1)
    assert abs(np.mean(per_column) - exact) < 4 * np.sqrt(exact * (1 - exact) / (trials * 50))
    assert np.mean(rates) <= level
    assert np.mean(rates) > level / 2  # three nearly independent tests at level / 3 each


def test_a_missing_statistic_is_flagged_once_the_calibration_set_is_large_enough():
    small = OutsideRule(OutlierTest.fit(np.zeros((10, 1)), (True,)), 0.05, None, (0.0, 1.0))
    large = OutsideRule(OutlierTest.fit(np.zeros((100, 1)), (True,)), 0.05, None, (0.0, 1.0))
    nothing = torch.tensor([[np.nan], [0.0]], dtype=torch.float64)
    assert small.flags(nothing).tolist() == [False, False]  # 1/11 > 0.05: conformal cannot tell
    assert large.flags(nothing).tolist() == [True, False]


def test_flagged_estimates_and_intervals():
    rule = OutsideRule(OutlierTest.fit(np.zeros((5, 1)), (True,)), 0.5, 0.1, (0.0, 1.0))
    scores = torch.tensor([0.8, 0.7, float("nan")], dtype=torch.float64)
    outside = torch.tensor([True, False, True])
    covered = torch.isfinite(scores)
    assert rule.estimates(scores, covered, outside)[:2].tolist() == [0.1, 0.7]
    assert torch.isnan(rule.estimates(scores, covered, outside)[2])  # no estimate stays none
    low, high = rule.widen(scores - 0.1, scores + 0.1, outside)
    assert low[:2].tolist() == [0.0, pytest.approx(0.6)] and high[:2].tolist() == [1.0, pytest.approx(0.8)]
    kept = OutsideRule(rule.test, 0.5, None, (0.0, 1.0))
    assert torch.equal(kept.estimates(scores[:2], covered[:2], outside[:2]), scores[:2])


@pytest.mark.parametrize("scores, expected", [([0.5], 0.5), (list(range(10)), 0.0), (list(range(11)), 0.5),
                                              ([3, 1, 2, 9, 8, 7, 6, 5, 4, 0, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19], 0.5)])
def test_lowest_decile_mean(scores, expected):
    assert lowest_decile_mean(np.asarray(scores, dtype=np.float64)) == expected
