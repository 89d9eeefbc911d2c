"""`compare`: one leave-one-out row per kernel, plus the human rows when judgments exist."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import needs
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.cli import main
from gpu_neighbors.evaluation.compare import COLUMNS, compare_kernels
from gpu_neighbors.evaluation.tables import markdown_table
from gpu_neighbors.evaluation.agreement import agreement


def test_rows_equal_each_kernels_own_leave_one_out(huse_texts, huse_scores):
    texts, scores = huse_texts[:80], huse_scores[:80]
    rows = compare_kernels(texts, scores, ["bleu", "rouge"], taus={"rouge": 0.2}, min_neighbors=3)
    assert [row.name for row in rows] == ["bleu", "rouge"]
    assert rows[0].tau == 0.08 and rows[1].tau == 0.2
    for row, kernel, tau in [(rows[0], "bleu", None), (rows[1], "rouge", 0.2)]:
        prediction = NeighborsScorer(kernel=kernel, estimator=Threshold(tau=tau, min_neighbors=3)).fit(texts,
                                     scores).leave_one_out()
        expected = agreement(prediction, scores)
        assert row.agreement.coverage == expected.coverage
        np.testing.assert_equal([row.agreement.mse, row.agreement.spearman], [expected.mse, expected.spearman])
        assert row.seconds > 0
    table = markdown_table([row.as_dict() for row in rows], COLUMNS)
    assert table.count("\n") == 3 and "| rouge | 0.2000 |" in table


def test_tau_for_a_kernel_not_compared_is_refused(huse_texts, huse_scores):
    with pytest.raises(ValueError, match="not compared: meteor"):
        compare_kernels(huse_texts[:20], huse_scores[:20], ["bleu"], taus={"meteor": 0.2})


@needs('sklearn')
def test_cli_adds_human_rows_from_judgments(tmp_path, huse_records, capsys):
    data = tmp_path / "huse.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in huse_records[:60]), encoding="utf-8")
    assert main(["compare", "--data", str(data), "--kernels", "bleu,rouge", "--tau", "rouge=0.1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["model"] for row in rows] == ["Human (best)", "Human (average)", "bleu", "rouge", "TF-IDF + ridge"]
    assert rows[3]["tau"] == 0.1 and rows[0]["coverage"] == 1.0 and rows[0]["tau"] is None
    assert 0 < rows[0]["mse"] < rows[1]["mse"]  # the best annotator beats the average one
    assert main(["compare", "--data", str(data), "--kernels", "bleu,cider"]) == 2
    assert "--kernels" in capsys.readouterr().err


def test_cli_applies_the_outlier_tests_and_bleu_weights_options(tmp_path, huse_records, capsys):
    """--level, --outside-level, --negatives, --words and --weights reach each kernel's scorer (they were
    accepted and ignored)."""
    from gpu_neighbors import Bleu, Intervals

    data = tmp_path / "huse.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in huse_records[:60]), encoding="utf-8")
    texts, scores = [r["text"] for r in huse_records[:60]], [r["score"] for r in huse_records[:60]]
    for flags, level, weights in [
            ([], Intervals(0.9), None),
            (["--outside-level", "0.2"], Intervals(0.9, outside_level=0.2), None),
            (["--outside-level", "0.2", "--negatives", "none"], Intervals(0.9, outside_level=0.2, negatives="none"),
             None),
            (["--level", "0.8", "--outside-level", "0.2", "--words", "none", "--weights", "0.5,0.5"],
             Intervals(0.8, outside_level=0.2, words="none"), (0.5, 0.5))]:
        assert main(["compare", "--data", str(data), "--kernels", "bleu", "--json", *flags]) == 0
        row = next(row for row in json.loads(capsys.readouterr().out) if row["model"] == "bleu")
        kernel = Bleu() if weights is None else Bleu(weights=weights)
        prediction = NeighborsScorer(kernel=kernel, estimator=Threshold(tuning="never"),
                                     level=level).fit(texts, scores).leave_one_out()
        expected = agreement(prediction, scores)
        assert (row["mse"], row["spearman"], row["coverage"]) == (expected.mse, expected.spearman,
                                                                 expected.coverage), flags


@pytest.mark.parametrize("flags, named", [
    (["--estimator", "topk"], "--estimator"), (["--weighting", "similarity"], "--weighting"),
    (["--power", "2"], "--power"), (["--top-k", "5"], "--top-k"), (["--penalty", "1"], "--penalty"),
    (["--thresholds", "tuned"], "--thresholds"),
])
def test_cli_names_the_estimator_flags_it_does_not_read(tmp_path, huse_records, capsys, flags, named):
    """compare runs the paper's rule, never tuned: an estimator flag changes no row, and says so."""
    data = tmp_path / "huse.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in huse_records[:30]), encoding="utf-8")
    assert main(["compare", "--data", str(data), "--kernels", "bleu", "--json"]) == 0
    plain = capsys.readouterr()
    assert "compare runs" not in plain.err
    assert main(["compare", "--data", str(data), "--kernels", "bleu", "--json", *flags]) == 0
    given = capsys.readouterr()
    assert f"gpu-neighbors: warning: {named} changes no row: compare runs the paper's threshold rule" in given.err
    untimed = [[{key: value for key, value in row.items() if key != "seconds"} for row in json.loads(run.out)]
               for run in (plain, given)]
    assert untimed[0] == untimed[1]
