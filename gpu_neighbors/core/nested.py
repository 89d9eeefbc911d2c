"""Nested leave-one-out tuning of the top-k estimator from one ranking of the data set.

Leave-one-out with tuning chooses k and p for each left-out text by an inner leave-one-out on
the other n - 1 texts alone (`evaluation.protocols.cross_validate`). Run as `tune` runs on each
of those n training sets, that is n rankings of an (n - 1)^2 block: over 15 minutes for 1,000
texts on two cores. But leaving text f out changes another text j's k most similar texts in one
way only: where f is among them, the (k + 1)-th takes its place (the ranking's order is total,
so the others keep theirs). So one ranking of every text's first max(k) + 1 others, with exact
running sums at every k and k + 1 (`topk.running_sums`), gives every training set's inner sums
by one subtraction: the integers `tune` sums, so the same estimates, rhos and choices, bit for
bit. The one condition is the encoding of q those sums are made of (`Quality`): it depends on
the extremes of each magnitude band, so a fold whose left-out text is one (its training set is
encoded otherwise) is tuned as `tune` tunes it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from gpu_neighbors.core.correlation import spearman_rows
from gpu_neighbors.core.neighbours import (
    MANTISSA_BITS,
    WEIGHTED_LIMB_BITS,
    Prediction,
    Quality,
    Thresholds,
    magnitude_bands,
    quantised_weights,
    weighted_mean,
)
from gpu_neighbors.core.pairwise import PairwiseSimilarities
from gpu_neighbors.core.topk import TopK, estimate_topk_grid, running_sums
from gpu_neighbors.core.tuning import TuningGrid, TuningResult, choose, tune

# Entries of the inner estimates (fold x k x text) or sums (pair x column) held at once: 32 MB.
HELD_ENTRIES = 1 << 22
Progress = Callable[[float], None]  # told how many more folds are done (parts of one, too)


@dataclass(frozen=True)
class NestedLeaveOneOut:
    """Each text's tuning on the other texts (in order) and its estimate by them at that choice."""

    tunings: list[TuningResult]
    prediction: Prediction


def nested_topk(
    similarities: PairwiseSimilarities,
    base: Thresholds,
    grid: TuningGrid,
    min_coverage: float,
    progress: Progress | None = None,
) -> NestedLeaveOneOut:
    """For each text f: `tune(similarities, all but f, estimator="topk", ...)` and the estimate
    of f at the settings chosen, as `cross_validate` makes them one fold at a time."""
    size = len(similarities)
    everything = np.arange(size)
    if size < 4:  # a training set of fewer than 3 texts: `tune` refuses it, in its words
        return _fold_by_fold(similarities, everything, base, grid, min_coverage, progress)
    ks = grid.k_values(size - 2)  # as `tune` takes them for n - 1 training texts
    ends = sorted({*ks, *(k + 1 for k in ks)})  # at most n - 1: every other text is ranked
    quality = similarities.quality(everything)
    top = similarities.top(everything, everything, ends)
    shared = _encoded_alike(similarities.scores, quality)
    rho, coverage = _inner_scores(similarities, top, quality, ks, ends, grid, everything[shared], progress)
    tunings: list[TuningResult | None] = [None] * size
    for row, fold in enumerate(everything[shared]):
        settings = [Thresholds(base.tau, base.min_neighbors, base.max_fraction, float(power), "topk", k)
                    for power in grid.powers for k in ks]
        tunings[fold] = choose(list(zip(settings, rho[row].tolist(), coverage[row].tolist())), min_coverage)
    prediction = _prediction_at_choices(similarities, top, quality, everything[shared], tunings)
    alone = _fold_by_fold(similarities, everything[~shared], base, grid, min_coverage, progress)
    for position, fold in enumerate(everything[~shared]):
        tunings[fold] = alone.tunings[position]
        for field in ("scores", "num_neighbors", "std", "covered"):
            getattr(prediction, field)[fold] = getattr(alone.prediction, field)[position]
    done = [tuning for tuning in tunings if tuning is not None]
    assert len(done) == size  # every fold tuned one way or the other
    return NestedLeaveOneOut(done, prediction)


def _encoded_alike(scores: np.ndarray, quality: Quality) -> np.ndarray:
    """Per text: whether the others alone are encoded as all of them are (the same bands, each
    with the same scales), so that the inner sums of its fold are the shared ones."""
    bands = magnitude_bands(scores)
    alike = np.zeros(scores.size, dtype=bool)
    for fold in range(scores.size):
        rest = np.delete(scores, fold)
        alike[fold] = bool(np.array_equal(magnitude_bands(rest), np.delete(bands, fold))) and \
            Quality.encode(torch.from_numpy(rest)).bands == quality.bands
    return alike


def _inner_scores(
    similarities: PairwiseSimilarities,
    top: TopK,
    quality: Quality,
    ks: list[int],
    ends: list[int],
    grid: TuningGrid,
    folds: np.ndarray,
    progress: Progress | None,
) -> tuple[np.ndarray, np.ndarray]:
    """rho and coverage [folds, powers x ks] of the inner leave-one-out of each fold's training
    set at every grid point, in `tune`'s order (power, then k). Most texts' inner estimates
    are those of the whole set; only the pairs (j, f) with f among j's first k differ."""
    size = len(similarities)
    pairs = Pairs.of(top, max(ks), similarities.matrix > 0)
    step = max(1, HELD_ENTRIES // (size * len(ks)))
    rho = np.empty((folds.size, len(grid.powers) * len(ks)))
    coverage = np.empty_like(rho)
    for which, power in enumerate(grid.powers):
        sums, counts = running_sums(top, quality, ends, float(power))
        sums = _mean_sums(sums, quality)
        whole = [_estimates(sums[:, ends.index(k)], counts[:, ends.index(k)], quality) for k in ks]
        changed = pairs.estimates(similarities.matrix, quality, float(power), ks, ends, sums, counts)
        for start in range(0, folds.size, step):
            part = folds[start : start + step]
            estimates = np.empty((part.size, len(ks), size))
            for place, (scores, defined) in enumerate(whole):
                estimates[:, place] = np.where(defined, scores, np.nan)
            pairs.write(estimates, part, changed)
            estimates[np.arange(part.size), :, part] = np.nan  # a fold's own text is no training text
            flat = slice(which * len(ks), (which + 1) * len(ks))
            rows = slice(start, start + part.size)
            rho[rows, flat] = spearman_rows(estimates.reshape(-1, size), similarities.scores).reshape(part.size,
                                                                                                    len(ks))
            coverage[rows, flat] = np.isfinite(estimates).sum(axis=2) / (size - 1)
            if progress is not None:  # a fold is done once every power has been through it
                progress(part.size / len(grid.powers))
    return rho, coverage


def _mean_sums(sums: torch.Tensor, quality: Quality) -> torch.Tensor:
    """Of `Quality.weighted_columns` sums [..., bands x (1 + limbs + limbs)], the weights and
    the limbs of q [..., bands, 1 + limbs]: what a mean reads (the squares make the spread)."""
    limbs = MANTISSA_BITS // WEIGHTED_LIMB_BITS
    return sums.reshape(*sums.shape[:-1], len(quality.bands), 1 + 2 * limbs)[..., : 1 + limbs]


def _estimates(sums: torch.Tensor, counts: torch.Tensor, quality: Quality) -> tuple[np.ndarray, np.ndarray]:
    """Means of `_mean_sums` rows [rows, bands, 1 + limbs], and whether each has a neighbour."""
    return weighted_mean(sums[:, :, 0], sums[:, :, 1:], quality).numpy(), (counts > 0).numpy()


@dataclass(frozen=True)
class Pairs:
    """The pairs (text j, text f among j's first max(k)) whose inner estimate differs from the
    whole set's in the training set without f, sorted by f, with f's place in j's list and
    whether their similarity is positive (f's term counts)."""

    rows: torch.Tensor
    folds: torch.Tensor
    places: torch.Tensor
    positive: torch.Tensor

    @classmethod
    def of(cls, top: TopK, most: int, positive: torch.Tensor) -> Pairs:
        index = top.index[:, :most]
        rows, places = torch.nonzero(index >= 0, as_tuple=True)
        folds = index[rows, places]
        order = torch.argsort(folds, stable=True)
        rows, folds, places = rows[order], folds[order], places[order]
        return cls(rows, folds, places, positive[rows, folds])

    def estimates(self, matrix: torch.Tensor, quality: Quality, power: float, ks: list[int], ends: list[int],
                  sums: torch.Tensor, counts: torch.Tensor) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each k: the pairs with f among j's first k (positions in these arrays, ascending)
        and each one's inner estimate (NaN where none), from the sums of j's first k + 1 less
        f's term."""
        weights = torch.where(self.positive, quantised_weights(matrix[self.rows, self.folds], power), 0.0)
        columns = _mean_sums(quality.weighted_columns, quality)
        lost = self.positive.to(torch.int64)
        step = max(1, HELD_ENTRIES // columns[0].numel())
        result = []
        for k in ks:
            after, total = sums[:, ends.index(k + 1)], counts[:, ends.index(k + 1)]
            inside = torch.nonzero(self.places < k).flatten()
            scores = np.empty(inside.numel())
            for start in range(0, inside.numel(), step):
                chosen = inside[start : start + step]
                j, f = self.rows[chosen], self.folds[chosen]
                term = (weights[chosen][:, None, None] * columns[f]).to(torch.int64)
                mean, defined = _estimates(after[j] - term, total[j] - lost[chosen], quality)
                scores[start : start + chosen.numel()] = np.where(defined, mean, np.nan)
            result.append((inside.numpy(), scores))
        return result

    def write(self, estimates: np.ndarray, folds: np.ndarray, changed: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """Into `estimates` [len(folds), ks, texts] of ascending `folds`: their changed pairs'
        estimates at each k (`changed`, from `estimates`)."""
        sorted_folds, rows = self.folds.numpy(), self.rows.numpy()
        first, last = np.searchsorted(sorted_folds, [folds[0], folds[-1] + 1])
        for position, (inside, scores) in enumerate(changed):
            low, high = np.searchsorted(inside, [first, last])
            pairs = inside[low:high]
            slot = np.searchsorted(folds, sorted_folds[pairs])
            ours = folds[np.minimum(slot, folds.size - 1)] == sorted_folds[pairs]
            estimates[slot[ours], position, rows[pairs][ours]] = scores[low:high][ours]


def _prediction_at_choices(similarities: PairwiseSimilarities, top: TopK, quality: Quality,
                           folds: np.ndarray, tunings: list[TuningResult | None]) -> Prediction:
    """Each of `folds`' text estimated by all the others at its fold's choice: its row of the
    whole set's leave-one-out at those settings (the others are the fold's training set,
    encoded alike); NaN elsewhere."""
    size = len(similarities)
    prediction = Prediction(scores=np.full(size, np.nan), num_neighbors=np.zeros(size, dtype=np.int64),
                            std=np.full(size, np.nan), covered=np.zeros(size, dtype=bool))
    chosen: dict[float, dict[int, list[int]]] = {}
    for fold in folds.tolist():
        settings = tunings[fold]
        assert settings is not None and settings.thresholds.top_k is not None
        power, k = settings.thresholds.power, settings.thresholds.top_k
        chosen.setdefault(power, {}).setdefault(k, []).append(fold)
    for power, by_k in chosen.items():
        ks = sorted(by_k)
        for k, estimate in zip(ks, estimate_topk_grid(top, quality, ks, power)):
            rows = np.asarray(by_k[k])
            whole = estimate.numpy()
            prediction.scores[rows], prediction.num_neighbors[rows] = whole.scores[rows], whole.num_neighbors[rows]
            prediction.std[rows], prediction.covered[rows] = whole.std[rows], whole.covered[rows]
    return prediction


def _fold_by_fold(similarities: PairwiseSimilarities, folds: np.ndarray, base: Thresholds, grid: TuningGrid,
                  min_coverage: float, progress: Progress | None) -> NestedLeaveOneOut:
    """`folds` tuned and estimated one at a time, as `tune` and `predict` do for any estimator."""
    everything = np.arange(len(similarities))
    tunings, parts = [], []
    for fold in folds.tolist():
        train = np.delete(everything, fold)
        tuning = tune(similarities, train, grid=grid, min_coverage=min_coverage, default_tau=base.tau,
                      estimator=base.estimator, base=base)
        tunings.append(tuning)
        parts.append(similarities.predict(np.array([fold]), train, tuning.thresholds))
        if progress is not None:
            progress(1)
    if not parts:
        empty = np.zeros(0)
        return NestedLeaveOneOut([], Prediction(empty, np.zeros(0, dtype=np.int64), empty, np.zeros(0, dtype=bool)))
    return NestedLeaveOneOut(tunings, Prediction(
        scores=np.concatenate([part.scores for part in parts]),
        num_neighbors=np.concatenate([part.num_neighbors for part in parts]),
        std=np.concatenate([part.std for part in parts]),
        covered=np.concatenate([part.covered for part in parts])))
