"""Issue 34: the kernel chosen (kernel="auto") by leave-one-out on (a sample of) the training set, and
the combined kernel (a weighted sum of kernels, its weights chosen the same way)."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from scipy import stats

from conftest import write_jsonl
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.choice import first_best, switch_p_value, weight_grid
from gpu_neighbors.cli import main
from gpu_neighbors.core.neighbours import canonical_order, canonical_sample, text_checksums
from gpu_neighbors.estimators import Ridge, TopK
from gpu_neighbors.kernels.parts import Auto, Bleu, Combined, Rouge, Tfidf, part_from_settings


def quiet_fit(scorer: NeighborsScorer, texts, scores, **options) -> NeighborsScorer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return scorer.fit(texts, scores, **options)


def sample_of(texts, scores, size):
    """The choice's sample, found here from its definition: a seeded draw of `size` places in
    the (checksum, score, position) order of the training set, kept in that order."""
    scores = np.asarray(scores, dtype=np.float64)
    order = np.lexsort((np.arange(len(texts)), scores, text_checksums(texts)))
    kept = order[np.isin(order, canonical_sample(canonical_order(text_checksums(texts), scores), size, seed=0))]
    return [texts[index] for index in kept], scores[kept]


def bootstrap_p(challenger, first, truth) -> float:
    """The switch's p-value written out: scipy's Spearman on each paired resample's texts with
    both estimates (1,000 resamples, seed 0, drawn as choice.py draws them)."""
    resamples = np.random.default_rng(0).integers(0, truth.size, size=(1000, truth.size))
    not_above = 0
    for rows in resamples:
        rhos = []
        for estimates in (challenger, first):
            valid = np.isfinite(estimates[rows])
            rhos.append(stats.spearmanr(estimates[rows][valid], truth[rows][valid])[0])
        not_above += not rhos[0] - rhos[1] > 1e-9
    return not_above / len(resamples)


@pytest.mark.parametrize("size", [90, 150])
def test_auto_leaves_tfidf_only_for_a_kernel_whose_gain_beats_the_noise(huse_texts, huse_scores, size):
    """Each kernel's rho is the inner leave-one-out a scorer with that kernel alone, fitted on
    the same sample (a separate path: its own fit and tuning), reports; the highest wins where a
    paired bootstrap of its gain over tfidf's (written out here with scipy) is below 0.05, else
    tfidf stays."""
    texts, scores = huse_texts[:150], huse_scores[:150]
    scorer = quiet_fit(NeighborsScorer(kernel=Auto(sample=size), device="cpu"), texts, scores)
    sample_texts, sample_scores = sample_of(texts, scores, size)
    expected, estimates = {}, {}
    for part in (Tfidf(), Bleu(), Rouge()):
        alone = quiet_fit(NeighborsScorer(kernel=part, device="cpu"), sample_texts[::-1], sample_scores[::-1].copy())
        expected[part.name] = alone.tuning_.spearman
        loo = alone.leave_one_out()
        estimates[part.name] = np.where(loo.covered, loo.scores, np.nan)[::-1]
    assert list(scorer.selection_) == list(expected)
    np.testing.assert_allclose(list(scorer.selection_.values()), list(expected.values()), rtol=0, atol=1e-12)
    best = max(expected, key=lambda name: expected[name])
    if best != "tfidf" and bootstrap_p(estimates[best], estimates["tfidf"], np.asarray(sample_scores)) >= 0.05:
        best = "tfidf"
    assert scorer.kernel_.name == best and f"kernel:{best}|" in str(scorer.signature)
    assert "auto:" + ",".join(f"{name}={rho:.3f}" for name, rho in expected.items()) in str(scorer.signature)
    # the fitted kernel is that kernel fitted on the whole training set: the same estimates
    named = quiet_fit(NeighborsScorer(kernel=best, device="cpu"), texts, scores)
    np.testing.assert_array_equal(scorer.predict(huse_texts[150:]).scores, named.predict(huse_texts[150:]).scores)


def test_the_choice_is_the_same_in_any_training_order_and_chunk_size(huse_texts, huse_scores):
    texts, scores = huse_texts, np.asarray(huse_scores)
    first = quiet_fit(NeighborsScorer(kernel=Auto(sample=120), device="cpu"), texts, scores)
    order = np.random.default_rng(3).permutation(len(texts))
    again = quiet_fit(NeighborsScorer(kernel=Auto(sample=120), device="cpu", chunk_size=7),
                      [texts[index] for index in order], scores[order])
    assert again.selection_ == first.selection_  # the same bits
    assert again.kernel_name == first.kernel_name


def test_the_weights_are_the_same_in_any_training_order_and_chunk_size(huse_texts, huse_scores):
    texts, scores = huse_texts, np.asarray(huse_scores)
    first = quiet_fit(NeighborsScorer(kernel=Combined(["bleu", "rouge"], sample=100), estimator="topk",
                                      device="cpu"), texts, scores)
    order = np.random.default_rng(5).permutation(len(texts))
    again = quiet_fit(NeighborsScorer(kernel=Combined(["bleu", "rouge"], sample=100), estimator="topk",
                                      device="cpu", chunk_size=11), [texts[index] for index in order], scores[order])
    assert again.selection_ == first.selection_ and again.kernel_part_ == first.kernel_part_


def test_the_switch_needs_a_gain_beyond_the_noise():
    """A challenger that ranks the texts as their scores do beats a noisy first kernel in every
    resample (p 0); one equal to the first never does (p 1); a small edge is not enough."""
    generator = np.random.default_rng(1)
    truth = generator.random(200)
    noisy = truth + generator.normal(0, 0.5, truth.size)
    assert switch_p_value(truth, noisy, truth) == 0.0
    assert switch_p_value(noisy, noisy, truth) == 1.0
    slightly = noisy.copy()
    slightly[:3] = truth[:3] * 2  # a few texts nearer their scores
    assert 0.05 <= switch_p_value(slightly, noisy, truth) < 1.0
    with_gaps = np.where(np.arange(truth.size) % 7 == 0, np.nan, truth)  # texts without an estimate
    assert switch_p_value(with_gaps, noisy, truth) == 0.0


def test_ties_go_to_the_first_candidate():
    assert first_best([0.3, 0.3 + 1e-12, 0.2]) == 0
    assert first_best([0.2, 0.3, 0.3]) == 1
    assert first_best([-np.inf, -np.inf]) == 0
    assert first_best([0.1, 0.1 + 2e-9]) == 1


def test_too_few_texts_to_choose_on_keep_the_first_kernel(huse_texts, huse_scores):
    scorer = quiet_fit(NeighborsScorer(kernel="auto", device="cpu"), huse_texts[:30], huse_scores[:30])
    assert scorer.kernel_name == "tfidf" and scorer.selection_ is None
    asked = quiet_fit(NeighborsScorer(kernel="auto", device="cpu"), huse_texts[:30], huse_scores[:30], tune=True)
    assert list(asked.selection_) == ["tfidf", "bleu", "rouge"]


def test_the_weight_grid_splits_one_into_quarters():
    grid = weight_grid(3)
    assert len(grid) == 15 and len(set(grid)) == 15
    assert grid[:3] == [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)]
    assert all(sum(point) == 1.0 and min(point) >= 0 for point in grid)


def test_a_combined_kernel_is_the_weighted_sum_of_its_kernels(huse_texts, huse_scores):
    """Its similarities are w_bleu k_bleu + w_rouge k_rouge of the single kernels' own, in any
    chunk size, the same bits."""
    texts, scores, candidates = huse_texts[:80], huse_scores[:80], huse_texts[80:140]
    combined = quiet_fit(NeighborsScorer(kernel=Combined(["bleu", "rouge"], weights=[0.25, 0.75]), device="cpu",
                                         chunk_size=9), texts, scores)
    bleu = quiet_fit(NeighborsScorer(kernel="bleu", device="cpu"), texts, scores).similarity(candidates)
    rouge = quiet_fit(NeighborsScorer(kernel="rouge", device="cpu"), texts, scores).similarity(candidates)
    expected = bleu * 0.25
    expected += rouge * 0.75
    assert np.array_equal(combined.similarity(candidates).numpy(), expected.numpy())
    assert str(combined.signature).startswith("kernel:combined|kernels:bleu+rouge|weights:0.25,0.75|")


def test_a_kernel_of_weight_zero_is_never_run(huse_texts, huse_scores):
    scorer = quiet_fit(NeighborsScorer(kernel=Combined(["bleu", "rouge"], weights=[1, 0]), device="cpu"),
                       huse_texts[:60], huse_scores[:60])
    assert [kernel.name for kernel in scorer.kernel_.kernels] == ["bleu"]


@pytest.mark.parametrize("estimator", [Ridge(penalty=0.5), TopK(k=7)])
def test_the_combined_kernels_leave_one_out_equals_refits(huse_texts, huse_scores, estimator):
    """Each training text's leave-one-out estimate (ridge: the closed form) equals the estimate
    of a scorer refitted without it."""
    texts, scores = huse_texts[:40], np.asarray(huse_scores[:40])
    part = Combined(["bleu", "rouge"], weights=[0.5, 0.5])
    scorer = quiet_fit(NeighborsScorer(kernel=part, estimator=estimator, device="cpu"), texts, scores)
    loo = scorer.leave_one_out().scores
    refits = []
    for index in range(len(texts)):
        keep = [other for other in range(len(texts)) if other != index]
        refit = quiet_fit(NeighborsScorer(kernel=part, estimator=estimator, device="cpu"),
                          [texts[other] for other in keep], scores[keep])
        refits.append(refit.predict([texts[index]]).scores[0])
    np.testing.assert_allclose(loo, refits, rtol=0, atol=1e-9)


@pytest.mark.parametrize("estimator", ["ridge", "topk"])
@pytest.mark.parametrize("size, any_gain", [(120, False), (200, False), (120, True)])
def test_the_chosen_weights_have_the_best_leave_one_out_beyond_the_noise(huse_texts, huse_scores, estimator, size,
                                                                         any_gain, monkeypatch):
    """The chosen sum's rho is what a scorer given those weights and fitted on the sample
    reports; weights other than tfidf alone have no kernel alone above them and beat tfidf alone
    beyond the noise (the paired bootstrap written out with scipy); tfidf alone otherwise. On
    HUSE's first 120 and 200 texts no sum beats tfidf beyond the noise; with the level raised so
    that any gain switches (`any_gain`), the best sum is taken (bleu alone has a higher rho
    there)."""
    if any_gain:
        monkeypatch.setattr("gpu_neighbors.choice.SWITCH_LEVEL", 1.01)
    texts, scores = huse_texts[:size], huse_scores[:size]
    scorer = quiet_fit(NeighborsScorer(kernel=Combined(["tfidf", "bleu", "rouge"], sample=size - 20),
                                       estimator=estimator, device="cpu"), texts, scores)
    chosen = scorer.kernel_part_
    assert chosen.weights is not None and sum(chosen.weights) == 1.0
    sample_texts, sample_scores = sample_of(texts, scores, size - 20)
    given = quiet_fit(NeighborsScorer(kernel=chosen, estimator=estimator, device="cpu"), sample_texts, sample_scores)
    assert given.tuning_.spearman == pytest.approx(scorer.selection_["combined"], abs=1e-12)
    if chosen.weights == (1.0, 0.0, 0.0):
        assert not any_gain and scorer.selection_["combined"] == scorer.selection_["tfidf"]
        return
    assert scorer.selection_["combined"] >= max(scorer.selection_[name] for name in ("tfidf", "bleu", "rouge"))
    if not any_gain:
        alone = quiet_fit(NeighborsScorer(kernel=Combined(["tfidf", "bleu", "rouge"], weights=(1.0, 0.0, 0.0)),
                                          estimator=estimator, device="cpu"), sample_texts, sample_scores)
        estimates = [np.where(loo.covered, loo.scores, np.nan) for loo in (given.leave_one_out(), alone.leave_one_out())]
        assert bootstrap_p(*estimates, np.asarray(sample_scores)) < 0.05


def test_a_combined_scorer_saves_and_loads_with_the_same_bits(tmp_path, huse_texts, huse_scores):
    scorer = quiet_fit(NeighborsScorer(kernel=Combined(["tfidf", "bleu", "rouge"], sample=80), device="cpu"),
                       huse_texts[:100], huse_scores[:100])
    loaded = NeighborsScorer.load(scorer.save(tmp_path / "saved"), device="cpu")
    assert loaded.kernel_part_ == scorer.kernel_part_ and loaded.selection_ == scorer.selection_
    assert str(loaded.signature) == str(scorer.signature)
    before, after = scorer.predict(huse_texts[100:]), loaded.predict(huse_texts[100:])
    for field in ("scores", "low", "high"):
        assert np.array_equal(getattr(before, field), getattr(after, field), equal_nan=True)


def test_parts_refuse_what_cannot_be_combined():
    with pytest.raises(ValueError, match="summing to 1"):
        Combined(["bleu", "rouge"], weights=[0.5, 0.6])
    with pytest.raises(ValueError, match="one per kernel"):
        Combined(["bleu", "rouge"], weights=[1.0])
    with pytest.raises(ValueError, match="at most once"):
        Combined(["bleu", "bleu"])
    with pytest.raises(ValueError, match="single kernels"):
        Auto(["bleu", Combined(["bleu", "rouge"])])
    for name in ("auto", "combined"):  # by name: was "Auto.__init__() got an unexpected keyword argument 'tokenizer'"
        with pytest.raises(ValueError, match="'combined' takes single kernels"):
            Combined([name, "rouge"])
    with pytest.raises(ValueError, match="chosen at fit"):
        Combined(["bleu", "rouge"]).build(torch_cpu())
    part = Combined(["bleu", Rouge(tokenizer="13a")], weights=[0.5, 0.5])
    assert part_from_settings(json.loads(json.dumps(part.settings()))) == part


def test_numpy_numbers_set_samples_and_weights():
    """Auto(sample=np.int64(...)) and Combined weights of np.float32 were refused as no whole
    number / no non-negative numbers."""
    assert Auto(["bleu", "rouge"], sample=np.int64(20)) == Auto(["bleu", "rouge"], sample=20)
    assert Combined(["bleu", "rouge"], weights=[np.float32(0.25), np.float32(0.75)], sample=np.int64(20)) == \
        Combined(["bleu", "rouge"], weights=[0.25, 0.75], sample=20)


def torch_cpu():
    import torch

    return torch.device("cpu")


def test_the_command_line_says_what_fit_chose(tmp_path, huse_records, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", huse_records[:120])
    assert main(["fit", "--train", str(train), "--save", str(tmp_path / "auto"), "--device", "cpu",
                 "--kernel", "auto"]) == 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("kernel ") and "chosen by leave-one-out rho on 120 of the 120 training texts (tfidf " in line
    assert main(["fit", "--train", str(train), "--save", str(tmp_path / "sum"), "--device", "cpu",
                 "--kernel", "combined", "--kernels", "bleu,rouge"]) == 0
    captured = capsys.readouterr()
    assert "weights bleu " in captured.err and "(bleu " in captured.err and "combined " in captured.err
    assert "kernel:combined|kernels:" in captured.out
