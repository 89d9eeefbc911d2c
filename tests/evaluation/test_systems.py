"""Comparison of systems: exact invariance under reordering, means and coverage against direct
computation, clear errors, and the shrinkage factor against its definitions."""
from __future__ import annotations

import warnings
from itertools import combinations

import numpy as np
import pytest

from gpu_neighbors.data import InputError
from gpu_neighbors.evaluation.systems import (
    Labelled,
    compare_systems,
    leave_one_out_scale,
    shrinkage_slope,
)


def _candidates(seed: int = 0, inputs: int = 30):
    rng = np.random.default_rng(seed)
    systems, labels, estimates = [], [], []
    for name, shift in (("beam", 0.05), ("sample", 0.0), ("greedy", -0.03)):
        for item in range(inputs):
            if rng.random() < 0.1:  # not every system answered every input
                continue
            systems.append(name)
            labels.append(f"prompt-{item}")
            estimates.append(np.nan if rng.random() < 0.15 else rng.normal(0.5 + shift, 0.15))
    return np.array(estimates), systems, labels


@pytest.mark.parametrize("paired", [True, False])
def test_statistics_are_exactly_invariant_under_reordering(paired):
    estimates, systems, inputs = _candidates()
    reference = compare_systems(estimates, systems, inputs if paired else None, resamples=300, trials=400, seed=9)
    for seed in range(3):
        order = np.random.default_rng(seed).permutation(len(systems))
        shuffled = compare_systems(estimates[order], [systems[i] for i in order],
                                   [inputs[i] for i in order] if paired else None, resamples=300, trials=400, seed=9)
        assert shuffled.as_dict() == reference.as_dict()
        np.testing.assert_array_equal(shuffled.resampled, reference.resampled)


@pytest.mark.parametrize("paired", [True, False])
def test_means_coverage_and_differences_equal_direct_computation(paired):
    estimates, systems, inputs = _candidates(1)
    result = compare_systems(estimates, systems, inputs if paired else None, resamples=200, trials=200)
    names = np.array(systems)
    for row in result.systems:
        mine = estimates[names == row.system]
        assert (row.texts, row.covered) == (mine.size, int(np.sum(~np.isnan(mine))))
        assert row.mean == pytest.approx(np.nanmean(mine), abs=1e-12)
        assert row.low < row.mean < row.high
    assert [row.system for row in result.systems] == sorted({*systems}, key=lambda s: -np.nanmean(estimates[names == s]))
    for row in result.pairs:
        if paired:  # on the inputs where both have an estimate
            first = {i: e for s, i, e in zip(systems, inputs, estimates) if s == row.first and not np.isnan(e)}
            second = {i: e for s, i, e in zip(systems, inputs, estimates) if s == row.second and not np.isnan(e)}
            shared = sorted(first.keys() & second.keys())
            expected = np.mean([first[i] for i in shared]) - np.mean([second[i] for i in shared])
            assert row.compared == len(shared)
        else:
            expected = np.nanmean(estimates[names == row.first]) - np.nanmean(estimates[names == row.second])
        assert row.difference == pytest.approx(expected, abs=1e-12)
        assert row.low <= row.difference <= row.high
    assert len(result.pairs) == 3


def test_bad_labels_are_refused_naming_file_line_and_field():
    where = {"path": "c.jsonl", "system_field": "model", "pair_field": "prompt"}
    with pytest.raises(InputError, match=r"^c.jsonl: field 'model': found one system \(only 'a'\)"):
        compare_systems(np.ones(3), Labelled.of(["a", "a", "a"], **where))
    with pytest.raises(InputError, match=r"^c.jsonl:3: field 'model': system 'b' has only this one text"):
        compare_systems(np.ones(4), Labelled.of(["a", "a", "b", "a"], **where))
    with pytest.raises(InputError, match=r"^c.jsonl:4: field 'prompt': system 'a' already has a text for input 'p1' \(line 1\)"):
        compare_systems(np.ones(5), Labelled.of(["a", "b", "b", "a", "a"], ["p1", "p1", "p2", "p1", "p3"], **where))
    with pytest.raises(ValueError, match="resamples must be a positive integer"):
        compare_systems(np.ones(4), ["a", "a", "b", "b"], resamples=0)


def test_bad_estimates_and_labels_given_in_python_are_refused_by_name():
    """Before: systems="abab..." compared one system per character; an infinite estimate gave a
    mean of inf and NaN bounds; human scores of another length a numpy broadcast error; strings
    numpy's "could not convert string to float"; a 2-D array "12 estimates for 12 candidates"."""
    estimates, systems = np.linspace(0.0, 1.0, 12), ["a", "b", "c"] * 4
    for call, error, message in [
        (lambda: compare_systems(estimates, "abc" * 4), TypeError, "systems must be one label per candidate"),
        (lambda: compare_systems(estimates, systems, inputs="i" * 12), TypeError, "inputs must be one label"),
        (lambda: compare_systems(np.r_[estimates[:-1], np.inf], systems), ValueError, r"estimates\[11\] is inf"),
        (lambda: compare_systems(["x"] * 12, systems), TypeError, "estimates must be numbers"),
        # Numbers as strings were converted in silence (numpy reads "0.5" as 0.5), and None as NaN.
        (lambda: compare_systems([*estimates[:5], "0.5", *estimates[6:]], systems), TypeError,
         r"estimates\[5\] is '0.5' \(str\)"),
        (lambda: compare_systems([*estimates[:5], None, *estimates[6:]], systems), TypeError,
         r"estimates\[5\] is None \(NoneType\)"),
        (lambda: compare_systems([True] * 12, systems), TypeError, r"estimates\[0\] is True \(bool\)"),
        (lambda: compare_systems(estimates.reshape(3, 4), systems), ValueError, r"not of shape \(3, 4\)"),
        (lambda: leave_one_out_scale(estimates, estimates[:-1], systems), ValueError, "12 estimates but 11 human"),
        (lambda: leave_one_out_scale(estimates, np.r_[estimates[:-1], -np.inf], systems), ValueError,
         r"human\[11\] is -inf"),
    ]:
        with pytest.raises(error, match=message):
            call()
    with_nan = np.r_[estimates[:-1], np.nan]
    assert compare_systems(with_nan, systems, resamples=50, trials=5).systems[0].covered in (3, 4)


def test_numpy_integers_set_the_draws_and_a_bad_seed_is_named():
    """resamples=np.int64(50) was refused as "must be a positive integer"; seed="x" failed in
    numpy's SeedSequence."""
    estimates, systems = np.linspace(0.0, 1.0, 12), ["a", "b", "c"] * 4
    want = compare_systems(estimates, systems, resamples=50, trials=5, seed=3)
    got = compare_systems(estimates, systems, resamples=np.int64(50), trials=np.int32(5), seed=np.uint8(3))
    assert got.as_dict() == want.as_dict()
    with pytest.raises(ValueError, match="seed must be a non-negative integer, not 'x'"):
        compare_systems(estimates, systems, seed="x")


def test_shrinkage_slope_is_the_ratio_of_differences_and_the_slope_of_pairwise_differences():
    assert shrinkage_slope(np.array([0.6, 0.5]), np.array([0.9, 0.5]))[0] == pytest.approx(0.25)
    rng = np.random.default_rng(0)
    estimated, human = rng.random(6), rng.random(6)
    pairs = list(combinations(range(6), 2))
    d_e = np.array([estimated[i] - estimated[j] for i, j in pairs])
    d_h = np.array([human[i] - human[j] for i, j in pairs])
    through_origin = np.linalg.lstsq(d_h[:, None], d_e, rcond=None)[0][0]
    assert shrinkage_slope(estimated, human)[0] == pytest.approx(through_origin, abs=1e-12)
    assert shrinkage_slope(estimated, human)[0] == pytest.approx(np.polyfit(human, estimated, 1)[0], abs=1e-12)


def test_leave_one_out_scale_recovers_a_known_shrinkage():
    """Estimates that are exactly 0.5 x human + 0.2: every resample's slope is 0.5, the human
    comparison runs on the same texts (those with an estimate) and both agree on every pair."""
    rng = np.random.default_rng(4)
    systems = ["a"] * 40 + ["b"] * 40 + ["c"] * 40
    human = np.concatenate([rng.normal(0.7, 0.1, 40), rng.normal(0.5, 0.1, 40), rng.normal(0.3, 0.1, 40)])
    estimates = 0.5 * human + 0.2
    estimates[::9] = np.nan
    scale = leave_one_out_scale(estimates, human, systems, resamples=300, trials=300)
    assert scale.shrinkage == pytest.approx(0.5, abs=1e-12)
    assert scale.shrinkage_low == pytest.approx(0.5, abs=1e-9) and scale.shrinkage_high == pytest.approx(0.5, abs=1e-9)
    assert [row.covered for row in scale.human.systems] == [row.covered for row in scale.estimated.systems]
    assert scale.agreement() == {"same_order": True, "pairs": 3, "same_sign": 3, "same_verdict": 3}
    for row in scale.pairs():
        assert row["difference"] == pytest.approx(0.5 * row["human_difference"], abs=1e-12)


def test_a_costly_unpaired_randomization_is_announced(monkeypatch):
    from gpu_neighbors.evaluation import systems as module

    estimates, names, inputs = _candidates(2)
    monkeypatch.setattr(module, "UNPAIRED_WORK_WARNING", 100 * 50)
    with pytest.warns(UserWarning, match="unpaired randomization test draws"):
        compare_systems(estimates, names, resamples=20, trials=100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compare_systems(estimates, names, inputs, resamples=20, trials=100)  # paired: no such cost


def test_labels_none_of_mixed_types_or_from_a_generator():
    """A None label or labels of two types (1 and "1") failed in sorting the names with "'<' not
    supported between instances of 'NoneType' and 'str'"; a generator of labels with "object of
    type 'generator' has no len()"."""
    estimates = np.linspace(0.0, 1.0, 6)
    for systems, message in ((["a", "a", None, None, "b", "b"], r"systems\[2\] is None"),
                             ([1, 1, "1", "1", 2, 2], r"systems\[2\] is str, systems\[0\] int")):
        with pytest.raises(TypeError, match=message):
            compare_systems(estimates, systems)
    with pytest.raises(TypeError, match=r"inputs\[1\] is None"):
        compare_systems(estimates, list("aaabbb"), inputs=["x", None, "z", "x", "y", "z"])
    expected = compare_systems(estimates, list("aabbcc"), resamples=20, trials=5)
    assert compare_systems(estimates, iter("aabbcc"), resamples=20, trials=5).as_dict() == expected.as_dict()
