"""Compare systems (the generators that made the candidates): which is better, by how much,
and how sure.

Per system: its texts, how many have an estimate (coverage), the mean estimate over those and
a 95% bootstrap interval. Per pair of systems: the difference of means, its 95% interval and
two p-values (paired bootstrap and approximate randomization, `significance.py`).

Texts without an estimate (the neighbour rule defines none) are left out of every mean, and
each system's coverage says how many that was. With a pair field (candidates that share an
input, e.g. a prompt) the inputs are resampled and each pair of systems is compared on the
inputs where both have an estimate; without one, each system's texts are resampled on their
own. Every number is the same whatever the order of the candidates: inputs are taken in the
order of their labels, a system's own texts in the order of their values.

`leave_one_out_scale` runs the same comparison on a scored training set that names each
text's system, once with the leave-one-out estimates and once with the human scores of the
same texts, and measures how much the estimate shrinks differences between systems
(`Scale.shrinkage`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any

import numpy as np

from gpu_neighbors.core import validation
from gpu_neighbors.core.caller_warnings import beyond_float_is_inf, warn
from gpu_neighbors.data.errors import InputError, PathLike
from gpu_neighbors.evaluation.significance import (
    RESAMPLES,
    SEED,
    TRIALS,
    Tests,
    interval,
    paired_tests,
    unpaired_tests,
)

ALPHA = 0.05  # the level at which a difference is called significant in the tables


@dataclass(frozen=True)
class SystemRow:
    """One system: texts, texts with an estimate, their share, the mean and its interval."""

    system: str
    texts: int
    covered: int
    coverage: float
    mean: float
    low: float
    high: float


@dataclass(frozen=True)
class PairRow:
    """Two systems, the first with the higher mean: the difference, its interval, the
    p-values, and how many texts the means ran over (shared inputs, or both systems' texts)."""

    first: str
    second: str
    difference: float
    low: float
    high: float
    p_bootstrap: float
    p_randomization: float
    compared: int

    @property
    def significant(self) -> bool:
        """Both tests below ALPHA."""
        return bool(self.p_bootstrap < ALPHA and self.p_randomization < ALPHA)


@dataclass(frozen=True)
class SystemComparison:
    """Systems from the highest mean down, every pair, the settings of the tests, and each
    system's resampled means [resamples, systems] in `systems` order."""

    systems: list[SystemRow]
    pairs: list[PairRow]
    settings: dict[str, Any]
    resampled: np.ndarray = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {"settings": self.settings, "systems": [asdict(row) for row in self.systems],
                "pairs": [{**asdict(row), "significant": row.significant} for row in self.pairs]}


class SystemCollector:
    """Per candidate its system, estimate, input label (with a pair field) and file line,
    gathered batch by batch in compact arrays (about 28 bytes a candidate), so a million
    candidates need no per-text Python objects."""

    def __init__(self, paired: bool) -> None:
        self.paired = paired
        self._systems: dict[str, int] = {}
        self._inputs: dict[str, int] = {}
        self._chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, systems: Sequence[str], estimates: np.ndarray, lines: Sequence[int],
            inputs: Sequence[str] | None = None) -> None:
        if len(systems) != len(estimates) or len(lines) != len(estimates):
            raise ValueError("systems, estimates and lines must have the same length")
        if self.paired and (inputs is None or len(inputs) != len(estimates)):
            raise ValueError("a paired collector needs one input label per estimate")
        ids = self._systems.setdefault
        system_ids = np.fromiter((ids(name, len(self._systems)) for name in systems), np.int32, len(systems))
        input_ids = np.zeros(0, np.int64)
        if self.paired and inputs is not None:
            known = self._inputs.setdefault
            input_ids = np.fromiter((known(name, len(self._inputs)) for name in inputs), np.int64, len(inputs))
        self._chunks.append((system_ids, np.asarray(estimates, np.float64), input_ids,
                             np.asarray(lines, np.int64)))

    def labels(self) -> tuple[list[str], list[str] | None, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
        """System names, input names (or None), then per candidate: system index, estimate,
        input index (or None) and line."""
        def joined(position: int, dtype: Any) -> np.ndarray:
            return np.concatenate([chunk[position] for chunk in self._chunks]) if self._chunks \
                else np.zeros(0, dtype)

        return (list(self._systems), list(self._inputs) if self.paired else None, joined(0, np.int32),
                joined(1, np.float64), joined(2, np.int64) if self.paired else None, joined(3, np.int64))


@dataclass(frozen=True)
class Labelled:
    """Candidates by index: names of the systems (and inputs), and per candidate its system
    index, input index and file line; `path` and the field names go into error messages."""

    system_names: list[str]
    system: np.ndarray
    lines: np.ndarray
    input_names: list[str] | None = None
    inputs: np.ndarray | None = None
    path: PathLike | None = None
    system_field: str = "system"
    pair_field: str | None = None

    @classmethod
    def of(cls, systems: Sequence[str], inputs: Sequence[str] | None = None, **where: Any) -> Labelled:
        """From one label per candidate (lines 1, 2, ...)."""
        systems = _labels(systems, "systems")
        inputs = None if inputs is None else _labels(inputs, "inputs")
        collector = SystemCollector(paired=inputs is not None)
        collector.add(systems, np.zeros(len(systems)), range(1, len(systems) + 1), inputs)
        names, input_names, system, _, input_ids, lines = collector.labels()
        return cls(names, system, lines, input_names, input_ids, **where)

    def check(self) -> None:
        """Two or more systems, two or more texts each, and at most one text per system and
        input; else an InputError naming file, line and field."""
        counts = np.bincount(self.system, minlength=len(self.system_names))
        if len(self.system_names) < 2:
            found = f"only {self.system_names[0]!r}" if self.system_names else "none"
            raise InputError(f"found one system ({found}): a comparison needs two or more",
                             path=self.path, field=self.system_field)
        for index in np.flatnonzero(counts < 2):
            line = int(self.lines[np.flatnonzero(self.system == index)[0]])
            raise InputError(f"system {self.system_names[index]!r} has only this one text: an interval "
                             "needs two or more per system", path=self.path, line=line, field=self.system_field)
        if self.inputs is not None:
            keys = self.system.astype(np.int64) * max(len(self.input_names or ()), 1) + self.inputs
            order = np.argsort(keys, kind="stable")
            repeated = np.flatnonzero(keys[order][1:] == keys[order][:-1])
            if repeated.size:
                first, second = sorted((int(order[repeated[0]]), int(order[repeated[0] + 1])))
                raise InputError(
                    f"system {self.system_names[self.system[second]]!r} already has a text for input "
                    f"{(self.input_names or [])[self.inputs[second]]!r} (line {self.lines[first]}): with a "
                    "pair field each system has at most one text per input",
                    path=self.path, line=int(self.lines[second]), field=self.pair_field)


def _labels(labels: Sequence[Any], name: str) -> list[Any]:
    """One label per candidate as a list (a generator too), none None and all of one type: names
    are sorted for the report, and 1 and "1" would be two systems no order can rank."""
    if isinstance(labels, (str, bytes)):  # else each character would be a candidate's label
        raise TypeError(f"{name} must be one label per candidate, not one string")
    labels = list(labels)
    for index, label in enumerate(labels):
        if label is None:
            raise TypeError(f"{name}[{index}] is None: give every candidate a label")
        if type(label) is not type(labels[0]):
            raise TypeError(f"{name}[{index}] is {type(label).__name__}, {name}[0] {type(labels[0]).__name__}: "
                            "give labels of one type")
    return labels


def compare_systems(estimates: np.ndarray, systems: Sequence[str] | Labelled,
                    inputs: Sequence[str] | None = None, *, resamples: int = RESAMPLES,
                    trials: int = TRIALS, seed: int = SEED) -> SystemComparison:
    """Compares the systems that made the candidates by their mean estimate.

    `estimates`: one per candidate, NaN where undefined (a `Prediction.scores`); `systems`:
    each candidate's system name (or a `Labelled` that also says where each came from);
    `inputs`: each candidate's input label when systems share inputs (paired tests).
    Seeded: the same inputs give the same numbers, in any order of the candidates.
    """
    labelled = systems if isinstance(systems, Labelled) else Labelled.of(systems, inputs)
    return _compare([_per_candidate(estimates, "estimates")], labelled, resamples, trials, seed)[0]


def _per_candidate(values: Any, name: str) -> np.ndarray:
    """`values` as float64, one per candidate: finite, or NaN where undefined (not None, nor a
    string, which numpy would convert)."""
    try:
        given = np.asarray(values)
    except (TypeError, ValueError):  # rows of unequal lengths, a device tensor
        raise TypeError(f"{name} must be numbers, one per candidate (NaN where undefined)") from None
    # The caller's own values where a list gave them: numpy turns every number beside a string into one.
    wrong = None if given.dtype.kind in "iuf" else validation.first_not_a_number(
        values if isinstance(values, (list, tuple)) else given.reshape(-1).tolist())
    if wrong is not None:
        index, value = wrong
        raise TypeError(f"{name}[{index}] is {value!r} ({type(value).__name__}): {name} must be numbers, one per "
                        "candidate (NaN where undefined)")
    array = given.astype(np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, one per candidate, not of shape {array.shape}")
    infinite = np.flatnonzero(np.isinf(array))
    if infinite.size:
        raise ValueError(f"{name}[{infinite[0]}] is {array[infinite[0]]}: give finite numbers, NaN where undefined")
    return array


def _compare(columns: list[np.ndarray], labelled: Labelled, resamples: int, trials: int,
             seed: int) -> list[SystemComparison]:
    """The comparison of each column of per-candidate values, all with the same draws (so
    resample r of one column and of another resample the same texts)."""
    for what, number in (("resamples", resamples), ("trials", trials)):
        if not validation.interval(1, integer=True).accepts(number):
            raise ValueError(f"{what} must be a positive integer, not {number!r}")
    if not validation.interval(0, integer=True).accepts(seed):
        raise ValueError(f"seed must be a non-negative integer, not {seed!r}")
    resamples, trials, seed = int(resamples), int(trials), int(seed)
    for column in columns:
        if column.shape != labelled.system.shape:
            raise ValueError(f"{column.size} estimates for {labelled.system.size} candidates")
    labelled.check()
    names = labelled.system_names
    order = sorted(range(len(names)), key=names.__getitem__)  # systems in name order
    rank = np.empty(len(names), np.int64)
    rank[order] = np.arange(len(names))
    system = rank[labelled.system]  # system index in name order
    ordered = [names[index] for index in order]
    pairs = list(combinations(range(len(names)), 2))
    if labelled.inputs is None:
        _warn_if_slow(np.bincount(system, minlength=len(names)), pairs, trials)
    results = []
    for values in _canonical(columns, labelled, system, len(names)):
        if labelled.inputs is not None:
            tests = paired_tests(values, pairs, resamples=resamples, trials=trials, seed=seed)
        else:
            tests = unpaired_tests(values, pairs, resamples=resamples, trials=trials, seed=seed)
        results.append(tests)
    settings = {"resamples": resamples, "trials": trials, "seed": seed, "paired": labelled.inputs is not None,
                "system_field": labelled.system_field, "pair_field": labelled.pair_field, "alpha": ALPHA}
    texts = np.bincount(system, minlength=len(names))
    return [_rows(tests, column, system, texts, ordered, pairs, settings) for tests, column in zip(results, columns)]


UNPAIRED_WORK_WARNING = 2_000_000_000  # permutation draws (about 10 s of work on one core here)


def _warn_if_slow(texts: np.ndarray, pairs: list[tuple[int, int]], trials: int) -> None:
    """The unpaired randomization test draws trials x (texts of both) per pair: say so before
    a run that takes minutes."""
    work = trials * sum(int(texts[j] + texts[m]) for j, m in pairs)
    if work > UNPAIRED_WORK_WARNING:
        warn(f"the unpaired randomization test draws {work:,} numbers ({len(pairs)} pairs x {trials} "
             "trials x their texts): minutes or more; a pair field (paired tests) or fewer trials is "
             "far cheaper")


def _canonical(columns: list[np.ndarray], labelled: Labelled, system: np.ndarray, count: int) -> list[Any]:
    """Each column in the canonical order the draws index: with inputs, a matrix [inputs in
    label order, systems]; without, each system's estimates ordered by the columns' values
    (the first column first, ties by the next), undefined ones left out."""
    if labelled.inputs is not None:
        input_names = labelled.input_names or []
        position = np.empty(len(input_names), np.int64)
        position[sorted(range(len(input_names)), key=input_names.__getitem__)] = np.arange(len(input_names))
        rows = position[labelled.inputs]
        matrices = []
        for column in columns:
            matrix = np.full((len(input_names), count), np.nan)
            matrix[rows, system] = column
            matrices.append(matrix)
        return matrices
    groups: list[list[np.ndarray]] = [[] for _ in columns]
    for index in range(count):
        mine = np.flatnonzero(system == index)
        keep = mine[np.all([~np.isnan(column[mine]) for column in columns], axis=0)]
        ranked = keep[np.lexsort([column[keep] for column in reversed(columns)])]
        for group, column in zip(groups, columns):
            group.append(column[ranked])
    return groups


def _rows(tests: Tests, column: np.ndarray, system: np.ndarray, texts: np.ndarray, names: list[str],
          pairs: list[tuple[int, int]], settings: dict[str, Any]) -> SystemComparison:
    covered = np.bincount(system, weights=~np.isnan(column), minlength=len(names)).astype(np.int64)
    rows = [SystemRow(names[j], int(texts[j]), int(covered[j]), float(covered[j] / texts[j]),
                      float(tests.means[j]), float(tests.lows[j]), float(tests.highs[j])) for j in range(len(names))]
    by_mean = sorted(range(len(names)), key=lambda j: (-np.nan_to_num(tests.means[j], nan=-np.inf), names[j]))
    place = {j: position for position, j in enumerate(by_mean)}
    pair_rows = []
    for (j, m), test in zip(pairs, tests.pairs):
        flip = place[m] < place[j]  # the first of a pair is the one with the higher mean
        first, second = (m, j) if flip else (j, m)
        low, high = (-test.high, -test.low) if flip else (test.low, test.high)
        pair_rows.append(PairRow(names[first], names[second], -test.difference if flip else test.difference,
                                 low, high, test.p_bootstrap, test.p_randomization, test.compared))
    pair_rows.sort(key=lambda row: (place[names.index(row.first)], place[names.index(row.second)]))
    return SystemComparison([rows[j] for j in by_mean], pair_rows, settings, tests.resampled[:, by_mean])


@dataclass(frozen=True)
class Scale:
    """The comparison on a scored training set: by leave-one-out estimates and by the human
    scores of the same texts (those with an estimate), and the shrinkage factor: the
    least-squares slope of the systems' mean estimates on their mean human scores, with its
    95% interval over the same bootstrap resamples."""

    estimated: SystemComparison
    human: SystemComparison
    shrinkage: float
    shrinkage_low: float
    shrinkage_high: float

    def pairs(self) -> list[dict[str, Any]]:
        """Each pair as the estimate orders it, with the human difference in the same
        direction; a verdict is +1 or -1 (significant, and which way) or 0 (not significant)."""
        human = {(row.first, row.second): (row, 1.0) for row in self.human.pairs}
        human.update({(row.second, row.first): (row, -1.0) for row in self.human.pairs})
        rows = []
        for row in self.estimated.pairs:
            other, sign = human[(row.first, row.second)]
            verdict = int(np.sign(row.difference)) if row.significant else 0
            human_verdict = int(np.sign(sign * other.difference)) if other.significant else 0
            rows.append({"first": row.first, "second": row.second, "difference": row.difference,
                         "p_bootstrap": row.p_bootstrap, "p_randomization": row.p_randomization,
                         "human_difference": sign * other.difference, "human_p_bootstrap": other.p_bootstrap,
                         "human_p_randomization": other.p_randomization,
                         "same_sign": bool(np.sign(row.difference) == np.sign(sign * other.difference)),
                         "same_verdict": verdict == human_verdict})
        return rows

    def agreement(self) -> dict[str, Any]:
        """Same ordering of the systems? How many pairs have the same sign and the same
        verdict (significant the same way, or not significant) by estimate and by human?"""
        pairs = self.pairs()
        return {"same_order": [row.system for row in self.estimated.systems] == [row.system for row in self.human.systems],
                "pairs": len(pairs), "same_sign": sum(row["same_sign"] for row in pairs),
                "same_verdict": sum(row["same_verdict"] for row in pairs)}

    def as_dict(self) -> dict[str, Any]:
        return {"estimated": self.estimated.as_dict(), "human": self.human.as_dict(),
                "shrinkage": self.shrinkage, "shrinkage_low": self.shrinkage_low,
                "shrinkage_high": self.shrinkage_high, "pairs": self.pairs(), "agreement": self.agreement()}


@beyond_float_is_inf
def shrinkage_slope(estimated: np.ndarray, human: np.ndarray) -> np.ndarray:
    """Least-squares slope of estimated system means on human ones, per row of [rows,
    systems] (a vector is one row). With two systems it is the ratio of their differences;
    with more it is also the slope, through the origin, of every pairwise estimated
    difference on the human one, since sum over pairs (e_i - e_j)(h_i - h_j) = K sum (e_i -
    mean e)(h_i - mean h)."""
    estimated, human = np.atleast_2d(estimated), np.atleast_2d(human)
    centred_e = estimated - estimated.mean(axis=1, keepdims=True)
    centred_h = human - human.mean(axis=1, keepdims=True)
    return (centred_e * centred_h).sum(axis=1) / (centred_h * centred_h).sum(axis=1)


def leave_one_out_scale(estimates: np.ndarray, human: np.ndarray, systems: Sequence[str] | Labelled,
                        inputs: Sequence[str] | None = None, *, resamples: int = RESAMPLES,
                        trials: int = TRIALS, seed: int = SEED) -> Scale:
    """The comparison on a training set by its leave-one-out estimates (e.g.
    `scorer.leave_one_out().scores`) and by its human scores on the texts that have an
    estimate, with the same draws, and the shrinkage factor between them."""
    labelled = systems if isinstance(systems, Labelled) else Labelled.of(systems, inputs)
    estimates, human = _per_candidate(estimates, "estimates"), _per_candidate(human, "human")
    if human.shape != estimates.shape:
        raise ValueError(f"{estimates.size} estimates but {human.size} human scores: one of each per candidate")
    human = np.where(np.isnan(estimates), np.nan, human)
    estimated, humans = _compare([estimates, human], labelled, resamples, trials, seed)
    order = [row.system for row in estimated.systems]
    human_order = [row.system for row in humans.systems]
    mean_e = np.array([row.mean for row in estimated.systems])
    mean_h = np.array([{row.system: row.mean for row in humans.systems}[name] for name in order])
    resampled_h = humans.resampled[:, [human_order.index(name) for name in order]]
    slope = float(shrinkage_slope(mean_e, mean_h)[0])
    low, high = interval(shrinkage_slope(estimated.resampled, resampled_h))
    return Scale(estimated, humans, slope, low, high)
