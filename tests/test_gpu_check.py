"""bench/gpu_check.py: a failing step still writes its result; `--pytest-args` takes pytest's
options in both forms; the tests step writes JUnit XML, names every failure in failures.md as
it happens and every skip reason in the summary; and the output stays within what a device
call brings back."""
from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("gpu_check", BENCH / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # puts bench/ on sys.path
    return module


def test_a_failing_step_still_writes_its_result(check, tmp_path, monkeypatch):
    import huse

    monkeypatch.setattr(huse, "HUSE", tmp_path / "nowhere" / "huse_summarization.jsonl")
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    args = argparse.Namespace(device="cpu")
    assert check.run_step("parity", args) is False
    result = json.loads((tmp_path / "out" / "check.json").read_text(encoding="utf-8"))["parity"]
    assert not result["passed"] and "FileNotFoundError" in result["error"] and "nowhere" in result["error"]
    assert "## parity: FAILED" in (tmp_path / "out" / "check.md").read_text(encoding="utf-8")
    written = sorted(path.name for path in (tmp_path / "out").rglob("*"))
    assert written == ["check.json", "check.md"]


@pytest.mark.parametrize("given", [["--pytest-args", "-x -k 'not slow' tests/kernels"],
                                   ["--pytest-args=-x -k 'not slow' tests/kernels"]])
def test_pytest_args_in_both_forms(check, given):
    args = check.parse_arguments(["tests", *given, "--device", "cpu"])
    assert args.steps == ["tests"] and args.device == "cpu"
    assert check.pytest_command(args)[-4:] == ["-x", "-k", "not slow", "tests/kernels"]


def test_fluency_parity_reports_what_moves_against_the_cpu(check, tmp_path, huse_texts, monkeypatch):
    """On the CPU against itself (a tiny random Llama): float32 moves nothing, bfloat16 is
    measured; a tolerance that nothing can meet fails the row."""
    from fluency_model import tiny_model

    model = tiny_model(tmp_path / "model", huse_texts)
    rows = {row["dtype"]: row for row in check.fluency_parity("cpu", model)}
    same = rows["float32"]
    assert same["passed"] and same["moving_share"] == same["flipped_share"] == same["statistics_differing"] == 0
    assert same["unigram_max"] == 0 and same["largest_move"] == 0
    assert "error" not in rows["bfloat16"] and 0 <= rows["bfloat16"]["moving_share"] <= 1
    monkeypatch.setitem(check.FLUENCY_TOLERANCE, "float32", (-1.0, 0.0))
    assert not next(row for row in check.fluency_parity("cpu", model) if row["dtype"] == "float32")["passed"]


def test_all_is_every_step_in_order(check):
    assert check.parse_arguments(["all"]).steps == ["collect", "parity", "tests", "throughput", "bench"]


SAMPLE = '''
import os
from pathlib import Path

import pytest


def test_first_fails():
    assert 1 == 2, "the first failure"


def test_second_sees_the_first_failure_written():
    assert "test_first_fails" in Path(os.environ["GPU_CHECK_FAILURES"]).read_text()


def test_third_skips():
    pytest.skip("needs something absent here")
'''


def test_tests_step_writes_junit_failures_and_skip_reasons(check, tmp_path, monkeypatch):
    sample = tmp_path / "test_sample.py"
    sample.write_text(SAMPLE, encoding="utf-8")
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    args = check.parse_arguments(["tests", "--device", "cpu", "--workers", "0", "--pytest-args",
                                  f"{sample} --rootdir {tmp_path}"])
    args.step_timeout = 300.0
    assert check.run_step("tests", args) is False  # one test fails
    out = tmp_path / "out"
    result = json.loads((out / "check.json").read_text(encoding="utf-8"))["tests"]
    assert (result["tests"], result["failures"], result["skipped"]) == (3, 1, 1), result
    assert result["failed"] == ["test_sample.py::test_first_fails (call)"]
    assert result["skip_reasons"] == {"needs something absent here": 1}
    failures = (out / "failures.md").read_text(encoding="utf-8")
    assert "the first failure" in failures and "test_second" not in failures  # the second passed
    summary = (out / "check.md").read_text(encoding="utf-8")
    assert "1 x needs something absent here" in summary and "test_first_fails" in summary
    assert sorted(path.name for path in out.iterdir()) == ["check.json", "check.md", "failures.md", "junit.xml",
                                                           "pytest.log"]


def test_collect_counts_every_test_and_names_import_errors(check, tmp_path, monkeypatch):
    (tmp_path / "test_fine.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n", encoding="utf-8")
    (tmp_path / "test_broken.py").write_text("import a_package_that_is_not_there\n", encoding="utf-8")
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    args = check.parse_arguments(["collect", "--device", "cpu", "--pytest-args", f"{tmp_path} --rootdir {tmp_path}"])
    args.step_timeout = 300.0
    assert check.run_step("collect", args) is False
    result = json.loads((tmp_path / "out" / "check.json").read_text(encoding="utf-8"))["collect"]
    assert result["collected"] == 2 and len(result["errors"]) == 1 and "test_broken.py" in result["errors"][0]


def test_the_throughput_step_writes_each_figure_as_measured(tmp_path, huse_texts):
    """bench/gpu_throughput.py at toy sizes on the CPU: every part asked for leaves its line, and
    a part that cannot fit the budget says so instead of running."""
    import subprocess
    import sys

    output = tmp_path / "throughput.jsonl"
    subprocess.run([sys.executable, str(BENCH / "gpu_throughput.py"), "--device", "cpu", "--budget", "600",
                    "--output", str(output), "--train", "300", "--candidates", "50,100",
                    "--score-candidates", "200", "--parts", "csr_add,predict,score"], check=True, capture_output=True,
                   cwd=BENCH.parent)
    lines = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert lines[0]["part"] == "machine"
    rates = [line for line in lines if line["part"] == "predict" and "pairs_per_second" in line]
    assert {(line["kernel"], line["candidates"]) for line in rates} == {
        ("bleu", 50), ("bleu", 100), ("tfidf", 50), ("tfidf", 100)}
    addition = next(line for line in lines if line["part"] == "csr_add")
    assert addition["identical"] and addition["entries"] > 0 and addition["columns"] == 300
    score = next(line for line in lines if line["part"] == "score")
    assert score["exit"] == 0 and score["rows_written"] == 200 and score["pairs_per_second"] > 0
    from fluency_model import tiny_model

    model = tiny_model(tmp_path / "model", huse_texts)
    subprocess.run([sys.executable, str(BENCH / "gpu_throughput.py"), "--device", "cpu", "--budget", "300",
                    "--output", str(output), "--parts", "fluency", "--fluency-model", str(model),
                    "--fluency-texts", "20,40"], check=True, capture_output=True, cwd=BENCH.parent)
    rates = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()][-2:]
    assert [(line["part"], line["texts"]) for line in rates] == [("fluency", 20), ("fluency", 40)]
    assert all(line["texts_per_second"] > 0 and 10 < line["tokens_mean"] <= 21 for line in rates)
    subprocess.run([sys.executable, str(BENCH / "gpu_throughput.py"), "--device", "cpu", "--budget", "5",
                    "--output", str(output), "--parts", "score"], check=True, capture_output=True, cwd=BENCH.parent)
    last = json.loads(output.read_text(encoding="utf-8").splitlines()[-1])
    assert last["part"] == "score" and last["skipped"].endswith("s of the budget left") and "exit" not in last


def test_a_deadline_given_by_the_calling_script_stops_steps_from_starting(check, tmp_path, monkeypatch, capsys):
    """The device script starts its clock before the installs and Python's start-up: a deadline
    already past starts no step (and no child), and the nearer of --budget and --deadline holds."""
    import time

    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    assert check.main(["collect", "tests", "--device", "cpu", "--deadline", f"{time.time() - 1:.0f}"]) == 1
    assert capsys.readouterr().err.count("not started") == 2 and not (tmp_path / "out").exists()
    args = check.parse_arguments(["collect", "--budget", "500", "--deadline", f"{time.time() + 100:.0f}"])
    left = check.run_deadline(args) - time.monotonic()
    assert 100 - check.BUDGET_MARGIN - 5 < left <= 100 - check.BUDGET_MARGIN + 1


def test_the_probe_takes_rounded_sqrt_as_one_operation(check, huse_texts, huse_scores):
    """Roots a device rounds its own way inside `rounded_sqrt` (corrected there, in exact
    arithmetic) are no difference: the probe compares rounded_sqrt's result, not its insides."""
    import math

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from gpu_neighbors import NeighborsScorer

    class RootsOff(TorchDispatchMode):
        """Every float64 square root an ulp up, as a device's library might round it."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.sqrt.default and out.dtype == torch.float64:
                out = torch.where(out > 0, torch.nextafter(out, torch.full_like(out, math.inf)), out)
            return out

    with check.recorded_moments() as calls:
        NeighborsScorer(kernel="bleu").fit(huse_texts[:120], huse_scores[:120]).predict(huse_texts[120:160])
    stats, quality, (_, std) = calls[-1]
    row = int(torch.nonzero(torch.isfinite(std) & (std > 0))[0])
    host = check.recorded_operations(stats, quality, row)
    with RootsOff():
        device = check.recorded_operations(stats, quality, row)
    assert {name for name, _, _ in host if "sqrt" in name} == {"rounded_sqrt"}
    assert check.first_difference(host, device) == {"operations": [len(host), len(device)],
                                                    "found": "no operation differs"}
