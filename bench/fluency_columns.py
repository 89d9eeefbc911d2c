"""How fluency's two statistics join the outlier test (issue 51, round 4): writes part 7 of
bench/fluency.md.

The checklist (bench/checklist.py's splits, the default scorer with `fluency="auto"`, 100 good
held-out texts) for each way the two within-length columns (the mean log-probability and SLOR,
`fluency/outlier.py`) could enter the test, and for a degeneracy score taught them:

- two add-up columns (built): both in Fisher's product, neither flags a text alone;
- their minimum, one add-up column; SLOR alone as one add-up column;
- the two columns, SLOR allowed to flag alone (a sixth single test of Bonferroni's);
- their minimum allowed to flag alone;
- the two add-up columns, and the degeneracy score (`core/discriminant.py`) learned on them too
  beside the typicality statistics: the model reads the 300 taught texts' degenerate copies at
  fit (the columns divided by 4, so that the score's clamp to [-1, 1] cuts only beyond 4
  spreads; the test's p-values do not depend on that scale);
- the two add-up columns, the stacked estimate reading the mean and NormLP (Lau, Clark and
  Lappin's normalised log-probability: -mean lp / mean unigram lp) instead of the mean and SLOR.

Each variant replaces the scorer's seams (`WithinLength.columns`, the test's column flags,
`NeighborsScorer._outside_rule`, `estimate_features`) for the run; the library keeps the built one. Per row: the share
of ordinary dev texts flagged, and each perturbation's drop (✓: reaches the target).

    .venv/bin/python bench/fluency_columns.py

About 6 minutes on two quiet cores (the model on one thread; bench/lm_memo.py keeps its per-text
statistics between runs; the unigram table is learned once a set and reused by the variants).
"""
from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import checklist  # noqa: E402  (bench/, beside this script: its splits and good held-out sample)
from gpu_neighbors import NeighborsScorer  # noqa: E402
from gpu_neighbors import fitted as fitted_module  # noqa: E402
from gpu_neighbors import scorer as scorer_module  # noqa: E402
from gpu_neighbors.core.discriminant import LinearScore  # noqa: E402
from gpu_neighbors.core.neighbours import canonical_sample  # noqa: E402
from gpu_neighbors.core.outside import OutlierTest, OutsideRule  # noqa: E402
from gpu_neighbors.evaluation.checklist import held_out_checklist  # noqa: E402
from gpu_neighbors.fluency.outlier import WithinLength, estimate_features  # noqa: E402
from gpu_neighbors.fluency.part import FittedFluency  # noqa: E402
from gpu_neighbors.intervals import NEGATIVE_TEXTS  # noqa: E402
from gpu_neighbors.text.perturbations import WordPool, all_copies  # noqa: E402
from gpu_neighbors.text.typicality import LOW_IS_ATYPICAL, TEST_ALONE, TEST_LOW_IS_ATYPICAL  # noqa: E402
from lm_memo import remembered  # noqa: E402
from pages import write_table  # noqa: E402

OUT = Path(__file__).resolve().parent / "fluency.md"
HEADING = "## 7. Fluency's columns in the outlier test (issue 51, round 4)"
BUILT_COLUMNS = WithinLength.columns
BUILT_RULE = NeighborsScorer._outside_rule
Columns = Callable[[WithinLength, torch.Tensor], torch.Tensor]


def norm_lp(fluency: torch.Tensor) -> torch.Tensor:
    """[mean lp, NormLP] of [mean, SLOR, count]: the unigram mean is mean - SLOR."""
    mean, slor = fluency[:, 0], fluency[:, 1]
    return torch.stack([mean, -mean / (mean - slor)], dim=1)


def smallest(within: WithinLength, fluency: torch.Tensor) -> torch.Tensor:
    return BUILT_COLUMNS(within, fluency).amin(dim=1, keepdim=True)


def slor_only(within: WithinLength, fluency: torch.Tensor) -> torch.Tensor:
    return BUILT_COLUMNS(within, fluency)[:, 1:2]


def quartered(within: WithinLength, fluency: torch.Tensor) -> torch.Tensor:
    return BUILT_COLUMNS(within, fluency) / 4


def taught_rule(self: NeighborsScorer, texts: list[str], chosen: np.ndarray, nearest: np.ndarray,
                fluency: np.ndarray | None) -> OutsideRule:
    """The built `_outside_rule` but for the degeneracy score, which learns the fluency columns
    too: the taught texts' degenerate copies read by the model."""
    if fluency is None:
        return BUILT_RULE(self, texts, chosen, nearest, fluency)
    own = self.typicality_.of_texts([texts[index] for index in chosen], own=True).cpu().numpy()
    taught = canonical_sample(self._canonical[np.isin(self._canonical, chosen)], NEGATIVE_TEXTS, seed=1)
    originals = [texts[index] for index in taught]
    copies, sources = all_copies(originals, vocabulary=WordPool.from_texts(texts))
    measured = self.typicality_.of_texts(copies, originals=[originals[index] for index in sources]).cpu().numpy()
    self.within_ = WithinLength.fit(fluency)
    columns = self.within_.columns(torch.from_numpy(fluency)).numpy()
    assert self.fluency_ is not None
    copied = self.within_.columns(self.fluency_.of_texts(copies)).numpy()
    at = np.searchsorted(chosen, taught)
    degeneracy = LinearScore.fit(np.hstack([own[at], columns[at]]), np.hstack([measured, copied]))
    statistics = np.hstack([own, columns])
    test = OutlierTest.fit(np.column_stack([statistics, np.where(np.isfinite(nearest), nearest, np.nan),
                                            degeneracy.score(torch.from_numpy(statistics)).numpy()]),
                           LOW_IS_ATYPICAL + (True, True, True, False), fluency_alone((False, False)))
    return self.intervals_part.outside_rule(test, degeneracy, self.train_scores_, self.score_range)


def fluency_alone(alone: tuple[bool, ...]) -> tuple[bool, ...]:
    return TEST_ALONE[: len(LOW_IS_ATYPICAL)] + alone + TEST_ALONE[len(LOW_IS_ATYPICAL):]


Features = Callable[[torch.Tensor], torch.Tensor]
# name: (the columns, whether each may flag alone, the outlier rule, the stacked estimate's features)
VARIANTS: dict[str, tuple[Columns, tuple[bool, ...], Any, Features]] = {
    "two add-up columns (built)": (BUILT_COLUMNS, (False, False), BUILT_RULE, estimate_features),
    "their minimum, add-up": (smallest, (False,), BUILT_RULE, estimate_features),
    "SLOR alone, add-up": (slor_only, (False,), BUILT_RULE, estimate_features),
    "two columns, SLOR flags alone": (BUILT_COLUMNS, (False, True), BUILT_RULE, estimate_features),
    "their minimum, flags alone": (smallest, (True,), BUILT_RULE, estimate_features),
    "two add-up columns, degeneracy score taught them": (quartered, (False, False), taught_rule, estimate_features),
    "two add-up columns, stacked on the mean and NormLP": (BUILT_COLUMNS, (False, False), BUILT_RULE, norm_lp),
}


@contextmanager
def variant(columns: Columns, alone: tuple[bool, ...], rule: Any, features: Features) -> Iterator[None]:
    low = LOW_IS_ATYPICAL + (True,) * len(alone) + TEST_LOW_IS_ATYPICAL[len(LOW_IS_ATYPICAL):]
    saved = (WithinLength.columns, scorer_module.FLUENCY_LOW_IS_ATYPICAL, scorer_module.FLUENCY_ALONE,
             NeighborsScorer._outside_rule, scorer_module.estimate_features, fitted_module.estimate_features)
    WithinLength.columns = columns  # type: ignore[method-assign]
    scorer_module.FLUENCY_LOW_IS_ATYPICAL, scorer_module.FLUENCY_ALONE = low, fluency_alone(alone)
    NeighborsScorer._outside_rule = rule  # type: ignore[method-assign]
    scorer_module.estimate_features = fitted_module.estimate_features = features
    try:
        yield
    finally:
        (WithinLength.columns, scorer_module.FLUENCY_LOW_IS_ATYPICAL, scorer_module.FLUENCY_ALONE,
         NeighborsScorer._outside_rule, scorer_module.estimate_features, fitted_module.estimate_features) = saved


@contextmanager
def tables_once() -> Iterator[None]:
    """The unigram table learned once per calibration set, reused by every variant's fit."""
    learned: dict[tuple[str, ...], torch.Tensor] = {}
    calibrate = FittedFluency.calibrate

    def once(self: FittedFluency, texts: list[str]) -> torch.Tensor:
        key = tuple(texts)
        if key not in learned:
            calibrate(self, texts)
            assert self.unigram is not None
            learned[key] = self.unigram
        self.unigram = learned[key]
        return self.of_texts(texts)

    FittedFluency.calibrate = once  # type: ignore[method-assign]
    try:
        yield
    finally:
        FittedFluency.calibrate = calibrate  # type: ignore[method-assign]


def main() -> int:
    ready = checklist.fluency_sets()
    if ready is None:
        return 1
    sets, start, load = ready
    rows = []
    with remembered(), tables_once():
        for data in sets:
            texts, scores = data.train
            held_texts, held_scores = checklist.good_sample(data, scores, 100)
            for name, (columns, alone, rule, features) in VARIANTS.items():
                with variant(columns, alone, rule, features), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    scorer = NeighborsScorer(device="cpu", fluency="auto").fit(texts, scores)
                    result = held_out_checklist(scorer, texts, held_texts, held_scores)
                    flagged = float(np.mean(scorer.predict(data.held[0]).outside))
                rows.append(f"| {data.name} | {name} | {flagged:.3f} | {result.needed:.3f} | {checklist.drop_cells(result)} |")
                print(rows[-1], file=sys.stderr, flush=True)
    write_table(OUT, HEADING, (
        f"Made by `bench/fluency_columns.py` ({(time.perf_counter() - start) / 60:.1f} min; load average at the start "
        f"{load}; see its docstring). The checklist of the default scorer with fluency (`auto`), each variant of "
        "how the two fluency columns join the outlier test; *flagged*: the share of ordinary dev texts flagged "
        "outside; then each perturbation's drop of the copies' mean estimate below the originals' (✓: at least "
        "*needed*)."), ["set", "columns", "flagged", "needed", *(row.perturbation for row in result.rows)], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
