"""Fluency (issue 51): the measurements behind its design, its cost, and float32 against
bfloat16; writes bench/fluency.md.

1. The statistic and the combination, on GUG train -> dev, MLQE et-en train -> dev (seeded
   samples, sizes below) and HUSE (10 seeded folds). The neighbour estimate is the default
   scorer's without fluency (top-k on the kernel `auto` chooses): its exact leave-one-out on the
   training side, its predictions on the test side. Each variant is fitted on the training side
   alone and applied to the test side; Spearman with the truth there:
   - the statistic alone (mean token log-probability; and the sum);
   - stacked (least squares on the leave-one-out estimates, `estimators/stacking.py`) with the
     mean (the built one until part 6's SLOR joined it), with the sum, with the mean and log(length), and with log(length)
     alone (no language model: what length alone adds);
   - kernel ridge alone and with the standardised statistic as a feature of it (kernel K +
     gamma z z^T, lambda and gamma by exact leave-one-out on the training side), on the same
     kernel's similarities.
2. Cost: texts per second of the statistic on one CPU thread (GUG dev, bfloat16 and float32, a
   fresh memo), of a fit's calibration pass over the same texts (`token_mass`: the statistics
   and the unigram table's mass), and the model's load time (converted folder).
3. float32 against bfloat16: the default scorer with fluency ("always") fitted and run in each
   dtype on each set (the first HUSE fold; seeded samples of the training and test sides, sizes
   below); the share of test texts whose estimate moves (by more than 1e-9 and 0.01) and whose
   outside flag flips.

    .venv/bin/python bench/fluency.py [--mlqe-train 2000 --mlqe-dev 500] [--parts 1,2,3]

The model runs on one thread (torch.set_num_threads(1)); the machine is shared, so the load
average is printed beside every figure. The language model's per-text memo is kept on disk
(bench/lm_memo.py) so a rerun of part 1 reads the statistics instead of computing them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from gpu_neighbors import NeighborsScorer  # noqa: E402
from gpu_neighbors.core.correlation import spearman_rows  # noqa: E402
from gpu_neighbors.evaluation.protocols import fold_indices  # noqa: E402
from gpu_neighbors.fluency import FittedFluency, Fluency, model_files, offline_model  # noqa: E402
from gpu_neighbors.fluency.model import LanguageModel  # noqa: E402
from lm_memo import remembered  # noqa: E402  (bench/, beside this script)
from pages import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "bench" / "fluency.md"
PENALTIES = (0.1, 0.3, 1.0, 3.0, 10.0)
GAMMAS = (0.0, 0.03, 0.1, 0.3, 1.0, 3.0)


def read(name: str) -> tuple[list[str], np.ndarray]:
    rows = [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]
    return [row["text"] for row in rows], np.array([row["score"] for row in rows], dtype=np.float64)


def sample(texts: list[str], scores: np.ndarray, size: int | None, rng: np.random.Generator):
    if not size or size >= len(texts):
        return texts, scores
    keep = np.sort(rng.choice(len(texts), size, replace=False))
    return [texts[i] for i in keep], scores[keep]


def splits(args: argparse.Namespace):
    """(name, [(train texts, train scores, test texts, test scores)]) per set, as bench/quality.py cuts them."""
    texts, scores = read("huse_summarization.jsonl")
    folds = []
    for test in fold_indices(len(texts), 10, seed=0):
        train = np.setdiff1d(np.arange(len(texts)), test)
        folds.append(([texts[i] for i in train], scores[train], [texts[i] for i in test], scores[test]))
    yield "huse_summarization (10 folds)", folds
    for name, train_size, dev_size in (("gug", None, None), ("mlqe_et-en", args.mlqe_train, args.mlqe_dev)):
        rng = np.random.default_rng(0)
        train = sample(*read(f"{name}_train.jsonl"), train_size, rng)
        dev = sample(*read(f"{name}_dev.jsonl"), dev_size, rng)
        yield f"{name} ({len(train[0])} -> {len(dev[0])})", [(*train, *dev)]


def rho(estimates: np.ndarray, truth: np.ndarray) -> float:
    return float(spearman_rows(np.where(np.isfinite(estimates), estimates, np.nan), truth)[0])


def ridge_feature(train_k: np.ndarray, test_k: np.ndarray, y: np.ndarray, z_train: np.ndarray,
                  z_test: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Kernel ridge with an intercept on K + gamma z z^T: (test estimates with gamma 0, with the
    best gamma, the chosen gamma, lambda), each by exact leave-one-out on the training side."""
    n = len(y)
    best: dict[bool, tuple[float, float, float]] = {}
    for gamma in GAMMAS:
        kernel = train_k + gamma * np.outer(z_train, z_train)
        for penalty in PENALTIES:
            inverse = np.linalg.inv(kernel + penalty * np.eye(n))
            ones = inverse.sum(axis=1)
            intercept = ones @ y / ones.sum()
            alpha = inverse @ (y - intercept)
            diagonal = np.diag(inverse) - ones * ones / ones.sum()
            error = float(np.mean((alpha / diagonal) ** 2))
            key = gamma > 0
            if key not in best or error < best[key][0]:
                best[key] = (error, gamma, penalty)
    results = []
    for key in (False, True):
        _, gamma, penalty = best[key]
        kernel = train_k + gamma * np.outer(z_train, z_train)
        inverse = np.linalg.inv(kernel + penalty * np.eye(n))
        ones = inverse.sum(axis=1)
        intercept = ones @ y / ones.sum()
        alpha = inverse @ (y - intercept)
        results.append(intercept + (test_k + gamma * np.outer(z_test, z_train)) @ alpha)
    return results[0], results[1], best[True][1], best[True][2]


def design(args: argparse.Namespace, fluency: FittedFluency) -> list[str]:
    lines = ["## 1. The statistic and the combination (test-side Spearman)", "",
             f"Load average at the start: {os.getloadavg()[0]:.1f}.", "",
             "| set | neighbours (default, no fluency) | mean log-prob alone | sum alone | stacked: mean (built until part 6) "
             "| stacked: sum | stacked: mean + log length | stacked: log length alone (no model) | kernel ridge "
             "| kernel ridge + fluency feature (gamma) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, folds in splits(args):
        if args.only and not name.startswith(args.only):
            continue
        columns: dict[str, list[np.ndarray]] = {}
        truths = []
        for train_texts, train_scores, test_texts, test_scores in folds:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                scorer = NeighborsScorer(device="cpu", fluency="none").fit(train_texts, train_scores)
                loo = scorer.leave_one_out().scores
                test = scorer.predict(test_texts).scores
                train_k = scorer.train_similarity().numpy()
                test_k = scorer.similarity(test_texts).numpy()
            f_train, f_test = fluency.of_texts(train_texts).numpy(), fluency.of_texts(test_texts).numpy()
            features = {"mean": (f_train[:, :1], f_test[:, :1]),
                        "sum": (f_train[:, :1] * f_train[:, 2:], f_test[:, :1] * f_test[:, 2:]),
                        "mean+log": (np.column_stack([f_train[:, 0], np.log(np.maximum(f_train[:, 2], 1))]),
                                     np.column_stack([f_test[:, 0], np.log(np.maximum(f_test[:, 2], 1))])),
                        "log": (np.log(np.maximum(f_train[:, 2:], 1)), np.log(np.maximum(f_test[:, 2:], 1)))}
            out = {"neighbours": test, "mean alone": f_test[:, 0], "sum alone": f_test[:, 0] * f_test[:, 2]}
            for label, (train_x, test_x) in features.items():
                design_train = np.column_stack([np.ones(len(loo)), loo, train_x])
                used = np.isfinite(design_train).all(axis=1)
                coefficients = np.linalg.lstsq(design_train[used], train_scores[used], rcond=None)[0]
                design_test = np.column_stack([np.ones(len(test)), test, test_x])
                stacked = np.clip(design_test @ coefficients, 0, 1)
                out[f"stacked {label}"] = np.where(np.isfinite(stacked), stacked, test)
            z_mean, z_std = np.nanmean(f_train[:, 0]), np.nanstd(f_train[:, 0])
            z_train = np.nan_to_num((f_train[:, 0] - z_mean) / z_std)
            z_test = np.nan_to_num((f_test[:, 0] - z_mean) / z_std)
            plain, featured, gamma, _ = ridge_feature(train_k, test_k, train_scores, z_train, z_test)
            out["ridge"], out["ridge+feature"] = plain, featured
            out["gamma"] = np.full(len(test), gamma)
            for key, value in out.items():
                columns.setdefault(key, []).append(value)
            truths.append(test_scores)
        truth = np.concatenate(truths)
        cell = {key: rho(np.concatenate(values), truth) for key, values in columns.items() if key != "gamma"}
        gammas = ",".join(f"{value[0]:g}" for value in columns["gamma"][:3])
        lines.append(f"| {name} | {cell['neighbours']:.3f} | {cell['mean alone']:.3f} | {cell['sum alone']:.3f} | "
                     f"**{cell['stacked mean']:.3f}** | {cell['stacked sum']:.3f} | {cell['stacked mean+log']:.3f} | "
                     f"{cell['stacked log']:.3f} | "
                     f"{cell['ridge']:.3f} | {cell['ridge+feature']:.3f} ({gammas}) |")
        print(lines[-1], file=sys.stderr, flush=True)
    return [*lines, ""]


def cost(count: int) -> list[str]:
    texts = read("gug_dev.jsonl")[0][:count]
    files = model_files(offline_model())  # type: ignore[arg-type]
    lines = ["## 2. Cost on one CPU thread", "",
             f"| dtype | load (s) | texts/s (the first {len(texts)} GUG dev texts, a fresh memo) | texts/s of a fit's "
             "calibration pass (the same texts, the unigram table's mass summed too) | load average |",
             "|---|---|---|---|---|"]
    for dtype in (torch.bfloat16, torch.float32):
        start = time.perf_counter()
        model = LanguageModel._read(files, torch.device("cpu"), dtype)  # a fresh load: not the process's
        loaded = time.perf_counter() - start
        start = time.perf_counter()
        model.text_log_probs(texts)
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        model.token_mass(texts)  # every text again: a fit's pass remembers nothing first
        calibration = time.perf_counter() - start
        lines.append(f"| {str(dtype).removeprefix('torch.')} | {loaded:.1f} | {len(texts) / seconds:.1f} | "
                     f"{len(texts) / calibration:.1f} | {os.getloadavg()[0]:.1f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    return [*lines, ""]


def dtypes(args: argparse.Namespace) -> list[str]:
    lines = ["## 3. float32 against bfloat16 (the default scorer with fluency always on)", "",
             f"Training sides capped at {args.dtype_train} texts and test sides at {args.dtype_test} (seeded samples). "
             "*Largest move's p*: the outside p-value of the text whose estimate moved most, in bfloat16 and float32 "
             "(between the level, 0.05, and twice it an estimate fades towards the flagged one); *unigram table*: the "
             "median and largest difference of the two fits' tables (nats).", "",
             "| set | test texts | estimate moves > 1e-9 | moves > 0.01 | largest move | largest move's p | "
             "flag flips | unigram table | load average |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, folds in splits(args):
        if args.only and not name.startswith(args.only):
            continue
        rng = np.random.default_rng(1)
        train_texts, train_scores = sample(*folds[0][:2], args.dtype_train, rng)
        test_texts, _ = sample(*folds[0][2:], args.dtype_test, rng)
        predictions, tables = [], []
        for dtype in ("bfloat16", "float32"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                scorer = NeighborsScorer(device="cpu", fluency=Fluency(offline_model(), use="always", dtype=dtype))
                predictions.append(scorer.fit(train_texts, train_scores).predict(test_texts))
            assert scorer.fluency_ is not None and scorer.fluency_.unigram is not None
            tables.append(scorer.fluency_.unigram.numpy())
        move = np.abs(predictions[0].scores - predictions[1].scores)
        flips = predictions[0].outside != predictions[1].outside
        largest = int(np.nanargmax(move))
        table = np.abs(tables[0] - tables[1])
        lines.append(f"| {name.split(' (')[0]} ({len(train_texts)} -> {len(test_texts)}) | {len(test_texts)} | "
                     f"{np.mean(move > 1e-9):.3f} | {np.mean(move > 0.01):.3f} | {move[largest]:.4f} | "
                     f"{predictions[0].typicality[largest]:.4f} / {predictions[1].typicality[largest]:.4f} | "
                     f"{int(flips.sum())} ({np.mean(flips):.3f}) | {np.median(table):.3f} / {table.max():.3f} | "
                     f"{os.getloadavg()[0]:.1f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mlqe-train", type=int, default=2000)
    parser.add_argument("--mlqe-dev", type=int, default=500)
    parser.add_argument("--parts", default="1,2,3")
    parser.add_argument("--only", default=None, help="one data set by name (gug, mlqe_et-en, huse_summarization)")
    parser.add_argument("--cost-texts", type=int, default=747, help="texts timed in part 2")
    parser.add_argument("--dtype-train", type=int, default=500, help="training texts per set in part 3")
    parser.add_argument("--dtype-test", type=int, default=250, help="test texts per set in part 3")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if offline_model() is None:
        print("the offline model is not fetched: gpu-neighbors fetch-model", file=sys.stderr)
        return 1
    parts = args.parts.split(",")
    command = f"bench/fluency.py {' '.join(sys.argv[1:] if argv is None else argv)}"
    with remembered():
        fluency = FittedFluency(model_files(offline_model()), torch.bfloat16, torch.device("cpu"))  # type: ignore[arg-type]
        if "1" in parts:
            write_part(Path(args.out), command, lambda: design(args, fluency))
    if "2" in parts:
        write_part(Path(args.out), command, lambda: cost(args.cost_texts))
    if "3" in parts:
        with remembered(dtype="float32"), remembered(dtype="bfloat16"):
            write_part(Path(args.out), command, lambda: dtypes(args))
    return 0


def write_part(out: Path, command: str, make: Callable[[], list[str]]) -> None:
    """One part's section of the page (its heading the first line `make` returns), replaced
    in place: the other parts stay as they were."""
    start, load = time.perf_counter(), os.getloadavg()[0]
    lines = make()
    made = (f"Made by `{command}` ({(time.perf_counter() - start) / 60:.1f} min; load average at the start "
            f"{load:.1f}; {os.cpu_count()} cores, the model on one thread).")
    write_section(out, lines[0], "\n".join([lines[0], "", made, *lines[1:]]))


if __name__ == "__main__":
    sys.exit(main())
