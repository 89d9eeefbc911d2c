"""Issue 32: a full disk, made real. Every output of every command is first written on a small
tmpfs; the disk is then filled until only about half of that output's size is free, and the
same command, rerun with --overwrite in a real process, must fail with the OS's reason and
leave the finished outputs byte for byte as they were (no success line, no file of zeros).

RLIMIT_FSIZE (tests/cli/test_output_safety.py) fails a file's first `truncate` past the limit;
only a real file system that fills up gives the short positioned write of a file sized in
advance (pairs --output M.npy). Mounting needs root: elsewhere the tests skip, saying why."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import needs, write_jsonl

PAGE = 4096
DISK = 4 << 20  # the tmpfs: room for every finished output of one command


@pytest.fixture()
def disk(tmp_path) -> Iterator[Path]:
    """A fresh tmpfs of DISK bytes, unmounted afterwards."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"no size-limited file system can be mounted here ({mounted.stderr.strip() or 'mount failed'})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture()
def inputs(tmp_path, huse_records) -> dict[str, Path]:
    records = huse_records[:120]
    train = write_jsonl(tmp_path / "train.jsonl",
                        [{"text": r["text"], "score": r["score"], "source": r["source"]} for r in records[:60]])
    data = write_jsonl(tmp_path / "data.jsonl", [{"text": r["text"], "score": r["score"], "judgments": r["judgments"],
                                                  "source": r["source"]} for r in records[60:]])
    candidates = write_jsonl(tmp_path / "c.jsonl", [{"text": r["text"]} for r in records[60:]] + [{"no": 1}])
    small = write_jsonl(tmp_path / "small.jsonl", [json.loads(line) for line in
                                                   data.read_text(encoding="utf-8").splitlines()[:30]])
    return {"train": train, "data": data, "candidates": candidates, "small": small}


def command(case: str, files: dict[str, Path], out: Path) -> list[str]:
    """The command of `case` with every output under the folder `out`."""
    cpu = ["--device", "cpu"]
    score = ["score", "--train", str(files["train"]), "--candidates", str(files["candidates"]), "--quiet",
             "--paper-thresholds", "--skip-bad", *cpu]
    systems = ["systems", "--train", str(files["train"]), "--candidates", str(files["data"]), "--system-field",
               "source", "--resamples", "50", "--trials", "50", *cpu]
    return {
        "score jsonl": [*score, "--output", str(out / "out.jsonl")],
        "score rejects": [*score, "--output", str(out / "out.jsonl"), "--rejects", str(out / "bad.jsonl")],
        "score parquet": [*score, "--output", str(out / "out.parquet")],
        "self-bleu": ["self-bleu", "--data", str(files["data"]), "--output", str(out / "out.jsonl"), *cpu],
        "mbr": ["mbr", "--candidates", str(files["data"]), "--output", str(out / "out.jsonl"), *cpu],
        "pairs npy": ["pairs", "--candidates", str(files["data"]), "--output", str(out / "m.npy"), *cpu],
        "pairs parquet": ["pairs", "--candidates", str(files["data"]), "--top-k", "5", "--output",
                          str(out / "top.parquet"), *cpu],
        "report": ["report", "--data", str(files["small"]), "--out", str(out / "report"), "--kernels", "bleu",
                   "--folds", "2", "--runs", "1", "--sizes", "15", "--resamples", "0", *cpu],
        "systems save": [*systems, "--save", str(out / "systems.md")],
        "systems plot": [*systems, "--plot", str(out / "systems.png")],
        "fit save": ["fit", "--train", str(files["train"]), "--save", str(out / "scorer"), "--kernel", "tfidf", *cpu],
    }[case]


CASES = ["score jsonl", "score rejects", pytest.param("score parquet", marks=needs("pyarrow")), "self-bleu", "mbr",
         "pairs npy", pytest.param("pairs parquet", marks=needs("pyarrow")),
         pytest.param("report", marks=needs("matplotlib")), "systems save",
         pytest.param("systems plot", marks=needs("matplotlib")), "fit save"]
RESUME_RECORDS = (".partial", ".meta.json")  # what a failed JSON Lines score keeps for --resume


def cli(argv: list[str]) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "gpu_neighbors.cli", *argv], env=environment,
                          capture_output=True, text=True, timeout=600)


def snapshot(folder: Path, leave_out: tuple[str, ...]) -> dict[str, bytes]:
    """Every file under `folder` with its bytes, but the filler and names ending in `leave_out`."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file() and not path.name.startswith("filler") and not path.name.endswith(leave_out)}


def fill(disk: Path, leave: int) -> None:
    """Fills `disk` until `leave` bytes (whole pages) are free."""
    stats = os.statvfs(disk)
    free = stats.f_bavail * stats.f_frsize
    (disk / f"filler-{uuid.uuid4().hex}").write_bytes(b"\1" * max(free - leave, 0))


@pytest.mark.parametrize("case", CASES)
def test_a_full_disk_fails_the_run_and_keeps_every_finished_output(disk, inputs, case):
    argv = command(case, inputs, disk)
    first = cli(argv)
    assert first.returncode == 0, first.stderr
    resumable = case in ("score jsonl", "score rejects")  # keeps its partial file and record for --resume
    finished = snapshot(disk, RESUME_RECORDS if resumable else ())
    size = sum(len(content) for content in finished.values())
    assert size > 0, finished.keys()
    fill(disk, leave=size // 2 // PAGE * PAGE)  # the disk fills halfway through the new outputs

    rerun = cli([*argv, "--overwrite"])
    assert rerun.returncode == 2, (rerun.stdout, rerun.stderr)
    assert "No space left on device" in rerun.stderr and "Traceback" not in rerun.stderr, rerun.stderr
    assert f"error: {disk}/" in rerun.stderr, rerun.stderr  # issue 50: the file it was writing, named
    assert "->" not in rerun.stdout + rerun.stderr  # no success line
    assert snapshot(disk, RESUME_RECORDS if resumable else ()) == finished  # as they were, nothing else left
    if case == "fit save":  # issue 50: the old scorer.json beside the new tensors, refused on load
        from gpu_neighbors import NeighborsScorer

        assert NeighborsScorer.load(disk / "scorer", device="cpu").num_train == 60
