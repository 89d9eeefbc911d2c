"""The estimator protocol: what turns a candidate's similarities to the training texts into an
estimate of its quality.

An estimator is a part of a scorer (`NeighborsScorer(estimator=TopK(k=20))`): it holds its own
settings, says which of them tuning may choose (`grid`, `tunes`), where fitting starts from
(`start`), and how one pass of the tile loop estimates (`estimate`: which reduction consumes the
tiles and how its result becomes estimates). The scorer runs the loop; an estimator never
touches a kernel. A setting an estimator does not have is a TypeError at construction.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from gpu_neighbors.core import tuning
from gpu_neighbors.core.kernel_ridge import RidgeWeights
from gpu_neighbors.core.neighbours import Quality, TensorPrediction, Thresholds, TrainingSubset
from gpu_neighbors.core.pairwise import PairwiseSimilarities
from gpu_neighbors.core.tiling import Reduction
from gpu_neighbors.core.topk import TopK as Ranking
from gpu_neighbors.core.topk import Both, TopKReduction
from gpu_neighbors.core.validation import MIN_TUNING_TEXTS, Constraint, one_of

# auto: tune what was not given, from MIN_TUNING_TEXTS training texts; always; never.
TUNING_MODES = ("auto", "always", "never")
TUNING = one_of(*TUNING_MODES)


@dataclass(frozen=True)
class TilePass:
    """One pass of the tile loop as an estimator sees it: `run` feeds every tile of `rows`
    candidates to a reduction and returns its result; `quality` the training scores on the
    candidates' device; `num_train` the training texts a candidate can have as neighbours;
    `neighbors` > 0 asks for that many most similar training texts of each row as well."""

    run: Callable[[Reduction[Any]], Any]
    rows: int
    quality: Quality
    thresholds: Thresholds
    num_train: int
    leave_one_out: bool = False
    subset: TrainingSubset | None = None
    neighbors: int = 0
    ridge: RidgeWeights | None = None
    host_waits: bool = True  # False: no host synchronisation (the token-ids path)

    def ranking(self, k: int, ordered: bool = True) -> TopKReduction:
        """The running top k of each row (`ordered` false: as a set, `TopKReduction`)."""
        return TopKReduction(self.rows, k, self.quality.tie_rank, leave_one_out=self.leave_one_out, subset=self.subset,
                             host_waits=self.host_waits, ordered=ordered)

    def with_ranking(self, reduction: Reduction[Any]) -> tuple[Any, Ranking | None]:
        """`reduction`'s result, and the top `neighbors` of each row from the same tiles."""
        if not self.neighbors:
            return self.run(reduction), None
        result, top = self.run(Both(reduction, self.ranking(self.neighbors)))
        return result, top


def check(name: str, value: Any, constraint: Constraint, optional: bool = True) -> None:
    """A setting's value against what it accepts, named as the caller wrote it."""
    if value is None and optional:
        return
    if not constraint.accepts(value):
        raise ValueError(f"{name} must be {constraint.description}{' or None' if optional else ''}, not {value!r}")


class Estimator(ABC):
    """`tuning`: "auto" tunes the settings not given on a training set of at least
    MIN_TUNING_TEXTS texts (never when one the estimator reads is given), "always", "never"."""

    name: ClassVar[str]
    tuned: ClassVar[str]  # what tuning chooses, in words ("k and p")

    def __init__(self, *, tuning: str = "auto") -> None:
        check("tuning", tuning, TUNING, optional=False)
        self.tuning = tuning

    @abstractmethod
    def own_settings(self) -> dict[str, Any]:
        """This estimator's settings besides `tuning`, by constructor name."""

    def settings(self) -> dict[str, Any]:
        """What this part is, as JSON."""
        return {"name": self.name, **self.own_settings(), "tuning": self.tuning}

    @abstractmethod
    def start(self, default_tau: float, num_train: int) -> Thresholds:
        """The settings a fit on `num_train` texts uses before (or without) tuning."""

    def grid(self) -> tuning.TuningGrid:
        """What tuning searches."""
        return tuning.TuningGrid()

    @abstractmethod
    def given(self) -> bool:
        """Whether a setting that tuning would choose was given (then "auto" keeps them)."""

    def tunes(self, num_train: int) -> bool:
        """Whether `fit` on `num_train` texts tunes by default (protocols that fit one pass use
        it to tune inside each training split instead)."""
        if self.tuning != "auto":
            return self.tuning == "always"
        return not self.given() and num_train >= MIN_TUNING_TEXTS

    def tune(self, similarities: PairwiseSimilarities, base: Thresholds, min_coverage: float) -> tuning.TuningResult:
        """The grid's best settings by inner leave-one-out on the training pass."""
        return tuning.tune(similarities, grid=self.grid(), min_coverage=min_coverage, default_tau=base.tau,
                           estimator=self.name, base=base)

    def check_training_set(self, num_train: int, kernel: str, bounded: bool) -> None:
        """Refuse (or warn about) settings that cannot work on `num_train` training texts and
        `kernel`, whose similarities are `bounded` in [0, 1] (or not); a refusal names the
        setting as the table does, so the command line can name its flag."""

    def fewest(self, thresholds: Thresholds) -> int:
        """The fewest training texts a subsample may keep for any estimate to exist."""
        return 1

    @abstractmethod
    def estimate(self, tiles: TilePass) -> tuple[TensorPrediction, Ranking | None]:
        """Estimates of the pass's rows (and their top neighbours where asked)."""

    def __repr__(self) -> str:
        shown = [f"{key}={value!r}" for key, value in self.settings().items()
                 if key != "name" and value is not None and not (key == "tuning" and value == "auto")]
        return f"{type(self).__name__}({', '.join(shown)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Estimator) and other.settings() == self.settings()

    def __hash__(self) -> int:
        return hash(repr(self))
