"""Issue 53, errors that help: a missing field names the fields the record has and the flag that
names another; CSV in a .jsonl file names --format csv; a mistyped scorer folder is "no such
folder"; and `score --keep-fields` carries input fields (an id, a system) into the output rows,
as the Ray path keeps its input columns."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import write_jsonl
from gpu_neighbors.cli import main


def one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-neighbors: error: "), lines
    return lines[0]


@pytest.fixture()
def train(tmp_path, huse_records):
    return write_jsonl(tmp_path / "train.jsonl", [{"text": r["text"], "score": r["score"]} for r in huse_records[:40]])


def test_a_missing_text_field_names_the_fields_present_and_the_flag(tmp_path, capsys):
    data = write_jsonl(tmp_path / "d.jsonl", [{"sentence": "a b", "score": 0.5, "id": 3}])
    assert main(["evaluate", "--data", str(data), "--device", "cpu"]) == 2
    assert one_error_line(capsys).endswith(
        "d.jsonl:1: field 'text': missing (the record has 'sentence', 'score', 'id'; --text-field names another field)")


def test_a_missing_score_field_names_its_flag(tmp_path, capsys):
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": "a b", "rating": 0.5}])
    assert main(["evaluate", "--data", str(data), "--device", "cpu"]) == 2
    assert "field 'score': missing (the record has 'text', 'rating'; --score-field names another field)" in \
        one_error_line(capsys)


def test_a_missing_candidate_field_says_the_same(tmp_path, train, capsys):
    candidates = write_jsonl(tmp_path / "c.jsonl", [{"sentence": "a b"}])
    assert main(["score", "--train", str(train), "--candidates", str(candidates), "--output",
                 str(tmp_path / "o.jsonl"), "--quiet", "--device", "cpu"]) == 2
    assert "c.jsonl:1: field 'text': missing (the record has 'sentence'; --text-field names another field)" in \
        capsys.readouterr().err


def test_csv_in_a_jsonl_file_names_format_csv_which_reads_it(tmp_path, huse_records, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text("text,score\n" + "".join(f'"{r["text"]}",{r["score"]}\n' for r in huse_records[:30]),
                    encoding="utf-8")
    assert main(["evaluate", "--data", str(data), "--device", "cpu"]) == 2
    assert one_error_line(capsys).endswith("the line reads as CSV: give --format csv to read the file so")
    assert main(["evaluate", "--data", str(data), "--device", "cpu", "--format", "csv", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 30


def test_tsv_in_a_jsonl_file_names_format_tsv(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text("text\tscore\na b\t0.5\n", encoding="utf-8")
    assert main(["fit", "--train", str(data), "--save", str(tmp_path / "s"), "--device", "cpu"]) == 2
    assert "give --format tsv" in one_error_line(capsys)


@pytest.mark.parametrize("command", ["score", "evaluate"])
def test_a_mistyped_scorer_folder_is_no_such_folder(tmp_path, train, capsys, command):
    typo = tmp_path / "scorre"
    argv = {"score": ["score", "--candidates", str(train), "--output", str(tmp_path / "o.jsonl")],
            "evaluate": ["evaluate", "--data", str(train)]}[command]
    assert main([*argv, "--scorer", str(typo)]) == 2
    assert one_error_line(capsys).endswith("scorre: no such folder (--scorer takes the folder fit --save wrote)")


def test_score_keep_fields_carries_input_fields_into_the_rows(tmp_path, train, huse_records, capsys):
    records = [{"id": index, "system": f"s{index % 2}", "text": r["text"]} for index, r in enumerate(huse_records[40:46])]
    del records[3]["system"]
    candidates = write_jsonl(tmp_path / "c.jsonl", records)
    output = tmp_path / "o.jsonl"
    argv = ["score", "--train", str(train), "--candidates", str(candidates), "--output", str(output), "--quiet",
            "--device", "cpu", "--paper-thresholds"]
    assert main([*argv, "--keep-fields", "id,system"]) == 0
    rows = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [(row["id"], row["system"]) for row in rows] == [(0, "s0"), (1, "s1"), (2, "s0"), (3, None), (4, "s0"),
                                                            (5, "s1")]
    assert list(rows[0])[-2:] == ["id", "system"] and rows[0]["text"] == records[0]["text"]
    capsys.readouterr()
    assert main([*argv, "--keep-fields", "id,score", "--overwrite"]) == 2  # "score" is the estimate's column
    assert "--keep-fields: score is a column of the results already" in one_error_line(capsys)


def test_score_warns_of_a_kept_field_no_candidate_has(tmp_path, train, huse_records, capsys):
    """A kept field no candidate has is almost always a typo (fit refuses one): the rows still come,
    with its column null, and a warning names the field; a field some candidates have is not named."""
    records = [{"id": index, "text": r["text"]} for index, r in enumerate(huse_records[40:44])]
    candidates = write_jsonl(tmp_path / "c.jsonl", records)
    output = tmp_path / "o.jsonl"
    assert main(["score", "--train", str(train), "--candidates", str(candidates), "--output", str(output),
                 "--quiet", "--device", "cpu", "--paper-thresholds", "--keep-fields", "id,sytem"]) == 0
    assert [json.loads(line)["sytem"] for line in output.read_text(encoding="utf-8").splitlines()] == [None] * 4
    err = capsys.readouterr().err
    assert "kept field 'sytem' (--keep-fields): no candidate has it; its column is null" in err
    assert "'id'" not in err


def test_score_keep_fields_from_csv_keeps_the_strings(tmp_path, train):
    candidates = tmp_path / "c.csv"
    candidates.write_text("id,text\n7,a headline\n8,another one\n", encoding="utf-8")
    output = tmp_path / "o.jsonl"
    assert main(["score", "--train", str(train), "--candidates", str(candidates), "--output", str(output),
                 "--quiet", "--device", "cpu", "--paper-thresholds", "--keep-fields", "id"]) == 0
    assert [json.loads(line)["id"] for line in output.read_text(encoding="utf-8").splitlines()] == ["7", "8"]


@pytest.mark.parametrize("environment, expected", [({}, "1"), ({"OMP_NUM_THREADS": "2"}, None)])
def test_the_command_line_runs_blas_on_one_thread_unless_a_count_is_set(environment, expected):
    """OpenBLAS's threads spin on a busy machine (9x the CPU time of an eigendecomposition)."""
    clean = {key: value for key, value in os.environ.items()
             if key not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "GOTO_NUM_THREADS")}
    script = ("import os, sys; from gpu_neighbors.cli import one_blas_thread; one_blas_thread(); "
              "print(os.environ.get('OPENBLAS_NUM_THREADS'))")
    result = subprocess.run([sys.executable, "-c", script], env={**clean, **environment}, capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == str(expected)
