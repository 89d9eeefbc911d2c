"""Fluency and the checklist's dropped-words row (issue 51, round 2): can another statistic of the
language model, or another calibration of its outlier column, make copies of good texts with 30%
of their words dropped score as low as the target asks (half the gap between the originals'
mean and the training set's lowest-decile mean)? Writes part 4 of bench/fluency.md.

On GUG (gug_train -> gug_dev) and MLQE et-en (a seeded 2,000 of its training side -> its dev
side), the splits of bench/checklist.py, with the same 100 good held-out texts and their copies:

1. Stacking. The default scorer without fluency gives every training text's leave-one-out
   neighbour estimate and every dev text's and copy's estimate as it predicts them. Each
   candidate set of per-text features is stacked on the training texts the scorer stacks on (all
   of them, at most 2,000: GUG's 1,518, MLQE's 2,000) (`estimators/stacking.py`, least squares)
   and applied to the dev texts (Spearman) and to the originals and their copies, every
   perturbation of the checklist (the drop of the copies' mean below the originals', and what is
   needed). The features come from each token's log-probability lp and the entropy H of the
   model's prediction at that position: the mean lp (built then); the lowest lp, the mean of the
   lowest 3, of the lowest fifth, the median; the statistic within length (the outlier column's
   z); the excess surprise -lp - H (mean, mean of the top 3, of its positive part), which is
   low where the model expected a word with confidence and saw another (a gap); the mean lp at
   confident positions (H < 2 nats). (The mean lp with the mean excess surprise is the mean lp
   with the mean entropy: one row.)
2. The outlier column alone at level 0.05, calibrated on the same training texts: the share
   of originals and copies below the calibration texts' 5% quantile, and of ordinary dev texts
   in the shortest and longest fifth by token count, for the within-length distance scaled by
   sqrt(n) (built then), unscaled, and divided by the spread fitted on the calibration texts
   (log|distance| on log n).
3. Monotone non-linear stacking (round 3): truth ~ a + w * estimate + g(p), p the mean lp's
   percentile among the stacking texts' (mid-ranks; a new text's by where it falls among them, 0
   below all), g non-decreasing, so that the low tail, where ungrammatical training texts sit,
   carries its own slope: g isotonic (backfitting with a least-squares a, w; ten rounds), or
   piecewise linear between fixed knots in p with a non-negative slope on each piece
   (non-negative least squares), knots at the quintiles, at the deciles, or at 0.1 alone (the
   lowest decile's own slope). Beside them, the linear model with the product estimate x mean lp
   (fluency weighing more where the neighbours rate a text well, where the copies sit). Their
   leave-one-out rho refits without each text (the linear ones' is exact). Then what any
   estimate calibrated on the training scores through fluency can reach: the training texts'
   mean score in the least fluent 10%, 5% and 2%, against the copies' mean the target asks for,
   and by tenth of the statistic.

4. SLOR (round 4; part 6 of bench/fluency.md): the mean lp less the mean of the tokens' unigram
   log-probabilities, the unigram table either the library's (`FittedFluency.calibrate`: the
   model's predicted distributions averaged over the stacking texts' positions) or counted on
   the same texts (add one half). Each statistic alone as the outlier column (within length,
   scaled three ways as in 2, at level 0.05), its copies' shift below their originals in
   training standard deviations, and stacked (as in 1), alone and beside the mean lp. The
   statistics here are the library's (`FittedFluency.of_texts`), so `--part 6` runs alone.

The stacked drops here leave out the outlier test's move of flagged texts towards the negative
evidence's estimate, which the checklist's cells include, so they sit below those cells.

    .venv/bin/python bench/fluency_dropped.py [--part 6]

About 10 minutes on two loaded cores (the model on one thread; no memo: per-token values).
"""
from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import NamedTuple
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import nnls
from sklearn.isotonic import IsotonicRegression

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import checklist  # noqa: E402  (bench/, beside this script: its splits and good held-out sample)
from gpu_neighbors import NeighborsScorer  # noqa: E402
from gpu_neighbors.core.conformal import MAX_CALIBRATION_TEXTS  # noqa: E402
from gpu_neighbors.core.correlation import spearman_rows  # noqa: E402
from gpu_neighbors.estimators.stacking import Stacking  # noqa: E402
from gpu_neighbors.evaluation.checklist import lowest_decile_mean  # noqa: E402
from gpu_neighbors.fluency import FittedFluency, model_files, offline_model  # noqa: E402
from gpu_neighbors.fluency.model import LanguageModel, causal_mask  # noqa: E402
from gpu_neighbors.fluency.part import resolved_dtype  # noqa: E402
from gpu_neighbors.text.perturbations import PERTURBATIONS, WordPool, perturb  # noqa: E402
from pages import write_section  # noqa: E402

OUT = Path(__file__).resolve().parent / "fluency.md"
HEADING = "## 4. Dropped words: other statistics and calibrations (issue 51, round 2)"
COPIES = tuple(PERTURBATIONS)
STACKING_TEXTS = MAX_CALIBRATION_TEXTS  # the texts the scorer stacks on
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


def percentile(train: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each value's mid-rank share among the sorted training values `train` (0 below them all)."""
    return (np.searchsorted(train, values, "left") + np.searchsorted(train, values, "right")) / (2 * train.size)


class Monotone:
    """truth ~ a + w * estimate + g(p), p the mean lp's percentile among the training texts', g
    non-decreasing: isotonic (`knots` None) or piecewise linear between `knots` in p with a
    non-negative slope on each piece; clipped to `bounds`; a text without an estimate or a
    token keeps its neighbour estimate."""

    def __init__(self, knots: Sequence[float] | None, bounds: tuple[float, float]) -> None:
        self.knots, self.bounds = knots, bounds

    def ramps(self, p: np.ndarray) -> np.ndarray:
        assert self.knots is not None
        return np.column_stack([np.clip((p - low) / (high - low), 0, 1) for low, high in zip(self.knots, self.knots[1:])])

    def fit(self, estimates: np.ndarray, lp: np.ndarray, truth: np.ndarray) -> Monotone:
        self.train = np.sort(lp)
        p = percentile(self.train, lp)
        if self.knots is None:
            g, line_part = np.zeros_like(truth), np.column_stack([np.ones_like(estimates), estimates])
            for _ in range(10):
                self.linear = np.linalg.lstsq(line_part, truth - g, rcond=None)[0]
                self.isotonic = IsotonicRegression(out_of_bounds="clip").fit(p, truth - line_part @ self.linear)
                g = self.isotonic.predict(p)
        else:  # the intercept and the estimate's weight free: each as a pair of non-negative columns
            ones = np.ones_like(estimates)
            self.coefficients = nnls(np.column_stack([ones, -ones, estimates, -estimates, self.ramps(p)]), truth)[0]
        return self

    def apply(self, estimates: np.ndarray, lp: np.ndarray) -> np.ndarray:
        p = percentile(self.train, lp)
        if self.knots is None:
            values = self.linear[0] + self.linear[1] * estimates + self.isotonic.predict(p)
        else:
            ones = np.ones_like(estimates)
            values = np.column_stack([ones, -ones, estimates, -estimates, self.ramps(p)]) @ self.coefficients
        return np.where(np.isfinite(estimates) & np.isfinite(lp), np.clip(values, *self.bounds), estimates)


def refitted_loo(make: Callable[[], Monotone], estimates: np.ndarray, lp: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Each text's estimate by the model fitted without it."""
    everything = np.arange(truth.size)
    return np.array([make().fit(estimates[everything != i], lp[everything != i], truth[everything != i])
                     .apply(estimates[i:i + 1], lp[i:i + 1])[0] for i in everything])


MONOTONE: dict[str, Sequence[float] | None] = {
    "isotonic in p": None, "ramps, quintile knots": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
    "ramps, decile knots": tuple(np.linspace(0, 1, 11)), "ramps, knot at 0.1": (0.0, 0.1, 1.0)}


def monotone_rows(data: checklist.DataSet, loo: np.ndarray, means: dict[str, np.ndarray],
                  predicted: dict[str, np.ndarray], truth: np.ndarray, decile: float) -> list[str]:
    """Section 3: the linear model (built then), the monotone ones and the product, with the bound."""
    bounds = (float(truth.min()), float(truth.max()))
    used = np.isfinite(loo) & np.isfinite(means["train"])
    estimates, lp, truth = loo[used], means["train"][used], truth[used]
    rows = []

    def row(label: str, train_loo: np.ndarray, apply: Callable[[str], np.ndarray]) -> float:
        original = float(np.nanmean(apply("original")))
        needed = (original - decile) / 2
        drops = [original - float(np.nanmean(apply(name))) for name in COPIES]
        rows.append(f"| {data.name} | {label} | {rho(train_loo, truth):.3f} | {rho(apply('dev'), data.held[1]):.3f} | "
                    f"{needed:.3f} | " + " | ".join(f"{drop:.3f}{' ✓' if drop >= needed else ''}" for drop in drops) + " |")
        return original - needed

    for label, product in (("linear, mean lp (built then)", False), ("linear, mean lp + estimate x mean lp", True)):
        def columns(key: str, product: bool = product) -> np.ndarray:
            values = means[key] if key != "train" else lp
            neighbour = predicted[key] if key != "train" else estimates
            return np.column_stack([values, neighbour * values] if product else [values])

        model, stacked = Stacking.fit(estimates, columns("train"), truth, bounds)
        target = row(label, stacked, lambda key, model=model, columns=columns: np.asarray(
            model.apply(torch.from_numpy(predicted[key]), torch.from_numpy(columns(key))).numpy()))
    for label, knots in MONOTONE.items():
        def make(knots: Sequence[float] | None = knots) -> Monotone:
            return Monotone(knots, bounds)

        fitted = make().fit(estimates, lp, truth)
        row(label, refitted_loo(make, estimates, lp, truth),
            lambda key, fitted=fitted: fitted.apply(predicted[key], means[key]))
    order = np.argsort(lp)
    tails = " / ".join(f"{truth[order[: max(1, int(share * truth.size))]].mean():.3f}" for share in (0.1, 0.05, 0.02))
    rows.append(f"| {data.name} | (training texts' mean score, least fluent 10% / 5% / 2%: {tails}; the copies' "
                f"mean the target asks for, below the built model's originals: {target:.3f}) | | | |" + " |" * len(COPIES))
    tenths = " ".join(f"{part.mean():.3f}" for part in np.array_split(truth[order], 10))
    rows.append(f"| {data.name} | (training texts' mean score by tenth of the statistic, least fluent first: {tenths}) "
                "| | | |" + " |" * len(COPIES))
    return rows


class NeighbourSide(NamedTuple):
    """What both protocols stack on: the default scorer without fluency's leave-one-out estimate
    of every training text, the good held-out texts and their copies, every text's prediction
    (by name: dev, original, each copy), and the stacking texts (`chosen`, sorted positions)."""

    loo: np.ndarray
    good: list[str]
    copies: dict[str, list[str]]
    predicted: dict[str, np.ndarray]
    chosen: np.ndarray


def neighbour_side(data: checklist.DataSet) -> NeighbourSide:
    texts, scores = data.train
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scorer = NeighborsScorer(device="cpu", fluency="none").fit(texts, scores)
        loo = scorer.leave_one_out().scores
        good = sorted(checklist.good_sample(data, scores, 100)[0])
        pool = WordPool.from_texts(texts)
        copies = {name: perturb(good, name, seed=0, vocabulary=pool) for name in COPIES}
        predicted = {"dev": scorer.predict(data.held[0]).scores, "original": scorer.predict(good).scores,
                     **{name: scorer.predict(copy).scores for name, copy in copies.items()}}
    chosen = np.sort(np.random.default_rng(0).choice(len(texts), size=min(STACKING_TEXTS, len(texts)), replace=False))
    return NeighbourSide(loo, good, copies, predicted, chosen)


def measure(data: checklist.DataSet, values: TokenValues) -> tuple[list[str], list[str], list[str]]:
    texts, scores = data.train
    dev_texts, dev_scores = data.held
    loo, good, copies, predicted, chosen = neighbour_side(data)
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
    scalings = {"sqrt(n) (built then)": lambda key: distance[key] * np.sqrt(counts[key]),
                "unscaled": lambda key: distance[key],
                "fitted spread": lambda key: distance[key] / np.exp(np.polyval(spread, np.log(counts[key])))}
    shortest, longest = counts["dev"] <= np.quantile(counts["dev"], 0.2), counts["dev"] >= np.quantile(counts["dev"], 0.8)
    column_rows = []
    for label, column in scalings.items():
        cut = np.quantile(column("train"), 0.05)
        dev = column("dev") < cut
        column_rows.append(f"| {data.name} | {label} | {dev[shortest].mean():.3f} | {dev[longest].mean():.3f} | "
                           + " | ".join(f"{np.mean(column(key) < cut):.2f}" for key in ("original", *COPIES)) + " |")
    column_rows.append(f"| {data.name} | (spread slope on log n: {spread[0]:.2f}; sqrt(n) assumes -0.50) | | | |"
                       + " |" * len(COPIES))
    deviation = float(np.std(means["train"]))
    column_rows.append(f"| {data.name} | (copies' mean lp below their originals', in training SDs) | | | | "
                       + " | ".join(f"{np.mean(means['original'] - means[name]) / deviation:.2f}" for name in COPIES)
                       + " |")
    return stacked_rows, column_rows, monotone_rows(data, loo[chosen], means, predicted, scores[chosen], decile)


BUILT = ("mean lp", "SLOR, the model's unigrams")  # what the library stacks, and its outlier columns
SLOR_HEADING = "## 6. SLOR: the mean less the unigram mean (issue 51, round 4)"


def slor_rows(data: checklist.DataSet) -> list[str]:
    """Part 6 (docstring, 4): the mean lp, SLOR by the model's unigram table and SLOR by counted
    unigrams, each as the outlier column alone and stacked."""
    texts, scores = data.train
    loo, good, copies, predicted, chosen = neighbour_side(data)
    sets = {"train": [texts[i] for i in chosen], "dev": data.held[0], "original": good, **copies}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        device = torch.device("cpu")
        fluency = FittedFluency(model_files(offline_model()), resolved_dtype("auto", device), device)
        fluency.calibrate(sets["train"])
        values = {key: fluency.of_texts(rows).numpy() for key, rows in sets.items()}
    model = fluency.model
    ids = {key: [np.array(row[1:], dtype=np.int64) for row in model.tokenize(rows)] for key, rows in sets.items()}
    size = model.model.get_output_embeddings().weight.shape[0]
    counted = np.bincount(np.concatenate(ids["train"]), minlength=size).astype(np.float64)
    table = np.log((counted + 0.5) / (counted.sum() + 0.5 * size))
    counts = {key: value[:, 2] for key, value in values.items()}
    statistics = {"mean lp": {key: value[:, 0] for key, value in values.items()},
                  "SLOR, the model's unigrams": {key: value[:, 1] for key, value in values.items()},
                  "SLOR, counted unigrams": {key: values[key][:, 0] - np.array([table[row].mean() if row.size else np.nan
                                                                               for row in ids[key]]) for key in sets}}
    shortest, longest = counts["dev"] <= np.quantile(counts["dev"], 0.2), counts["dev"] >= np.quantile(counts["dev"], 0.8)
    rows = []
    for name, statistic in statistics.items():
        center = line(np.log(counts["train"]), statistic["train"])
        distance = {key: statistic[key] - np.polyval(center, np.log(counts[key])) for key in sets}
        spread = line(np.log(counts["train"]), np.log(np.abs(distance["train"]) + 1 / 1024))
        scalings = {"sqrt(n)": lambda key: distance[key] * np.sqrt(counts[key]), "unscaled": lambda key: distance[key],
                    "fitted spread": lambda key: distance[key] / np.exp(np.polyval(spread, np.log(counts[key])))}
        for label, column in scalings.items():
            built = " (built)" if label == "fitted spread" and name in BUILT else ""
            cut = np.quantile(column("train"), 0.05)
            dev = column("dev") < cut
            rows.append(f"| {data.name} | column: {name}, {label}{built} | {dev.mean():.3f} | {dev[shortest].mean():.3f} | "
                        f"{dev[longest].mean():.3f} | {np.mean(column('original') < cut):.2f} | | "
                        + " | ".join(f"{np.mean(column(key) < cut):.2f}" for key in COPIES) + " |")
        deviation = float(np.std(statistic["train"]))
        rows.append(f"| {data.name} | shift: {name} (training SDs) | | | | | | "
                    + " | ".join(f"{np.nanmean(statistic['original'] - statistic[key]) / deviation:.2f}" for key in COPIES)
                    + " |")
    decile = lowest_decile_mean(scores)
    for names in (("mean lp",), ("SLOR, the model's unigrams",), ("SLOR, counted unigrams",), BUILT,
                  ("mean lp", "SLOR, counted unigrams")):
        def features(key: str, names: Sequence[str] = names) -> np.ndarray:
            return np.column_stack([statistics[name][key] for name in names])

        fitted, stacked = Stacking.fit(loo[chosen], features("train"), scores[chosen],
                                       (float(scores.min()), float(scores.max())))

        def apply(key: str, fitted: Stacking = fitted, features: Callable[[str], np.ndarray] = features) -> np.ndarray:
            return np.asarray(fitted.apply(torch.from_numpy(predicted[key]), torch.from_numpy(features(key))).numpy())

        original = float(np.nanmean(apply("original")))
        needed = (original - decile) / 2
        rows.append(f"| {data.name} | stacked: {' + '.join(names)}{' (built)' if names == BUILT else ''} | {rho(apply('dev'), data.held[1]):.3f} | | | "
                    f"{rho(stacked, scores[chosen]):.3f} | {needed:.3f} | "
                    + " | ".join(f"{original - float(np.nanmean(apply(key))):.3f}" for key in COPIES) + " |")
    train = scores[chosen]
    for name in BUILT:
        order = np.argsort(statistics[name]["train"], kind="stable")
        tails = " / ".join(f"{train[order[: max(1, int(share * train.size))]].mean():.3f}" for share in (0.1, 0.05, 0.02))
        rows.append(f"| {data.name} | (training texts' mean score, least fluent 10% / 5% / 2% by {name}: {tails}) "
                    "| | | | | |" + " |" * len(COPIES))
    return rows


def slor_section(sets: list[checklist.DataSet]) -> None:
    start, load = time.perf_counter(), " ".join(f"{value:.1f}" for value in os.getloadavg())
    rows = [row for data in sets for row in slor_rows(data)]
    write_section(OUT, SLOR_HEADING, "\n".join([
        SLOR_HEADING, "",
        f"Made by `bench/fluency_dropped.py --part 6` ({(time.perf_counter() - start) / 60:.1f} min; load average at "
        f"the start {load}; see its docstring, 4). Rows *column*: the statistic alone as the outlier column at level "
        "0.05, the share flagged of ordinary dev texts (all, shortest and longest fifth by token count), of the good "
        "originals and of their copies. Rows *shift*: the copies' statistic below their originals', in training "
        "standard deviations. Rows *stacked*: dev rho, then leave-one-out rho on the stacking texts, what the "
        "checklist needs, and each copy's drop below the originals' mean estimate (the outlier test's move left out, "
        "as in part 4). *(built)*: what the library does since round 4: both statistics in the stacked estimate "
        "and as two columns of the outlier test, each divided by its fitted spread.", "",
        "| set | row | dev | dev, shortest fifth | dev, longest fifth | originals (column) or leave-one-out rho "
        "(stacked) | needed | " + " | ".join(COPIES) + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(COPIES), *rows, ""]))


def main() -> int:
    if offline_model() is None:
        print("the offline model is not fetched: gpu-neighbors fetch-model", file=sys.stderr)
        return 1
    torch.set_num_threads(1)
    if sys.argv[1:] == ["--part", "6"]:
        slor_section(checklist.load(2000)[1:])
        return 0
    start, load = time.perf_counter(), " ".join(f"{value:.1f}" for value in os.getloadavg())
    values = TokenValues()
    stacked, columns, monotone = [], [], []
    for data in checklist.load(2000)[1:]:  # GUG and MLQE
        rows = measure(data, values)
        stacked += rows[0]
        columns += rows[1]
        monotone += rows[2]
    text = "\n".join([
        HEADING, "",
        f"Made by `bench/fluency_dropped.py` ({(time.perf_counter() - start) / 60:.1f} min; load average at the start "
        f"{load}; see its docstring). Stacked on the training texts the scorer stacks on (at most {STACKING_TEXTS:,}); "
        "drops leave out the outlier test's move of flagged texts, so they sit below the checklist's cells.", "",
        "| set | stacked features | leave-one-out rho (train) | dev rho | needed | " + " | ".join(COPIES) + " |",
        "|---|---|---|---|---|" + "---|" * len(COPIES), *stacked, "",
        "The outlier column alone at level 0.05: the share of ordinary dev texts flagged in the shortest and longest "
        "fifth by token count, and of the good originals and their copies.", "",
        "| set | column | dev, shortest fifth | dev, longest fifth | originals | " + " | ".join(COPIES) + " |",
        "|---|---|---|---|---|" + "---|" * len(COPIES), *columns, "",
        "Monotone non-linear stacking in the statistic's within-training percentile p (round 3; docstring, 3): "
        "the same protocol as the first table.", "",
        "| set | stacking | leave-one-out rho (train) | dev rho | needed | " + " | ".join(COPIES) + " |",
        "|---|---|---|---|---|" + "---|" * len(COPIES), *monotone, "",
        "The last two rows of each set: the training texts as little fluent as the copies (their least fluent tenth "
        "to fiftieth) still score above the copies' mean the target asks for, so an estimate calibrated on these "
        "scores through the statistic, linear or monotone, cannot reach it; and the scores rise with the statistic "
        "about as fast in its lowest tenths as in its highest: the low tail has no steeper slope of its own for a "
        "monotone stacking to give.", ""])
    write_section(OUT, HEADING, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
