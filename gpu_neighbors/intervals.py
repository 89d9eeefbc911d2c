"""Intervals as a part of a scorer: conformal prediction on the training set's exact
leave-one-out residuals (`core/conformal.py` states the guarantee), each interval scaled by
the estimate's difficulty. The scorer runs the leave-one-out passes; this part says which texts
calibrate, how their residuals become a `Calibration`, and how a calibration bounds estimates.

The same calibration texts calibrate the outlier test (`core/outside.py`): a text outside the
training distribution at `outside_level` has no calibrated interval, so it gets the whole score
range, and with `negatives` the negative evidence's estimate instead of its neighbours'. One of
the test's statistics is learned from negative evidence: degenerate copies of calibration texts
(`degeneracy`, `core/discriminant.py`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gpu_neighbors.core import conformal
from gpu_neighbors.core.discriminant import LinearScore
from gpu_neighbors.core.neighbours import canonical_sample
from gpu_neighbors.core.outside import OutlierTest, OutsideRule, lowest_decile_mean
from gpu_neighbors.core.validation import DEFAULT_LEVEL, DEFAULT_OUTSIDE_LEVEL, NEGATIVE_RULES, WORD_LISTS, interval
from gpu_neighbors.text.perturbations import WordPool, all_copies
from gpu_neighbors.text.typicality import Typicality

LEVEL = interval(0, 1, closed="neither")
NEGATIVE_TEXTS = 300  # calibration texts whose degenerate copies teach the degeneracy score


class Intervals:
    """level: nominal coverage of the interval [low, high] given with each estimate.
    outside_level: the share of texts from the training distribution that may be flagged
    outside it (a conformal outlier test, `core/outside.py`). negatives: the estimate of a
    covered flagged text: "lowest_decile" (the mean of the training set's lowest tenth of
    scores), "minimum" (the score range's low end) or "none" (its neighbours'). words: the
    language of the word list behind the test's spelling statistic (`text/lexicon.py`; "none":
    no list, the statistic off)."""

    def __init__(self, level: float = DEFAULT_LEVEL, outside_level: float = DEFAULT_OUTSIDE_LEVEL,
                 negatives: str = NEGATIVE_RULES[0], words: str = WORD_LISTS[0]) -> None:
        for name, value in (("level", level), ("outside_level", outside_level)):
            if not LEVEL.accepts(value):
                raise ValueError(f"{name} must be {LEVEL.description}, not {value!r}")
        if negatives not in NEGATIVE_RULES:
            raise ValueError(f"negatives must be one of {', '.join(NEGATIVE_RULES)}, not {negatives!r}")
        if words not in WORD_LISTS:
            raise ValueError(f"words must be one of {', '.join(WORD_LISTS)}, not {words!r}")
        self.level, self.outside_level, self.negatives = float(level), float(outside_level), negatives
        self.words = words

    def settings(self) -> dict[str, Any]:
        return {"level": self.level, "outside_level": self.outside_level, "negatives": self.negatives,
                "words": self.words}

    def outside_rule(self, test: OutlierTest, degeneracy: LinearScore, train_scores: np.ndarray,
                     score_range: tuple[float, float] | None) -> OutsideRule:
        """The outlier test at `outside_level` (its last column `degeneracy`'s score), with the
        estimate and the interval of a flagged text: the score range (the training scores'
        without one)."""
        low, high = score_range or (float(train_scores.min()), float(train_scores.max()))
        negative = {"lowest_decile": lowest_decile_mean(train_scores), "minimum": float(low)}.get(self.negatives)
        return OutsideRule(test, self.outside_level, negative, (float(low), float(high)), degeneracy)

    @staticmethod
    def degeneracy(typicality: Typicality, texts: list[str], chosen: np.ndarray, canonical: np.ndarray,
                   statistics: np.ndarray) -> LinearScore:
        """The degeneracy score, learned from negative evidence: a seeded sample of at most
        NEGATIVE_TEXTS of the calibration texts `chosen` (sorted positions; `statistics`: their
        leave-one-out typicality, in that order) against every perturbation's copy of each
        (random words from the training vocabulary), each copy measured without its original."""
        taught = canonical_sample(canonical[np.isin(canonical, chosen)], NEGATIVE_TEXTS, seed=1)
        originals = [texts[index] for index in taught]
        copies, sources = all_copies(originals, vocabulary=WordPool.from_texts(texts))
        measured = typicality.of_texts(copies, originals=[originals[index] for index in sources])
        return LinearScore.fit(statistics[np.searchsorted(chosen, taught)], measured.cpu().numpy())

    @staticmethod
    def sample(canonical: np.ndarray) -> np.ndarray:
        """The training texts (positions) that calibrate, of those in `canonical` order."""
        return conformal.calibration_sample(canonical)

    @staticmethod
    def calibrate(texts: np.ndarray, estimates: np.ndarray, spreads: np.ndarray, truth: np.ndarray,
                  canonical: np.ndarray) -> conformal.Calibration:
        """`Calibration.fit` on the leave-one-out results of training texts `texts` (positions),
        handed over in the canonical order, where its seeded split cuts the same halves whatever
        order the training set came in."""
        ranks = np.empty(canonical.size, dtype=np.int64)
        ranks[canonical] = np.arange(canonical.size)
        arranged = np.argsort(ranks[texts])
        return conformal.Calibration.fit(estimates[arranged], spreads[arranged], truth[texts][arranged])

    def bounds(self, calibration: conformal.Calibration, scores: torch.Tensor, std: torch.Tensor, estimator: str,
               score_range: tuple[float, float] | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(low, high) of each estimate at `level`, clipped to `score_range` (where the truth lies)."""
        bounds = None if score_range is None else (float(score_range[0]), float(score_range[1]))
        return calibration.interval_tensors(scores, conformal.difficulty(estimator, std), self.level, bounds)

    def __repr__(self) -> str:
        return (f"Intervals(level={self.level!r}, outside_level={self.outside_level!r}, "
                f"negatives={self.negatives!r}, words={self.words!r})")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Intervals) and other.settings() == self.settings()

    def __hash__(self) -> int:
        return hash(tuple(self.settings().items()))
