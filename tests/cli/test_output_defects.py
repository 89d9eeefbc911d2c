"""Issue 22's defects in the writing of outputs, one test each (items 1, 4, 5, 7, 10, 12, 15),
run in-process on real files. (Items 2, 3 and 6 are the process tests in test_output_safety.py.)"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import needs, write_jsonl
from gpu_neighbors.cli import main


@pytest.fixture()
def files(tmp_path, huse_records):
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": r["text"], "score": r["score"]} for r in huse_records[:60]])
    candidates = write_jsonl(tmp_path / "c.jsonl", [{"text": r["text"]} for r in huse_records[60:100]])
    data = write_jsonl(tmp_path / "data.jsonl", [{"text": r["text"], "score": r["score"]} for r in huse_records[60:100]])
    return train, candidates, data


def score(train: Path, candidates: Path | str, output: Path | str, *extra: str) -> list[str]:
    return ["score", "--train", str(train), "--candidates", str(candidates), "--output", str(output),
            "--quiet", "--device", "cpu", "--paper-thresholds", *extra]


def test_1_resuming_a_finished_run_over_grown_candidates_is_refused(tmp_path, files, capsys):
    train, candidates, _ = files
    output = tmp_path / "out.jsonl"
    assert main(score(train, candidates, output)) == 0
    finished = output.read_bytes()
    with open(candidates, "a", encoding="utf-8") as grown:
        grown.write(json.dumps({"text": "one more candidate to score"}) + "\n")
    assert main(score(train, candidates, output, "--resume")) == 2
    error = capsys.readouterr().err
    assert "cannot resume: the run is finished with 40 rows, but the input now has more" in error, error
    assert output.read_bytes() == finished


@pytest.mark.parametrize("argv, named", [
    (["report", "--data", "{data}", "--out", "{tmp}/rep", "--page", "{data}", "--overwrite"], "--page and --data"),
    (["mbr", "--candidates", "{data}", "--output", "{data}", "--overwrite"], "--output and --candidates"),
    (["self-bleu", "--data", "{data}", "--output", "{data}", "--overwrite"], "--output and --data"),
    (["pairs", "--candidates", "{data}", "--output", "{tmp}/link.npy", "--overwrite"], "--output and --candidates"),
])
def test_4_no_command_writes_onto_its_input(tmp_path, files, capsys, argv, named):
    data = files[2]
    (tmp_path / "link.npy").symlink_to(data)
    before = data.read_bytes()
    assert main([part.format(data=data, tmp=tmp_path) for part in argv] + ["--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert f"{named} are the same file" in error, error
    assert data.read_bytes() == before


@pytest.mark.parametrize("input_flag, suffix", [("--candidates", ".partial"), ("--train", ".meta.json"),
                                                ("--candidates", ".lock"), ("--train", ".meta.json.tmp")])
def test_5_a_sidecar_of_the_output_cannot_be_an_input(tmp_path, files, capsys, input_flag, suffix):
    train, candidates, _ = files
    output = tmp_path / "out.jsonl"
    victim = Path(f"{output}{suffix}")
    os.replace(candidates if input_flag == "--candidates" else train, victim)
    before = victim.read_bytes()
    argv = score(victim, candidates, output) if input_flag == "--train" else score(train, victim, output)
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert f"--output's {suffix} file and {input_flag} are the same file" in error, error
    assert victim.read_bytes() == before
    assert not output.exists()


def test_7_resume_refuses_another_explain_text(tmp_path, files, capsys):
    train, candidates, _ = files
    broken = write_jsonl(tmp_path / "broken.jsonl",
                         [json.loads(line) for line in candidates.read_text(encoding="utf-8").splitlines()[:20]]
                         + [{"no text": 1}])
    output = tmp_path / "out.jsonl"
    assert main(score(train, broken, output, "--explain", "2", "--batch-size", "8")) == 2  # stops at the bad line
    assert "broken.jsonl:21" in capsys.readouterr().err
    assert main(score(train, broken, output, "--explain", "2", "--explain-text", "--resume")) == 2
    error = capsys.readouterr().err
    assert "cannot resume: the earlier run used other settings (explain_text: (absent) before, true now)" in error


def test_10_mbr_groups_are_told_apart_by_type(tmp_path, capsys):
    texts = ["a b c d", "a b c e", "x y z w", "x y z v"]
    data = write_jsonl(tmp_path / "g.jsonl", [{"text": text, "input": group}
                                              for text, group in zip(texts, [True, True, 1, 1])])
    output = tmp_path / "out.jsonl"
    assert main(["mbr", "--candidates", str(data), "--group-field", "input", "--output", str(output),
                 "--device", "cpu"]) == 0
    rows = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [row["group"] for row in rows] == [True, True, 1, 1]
    assert sum(row["selected"] for row in rows) == 2
    assert "2 groups" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".partial", ".meta.json.tmp", ".meta.json", ".lock"])
def test_12_a_planted_symlink_sidecar_is_refused_and_its_target_untouched(tmp_path, files, capsys, suffix):
    train, candidates, _ = files
    output = tmp_path / "out.jsonl"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n", encoding="utf-8")
    Path(f"{output}{suffix}").symlink_to(victim)
    assert main(score(train, candidates, output)) == 2
    error = capsys.readouterr().err
    assert f"out.jsonl{suffix} beside --output is a symbolic link" in error, error
    assert victim.read_text(encoding="utf-8") == "precious\n"


def test_15_skip_bad_to_standard_output_needs_a_rejects_file(tmp_path, files, capsys):
    train, candidates, _ = files
    assert main(score(train, candidates, "-", "--skip-bad")) == 2
    error = capsys.readouterr().err
    assert "--skip-bad with --output - needs --rejects FILE" in error, error
    rejects = tmp_path / "rejects.jsonl"
    with open(candidates, "a", encoding="utf-8") as bad:
        bad.write('{"no text": 1}\n')
    assert main(score(train, candidates, "-", "--skip-bad", "--rejects", str(rejects))) == 0
    assert len(capsys.readouterr().out.splitlines()) == 40
    assert json.loads(rejects.read_text(encoding="utf-8"))["line"] == 41


@pytest.mark.parametrize("argv", [
    ["score", "--train", "{train}", "--candidates", "{candidates}", "--output", "{tmp}/out.jsonl.gz", "--device", "cpu"],
    ["self-bleu", "--data", "{data}", "--output", "{tmp}/out.jsonl.gz", "--device", "cpu"],
    ["mbr", "--candidates", "{data}", "--output", "{tmp}/out.jsonl.bz2", "--device", "cpu"],
])
def test_15_a_compressed_output_name_is_refused(tmp_path, files, capsys, argv):
    train, candidates, data = files
    assert main([part.format(train=train, candidates=candidates, data=data, tmp=tmp_path) for part in argv]) == 2
    assert "results are written uncompressed" in capsys.readouterr().err
    assert not list(tmp_path.glob("out*"))


def test_15_rows_before_damage_in_a_gzip_file_are_written(tmp_path, files, capsys):
    import gzip
    import zlib

    train, candidates, _ = files
    packed = gzip.compress(candidates.read_bytes() * 5)
    damaged = tmp_path / "c.jsonl.gz"
    damaged.write_bytes(packed[: len(packed) * 2 // 3])
    readable = zlib.decompressobj(zlib.MAX_WBITS | 16).decompress(damaged.read_bytes())
    lines = readable.count(b"\n")
    output = tmp_path / "out.jsonl"
    assert main(score(train, damaged, output, "--batch-size", "1000")) == 2
    assert f"c.jsonl.gz:{lines + 1}: cannot read" in capsys.readouterr().err
    assert len(Path(f"{output}.partial").read_text(encoding="utf-8").splitlines()) == lines


@needs('pyarrow')
def test_15_parquet_pairs_on_a_full_disk_is_the_disk_s_message(tmp_path, files, capsys, monkeypatch):
    import resource

    import gpu_neighbors.allpairs.pairs as module

    monkeypatch.setattr(module, "PARQUET_ROWS", 64)  # row groups written while the run goes on
    _, _, data = files
    output = tmp_path / "pairs.parquet"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, hard))
    try:
        code = main(["pairs", "--candidates", str(data), "--output", str(output), "--min-similarity", "0",
                     "--device", "cpu"])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    error = capsys.readouterr().err
    assert code == 2 and "File too large" in error and "closed file" not in error, error
    assert not list(tmp_path.glob("pairs*"))
