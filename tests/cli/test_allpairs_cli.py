"""The self-bleu, mbr and pairs commands through `gpu_neighbors.cli.main`: their outputs equal the
Python jobs', and bad input is one `gpu-neighbors: error:` line with exit 2."""
from __future__ import annotations

import json

import numpy as np
import pytest

from gpu_neighbors.allpairs.mbr import mbr
from gpu_neighbors.allpairs.self_bleu import self_bleu
from gpu_neighbors.cli import main


@pytest.fixture(scope="module")
def samples(huse_texts) -> list[dict]:
    return [{"text": text, "input": f"doc{index % 6}"} for index, text in enumerate(huse_texts[:48])]


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_self_bleu_prints_the_mean_and_writes_per_text_rows(samples, tmp_path, capsys):
    data = write_jsonl(tmp_path / "texts.jsonl", samples)
    output = tmp_path / "per_text.jsonl"
    assert main(["self-bleu", "--data", data, "--output", str(output), "--device", "cpu"]) == 0
    expected = self_bleu([row["text"] for row in samples], device="cpu")
    assert f"Self-BLEU {expected.mean:.6f} over 48 texts" in capsys.readouterr().out
    rows = read_jsonl(output)
    assert [row["line"] for row in rows] == list(range(1, 49))
    np.testing.assert_array_equal([row["self_bleu"] for row in rows], expected.scores)
    assert main(["self-bleu", "--data", data, "--weights", "0.5,0.5", "--smoothing", "none", "--sample", "5",
                 "--device", "cpu"]) == 0
    assert "sample of 5 (seed 0) (weights 0.5,0.5, smoothing none)" in capsys.readouterr().out


def test_mbr_groups_by_field(samples, tmp_path):
    data = write_jsonl(tmp_path / "samples.jsonl", samples)
    output = tmp_path / "mbr.jsonl"
    assert main(["mbr", "--candidates", data, "--group-field", "input", "--output", str(output),
                 "--weights", "0.25,0.25,0.25,0.25", "--device", "cpu"]) == 0
    rows = read_jsonl(output)
    expected = mbr([row["text"] for row in samples], [row["input"] for row in samples],
                   weights=(0.25,) * 4, device="cpu")
    np.testing.assert_array_equal([row["utility"] for row in rows], expected.utility)
    assert [row["selected"] for row in rows] == expected.selected.tolist()
    assert sum(row["selected"] for row in rows) == 6
    assert main(["mbr", "--candidates", data, "--output", str(output), "--overwrite", "--device", "cpu"]) == 0
    assert sum(row["selected"] for row in read_jsonl(output)) == 1  # the whole file is one group


def test_pairs_npy_and_parquet(samples, tmp_path):
    data = write_jsonl(tmp_path / "a.jsonl", samples[:20])
    train = write_jsonl(tmp_path / "b.jsonl", samples[20:])
    assert main(["pairs", "--candidates", data, "--train", train, "--output", str(tmp_path / "m.npy"),
                 "--device", "cpu"]) == 0
    assert np.load(tmp_path / "m.npy").shape == (20, 28)
    pq = pytest.importorskip("pyarrow.parquet")
    assert main(["pairs", "--candidates", data, "--output", str(tmp_path / "top.parquet"), "--top-k", "2",
                 "--device", "cpu"]) == 0
    table = pq.read_table(tmp_path / "top.parquet").to_pydict()
    assert table["rank"] == [1, 2] * 20


@pytest.mark.parametrize("argv, message", [
    (["self-bleu", "--data", "{one}"], "1 text: Self-BLEU scores each text against the others"),
    (["self-bleu", "--data", "{empty}"], "0 texts"),
    (["self-bleu", "--data", "{data}", "--weights", "0.5,0.6"], "--weights must be non-negative weights"),
    (["self-bleu", "--data", "{data}", "--weights", "0.2,0.2,0.2,0.2,0.3"], "--weights must be non-negative weights"),
    # issue 50: a sum past float range raised OverflowError (math.fsum's), in every command
    (["self-bleu", "--data", "{data}", "--weights", "1e308,1e308"], "--weights must be non-negative weights"),
    (["pairs", "--candidates", "{data}", "--output", "{dir}/x.npy", "--kernel", "bleu", "--weights", "1e308,1e308"],
     "--weights must be non-negative weights"),
    (["mbr", "--candidates", "{data}", "--output", "{new}", "--kernel", "bleu", "--weights", "1e308,1e308"],
     "--weights must be non-negative weights"),
    (["score", "--train", "{data}", "--candidates", "{data}", "--output", "{new}", "--weights", "1e308,1e308"],
     "--weights must be non-negative weights"),
    (["self-bleu", "--data", "{data}", "--output", "{existing}"], "exists already; pass --overwrite"),
    (["mbr", "--candidates", "{lonely}", "--group-field", "input", "--output", "{new}"], "group 'b' has one candidate"),
    (["mbr", "--candidates", "{data}", "--group-field", "missing", "--output", "{new}"], "field 'missing'"),
    (["mbr", "--candidates", "{one}", "--output", "{new}"], "1 candidate: MBR"),
    (["pairs", "--candidates", "{data}", "--output", "{existing}"], "exists already; pass --overwrite"),
    (["pairs", "--candidates", "{data}", "--output", "{dir}/x.parquet"], "needs --top-k K or --min-similarity T"),
    (["pairs", "--candidates", "{one}", "--output", "{dir}/x.npy"], "--candidates holds one text, which against itself has no pairs"),
])
def test_bad_input_is_one_error_line(tmp_path, capsys, argv, message):
    files = {
        "data": write_jsonl(tmp_path / "data.jsonl", [{"text": "a b c", "input": "a"}, {"text": "a b d", "input": "a"}]),
        "one": write_jsonl(tmp_path / "one.jsonl", [{"text": "a b c"}]),
        "empty": write_jsonl(tmp_path / "empty.jsonl", []),
        "lonely": write_jsonl(tmp_path / "lonely.jsonl", [{"text": "x", "input": "a"}, {"text": "y", "input": "a"},
                                                          {"text": "z", "input": "b"}]),
        "existing": str(tmp_path / "exists.npy"),
        "new": str(tmp_path / "new.jsonl"),
        "dir": str(tmp_path),
    }
    (tmp_path / "exists.npy").write_bytes(b"")
    assert main([part.format(**files) for part in argv] + ["--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("gpu-neighbors: error:") and message in error, error


@pytest.mark.parametrize("source", ["-", "/dev/stdin", "/dev/null"])
def test_mbr_groups_from_plain_text_through_a_pipe_are_refused_in_one_line(tmp_path, source):
    """Issue 32: plain text through a pipe or device with --group-field raised KeyError: 'text'
    where a regular file gets a one-line refusal."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "gpu_neighbors.cli", "mbr", "--candidates", source, "--group-field",
                           "g", "--output", str(tmp_path / "out.jsonl"), "--device", "cpu"],
                          input="hello world\nthis is text\n", capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "format 'text'" in done.stderr and "jsonl, csv, tsv" in done.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_pairs_top_k_takes_its_own_range_not_the_scorers(samples, tmp_path, capsys):
    """`pairs --top-k 1001` was refused as "--top-k must be an integer in [1, 1000]": the command
    line checked it as the scorer's top-k estimator setting of the same name, not by its own
    bound (2^20 per candidate). A K past the set keeps every pair."""
    pq = pytest.importorskip("pyarrow.parquet")
    data = write_jsonl(tmp_path / "a.jsonl", samples[:4])
    output = tmp_path / "top.parquet"
    assert main(["pairs", "--candidates", data, "--output", str(output), "--top-k", "1001", "--device", "cpu"]) == 0
    assert pq.read_table(output).to_pydict()["rank"] == [1, 2, 3] * 4
    with pytest.raises(SystemExit) as refused:
        main(["pairs", "--candidates", data, "--output", str(output), "--top-k", str((1 << 20) + 1), "--overwrite"])
    assert refused.value.code == 2 and "from 1 to 1,048,576" in capsys.readouterr().err
