"""PNG figures for the report (matplotlib's object API with the Agg canvas: no display, no
global pyplot state). Spearman's rho is always drawn with its 95% interval and coverage on a
second axis, as the paper's Figures 2-4 pair them."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

try:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
except ImportError:
    raise ImportError("the figures need matplotlib: pip install 'gpu-neighbors[report]'") from None

from gpu_neighbors.core.files import naming
from gpu_neighbors.evaluation.agreement import Agreement
from gpu_neighbors.evaluation.calibration import CoveragePoint
from gpu_neighbors.evaluation.protocols import CurvePoint, SweepPoint
from gpu_neighbors.evaluation.systems import SystemComparison

RHO_COLOR = "tab:blue"
COVERAGE_COLOR = "tab:orange"
TUNED_COLOR = "tab:green"
DPI = 130
PARAMETER_LABELS = {
    "a": "a (fewest neighbours for an estimate)",
    "b": "b (most neighbours, share of the training set)",
    "tau": "tau (similarity threshold)",
}


def _figure(width: float = 7.0, height: float = 4.2) -> Figure:
    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Figure, path: Path) -> Path:
    with naming(path):  # a full disk's error names the image
        figure.savefig(path, dpi=DPI, bbox_inches="tight", format="png")  # the path may be a .partial
    return path


def plot_kernels(
    rows: Sequence[tuple[str, Agreement, Agreement]], humans: Mapping[str, Agreement], path: Path
) -> Path:
    """Leave-one-out rho per kernel, given and tuned (nested) thresholds side by side with
    95% intervals; coverage as points on the right axis; human rows as reference lines."""
    figure = _figure(max(6.0, 1.6 * len(rows) + 3.0), 4.6)
    axis = figure.add_subplot()
    positions = np.arange(len(rows))
    width = 0.38
    given = [result for _, result, _ in rows]
    tuned = [result for _, _, result in rows]
    for offset, results, label, color in ((-width / 2, given, "given thresholds", RHO_COLOR),
                                          (width / 2, tuned, "tuned (nested)", TUNED_COLOR)):
        values = np.array([result.spearman for result in results])
        errors = np.array([[result.spearman - result.spearman_low,
                            result.spearman_high - result.spearman] for result in results]).T
        axis.bar(positions + offset, np.nan_to_num(values), width, yerr=np.nan_to_num(errors),
                 capsize=3, color=color, alpha=0.85, label=f"rho, {label}")
    for (name, result), style in zip(humans.items(), (":", "--")):
        axis.axhline(result.spearman, color="gray", linestyle=style, linewidth=1, label=f"rho, {name}")
    axis.set_xticks(positions, [_wrap(row[0]) for row in rows], fontsize=8)
    axis.set_ylabel("Spearman's rho (95% bootstrap interval)")
    axis.axhline(0, color="black", linewidth=0.6)
    coverage_axis = axis.twinx()
    markers = ((-width / 2, given, "o", "coverage, given"), (width / 2, tuned, "s", "coverage, tuned"))
    for offset, results, marker, label in markers:
        coverage_axis.plot(positions + offset, [result.coverage for result in results], marker,
                           color=COVERAGE_COLOR, markeredgecolor="black", label=label)
    coverage_axis.set_ylim(0, 1.05)
    coverage_axis.set_ylabel("coverage", color=COVERAGE_COLOR)
    _legend(figure, axis, coverage_axis)
    axis.set_title("Leave-one-out agreement by kernel")
    return _save(figure, path)


def plot_sweep(
    points: Sequence[SweepPoint], given: float, human_rho: float | None, path: Path
) -> Path:
    """rho (band: 95% interval) and coverage as one threshold varies (paper Figures 2 and 3)."""
    parameter = points[0].parameter
    values = np.array([point.value for point in points])
    rho = np.array([point.agreement.spearman for point in points])
    low = np.array([point.agreement.spearman_low for point in points])
    high = np.array([point.agreement.spearman_high for point in points])
    figure = _figure()
    axis = figure.add_subplot()
    axis.plot(values, rho, color=RHO_COLOR, label="Spearman's rho")
    axis.fill_between(values, low, high, color=RHO_COLOR, alpha=0.2, label="95% interval")
    if human_rho is not None and np.isfinite(human_rho):
        axis.axhline(human_rho, color="gray", linestyle=":", label="rho, Human (average)")
    axis.axvline(given, color="black", linestyle="--", linewidth=0.8, label=f"given {parameter} = {given:g}")
    axis.set_xlabel(PARAMETER_LABELS[parameter])
    axis.set_ylabel("Spearman's rho (leave-one-out)", color=RHO_COLOR)
    coverage_axis = axis.twinx()
    coverage_axis.plot(values, [point.agreement.coverage for point in points], color=COVERAGE_COLOR,
                       linestyle="--", label="coverage")
    coverage_axis.set_ylim(0, 1.05)
    coverage_axis.set_ylabel("coverage", color=COVERAGE_COLOR)
    _legend(figure, axis, coverage_axis)
    axis.set_title(f"Sweep of {parameter}, other thresholds fixed")
    return _save(figure, path)


def plot_curve(points: Sequence[CurvePoint], path: Path) -> Path:
    """Training-size curve: mean over random subsets, band = one standard deviation (Figure 4).
    rho is drawn only where at least half the subsets have one (a mean of one or two undefined-
    or-extreme values would dominate the axis)."""
    sizes = np.array([point.size for point in points])
    figure = _figure()
    axis = figure.add_subplot()
    enough = np.array([2 * point.defined >= point.runs for point in points])
    rho = np.where(enough, [point.spearman_mean for point in points], np.nan)
    rho_sd = np.nan_to_num(np.array([point.spearman_std for point in points]))
    axis.plot(sizes, rho, marker="o", color=RHO_COLOR, label="Spearman's rho (mean)")
    axis.fill_between(sizes, rho - rho_sd, rho + rho_sd, color=RHO_COLOR, alpha=0.2, label="rho ± 1 sd")
    axis.set_xlabel("subset size n (each item scored by the other n - 1)")
    axis.set_ylabel("Spearman's rho", color=RHO_COLOR)
    coverage_axis = axis.twinx()
    coverage = np.array([point.coverage_mean for point in points])
    coverage_sd = np.nan_to_num(np.array([point.coverage_std for point in points]))
    coverage_axis.plot(sizes, coverage, marker="s", linestyle="--", color=COVERAGE_COLOR, label="coverage (mean)")
    coverage_axis.fill_between(sizes, np.clip(coverage - coverage_sd, 0, 1), np.clip(coverage + coverage_sd, 0, 1),
                               color=COVERAGE_COLOR, alpha=0.15, label="coverage ± 1 sd")
    coverage_axis.set_ylim(0, 1.05)
    coverage_axis.set_ylabel("coverage", color=COVERAGE_COLOR)
    _legend(figure, axis, coverage_axis)
    axis.set_title(f"Training-set size ({points[0].runs} random subsets per size)")
    return _save(figure, path)


def plot_scatter(
    truth: np.ndarray,
    panels: Sequence[tuple[str, np.ndarray]],
    groups: Sequence[str] | None,
    path: Path,
) -> Path:
    """Estimated vs true quality of the covered items, one panel per setting."""
    figure = _figure(5.0 * len(panels), 4.6)
    axes = figure.subplots(1, len(panels), sharex=True, sharey=True, squeeze=False)[0]
    finite = np.concatenate([truth, *[estimates[np.isfinite(estimates)] for _, estimates in panels]])
    limits = (float(finite.min()) - 0.02, float(finite.max()) + 0.02)
    labels = np.array(groups) if groups is not None else np.array(["items"] * truth.size)
    for axis, (title, estimates) in zip(axes, panels):
        covered = np.isfinite(estimates)
        for group in sorted(set(labels.tolist())):
            chosen = covered & (labels == group)
            axis.scatter(truth[chosen], estimates[chosen], s=14, alpha=0.7, label=group)
        axis.plot(limits, limits, color="gray", linewidth=0.8, linestyle=":", label="estimate = truth")
        axis.set_xlim(limits)
        axis.set_ylim(limits)
        axis.set_xlabel("true quality q")
        axis.set_title(f"{title}\n({int(covered.sum())} of {truth.size} items covered)", fontsize=10)
    axes[0].set_ylabel("estimated quality")
    axes[-1].legend(loc="upper left", fontsize=8)
    return _save(figure, path)


def plot_calibration(points: Sequence[CoveragePoint], path: Path) -> Path:
    """Empirical against nominal coverage of the intervals, with a binomial 95% band around
    the diagonal (what sampling alone would give with as many checked texts)."""
    figure = _figure(4.8, 4.4)
    axis = figure.subplots()
    nominal = np.array([point.level for point in points])
    checked = max(min(point.checked for point in points), 1)
    band = 1.96 * np.sqrt(nominal * (1 - nominal) / checked)
    axis.fill_between(nominal, nominal - band, nominal + band, color="gray", alpha=0.2, label="binomial 95% band")
    axis.plot([0, 1], [0, 1], color="gray", linewidth=0.8, linestyle=":", label="empirical = nominal")
    axis.plot(nominal, [point.coverage for point in points], marker="o", color=RHO_COLOR, label="empirical")
    axis.set_xlim(min(nominal) - 0.05, 1.0)
    axis.set_ylim(min(nominal) - 0.1, 1.0)
    axis.set_xlabel("nominal coverage (level)")
    axis.set_ylabel("share of held-out texts inside their interval")
    axis.legend(loc="upper left", fontsize=8)
    return _save(figure, path)


def _legend(figure: Figure, *axes) -> None:
    handles, labels = [], []
    for axis in axes:
        more_handles, more_labels = axis.get_legend_handles_labels()
        handles += more_handles
        labels += more_labels
    figure.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3, fontsize=8, frameon=False)


def _wrap(label: str, width: int = 16) -> str:
    parts = label.split(":")
    lines, line = [], ""
    for part in parts:
        piece = part if not line else f":{part}"
        if line and len(line) + len(piece) > width:
            lines.append(line)
            line = part
        else:
            line += piece
    return "\n".join([*lines, line])


def plot_systems(panels: Sequence[tuple[str, SystemComparison]], path: Path) -> Path:
    """Each system's mean with its 95% bootstrap interval, one panel per comparison (the
    candidates' estimates; the training set's leave-one-out estimates and human scores),
    systems in the first panel's order. The panels share one scale, so an estimate that shrinks
    differences between systems shows as points closer together than the human ones."""
    order = [row.system for row in panels[0][1].systems]
    figure = _figure(max(5.0, 0.9 * len(order) + 2.5) * len(panels) * 0.8 + 1.0, 4.2)
    axes = figure.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    for axis, (title, comparison) in zip(axes, panels):
        rows = {row.system: row for row in comparison.systems}
        names = [name for name in order if name in rows] + [name for name in rows if name not in order]
        means = np.array([rows[name].mean for name in names])
        errors = np.array([[rows[name].mean - rows[name].low, rows[name].high - rows[name].mean] for name in names]).T
        axis.errorbar(np.arange(len(names)), means, yerr=np.nan_to_num(errors), fmt="o", color=RHO_COLOR,
                      ecolor="black", capsize=4)
        axis.set_xticks(np.arange(len(names)), [_wrap(name) for name in names], fontsize=8)
        axis.set_xlim(-0.5, len(names) - 0.5)
        axis.set_title(title, fontsize=10)
        axis.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("mean (95% bootstrap interval)")
    return _save(figure, path)
