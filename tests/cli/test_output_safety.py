"""Issue 22: every command that writes (score, self-bleu, mbr, pairs, report) writes through one
mechanism (`data.output.SafeOutput`): nothing lost, nothing overwritten, nothing cut taken as
finished. Killed and concurrent runs are real processes; a full disk is the kernel's file-size
limit (RLIMIT_FSIZE), which fails the write exactly as ENOSPC would, at a byte we choose."""
from __future__ import annotations

import fcntl
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import needs, write_jsonl
from gpu_neighbors.cli import main

LIMIT = 2048  # bytes a limited run may write to any one file: more than a lock or progress record
# The CLI with SIGXFSZ at its default action: the process dies, without any cleanup, like kill -9,
# at the write that crosses LIMIT (Python ignores the signal, which turns it into an OSError).
KILLED_AT_LIMIT = ("import signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_DFL); "
                   "from gpu_neighbors.cli import main; sys.exit(main(sys.argv[1:]))")


@pytest.fixture()
def files(tmp_path, huse_records):
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": r["text"], "score": r["score"]} for r in huse_records[:60]])
    data = write_jsonl(tmp_path / "data.jsonl", [{"text": r["text"], "score": r["score"], "judgments": r["judgments"],
                                                  "source": r["source"]} for r in huse_records[60:120]])
    candidates = write_jsonl(tmp_path / "c.jsonl", [{"text": r["text"]} for r in huse_records[60:120]] + [{"no": 1}])
    small = write_jsonl(tmp_path / "small.jsonl", [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()[:30]])
    return {"train": train, "data": data, "candidates": candidates, "small": small}


def command(name: str, files: dict[str, Path], output: Path, data: Path | None = None) -> list[str]:
    """The command `name` writing `output` (report: a folder), reading `data` (default its file)."""
    cpu = ["--device", "cpu"]
    if name == "score":
        return ["score", "--train", str(files["train"]), "--candidates", str(data or files["candidates"]),
                "--output", str(output), "--quiet", "--paper-thresholds", "--skip-bad",
                "--batch-size", "8", *cpu]  # small batches: cut before the bad last record is read
    if name == "self-bleu":
        return ["self-bleu", "--data", str(data or files["data"]), "--output", str(output), *cpu]
    if name == "mbr":
        return ["mbr", "--candidates", str(data or files["data"]), "--output", str(output), *cpu]
    if name == "pairs":
        return ["pairs", "--candidates", str(data or files["data"]), "--output", str(output), *cpu]
    assert name == "report"  # the smallest report: its nested tuning is the slowest step of these tests
    return ["report", "--data", str(data or files["small"]), "--out", str(output), "--kernels", "bleu", "--folds", "2",
            "--runs", "1", "--sizes", "15", "--resamples", "0", *cpu]


OUTPUTS = {"score": "out.jsonl", "self-bleu": "out.jsonl", "mbr": "out.jsonl", "pairs": "out.npy", "report": "report"}


INPUTS = {"train.jsonl", "data.jsonl", "c.jsonl", "many.jsonl", "small.jsonl"}
RESUME_RECORDS = (".partial", ".meta.json")  # what a resumable run (score) keeps for --resume


def snapshot(folder: Path, leave_out: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Every file under `folder` but the inputs (and names ending in `leave_out`), with its bytes."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file() and path.name not in INPUTS and not path.name.endswith(leave_out)}


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """A full disk for this process: a write past `limit` bytes fails with EFBIG."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def limited_child() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


@pytest.mark.parametrize("name", [pytest.param(name, marks=needs("matplotlib")) if name == "report" else name
                                  for name in OUTPUTS])
def test_a_full_disk_or_a_kill_mid_write_keeps_the_finished_outputs(tmp_path, files, name, capsys):
    output = tmp_path / OUTPUTS[name]
    argv = command(name, files, output)
    assert main(argv) == 0
    capsys.readouterr()
    finished = snapshot(tmp_path, RESUME_RECORDS)
    assert main(argv) == 2  # a finished output is replaced only with --overwrite
    assert "exists already; pass --overwrite" in capsys.readouterr().err
    if name != "score":  # one pass: --resume is refused with the reason
        with pytest.raises(SystemExit):
            main([*argv, "--resume"])
        assert f"{name} cannot resume: it writes its output in one pass" in capsys.readouterr().err
    assert any(key.startswith("out.jsonl.rejects") for key in finished) == (name == "score")

    with file_size_limit(LIMIT):  # the disk fills during an --overwrite rerun
        code = main([*argv, "--overwrite"])
    error = capsys.readouterr().err
    assert code == 2 and "File too large" in error and "Traceback" not in error, error
    assert f"error: {output}" in error, error  # issue 50: the file named (its partial file, or the report's)
    # the output and its rejects as they were; nothing else left behind but a resumable run's record
    assert snapshot(tmp_path, RESUME_RECORDS if name == "score" else ()) == finished

    if name == "report":
        return  # a killed report would build it a third time (seconds): the mechanism is the one tested above
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    killed = subprocess.run([sys.executable, "-c", KILLED_AT_LIMIT, *argv, "--overwrite"], env=environment,
                            preexec_fn=limited_child, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGXFSZ, killed.stderr
    assert snapshot(tmp_path, (*RESUME_RECORDS, ".lock")) == finished  # no cleanup ran: only the sidecars differ


def test_a_run_killed_mid_write_leaves_no_output_and_the_rerun_is_not_refused(tmp_path, files, capsys):
    output = tmp_path / "out.jsonl"
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    many = write_jsonl(tmp_path / "many.jsonl", [json.loads(line) for line in
                                                  files["data"].read_text(encoding="utf-8").splitlines()] * 3)
    argv = command("self-bleu", files, output, data=many)
    killed = subprocess.run([sys.executable, "-c", KILLED_AT_LIMIT, *argv], env=environment,
                            preexec_fn=limited_child, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGXFSZ, killed.stderr
    assert not output.exists()  # the cut rows are in out.jsonl.partial, never under the output's name
    assert main(argv) == 0  # not "exists; pass --overwrite"
    assert len(output.read_text(encoding="utf-8").splitlines()) == 180


def test_a_second_run_on_the_same_output_fails_at_once(tmp_path, files):
    """For self-bleu, mbr and pairs at once: each first run holds its lock while it waits for
    its input (a FIFO); each second run is refused at once, and each output is the first run's.
    The first mbr run is then killed with SIGKILL: it leaves no output, and its stale lock file
    does not stop the next run."""
    names = ["self-bleu", "mbr", "pairs"]
    outputs = {name: tmp_path / name / OUTPUTS[name] for name in names}
    fifos = {name: tmp_path / name / "fifo.jsonl" for name in names}
    firsts: dict[str, subprocess.Popen] = {}
    cli = [sys.executable, "-m", "gpu_neighbors.cli"]
    try:
        for name in names:
            outputs[name].parent.mkdir()
            os.mkfifo(fifos[name])
            firsts[name] = subprocess.Popen([*cli, *command(name, files, outputs[name], data=fifos[name])],
                                            stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not all(Path(f"{output}.lock").exists() for output in outputs.values()):
            for first in firsts.values():
                assert first.poll() is None, first.communicate()[1]
            assert time.monotonic() < deadline, "a first run took no lock on its output"
            time.sleep(0.02)
        seconds = {name: subprocess.Popen([*cli, *command(name, files, outputs[name]), "--overwrite"],
                                          stderr=subprocess.PIPE, text=True) for name in names}
        for name, second in seconds.items():
            error = second.communicate(timeout=300)[1]
            assert second.returncode == 2 and "another gpu-neighbors run is writing this output" in error, error
            assert "Traceback" not in error
        firsts["mbr"].send_signal(signal.SIGKILL)  # kill -9 while it holds the lock
        assert firsts["mbr"].wait(timeout=60) == -signal.SIGKILL
        rows = files["data"].read_text(encoding="utf-8").splitlines()[:7]
        for name in ("self-bleu", "pairs"):
            with open(fifos[name], "w", encoding="utf-8") as pipe:
                pipe.write("\n".join(rows) + "\n")
            assert firsts[name].wait(timeout=300) == 0, firsts[name].communicate()[1]
    finally:
        for first in firsts.values():
            if first.poll() is None:
                first.kill()
                first.wait()
    import numpy as np

    assert np.load(outputs["pairs"]).shape == (7, 7)  # the first run's texts
    assert len(outputs["self-bleu"].read_text(encoding="utf-8").splitlines()) == 7
    assert not any(Path(f"{outputs[name]}.lock").exists() for name in ("self-bleu", "pairs"))
    # The killed run left its lock file but no lock and no output: a plain rerun goes through.
    assert not outputs["mbr"].exists() and Path(f"{outputs['mbr']}.lock").exists()
    assert main(command("mbr", files, outputs["mbr"])) == 0
    assert len(outputs["mbr"].read_text(encoding="utf-8").splitlines()) == 60


@needs("matplotlib")
def test_a_held_lock_refuses_report_too(tmp_path, files, capsys):
    page = tmp_path / "report" / "report.md"
    page.parent.mkdir()
    with open(f"{page}.lock", "wb") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        assert main(command("report", files, tmp_path / "report")) == 2
    assert "another gpu-neighbors run is writing this output" in capsys.readouterr().err
    assert not page.exists()


def fit_command(files: dict[str, Path], folder: Path, train: str = "train") -> list[str]:
    return ["fit", "--train", str(files[train]), "--save", str(folder), "--kernel", "tfidf", "--device", "cpu"]


def test_fit_save_on_a_full_disk_or_killed_keeps_the_old_scorer(tmp_path, files, capsys):
    """Issue 50: `fit --save DIR --overwrite` on a full disk stopped with "No space left on device"
    (naming no file), leaving the old scorer.json beside the new tensors: the old scorer was lost.
    Now the new scorer is written beside the folder and swapped in whole: a full disk, or a kill
    at the write that fills it, leaves the old scorer as it was, and loadable."""
    folder = tmp_path / "saved" / "scorer"
    assert main(fit_command(files, folder)) == 0
    capsys.readouterr()
    finished = snapshot(tmp_path)
    with file_size_limit(LIMIT):
        code = main([*fit_command(files, folder, "data"), "--overwrite"])
    error = capsys.readouterr().err
    assert code == 2 and "File too large" in error and "Traceback" not in error, error
    assert f"error: {folder}.partial/" in error, error  # the file it was writing
    assert snapshot(tmp_path) == finished  # nothing else left beside it
    from gpu_neighbors import NeighborsScorer

    assert NeighborsScorer.load(folder, device="cpu").num_train == 60
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    killed = subprocess.run([sys.executable, "-c", KILLED_AT_LIMIT, *fit_command(files, folder, "data"), "--overwrite"],
                            env=environment, preexec_fn=limited_child, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGXFSZ, killed.stderr
    assert snapshot(tmp_path, (".partial", ".lock")) == finished  # only the killed save's partial files differ
    assert NeighborsScorer.load(folder, device="cpu").num_train == 60
    assert main([*fit_command(files, folder, "data"), "--overwrite"]) == 0  # clears what the kill left
    assert NeighborsScorer.load(folder, device="cpu").num_train == 60 and sorted(os.listdir(folder.parent)) == [
        "scorer"]


def test_a_second_fit_on_the_same_folder_fails_at_once(tmp_path, files, capsys):
    """Issue 50: `fit --save` took no lock (two runs at once: one removed the other's
    scorer.json.partial). It takes the one every writing command takes, before it reads or fits."""
    from gpu_neighbors.data.output import locked

    folder = tmp_path / "scorer"
    with locked(folder):  # another run, writing the folder
        assert main(fit_command(files, folder)) == 2
    error = capsys.readouterr().err
    assert "another gpu-neighbors run is writing this output" in error and "Traceback" not in error, error
    assert not folder.exists() and not Path(f"{folder}.lock").exists()
    assert main(fit_command(files, folder)) == 0 and not Path(f"{folder}.lock").exists()
