"""The significance tests against sacrebleu itself (fully covered, paired data) and against
brute-force loops (missing estimates, unpaired systems), with the same seed and draws; chunked
draws equal one full draw; p-values of systems from one distribution are uniform."""
from __future__ import annotations

from fractions import Fraction
from itertools import combinations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from conftest import needs
from gpu_neighbors.evaluation import significance
from gpu_neighbors.evaluation.significance import interval, paired_tests, unpaired_tests


def _sacrebleu_mean_metric():
    """A sacrebleu Metric whose corpus score is the mean of per-segment numbers (each
    hypothesis is a number written with repr): per-segment statistics [value, 1]."""
    from sacrebleu.metrics.base import Metric, Score

    class MeanMetric(Metric):
        def _extract_corpus_statistics(self, hypotheses, references):
            return [[float(text), 1.0] for text in hypotheses]

        def _compute_score_from_stats(self, stats):
            return Score("MEAN", float(stats[0]) / float(stats[1]))

        def _aggregate_and_compute(self, stats):
            return self._compute_score_from_stats(np.asarray(stats, dtype=np.float64).reshape(-1, 2).sum(0))

        def _preprocess_segment(self, sent):
            return sent

        def _extract_reference_info(self, refs):
            return {}

        def _compute_segment_statistics(self, hypothesis, ref_kwargs):
            return [float(hypothesis), 1.0]

    metric = MeanMetric()
    metric.num_refs = 1  # what its signature records; no references are used
    return metric


@needs("lxml")
@pytest.mark.parametrize("test_type", ["bs", "ar"])
def test_paired_tests_equal_sacrebleu(test_type):
    from sacrebleu.significance import PairedTest

    rng = np.random.default_rng(3)
    n, draws = 80, 1000 if test_type == "bs" else 2000
    values = np.stack([rng.normal(0.5, 0.2, n), rng.normal(0.56, 0.2, n), rng.normal(0.49, 0.2, n)], axis=1)
    systems = [(name, [repr(float(value)) for value in values[:, j]]) for j, name in enumerate("abc")]
    test = PairedTest(systems, {"MEAN": _sacrebleu_mean_metric()}, references=None, test_type=test_type,
                      n_samples=draws, n_ar_confidence=-1)
    _, results = test()
    ours = paired_tests(values, [(0, 1), (0, 2)], resamples=draws, trials=draws, seed=12345)
    for position, result in enumerate(results["MEAN"][1:]):
        pair = ours.pairs[position]
        assert pair.difference == pytest.approx(values[:, 0].mean() - values[:, position + 1].mean(), abs=1e-12)
        if test_type == "bs":
            assert pair.p_bootstrap == result.p_value
            low, high = interval(ours.resampled[:, position + 1])
            assert (high - low) / 2 == pytest.approx(result.ci, abs=1e-6)  # sacrebleu sums in float32
        else:
            assert pair.p_randomization == result.p_value
    if test_type == "bs":  # the baseline's interval, from sacrebleu's own resampling
        assert (ours.highs[0] - ours.lows[0]) / 2 == pytest.approx(results["MEAN"][0].ci, abs=1e-6)
    assert 0 < min(pair.p_bootstrap if test_type == "bs" else pair.p_randomization for pair in ours.pairs) < 0.2


def _brute_paired(values, pairs, resamples, trials, seed):
    """Loops over resamples and trials, one system and one pair at a time."""
    n, k = values.shape
    index = np.random.default_rng(seed).choice(n, size=(resamples, n), replace=True)
    masks = np.random.default_rng(seed).integers(2, size=(trials, n), dtype=bool)
    system_means = []
    for j in range(k):
        resampled = []
        for row in index:
            drawn = values[row, j]
            drawn = drawn[~np.isnan(drawn)]
            resampled.append(drawn.mean() if drawn.size else np.nan)
        system_means.append(resampled)
    out = []
    for j, m in pairs:
        both = ~np.isnan(values[:, j]) & ~np.isnan(values[:, m])
        observed = values[both, j].mean() - values[both, m].mean()
        differences = []
        for row in index:
            chosen = row[both[row]]
            differences.append(values[chosen, j].mean() - values[chosen, m].mean() if chosen.size else np.nan)
        differences = np.array(differences)
        finite = np.abs(differences[np.isfinite(differences)])
        p_bs = (np.sum(finite - finite.mean() > abs(observed)) + 1) / (finite.size + 1)
        null = []
        for mask in masks:
            a = np.where(mask, values[:, m], values[:, j])[both].mean()
            b = np.where(mask, values[:, j], values[:, m])[both].mean()
            null.append(abs(a - b))
        p_ar = (np.sum(np.array(null) > abs(observed)) + 1) / (trials + 1)
        out.append((observed, interval(differences), p_bs, p_ar, int(both.sum())))
    return np.array(system_means).T, out


def test_paired_tests_with_missing_estimates_equal_brute_force():
    rng = np.random.default_rng(7)
    n = 40
    values = np.stack([rng.normal(0.5, 0.2, n), rng.normal(0.6, 0.2, n), rng.normal(0.55, 0.2, n)], axis=1)
    values[rng.random(values.shape) < 0.2] = np.nan
    pairs = list(combinations(range(3), 2))
    ours = paired_tests(values, pairs, resamples=300, trials=500, seed=11)
    means, reference = _brute_paired(values, pairs, 300, 500, 11)
    np.testing.assert_allclose(ours.resampled, means, rtol=0, atol=1e-12)
    for pair, (observed, (low, high), p_bs, p_ar, compared) in zip(ours.pairs, reference):
        assert pair.difference == pytest.approx(observed, abs=1e-12)
        assert (pair.low, pair.high) == pytest.approx((low, high), abs=1e-12)
        assert (pair.p_bootstrap, pair.p_randomization, pair.compared) == (p_bs, p_ar, compared)


def test_unpaired_tests_equal_brute_force():
    rng = np.random.default_rng(5)
    groups = [np.sort(rng.normal(0.5, 0.2, 23)), np.sort(rng.normal(0.62, 0.2, 31)), np.sort(rng.normal(0.5, 0.2, 17))]
    pairs = list(combinations(range(3), 2))
    ours = unpaired_tests(groups, pairs, resamples=200, trials=300, seed=4)
    stream = np.random.default_rng(4)
    means = np.stack([groups[j][stream.choice(groups[j].size, size=(200, groups[j].size))].mean(1)
                      for j in range(3)], axis=1)
    np.testing.assert_allclose(ours.resampled, means, rtol=0, atol=1e-12)
    for (j, m), pair in zip(pairs, ours.pairs):
        observed = groups[j].mean() - groups[m].mean()
        differences = means[:, j] - means[:, m]
        centred = np.abs(differences) - np.abs(differences).mean()
        assert pair.p_bootstrap == (np.sum(centred > abs(observed)) + 1) / 201
        keys = np.random.default_rng(4).random((300, groups[j].size + groups[m].size))
        pooled = np.concatenate([groups[j], groups[m]])
        null = []
        for row in keys:
            in_first = np.zeros(pooled.size, bool)
            in_first[np.argsort(row)[:groups[j].size]] = True
            null.append(abs(pooled[in_first].mean() - pooled[~in_first].mean()))
        assert pair.p_randomization == (np.sum(np.array(null) > abs(observed)) + 1) / 301
        assert pair.compared == groups[j].size + groups[m].size


def test_chunked_draws_equal_one_full_draw(monkeypatch):
    """Small chunks (the boolean draw cut at multiples of 32 rows) give the same numbers."""
    rng = np.random.default_rng(1)
    values = rng.normal(0.5, 0.2, (50, 3))
    values[rng.random(values.shape) < 0.1] = np.nan
    pairs = list(combinations(range(3), 2))
    whole = paired_tests(values, pairs, resamples=130, trials=170, seed=2)
    monkeypatch.setattr(significance, "CHUNK_ELEMENTS", 50 * 7)
    assert significance._rows_per_chunk(50) == 7 and significance._rows_per_chunk(50, 32) == 32
    chunked = paired_tests(values, pairs, resamples=130, trials=170, seed=2)
    np.testing.assert_allclose(chunked.resampled, whole.resampled, rtol=0, atol=1e-12)
    assert [(p.p_bootstrap, p.p_randomization) for p in chunked.pairs] == \
        [(p.p_bootstrap, p.p_randomization) for p in whole.pairs]


def test_p_values_of_systems_from_one_distribution_are_uniform():
    """200 comparisons of two systems drawn from the same distribution (fixed seeds, so the
    verdict cannot flake): approximate randomization and the permutation test give p-values
    that a Kolmogorov-Smirnov test cannot tell from uniform, and about 5% of them below 0.05."""
    rng = np.random.default_rng(2024)
    paired_p, unpaired_p, bootstrap_p = [], [], []
    for repeat in range(200):
        values = rng.beta(4, 3, (40, 2))
        tests = paired_tests(values, [(0, 1)], resamples=200, trials=400, seed=repeat)
        paired_p.append(tests.pairs[0].p_randomization)
        bootstrap_p.append(tests.pairs[0].p_bootstrap)
        groups = [np.sort(rng.beta(4, 3, 25)), np.sort(rng.beta(4, 3, 35))]
        unpaired_p.append(unpaired_tests(groups, [(0, 1)], resamples=50, trials=400, seed=repeat).pairs[0].p_randomization)
    for p_values in (paired_p, unpaired_p):
        assert scipy_stats.kstest(p_values, "uniform").pvalue > 0.01
        assert 0.01 <= np.mean(np.array(p_values) < 0.05) <= 0.10
    # sacrebleu's bootstrap p (centred resampled differences) is not uniform under the null:
    # it rejects more often; stated, not hidden
    assert np.mean(np.array(bootstrap_p) < 0.05) >= np.mean(np.array(paired_p) < 0.05)


def test_p_value_counts_strictly_greater_and_zero_difference_is_one():
    assert significance.p_value(np.array([0.1, 0.2, 0.3, 0.2]), 0.2) == 2 / 5
    assert significance.p_value(np.zeros(9), 0.0) == 1.0
    assert interval(np.arange(80.0)) == (2.0, 77.0)  # sacrebleu: n // 40 from each end


def test_the_same_values_in_another_order_give_the_same_mean_and_a_difference_of_exactly_0():
    """Issue 32: a mean that depends on the order of its terms made two systems with the same
    texts in another order differ by -1.5e-17, and p (bootstrap) 0.44 instead of 1."""
    rng = np.random.default_rng(1)
    values = rng.random(7) * 10.0 ** rng.integers(-3, 3, 7)  # magnitudes apart: the order shows in a float sum
    paired = np.stack([values, values[rng.permutation(7)], values[::-1]], axis=1)
    tests = paired_tests(paired, [(0, 1), (0, 2), (1, 2)], resamples=100, trials=100)
    assert len(set(tests.means.tolist())) == 1
    assert [(pair.difference, pair.p_bootstrap, pair.p_randomization) for pair in tests.pairs] == [(0.0, 1.0, 1.0)] * 3
    unpaired = unpaired_tests([paired[:, 0], paired[:, 1], paired[:, 2]], [(0, 1), (0, 2)], resamples=100, trials=100)
    assert len(set(unpaired.means.tolist())) == 1
    assert [(pair.difference, pair.p_bootstrap) for pair in unpaired.pairs] == [(0.0, 1.0)] * 2
    assert tests.means[0] == float(sum(Fraction(float(value)) for value in values)) / 7  # the sum rounded once
