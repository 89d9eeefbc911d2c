"""Kernel ridge regression on the similarities (`core/kernel_ridge.py`): an estimate for every
text with any similar training text, and an exact leave-one-out in closed form."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from gpu_neighbors.core import kernel_ridge
from gpu_neighbors.core.neighbours import Prediction, TensorPrediction, Thresholds
from gpu_neighbors.core.pairwise import PairwiseSimilarities
from gpu_neighbors.core.tiling import TransientCache
from gpu_neighbors.core.topk import TopK as Ranking
from gpu_neighbors.core.validation import SCORER_PARAMETERS, ParameterError, interval, plain
from gpu_neighbors.estimators.base import Estimator, TilePass, check
from gpu_neighbors.estimators.threshold import PAPER_MAX_FRACTION, PAPER_MIN_NEIGHBORS


class Ridge(Estimator):
    """penalty: lambda, in the similarities' units; None chooses it by exact leave-one-out."""

    name = "ridge"
    tuned = "the penalty"

    def __init__(self, *, penalty: float | None = None, tuning: str = "auto") -> None:
        super().__init__(tuning=tuning)
        check("penalty", penalty, interval(0, closed="neither"))
        self.penalty = plain(penalty)

    def own_settings(self) -> dict[str, Any]:
        return {"penalty": self.penalty}

    def given(self) -> bool:
        return self.penalty is not None

    def start(self, default_tau: float, num_train: int) -> Thresholds:
        return Thresholds(float(default_tau), PAPER_MIN_NEIGHBORS, PAPER_MAX_FRACTION, 0.0, "ridge", None, self.penalty)

    def check_training_set(self, num_train: int, kernel: str, bounded: bool) -> None:
        if num_train < 2:
            requirement = f"topk or threshold for {num_train} training text (kernel ridge fits on at least 2)"
            raise ParameterError(SCORER_PARAMETERS["estimator"], "ridge", requirement)

    def estimate(self, tiles: TilePass) -> tuple[TensorPrediction, Ranking | None]:
        assert tiles.ridge is not None  # the scorer hands the fitted weights over
        reduction = kernel_ridge.RidgeReduction(tiles.rows, tiles.ridge, tiles.leave_one_out, tiles.subset)
        return tiles.with_ranking(reduction)


@dataclass
class RidgeFit:
    """A fitted ridge model over the whole training set (`sample`: the positions it was fitted
    on, None for all; the others have dual weight zero) and its exact leave-one-out estimates
    of the texts it was fitted on, in `sample`'s order."""

    model: kernel_ridge.KernelRidge
    sample: np.ndarray | None
    loo: Prediction
    _weights: TransientCache[torch.device, kernel_ridge.RidgeWeights] = field(default_factory=TransientCache)

    @classmethod
    def fit(cls, sample: np.ndarray | None, similarities: PairwiseSimilarities, penalty: float | None,
            num_train: int) -> RidgeFit:
        """On the tuning pass's texts (`sample` of the training set, or all of it), at `penalty`
        or at the one exact leave-one-out chooses."""
        everything = np.arange(len(similarities))
        model = similarities.ridge(everything, penalty)
        loo = kernel_ridge.leave_one_out_prediction(model.loo, similarities.similar_counts(everything))
        if sample is not None:
            alpha = np.zeros(num_train)
            alpha[sample] = model.alpha
            model = replace(model, alpha=alpha)
        return cls(model, sample, loo)

    def weights_on(self, device: torch.device) -> kernel_ridge.RidgeWeights:
        """The dual weights as limbs on `device`, made once per device."""
        if device not in self._weights:
            self._weights[device] = kernel_ridge.RidgeWeights.of(self.model, device)
        return self._weights[device]

    def leave_one_out(self, outside: Prediction | None) -> Prediction:
        """The exact leave-one-out of the fitted texts; with a sample, `outside` (one pass over
        the whole training set) gives the texts outside it, which the model never saw."""
        if self.sample is None:
            return self.loo
        assert outside is not None
        scores = outside.scores.copy()
        scores[self.sample] = self.loo.scores  # one per text of the sample, in its order
        return replace(outside, scores=scores, covered=np.isfinite(scores))
