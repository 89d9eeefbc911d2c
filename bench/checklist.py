"""The perturbation checklist (issue 35) for every kernel and estimator on the development data:
writes the section "Perturbation checklist" of bench/quality.md.

Per data set a scorer is fitted on the training side and rates the held-out texts scored at or
above the training median beside degenerate copies of them (`evaluation/checklist.py`):

- huse_summarization: a seeded fifth held out (`held_out_split`), fitted on the rest;
- gug: fitted on gug_train, held-out texts from gug_dev;
- mlqe_et-en: fitted on a seeded sample of mlqe_et-en_train (--mlqe-train, 2,000 of 7,000),
  held-out texts from mlqe_et-en_dev.

Held-out texts are a seeded sample of at most --held of the good ones, so that the run takes
minutes on two loaded CPU cores. Estimators: the paper's rule at the paper's settings
(thresholds="paper"), the threshold rule tuned (tau, a, b), top-k and kernel ridge (each as
`fit` tunes it by default). Each cell: the drop of the copies' mean estimate below the
originals' mean, its bootstrap 95% interval, and a check mark where it reaches the target (half
the gap between the originals' mean and the training set's lowest-decile mean).

    .venv/bin/python bench/checklist.py [--kernels bleu,tfidf,rouge] [--huse-kernels meteor,bertscore] [--held 100]

METEOR and BERTScore run on HUSE alone by default: on GUG and MLQE one row of either took 4+
minutes on the loaded 2-core machine (METEOR's WordNet stage, BERTScore's model on the CPU).
The rows above run without fluency (`fluency="none"`). Issue 51's section, "Perturbation
checklist with fluency", is the default scorer without and with fluency (`"auto"`: the offline
language model where fetched) on each set; `--fluency-only` recomputes that section alone:

    .venv/bin/python bench/checklist.py --fluency-only

The data is read from ../shared/data beside the project (GPU_NEIGHBORS_SHARED overrides ../shared,
as in the tests).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from gpu_neighbors import NeighborsScorer  # noqa: E402
from gpu_neighbors.estimators import Threshold  # noqa: E402
from gpu_neighbors.kernels.parts import BertScore  # noqa: E402
from gpu_neighbors.evaluation.checklist import Checklist, held_out_checklist, held_out_split, top_rated  # noqa: E402
from gpu_neighbors.fluency import offline_model  # noqa: E402
from gpu_neighbors.text.perturbations import PERTURBATIONS  # noqa: E402
from lm_memo import remembered  # noqa: E402  (bench/, beside this script)
from pages import replace_section  # noqa: E402  (bench/, beside this script)
from quality import minilm  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GPU_NEIGHBORS_SHARED") or ROOT.parent / "shared")
OUT = ROOT / "bench" / "quality.md"
HEADING = "## Perturbation checklist"
FLUENCY_HEADING = "## Perturbation checklist with fluency (issue 51)"
FLUENCY_ROWS = {"default, fluency none": "none", "default, fluency auto": "auto"}
ESTIMATORS: dict[str, dict[str, Any]] = {
    "paper": {"estimator": Threshold.paper()},
    "tuned threshold": {"estimator": "threshold"},
    "top-k": {"estimator": "topk"},
    "ridge": {"estimator": "ridge"},
}


@dataclass(eq=False)
class DataSet:
    name: str
    protocol: str
    train: tuple[list[str], np.ndarray]
    held: tuple[list[str], np.ndarray]


def read(name: str) -> tuple[list[str], np.ndarray]:
    path = SHARED / "data" / name
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [row["text"] for row in rows], np.array([row["score"] for row in rows], dtype=np.float64)


def sample(data: tuple[list[str], np.ndarray], size: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
    texts, scores = data
    if size >= len(texts):
        return data
    chosen = np.sort(np.random.default_rng(seed).choice(len(texts), size=size, replace=False))
    return [texts[i] for i in chosen], scores[chosen]


def load(mlqe_train: int) -> list[DataSet]:
    texts, scores = read("huse_summarization.jsonl")
    train, held = held_out_split(len(texts))
    mlqe = read("mlqe_et-en_train.jsonl")
    return [
        DataSet("huse_summarization", f"a seeded fifth held out, fitted on the other {len(train)}",
                ([texts[i] for i in train], scores[train]), ([texts[i] for i in held], scores[held])),
        DataSet("gug", "fitted on gug_train (1,518), held out from gug_dev", read("gug_train.jsonl"),
                read("gug_dev.jsonl")),
        DataSet("mlqe_et-en", f"fitted on a seeded {mlqe_train:,} of mlqe_et-en_train's {len(mlqe[0]):,}, "
                "held out from mlqe_et-en_dev", sample(mlqe, mlqe_train), read("mlqe_et-en_dev.jsonl")),
    ]


def kernel_part(kernel: str) -> str | BertScore:
    """The kernel by name; BERTScore with the tests' MiniLM, all its layers (as bench/quality.py)."""
    if kernel != "bertscore":
        return kernel
    path, layers = minilm()
    return BertScore(model=path, layer=layers)


def fluency_sets() -> tuple[list[DataSet], float, str] | None:
    """GUG and MLQE (the sets where fluency is on) for the fluency benchmarks, the language model
    on one thread, the start time and load average; None (said on stderr) without the offline
    model."""
    if offline_model() is None:
        print("the offline model is not fetched: gpu-neighbors fetch-model", file=sys.stderr)
        return None
    torch.set_num_threads(1)
    return load(2000)[1:], time.perf_counter(), " ".join(f"{value:.1f}" for value in os.getloadavg())


def good_sample(data: DataSet, train_scores: np.ndarray, held: int) -> tuple[list[str], np.ndarray]:
    """At most `held` of the held-out texts at or above the training median (seeded)."""
    texts, scores = data.held
    good = top_rated(scores, train_scores)
    return sample(([texts[i] for i in good], scores[good]), held)


def run(data: DataSet, kernel: str, estimator: str, held: int) -> tuple[Checklist, float]:
    start = time.perf_counter()
    texts, scores = data.train
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # repeated texts, unused settings: the bench states its settings
        if kernel == "default":  # issue 51's rows: the default scorer, without or with fluency
            scorer = NeighborsScorer(device="cpu", fluency=FLUENCY_ROWS[estimator])
        else:
            scorer = NeighborsScorer(kernel=kernel_part(kernel), device="cpu", fluency="none", **ESTIMATORS[estimator])
        scorer.fit(texts, scores)
        held_texts, held_scores = good_sample(data, scores, held)
        result = held_out_checklist(scorer, texts, held_texts, held_scores)
    return result, time.perf_counter() - start


def number(value: float) -> str:
    return "—" if np.isnan(value) else f"{value:.3f}"


def cell(result: Checklist, name: str) -> str:
    row = next(row for row in result.rows if row.perturbation == name)
    if np.isnan(row.drop):  # no copy (or no original) has an estimate
        return "—"
    mark = " ✓" if row.passed else ""
    return f"{row.drop:.3f} [{row.drop_low:.3f}, {row.drop_high:.3f}]{mark}"


def drop_cells(result: Checklist) -> str:
    """Each perturbation's drop of `result` as table cells ("0.123 ✓" where it reaches the
    target), joined with " | "."""
    return " | ".join(f"{row.drop:.3f}{' ✓' if row.passed else ''}" for row in result.rows)


def section(rows: list[tuple[DataSet, str, str, Checklist, float]], command: str, seconds: float, load: str,
            heading: str = HEADING) -> str:
    names = list(PERTURBATIONS)
    lines = [
        heading, "",
        f"Made by `{command}` in {seconds / 60:.1f} min on this machine's CPU (2 cores shared with other work; "
        f"load average before the run: {load}; timings indicative only). Issue 35's checklist: a scorer fitted "
        "on the training side rates held-out texts scored at or above the training median (a seeded sample of "
        "at most the number in the table) beside degenerate copies of each (`gpu_neighbors/text/perturbations.py`, "
        "seed 0; salad and replaced draw training words). Each cell: the drop of the copies' mean estimate below "
        "the originals' mean, its bootstrap 95% interval over the held-out texts (1,000 resamples), and ✓ where "
        "the drop reaches the target, *needed*: half the gap between the originals' mean and the training set's "
        "lowest-decile mean score. MLQE's training side is capped (see its protocol) and METEOR and BERTScore "
        "(MiniLM, all layers) run on HUSE alone, to keep the run short. "
        "Estimators: the paper's rule at its settings; the threshold rule and top-k with their settings tuned on "
        "the training side (as `fit` does by default); kernel ridge with its penalty by exact leave-one-out.",
        "",
    ]
    for data in dict.fromkeys(row[0] for row in rows):
        lines += [f"### {data.name}: {data.protocol}", "",
                  "| kernel | estimator | texts | coverage | original | needed | " + " | ".join(names) + " | passed |",
                  "|" + "---|" * (len(names) + 7)]
        for row_data, kernel, estimator, result, _ in rows:
            if row_data is not data:
                continue
            cells = " | ".join(cell(result, name) for name in names)
            lines.append(f"| {kernel} | {estimator} | {result.texts} | {result.original_coverage:.2f} | "
                         f"{number(result.original_mean)} | {number(result.needed)} | {cells} | "
                         f"{sum(r.passed for r in result.rows)}/{len(result.rows)} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernels", default="bleu,tfidf,rouge")
    parser.add_argument("--huse-kernels", default="meteor,bertscore",
                        help="kernels run on HUSE alone (on GUG and MLQE they take 4+ min a row here)")
    parser.add_argument("--estimators", default=",".join(ESTIMATORS))
    parser.add_argument("--held", type=int, default=100, help="held-out texts per data set, at most")
    parser.add_argument("--mlqe-train", type=int, default=2000)
    parser.add_argument("--only", default=None, help="one data set by name (for a quick look)")
    parser.add_argument("--fluency-only", action="store_true", help="issue 51's section alone")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    load_average = " ".join(f"{value:.1f}" for value in os.getloadavg())
    start = time.perf_counter()
    rows, fluency_rows = [], []
    with remembered():
        for data in load(args.mlqe_train):
            if args.only not in (None, data.name):
                continue
            extra = args.huse_kernels.split(",") if data.name == "huse_summarization" and args.huse_kernels else []
            plan = [] if args.fluency_only else [(kernel, estimator) for kernel in [*args.kernels.split(","), *extra]
                                                 for estimator in args.estimators.split(",")]
            for kernel, estimator in [*plan, *(("default", name) for name in FLUENCY_ROWS)]:
                result, seconds = run(data, kernel, estimator, args.held)
                (fluency_rows if kernel == "default" else rows).append((data, kernel, estimator, result, seconds))
                print(f"{data.name} {kernel} {estimator}: {sum(r.passed for r in result.rows)}/{len(result.rows)} "
                      f"pass, {seconds:.0f} s", file=sys.stderr, flush=True)
    command = " ".join(["bench/checklist.py", *(sys.argv[1:] if argv is None else argv)])
    seconds = time.perf_counter() - start
    out = Path(args.out)
    page = out.read_text(encoding="utf-8") if out.exists() else ""
    texts = []
    if rows:
        texts.append(section(rows, command, seconds, load_average))
        page = replace_section(page, HEADING + "\n", texts[-1])  # whole line: it begins FLUENCY_HEADING
    texts.append(section(fluency_rows, command, seconds, load_average, FLUENCY_HEADING))
    page = replace_section(page, FLUENCY_HEADING, texts[-1])
    out.write_text(page, encoding="utf-8")
    print("\n".join(texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
