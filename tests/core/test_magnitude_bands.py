"""Issue 32: one huge training score must not erase the digits of the others. The fixed-point
sums take one scale per magnitude band of q (`core.neighbours.magnitude_bands`), so every
neighbourhood's mean and spread are right to float64 precision whatever else the training set
holds. Reference: exact rational arithmetic (fractions) over the neighbours the tile selects."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from gpu_neighbors import NeighborsScorer
from gpu_neighbors.core.neighbours import (
    NeighborStats,
    Quality,
    estimate,
    magnitude_bands,
    quantised_weights,
)
from gpu_neighbors.core.topk import TopKReduction, estimate_topk
from gpu_neighbors.core.tiling import Tile

TAU = 0.05


def exact_moments(scores: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    """The weighted mean and population standard deviation, in exact rationals."""
    total = sum(Fraction(float(w)) for w in weights)
    mean = sum(Fraction(float(w)) * Fraction(float(q)) for w, q in zip(weights, scores)) / total
    unit = Fraction(max(float(np.abs(scores).max()), 1.0))  # the spread in its units: 1e300^2 overflows
    variance = sum(Fraction(float(w)) * ((Fraction(float(q)) - mean) / unit) ** 2
                   for w, q in zip(weights, scores)) / total
    return float(mean), math.sqrt(variance) * float(unit)


@pytest.fixture(scope="module")
def tile(huse_texts) -> torch.Tensor:
    scorer = NeighborsScorer(kernel="bleu").fit(huse_texts[:150], [0.5] * 150, tune=False)
    return scorer.similarity(huse_texts[150:]).to(torch.float64)


def scores_with(huse_scores, huge: float) -> torch.Tensor:
    scores = torch.tensor(huse_scores[:150], dtype=torch.float64)
    scores[7] = huge
    return scores


def check(mean: np.ndarray, std: np.ndarray, tile: torch.Tensor, scores: torch.Tensor, weights: torch.Tensor,
          selected: torch.Tensor) -> tuple[int, int]:
    """Every row's mean and spread against the exact ones; (rows with, rows without) the huge score."""
    with_huge = without = 0
    for row in range(tile.shape[0]):
        chosen = selected[row].nonzero().flatten()
        if chosen.numel() == 0:
            continue
        reference = exact_moments(scores[chosen].numpy(), weights[row, chosen].numpy())
        assert mean[row] == pytest.approx(reference[0], rel=1e-13, abs=0), row
        assert std[row] == pytest.approx(reference[1], rel=1e-9, abs=1e-300), row
        if bool((chosen == 7).any()):
            with_huge += 1
        else:
            without += 1
    return with_huge, without


@pytest.mark.parametrize("huge", [1e6, 1e12, 1e20, 1e300, -1e300])
def test_one_huge_score_leaves_every_other_neighbourhood_exact(tile, huse_scores, huge):
    scores = scores_with(huse_scores, huge)
    quality = Quality.encode(scores)
    stats = NeighborStats.zeros(tile.shape[0], len(quality.bands), tile.device)
    stats.add_tile(tile, quality, TAU)
    prediction = estimate(stats, quality, scores.numel(), 1, 1.0)
    selected = tile >= TAU
    counts = check(prediction.scores, prediction.std, tile, scores, torch.ones_like(tile), selected)
    assert all(counts), counts  # both kinds of neighbourhood were checked


@pytest.mark.parametrize("huge", [1e6, 1e20])
def test_weighted_and_top_k_sums_keep_the_digits_too(tile, huse_scores, huge):
    scores = scores_with(huse_scores, huge)
    quality = Quality.encode(scores)
    weights = quantised_weights(tile, 1.0)
    stats = NeighborStats.zeros(tile.shape[0], len(quality.bands), tile.device, power=1.0)
    stats.add_tile(tile, quality, TAU)
    prediction = estimate(stats, quality, scores.numel(), 1, 1.0)
    assert all(check(prediction.scores, prediction.std, tile, scores, weights, tile >= TAU))

    top = TopKReduction(tile.shape[0], 10, quality.tie_rank)
    top.add(Tile(tile.to(torch.float32), 0, 0))
    best = top.result()
    estimated = estimate_topk(best, quality, 10, 0.0).numpy()
    selected = torch.zeros_like(tile, dtype=torch.bool)
    for row in range(tile.shape[0]):
        kept = best.index[row][(best.index[row] >= 0) & (best.similarity[row] > 0)]
        selected[row, kept] = True
    assert check(estimated.scores, estimated.std, tile, scores, torch.ones_like(tile), selected)[1] > 0


def test_the_paper_rule_through_the_scorer_with_a_score_of_1e20(huse_texts, huse_scores):
    """The issue's case: a candidate whose neighbours leave out the 1e20 keeps its estimate."""
    scores = list(huse_scores[:150])
    plain = NeighborsScorer(kernel="bleu", score_range=(0, 1e20)).fit(huse_texts[:150], scores, tune=False)
    scores[7] = 1e20
    huge = NeighborsScorer(kernel="bleu", score_range=(0, 1e20)).fit(huse_texts[:150], scores, tune=False)
    similarity = plain.similarity(huse_texts[150:])
    apart = ~(similarity[:, 7] >= plain.tau_)
    before, after = plain.predict(huse_texts[150:]), huge.predict(huse_texts[150:])
    rows = apart.numpy() & before.covered
    assert rows.sum() > 10
    np.testing.assert_array_equal(after.scores[rows], before.scores[rows])  # one band each: the same bits
    np.testing.assert_array_equal(after.std[rows], before.std[rows])


def test_bands_depend_on_the_values_only():
    values = np.array([0.0, 0.6, 1e-3, 1e20, 3e19, -0.25, 1e-300])
    bands = magnitude_bands(values)
    assert bands.tolist() == [0, 1, 2, 0, 0, 1, 3]
    order = np.random.default_rng(0).permutation(values.size)
    assert magnitude_bands(values[order]).tolist() == bands[order].tolist()
