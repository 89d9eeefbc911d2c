"""The outlier test's combined value read as a bound or ranked (issue 51, round 5): writes part 8
of bench/fluency.md.

The weighted union of Bonferroni's and Fisher's tests, min(Bonferroni's / w, Fisher's / (1 - w)),
is a valid p-value by itself, but a loose one; ranked among the calibration texts' own unions
(`core/outside.py`, `OutsideRule.ranked`) it is exact. For GUG and MLQE (bench/checklist.py's
splits: the default scorer fitted on the training side, 100 good held-out texts), without and
with fluency (`"none"`, `"auto"`), both readings: the share of ordinary dev texts flagged, the dev
Spearman of the estimates, the interval coverage on the dev texts, and each checklist
perturbation's drop of the copies' mean estimate below the originals' (✓: at least *needed*).
The bound is the library's reading below 220 calibration texts, made here for the large sets by
patching `OutsideRule.ranked` to false for the run.

    .venv/bin/python bench/fluency_ranked.py

About 2 minutes on two quiet cores (the model on one thread; bench/lm_memo.py keeps its per-text
statistics between runs).
"""
from __future__ import annotations

import os
import sys
import time
import warnings
from contextlib import nullcontext
from pathlib import Path
from unittest.mock import patch

import numpy as np
from scipy.stats import spearmanr

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import checklist  # noqa: E402  (bench/, beside this script: its splits and good held-out sample)
from gpu_neighbors import NeighborsScorer  # noqa: E402
from gpu_neighbors.core.outside import OutsideRule  # noqa: E402
from gpu_neighbors.evaluation.checklist import held_out_checklist  # noqa: E402
from lm_memo import remembered  # noqa: E402
from pages import write_table  # noqa: E402

OUT = Path(__file__).resolve().parent / "fluency.md"
HEADING = "## 8. The outlier test's combined value, a bound or ranked (issue 51, round 5)"
def main() -> int:
    ready = checklist.fluency_sets()
    if ready is None:
        return 1
    sets, start, load = ready
    rows = []
    with remembered():
        for data in sets:
            texts, scores = data.train
            held_texts, held_scores = checklist.good_sample(data, scores, 100)
            truth = np.asarray(data.held[1], dtype=np.float64)
            for fluency in ("none", "auto"):
                for reading in ("bound", "ranked"):
                    bound = patch.object(OutsideRule, "ranked", property(lambda self: False))  # the union as it is
                    with bound if reading == "bound" else nullcontext(), warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        scorer = NeighborsScorer(device="cpu", fluency=fluency).fit(texts, scores)
                        result = held_out_checklist(scorer, texts, held_texts, held_scores)
                        prediction = scorer.predict(data.held[0])
                    assert prediction.low is not None and prediction.high is not None and prediction.outside is not None
                    covered = np.isfinite(prediction.scores)
                    rho = float(spearmanr(prediction.scores[covered], truth[covered]).statistic)
                    coverage = float(np.mean((truth[covered] >= prediction.low[covered])
                                             & (truth[covered] <= prediction.high[covered])))
                    rows.append(f"| {data.name} | {fluency} | {reading} | {np.mean(prediction.outside):.3f} | "
                                f"{rho:.3f} | {coverage:.3f} | {result.needed:.3f} | {checklist.drop_cells(result)} |")
                    print(rows[-1], file=sys.stderr, flush=True)
    write_table(OUT, HEADING, (
        f"Made by `bench/fluency_ranked.py` ({(time.perf_counter() - start) / 60:.1f} min; load average at the start "
        f"{load}; see its docstring). The default scorer without and with fluency; *bound*: the weighted union read "
        "as the p-value, *ranked*: its conformal rank among the calibration texts' own (the library from 220 "
        "calibration texts on; both sets' training sides are larger; parts 4-7 read the bound). *flagged*: the share "
        "of ordinary dev texts flagged outside; *rho*: the dev Spearman; *coverage*: dev texts whose truth lies in "
        "their interval; then each perturbation's drop of the copies' mean estimate below the originals' (✓: at "
        "least *needed*)."), ["set", "fluency", "reading", "flagged", "rho", "coverage", "needed",
                               *(row.perturbation for row in result.rows)], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
