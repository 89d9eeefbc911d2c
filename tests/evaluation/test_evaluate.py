"""Evaluation protocols: metrics against scipy, answers by hand on tiny data, and every
sub-matrix protocol against refitting a scorer on the split."""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from gpu_neighbors import NeighborsScorer
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.cli import main
from gpu_neighbors.core.correlation import spearman_interval, spearman_pvalue, spearman_rows
from gpu_neighbors.evaluation.agreement import agreement, human_agreement
from gpu_neighbors.evaluation.protocols import (
    cross_task,
    cross_validate,
    fold_indices,
    learning_curve,
    leave_one_out,
    sweep,
)
from gpu_neighbors.core.neighbours import Prediction
from gpu_neighbors.core.pairwise import PairwiseSimilarities, Thresholds

# Two obvious clusters: items 0-2 are 0.5-similar to each other, items 3-5 too, and the
# clusters are 0.1-similar across. With tau = 0.3 each item has exactly its two cluster mates.
CLUSTER_Q = np.array([0.1, 0.2, 0.3, 0.7, 0.8, 0.9])


def cluster_matrix() -> np.ndarray:
    matrix = np.full((6, 6), 0.1)
    matrix[:3, :3] = matrix[3:, 3:] = 0.5
    np.fill_diagonal(matrix, 1.0)
    return matrix


def clusters() -> PairwiseSimilarities:
    return PairwiseSimilarities(cluster_matrix(), CLUSTER_Q)


def brute_force(matrix, scores, test, train, thresholds):
    """The paper's estimator written out directly: the reference for the protocols."""
    estimates = []
    for i in test:
        neighbours = [j for j in train if j != i and matrix[i, j] >= thresholds.tau]
        ok = thresholds.min_neighbors <= len(neighbours) <= thresholds.max_fraction * len([j for j in train if j != i])
        estimates.append(np.mean(scores[neighbours]) if ok else np.nan)
    return np.array(estimates)


# -- correlation ------------------------------------------------------------------------------


def test_spearman_rows_equals_scipy_with_masks_and_ties(huse_scores):
    rng = np.random.default_rng(1)
    truth = np.asarray(huse_scores[:60])  # real scores, with ties
    rows = np.round(rng.random((40, 60)), 1)  # ties in the estimates as well
    rows[rng.random((40, 60)) < 0.3] = np.nan
    rows[0] = np.nan  # nothing covered
    rows[1, 2:] = np.nan  # two covered
    rows[2, :] = 0.5  # constant
    got = spearman_rows(rows, truth)
    for row, value in zip(rows, got):
        keep = np.isfinite(row)
        if keep.sum() < 2 or np.ptp(row[keep]) == 0:
            assert np.isnan(value)
        else:
            assert value == pytest.approx(stats.spearmanr(row[keep], truth[keep]).statistic, abs=1e-12)


def test_pvalue_equals_scipy_and_interval_equals_a_scipy_loop(huse_scores):
    truth = np.asarray(huse_scores[:50])
    estimate = truth + np.random.default_rng(2).normal(0, 0.15, truth.size)
    reference = stats.spearmanr(estimate, truth)
    assert spearman_pvalue(reference.statistic, truth.size) == pytest.approx(reference.pvalue, rel=1e-9)
    low, high = spearman_interval(estimate, truth, resamples=200, seed=5)
    order = np.lexsort((truth, estimate))  # the draws index the pairs in their canonical order
    estimate, truth = estimate[order], truth[order]
    draws = np.random.default_rng(5).integers(0, truth.size, size=(200, truth.size))
    loop = [stats.spearmanr(estimate[d], truth[d]).statistic for d in draws]
    assert (low, high) == pytest.approx(tuple(np.percentile(loop, [2.5, 97.5])), abs=1e-12)
    assert low < reference.statistic < high


def test_the_interval_is_the_same_in_any_order_of_the_data(huse_scores):
    """evaluate printed rho's interval as 0.5677-0.7638 on examples/train.jsonl and 0.5665-0.7544
    on the same lines shuffled: the bootstrap drew indices into the pairs in file order. Ties in
    both columns (repeated pairs) are drawn alike too."""
    truth = np.round(np.asarray(huse_scores[:60]), 1)
    estimate = np.round(truth + np.random.default_rng(3).normal(0, 0.2, truth.size), 1)
    shuffle = np.random.default_rng(4).permutation(truth.size)
    assert spearman_interval(estimate, truth, resamples=300) == spearman_interval(estimate[shuffle], truth[shuffle],
                                                                                  resamples=300)
    covered = np.ones(truth.size, dtype=bool)
    prediction = Prediction(scores=estimate, num_neighbors=np.ones(truth.size, dtype=np.int64),
                            std=np.zeros(truth.size), covered=covered)
    shuffled = Prediction(scores=estimate[shuffle], num_neighbors=np.ones(truth.size, dtype=np.int64),
                          std=np.zeros(truth.size), covered=covered)
    assert agreement(prediction, truth) == agreement(shuffled, truth[shuffle])


def test_the_human_average_interval_is_the_same_in_any_order_of_the_records(huse_records):
    records = [{"score": r["score"], "judgments": r["judgments"]} for r in huse_records[:80]]
    assert human_agreement(records, resamples=300) == human_agreement(records[::-1], resamples=300)


def test_agreement_by_hand():
    prediction = Prediction(
        scores=np.array([0.2, np.nan, 0.4, 0.9]), num_neighbors=np.array([3, 0, 3, 3]),
        std=np.zeros(4), covered=np.array([True, False, True, True]),
    )
    result = agreement(prediction, [0.1, 0.5, 0.6, 0.7], resamples=0)
    assert result.coverage == 0.75 and result.n == 4
    assert result.mse == pytest.approx((0.01 + 0.04 + 0.04) / 3)
    assert result.spearman == pytest.approx(1.0)
    assert result.spearman_p == 0.0
    assert np.isnan(result.spearman_low)


# -- human rows -------------------------------------------------------------------------------


def test_human_agreement_by_hand():
    records = [
        {"score": 0.2, "judgments": [{"worker": "a", "score": 1}, {"worker": "b", "score": 2}]},
        {"score": 0.6, "judgments": [{"worker": "a", "score": 3}, {"worker": "b", "score": 2}]},
        {"score": 0.8, "judgments": [{"worker": "a", "score": 4}, {"worker": "b", "score": 5}]},
    ]
    rows = human_agreement(records, resamples=0)
    mse_a = 0.0  # a's judgments / 5 equal the scores
    mse_b = ((0.4 - 0.2) ** 2 + (0.4 - 0.6) ** 2 + (1.0 - 0.8) ** 2) / 3
    rho_b = stats.spearmanr([2, 2, 5], [0.2, 0.6, 0.8]).statistic
    assert rows["Human (best)"].mse == pytest.approx(mse_a)
    assert rows["Human (best)"].spearman == pytest.approx(1.0)
    assert rows["Human (average)"].mse == pytest.approx((mse_a + mse_b) / 2)
    assert rows["Human (average)"].spearman == pytest.approx((1.0 + rho_b) / 2)
    with pytest.raises(ValueError, match="judgments"):
        human_agreement([{"score": 0.5}])


def test_human_agreement_matches_the_figures_the_data_readme_gives(huse_records):
    rows = human_agreement(huse_records, resamples=0)
    assert rows["Human (average)"].mse == pytest.approx(0.0803, abs=5e-5)
    assert rows["Human (best)"].mse == pytest.approx(0.0200, abs=5e-5)
    assert rows["Human (average)"].spearman == pytest.approx(0.411, abs=5e-4)
    assert rows["Human (best)"].spearman == pytest.approx(0.923, abs=5e-4)


# -- protocols by hand on the cluster matrix --------------------------------------------------


def test_leave_one_out_on_clusters_by_hand():
    result = cross_validate(clusters(), Thresholds(0.3, 2, 1.0), folds=None, resamples=0)
    np.testing.assert_allclose(result.prediction.scores, [0.25, 0.2, 0.15, 0.85, 0.8, 0.75], atol=1e-15)
    assert result.agreement.coverage == 1.0
    # within clusters the order flips, across clusters it holds: d = (2, 0, -2, 2, 0, -2)
    assert result.agreement.spearman == pytest.approx(1 - 6 * 16 / (6 * 35))


def test_kfold_on_clusters_against_the_estimator_written_out():
    sims, thresholds = clusters(), Thresholds(0.3, 1, 1.0)
    result = cross_validate(sims, thresholds, folds=3, seed=4, resamples=0)
    parts = fold_indices(6, 3, seed=4)
    assert sorted(np.concatenate(parts).tolist()) == list(range(6))
    for part in parts:
        train = [j for j in range(6) if j not in part]
        expected = brute_force(cluster_matrix(), CLUSTER_Q, part, train, thresholds)
        np.testing.assert_allclose(result.prediction.scores[part], expected, atol=1e-15)
    with pytest.raises(ValueError, match="folds"):
        fold_indices(6, 7)


def test_sweeps_on_clusters_by_hand():
    sims, base = clusters(), Thresholds(0.3, 2, 1.0)
    by_a = {point.value: point.agreement.coverage for point in sweep(sims, base, "a", [1, 2, 3], resamples=0)}
    assert by_a == {1.0: 1.0, 2.0: 1.0, 3.0: 0.0}  # every item has exactly two neighbours
    by_b = {point.value: point.agreement.coverage for point in sweep(sims, base, "b", [0.2, 0.4, 0.6], resamples=0)}
    assert by_b == {0.2: 0.0, 0.4: 1.0, 0.6: 1.0}  # two neighbours <= b * 5 from b = 0.4
    by_tau = sweep(sims, base, "tau", [0.05, 0.3, 0.6], resamples=0)
    assert [point.agreement.coverage for point in by_tau] == [1.0, 1.0, 0.0]
    assert by_tau[0].agreement.spearman == pytest.approx(-1.0)  # everyone's neighbours: mean of the rest
    with pytest.raises(ValueError, match="parameter"):
        sweep(sims, base, "c")


def test_learning_curve_full_size_is_leave_one_out_and_runs_are_seeded():
    sims, thresholds = clusters(), Thresholds(0.3, 1, 1.0)
    full = learning_curve(sims, thresholds, sizes=[6], runs=3)[0]
    assert full.spearman_mean == pytest.approx(1 - 6 * 16 / (6 * 35)) and full.spearman_std == 0
    # tau = 0.05: every other item of a subset is a neighbour, so each estimate is the mean of the
    # others, which reverses the order of the truth: rho = -1 and coverage 1 in every subset
    first = learning_curve(sims, Thresholds(0.05, 1, 1.0), sizes=[3, 4], runs=5, seed=9)
    assert first == learning_curve(sims, Thresholds(0.05, 1, 1.0), sizes=[3, 4], runs=5, seed=9)
    for point in first:
        assert (point.spearman_mean, point.spearman_std, point.coverage_mean) == (pytest.approx(-1.0), 0.0, 1.0)
        assert point.defined == point.runs == 5
    with pytest.raises(ValueError, match="size"):
        learning_curve(sims, thresholds, sizes=[7])


# -- sub-matrices equal refitting a scorer on the split ---------------------------------------

RULE = dict(tau=0.12, min_neighbors=1, max_fraction=0.5)
SETTINGS = dict(kernel="bleu", estimator=Threshold(**RULE), device="cpu")


@pytest.fixture(scope="module")
def real(huse_texts, huse_scores):
    texts, scores = huse_texts[:40], np.asarray(huse_scores[:40])
    scorer = NeighborsScorer(**SETTINGS)
    return texts, scores, scorer.fit_pairwise(texts, scores), scorer.thresholds_


def test_leave_one_out_pass_equals_the_scorer(real):
    texts, scores, sims, thresholds = real
    ours = cross_validate(sims, thresholds, folds=None, resamples=0).prediction
    theirs, _ = leave_one_out(NeighborsScorer(**SETTINGS), texts, scores)
    np.testing.assert_array_equal(ours.scores, theirs.scores)
    np.testing.assert_array_equal(ours.num_neighbors, theirs.num_neighbors)
    assert 0.3 < theirs.coverage < 1.0  # the settings leave some items without an estimate


def test_kfold_equals_refitting_on_each_training_fold(real):
    texts, scores, sims, thresholds = real
    result = cross_validate(sims, thresholds, folds=4, seed=1, resamples=0)
    for fold in result.folds:
        train = np.setdiff1d(np.arange(len(texts)), fold.test)
        refit = NeighborsScorer(**SETTINGS).fit([texts[i] for i in train], scores[train])
        direct = refit.predict([texts[i] for i in fold.test])
        np.testing.assert_array_equal(result.prediction.scores[fold.test], direct.scores)
        np.testing.assert_array_equal(result.prediction.num_neighbors[fold.test], direct.num_neighbors)


def test_subset_leave_one_out_equals_refitting_on_the_subset(real):
    texts, scores, sims, thresholds = real
    subset = np.array([0, 3, 4, 8, 9, 15, 16, 23, 30, 31, 38])
    ours = sims.leave_one_out(subset, thresholds)
    refit = NeighborsScorer(**SETTINGS).fit([texts[i] for i in subset], scores[subset]).leave_one_out()
    np.testing.assert_array_equal(ours.scores, refit.scores)


def test_sweep_points_equal_scorers_with_those_thresholds(real):
    texts, scores, sims, thresholds = real
    for parameter, value, name in (("a", 3, "min_neighbors"), ("b", 0.2, "max_fraction"), ("tau", 0.2, "tau")):
        point = sweep(sims, thresholds, parameter, [value], resamples=0)[0]
        scorer = NeighborsScorer(**{**SETTINGS, "estimator": Threshold(**{**RULE, name: value})})
        _, expected = leave_one_out(scorer, texts, scores)
        assert point.agreement.spearman == expected.spearman or (
            np.isnan(point.agreement.spearman) and np.isnan(expected.spearman)
        )
        assert point.agreement.coverage == expected.coverage


def test_cross_task_fits_on_train_only(real):
    texts, scores, _, _ = real
    result = cross_task(NeighborsScorer(**SETTINGS), texts[:25], scores[:25], texts[25:], scores[25:], resamples=0)
    direct = NeighborsScorer(**SETTINGS).fit(texts[:25], scores[:25]).predict(texts[25:])
    np.testing.assert_array_equal(result.prediction.scores, direct.scores)
    assert result.thresholds == Thresholds(0.12, 1, 0.5) and result.tuning is None


# -- command line -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_file(tmp_path_factory, huse_records):
    path = tmp_path_factory.mktemp("studio") / "data.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in huse_records[:40]), encoding="utf-8")
    return path


MODEL = ["--tau", "0.12", "--min-neighbors", "1", "--max-fraction", "0.5", "--device", "cpu"]


def run_json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_crossval_matches_the_library(capsys, data_file, real):
    _, _, sims, thresholds = real
    out = run_json(capsys, "crossval", "--data", str(data_file), "--folds", "4", "--seed", "1", *MODEL)
    expected = cross_validate(sims, thresholds, folds=4, seed=1)
    assert out["rows"][0]["spearman"] == pytest.approx(expected.agreement.spearman, abs=1e-12)
    assert out["rows"][0]["coverage"] == expected.agreement.coverage
    assert out["thresholds_used"] == [{"tau": 0.12, "min_neighbors": 1, "max_fraction": 0.5, "folds": 4}]


def test_cli_sweep_curve_and_cross_task(capsys, data_file, real):
    _, _, sims, thresholds = real
    out = run_json(capsys, "sweep", "--data", str(data_file), "--parameter", "a", "--values", "1:3:1", *MODEL)
    assert [row["value"] for row in out["rows"]] == [1.0, 2.0, 3.0]
    assert out["rows"][2]["coverage"] == sweep(sims, thresholds, "a", [3])[0].agreement.coverage
    out = run_json(capsys, "curve", "--data", str(data_file), "--sizes", "20,40", "--runs", "2", *MODEL)
    assert [row["size"] for row in out["rows"]] == [20, 40] and out["rows"][1]["spearman_std"] == 0
    out = run_json(capsys, "cross-task", "--train", str(data_file), "--test", str(data_file), *MODEL)
    assert out["rows"][0]["min_neighbors"] == 1 and out["tuning"] is None
    assert main(["sweep", "--data", str(data_file), "--values", "1,2", *MODEL]) == 2  # needs one parameter
    assert "one --parameter" in capsys.readouterr().err


def test_cli_markdown_output(capsys, data_file):
    assert main(["crossval", "--data", str(data_file), "--folds", "loo", *MODEL]) == 0
    out = capsys.readouterr().out
    assert out.startswith("leave-one-out on") and "| spearman |" in out.replace("spearman_p", "")


def test_protocols_say_when_the_kernel_was_chosen_on_all_items(huse_texts, huse_scores):
    """Splits cut from one pass of a scorer whose kernel `auto` chose on every item: each test
    item took part in the choice, and the protocol's pass says so; one named kernel does not."""
    import warnings as warning_module

    from gpu_neighbors.kernels.parts import Auto

    texts, scores = huse_texts[:120], huse_scores[:120]
    with pytest.warns(UserWarning, match="the kernel was chosen on all 120 items"):
        NeighborsScorer(kernel=Auto(["bleu", "rouge"]), device="cpu").fit_pairwise(texts, scores)
    with warning_module.catch_warnings(record=True) as seen:
        warning_module.simplefilter("always")
        NeighborsScorer(kernel="bleu", device="cpu").fit_pairwise(texts, scores)
    assert not [warning for warning in seen if "chosen on all" in str(warning.message)]
