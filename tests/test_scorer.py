"""NeighborsScorer: the neighbour model by hand, invariance to tiling and order, validation."""
from __future__ import annotations

import copy
import pickle
import re
import warnings

import numpy as np
import pytest
import torch

import gpu_neighbors.scorer as scorer_module
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.estimators import Ridge, Threshold, TopK
from gpu_neighbors.kernels.parts import Bleu, Rouge, Tfidf
from gpu_neighbors.core import conformal, kernel_ridge
from gpu_neighbors.cli.parts import parts_from_settings

# Four texts around "the cat sat on the mat", two around "stocks fell sharply", one loner.
TRAIN = [
    "the cat sat on the mat",
    "the cat sat on the mat today",
    "yesterday the cat sat on the mat",
    "the cat sat on the red mat",
    "stocks fell sharply in early trading",
    "stocks fell sharply in late trading",
    "a completely different sentence here",
]
QUALITY = [0.2, 0.4, 0.6, 0.8, 0.1, 0.3, 0.9]


def test_neighbour_mean_and_std_by_hand():
    scorer = NeighborsScorer(kernel="bleu", estimator=Threshold(tau=0.3, min_neighbors=2, max_fraction=1.0),
                             device="cpu").fit(TRAIN, QUALITY)
    similarity = scorer.similarity(["the cat sat on the mat", "stocks fell sharply in trading", "zzz"])
    prediction = scorer.predict(["the cat sat on the mat", "stocks fell sharply in trading", "zzz"])
    for row in range(3):
        neighbours = np.flatnonzero(similarity[row].numpy() >= 0.3)
        assert prediction.num_neighbors[row] == neighbours.size
        if neighbours.size >= 2:
            assert prediction.scores[row] == pytest.approx(np.mean(np.take(QUALITY, neighbours)), abs=1e-12)
            assert prediction.std[row] == pytest.approx(np.std(np.take(QUALITY, neighbours)), abs=1e-12)
        else:
            assert np.isnan(prediction.scores[row]) and not prediction.covered[row]
    assert set(np.flatnonzero(similarity[0].numpy() >= 0.3)) == {0, 1, 2, 3}
    assert prediction.num_neighbors[2] == 0
    assert prediction.coverage == pytest.approx(2 / 3)


def test_a_and_b_bounds_are_inclusive():
    scorer = NeighborsScorer(kernel="bleu", estimator=Threshold(tau=0.3, min_neighbors=4, max_fraction=4 / 7),
                             device="cpu").fit(TRAIN, QUALITY)
    assert scorer.predict(["the cat sat on the mat"]).covered[0]  # exactly 4 = a = b|S|
    tighter = NeighborsScorer(kernel="bleu", estimator=Threshold(tau=0.3, min_neighbors=5, max_fraction=1.0),
                              device="cpu").fit(TRAIN, QUALITY)
    assert not tighter.predict(["the cat sat on the mat"]).covered[0]
    capped = NeighborsScorer(kernel="bleu", estimator=Threshold(tau=0.3, min_neighbors=1, max_fraction=3 / 7),
                             device="cpu").fit(TRAIN, QUALITY)
    assert not capped.predict(["the cat sat on the mat"]).covered[0]


def test_leave_one_out_equals_refitting_without_the_item():
    scorer = NeighborsScorer(kernel="bleu", estimator=Threshold(tau=0.2, min_neighbors=1, max_fraction=1.0),
                             device="cpu").fit(TRAIN, QUALITY)
    loo = scorer.leave_one_out()
    for i in range(len(TRAIN)):
        rest = [t for j, t in enumerate(TRAIN) if j != i]
        rest_q = [q for j, q in enumerate(QUALITY) if j != i]
        alone = NeighborsScorer(kernel="bleu", estimator=Threshold(tau=0.2, min_neighbors=1, max_fraction=1.0),
                                device="cpu").fit(rest, rest_q)
        single = alone.predict([TRAIN[i]])
        assert loo.num_neighbors[i] == single.num_neighbors[0]
        np.testing.assert_array_equal(loo.scores[i], single.scores[0])


@pytest.mark.parametrize("kernel", [Bleu(smoothing="add1"), Bleu(smoothing="exp", tokenizer="13a")])
def test_results_identical_for_any_chunk_size_and_budget(huse_texts, huse_scores, kernel):
    texts, scores = huse_texts[:90], huse_scores[:90]
    candidates = huse_texts[150:] + texts[::-1]
    reference = NeighborsScorer(kernel=kernel, estimator=Threshold(min_neighbors=2), device="cpu").fit(texts, scores)
    expected_loo = reference.leave_one_out()
    expected = reference.predict(candidates)
    for chunk_size, budget in [(1, None), (7, 20_000), (64, 100_000), (500, 1 << 13), (None, 30_000)]:
        scorer = NeighborsScorer(kernel=kernel, estimator=Threshold(min_neighbors=2), device="cpu",
                                 chunk_size=chunk_size, memory_budget=budget).fit(texts, scores)
        for got, want in [(scorer.leave_one_out(), expected_loo), (scorer.predict(candidates), expected)]:
            np.testing.assert_array_equal(got.scores, want.scores)
            np.testing.assert_array_equal(got.num_neighbors, want.num_neighbors)
            np.testing.assert_array_equal(got.std, want.std)
    assert expected_loo.covered.sum() >= 5 and expected.covered.sum() >= 5


@pytest.mark.parametrize("kernel", ["bleu", "rouge", "meteor"])
def test_prepared_candidates_predict_as_their_texts(huse_texts, huse_scores, kernel):
    """`prepare` (what a streaming run's reader thread does) then `predict` is `predict`."""
    scorer = NeighborsScorer(kernel=kernel, estimator=Threshold(min_neighbors=1, tuning="never"), device="cpu",
                             chunk_size=7).fit(huse_texts[:60], huse_scores[:60])
    candidates = huse_texts[60:100] + ["", "   "]
    prepared = scorer.prepare(candidates)
    assert len(prepared) == len(candidates) and len(prepared.chunks) == 6  # chunks of 7 rows
    for neighbors in (None, 3):
        want, got = scorer.predict(candidates, neighbors), scorer.predict(prepared, neighbors)
        for field in ("scores", "num_neighbors", "std", "covered"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
        assert (got.neighbors is None) == (neighbors is None)
        if neighbors:
            assert [got.neighbors.rows(i) for i in range(len(candidates))] == \
                [want.neighbors.rows(i) for i in range(len(candidates))]
    assert np.isfinite(scorer.predict(prepared).scores).sum() >= 10


@pytest.mark.parametrize("kernel", ["rouge", "bleu", "tfidf"])
def test_candidates_prepared_by_another_fit_are_refused(huse_texts, huse_scores, kernel):
    """An encoding fits only the kernel that made it: another scorer's (rouge: silently other
    numbers before; bleu, tfidf: a matrix-shape error deep in torch), or this one's before a refit."""
    first = NeighborsScorer(kernel=kernel, device="cpu").fit(huse_texts[:50], huse_scores[:50])
    other = NeighborsScorer(kernel=kernel, device="cpu").fit(huse_texts[50:100], huse_scores[50:100])
    prepared = first.prepare(huse_texts[100:105])
    for scorer in (other, first.fit(huse_texts[50:100], huse_scores[50:100])):
        for call in (scorer.predict, scorer.predict_tensors):
            with pytest.raises(ValueError, match="prepared by another scorer"):
                call(prepared)
    np.testing.assert_array_equal(first.predict(first.prepare(huse_texts[100:105])).scores,
                                  other.predict(huse_texts[100:105]).scores)


@pytest.mark.parametrize("kernel, estimator", [("tfidf", None), ("bleu", None), ("rouge", None),
                                               ("bleu", "threshold"), ("tfidf", "ridge"), ("combined", None)])
def test_a_fitted_scorer_deep_copies_and_pickles(huse_texts, huse_scores, kernel, estimator):
    """copy.deepcopy of a fitted scorer (before: NotImplementedError from torch, which deep-copies
    no sparse CSR tensor) gives the same estimates and intervals, as pickling does, and refitting
    the copy leaves the original as it was."""
    scorer = NeighborsScorer(kernel=kernel, estimator=estimator, device="cpu").fit(huse_texts[:60], huse_scores[:60])
    candidates = huse_texts[60:80]
    want = scorer.predict(candidates)
    for copied in (copy.deepcopy(scorer), pickle.loads(pickle.dumps(scorer))):
        got = copied.predict(candidates)
        for field in ("scores", "low", "high", "outside"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
        copied.fit(huse_texts[80:120], huse_scores[80:120])
        np.testing.assert_array_equal(scorer.predict(candidates).scores, want.scores)


@pytest.mark.parametrize("estimator", ["threshold", "ridge", None])  # None: the default, top-k
@pytest.mark.parametrize("sampled", [False, True])  # True: tuning, ridge fit and calibration on samples
def test_candidate_order_and_training_order_do_not_matter(huse_texts, huse_scores, estimator, sampled, monkeypatch):
    """The same bits (estimates, intervals) whatever order the candidates or the training texts
    come in, also where tuning, the ridge fit and the calibration draw samples of the training
    set (they draw the same texts: `neighbours.canonical_sample`)."""
    if sampled:
        monkeypatch.setattr(scorer_module, "MAX_TUNING_TEXTS", 150)
        monkeypatch.setattr(kernel_ridge, "MAX_RIDGE_TEXTS", 100)
        monkeypatch.setattr(conformal, "MAX_CALIBRATION_TEXTS", 80)
    rng = np.random.default_rng(0)
    scorer = NeighborsScorer(estimator=estimator, device="cpu").fit(huse_texts, huse_scores)
    candidates = huse_texts[:80]
    base = scorer.predict(candidates)
    order = rng.permutation(len(candidates))
    shuffled = scorer.predict([candidates[i] for i in order])
    np.testing.assert_array_equal(shuffled.scores, base.scores[order])
    train_order = rng.permutation(len(huse_texts))
    refit = NeighborsScorer(estimator=estimator, device="cpu").fit(
        [huse_texts[i] for i in train_order], np.take(huse_scores, train_order))
    again = refit.predict(candidates)
    for field in ("scores", "low", "high", "num_neighbors"):
        np.testing.assert_array_equal(getattr(again, field), getattr(base, field))


def test_empty_and_whitespace_candidates_are_undefined_not_errors():
    scorer = NeighborsScorer(kernel="bleu", estimator=Threshold(tau=0.3, min_neighbors=1), device="cpu").fit(TRAIN,
                             QUALITY)
    prediction = scorer.predict(["", "   ", "the cat sat on the mat"])
    assert list(prediction.covered) == [False, False, True]
    assert np.isnan(prediction.scores[:2]).all() and list(prediction.num_neighbors[:2]) == [0, 0]
    assert len(scorer.predict([])) == 0


def test_device_auto_picks_cpu_without_cuda():
    scorer = NeighborsScorer().fit(TRAIN, QUALITY)
    assert scorer.device_.type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_a_device_this_machine_lacks_is_refused_by_name_as_a_string_or_torch_device(monkeypatch):
    """torch.device("cuda") without CUDA failed deep in torch with an AssertionError (the string
    was refused clearly), and "cuda:7" on a one-GPU machine passed the check."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", torch.device("cuda"), torch.device("cuda", 0)):
        with pytest.raises(ValueError, match="CUDA is not available here"):
            NeighborsScorer(device=device).fit(TRAIN, QUALITY)
    for device in ("mps", torch.device("mps"), torch.device("meta")):
        with pytest.raises(ValueError, match="cannot score"):
            NeighborsScorer(device=device).fit(TRAIN, QUALITY)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    for device in ("cuda:7", torch.device("cuda", 1)):
        with pytest.raises(ValueError, match=r"this machine has 1 CUDA device\(s\)"):
            NeighborsScorer(device=device).fit(TRAIN, QUALITY)


@pytest.mark.parametrize(
    ("texts", "scores", "message"),
    [
        ([], [], "empty training set"),
        (["", "  \n"], [0.5, 0.2], "every text is empty or whitespace"),  # was: the 'replaced' perturbation ...
        (["a b", "c d"], [0.5], "lengths must match"),
        (["a b", "c d"], [0.5, float("nan")], r"scores\[1\]: nan is not a finite number"),
        (["a b", "c d"], [0.5, float("inf")], r"scores\[1\]: inf is not a finite number"),
        (["a b", "c d"], [0.5, "high"], r"scores\[1\]: 'high' \(str\) is not a number"),
        (["a b", "c d"], ["0.1", "0.2"], r"scores\[0\]: '0.1' \(str\) is not a number"),
        (["a b", "c d"], [0.5, True], r"scores\[1\]: True \(bool\) is not a number"),
        (["a b", "c d"], [0.5, None], r"scores\[1\]: None \(NoneType\) is not a number"),
        (["a b", "c d"], [0.5, 1.5], r"scores\[1\]: 1.5 is outside the score range \[0, 1\]"),
        (["a b", "c d"], [-0.1, 0.5], r"scores\[0\]: -0.1 is outside"),
    ],
)
def test_bad_training_input_is_refused_clearly(texts, scores, message):
    with pytest.raises(ValueError, match=message):
        NeighborsScorer().fit(texts, scores)


def test_scores_as_numpy_numbers_or_a_tensor():
    texts = ["a b", "c d", "a d"]
    expected = NeighborsScorer().fit(texts, [0.25, 0.5, 1.0]).train_scores_
    for scores in ([np.float32(0.25), np.int64(0) + 0.5, 1], np.array([0.25, 0.5, 1.0], dtype=np.float32),
                   torch.tensor([0.25, 0.5, 1.0]), np.array([0, 1, 1])):
        fitted = NeighborsScorer().fit(texts, scores).train_scores_
        assert fitted.dtype == np.float64 and fitted.shape == (3,)
    np.testing.assert_array_equal(NeighborsScorer().fit(texts, torch.tensor([0.25, 0.5, 1.0])).train_scores_, expected)


def test_scores_as_a_generator_or_a_bfloat16_tensor_and_non_sequences_refused():
    """Before: a generator of scores failed with "float() argument must be ... not 'generator'",
    a bfloat16 tensor with numpy's "Got unsupported ScalarType BFloat16", a number alone with
    "'float' object is not iterable"."""
    texts = ["a b", "c d", "a d"]
    expected = NeighborsScorer().fit(texts, [0.25, 0.5, 1.0]).train_scores_
    for scores in ((value for value in [0.25, 0.5, 1.0]), torch.tensor([0.25, 0.5, 1.0], dtype=torch.bfloat16)):
        np.testing.assert_array_equal(NeighborsScorer().fit(texts, scores).train_scores_, expected)
    for scores, kind in ((0.5, "float"), (None, "NoneType"), (np.float64(0.5), "float64"), ("0.5", "str")):
        with pytest.raises(TypeError, match=f"scores must be a sequence of numbers, not {kind}"):
            NeighborsScorer().fit(texts[:1], scores)


@pytest.mark.parametrize("kernel", ["tfidf", "auto", "combined"])
def test_scores_in_any_strides_are_the_scorers_own_copy(kernel):
    """A reversed or strided view fits as its values do (torch takes no negative strides), and
    changing the caller's array after fit changes nothing in the scorer."""
    texts = [f"{words} {index}" for index, words in enumerate(["a b c", "a b d", "c d e", "x y z", "a c e"] * 12)]
    values = np.linspace(0.0, 1.0, 2 * len(texts))
    view = values[::-2]
    expected = NeighborsScorer(kernel=kernel, device="cpu").fit(texts, view.copy()).predict(texts[:5]).scores
    scorer = NeighborsScorer(kernel=kernel, device="cpu").fit(texts, view)
    values[:] = 0.0
    np.testing.assert_array_equal(scorer.train_scores_, np.linspace(0.0, 1.0, 2 * len(texts))[::-2])
    assert scorer.predict(texts[:5]).scores.tobytes() == expected.tobytes()


def test_score_range_can_be_widened_or_lifted():
    assert NeighborsScorer(score_range=(1, 5)).fit(["a b", "c d"], [1, 5]).num_train == 2
    assert NeighborsScorer(score_range=None).fit(["a b", "c d"], [-3, 70]).num_train == 2
    with pytest.raises(ValueError, match="score_range"):
        NeighborsScorer(score_range=(2, 1)).fit(["a b"], [1.5])


def test_bad_parameters_are_refused_clearly():
    for make, message in [
        (lambda: NeighborsScorer(estimator=Threshold(min_neighbors=0)), "min_neighbors"),
        (lambda: NeighborsScorer(estimator=Threshold(max_fraction=1.5)), "max_fraction"),
        (lambda: NeighborsScorer(estimator=Threshold(tau=float("nan"))), "tau"),
        (lambda: NeighborsScorer(kernel="cider"), "unknown kernel"),
        (lambda: NeighborsScorer(device="tpu9"), "device"),
        (lambda: NeighborsScorer(chunk_size=0), "chunk_size"),
    ]:
        with pytest.raises(ValueError, match=message):
            make().fit(TRAIN, QUALITY)
    with pytest.raises(TypeError, match="Rouge.. got an unexpected keyword argument 'smoothing'"):
        Rouge(smoothing="add1")
    with pytest.raises(TypeError, match="not one string"):
        NeighborsScorer().fit("the cat", [1.0])
    with pytest.raises(TypeError, match=r"\[1\] is int"):
        NeighborsScorer().fit(["a", 3], [1.0, 2.0])
    with pytest.raises(RuntimeError, match="not fitted"):
        NeighborsScorer().predict(["a"])


def test_tune_is_true_false_or_none():
    """tune="no" tuned before (any truthy value did); the scorer stays unfitted."""
    scorer = NeighborsScorer(kernel="bleu", device="cpu")
    for tune in ("no", "yes", 0, 1.0):
        with pytest.raises(ValueError, match=re.escape(f"tune must be True, False or None, not {tune!r}")):
            scorer.fit(TRAIN, QUALITY, tune=tune)
    assert not hasattr(scorer, "kernel_")
    assert scorer.fit(TRAIN, QUALITY, tune=np.bool_(False)).tuning_ is None


def test_scikit_learn_clone_copies_the_settings_unfitted():
    """get_params took no `deep`, so sklearn.base.clone raised TypeError."""
    clone = pytest.importorskip("sklearn.base").clone
    scorer = NeighborsScorer(kernel=Bleu(smoothing="exp"), estimator=TopK(k=3), level=0.8, device="cpu",
                             chunk_size=5).fit(TRAIN, QUALITY)
    copied = clone(scorer)
    assert not hasattr(copied, "kernel_") and copied.get_params(deep=False).keys() == scorer.get_params().keys()
    assert repr(copied.get_params()) == repr(scorer.get_params(deep=True))
    np.testing.assert_array_equal(copied.fit(TRAIN, QUALITY).predict(TRAIN).scores, scorer.predict(TRAIN).scores)


def test_return_neighbors_takes_a_numpy_integer():
    """return_neighbors=np.int64(2) was refused as "must be a positive integer"."""
    scorer = NeighborsScorer(kernel="bleu", device="cpu").fit(TRAIN, QUALITY)
    got, want = scorer.predict(TRAIN[:3], return_neighbors=np.int64(2)), scorer.predict(TRAIN[:3], return_neighbors=2)
    assert np.array_equal(got.neighbors.index, want.neighbors.index)


def test_signature_records_every_setting():
    scorer = NeighborsScorer(kernel=Bleu(smoothing="exp", tokenizer="13a", lowercase=True),
                             estimator=Threshold(tau=0.1)).fit(TRAIN, QUALITY)
    assert str(scorer.signature).startswith("kernel:bleu|tok:13a+lc|smooth:exp|tau:0.1|a:5|b:0.66|n:7|version:")


@pytest.mark.parametrize("settings, unread", [
    ({"estimator": "topk", "min_neighbors": 3}, "min_neighbors (--min-neighbors) = 3 is not read by the topk estimator"),
    ({"estimator": "threshold", "top_k": 5}, "top_k (--top-k) = 5 is not read by the threshold estimator"),
    ({"estimator": "ridge", "power": 2.0}, "power (--power) = 2.0 is not read by the ridge estimator"),
    ({"estimator": "ridge", "tau": 0.1}, "tau (--tau) = 0.1 is not read by the ridge estimator"),
    ({"estimator": "topk", "penalty": 1.0}, "penalty (--penalty) = 1.0 is not read by the topk estimator"),
    ({"kernel": "tfidf", "kernels": ("bleu",)}, "kernels (--kernels) = bleu is read only with kernel 'auto' or 'combined'"),
])
def test_a_setting_the_estimator_never_reads_is_named(settings, unread):
    """The command line's flat settings: a flag the chosen estimator never reads is named (the
    library's parts refuse such a setting outright, a TypeError)."""
    with pytest.warns(UserWarning, match=re.escape(unread)):
        NeighborsScorer(device="cpu", **parts_from_settings(settings)).fit(["a b", "c d", "a d"], [0.1, 0.5, 0.9])


def test_a_setting_a_part_does_not_have_is_a_type_error():
    for make, name in [(lambda: TopK(min_neighbors=3), "min_neighbors"), (lambda: Threshold(k=5), "k"),
                       (lambda: Ridge(power=2.0), "power"), (lambda: Ridge(tau=0.1), "tau"),
                       (lambda: TopK(penalty=1.0), "penalty"), (lambda: Tfidf(smoothing="exp"), "smoothing"),
                       (lambda: NeighborsScorer(tau=0.1), "tau"),
                       (lambda: NeighborsScorer(kernels=("bleu",)), "kernels")]:
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
            make()


def test_settings_the_estimator_reads_raise_no_such_warning():
    for settings in ({"estimator": "topk", "top_k": 2, "power": 2.0}, {"tau": 0.1, "min_neighbors": 1},
                     {"estimator": "ridge", "penalty": 1.0}, {"kernel": "auto", "kernels": ("bleu", "rouge")}):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            NeighborsScorer(device="cpu", **parts_from_settings(settings)).fit(["a b", "c d", "a d"], [0.1, 0.5, 0.9])
        assert not [w for w in caught if "is not read by" in str(w.message) or "read only with" in str(w.message)]
