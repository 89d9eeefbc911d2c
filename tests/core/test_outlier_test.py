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
    {1/(m+1), ..., 1}: P(p <= t) = floor(t (m+1)) / (m+1); the combined p-value keeps
    P(p <= level) under the level, for independent and for dependent statistics. A p-value
    without its +1 (or counting the other side) breaks one of these."""
    rng = np.random.default_rng(1)
    m, trials, level = 199, 300, 0.2
    rates, dependent, per_column = [], [], []
    for _ in range(trials):
        sample = rng.normal(size=(m + 50, 3))
        test = OutlierTest.fit(sample[:m], (True, True, False))
        rule = OutsideRule(test, level, None, (0.0, 1.0))
        new = torch.as_tensor(sample[m:])
        rates.append(rule.flags(rule.p_values(new)).float().mean().item())
        per_column.append((test.p_value_tensor(new[:, 2].contiguous(), 2) <= level / 3).float().mean().item())
        same = np.repeat(sample[:, :1], 3, axis=1)  # one statistic thrice: Fisher's alone would over-count it
        copied = OutsideRule(OutlierTest.fit(same[:m], (True, True, True)), level, None, (0.0, 1.0))
        dependent.append(copied.flags(copied.p_values(torch.as_tensor(same[m:]))).float().mean().item())
    exact = np.floor(level / 3 * (m + 1)) / (m + 1)
    assert abs(np.mean(per_column) - exact) < 4 * np.sqrt(exact * (1 - exact) / (trials * 50))
    assert level / 3 < np.mean(rates) <= level
    assert np.mean(dependent) <= level


def test_a_missing_statistic_is_flagged_once_the_calibration_set_is_large_enough():
    small = OutsideRule(OutlierTest.fit(np.zeros((10, 1)), (True,)), 0.05, None, (0.0, 1.0))
    large = OutsideRule(OutlierTest.fit(np.zeros((100, 1)), (True,)), 0.05, None, (0.0, 1.0))
    nothing = torch.tensor([[np.nan], [0.0]], dtype=torch.float64)
    assert small.flags(small.p_values(nothing)).tolist() == [False, False]  # 1/11 > 0.05: conformal cannot tell
    assert large.flags(large.p_values(nothing)).tolist() == [True, False]


def test_one_statistic_far_out_flags_a_text_where_the_calibration_set_is_small():
    """With m calibration texts and k = 5 statistics, one statistic alone brings the union to
    k / (m + 1) divided by Bonferroni's share w: at m = 100 Bonferroni's stands alone (5 / 101 <=
    0.05); at m = 160 (HUSE's folds) w = 5 / (160 x 0.05) = 0.625, so 5 / 161 / 0.625 <= 0.05
    still, where the even split of the large sets (w = 1/2 from m = 200 on) would give 2 x 5 / 161
    > 0.05 and flag nothing by one statistic. Ranked among the calibration texts' unions (from
    m = 220 on) it ties with at most k / w of them: at most (1 + k / w) / (m + 1)."""
    rng = np.random.default_rng(3)
    new = torch.tensor([[-9.0, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)  # the first far out, the rest typical
    for size, share, ranked, expected in (
            (100, 1.0, False, 5 / 101), (160, 0.625, False, 5 / 161 / 0.625), (199, 5 / 9.95, False, 5 / 200 * 1.99),
            (200, 0.5, False, 2 * 5 / 201), (219, 0.5, False, 2 * 5 / 220)):
        rule = OutsideRule(OutlierTest.fit(rng.normal(size=(size, 5)), (True,) * 5), 0.05, None, (0.0, 1.0))
        assert rule.bonferroni_share == pytest.approx(share, rel=1e-15)
        assert rule.ranked is ranked
        assert rule.p_values(new).item() == pytest.approx(expected, rel=1e-14)
        assert rule.flags(rule.p_values(new)).item()
    for size in (220, 221, 999):
        rule = OutsideRule(OutlierTest.fit(rng.normal(size=(size, 5)), (True,) * 5), 0.05, None, (0.0, 1.0))
        assert rule.ranked and rule.bonferroni_share == 0.5
        assert 1 / (size + 1) <= rule.p_values(new).item() <= (1 + 5 / 0.5) / (size + 1) <= 0.05


def against_others(calibration: np.ndarray) -> np.ndarray:
    """[m, statistics]: each calibration text's p-values (low atypical) against the other
    calibration texts, by counting with that text left out (the denominator m + 1)."""
    m = len(calibration)
    return np.array([(1 + (np.delete(calibration, index, axis=0) <= calibration[index]).sum(axis=0)) / (m + 1)
                     for index in range(m)])


def brute_force_union(calibration: np.ndarray, products: np.ndarray, text: np.ndarray, share: float) -> float:
    """The weighted union of `text` against `calibration` (low atypical, every statistic alone),
    by counting: its p-values, their product's rank among the calibration texts' `products`
    (each taken against the other calibration texts)."""
    m, k = calibration.shape
    p = (1 + (calibration <= text).sum(axis=0)) / (m + 1)
    fisher = (1 + np.sum(products <= np.prod(p))) / (m + 1)
    return min(1.0, k * p.min() / share, fisher / (1 - share))


def test_the_ranked_union_equals_a_count_by_hand():
    """A new text's ranked p-value is (1 + calibration texts whose union, each against the
    others, is at or below its own) / (m + 1): each calibration union made by leaving that text
    out and counting, its product's rank among the others' products plus itself."""
    rng = np.random.default_rng(11)
    calibration = rng.integers(0, 7, size=(30, 3)).astype(np.float64)  # ties
    new = rng.integers(-1, 8, size=(40, 3)).astype(np.float64)
    test = OutlierTest.fit(calibration, (True,) * 3)
    m = len(calibration)
    p_others = against_others(calibration)
    products = np.prod(p_others, axis=1)
    own = []
    for p, product in zip(p_others, products):
        fisher = np.sum(products <= product) / (m + 1)  # itself counted, no + 1
        own.append(min(1.0, 3 * p.min() / 0.5, fisher / 0.5))
    for row, text in zip(test.p_values(torch.as_tensor(new), 0.5, ranked=True).tolist(), new):
        union = brute_force_union(calibration, products, text, 0.5)
        assert test.p_values(torch.as_tensor(text[None]), 0.5).item() == pytest.approx(union, rel=1e-15)
        assert row == pytest.approx((1 + sum(value <= union * (1 + 1e-12) for value in own)) / (m + 1), rel=1e-15)


def test_ranking_flags_what_the_bound_misses_and_keeps_the_level():
    """On exchangeable texts the bound flags fewer than the level (a union bound is loose),
    the ranked union about the level and never more; texts a little out on every statistic
    that the bound lets through are flagged ranked."""
    rng = np.random.default_rng(7)
    m, trials, level = 999, 60, 0.05
    bound, ranked = [], []
    for _ in range(trials):
        sample = rng.normal(size=(m + 200, 5))
        rule = OutsideRule(OutlierTest.fit(sample[:m], (True,) * 5), level, None, (0.0, 1.0))
        new = torch.as_tensor(sample[m:])
        ranked.append(rule.flags(rule.p_values(new)).float().mean().item())
        bound.append((rule.test.p_values(new, rule.bonferroni_share) <= level).float().mean().item())
    assert np.mean(bound) < np.mean(ranked) <= level
    assert np.mean(ranked) > 0.8 * level
    near = torch.full((1, 5), -1.1, dtype=torch.float64)  # each p about 0.14: the bound's union about 0.056
    assert rule.test.p_values(near, 0.5).item() > level and rule.flags(rule.p_values(near)).item()


def test_the_split_between_bonferroni_and_fisher_is_a_valid_weighting():
    """Bonferroni's share is at least 1/2 and at most 1, and any share in (0, 1] gives p-values
    min(Bonferroni's / w, Fisher's / (1 - w)): shares outside are refused."""
    test = OutlierTest.fit(np.arange(8.0).reshape(4, 2), (True, True))
    new = torch.tensor([[-1.0, 9.0]], dtype=torch.float64)  # p-values 1/5 and 1: Bonferroni's 2 x 1/5
    bonferroni, fisher = test.p_values(new, 1.0).item(), test.p_values(new, 1e-12).item()  # Fisher's / (1 - 1e-12)
    assert bonferroni == pytest.approx(2 / 5) and 0 < fisher < 1
    for share in (0.5, 0.8, 0.99):
        assert test.p_values(new, share).item() == pytest.approx(min(1.0, bonferroni / share, fisher / (1 - share)))
    for share in (0.0, -0.5, 1.5, float("nan")):
        with pytest.raises(ValueError, match="share"):
            test.p_values(new, share)


def test_combined_p_value_by_hand():
    """m = 4 calibration texts, two statistics (low atypical): each calibration text's p-values
    against the other three, (1 + count) / 5, multiply to the products; a new text's p-values
    against all four. min(1, 2 min(2 min_j p_j, (1 + products <= its product) / 5))."""
    calibration = np.array([[1.0, 4.0], [2.0, 3.0], [3.0, 2.0], [4.0, 1.0]])
    test = OutlierTest.fit(calibration, (True, True))
    # text 1: 0 others below 1, 3 below 4: (1/5) (4/5); text 2: (2/5) (3/5); and mirrored
    np.testing.assert_array_equal(test.products, np.sort([1 / 5 * (4 / 5), 2 / 5 * (3 / 5)] * 2))
    new = torch.tensor([[0.0, 0.0], [0.0, 9.0], [2.5, 2.5], [9.0, 9.0]], dtype=torch.float64)
    # p-values (1/5, 1/5), (1/5, 1), (3/5, 3/5), (1, 1): products 1/25, 1/5, 9/25, 1 rank 0, 2, 4, 4
    # of the calibration products at or below them: Fisher's 1/5, 3/5, 1, 1; Bonferroni 2/5, 2/5, 6/5, 2
    expected = [2 * (1 / 5), 2 * (2 / 5), 1.0, 1.0]
    np.testing.assert_allclose(test.p_values(new).numpy(), expected, rtol=1e-15)


def test_evidence_that_only_adds_up_joins_fishers_combination_alone():
    """The same calibration texts with the second statistic not `alone`: Bonferroni's k is 1
    and reads the first statistic only, Fisher's product still multiplies both. The text far
    out in the second statistic alone keeps Fisher's p-value (2 x 3/5); the one far out in the
    first gets 2 x 1 x 1/5 from Bonferroni's side, not 2 x 2 x 1/5."""
    calibration = np.array([[1.0, 4.0], [2.0, 3.0], [3.0, 2.0], [4.0, 1.0]])
    test = OutlierTest.fit(calibration, (True, True), alone=(True, False))
    assert test.single_tests == 1
    new = torch.tensor([[0.0, 9.0], [9.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    # p-values (1/5, 1), (1, 1/5), (1/5, 1/5): Bonferroni on the first alone 1/5, 1, 1/5;
    # products 1/5, 1/5, 1/25: Fisher's 3/5, 3/5, 1/5
    np.testing.assert_allclose(test.p_values(new).numpy(), [2 / 5, 1.0, 2 / 5], rtol=1e-15)
    everything = OutlierTest.fit(calibration, (True, True))
    np.testing.assert_allclose(everything.p_values(new).numpy(), [2 * 2 / 5, 2 * 2 / 5, 2 / 5], rtol=1e-15)
    # Fisher's joins above m level = k: m = 21 with k = 1, m = 41 with both alone
    def share(m: int, alone: tuple[bool, bool] | None) -> float:
        return OutsideRule(OutlierTest.fit(np.zeros((m, 2)), (True, True), alone), 0.05, None,
                           (0.0, 1.0)).bonferroni_share

    assert [share(20, (True, False)), share(21, (True, False)), share(40, None), share(41, None)] == pytest.approx([
        1.0, 1 / 1.05, 1.0, 2 / 2.05], rel=1e-15)
    assert share(40, (True, False)) == 0.5 and share(80, None) == 0.5


def test_diffuse_evidence_flags_what_no_single_statistic_does():
    """Five statistics each a little out: Bonferroni (the test before Fisher's) flags none of
    these texts, Fisher's combination flags them."""
    rng = np.random.default_rng(5)
    calibration = rng.normal(size=(999, 5))
    rule = OutsideRule(OutlierTest.fit(calibration, (True,) * 5), 0.05, None, (0.0, 1.0))
    new = torch.full((10, 5), -1.9, dtype=torch.float64)  # each p about 0.03: 5 x 0.03 > 0.05
    singles = torch.stack([rule.test.p_value_tensor(new[:, j].contiguous(), j) for j in range(5)], dim=1)
    assert (5 * singles.min(dim=1).values > 0.05).all()
    assert rule.flags(rule.p_values(new)).all()


def test_flagged_estimates_and_intervals_and_the_ramp_between():
    rule = OutsideRule(OutlierTest.fit(np.zeros((5, 1)), (True,)), 0.2, 0.1, (0.0, 1.0))
    scores = torch.tensor([0.8, 0.7, 0.5, float("nan")], dtype=torch.float64)
    p = torch.tensor([0.2, 0.4, 0.3, 0.1], dtype=torch.float64)  # flagged, kept, half way, flagged
    covered = torch.isfinite(scores)
    assert rule.flags(p).tolist() == [True, False, False, True]
    estimates = rule.estimates(scores, covered, p)
    assert estimates[:3].tolist() == [0.1, 0.7, pytest.approx(0.3)]
    assert torch.isnan(estimates[3])  # no estimate stays none
    low, high = rule.widen(scores - 0.1, scores + 0.1, p)
    assert low[:3].tolist() == [0.0, pytest.approx(0.6), pytest.approx(0.2)]
    assert high[:3].tolist() == [1.0, pytest.approx(0.8), pytest.approx(0.8)]
    kept = OutsideRule(rule.test, 0.2, None, (0.0, 1.0))
    assert kept.estimates(scores, covered, p) is scores
    assert torch.equal(rule.estimates(scores[1:2], covered[1:2], p[1:2]), scores[1:2])  # the same bits


@pytest.mark.parametrize("scores, expected", [([0.5], 0.5), (list(range(10)), 0.0), (list(range(11)), 0.5),
                                              ([3, 1, 2, 9, 8, 7, 6, 5, 4, 0, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19], 0.5)])
def test_lowest_decile_mean(scores, expected):
    assert lowest_decile_mean(np.asarray(scores, dtype=np.float64)) == expected
