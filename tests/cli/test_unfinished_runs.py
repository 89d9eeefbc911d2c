"""Issue 32: what a failed `score` run leaves. A JSON Lines run keeps its rows (OUT.partial) and
progress record (OUT.meta.json) for --resume, so a later plain run must not silently start over
from nothing; a Parquet run cannot resume, so it leaves nothing behind."""
from __future__ import annotations

from conftest import write_jsonl
from gpu_neighbors.cli import main


def score(tmp_path, huse_records, output: str) -> list[str]:
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": r["text"], "score": r["score"]} for r in huse_records[:40]])
    # a bad record after five batches: the run fails with rows already written
    candidates = write_jsonl(tmp_path / "c.jsonl", [{"text": r["text"]} for r in huse_records[40:80]] + [{"no": 1}])
    return ["score", "--train", str(train), "--candidates", str(candidates), "--output", str(tmp_path / output),
            "--quiet", "--paper-thresholds", "--batch-size", "8", "--device", "cpu"]


def test_a_plain_run_refuses_to_drop_an_unfinished_jsonl_run(tmp_path, huse_records, capsys):
    argv = score(tmp_path, huse_records, "out.jsonl")
    assert main(argv) == 2
    partial = tmp_path / "out.jsonl.partial"
    rows = partial.read_bytes()
    assert rows.count(b"\n") == 40 and (tmp_path / "out.jsonl.meta.json").exists()
    capsys.readouterr()

    assert main(argv) == 2  # not a silent start from nothing
    error = capsys.readouterr().err
    assert "unfinished run" in error and "--resume" in error and "--overwrite" in error, error
    assert partial.read_bytes() == rows
    assert main([*argv, "--skip-bad", "--resume"]) == 2  # other settings: refused, the rows kept
    assert partial.read_bytes() == rows
    assert main([*argv, "--overwrite", "--skip-bad"]) == 0  # starting over is asked for
    assert len((tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()) == 40


def test_a_failed_parquet_run_leaves_no_partial_files(tmp_path, huse_records):
    argv = score(tmp_path, huse_records, "out.parquet")
    assert main(argv) == 2
    left = sorted(path.name for path in tmp_path.iterdir() if path.name.startswith("out.parquet"))
    assert left == [], left
    assert main(argv) == 2  # the same failure again, not "an unfinished run"


def test_a_run_that_wrote_no_row_leaves_nothing_that_blocks_the_corrected_command(tmp_path, huse_records, capsys):
    """Issue 53: "field 'text': missing" on the first record, 0 rows written; the corrected
    command was then refused ("pass --resume ... or --overwrite"), and --resume answered "run
    without resume", the refused command."""
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": r["text"], "score": r["score"]} for r in huse_records[:40]])
    candidates = write_jsonl(tmp_path / "c.jsonl", [{"sentence": r["text"]} for r in huse_records[40:50]])
    argv = ["score", "--train", str(train), "--candidates", str(candidates), "--output", str(tmp_path / "out.jsonl"),
            "--quiet", "--paper-thresholds", "--device", "cpu"]
    assert main(argv) == 2
    assert "field 'text': missing" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["c.jsonl", "train.jsonl"]  # nothing left behind
    write_jsonl(candidates, [{"text": r["text"]} for r in huse_records[40:50]])  # the file corrected
    assert main(argv) == 0  # the same command
    assert len((tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()) == 10


def test_a_refused_resume_names_the_flag_that_starts_over(tmp_path, huse_records, capsys):
    argv = score(tmp_path, huse_records, "out.jsonl")
    assert main(argv) == 2  # 40 rows, then a bad record
    capsys.readouterr()
    assert main([*argv, "--skip-bad", "--resume"]) == 2  # other settings than the run on disk
    error = capsys.readouterr().err
    assert "pass --overwrite (not --resume) to start over with these, dropping its 40 rows" in error, error
    assert "run without resume" not in error
    assert main([*argv, "--skip-bad", "--overwrite"]) == 0  # what it names works
