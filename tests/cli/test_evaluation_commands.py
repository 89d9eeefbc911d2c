"""Issue 53, what a new user met in the evaluation commands: every model checked before the
work, rows printed as they finish and kept when a later one fails, the baseline row from the
project's exact leave-one-out kernel ridge (or left out), the cost in --help, one warning
per text, and report rows that name their estimator and agree with the sweeps."""
from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest

from conftest import write_jsonl
from gpu_neighbors import NeighborsScorer, scorer as scorer_module
from gpu_neighbors.cli import main
from gpu_neighbors.cli.parser import build_parser
from gpu_neighbors.core import kernel_ridge
from gpu_neighbors.evaluation.agreement import agreement


@pytest.fixture()
def data(tmp_path, huse_records):
    return write_jsonl(tmp_path / "data.jsonl", [{"text": r["text"], "score": r["score"]} for r in huse_records[:60]])


@pytest.fixture()
def fits(monkeypatch):
    """The kernels whose scorer was fitted, in order."""
    fitted: list[str] = []
    original = NeighborsScorer.fit

    def fit(self, texts, scores, *args, **kwargs):
        fitted.append(self.kernel.name)
        return original(self, texts, scores, *args, **kwargs)

    monkeypatch.setattr(NeighborsScorer, "fit", fit)
    return fitted


def test_compare_checks_every_model_before_any_kernel_runs(tmp_path, data, fits, capsys):
    """compare ran its kernels for 74 s, then died on a roberta-large that is not installed."""
    missing = tmp_path / "no-such-model"
    assert main(["compare", "--data", str(data), "--kernels", "bleu,bertscore", "--model", str(missing),
                 "--layer", "2", "--device", "cpu"]) == 2
    assert "cannot load BERTScore model" in capsys.readouterr().err
    assert fits == []  # refused before bleu ran


def test_the_embedding_row_s_model_is_checked_before_the_work_too(tmp_path, data, fits, capsys):
    """compare's --model goes to the embedding + ridge row even where no kernel is bertscore."""
    assert main(["compare", "--data", str(data), "--kernels", "bleu", "--model", str(tmp_path / "none"),
                 "--device", "cpu"]) == 2
    assert "cannot load BERTScore model" in capsys.readouterr().err and fits == []


def test_evaluate_checks_the_models_of_the_kernels_it_chooses_among_before_any_of_them_runs(
        tmp_path, data, monkeypatch, capsys):
    from gpu_neighbors import choice

    passes: list[str] = []
    original = choice.kernel_pass
    monkeypatch.setattr(choice, "kernel_pass", lambda part, *args: passes.append(part.name) or original(part, *args))
    assert main(["evaluate", "--data", str(data), "--model", str(tmp_path / "none"), "--layer", "2",
                 "--device", "cpu"]) == 2  # auto: tfidf, bleu, rouge, and bertscore with --model
    assert "cannot load BERTScore model" in capsys.readouterr().err
    assert passes == []


def test_report_refuses_a_missing_model_before_the_work_instead_of_a_note_after_it(tmp_path, data, fits, capsys):
    assert main(["report", "--data", str(data), "--out", str(tmp_path / "report"), "--kernels", "bleu,bertscore",
                 "--model", str(tmp_path / "none"), "--layer", "2", "--device", "cpu"]) == 2
    assert "cannot load BERTScore model" in capsys.readouterr().err
    assert fits == [] and not (tmp_path / "report").exists()


def test_compare_prints_each_row_as_it_finishes_and_keeps_it_when_a_later_one_fails(data, monkeypatch, capsys):
    original = NeighborsScorer.fit

    def fit(self, texts, scores, *args, **kwargs):
        if self.kernel.name == "rouge":
            raise ValueError("rouge broke")
        return original(self, texts, scores, *args, **kwargs)

    monkeypatch.setattr(NeighborsScorer, "fit", fit)
    assert main(["compare", "--data", str(data), "--kernels", "bleu,rouge", "--device", "cpu"]) == 2
    captured = capsys.readouterr()
    assert re.search(r"^\| bleu \| 0\.0800 \|", captured.out, re.MULTILINE), captured.out
    assert "rouge broke" in captured.err and "the 1 row above are complete" in captured.err
    assert main(["compare", "--data", str(data), "--kernels", "bleu,rouge", "--device", "cpu", "--json"]) == 2
    assert [row["model"] for row in json.loads(capsys.readouterr().out)] == ["bleu"]  # the rows made, as JSON


def test_the_tfidf_ridge_row_is_exact_leave_one_out_kernel_ridge(data, huse_records, capsys):
    """Not a scikit-learn refit per left-out text (75 of compare's 76 s on 200 texts): kernel
    ridge on the tfidf kernel, each left-out text's penalty chosen by the others' exact
    leave-one-out, from one inverse per penalty."""
    from gpu_neighbors.evaluation.baselines import ALPHAS, as_prediction, tfidf_matrix

    assert main(["compare", "--data", str(data), "--kernels", "tfidf", "--device", "cpu", "--json"]) == 0
    row = next(row for row in json.loads(capsys.readouterr().out) if row["model"] == "TF-IDF + ridge")
    texts, scores = [r["text"] for r in huse_records[:60]], np.array([r["score"] for r in huse_records[:60]])
    estimates = kernel_ridge.nested_leave_one_out(tfidf_matrix(texts, scores), scores, [a / 2 for a in ALPHAS])
    expected = agreement(as_prediction(estimates), scores)
    assert (row["mse"], row["spearman"], row["coverage"]) == (expected.mse, expected.spearman, 1.0)


@pytest.mark.parametrize("command", ["compare", "crossval"])
def test_no_baselines_leaves_the_baseline_row_out(data, capsys, command):
    assert main([command, "--data", str(data), "--kernel" + "s" * (command == "compare"), "bleu",
                 "--device", "cpu", "--json", "--no-baselines"]) == 0
    document = json.loads(capsys.readouterr().out)
    rows = document if command == "compare" else document["rows"]
    assert [row["model"] for row in rows] == ["bleu" if command == "compare" else "neighbours"]


@pytest.mark.parametrize("command", ["evaluate", "compare", "report", "crossval"])
def test_each_evaluation_command_states_its_cost_in_its_help(command):
    parser = build_parser()
    choices = next(action for action in parser._actions if action.dest == "command").choices
    text = choices[command].format_help()
    assert "Cost:" in text and "1,000 texts" in text, text


def test_a_warning_made_for_each_fit_is_printed_once(tmp_path, huse_records, capsys):
    """Duplicate training texts: one fit per compared kernel printed it three times."""
    records = [{"text": r["text"], "score": r["score"]} for r in huse_records[:40]]
    data = write_jsonl(tmp_path / "dup.jsonl", records + records[:3])
    assert main(["compare", "--data", str(data), "--kernels", "bleu,rouge,tfidf", "--device", "cpu"]) == 0
    assert capsys.readouterr().err.count("repeat another one") == 1


def test_tuning_on_a_sample_names_what_the_estimator_tunes(huse_texts, huse_scores, monkeypatch):
    """fit warned about "a and b" for a top-k estimator, which tunes k and p."""
    monkeypatch.setattr(scorer_module, "MAX_TUNING_TEXTS", 50)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        NeighborsScorer(kernel="bleu", estimator="topk", device="cpu").fit(huse_texts[:60], huse_scores[:60], tune=True)
    text = " ".join(str(warning.message) for warning in caught if "random sample" in str(warning.message))
    assert "k and p chosen for a training set of that size" in text and "a and b" not in text, text


def test_report_rows_name_their_estimator_and_the_sweeps_agree_at_the_given_settings(tmp_path, data, capsys):
    out = tmp_path / "report"
    assert main(["report", "--data", str(data), "--out", str(out), "--runs", "2", "--sizes", "30,60",
                 "--resamples", "0", "--device", "cpu"]) == 0
    page = (out / "report.md").read_text(encoding="utf-8")
    nested = next(line for line in page.splitlines() if line.startswith("| bleu, tuned (nested) |"))
    assert "| top-k, k " in nested, nested  # the estimator tuned, not tau, a and b it never reads
    sweep_rows = [line for line in page.splitlines() if re.match(r"\| (a|b|tau) \| ", line)]
    coverages = {line.split(" | ")[3] for line in sweep_rows}  # "coverage at given"
    assert len(sweep_rows) == 3 and len(coverages) == 1, sweep_rows  # one rule, one setting: one coverage


@pytest.mark.parametrize("argv", [["compare", "--kernels", "tfidf"], ["crossval", "--kernel", "tfidf", "--folds", "3"]])
def test_every_json_row_has_every_field_the_table_shows(data, capsys, argv):
    """The table showed the baseline row's tau and seconds (compare), folds and tuned (crossval)
    as a dash, but its JSON row had no such key at all: a reader of row["tau"] met a KeyError
    on one row. Each JSON row now holds the same keys, null where the table has a dash."""
    assert main([argv[0], "--data", str(data), *argv[1:], "--device", "cpu", "--fluency", "none", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    rows = document if isinstance(document, list) else document["rows"]
    assert len(rows) == 2 and list(rows[0]) == list(rows[1])
    baseline = rows[1]
    assert baseline["model"] == "TF-IDF + ridge"
    assert all(baseline[key] is None for key in (("tau", "seconds") if argv[0] == "compare" else ("folds", "tuned")))


def test_evaluate_counts_one_fold_as_one_fold(capsys):
    """evaluate printed "chosen in 1 folds" beside the settings one left-out text's tuning chose."""
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "train.jsonl"
    assert main(["evaluate", "--data", str(example), "--kernel", "bleu", "--fluency", "none", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "chosen in 1 fold: " in printed and "1 folds" not in printed
