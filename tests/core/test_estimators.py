"""Issue 13: weighted neighbours, the top-k estimator, neighbours shown, tuned by default and the
automatic kernel choice, each against a brute-force reference on small data."""
from __future__ import annotations

import warnings
import zlib

import numpy as np
import pytest
import torch

from gpu_neighbors import Intervals, NeighborsScorer
from gpu_neighbors.kernels.parts import Auto
from gpu_neighbors.estimators import Threshold, TopK
from gpu_neighbors.core.neighbours import WEIGHT_BITS, Thresholds
from gpu_neighbors.core.pairwise import PairwiseSimilarities
from gpu_neighbors.core.tuning import TuningGrid, tune
from gpu_neighbors.cli.parts import parts_from_settings
from gpu_neighbors.core.validation import ParameterError, validate_parameters
from gpu_neighbors.kernels.tfidf import TfidfKernel

TEXTS = [
    "the cat sat on the mat", "the cat sat on a mat", "a dog sat on the mat", "the dog ran in the park",
    "a cat ran in the park", "the bird sang in the tree", "a bird sang on the mat", "the cat sang a song",
    "dogs and cats sat together", "the park was green and quiet", "a quiet cat in a green park",
    "the mat was red", "birds sat in the tree", "the dog sang", "cats ran", "a red mat on the floor",
]
SCORES = np.linspace(0.05, 0.95, len(TEXTS))[np.random.default_rng(3).permutation(len(TEXTS))]


def quantised(similarity: np.ndarray, power: float) -> np.ndarray:
    if power == 0:
        return np.ones_like(similarity)
    return np.maximum(np.round(np.clip(similarity, 0, 1) ** power * 2.0**WEIGHT_BITS), 1)


def brute_threshold(matrix: np.ndarray, tau: float, a: int, b: float, power: float, num_train: int) -> np.ndarray:
    """Weighted mean of q over neighbours, row by row, with Python floats."""
    out = []
    for row in matrix:
        chosen = [j for j, value in enumerate(row) if value >= tau]
        if not a <= len(chosen) <= b * num_train:
            out.append(np.nan)
            continue
        weights = quantised(row[chosen], power)
        out.append(float(np.dot(weights, SCORES[chosen]) / weights.sum()))
    return np.array(out)


def tie_key(texts: list[str], scores: np.ndarray, j: int) -> tuple[int, float, int]:
    """The documented order among equally similar training texts: CRC-32 of the text, q, position."""
    return zlib.crc32(texts[j].encode("utf-8")), float(scores[j]), j


def brute_topk(matrix: np.ndarray, k: int, power: float) -> tuple[np.ndarray, list[list[int]]]:
    """Sort each row by (similarity desc, tie key asc), keep k, weighted mean over positive ones."""
    out, tops = [], []
    for row in matrix:
        order = sorted(range(len(row)), key=lambda j: (-row[j], tie_key(TEXTS, SCORES, j)))[:k]
        tops.append(order)
        chosen = [j for j in order if row[j] > 0]
        if not chosen:
            out.append(np.nan)
            continue
        weights = quantised(row[chosen], power)
        out.append(float(np.dot(weights, SCORES[chosen]) / weights.sum()))
    return np.array(out), tops


@pytest.fixture(scope="module")
def fitted():
    scorer = NeighborsScorer(kernel="bleu",
                             estimator=Threshold(tau=0.05, weighting="similarity", power=2.0,
                             tuning="never"), device="cpu")
    scorer.fit(TEXTS[:10], SCORES[:10])
    return scorer, scorer.similarity(TEXTS[10:]).numpy()


def test_weighted_threshold_matches_brute_force(fitted):
    scorer, matrix = fitted
    prediction = scorer.predict(TEXTS[10:])
    expected = brute_threshold(matrix, 0.05, 5, 0.66, 2.0, 10)
    np.testing.assert_allclose(prediction.scores, expected, rtol=1e-12, equal_nan=True)
    assert prediction.estimator == "threshold"


def test_topk_matches_brute_force_and_neighbours_are_the_top(fitted):
    scorer, matrix = fitted
    top = NeighborsScorer(kernel="bleu", estimator=TopK(power=1.0, k=3), device="cpu").fit(TEXTS[:10], SCORES[:10])
    prediction = top.predict(TEXTS[10:], return_neighbors=4)
    expected, order = brute_topk(matrix, 3, 1.0)
    np.testing.assert_allclose(prediction.scores, expected, rtol=1e-12, equal_nan=True)
    assert prediction.estimator == "topk"
    _, order4 = brute_topk(matrix, 4, 1.0)
    assert prediction.neighbors is not None
    assert prediction.neighbors.index.tolist() == order4
    np.testing.assert_array_equal(prediction.neighbors.score, SCORES[:10][np.array(order4)])


def test_ties_go_by_text_checksum_then_q_not_by_position():
    texts = ["a b c", "x y z", "a b c", "a b c"]
    scores = np.array([0.4, 0.2, 0.1, 0.3])
    scorer = NeighborsScorer(estimator=TopK(power=0.0, k=2), device="cpu").fit(texts, scores)
    prediction = scorer.predict(["a b c"], return_neighbors=2)
    assert prediction.neighbors is not None
    assert prediction.neighbors.index.tolist() == [[2, 3]]  # equal texts, so the lower q first
    assert prediction.scores[0] == pytest.approx(0.2)


def test_topk_estimates_do_not_depend_on_where_a_text_sits(huse_texts, huse_scores):
    """Permuting the training set changes no top-k estimate and no tuned setting, though
    thousands of pairs tie (BLEU* takes few distinct values on short texts)."""
    texts, scores = huse_texts[:150], np.asarray(huse_scores[:150])
    candidates = huse_texts[150:]
    settings = {"device": "cpu", "estimator": TopK(k=20, power=1.0)}
    reference = NeighborsScorer(**settings).fit(texts, scores).predict(candidates)
    for seed in range(3):
        order = np.random.default_rng(seed).permutation(len(texts))
        permuted = NeighborsScorer(**settings).fit([texts[i] for i in order], scores[order]).predict(candidates)
        assert len(candidates) == 50 and np.isfinite(reference.scores).all()
        assert permuted.scores.tobytes() == reference.scores.tobytes()
        assert permuted.std.tobytes() == reference.std.tobytes()
        assert permuted.nearest.tobytes() == reference.nearest.tobytes()
        assert permuted.outside.tobytes() == reference.outside.tobytes()


@pytest.mark.parametrize("settings", [
    {"kernel": "bleu", "estimator": Threshold(weighting="similarity", power=3.0, tau=0.02, min_neighbors=1)},
    {"estimator": TopK(k=5, power=2.0)},
])
def test_bit_identical_for_every_chunk_block_and_order(settings):
    reference = NeighborsScorer(device="cpu", **settings).fit(TEXTS, SCORES).leave_one_out()
    for chunk, budget in [(1, 8 * 64 * 3), (3, 8 * 64 * 5), (7, 1 << 20)]:
        other = NeighborsScorer(device="cpu", chunk_size=chunk, memory_budget=budget, **settings)
        result = other.fit(TEXTS, SCORES).leave_one_out()
        assert result.scores.tobytes() == reference.scores.tobytes()
        assert result.std.tobytes() == reference.std.tobytes()
    # candidates in another order: each row's estimate is the same bits
    order = np.random.default_rng(0).permutation(len(TEXTS))
    scorer = NeighborsScorer(device="cpu", chunk_size=2, **settings).fit(TEXTS, SCORES)
    direct = scorer.predict(TEXTS)
    shuffled = scorer.predict([TEXTS[i] for i in order])
    assert shuffled.scores.tobytes() == direct.scores[order].tobytes()


def test_weighted_sums_do_not_depend_on_block_order():
    """The reduction itself: tiles in reverse order give the same limb sums."""
    from gpu_neighbors.core.neighbours import NeighborReduction, Quality
    from gpu_neighbors.core.tiling import Tile

    rng = np.random.default_rng(1)
    matrix = torch.as_tensor(rng.random((6, 40)))
    quality = Quality.encode(torch.as_tensor(rng.random(40)))
    sums = []
    for blocks in ([(0, 40)], [(0, 13), (13, 29), (29, 40)], [(29, 40), (0, 13), (13, 29)]):
        reduction = NeighborReduction(6, quality, 0.3, power=1.5)
        for start, stop in blocks:
            reduction.add(Tile(matrix[:, start:stop], 0, start))
        stats = reduction.result()
        sums.append((stats.total.tolist(), stats.total_sq.tolist(), stats.weight.tolist()))
    assert sums[0] == sums[1] == sums[2]


def test_return_neighbors_larger_than_the_training_set_returns_all():
    scorer = NeighborsScorer(kernel="bleu", estimator=Threshold.paper(), device="cpu").fit(TEXTS[:6], SCORES[:6])
    prediction = scorer.predict(["the cat"], return_neighbors=50)
    assert prediction.neighbors is not None and prediction.neighbors.index.shape == (1, 6)
    assert sorted(prediction.neighbors.index[0].tolist()) == list(range(6))
    with pytest.raises(ValueError, match="return_neighbors"):
        scorer.predict(["x"], return_neighbors=0)


def test_tuning_finds_the_setting_solvable_by_hand():
    """Two clusters: within a cluster similarity 0.9, across 0.1, and q is the cluster's level
    plus noise; only tau above 0.1 gives neighbours of the same cluster, so rho is highest there."""
    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1], 10)
    matrix = np.where(labels[:, None] == labels[None, :], 0.9, 0.1)
    scores = 0.3 + 0.4 * labels + rng.normal(0, 0.01, 20)
    result = tune(PairwiseSimilarities(matrix, scores), grid=TuningGrid(taus=[0.05, 0.5], min_neighbors=[1],
                                                                       max_fractions=[1.0]))
    assert result.thresholds.tau == 0.5 and result.coverage == 1.0
    top = tune(PairwiseSimilarities(matrix, scores), estimator="topk",
               grid=TuningGrid(top_ks=[9, 19], powers=[0.0]))
    assert top.thresholds.top_k == 9  # the own cluster; 19 mixes both clusters equally


def test_tuned_by_default_from_50_texts_and_paper_below(huse_texts, huse_scores):
    tuned = NeighborsScorer(device="cpu").fit(huse_texts[:60], huse_scores[:60])
    assert tuned.tuning_ is not None and "tuned:loo" in str(tuned.signature)
    paper = NeighborsScorer(kernel="bleu", estimator=Threshold.paper(), device="cpu").fit(huse_texts[:60],
                            huse_scores[:60])
    assert paper.tuning_ is None and paper.thresholds_ == Thresholds(0.08, 5, 0.66)
    given = NeighborsScorer(kernel="bleu", estimator=Threshold(tau=0.08), device="cpu").fit(huse_texts[:60],
                            huse_scores[:60])
    assert given.tuning_ is None
    with pytest.warns(UserWarning, match="fewer than 50.*the default's"):
        small = NeighborsScorer(device="cpu").fit(huse_texts[:49], huse_scores[:49])
    # the default kernel (tfidf) and estimator (top-k: an estimate for every text), untuned k and p
    assert small.thresholds_ == Thresholds(TfidfKernel.default_tau, 5, 0.66, 1.0, "topk", 49)
    with pytest.warns(UserWarning, match="fewer than 50.*the paper's"):
        small = NeighborsScorer(kernel="bleu", estimator="threshold", device="cpu").fit(huse_texts[:49],
                                huse_scores[:49])
    assert small.thresholds_ == Thresholds(0.08, 5, 0.66)


def test_auto_kernel_picks_the_best_inner_rho_and_signs_it(huse_texts, huse_scores):
    scorer = NeighborsScorer(kernel=Auto(("bleu", "rouge")), estimator="topk", device="cpu")
    scorer.fit(huse_texts[:80], huse_scores[:80])
    assert scorer.selection_ is not None and set(scorer.selection_) == {"bleu", "rouge"}
    best = max(scorer.selection_, key=lambda name: scorer.selection_[name])
    assert scorer.kernel_.name == best
    assert f"kernel:{best}" in str(scorer.signature) and "auto:bleu=" in str(scorer.signature)
    assert scorer.predict(huse_texts[80:90]).coverage == 1.0


@pytest.mark.parametrize("settings, message", [
    ({"estimator": "knn"}, "estimator must be one of threshold, topk"),
    ({"weighting": "cosine"}, "weighting must be one of uniform, similarity"),
    ({"power": -1.0}, "power must be"),
    ({"power": True}, "power must be"),
    ({"top_k": 0}, "top_k must be"),
    ({"top_k": 1001}, "top_k must be"),
    ({"kernels": ()}, "kernels must be a non-empty list"),
    ({"kernels": "bleu"}, "kernels must be a non-empty list"),
    ({"thresholds": "universal"}, "thresholds must be one of auto, tuned, paper"),
])
def test_bad_settings_are_refused_through_the_table(settings, message):
    """The command line's flat settings, checked against the table before they become parts."""
    with pytest.raises(ParameterError, match=message):
        validate_parameters(settings)
        NeighborsScorer(device="cpu", **parts_from_settings(settings)).fit(TEXTS, SCORES)


def test_unknown_kernel_in_the_list_is_named():
    with pytest.raises(ValueError, match="unknown kernel 'blue'"):
        NeighborsScorer(kernel=Auto(("bleu", "blue")), device="cpu").fit(TEXTS, SCORES)


def test_the_default_answers_every_text_with_a_similar_training_text(huse_texts, huse_scores):
    """Issue 20: the default estimator gives an estimate exactly where some training text is
    similar (similarity > 0), where the paper's rule leaves texts out; tiny training sets that
    the old default accepted are still accepted."""
    train, scores = huse_texts[:150], huse_scores[:150]
    candidates = huse_texts[150:] + ["", "\u0416\u0416\u0416 \u042e\u042e\u042e"]  # no character the training set has
    default = NeighborsScorer(device="cpu").fit(train, scores)
    prediction = default.predict(candidates)
    similar = (default.similarity(candidates).numpy() > 0).any(axis=1)
    np.testing.assert_array_equal(prediction.covered, similar)
    assert similar[:-2].all() and not similar[-2:].any()
    paper = NeighborsScorer(kernel="bleu", estimator=Threshold.paper(), device="cpu").fit(train,
                            scores).predict(candidates)
    assert paper.coverage < prediction.coverage
    for size in (1, 2, 3):
        with pytest.warns(UserWarning, match="fewer than 50"):
            tiny = NeighborsScorer(device="cpu").fit(train[:size], scores[:size])
        assert np.isfinite(tiny.predict(train[:size]).scores).all()


def test_paper_mode_is_the_papers_rule_on_the_similarity_matrix(huse_texts, huse_scores):
    """thresholds="paper" predicts what the paper's rule (tau 0.08, a 5, b 0.66, plain mean)
    gives on the full similarity matrix (PairwiseSimilarities: no tile loop), bit for bit."""
    texts, scores = huse_texts, np.asarray(huse_scores)
    sims = NeighborsScorer(kernel="bleu", estimator=Threshold.paper(), device="cpu").fit_pairwise(texts, scores)
    train, test = np.arange(150), np.arange(150, len(texts))
    expected = sims.predict(test, train, Thresholds(0.08, 5, 0.66))
    scorer = NeighborsScorer(kernel="bleu", estimator=Threshold.paper(), device="cpu",
                             level=Intervals(negatives="none")).fit(texts[:150], scores[:150])  # the rule's own
    assert scorer.thresholds_ == Thresholds(0.08, 5, 0.66)
    np.testing.assert_array_equal(scorer.predict(texts[150:]).scores, expected.scores)


@pytest.mark.parametrize("settings, kernel", [
    ({}, "auto"),
    ({"estimator": "ridge"}, "auto"),
    ({"thresholds": "tuned", "top_k": 5}, "auto"),
    ({"thresholds": "paper"}, "bleu"),
    ({"tau": 0.1}, "bleu"),
    ({"min_neighbors": 2}, "bleu"),
    ({"max_fraction": 0.5}, "bleu"),
    ({"estimator": "threshold"}, "bleu"),
    ({"smoothing": "exp"}, "bleu"),
    ({"weights": (0.25, 0.25, 0.25, 0.25)}, "bleu"),
    ({"tokenizer": "13a"}, "bleu"),
    ({"lowercase": True}, "bleu"),
    ({"kernel_options": {"smoothing": "exp"}}, "bleu"),
    ({"kernel_options": {}}, "auto"),
    ({"kernel": "rouge", "tau": 0.1}, "rouge"),
])
def test_the_default_kernel_is_chosen_unless_the_papers_method_is_asked_for(huse_texts, huse_scores, settings, kernel):
    """Issues 20 and 34, on the command line's flat settings (the library names its kernel
    part): no kernel chooses among tfidf, bleu and rouge by leave-one-out (tfidf, or the highest
    rho where its gain beats the sample's noise), except where a setting of the paper's method (its rule or a BLEU* setting)
    is given: those calls keep meaning what they meant before."""
    scorer = NeighborsScorer(device="cpu", **parts_from_settings(settings))
    assert scorer.kernel_name == kernel
    scorer.fit(huse_texts[:60], huse_scores[:60])
    if kernel == "auto":
        assert list(scorer.selection_) == ["tfidf", "bleu", "rouge"]
        rhos = list(scorer.selection_.values())
        best = list(scorer.selection_)[rhos.index(max(rhos))]
        kernel = scorer.kernel_.name
        assert kernel in ("tfidf", best)
    assert scorer.kernel_.name == kernel and str(scorer.signature).startswith(f"kernel:{kernel}|")
    if kernel == "bleu":  # the same numbers as naming the kernel
        named = NeighborsScorer(device="cpu", **parts_from_settings({"kernel": "bleu", **settings})).fit(
            huse_texts[:60], huse_scores[:60])
        np.testing.assert_array_equal(scorer.predict(huse_texts[60:90]).scores, named.predict(huse_texts[60:90]).scores)


def test_a_tuning_sample_keeps_the_resolved_kernel(huse_texts, huse_scores, monkeypatch):
    """Above MAX_TUNING_TEXTS tuning reads a seeded sample, fitted by a clone with the paper's
    thresholds: the clone must run the scorer's kernel, not the one kernel=None means with them."""
    monkeypatch.setattr("gpu_neighbors.scorer.MAX_TUNING_TEXTS", 60)
    texts, scores = huse_texts[:100], np.asarray(huse_scores[:100])
    with pytest.warns(UserWarning, match="random sample of 60"):
        scorer = NeighborsScorer(device="cpu").fit(texts, scores)
    from gpu_neighbors.core.neighbours import canonical_order, canonical_sample, text_checksums

    sample = canonical_sample(canonical_order(text_checksums(texts), scores), 60, seed=0)
    alone = NeighborsScorer(kernel="tfidf", device="cpu").fit([texts[index] for index in sample], scores[sample])
    assert scorer.kernel_.name == "tfidf"
    assert scorer.tuning_ is not None and alone.tuning_ is not None
    assert scorer.tuning_.spearman == alone.tuning_.spearman


@pytest.mark.parametrize("k", [1, 3, 10, 39, 40, 60])
def test_selected_and_ordered_is_the_first_k_in_the_total_order(k):
    """The k-th-value selection against a plain sort by (similarity descending, tie rank
    ascending) on rows full of ties, excluded pairs (-inf) and empty slots (index past the
    training set), including k at and above the row width."""
    from gpu_neighbors.core.topk import order_top, select_top

    generator = torch.Generator().manual_seed(5)
    size, rows, width = 30, 64, 40
    tie_rank = torch.randperm(size, generator=generator)
    similarity = torch.randint(0, 4, (rows, width), generator=generator).to(torch.float64) / 4  # 4 values: ties
    similarity[torch.rand((rows, width), generator=generator) < 0.2] = -torch.inf
    index = torch.randint(0, size + 3, (rows, width), generator=generator)  # >= size: empty slots
    index[index >= size] = torch.iinfo(torch.int64).max
    top = order_top(select_top(similarity, index, k, tie_rank), k, tie_rank)
    for row in range(rows):
        entries = [(float(similarity[row, j]), int(index[row, j])) for j in range(width)]
        ranked = sorted(entries, key=lambda entry: (-entry[0], int(tie_rank[entry[1]]) if entry[1] < size else size))
        expected = ranked[:k]
        assert top.similarity[row].tolist() == [entry[0] for entry in expected]
        real = [entry[1] if entry[1] < size else None for entry in expected]
        assert [value if value < size else None for value in top.index[row].tolist()] == real


@pytest.mark.parametrize("k", [1, 5, 20])
def test_rows_with_and_without_ties_at_the_kth_value_in_one_call(k):
    """Mostly distinct similarities with a tie at some rows' k-th value (the CPU selects the
    untied rows in one pass and ranks only the others): the same first k as a plain sort."""
    from gpu_neighbors.core.topk import order_top, select_top

    generator = torch.Generator().manual_seed(11)
    size, rows, width = 90, 32, 60
    tie_rank = torch.randperm(size, generator=generator)
    similarity = torch.rand((rows, width), generator=generator, dtype=torch.float64)
    kth = similarity.sort(dim=1, descending=True).values[:, k - 1]
    for row in range(0, rows, 3):  # a third of the rows: an entry below the k-th raised onto it
        below = int((similarity[row] < kth[row]).nonzero()[0])
        similarity[row, below] = kth[row]
    index = torch.randperm(size, generator=generator)[:width].expand(rows, width).clone()
    top = order_top(select_top(similarity, index, k, tie_rank), k, tie_rank)
    for row in range(rows):
        ranked = sorted(range(width), key=lambda j: (-float(similarity[row, j]), int(tie_rank[index[row, j]])))[:k]
        assert top.similarity[row].tolist() == [float(similarity[row, j]) for j in ranked]
        assert top.index[row].tolist() == [int(index[row, j]) for j in ranked]
    # The path a GPU and the token-ids path take (every row ranked, nothing read on the host): the same set.
    waiting, not_waiting = (order_top(select_top(similarity, index, k, tie_rank, host_waits=host_waits), k, tie_rank)
                            for host_waits in (True, False))
    assert torch.equal(waiting.similarity, not_waiting.similarity) and torch.equal(waiting.index, not_waiting.index)


@pytest.mark.parametrize(("k", "block"), [(1, 7), (5, 16), (12, 5), (40, 64)])
def test_the_running_top_k_keeps_the_first_k_whatever_the_tiles(k, block):
    """The reduction, fed a matrix full of ties and excluded pairs tile by tile in a shuffled
    order (late tiles merge only their entries at or above each row's k-th similarity so far),
    against the plain sort of whole rows by (similarity descending, tie rank ascending): the
    same similarities and indices, bit for bit, and leave-one-out drops the diagonal."""
    from gpu_neighbors.core.tiling import Tile
    from gpu_neighbors.core.topk import TopKReduction

    generator = torch.Generator().manual_seed(k)
    rows, size = 48, 160
    tie_rank = torch.randperm(size, generator=generator)
    similarity = torch.randint(0, 6, (rows, size), generator=generator).to(torch.float64) / 8  # ties
    similarity[torch.rand((rows, size), generator=generator) < 0.1] = -torch.inf
    for leave_one_out in (False, True):
        reduction = TopKReduction(rows, k, tie_rank, leave_one_out=leave_one_out)
        tiles = [(row, column) for row in range(0, rows, 16) for column in range(0, size, block)]
        for order in torch.randperm(len(tiles), generator=generator).tolist():
            row, column = tiles[order]
            reduction.add(Tile(similarity[row:row + 16, column:column + block], row, column))
        top = reduction.result()
        for index in range(rows):
            ranked = sorted((-float(similarity[index, j]), int(tie_rank[j]), j) for j in range(size)
                            if not (leave_one_out and j == index) and similarity[index, j] > -torch.inf)[:k]
            assert top.similarity[index, :len(ranked)].tolist() == [-entry[0] for entry in ranked]
            assert top.index[index, :len(ranked)].tolist() == [entry[2] for entry in ranked]
            assert (top.index[index, len(ranked):] == -1).all()


@pytest.mark.parametrize(("k", "width"), [(1, 4), (3, 12), (5, 61), (8, 200)])
def test_a_first_tile_selected_from_its_entries_above_a_bound_is_the_first_k(k, width):
    """A first tile at least PRUNE_WIDTH k wide is selected from its entries at or above a lower
    bound of each row's k-th value, packed; rows with over half their entries at the bound (all
    0, all -inf, few values) from whole. Against the plain sort of each row, on ties at the k-th
    value, excluded pairs, a width that 2k chunks do not divide, and rows of every kind in one tile."""
    from gpu_neighbors.core.tiling import Tile
    from gpu_neighbors.core.topk import PRUNE_WIDTH, TopKReduction

    assert width >= PRUNE_WIDTH * k
    generator = torch.Generator().manual_seed(width)
    rows = 40
    tie_rank = torch.randperm(width, generator=generator)
    similarity = torch.rand((rows, width), generator=generator, dtype=torch.float64)
    similarity[::4] = torch.randint(0, 5, (10, width), generator=generator).to(torch.float64) / 4  # ties
    similarity[1::8] = 0.0  # no similar text: every entry at the bound
    similarity[2::8, : width // 2] = -torch.inf  # excluded pairs
    similarity[3] = -torch.inf
    reduction = TopKReduction(rows, k, tie_rank)
    reduction.add(Tile(similarity, 0, 0))
    top = reduction.result()
    for index in range(rows):
        ranked = sorted((-float(similarity[index, j]), int(tie_rank[j]), j) for j in range(width)
                        if similarity[index, j] > -torch.inf)[:k]
        assert top.similarity[index, :len(ranked)].tolist() == [-entry[0] for entry in ranked]
        assert top.index[index, :len(ranked)].tolist() == [entry[2] for entry in ranked]
        assert (top.index[index, len(ranked):] == -1).all()


def test_the_packed_width_is_the_cheapest_at_least_k():
    """The first tile packs its rows to the width that reads the fewest entries (packed rows x
    width + rows left out x the tile's width), at least k: against every width by brute force."""
    from gpu_neighbors.core.topk import _cheapest_width

    generator = np.random.default_rng(4)
    for columns, least in ((2000, 50), (300, 10), (64, 16)):
        for counts in (generator.integers(least, columns + 1, 200), np.full(50, least),
                       np.concatenate([generator.integers(least, 2 * least, 190), np.full(10, columns)])):
            costs = {width: counts.size * width + int((counts > width).sum()) * columns
                     for width in range(least, columns + 1)}
            assert costs[_cheapest_width(counts, columns, least)] == min(costs.values())


def test_an_unordered_top_k_is_the_same_set_and_the_same_estimate():
    """A running top-k kept as a set (`ordered=False`, for the estimate when no neighbours are
    shown) holds the ordered one's entries, and its estimate is the same bits."""
    from gpu_neighbors.core.neighbours import Quality
    from gpu_neighbors.core.tiling import Tile
    from gpu_neighbors.core.topk import TopKReduction, estimate_topk

    generator = torch.Generator().manual_seed(8)
    rows, size, k = 30, 120, 12
    quality = Quality.encode(torch.rand(size, generator=generator, dtype=torch.float64))
    similarity = torch.randint(0, 9, (rows, size), generator=generator).to(torch.float64) / 8  # ties
    similarity[torch.rand((rows, size), generator=generator) < 0.1] = -torch.inf
    tops = []
    for ordered in (True, False):
        reduction = TopKReduction(rows, k, quality.tie_rank, ordered=ordered)
        for column in range(0, size, 50):
            reduction.add(Tile(similarity[:, column:column + 50], 0, column))
        tops.append(reduction.result())
    ordered_top, unordered_top = tops
    assert not torch.equal(ordered_top.index, unordered_top.index)  # the set is not kept in order
    for row in range(rows):
        assert sorted(ordered_top.index[row].tolist()) == sorted(unordered_top.index[row].tolist())
    one, other = (estimate_topk(top, quality, k, 1.0) for top in tops)
    assert torch.equal(one.scores.nan_to_num(-1), other.scores.nan_to_num(-1))
    assert torch.equal(one.std.nan_to_num(-1), other.std.nan_to_num(-1))


def test_every_k_of_the_grid_from_one_list_is_its_own_sum():
    """Tuning reads every k from running sums along one top list: each k's estimate and spread
    are the bits of a sum over its own first k entries (the estimate as `predict` made it before
    the grid shared its sums), including k past the list's width and rows without a neighbour."""
    from gpu_neighbors.core.neighbours import NeighborStats, Quality, moments, quantised_weights
    from gpu_neighbors.core.topk import TopK, estimate_topk_grid

    generator = torch.Generator().manual_seed(3)
    rows, width, size = 40, 30, 200
    quality = Quality.encode(torch.rand(size, generator=generator, dtype=torch.float64))
    similarity = torch.rand((rows, width), generator=generator, dtype=torch.float64).sort(dim=1, descending=True).values
    similarity[:5] = 0.0  # rows with no positive neighbour
    index = torch.randint(0, size, (rows, width), generator=generator)
    index[5:10, 20:] = -1  # empty slots
    ks, power = [10, 1, 50, 3, 30, 10], 1.5  # any order, repeated, past the width
    grid = estimate_topk_grid(TopK(similarity, index), quality, ks, power)
    for k, got in zip(ks, grid):
        top = TopK(similarity[:, :k], index[:, :k])
        positive = (top.index >= 0) & (top.similarity > 0)
        weights = torch.where(positive, quantised_weights(top.similarity, power), 0.0)
        sums = torch.stack([(weights * quality.weighted_columns[:, column][top.index.clamp(min=0)]).sum(dim=1)
                            for column in range(quality.weighted_columns.shape[1])], dim=1).to(torch.int64)
        stats = NeighborStats.zeros(rows, len(quality.bands), torch.device("cpu"), power, weighted=True)
        stats.add_sums(slice(None), sums)
        stats.count = positive.sum(dim=1)
        mean, std = moments(stats, quality)
        defined = stats.count > 0
        assert torch.equal(got.covered, defined) and torch.equal(got.num_neighbors, stats.count)
        assert got.scores[defined].numpy().tobytes() == mean[defined].numpy().tobytes()
        assert got.std[defined].numpy().tobytes() == std[defined].numpy().tobytes()
        assert torch.isnan(got.scores[~defined]).all()


def test_the_grids_sums_by_sparse_product_and_by_gathers_agree():
    """The CPU sums each segment's weighted q by a sparse product, a GPU by gathering column by
    column: the same sums, with empty slots (index clamped to 0, weight 0) repeated in a row."""
    from gpu_neighbors.core.topk import _gathered_segment_sums, _segment_sums

    generator = torch.Generator().manual_seed(4)
    rows, width, size = 30, 40, 120
    table = torch.randint(0, 1 << 13, (size, 9), generator=generator).to(torch.float64)
    weights = torch.randint(0, 1 << 20, (rows, width), generator=generator).to(torch.float64)
    index = torch.randint(0, size, (rows, width), generator=generator)
    weights[:, 30:], index[:, 30:] = 0.0, 0  # empty slots
    for ends in ([1, 3, 10, 40], [5], [0, 7, 40]):
        sparse, gathered = _segment_sums(weights, index, ends, table), _gathered_segment_sums(weights, index, ends, table)
        assert sparse.shape == (rows, len(ends), 9) and torch.equal(sparse, gathered)


@pytest.mark.parametrize("ks", [[1, 3, 10, 40], [7], [60, 2, 2, 25], [0, 5]])
def test_segments_hold_every_ks_first_k_and_give_the_grid_its_bits(ks):
    """Tuning ranks each row by nested selections (`rank_segments`): for every k the first k
    entries are the first k of a plain sort by (similarity descending, tie rank ascending) as a
    set, with excluded pairs (-inf) as no neighbour, and every k's estimate and spread are the
    bits the plainly sorted list gives (ks unsorted, repeated, past the width, zero)."""
    from gpu_neighbors.core.neighbours import Quality
    from gpu_neighbors.core.topk import NO_INDEX, TopK, estimate_topk_grid, rank_segments

    generator = torch.Generator().manual_seed(len(ks))
    rows, size = 36, 50
    tie_rank = torch.randperm(size, generator=generator)
    similarity = torch.randint(0, 5, (rows, size), generator=generator).to(torch.float64) / 5  # ties
    similarity[:, :25] += torch.rand((rows, 25), generator=generator, dtype=torch.float64) / 10  # and none
    similarity[torch.rand((rows, size), generator=generator) < 0.15] = -torch.inf
    quality = Quality.encode(torch.rand(size, generator=generator, dtype=torch.float64))
    segments = rank_segments(similarity, ks, tie_rank)
    ordered = [sorted(range(size), key=lambda j: (-float(similarity[row, j]), int(tie_rank[j]))) for row in range(rows)]
    plain_index = torch.tensor([[j for j in row] for row in ordered])
    plain = TopK(torch.gather(similarity, 1, plain_index), plain_index)
    plain = TopK(plain.similarity, plain.index.masked_fill(torch.isinf(plain.similarity), NO_INDEX))
    assert segments.similarity.shape == (rows, min(max(ks), size))
    for k in ks:
        for row in range(rows):
            assert sorted(segments.index[row, :k].tolist()) == sorted(plain.index[row, :k].tolist())
    usable = [k for k in ks if k > 0]
    if usable:
        for got, expected in zip(estimate_topk_grid(segments, quality, usable, 1.0),
                                 estimate_topk_grid(plain, quality, usable, 1.0)):
            assert got.scores.numpy().tobytes() == expected.scores.numpy().tobytes()
            assert got.std.numpy().tobytes() == expected.std.numpy().tobytes()
            assert torch.equal(got.num_neighbors, expected.num_neighbors)
