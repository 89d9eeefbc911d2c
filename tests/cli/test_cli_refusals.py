"""Refusals a new user meets, each one line on stderr with exit status 2, and files they must
not lose: found by trying the command line as a new user would (options argparse refuses,
options that contradict each other, an existing companion output, a resume spelled another way)."""
from __future__ import annotations

import json

import pytest

from conftest import write_jsonl
from gpu_neighbors.cli import main
from gpu_neighbors.data import InputError, SafeOutput


@pytest.fixture()
def files(tmp_path, huse_records):
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": r["text"], "score": r["score"]} for r in huse_records[:60]])
    candidates = write_jsonl(tmp_path / "c.jsonl", [{"text": r["text"]} for r in huse_records[60:80]] + [{"no": 1}])
    return {"train": train, "candidates": candidates}


def one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-neighbors: error: "), lines
    return lines[0]


@pytest.mark.parametrize("argv, expected", [
    (["score", "--train", "t.jsonl", "--candidates", "c.txt", "--output", "o.jsonl", "--kernel", "nosuch"],
     "argument --kernel: invalid choice: 'nosuch'"),
    (["score", "--train", "t.jsonl"], "the following arguments are required: --candidates, --output"),
    (["crossval", "--data", "d.jsonl", "--folds", "1"], "--folds takes a number of folds, 2 or more"),
    (["mbr", "--candidates", "c.txt", "--output", "m.jsonl", "--kernel", "auto"], "invalid choice: 'auto'"),
])
def test_what_argparse_refuses_is_one_line_pointing_at_help(argv, expected, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    line = one_error_line(capsys)
    assert expected in line and line.endswith(f"(see gpu-neighbors {argv[0]} --help)")


@pytest.mark.parametrize("extra, expected", [
    (["--paper-thresholds", "--tune"], "never tuned: give it or --tune, not both"),
    (["--resume", "--overwrite"], "--resume continues the run on disk and --overwrite starts again"),
])
def test_options_that_contradict_each_other_are_refused(tmp_path, files, extra, expected, capsys):
    argv = ["score", "--train", str(files["train"]), "--candidates", str(files["candidates"]),
            "--output", str(tmp_path / "o.jsonl"), "--device", "cpu", *extra]
    assert main(argv) == 2
    assert expected in one_error_line(capsys)
    assert not (tmp_path / "o.jsonl").exists()


def test_an_existing_rejects_file_is_kept_without_overwrite(tmp_path, files, capsys):
    rejects = tmp_path / "r.txt"
    rejects.write_text("mine\n", encoding="utf-8")
    argv = ["score", "--train", str(files["train"]), "--candidates", str(files["candidates"]), "--output",
            str(tmp_path / "o.jsonl"), "--skip-bad", "--rejects", str(rejects), "--device", "cpu", "--quiet"]
    assert main(argv) == 2
    assert "exists already (--rejects); pass --overwrite" in one_error_line(capsys)
    assert rejects.read_text(encoding="utf-8") == "mine\n" and not (tmp_path / "o.jsonl").exists()
    assert main([*argv, "--overwrite"]) == 0
    assert '"line": 21' in rejects.read_text(encoding="utf-8")


def test_every_output_of_a_run_needs_overwrite_to_be_replaced(tmp_path):
    """A report's images too: a new page in the same folder must not replace another report's plots."""
    plot = tmp_path / "agreement.png"
    plot.write_bytes(b"earlier report")
    with pytest.raises(InputError, match=r"agreement.png: exists already \(--plot\)"):
        SafeOutput({"--out": tmp_path / "new.md", "--plot": plot})
    assert plot.read_bytes() == b"earlier report"
    with SafeOutput({"--out": tmp_path / "new.md", "--plot": plot}, overwrite=True) as outputs:
        outputs.create().write(b"page")
        outputs.create(plot).write(b"new plot")
    assert plot.read_bytes() == b"new plot"


def test_resume_takes_the_same_file_spelled_another_way(tmp_path, files, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["score", "--train", "train.jsonl", "--output", "o.jsonl", "--skip-bad", "--device", "cpu", "--quiet"]
    assert main([*argv, "--candidates", "c.jsonl"]) == 0
    finished = (tmp_path / "o.jsonl").read_bytes()
    capsys.readouterr()
    assert main([*argv, "--candidates", str(tmp_path / "." / "c.jsonl"), "--resume"]) == 0
    assert (tmp_path / "o.jsonl").read_bytes() == finished


def test_crossval_with_tfidf_warns_that_splits_share_the_idf(tmp_path, files, capsys):
    assert main(["crossval", "--data", str(files["train"]), "--folds", "3", "--device", "cpu", "--kernel", "tfidf"]) == 0
    assert "gpu-neighbors: warning: the tfidf kernel's similarities depend on the whole training set" \
        in capsys.readouterr().err


def test_after_a_failed_overwrite_the_output_is_kept_and_the_message_names_the_unfinished_run(tmp_path, files, capsys):
    good = write_jsonl(tmp_path / "good.jsonl", [{"text": "a headline"}, {"text": "another one"}])
    argv = ["score", "--train", str(files["train"]), "--output", str(tmp_path / "o.jsonl"), "--device", "cpu", "--quiet"]
    assert main([*argv, "--candidates", str(good)]) == 0
    finished = (tmp_path / "o.jsonl").read_bytes()
    capsys.readouterr()
    assert main([*argv, "--candidates", str(files["candidates"]), "--overwrite"]) == 2  # line 21 has no text
    assert "c.jsonl:21" in one_error_line(capsys)
    assert (tmp_path / "o.jsonl").read_bytes() == finished
    assert main([*argv, "--candidates", str(good)]) == 2
    assert "or --resume to continue the unfinished run beside it (its .partial file)" in one_error_line(capsys)


def test_a_negative_seed_and_rejects_without_skip_bad_are_named_by_their_flags(tmp_path, files, capsys):
    with pytest.raises(SystemExit):
        main(["crossval", "--data", str(files["train"]), "--seed", "-1"])
    assert "argument --seed: a seed is a non-negative integer, not '-1'" in one_error_line(capsys)
    assert main(["score", "--train", str(files["train"]), "--candidates", str(files["candidates"]),
                 "--output", str(tmp_path / "o.jsonl"), "--rejects", str(tmp_path / "r.jsonl")]) == 2
    assert "--rejects names where --skip-bad puts the records it sets aside: give --skip-bad too" in one_error_line(capsys)


def test_evaluate_on_one_text_is_refused(tmp_path, files, capsys):
    one = write_jsonl(tmp_path / "one.jsonl", [{"text": "a b", "score": 0.5}])
    assert main(["evaluate", "--data", str(one), "--device", "cpu"]) == 2
    assert "one.jsonl: 1 scored text: leave-one-out needs at least 2" in one_error_line(capsys)


def test_sweep_runs_the_threshold_rule_and_refuses_an_estimator_that_ignores_tau(tmp_path, files, capsys):
    assert main(["sweep", "--data", str(files["train"]), "--parameter", "a", "--values", "1,5", "--device", "cpu",
                 "--json"]) == 0
    swept = json.loads(capsys.readouterr().out)
    assert swept["signature"].startswith("kernel:bleu|") and "|a:5|" in swept["signature"]  # the paper's rule
    assert [row["value"] for row in swept["rows"]] == [1.0, 5.0]
    assert main(["sweep", "--data", str(files["train"]), "--estimator", "topk", "--device", "cpu"]) == 2
    assert "sweep varies the threshold rule's tau, a and b, which --estimator topk never reads" in one_error_line(capsys)


def test_an_empty_range_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["curve", "--data", "d.jsonl", "--sizes", "50:10:5"])
    assert "'50:10:5' is an empty range: its start is past its stop" in one_error_line(capsys)


HUGE = "99999999999999999999"


@pytest.mark.parametrize("argv, flag", [
    (["score", "--train", "t.jsonl", "--candidates", "c.jsonl", "--output", "o.jsonl", "--max-chars", HUGE], "--max-chars"),
    (["evaluate", "--data", "d.jsonl", "--max-chars", HUGE], "--max-chars"),
    (["curve", "--data", "d.jsonl", "--sizes", "1e400"], "--sizes"),
    (["curve", "--data", "d.jsonl", "--sizes", "nan"], "--sizes"),
    (["curve", "--data", "d.jsonl", "--sizes", "10.5"], "--sizes"),
    (["curve", "--data", "d.jsonl", "--runs", "100000000000000000000"], "--runs"),
    (["report", "--data", "d.jsonl", "--out", "r", "--runs", HUGE], "--runs"),
    (["report", "--data", "d.jsonl", "--out", "r", "--resamples", "-1"], "--resamples"),
    (["report", "--data", "d.jsonl", "--out", "r", "--resamples", HUGE], "--resamples"),
    (["sweep", "--data", "d.jsonl", "--param", "tau", "--values", "nan"], "--values"),
    (["systems", "--train", "t.jsonl", "--system-field", "s", "--resamples", HUGE], "--resamples"),
    (["systems", "--train", "t.jsonl", "--system-field", "s", "--trials", HUGE], "--trials"),
    (["systems", "--train", "t.jsonl", "--system-field", "s", "--threads", HUGE], "--threads"),
    (["score", "--train", "t.jsonl", "--candidates", "c.jsonl", "--output", "o.jsonl", "--workers", HUGE], "--workers"),
    (["score", "--train", "t.jsonl", "--candidates", "c.jsonl", "--output", "o.jsonl", "--explain", HUGE], "--explain"),
    (["score", "--train", "t.jsonl", "--candidates", "c.jsonl", "--output", "o.jsonl", "--layer", HUGE], "--layer"),
    (["score", "--train", "t.jsonl", "--candidates", "c.jsonl", "--output", "o.jsonl", "--memory-budget", "9000000P"],
     "--memory-budget"),
    (["crossval", "--data", "d.jsonl", "--seed", str(1 << 64)], "--seed"),
    (["crossval", "--data", "d.jsonl", "--folds", HUGE], "--folds"),
    (["pairs", "--candidates", "c.jsonl", "--output", "p.parquet", "--min-similarity", "2"], "--min-similarity"),
    (["pairs", "--candidates", "c.jsonl", "--output", "p.parquet", "--min-similarity", "nan"], "--min-similarity"),
    (["pairs", "--candidates", "c.jsonl", "--output", "p.parquet", "--top-k", HUGE], "--top-k"),
    (["self-bleu", "--data", "d.jsonl", "--sample", HUGE], "--sample"),
])
def test_every_numeric_flag_is_bounded_by_its_parser(argv, flag, capsys):
    """Issue 32: --max-chars 99999999999999999999 and curve --sizes 1e400 ended in an OverflowError
    traceback, --sizes nan did not name its flag, and --runs 10^20, --resamples or --trials of any
    size, pairs --min-similarity 2 were accepted (a run until killed, or an empty result)."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert f"argument {flag}:" in one_error_line(capsys)


@pytest.mark.parametrize("value", ["loo", "1"])
def test_report_s_folds_error_offers_only_what_report_takes(tmp_path, capsys, value):
    """report --folds loo was refused with "--folds takes a number of folds, 2 or more, or 'loo',
    not 'loo'": report's k-fold comparison takes a number only (its leave-one-out is always run)."""
    with pytest.raises(SystemExit):
        main(["report", "--data", "x.jsonl", "--out", str(tmp_path / "r"), "--folds", value])
    error = capsys.readouterr().err
    assert f"--folds takes a number of folds, 2 or more, not {value!r}" in error, error
    assert "or 'loo'" not in error
