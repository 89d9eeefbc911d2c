"""Top-k: the similarity-weighted mean known quality of the k most similar training texts,
defined whenever any training text is similar."""
from __future__ import annotations

from typing import Any

from gpu_neighbors.core import tuning
from gpu_neighbors.core.neighbours import TensorPrediction, Thresholds
from gpu_neighbors.core.topk import TopK as Ranking
from gpu_neighbors.core.topk import estimate_topk
from gpu_neighbors.core.validation import DEFAULT_TOP_K, MAX_TOP_K, interval, plain
from gpu_neighbors.estimators.base import Estimator, TilePass, check
from gpu_neighbors.estimators.threshold import (
    PAPER_MAX_FRACTION,
    PAPER_MIN_NEIGHBORS,
    check_weighting,
    used_power,
    weighting_grid,
)


class TopK(Estimator):
    """k: None tuned, else 50 (capped at the training set's size); weighting "similarity"
    (weights k(x, s)^power; power None: tuned, else 1) or "uniform" (plain mean)."""

    name = "topk"
    tuned = "k and p"

    def __init__(self, *, k: int | None = None, weighting: str = "similarity", power: float | None = None,
                 tuning: str = "auto") -> None:
        super().__init__(tuning=tuning)
        check("k", k, interval(1, MAX_TOP_K, integer=True))
        check_weighting(weighting, power)
        self.k, self.weighting, self.power = plain(k), weighting, plain(power)

    def own_settings(self) -> dict[str, Any]:
        return {"k": self.k, "weighting": self.weighting, "power": self.power}

    def given(self) -> bool:
        return self.k is not None or self.power is not None

    def start(self, default_tau: float, num_train: int) -> Thresholds:
        return Thresholds(float(default_tau), PAPER_MIN_NEIGHBORS, PAPER_MAX_FRACTION,
                          used_power(self.weighting, self.power), "topk",
                          min(self.k or DEFAULT_TOP_K, num_train))

    def grid(self) -> tuning.TuningGrid:
        return tuning.TuningGrid(powers=weighting_grid(self.weighting, self.power),
                                 top_ks=tuning.DEFAULT_TOP_KS if self.k is None else (self.k,))

    def estimate(self, tiles: TilePass) -> tuple[TensorPrediction, Ranking | None]:
        chosen = tiles.thresholds
        k = int(chosen.top_k or 1)
        # Without neighbours shown, the estimate sums over all k kept, so their order is not needed.
        top = tiles.run(tiles.ranking(max(k, tiles.neighbors), ordered=tiles.neighbors > 0))
        estimates = estimate_topk(top, tiles.quality, k, chosen.power, tiles.host_waits)
        return estimates, top.first(tiles.neighbors) if tiles.neighbors else None
