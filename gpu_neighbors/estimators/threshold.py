"""The paper's threshold rule: the (weighted) mean known quality of the training texts within
tau, defined when a <= |N(x)| <= b |S|."""
from __future__ import annotations

from typing import Any

from gpu_neighbors.core import tuning
from gpu_neighbors.core.caller_warnings import warn
from gpu_neighbors.core.neighbours import NeighborReduction, TensorPrediction, Thresholds, estimate_tensors
from gpu_neighbors.core.topk import TopK as Ranking
from gpu_neighbors.core.validation import (
    MAX_POWER,
    SCORER_PARAMETERS,
    WEIGHTINGS,
    ParameterError,
    half_steps,
    interval,
    one_of,
    plain,
)
from gpu_neighbors.estimators.base import Estimator, TilePass, check

PAPER_MIN_NEIGHBORS, PAPER_MAX_FRACTION = 5, 0.66  # the paper's a and b
DEFAULT_POWER = 1.0  # p of similarity weighting when it is not tuned


def weighting_grid(weighting: str, power: float | None) -> tuple[float, ...]:
    """The powers p tuning tries: none under uniform weighting, the given one, else a grid."""
    if weighting == "uniform":
        return tuning.UNIFORM_POWERS
    return tuning.SIMILARITY_POWERS if power is None else (float(power),)


def used_power(weighting: str, power: float | None) -> float:
    return (DEFAULT_POWER if power is None else float(power)) if weighting == "similarity" else 0.0


def check_weighting(weighting: str, power: float | None) -> None:
    check("weighting", weighting, one_of(*WEIGHTINGS), optional=False)
    check("power", power, half_steps(MAX_POWER))
    if power is not None and weighting != "similarity":
        raise ValueError(f"power={power!r} weights nothing under weighting={weighting!r}: give weighting='similarity'")


class Threshold(Estimator):
    """tau: similarity threshold (None: the kernel's default, the paper's); min_neighbors (a)
    and max_fraction (b): None tuned, else the paper's 5 and 0.66; weighting "uniform" (plain
    mean) or "similarity" (weights k^power, power None: tuned, else 1)."""

    name = "threshold"
    tuned = "tau, a and b"

    def __init__(self, *, tau: float | None = None, min_neighbors: int | None = None,
                 max_fraction: float | None = None, weighting: str = "uniform", power: float | None = None,
                 tuning: str = "auto") -> None:
        super().__init__(tuning=tuning)
        check("tau", tau, interval())
        check("min_neighbors", min_neighbors, interval(1, integer=True))
        check("max_fraction", max_fraction, interval(0, 1, closed="right"))
        check_weighting(weighting, power)
        self.tau, self.min_neighbors, self.max_fraction = plain(tau), plain(min_neighbors), plain(max_fraction)
        self.weighting, self.power = weighting, plain(power)

    @classmethod
    def paper(cls, tau: float | None = None) -> Threshold:
        """The paper's method exactly: the kernel's tau (or `tau`), a = 5, b = 0.66, the plain
        mean, never tuned."""
        return cls(tau=tau, tuning="never")

    def own_settings(self) -> dict[str, Any]:
        return {"tau": self.tau, "min_neighbors": self.min_neighbors, "max_fraction": self.max_fraction,
                "weighting": self.weighting, "power": self.power}

    def given(self) -> bool:
        return any(value is not None for value in (self.tau, self.min_neighbors, self.max_fraction, self.power))

    def start(self, default_tau: float, num_train: int) -> Thresholds:
        return Thresholds(
            float(default_tau if self.tau is None else self.tau),
            PAPER_MIN_NEIGHBORS if self.min_neighbors is None else self.min_neighbors,
            PAPER_MAX_FRACTION if self.max_fraction is None else self.max_fraction,
            used_power(self.weighting, self.power),
        )

    def grid(self) -> tuning.TuningGrid:
        return tuning.TuningGrid(powers=weighting_grid(self.weighting, self.power))

    def check_training_set(self, num_train: int, kernel: str, bounded: bool) -> None:
        if self.tau is not None and bounded and not 0 <= self.tau <= 1:
            requirement = f"in [0, 1] for the {kernel} kernel (its similarities lie there)"
            raise ParameterError(SCORER_PARAMETERS["tau"], self.tau, requirement)
        needed = PAPER_MIN_NEIGHBORS if self.min_neighbors is None else self.min_neighbors
        if needed <= num_train:
            return
        if self.min_neighbors is not None:
            requirement = (f"at most the {num_train} training texts, or no text could ever have enough "
                           "neighbours for an estimate")
            raise ParameterError(SCORER_PARAMETERS["min_neighbors"], needed, requirement)
        warn(f"{num_train} training texts are fewer than the {needed} neighbours an "
             "estimate needs (min_neighbors): every estimate will be undefined")

    def fewest(self, thresholds: Thresholds) -> int:
        return thresholds.min_neighbors

    def estimate(self, tiles: TilePass) -> tuple[TensorPrediction, Ranking | None]:
        chosen = tiles.thresholds
        counts = NeighborReduction(tiles.rows, tiles.quality, chosen.tau, leave_one_out=tiles.leave_one_out,
                                   subset=tiles.subset, power=chosen.power)
        stats, shown = tiles.with_ranking(counts)
        estimates = estimate_tensors(stats, tiles.quality, tiles.num_train, chosen.min_neighbors, chosen.max_fraction)
        return estimates, shown
