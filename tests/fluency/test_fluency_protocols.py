"""The pairwise protocols (crossval, curve, sweep, report) apply fluency where the fitted scorer
uses it: each split's out-of-sample neighbour estimates stacked with the texts' fluency, the
stacked model's own leave-one-out (what `fit` calibrates on), so leave-one-out there is the
figure `fit` prints; without fluency in use, the neighbour estimate alone, as before."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from conftest import write_jsonl
from fluency_model import tiny_model
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.cli import main
from gpu_neighbors.estimators import TopK
from gpu_neighbors.data import read_scored
from gpu_neighbors.evaluation.protocols import SplitFluency, cross_validate, learning_curve
from gpu_neighbors.evaluation.report import KernelSpec, _kernel_section, build_report
from gpu_neighbors.fluency import Fluency

TRAIN = 150


@pytest.fixture(scope="module")
def setup(tmp_path_factory, huse_records):
    folder = tmp_path_factory.mktemp("fluency_protocols")
    model = tiny_model(folder / "model", [record["text"] for record in huse_records])
    data = write_jsonl(folder / "data.jsonl", huse_records[:TRAIN])
    return model, data


def run_json(capsys, argv: list[str]) -> dict:
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # HUSE repeats two texts
        assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def fitted(model, records) -> NeighborsScorer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return NeighborsScorer(fluency=Fluency(model, use="always", dtype="float32"), device="cpu",
                               estimator=TopK(tuning="never")).fit([r["text"] for r in records], [r["score"] for r in records])


def test_leave_one_out_is_the_figure_fit_prints(setup, huse_records):
    """crossval's leave-one-out, and a curve's subset of every item, stack as `fit` did: rho
    without and with fluency as the signature states them."""
    model, _ = setup
    scorer = fitted(model, huse_records[:TRAIN])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the kernel chosen on all items: measured here, not judged
        similarities, fluency = scorer.splits_pass(), SplitFluency.of(scorer)
    assert fluency is not None and scorer.fluency_selection_ is not None
    stacked = cross_validate(similarities, scorer.thresholds_, folds=None, fluency=fluency).agreement.spearman
    plain = cross_validate(similarities, scorer.thresholds_, folds=None).agreement.spearman
    assert stacked == pytest.approx(scorer.fluency_selection_["with"], abs=1e-12)
    assert plain == pytest.approx(scorer.fluency_selection_["without"], abs=1e-12) and stacked != plain
    whole = learning_curve(similarities, scorer.thresholds_, sizes=[TRAIN], runs=1, fluency=fluency)[0]
    assert whole.spearman_mean == pytest.approx(stacked, abs=1e-12)


def test_without_fluency_in_use_protocols_score_as_before(setup, huse_records):
    """auto leaves fluency out where a random model knows nothing of HUSE's scores: no split
    fluency, so the protocols' figures are the neighbour estimate's."""
    model, _ = setup
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        off = NeighborsScorer(fluency=Fluency(model, dtype="float32"), device="cpu").fit(
            [r["text"] for r in huse_records[:TRAIN]], [r["score"] for r in huse_records[:TRAIN]])
    assert off.stacking_ is None and SplitFluency.of(off) is None and off.training_fluency() is None


@pytest.mark.parametrize("argv", [["crossval", "--folds", "5", "--no-baselines"], ["curve", "--sizes", "60,150",
                                                                                     "--runs", "2"],
                                  ["sweep", "--parameter", "a", "--values", "3,5"]])
def test_every_pairwise_protocol_applies_it(setup, argv, capsys):
    model, data = setup
    common = [*argv, "--data", str(data), "--device", "cpu", "--json"]
    with_fluency = run_json(capsys, [*common, "--fluency", str(model)])
    without = run_json(capsys, [*common, "--fluency", "none"])
    assert "fluency:" in with_fluency["signature"] and "fluency:" not in without["signature"]
    rho = "spearman_mean" if argv[0] == "curve" else "spearman"
    moved = [a[rho] != b[rho] for a, b in zip(with_fluency["rows"], without["rows"])]
    assert all(moved) and len(moved) == len(without["rows"])
    if argv[0] == "crossval":
        assert with_fluency["rows"][0]["model"] == "neighbours + fluency" and without["rows"][0]["model"] == "neighbours"


def test_report_stacks_where_fluency_is_on(setup, huse_records):
    """Every protocol of the report stacks the kernel's estimates with fluency: its
    leave-one-out row is the figure `fit` printed, and it says so."""
    model, data = setup
    scorer = fitted(model, huse_records[:TRAIN])
    make = lambda spec: NeighborsScorer(fluency=Fluency(model, use="always", dtype="float32"), device="cpu",  # noqa: E731
                                        estimator=TopK(tuning="never"), **spec.parts())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = build_report(read_scored(data), [KernelSpec(scorer.kernel_name)], make_scorer=make, folds=2, runs=1,
                              sizes=[TRAIN], resamples=0)
    main_kernel = report.kernels[0]
    assert main_kernel.fluency is not None and scorer.fluency_selection_ is not None
    assert main_kernel.default.agreement.spearman == pytest.approx(scorer.fluency_selection_["with"], abs=1e-12)
    assert report.main["curve"][0].spearman_mean == pytest.approx(scorer.fluency_selection_["with"], abs=1e-12)
    assert "stacks the out-of-sample neighbour estimates with the texts' fluency" in _kernel_section(report, "k.png")
