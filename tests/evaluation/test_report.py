"""The report: kernel specs, every section and plot on a small real data set, a kernel that
fails to load, and the character tokenizer the reproduction rests on (against NLTK)."""
from __future__ import annotations

import dataclasses
import json
import re
import warnings

import numpy as np
import pytest
from nltk.translate.bleu_score import sentence_bleu

from conftest import TEST_DEVICE
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.kernels.parts import Bleu
from gpu_neighbors.cli import main
from gpu_neighbors.data import read_scored
from gpu_neighbors.evaluation.agreement import Agreement
from gpu_neighbors.evaluation.tables import cell
from gpu_neighbors.evaluation.report import (
    PUBLISHED_TABLE1,
    KernelSpec,
    _human_gaps_text,
    _intro,
    build_report,
    write_report,
)

PNGS = {"kernels.png", "scatter.png", "curve.png", "sweep_a.png", "sweep_b.png", "sweep_tau.png", "calibration.png"}


def where_tests_run(report) -> str:
    """How the page names the device the scorers ran on: the CPU, or the test device."""
    if TEST_DEVICE == "cpu":
        return "the CPU"
    assert all(result.device.startswith(TEST_DEVICE) for result in report.kernels)
    return f"`{report.kernels[0].device}`"


def test_kernel_spec_parsing():
    spec = KernelSpec.parse("bleu:tokenizer=chars:smoothing=none:tau=0.1:lowercase=true")
    assert spec.kernel == "bleu"
    assert spec.options == {"tokenizer": "chars", "smoothing": "none", "tau": 0.1, "lowercase": True}
    assert spec.label == "bleu:tokenizer=chars:smoothing=none:tau=0.1:lowercase=True"
    for bad in ("bleu:colour=red", "bleu:tau", "bleu:tau=high", ":tau=0.1"):
        with pytest.raises(ValueError, match="kernel spec"):
            KernelSpec.parse(bad)


@pytest.fixture(scope="module")
def small_data(tmp_path_factory, huse_records):
    path = tmp_path_factory.mktemp("report") / "small.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in huse_records[:40]), encoding="utf-8")
    return path


@pytest.fixture
def plotting():
    """matplotlib (the [report] extra), which writing the plots needs: a test that writes them
    skips where it is absent (a bare environment; the GPU check's summary lists the skip)."""
    return pytest.importorskip("matplotlib.image")


def test_report_writes_every_section_and_plot(tmp_path, small_data, plotting):
    data = read_scored(small_data, keep_fields=("judgments", "source"))
    specs = [KernelSpec.parse(text) for text in ("bleu:tokenizer=chars:smoothing=none", "bleu", "nosuch")]
    report = build_report(
        data, specs, make_scorer=lambda spec: NeighborsScorer(device="cpu", **spec.parts()),
        folds=4, runs=2, sizes=[20, 40], resamples=20, paper="summarization",
    )
    page = write_report(report, tmp_path / "assets", page=tmp_path / "docs" / "page.md", paper="summarization")
    text = page.read_text(encoding="utf-8")
    links = set(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text))
    assert links == {f"../assets/{name}" for name in PNGS}
    for name in PNGS:
        pixels = plotting.imread(tmp_path / "assets" / name)
        assert pixels.shape[0] > 300 and pixels.shape[1] > 500
    for heading in ("## Agreement by kernel", "## Tuned against given thresholds", "## Threshold sweeps",
                    "## Training-set size", "## Do the intervals hold?", "### Table 1", "### Which BLEU* produced", "### Figures 2 and 3",
                    "### Figure 4", "### Table 2", "### Differences we could not close"):
        assert heading in text
    assert "**nosuch could not be evaluated**: ValueError: unknown kernel 'nosuch'" in text
    assert "| Human (best) |" in text and "| Human (average) |" in text
    scan_rows = [line for line in text.splitlines() if re.match(r"\| (whitespace|13a|chars) \| ", line)]
    assert len(scan_rows) == 12  # three tokenizers x four smoothings
    # the first kernel drives the sweeps, and its leave-one-out equals the scorer's own
    main_kernel = report.kernels[0]
    direct = NeighborsScorer(kernel=Bleu(smoothing="none", tokenizer="chars"), device="cpu")
    loo = direct.fit(data.texts, data.scores).leave_one_out()
    np.testing.assert_array_equal(main_kernel.default.prediction.scores, loo.scores)
    # the page states what was computed: the device the scorers ran on, the measured MSE gap
    assert f"all kernels run on {where_tests_run(report)} here" in text
    published = PUBLISHED_TABLE1["summarization"]
    mse_gap = max(abs(report.humans[name].mse - published[name][0]) for name in ("Human (best)", "Human (average)"))
    matched = "The MSEs match to 1e-4" in text
    assert matched == (mse_gap <= 1e-4)
    assert matched or f"The MSEs differ by up to {mse_gap:.4f}" in text


def test_report_claims_follow_the_computed_values(small_data):
    data = read_scored(small_data)
    report = build_report(data, [KernelSpec("bleu")], make_scorer=lambda spec: NeighborsScorer(device="cpu"),
                          folds=2, runs=1, sizes=[20], resamples=0)
    assert f"all kernels run on {where_tests_run(report)} here" in _intro(report)
    report.kernels[0] = dataclasses.replace(report.kernels[0], device="cpu")  # the wording, wherever tests run
    assert "all kernels run on the CPU here" in _intro(report)
    report.kernels.append(dataclasses.replace(report.kernels[0], device="cuda:0"))
    assert "kernels run on the CPU and `cuda:0`." in _intro(report)
    report.kernels[:] = report.kernels[1:]
    assert "all kernels run on `cuda:0` here" in _intro(report)

    published = PUBLISHED_TABLE1["summarization"]  # MSE 0.0200 / 0.0802, rho 0.921 / 0.405

    def humans(best: tuple[float, float], average: tuple[float, float]) -> dict[str, Agreement]:
        return {name: Agreement(n=10, mse=mse, spearman=rho, pearson=rho, coverage=1.0)
                for name, (mse, rho) in (("Human (best)", best), ("Human (average)", average))}

    close = _human_gaps_text(humans((0.02005, 0.923), (0.0802, 0.411)), published)
    assert close.startswith("The MSEs match to 1e-4; the rhos differ in the third decimal, which")
    far = _human_gaps_text(humans((0.0300, 0.921), (0.0802, 0.605)), published)
    assert far == "The MSEs differ by up to 0.0100; the rhos differ by up to 0.200."
    assert _human_gaps_text(humans((0.02, 0.9212), (0.0802, 0.405)), published) == \
        "The MSEs match to 1e-4; the rhos match to 1e-3."


def test_undefined_figures_read_as_a_dash_in_the_page_s_prose_too(tmp_path, small_data, plotting):
    """A tau at which no text has neighbours leaves the given thresholds' rho, MSE and interval
    undefined: the tables showed a dash, but the prose wrote "MSE nan", "rho nan ± nan" and "the
    published rho is outside our 95% interval [nan, nan]"."""
    data = read_scored(small_data, keep_fields=("judgments",))
    report = build_report(data, [KernelSpec.parse("bleu:tau=0.99")],
                          make_scorer=lambda spec: NeighborsScorer(device="cpu", **spec.parts()),
                          folds=2, runs=1, sizes=[20, 40], resamples=20, paper="summarization")
    assert report.kernels[0].default.agreement.coverage == 0
    text = write_report(report, tmp_path, paper="summarization").read_text(encoding="utf-8")
    assert re.findall(r".{30}\bnan\b.{10}", text) == []
    assert "rho — against 0.325: our 95% interval is undefined" in text
    assert "rho — ± —" in text or "n=40: rho —" in text


def test_the_figure_4_claims_read_the_curve_as_run(small_data):
    """With --sizes 30,20 on 40 texts the page said "rho sd ... at n=30, ... at n=30 (at n=20 every
    subset is the whole set)": the prose took the sizes as sorted and the last one as all texts."""
    from gpu_neighbors.evaluation.report import _figure4_text

    data = read_scored(small_data)
    report = build_report(data, [KernelSpec("bleu")], make_scorer=lambda spec: NeighborsScorer(device="cpu"),
                          folds=2, runs=3, sizes=[30, 20], resamples=0)
    assert [point.size for point in report.main["curve"]] == [20, 30]  # table, plot and prose ascending
    text = _figure4_text(report)
    assert "whole set" not in text
    first, last = report.main["curve"]
    assert f"rho sd {cell(first.spearman_std, 3)} at n=20, {cell(last.spearman_std, 3)} at n=30" in text
    report = build_report(data, [KernelSpec("bleu")], make_scorer=lambda spec: NeighborsScorer(device="cpu"),
                          folds=2, runs=3, sizes=[20, 40], resamples=0)
    assert "at n=20 (at n=40 every subset is the whole set)" in _figure4_text(report)


def test_report_needs_a_working_kernel(small_data):
    data = read_scored(small_data)
    with pytest.raises(ValueError, match="no kernel could be evaluated"):
        build_report(data, [KernelSpec("nosuch")], resamples=0)


def test_cli_report(tmp_path, small_data, capsys, plotting):
    argv = ["report", "--data", str(small_data), "--out", str(tmp_path), "--kernels", "bleu",
            "--folds", "3", "--runs", "2", "--sizes", "20,40", "--resamples", "10", "--device", "cpu"]
    assert main(argv) == 0
    assert "report ->" in capsys.readouterr().err
    assert {path.name for path in tmp_path.iterdir()} == PNGS | {"report.md"}


def test_character_tokens_equal_nltk_on_raw_strings(huse_texts):
    """NLTK's sentence_bleu given strings iterates characters: the chars tokenizer must match."""
    texts = huse_texts[:12] + ["a", "ab ab ab", "naïve café 東京", "the the the the"]
    scorer = NeighborsScorer(kernel=Bleu(smoothing="none", tokenizer="chars"), device="cpu").fit(texts,
                             np.zeros(len(texts)))
    ours = scorer.similarity(texts).numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NLTK warns about zero n-gram counts
        nltk = np.array([[sentence_bleu([s], x, weights=(0, 1 / 3, 1 / 3, 1 / 3)) for s in texts] for x in texts])
    np.testing.assert_allclose(ours, nltk, atol=1e-9)
    assert (ours > 0.08).sum() > len(texts)  # character n-grams give neighbours beyond the diagonal
