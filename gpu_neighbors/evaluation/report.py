"""`gpu-neighbors report`: every protocol on one data set, as a markdown page with PNG plots.

One similarity pass per kernel feeds everything: leave-one-out with the given thresholds and
with thresholds tuned inside each training fold (nested), k-fold cross-validation, sweeps of
a, b and tau, the training-size curve and a predicted-vs-true scatter. With `paper=` the page
also sets our figures beside the published ones (BLEU Neighbors paper: Ethayarajh and Sadigh,
Table 1, Table 2, and the claims made about Figures 2-4, whose plotted values are not in the
paper's text) and scans BLEU* implementations for the one that produced them.
"""
from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpu_neighbors.evaluation.agreement import Agreement, human_agreement
from gpu_neighbors.evaluation.calibration import calibration_curve
from gpu_neighbors.evaluation.checklist import Checklist, held_out_checklist, held_out_split
from gpu_neighbors.evaluation.protocols import (
    CrossValidation,
    CurvePoint,
    Parameter,
    SplitFluency,
    SweepPoint,
    cross_validate,
    learning_curve,
    sweep,
)
from gpu_neighbors.data import ScoredData
from gpu_neighbors.data.output import SafeOutput
from gpu_neighbors.core.pairwise import PairwiseSimilarities, Thresholds
from gpu_neighbors.core.signature import Signature
from gpu_neighbors.core.validation import DEFAULT_MIN_COVERAGE
from gpu_neighbors.kernels.bleu_tables import SMOOTHINGS as SCAN_SMOOTHINGS
from gpu_neighbors.scorer import NeighborsScorer
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.kernels.parts import kernel_part
from gpu_neighbors.evaluation.tables import cell, fixed, markdown_table
from gpu_neighbors.core.tuning import TuningGrid, tune

SPEC_OPTIONS: dict[str, Callable[[str], Any]] = {"tokenizer": str, "smoothing": str, "tau": float, "lowercase": lambda text: text == "true"}

# BLEU Neighbors paper, Table 1: (MSE, Spearman rho, coverage), leave-one-out, a = 5, b = 0.66,
# tau = 0.08 (BLEU*), 0.06 (ROUGE), 0.18 (METEOR), 0.10 (BERTScore).
PUBLISHED_TABLE1: dict[str, dict[str, tuple[float, float, float]]] = {
    "dialogue": {
        "Human (best)": (0.0208, 0.878, 1.00), "Human (average)": (0.0807, 0.456, 1.00),
        "bleu": (0.0164, 0.470, 0.76), "rouge": (0.0197, 0.342, 0.86),
        "meteor": (0.0165, 0.382, 0.47), "bertscore": (0.0229, 0.150, 0.89),
    },
    "generation": {
        "Human (best)": (0.0177, 0.861, 1.00), "Human (average)": (0.0719, 0.472, 1.00),
        "bleu": (0.0204, 0.575, 0.41), "rouge": (0.0174, 0.077, 0.47),
        "meteor": (0.0209, 0.395, 0.22), "bertscore": (0.0192, 0.566, 0.32),
    },
    "summarization": {
        "Human (best)": (0.0200, 0.921, 1.00), "Human (average)": (0.0802, 0.405, 1.00),
        "bleu": (0.0213, 0.325, 0.99), "rouge": (0.0226, 0.245, 0.97),
        "meteor": (0.0180, 0.240, 0.12), "bertscore": (0.0223, 0.225, 0.53),
    },
}
# Table 2: Spearman rho of BLEU Neighbors trained on one task (row) and tested on another.
PUBLISHED_TABLE2 = {
    "dialogue": {"dialogue": 0.470, "generation": 0.206, "summarization": 0.032},
    "generation": {"dialogue": 0.310, "generation": 0.575, "summarization": -0.070},
    "summarization": {"dialogue": 0.276, "generation": 0.095, "summarization": 0.325},
}
PAPER_THRESHOLDS = {"bleu": 0.08, "rouge": 0.06, "meteor": 0.18, "bertscore": 0.10}
SCAN_TOKENIZERS = ("whitespace", "13a", "chars")
KERNEL_CAVEATS = {
    "rouge": "Our kernel equals the rouge-score package's ROUGE-L F on the given tokens; the paper does "
             "not state its ROUGE implementation or tokenization.",
    "meteor": "Our kernel equals NLTK's METEOR (exact, Porter stem and WordNet 3.0 synonym stages); the "
              "paper does not state its METEOR version or resources. So few items are covered that MSE and "
              "rho rest on a handful of texts: a different set of one or two covered items moves both a lot.",
    "bertscore": "The paper does not state its BERTScore model, layer, idf or rescaling, and tau = 0.10 "
                 "means different pairs under different models and baselines; ours are {settings}.",
}


@dataclass(frozen=True)
class KernelSpec:
    """A kernel and its own settings, written `bleu` or `bleu:tokenizer=chars:smoothing=none`
    (keys: tokenizer, smoothing, tau, lowercase), so one report can set variants side by side."""

    kernel: str
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> KernelSpec:
        kernel, *pairs = [part.strip() for part in text.split(":")]
        options: dict[str, Any] = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or key not in SPEC_OPTIONS:
                raise ValueError(
                    f"kernel spec {text!r}: {pair!r} is not KEY=VALUE with KEY one of {', '.join(SPEC_OPTIONS)}"
                )
            try:
                options[key] = SPEC_OPTIONS[key](value)
            except ValueError:
                raise ValueError(f"kernel spec {text!r}: bad value for {key}: {value!r}") from None
        if not kernel:
            raise ValueError(f"kernel spec {text!r} names no kernel")
        return cls(kernel, options)

    def parts(self) -> dict[str, Any]:
        """The scorer's kernel (with this spec's text settings) and, where a tau is given, the
        threshold rule at that tau."""
        settings = {key: value for key, value in self.options.items() if key != "tau"}
        parts: dict[str, Any] = {"kernel": kernel_part(self.kernel, **settings)}
        if "tau" in self.options:
            parts["estimator"] = Threshold(tau=self.options["tau"])
        return parts

    @property
    def label(self) -> str:
        return ":".join([self.kernel, *(f"{key}={value}" for key, value in self.options.items())])


ScorerFactory = Callable[[KernelSpec], NeighborsScorer]


def default_factory(spec: KernelSpec) -> NeighborsScorer:
    return NeighborsScorer(**spec.parts())


@dataclass
class KernelResult:
    """Everything the report computes from one kernel's similarity pass."""

    spec: KernelSpec
    signature: Signature
    similarities: PairwiseSimilarities
    thresholds: Thresholds
    default: CrossValidation
    tuned: CrossValidation
    device: str
    swept: Thresholds  # the threshold rule the sweeps vary (`sweep_thresholds`)
    fluency: SplitFluency | None  # where the scorer's estimate takes fluency in: every protocol stacks it


def sweep_thresholds(scorer: NeighborsScorer) -> Thresholds:
    """The threshold rule at the paper's settings for the scorer's kernel (its tau, a 5, b
    0.66, or the spec's tau): what the sweeps vary, since tau, a and b are that rule's (the
    top-k estimator and ridge read none of them)."""
    if scorer.thresholds_.estimator == "threshold":
        return scorer.thresholds_
    return Threshold.paper().start(scorer.kernel_.default_tau, scorer.num_train)


@dataclass
class Report:
    """Collected results; `write` turns them into markdown and PNGs."""

    name: str
    data: ScoredData
    kernels: list[KernelResult]
    failures: dict[str, str]
    humans: dict[str, Agreement]
    settings: dict[str, Any]
    main: dict[str, Any] = field(default_factory=dict)
    scan: list[dict[str, Any]] = field(default_factory=list)
    word_overlap: dict[str, float] = field(default_factory=dict)
    checklists: dict[str, Checklist] = field(default_factory=dict)


def build_report(
    data: ScoredData,
    specs: Sequence[KernelSpec],
    *,
    make_scorer: ScorerFactory = default_factory,
    name: str = "data",
    folds: int = 10,
    runs: int = 20,
    sizes: Sequence[int] | None = None,
    seed: int = 0,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
    resamples: int = 1000,
    paper: str | None = None,
    command: str | None = None,
    checklist: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Run every protocol. A kernel that fails to load or run is reported, not fatal; the first
    kernel that works gets the sweeps, the curve and the k-fold comparison. `checklist`: every
    kernel's perturbation checklist too, fitted on a seeded 4/5 of the data. Tuning tunes what
    the scorer's estimator tunes (`fit(tune=True)`: top-k's k and p, the threshold rule's tau, a
    and b), nested wherever it is measured; the sweeps vary the threshold rule's tau, a and b
    (`sweep_thresholds`), whatever the estimator. `progress` is told each step's name as it
    starts."""
    if paper is not None and paper not in PUBLISHED_TABLE1:
        raise ValueError(f"paper task must be one of {', '.join(PUBLISHED_TABLE1)}, not {paper!r}")
    if not specs:
        raise ValueError("give at least one kernel")
    step = progress or (lambda name: None)
    settings = {"folds": folds, "runs": runs, "seed": seed, "min_coverage": min_coverage, "resamples": resamples,
                "paper": paper, "command": command}
    report = Report(name, data, [], {}, _humans(data, resamples), settings)
    grids: list[TuningGrid] = []
    for spec in specs:
        step(f"{spec.label}: similarities")
        try:
            scorer = make_scorer(spec)
            similarities = scorer.fit_pairwise(data.texts, data.scores)
        except Exception as error:  # any kernel failure becomes a note in the report
            report.failures[spec.label] = f"{type(error).__name__}: {error}"
            continue
        thresholds, grid, fluency = scorer.thresholds_, scorer.tuning_grid(), SplitFluency.of(scorer)
        step(f"{spec.label}: leave-one-out, tuned per text")
        report.kernels.append(
            KernelResult(
                spec, scorer.signature, similarities, thresholds,
                cross_validate(similarities, thresholds, folds=None, resamples=resamples, fluency=fluency),
                cross_validate(similarities, thresholds, folds=None, tune_thresholds=True,
                               min_coverage=min_coverage, grid=grid, resamples=resamples, fluency=fluency),
                str(scorer.device_), sweep_thresholds(scorer), fluency,
            )
        )
        grids.append(grid)
    if not report.kernels:
        raise ValueError("no kernel could be evaluated: " + "; ".join(f"{k}: {v}" for k, v in report.failures.items()))
    main, grid = report.kernels[0], grids[0]
    sims, thresholds, fluency = main.similarities, main.thresholds, main.fluency
    step("sweeps")
    sweeps = {parameter: sweep(sims, main.swept, parameter, resamples=resamples, fluency=fluency)
              for parameter in SWEPT}
    step("training-size curve")
    # ascending, as the table, the plot's line and the prose on it read it, whatever order --sizes gave
    curve = sorted(learning_curve(sims, thresholds, sizes=sizes, runs=runs, seed=seed, fluency=fluency),
                   key=lambda point: point.size)
    step(f"{folds}-fold cross-validation")
    report.main = {
        "sweeps": sweeps,
        "curve": curve,
        "kfold_default": cross_validate(sims, thresholds, folds=folds, seed=seed, resamples=resamples,
                                        fluency=fluency),
        "kfold_tuned": cross_validate(sims, thresholds, folds=folds, seed=seed, tune_thresholds=True,
                                      min_coverage=min_coverage, grid=grid, resamples=resamples, fluency=fluency),
        "tuned_on_all": tune(sims, grid=grid, min_coverage=min_coverage, default_tau=thresholds.tau,
                             estimator=thresholds.estimator, base=thresholds),
    }
    step("calibration")
    report.main["calibration"] = calibration_curve(sims, thresholds, folds=folds, seed=seed)
    if paper is not None:
        step("implementation scan")
        report.scan, report.word_overlap = implementation_scan(data, make_scorer, resamples=resamples)
    if checklist:
        step("checklists")
        report.checklists = checklists(data, [result.spec for result in report.kernels], make_scorer,
                                       seed=seed, resamples=resamples)
    return report


def checklists(data: ScoredData, specs: Sequence[KernelSpec], make_scorer: ScorerFactory, *, seed: int = 0,
               resamples: int = 1000) -> dict[str, Checklist]:
    """Each kernel's perturbation checklist: fitted on a seeded 4/5 of `data`, run on the rest."""
    train, held = held_out_split(len(data), seed)
    texts = [data.texts[i] for i in train]
    return {spec.label: held_out_checklist(make_scorer(spec).fit(texts, data.scores[train]), texts,
                                           [data.texts[i] for i in held], data.scores[held],
                                           seed=seed, resamples=resamples)
            for spec in specs}


def _humans(data: ScoredData, resamples: int) -> dict[str, Agreement]:
    if not data.extra or not all("judgments" in extra for extra in data.extra):
        return {}
    records = [{"score": score, "judgments": extra["judgments"]} for score, extra in zip(data.scores, data.extra)]
    return human_agreement(records, resamples=resamples)


def implementation_scan(
    data: ScoredData, make_scorer: ScorerFactory, *, resamples: int = 1000
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Leave-one-out of BLEU* at the paper's settings under every tokenizer and smoothing:
    which implementation did the published figures come from? Also how far word-level BLEU* can
    go: with `add1` a pair's BLEU* is positive exactly when the texts share a word, so no tau
    gives an item more neighbours than the texts it shares a word with."""
    rows = []
    word_overlap: dict[str, float] = {}
    for tokenizer in SCAN_TOKENIZERS:
        for smoothing in SCAN_SMOOTHINGS:
            spec = KernelSpec("bleu", {"tokenizer": tokenizer, "smoothing": smoothing, "tau": PAPER_THRESHOLDS["bleu"]})
            scorer = make_scorer(spec)
            rule = scorer.estimator
            assert isinstance(rule, Threshold)  # a spec's tau asks for the threshold rule
            # the paper's a and b, whatever the factory's
            scorer.estimator = Threshold(**{**rule.own_settings(), "min_neighbors": 5, "max_fraction": 0.66})
            similarities = scorer.fit_pairwise(data.texts, data.scores)
            result = cross_validate(similarities, scorer.thresholds_, folds=None, resamples=resamples).agreement
            rows.append({"tokenizer": tokenizer, "smoothing": smoothing, **result.as_dict()})
            if (tokenizer, smoothing) == ("whitespace", "add1"):
                sharing = (similarities.matrix.numpy() > 0).sum(axis=1) - 1  # minus the item itself
                word_overlap = {
                    "fewer_than_a": int((sharing < 5).sum()),
                    "coverage_cap": float(((sharing >= 5) & (sharing <= 0.66 * (len(data) - 1))).mean()),
                }
    return rows, word_overlap


# -- writing ------------------------------------------------------------------------------------


def write_report(report: Report, out_dir: Path | str, page: Path | str | None = None, paper: str | None = None,
                 *, inputs: Mapping[str, Path | str | None] | None = None, overwrite: bool = False) -> Path:
    """Write the PNGs into `out_dir` and the markdown to `page` (default out_dir/report.md),
    with image links relative to the page. Returns the page's path. Written as every output
    is (`data.output.SafeOutput`): all files appear together when complete, never onto one of
    `inputs`, and an existing page is replaced only with `overwrite`."""
    from gpu_neighbors.evaluation import plots

    page = report_page(out_dir, page)
    main = report.kernels[0]
    human_rho = report.humans.get("Human (average)")
    images = report_images(out_dir)

    def link(path: Path) -> str:
        return Path(os.path.relpath(path, page.parent)).as_posix()

    with SafeOutput(report_outputs(out_dir, page), inputs=inputs, overwrite=overwrite) as files:
        plots.plot_kernels(
            [(result.spec.label, result.default.agreement, result.tuned.agreement) for result in report.kernels],
            report.humans, files.create_path(images["kernels"]),
        )
        plots.plot_scatter(
            report.data.scores,
            [(f"{main.spec.label}, given thresholds", main.default.prediction.scores),
             (f"{main.spec.label}, tuned (nested)", main.tuned.prediction.scores)],
            _groups(report.data), files.create_path(images["scatter"]),
        )
        plots.plot_curve(report.main["curve"], files.create_path(images["curve"]))
        plots.plot_calibration(report.main["calibration"], files.create_path(images["calibration"]))
        for parameter, points in report.main["sweeps"].items():
            plots.plot_sweep(
                points, _given(main.swept, parameter), human_rho.spearman if human_rho else None,
                files.create_path(images[f"sweep_{parameter}"]),
            )
        sections = [_intro(report)]
        if paper is not None:
            sections.append(_paper_section(report, paper))
        sections += [
            _kernel_section(report, link(images["kernels"])),
            _tuning_section(report, link(images["scatter"])),
            _sweep_section(report, {parameter: link(images[f"sweep_{parameter}"]) for parameter in SWEPT}),
            _curve_section(report, link(images["curve"])),
            _calibration_section(report, link(images["calibration"])),
        ]
        if report.checklists:
            sections.append(_checklist_section(report))
        files.create().write(("\n\n".join(sections) + "\n").encode("utf-8"))
    return page


def report_page(out_dir: Path | str, page: Path | str | None = None) -> Path:
    """Where the report's markdown goes: `page`, or OUT/report.md."""
    return Path(page) if page is not None else Path(out_dir) / "report.md"


SWEPT: tuple[Parameter, ...] = ("a", "b", "tau")  # the sweeps every report draws, one figure each
IMAGES = ("kernels", "scatter", "curve", "calibration", *(f"sweep_{parameter}" for parameter in SWEPT))


def report_images(out_dir: Path | str) -> dict[str, Path]:
    """Each figure's path in `out_dir`, by its name."""
    return {name: Path(out_dir) / f"{name}.png" for name in IMAGES}


def report_outputs(out_dir: Path | str, page: Path | str | None = None) -> dict[str, Path]:
    """Every file a report writes, by the name an error gives it (the page first): what the
    command checks before the work and `write_report` writes, so an earlier report's figure is
    refused before the minutes of the protocols, not after them."""
    images = {f"--out {path.name}": path for path in report_images(out_dir).values()}
    return {"--page": report_page(out_dir, page), **images}


MAX_SCATTER_GROUPS = 10  # colours of the scatter plot's groups; more (MLQE's source sentences) are one


def _groups(data: ScoredData) -> list[str] | None:
    """Each text's group in the scatter plot (its "source", HUSE's system), where there are few
    enough to tell apart: a source per text (MLQE's source sentences) drew a thousand groups and
    a thousand-line legend, most of a report's minute."""
    sources = [extra.get("source") for extra in data.extra] if data.extra else []
    if not sources or not all(sources) or len({str(source) for source in sources}) > MAX_SCATTER_GROUPS:
        return None
    return [str(source) for source in sources]


def _given(thresholds: Thresholds, parameter: str) -> float:
    return {"a": thresholds.min_neighbors, "b": thresholds.max_fraction, "tau": thresholds.tau}[parameter]


def _rho(result: Agreement) -> str:
    if not math.isfinite(result.spearman):
        return "—"
    interval = ""
    if math.isfinite(result.spearman_low):
        interval = f" [{result.spearman_low:.3f}, {result.spearman_high:.3f}]"
    return f"{result.spearman:.3f}{interval}"


def _p(value: float) -> str:
    return "—" if not math.isfinite(value) else f"{value:.2g}"


def _thresholds(thresholds: Thresholds) -> str:
    return thresholds.summary()


def _fold_summary(result: CrossValidation) -> str:
    """The estimator and the settings chosen across folds: a number's median and range (the
    data-driven tau grid moves a little with each training fold), a whole number's or a
    power's most frequent value."""
    chosen = [fold.thresholds for fold in result.folds]
    total = len(result.folds)

    def mode(values: list[Any]) -> str:
        value, count = Counter(values).most_common(1)[0]
        return f"{value:g} ({count}/{total})"

    def spread(values: list[float]) -> str:
        array = np.array(values)
        return f"{np.median(array):.4g} [{array.min():.4g}, {array.max():.4g}]"

    estimator = chosen[0].estimator
    if estimator == "topk":
        return f"top-k, k {mode([t.top_k for t in chosen])}, p {mode([t.power for t in chosen])}"
    if estimator == "ridge":
        return "ridge, penalty " + ("loo" if chosen[0].penalty is None else spread([t.penalty or 0.0 for t in chosen]))
    text = (f"tau {spread([t.tau for t in chosen])}, a {mode([t.min_neighbors for t in chosen])}, "
            f"b {mode([t.max_fraction for t in chosen])}")
    return text + (f", p {mode([t.power for t in chosen])}" if any(t.power for t in chosen) else "")


def _agreement_row(name: str, result: Agreement, **more: Any) -> dict[str, Any]:
    return {"model": name, **more, "MSE": result.mse, "rho [95% CI]": _rho(result),
            "p": _p(result.spearman_p), "coverage": f"{result.coverage:.3f}"}


def _intro(report: Report) -> str:
    from gpu_neighbors._version import __version__

    s = report.settings
    title = (f"# Reproducing the BLEU Neighbors paper: {s['paper']}" if s.get("paper")
             else f"# Evaluation report: {report.name}")
    command = ["", "Regenerate with:", "", "```bash", s["command"], "```", ""] if s.get("command") else [""]
    return "\n".join([
        title,
        "",
        f"{len(report.data)} scored texts from `{report.name}`. Produced by `gpu-neighbors report` "
        f"(version {__version__}); {_devices_text(report)}.",
        *command,
        "Leave-one-out is the paper's protocol; *tuned (nested)* chooses what the estimator tunes",
        "(top-k: k and p; the threshold rule: tau, a and b) by an inner leave-one-out on each training",
        "fold alone (highest Spearman's rho with coverage >= "
        f"{s['min_coverage']}), so the test item never influences its own settings. Every rho",
        f"has a two-sided p-value and a bootstrap 95% interval ({s['resamples']} resamples of the "
        "covered items); MSE and rho are over covered items, as in the paper.",
    ])


def _devices_text(report: Report) -> str:
    """Where the kernels ran, as the scorers resolved their devices."""
    names = ["the CPU" if device == "cpu" else f"`{device}`"
             for device in sorted({result.device for result in report.kernels})]
    return f"all kernels run on {names[0]} here" if len(names) == 1 else f"kernels run on {' and '.join(names)}"


def _kernel_section(report: Report, image: str) -> str:
    rows = [_agreement_row(name, result, thresholds="—") for name, result in report.humans.items()]
    for result in report.kernels:
        rows.append(_agreement_row(
            result.spec.label, result.default.agreement, thresholds=_thresholds(result.thresholds)
        ))
        rows.append(_agreement_row(
            f"{result.spec.label}, tuned (nested)", result.tuned.agreement, thresholds=_fold_summary(result.tuned),
        ))
    lines = ["## Agreement by kernel (leave-one-out)", "", markdown_table(rows), ""]
    lines += [f"- `{result.spec.label}`: `{result.signature}`" for result in report.kernels]
    if any(result.fluency is not None for result in report.kernels):
        lines.append("- Where the signature says fluency is `on`, every protocol of this report but the intervals' "
                     "calibration stacks the out-of-sample neighbour estimates with the texts' fluency, as `fit` "
                     "does (the stacked model's leave-one-out).")
    lines += [f"- **{label} could not be evaluated**: {reason}" for label, reason in report.failures.items()]
    if report.humans:
        lines.append("- Human rows: each annotator's judgments (/5) against the mean score on the items that "
                     "annotator judged; average = mean over annotators (interval: bootstrap over annotators, "
                     "p: t-test of their rhos), best = lowest MSE and highest rho.")
    lines += ["", f"![Spearman's rho and coverage by kernel]({image})"]
    return "\n".join(lines)


def _tuning_section(report: Report, image: str) -> str:
    main = report.kernels[0]
    kfold_default, kfold_tuned = report.main["kfold_default"], report.main["kfold_tuned"]
    folds = report.settings["folds"]
    rows = [
        _agreement_row("leave-one-out, given", main.default.agreement, thresholds=_thresholds(main.thresholds)),
        _agreement_row("leave-one-out, tuned (nested)", main.tuned.agreement, thresholds=_fold_summary(main.tuned)),
        _agreement_row(f"{folds}-fold, given", kfold_default.agreement, thresholds=_thresholds(main.thresholds)),
        _agreement_row(f"{folds}-fold, tuned (nested)", kfold_tuned.agreement, thresholds=_fold_summary(kfold_tuned)),
    ]
    overall = report.main["tuned_on_all"]
    given, nested = main.default.agreement, main.tuned.agreement
    return "\n".join([
        f"## Tuned against given thresholds (`{main.spec.label}`)",
        "",
        markdown_table(rows),
        "",
        f"What `fit(texts, scores, tune=True)` chooses on all {len(report.data)} texts: "
        f"{_thresholds(overall.thresholds)} (inner leave-one-out rho {fixed(overall.spearman)}, coverage "
        f"{overall.coverage:.3f}, {overall.settings_tried} settings tried"
        + ("" if overall.feasible else f"; no setting reached coverage {overall.min_coverage}, so the widest was taken")
        + f"). That inner rho is in-sample: the honest estimate of what tuning delivers is the nested one, "
        f"rho {fixed(nested.spearman)} at coverage {nested.coverage:.3f} against {fixed(given.spearman)} at "
        f"{given.coverage:.3f} with the given thresholds. Read the given row with care too: thresholds fixed "
        "in advance are out-of-sample only if they were not chosen on this data (the paper chose its "
        "defaults on the HUSE sets themselves).",
        "",
        f"![Estimated against true quality]({image})",
    ])


def _sweep_section(report: Report, images: dict[str, str]) -> str:
    main = report.kernels[0]
    lines = [
        f"## Threshold sweeps (`{main.spec.label}`, leave-one-out)",
        "",
        "Each sweep varies one setting of the paper's threshold rule (tau, a or b) with the others at "
        f"{_thresholds(main.swept)}; all points come from one similarity pass. The rule is the "
        f"paper's whatever the estimator above ({_thresholds(main.thresholds)}), which reads no tau, a or b"
        + ("" if main.thresholds.estimator != "threshold" else " (here the same rule)") + ".",
        "",
    ]
    rows = []
    for parameter, points in report.main["sweeps"].items():
        defined = [point for point in points if math.isfinite(point.agreement.spearman)]
        best = max(defined, key=lambda point: point.agreement.spearman) if defined else None
        given = min(points, key=lambda point: abs(point.value - _given(main.swept, parameter)))
        rows.append({
            "parameter": parameter,
            "range": f"{points[0].value:.4g} .. {points[-1].value:.4g} ({len(points)} values)",
            "rho at given": _rho(given.agreement), "coverage at given": f"{given.agreement.coverage:.3f}",
            "best rho at": "—" if best is None else f"{best.value:.4g}",
            "best rho": "—" if best is None else _rho(best.agreement),
            "coverage there": "—" if best is None else f"{best.agreement.coverage:.3f}",
        })
    lines += [markdown_table(rows), ""]
    lines += [f"![Sweep of {parameter}]({image})" for parameter, image in images.items()]
    return "\n".join(lines)


def _curve_section(report: Report, image: str) -> str:
    rows = [
        {"n": point.size, "rho mean": point.spearman_mean, "rho sd": point.spearman_std,
         "runs with rho": f"{point.defined}/{point.runs}", "coverage mean": point.coverage_mean,
         "coverage sd": point.coverage_std, "MSE mean": point.mse_mean}
        for point in report.main["curve"]
    ]
    return "\n".join([
        f"## Training-set size (`{report.kernels[0].spec.label}`)",
        "",
        f"For each n, {report.settings['runs']} random subsets of n texts (seed {report.settings['seed']}); "
        "each text of a subset is scored by the other n - 1. Mean and sample standard deviation over "
        "subsets (rho over the subsets where it is defined; the plot shows rho where at least half are).",
        "",
        markdown_table(rows, digits=3),
        "",
        f"![Training-set size curve]({image})",
    ])


def _calibration_section(report: Report, image: str) -> str:
    points = report.main["calibration"]
    rows = [{"level": point.level, "empirical coverage": point.coverage, "texts checked": point.checked,
             "mean width": point.mean_width} for point in points]
    return "\n".join([
        f"## Do the intervals hold? (`{report.kernels[0].spec.label}`)",
        "",
        f"{report.settings['folds']}-fold cross-validation (seed {report.settings['seed']}): in each fold "
        "the conformal intervals are calibrated on the training side's exact leave-one-out residuals "
        "alone, then each held-out text with an estimate is checked against its interval.",
        "",
        markdown_table(rows, digits=3),
        "",
        f"![Calibration: nominal against empirical coverage]({image})",
    ])


# -- side by side with the paper ----------------------------------------------------------------


def _checklist_section(report: Report) -> str:
    lines = ["## Perturbation checklist", "",
             f"Each kernel fitted on a seeded 4/5 of the data (seed {report.settings['seed']}); the held-out texts "
             "rated at or above the training median, scored beside degenerate copies of themselves. A copy "
             "passes when its mean estimate lies below the originals' by at least half the gap between the "
             "originals' mean and the training set's lowest-decile mean score; the interval is a bootstrap "
             "over the held-out texts."]
    for label, result in report.checklists.items():
        lines += ["", f"### `{label}`", "", result.table()]
    return "\n".join(lines)


def _paper_section(report: Report, task: str) -> str:
    published = PUBLISHED_TABLE1[task]
    parts = [
        f"## Side by side with the paper ({task})",
        "",
        "Published figures: BLEU Neighbors paper (Ethayarajh and Sadigh), Table 1 and Table 2, and what",
        "its text says about Figures 2-4 (the plotted values themselves are not in the text).",
        "",
        "### Table 1",
        "",
        markdown_table(_table1_rows(report, published)),
    ]
    if report.scan:
        parts += ["", "### Which BLEU* produced the published figures", "", _scan_text(report, published["bleu"])]
    parts += ["", "### Figures 2 and 3: thresholds a and b", "", _figures23_text(report)]
    parts += ["", "### Figure 4: training-set size", "", _figure4_text(report)]
    parts += ["", "### Table 2: cross-task", "", _table2_text(report, task)]
    parts += ["", "### Differences we could not close", "", _differences_text(report, published)]
    return "\n".join(parts)


def _table1_rows(report: Report, published: dict[str, tuple[float, float, float]]) -> list[dict[str, Any]]:
    rows = []
    ours: list[tuple[str, str, Agreement, float | None]] = [
        (name, name, result, None) for name, result in report.humans.items()
    ]
    ours += [(result.spec.label, result.spec.kernel, result.default.agreement, result.thresholds.tau)
             for result in report.kernels]
    for label, key, result, tau in ours:
        if key not in published:
            continue
        mse, rho, coverage = published[key]
        inside = math.isfinite(result.spearman_low) and result.spearman_low <= rho <= result.spearman_high
        rows.append({
            "model (ours)": label,
            "tau ours / paper": "—" if tau is None else f"{tau:g} / {PAPER_THRESHOLDS[key]:g}",
            "MSE paper": mse, "MSE ours": result.mse,
            "rho paper": f"{rho:.3f}", "rho ours [95% CI]": _rho(result),
            "paper rho in our CI": inside,
            "coverage paper": f"{coverage:.2f}", "coverage ours": f"{result.coverage:.3f}",
        })
    return rows


def _scan_distance(row: dict[str, Any], target: tuple[float, float, float]) -> float:
    """How far a variant is from the published (MSE, rho, coverage): rho and coverage gaps plus
    ten times the MSE gap (MSEs are ten times smaller); undefined counts as far."""
    if not math.isfinite(row["spearman"]):
        return math.inf
    return abs(row["spearman"] - target[1]) + abs(row["coverage"] - target[2]) + 10 * abs(row["mse"] - target[0])


def _scan_text(report: Report, target: tuple[float, float, float]) -> str:
    rows = sorted(report.scan, key=lambda row: _scan_distance(row, target))
    table = [{"tokenizer": row["tokenizer"], "smoothing": row["smoothing"], "MSE": row["mse"],
              "rho [95% CI]": _rho(Agreement(**{key: row[key] for key in Agreement.__dataclass_fields__})),
              "coverage": f"{row['coverage']:.3f}",
              "distance": _scan_distance(row, target)} for row in rows]
    best = rows[0]
    overlap = report.word_overlap
    cap = (
        f"and with whitespace tokens {overlap['fewer_than_a']} of the {len(report.data)} items share a word with "
        f"fewer than 5 others, capping coverage at {overlap['coverage_cap']:.3f} for any tau;"
        if overlap else "which caps coverage;"
    )
    return "\n".join([
        "The paper does not say which BLEU implementation, tokenization or smoothing it used. Leave-one-out",
        "at its settings (tau = 0.08, a = 5, b = 0.66) for every tokenizer and smoothing our BLEU* kernel",
        "offers (it equals NLTK's `sentence_bleu` with weights (0, 1/3, 1/3, 1/3) and smoothing methods 0-3),",
        f"sorted by their distance from the published ({target[0]}, {target[1]}, {target[2]}):",
        "|d rho| + |d coverage| + 10 |d MSE|.",
        "",
        markdown_table(table, digits=4),
        "",
        f"The closest is **{best['tokenizer']} tokens with `{best['smoothing']}` smoothing**. `chars` makes every",
        "character (spaces included) a token: this is what NLTK's `sentence_bleu` computes when it is given",
        "raw strings instead of token lists, since it iterates over whatever sequence it receives. Word-level",
        "BLEU* is capped on short texts: an item only has neighbours among texts that share a word",
        "with it (BLEU* is 0 otherwise, under every smoothing),",
        cap,
        "character n-grams are shared far more widely. We read this as strong evidence that the",
        "published BLEU Neighbors figures were computed on character n-grams; the paper speaks of BLEU-4",
        "and n-grams without naming the unit, so this remains an inference from the numbers.",
    ])


def _sweep_value(points: Sequence[SweepPoint], value: float) -> SweepPoint:
    return min(points, key=lambda point: abs(point.value - value))


def _figures23_text(report: Report) -> str:
    sweeps = report.main["sweeps"]
    a_points, b_points = sweeps["a"], sweeps["b"]
    defined_a = [point for point in a_points if math.isfinite(point.agreement.spearman)]
    best_a = max(defined_a, key=lambda point: point.agreement.spearman) if defined_a else None

    def rho_at(points: Sequence[SweepPoint], value: float) -> str:
        return _rho(_sweep_value(points, value).agreement)

    def cov_at(points: Sequence[SweepPoint], value: float) -> str:
        return f"{_sweep_value(points, value).agreement.coverage:.3f}"

    usable_b = [point for point in b_points if point.value >= 0.3 and math.isfinite(point.agreement.spearman)]
    b_rhos = [point.agreement.spearman for point in usable_b]
    plateau = b_points[-1].agreement.coverage
    plateau_b = next((point.value for point in b_points if point.agreement.coverage >= plateau), math.nan)
    rows = [
        {"claim in the paper (all tasks)": "rho rises with a, peaks at a = 30 or 35, then declines",
         "ours": f"rho {rho_at(a_points, 1)} at a=1, {rho_at(a_points, 5)} at a=5, "
                 + ("undefined everywhere" if best_a is None else
                    f"peak {best_a.agreement.spearman:.3f} at a={best_a.value:g} "
                    f"(coverage {best_a.agreement.coverage:.3f})")
                 + f", {rho_at(a_points, 40)} at a=40"},
        {"claim in the paper (all tasks)": "only open-ended generation is sensitive to b; summarization is not",
         "ours": "—" if not b_rhos else f"rho between {min(b_rhos):.3f} and {max(b_rhos):.3f} for b in [0.3, 1]"},
        {"claim in the paper (all tasks)": "coverage falls (linearly) as a increases",
         "ours": ", ".join(f"{cov_at(a_points, a)} at a={a}" for a in (1, 5, 10, 20, 40))},
        {"claim in the paper (all tasks)": "coverage rises linearly with b, then plateaus",
         "ours": ", ".join(f"{cov_at(b_points, b)} at b={b}" for b in (0.02, 0.1, 0.2, 0.4))
                 + f"; plateau {plateau:.3f} from b={plateau_b:g}"},
    ]
    return markdown_table(rows)


def _figure4_text(report: Report) -> str:
    curve = report.main["curve"]
    rows = [{"claim in the paper": "with more data both rho and coverage improve, with diminishing returns",
             "ours": "; ".join(f"n={point.size}: rho {fixed(point.spearman_mean)}, coverage {point.coverage_mean:.3f}"
                               for point in curve)},
            {"claim in the paper": "variation across random subsets drops with more data",
             "ours": _variation_text(curve, len(report.data))},
            {"claim in the paper": "75 examples give rho > 0.30 with coverage > 60% (dialogue and generation; "
                                   "no number is given for summarization)",
             "ours": _at_size(curve, 75)}]
    return markdown_table(rows)


def _variation_text(curve: Sequence[CurvePoint], total: int) -> str:
    """rho's spread across subsets at the smallest size where most subsets have one and at the
    largest size short of all `total` texts (where every subset is the whole set, it has none)."""
    partial = [point for point in curve if point.size < total]
    whole = f" (at n={total} every subset is the whole set)" if curve[-1].size == total else ""
    if not partial:
        return "no size short of all the texts was run" + whole
    first = next((point for point in partial if 2 * point.defined >= point.runs), partial[0])
    last = partial[-1]
    return (f"rho sd {cell(first.spearman_std, 3)} at n={first.size}, {cell(last.spearman_std, 3)} "
            f"at n={last.size}{whole}")


def _at_size(curve: Sequence[CurvePoint], size: int) -> str:
    matches = [point for point in curve if point.size == size]
    if not matches:
        return f"(n={size} not among the sizes run)"
    point = matches[0]
    return (f"n={size}: rho {fixed(point.spearman_mean)} ± {fixed(point.spearman_std)}, "
            f"coverage {point.coverage_mean:.3f}")


def _table2_text(report: Report, task: str) -> str:
    main = report.kernels[0].default.agreement
    return "\n".join([
        f"Only the {task} data is available here, so of the paper's 3 x 3 table only the diagonal cell",
        f"{task} -> {task} can be reproduced; it is leave-one-out, the same figure as Table 1: paper "
        f"{PUBLISHED_TABLE2[task][task]:.3f}, ours {_rho(main)} (`{report.kernels[0].spec.label}`).",
        "The other cells need the HUSE dialogue and generation sets; `gpu-neighbors cross-task --train A --test B`",
        "computes them when those files are at hand.",
    ])


def _settings_text(result: KernelResult) -> str:
    """The kernel's own settings from its signature."""
    return ", ".join(f"{key} `{value}`" for key, value in result.signature.kernel_settings)


def _human_gaps(humans: dict[str, Agreement], published: dict[str, tuple[float, float, float]]) -> tuple[float, float]:
    """The largest |ours - published| of the human rows' MSE and rho (NaN when one is undefined)."""
    rows = [(humans[name], published[name]) for name in ("Human (best)", "Human (average)")]
    return (max(abs(ours.mse - paper[0]) for ours, paper in rows),
            max(abs(ours.spearman - paper[1]) for ours, paper in rows))


def _human_gaps_text(humans: dict[str, Agreement], published: dict[str, tuple[float, float, float]]) -> str:
    """What the measured gaps say, and the explanation only where the gap is that small."""
    mse_gap, rho_gap = _human_gaps(humans, published)
    mse = "The MSEs match to 1e-4" if mse_gap <= 1e-4 else f"The MSEs differ by up to {fixed(mse_gap, 4)}"
    if 1e-3 <= rho_gap < 1e-2:
        return (f"{mse}; the rhos differ in the third decimal, which a different treatment of ties or of "
                "annotators whose judgments are constant (rho undefined; we leave them out of the average) "
                "would explain. The paper does not describe it.")
    rho = "match to 1e-3" if rho_gap < 1e-3 else f"differ by up to {fixed(rho_gap)}"
    return f"{mse}; the rhos {rho}."


def _published_in(ours: Agreement, rho: float) -> str:
    """Whether the published rho lies inside our 95% interval, or that the interval is undefined
    (an undefined interval holds nothing, but no figure lies outside it either)."""
    if not math.isfinite(ours.spearman_low):
        return "our 95% interval is undefined"
    where = "inside" if ours.spearman_low <= rho <= ours.spearman_high else "outside"
    return f"the published rho is {where} our 95% interval [{ours.spearman_low:.3f}, {ours.spearman_high:.3f}]"


def _differences_text(report: Report, published: dict[str, tuple[float, float, float]]) -> str:
    items = []
    bleu = next((result for result in report.kernels if result.spec.kernel == "bleu"), None)
    if bleu is not None:
        ours = bleu.default.agreement
        mse, rho, coverage = published["bleu"]
        tau_points = [point for point in report.main["sweeps"]["tau"]
                      if abs(point.value - bleu.swept.tau) <= 0.01 and math.isfinite(point.agreement.spearman)]
        spread = ""
        if bleu is report.kernels[0] and len(tau_points) > 1:
            values = [point.agreement.spearman for point in tau_points]
            spread = (f" rho moves between {min(values):.3f} and {max(values):.3f} for tau within 0.01 of "
                      f"{bleu.swept.tau:g} (tau sweep), so small implementation details move it by this much.")
        items.append(
            f"**BLEU Neighbors (`{bleu.spec.label}`)**: MSE {fixed(ours.mse, 4)} against {mse}, coverage "
            f"{ours.coverage:.3f} against {coverage:.2f}"
            + (" (equal at the paper's two decimals)" if round(ours.coverage, 2) == coverage else "")
            + f", rho {fixed(ours.spearman)} against {rho:.3f}: {_published_in(ours, rho)}.{spread} The paper names"
            " neither its NLTK version nor its preprocessing, so the last digits cannot be pinned down."
        )
    if report.humans:
        best, average = report.humans["Human (best)"], report.humans["Human (average)"]
        items.append(
            f"**Human rows**: MSE {fixed(best.mse, 4)} / {fixed(average.mse, 4)} against "
            f"{published['Human (best)'][0]:.4f} / "
            f"{published['Human (average)'][0]:.4f}, rho {fixed(best.spearman)} / {fixed(average.spearman)} against "
            f"{published['Human (best)'][1]:.3f} / {published['Human (average)'][1]:.3f} (best / average). "
            + _human_gaps_text(report.humans, published)
        )
    for kernel, why in KERNEL_CAVEATS.items():
        result = next((result for result in report.kernels if result.spec.kernel == kernel), None)
        if result is None:
            continue
        ours = result.default.agreement
        mse, rho, coverage = published[kernel]
        covered = int(round(ours.coverage * ours.n))
        items.append(
            f"**{kernel} (`{result.spec.label}`)**: MSE {fixed(ours.mse, 4)} against {mse:.4f}, rho "
            f"{fixed(ours.spearman)} against {rho:.3f} ({_published_in(ours, rho)}), coverage {ours.coverage:.3f} "
            f"against {coverage:.2f}, over {covered} covered items. " + why.format(settings=_settings_text(result))
        )
    missing = [kernel for kernel in ("rouge", "meteor", "bertscore")
               if all(result.spec.kernel != kernel for result in report.kernels)]
    if missing:
        items.append("Not run in this report: " + ", ".join(missing)
                     + (" (" + "; ".join(f"{label}: {reason}" for label, reason in report.failures.items()) + ")"
                        if report.failures else "") + ".")
    items.append(
        "**Figures 2-4** are plots whose values are not in the paper's text; we compare what the text says "
        "about them (tables above). Where our curves disagree with a claim made for all tasks, the claim may "
        "rest on the dialogue and generation sets, which have more neighbours per item."
    )
    return "\n".join(f"- {item}" for item in items)
