"""Fluency and the checklist's dropped-words row (issue 51, round 2): can another statistic of the
language model, or another calibration of its outlier column, make copies of good texts with 30%
of their words dropped score as low as the target asks (half the gap between the originals'
mean and the training set's lowest-decile mean)? Writes part 4 of bench/fluency.md.

On GUG (gug_train -> gug_dev) and MLQE et-en (a seeded 2,000 of its training side -> its dev
side), the splits of bench/checklist.py, with the same 100 good held-out texts and their copies:

1. Stacking. The default scorer without fluency gives every training text's leave-one-out
   neighbour estimate and every dev text's and copy's estimate as it predicts them. Each
   candidate set of per-text features is stacked on a seeded 800 of the training texts
   (`estimators/stacking.py`, least squares) and applied to the dev texts (Spearman) and to the
   originals and their copies (the drop of the copies' mean below the originals', and what is
   needed). The features come from each token's log-probability lp and the entropy H of the
   model's prediction at that position: the mean lp (built); the lowest lp, the mean of the
   lowest 3, of the lowest fifth, the median; the statistic within length (the outlier column's
   z); the excess surprise -lp - H (mean, mean of the top 3, of its positive part), which is
   low where the model expected a word with confidence and saw another (a gap); the mean lp at
   confident positions (H < 2 nats). (The mean lp with the mean excess surprise is the mean lp
   with the mean entropy: one row.)
2. The outlier column alone at level 0.05, calibrated on the same 800 training texts: the share
   of originals and copies below the calibration texts' 5% quantile, and of ordinary dev texts
   in the shortest and longest fifth by token count, for the within-length distance scaled by
   sqrt(n) (built), unscaled, and divided by the spread fitted on the calibration texts
   (log|distance| on log n).

The stacked drops here leave out the outlier test's move of flagged texts towards the negative
evidence's estimate, which the checklist's cells include, so they sit below those cells.

    .venv/bin/python bench/fluency_dropped.py

About 3 minutes on two loaded cores (the model on one thread; no memo: per-token values).
"""
from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import checklist  # noqa: E402  (bench/, beside this script: its splits and good held-out sample)
from gpu_neighbors import NeighborsScorer  # noqa: E402
from gpu_neighbors.core.correlation import spearman_rows  # noqa: E402
from gpu_neighbors.estimators.stacking import Stacking  # noqa: E402
from gpu_neighbors.evaluation.checklist import lowest_decile_mean  # noqa: E402
from gpu_neighbors.fluency import model_files, offline_model  # noqa: E402
from gpu_neighbors.fluency.model import LanguageModel, causal_mask  # noqa: E402
from gpu_neighbors.fluency.part import resolved_dtype  # noqa: E402
from gpu_neighbors.text.perturbations import WordPool, perturb  # noqa: E402
from pages import write_section  # noqa: E402

OUT = Path(__file__).resolve().parent / "fluency.md"
HEADING = "## 4. Dropped words: other statistics and calibrations (issue 51, round 2)"
COPIES = ("dropped", "truncated", "replaced", "char_swaps")
STACKING_TEXTS = 800
Tokens = list[tuple[np.ndarray, np.ndarray]]  # per text: each token's log-probability and entropy


class TokenValues:
    """Each token's log-probability and the entropy of the prediction it was drawn from, under
    the offline model, as the library reads texts (start token, cut at MAX_TOKENS)."""

    def __init__(self) -> None:
        device = torch.device("cpu")
        self.model = LanguageModel.load(model_files(offline_model()), device, resolved_dtype("auto", device))
        self.known: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    @torch.inference_mode()
    def of(self, texts: Sequence[str]) -> Tokens:
        rows = [tuple(row) for row in self.model.tokenize(texts)]
        missing = sorted({row for row in rows if row not in self.known}, key=lambda row: (len(row), row))
        head, start = self.model.model.get_output_embeddings(), self.model.start_id
        for first in range(0, len(missing), 32):
            chosen = missing[first:first + 32]
            width = max(len(row) for row in chosen)
            ids = torch.tensor([[*row, *(start,) * (width - len(row))] for row in chosen])
            hidden = self.model.model.base_model(input_ids=ids, attention_mask=causal_mask(ids, self.model.dtype),
                                                 use_cache=False).last_hidden_state[:, :-1]
            picked, entropy = [], []
            for at in range(0, width - 1, 8):  # a few positions at a time: bounded memory
                logs = head(hidden[:, at:at + 8].contiguous()).float().log_softmax(-1)
                picked.append(logs.gather(-1, ids[:, 1 + at:9 + at, None])[..., 0])
                entropy.append(-(logs.exp() * logs).sum(-1))
            lp, h = torch.cat(picked, 1).double().numpy(), torch.cat(entropy, 1).double().numpy()
            for row, values, spread in zip(chosen, lp, h):
                self.known[row] = (values[:len(row) - 1], spread[:len(row) - 1])
        return [self.known[row] for row in rows]


def lowest(values: np.ndarray, count: int) -> float:
    return float(np.sort(values)[:count].mean())


# Per-text statistics of (lp, H); higher is more fluent for each.
STATISTICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "mean lp": lambda lp, h: float(lp.mean()),
    "lowest lp": lambda lp, h: float(lp.min()),
    "lowest 3": lambda lp, h: lowest(lp, 3),
    "lowest fifth": lambda lp, h: lowest(lp, max(1, int(np.ceil(0.2 * lp.size)))),
    "median lp": lambda lp, h: float(np.median(lp)),
    "excess surprise": lambda lp, h: float((lp + h).mean()),
    "excess, top 3": lambda lp, h: lowest(lp + h, 3),
    "excess, positive part": lambda lp, h: float(np.minimum(lp + h, 0).mean()),
    "lp where H < 2": lambda lp, h: float(lp[h < 2].mean()) if (h < 2).any() else 0.0,
}
CANDIDATES = [("mean lp",), ("mean lp", "lowest lp"), ("mean lp", "lowest 3"), ("mean lp", "lowest fifth"),
              ("median lp",), ("mean lp", "within length"), ("within length",), ("excess surprise",),
              ("mean lp", "excess surprise"), ("mean lp", "excess, top 3"), ("mean lp", "excess, positive part"),
              ("mean lp", "lp where H < 2")]


def line(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.polyfit(x, y, 1)


def features(tokens: Tokens, names: Sequence[str], center: np.ndarray) -> np.ndarray:
    columns = []
    for name in names:
        if name == "within length":
            counts = np.array([lp.size for lp, _ in tokens], dtype=np.float64)
            mean = np.array([lp.mean() for lp, _ in tokens])
            columns.append((mean - np.polyval(center, np.log(counts))) * np.sqrt(counts))
        else:
            columns.append(np.array([STATISTICS[name](lp, h) for lp, h in tokens]))
    return np.column_stack(columns)


def rho(estimates: np.ndarray, truth: np.ndarray) -> float:
    return float(spearman_rows(estimates[None, :], truth)[0])


def measure(data: checklist.DataSet, values: TokenValues) -> tuple[list[str], list[str]]:
    texts, scores = data.train
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scorer = NeighborsScorer(device="cpu", fluency="none").fit(texts, scores)
        loo = scorer.leave_one_out().scores
        dev_texts, dev_scores = data.held
        good = sorted(checklist.good_sample(data, scores, 100)[0])
        pool = WordPool.from_texts(texts)
        copies = {name: perturb(good, name, seed=0, vocabulary=pool) for name in COPIES}
        predicted = {"dev": scorer.predict(dev_texts).scores, "original": scorer.predict(good).scores,
                     **{name: scorer.predict(copy).scores for name, copy in copies.items()}}
    chosen = np.sort(np.random.default_rng(0).choice(len(texts), size=min(STACKING_TEXTS, len(texts)), replace=False))
    tokens = {"train": values.of([texts[i] for i in chosen]), "dev": values.of(dev_texts), "original": values.of(good),
              **{name: values.of(copy) for name, copy in copies.items()}}
    counts = {key: np.array([lp.size for lp, _ in rows], dtype=np.float64) for key, rows in tokens.items()}
    means = {key: np.array([lp.mean() for lp, _ in rows]) for key, rows in tokens.items()}
    center = line(np.log(counts["train"]), means["train"])
    decile = lowest_decile_mean(scores)
    stacked_rows = []
    for names in CANDIDATES:
        model, stacked_loo = Stacking.fit(loo[chosen], features(tokens["train"], names, center), scores[chosen],
                                          (float(scores.min()), float(scores.max())))

        def apply(key: str) -> np.ndarray:
            return np.asarray(model.apply(torch.from_numpy(predicted[key]),
                                          torch.from_numpy(features(tokens[key], names, center))).numpy())

        original = float(np.nanmean(apply("original")))
        needed = (original - decile) / 2
        drops = [original - float(np.nanmean(apply(name))) for name in COPIES]
        stacked_rows.append(f"| {data.name} | {' + '.join(names)} | {rho(stacked_loo, scores[chosen]):.3f} | "
                            f"{rho(apply('dev'), dev_scores):.3f} | {needed:.3f} | "
                            + " | ".join(f"{drop:.3f}{' ✓' if drop >= needed else ''}" for drop in drops) + " |")
    distance = {key: means[key] - np.polyval(center, np.log(counts[key])) for key in tokens}
    spread = line(np.log(counts["train"]), np.log(np.abs(distance["train"]) + 1e-12))
    scalings = {"sqrt(n) (built)": lambda key: distance[key] * np.sqrt(counts[key]),
                "unscaled": lambda key: distance[key],
                "fitted spread": lambda key: distance[key] / np.exp(np.polyval(spread, np.log(counts[key])))}
    shortest, longest = counts["dev"] <= np.quantile(counts["dev"], 0.2), counts["dev"] >= np.quantile(counts["dev"], 0.8)
    column_rows = []
    for label, column in scalings.items():
        cut = np.quantile(column("train"), 0.05)
        dev = column("dev") < cut
        column_rows.append(f"| {data.name} | {label} | {dev[shortest].mean():.3f} | {dev[longest].mean():.3f} | "
                           + " | ".join(f"{np.mean(column(key) < cut):.2f}" for key in ("original", *COPIES)) + " |")
    column_rows.append(f"| {data.name} | (spread slope on log n: {spread[0]:.2f}; sqrt(n) assumes -0.50) | | | | | | | |")
    deviation = float(np.std(means["train"]))
    column_rows.append(f"| {data.name} | (copies' mean lp below their originals', in training SDs) | | | | "
                       + " | ".join(f"{np.mean(means['original'] - means[name]) / deviation:.2f}" for name in COPIES)
                       + " |")
    return stacked_rows, column_rows


def main() -> int:
    if offline_model() is None:
        print("the offline model is not fetched: gpu-neighbors fetch-model", file=sys.stderr)
        return 1
    torch.set_num_threads(1)
    start, load = time.perf_counter(), " ".join(f"{value:.1f}" for value in os.getloadavg())
    values = TokenValues()
    stacked, columns = [], []
    for data in checklist.load(2000)[1:]:  # GUG and MLQE
        rows = measure(data, values)
        stacked += rows[0]
        columns += rows[1]
    text = "\n".join([
        HEADING, "",
        f"Made by `bench/fluency_dropped.py` ({(time.perf_counter() - start) / 60:.1f} min; load average at the start "
        f"{load}; see its docstring). Stacked on {STACKING_TEXTS} training texts; drops leave out the outlier "
        "test's move of flagged texts, so they sit below the checklist's cells.", "",
        "| set | stacked features | leave-one-out rho (train) | dev rho | needed | " + " | ".join(COPIES) + " |",
        "|---|---|---|---|---|" + "---|" * len(COPIES), *stacked, "",
        "The outlier column alone at level 0.05: the share of ordinary dev texts flagged in the shortest and longest "
        "fifth by token count, and of the good originals and their copies.", "",
        "| set | column | dev, shortest fifth | dev, longest fifth | originals | " + " | ".join(COPIES) + " |",
        "|---|---|---|---|---|" + "---|" * len(COPIES), *columns, ""])
    write_section(OUT, HEADING, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
