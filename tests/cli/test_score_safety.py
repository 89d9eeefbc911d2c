"""`gpu-neighbors score` made safe, case by case as users met them: nothing lost, nothing wrong,
nothing run, and every user error a one-line message. Processes, pipes, locks and signals are
real subprocesses; file cases run the command in-process on real files."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import write_jsonl
from gpu_neighbors.cli import main
from gpu_neighbors.estimators import Threshold

COMMAND = [sys.executable, "-m", "gpu_neighbors.cli"]


@pytest.fixture()
def files(tmp_path, huse_records, huse_texts):
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": r["text"], "score": r["score"]} for r in huse_records[:120]])
    candidates = tmp_path / "c.txt"
    candidates.write_text("".join(text + "\n" for text in huse_texts[120:200]), encoding="utf-8")
    return train, candidates


def score(train: Path, candidates: Path | str, output: Path | str, *extra: str) -> list[str]:
    return ["score", "--train", str(train), "--candidates", str(candidates), "--output", str(output),
            "--quiet", "--device", "cpu", "--paper-thresholds", *extra]


# ---------------------------------------------------------------- 1-3: data loss


def test_an_output_that_is_an_input_is_refused_and_the_input_kept(tmp_path, files, capsys, monkeypatch):
    train, candidates = files
    before = candidates.read_bytes(), train.read_bytes()
    (tmp_path / "link.txt").symlink_to(candidates)
    monkeypatch.chdir(tmp_path)
    for output, named in (("c.txt", "--candidates"), ("./c.txt", "--candidates"), ("link.txt", "--candidates"),
                          (str(train), "--train")):
        assert main(score(train, candidates, output)) == 2
        assert f"--output and {named} are the same file" in capsys.readouterr().err
    assert main(score(train, candidates, "out.jsonl", "--skip-bad", "--rejects", "c.txt")) == 2
    assert "--rejects and --candidates are the same file" in capsys.readouterr().err
    assert main(score(train, candidates, "out.jsonl", "--skip-bad", "--rejects", "./out.jsonl")) == 2
    assert "--rejects and --output are the same file" in capsys.readouterr().err
    assert (candidates.read_bytes(), train.read_bytes()) == before


def test_a_second_run_on_the_same_output_fails_at_once(tmp_path, files):
    train, candidates = files
    many = tmp_path / "many.txt"
    many.write_text(candidates.read_text(encoding="utf-8") * 200, encoding="utf-8")
    output = tmp_path / "out.jsonl"
    first = subprocess.Popen([*COMMAND, *score(train, many, output, "--batch-size", "16")],
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not Path(f"{output}.meta.json").exists():
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
        time.sleep(0.02)
    second = subprocess.run([*COMMAND, *score(train, many, output, "--overwrite")],
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 2
    assert "another gpu-neighbors run is writing this output" in second.stderr
    assert "Traceback" not in second.stderr
    assert first.wait(timeout=300) == 0
    assert len(output.read_text(encoding="utf-8").splitlines()) == 80 * 200


def test_a_rerun_that_fails_on_bad_input_leaves_the_finished_output(tmp_path, files, capsys):
    train, candidates = files
    output = tmp_path / "out.jsonl"
    assert main(score(train, candidates, output)) == 0
    finished = output.read_bytes()
    assert main(score(train, candidates, output)) == 2
    assert "exists already; pass --overwrite" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    write_jsonl(bad, [{"text": "fine"}] * 10 + [{"other": "no text field"}])
    assert main(score(train, bad, output, "--overwrite")) == 2
    assert f"{bad}:11: field 'text': missing" in capsys.readouterr().err
    assert output.read_bytes() == finished


# ---------------------------------------------------------------- 4-7: wrong numbers


@pytest.mark.parametrize("source", ["-", "/dev/stdin"])
def test_piped_candidates_are_all_scored(tmp_path, files, source):
    train, candidates = files
    output = tmp_path / "out.jsonl"
    with open(candidates, "rb") as piped:
        done = subprocess.run([*COMMAND, *score(train, source, output)], stdin=piped,
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert len(output.read_text(encoding="utf-8").splitlines()) == 80


def test_results_to_standard_output(tmp_path, files):
    train, candidates = files
    done = subprocess.run([*COMMAND, *score(train, candidates, "-")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["index"] for line in done.stdout.splitlines()] == list(range(80))
    assert not list(tmp_path.glob("-*"))


def interrupted(train: Path, candidates: Path, output: Path) -> None:
    """A run killed after its first durable batch."""
    process = subprocess.Popen([*COMMAND, *score(train, candidates, output, "--batch-size", "8")],
                               stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while True:
        try:
            if json.loads(Path(f"{output}.meta.json").read_text())["rows"] >= 8:
                break
        except (FileNotFoundError, ValueError):
            pass
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    process.kill()
    process.wait()


def test_resume_refuses_inputs_that_changed_under_the_same_path(tmp_path, files, capsys, huse_records):
    train, candidates = files
    many = tmp_path / "many.txt"
    many.write_text(candidates.read_text(encoding="utf-8") * 50, encoding="utf-8")
    output = tmp_path / "out.jsonl"
    interrupted(train, many, output)
    original = many.read_text(encoding="utf-8")
    many.write_text("a different first line\n" + original.split("\n", 1)[1], encoding="utf-8")
    assert main(score(train, many, output, "--resume")) == 2
    assert "the candidates changed since the earlier run" in capsys.readouterr().err
    many.write_text(original, encoding="utf-8")
    records = [{"text": r["text"], "score": r["score"]} for r in huse_records[:120]]
    records[7]["score"] = 0.123
    write_jsonl(train, records)  # same path, same count, other content
    assert main(score(train, many, output, "--resume")) == 2
    assert "train_content_sha256" in capsys.readouterr().err


def test_tsv_quotes_do_not_swallow_lines(tmp_path, files):
    _, candidates = files
    train = tmp_path / "train.tsv"
    lines = ["text\tscore"] + [f'"quoted headline number {i}\t0.{i % 9 + 1}' for i in range(30)]
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    output = tmp_path / "out.jsonl"
    assert main(score(train, candidates, output)) == 0
    assert json.loads(Path(f"{output}.meta.json").read_text())["header"]["signature"].count("n:30") == 1


def test_texts_over_max_chars_are_refused(tmp_path, files, capsys):
    train, _ = files
    candidates = tmp_path / "long.txt"
    candidates.write_text("short\n" + "x" * 600 + "\n", encoding="utf-8")  # the training texts are shorter
    assert main(score(train, candidates, tmp_path / "out.jsonl", "--max-chars", "500")) == 2
    assert "long.txt:2: is 600 characters long, more than the limit of 500 (--max-chars)" in capsys.readouterr().err


# ---------------------------------------------------------------- 9-11: messages, not tracebacks


def test_an_unknown_tokenizer_fails_at_once(tmp_path, files, capsys):
    train, candidates = files
    started = time.monotonic()
    assert main(score(train, candidates, tmp_path / "out.jsonl", "--tokenizer", "whitspace")) == 2
    assert time.monotonic() - started < 30
    assert "unknown tokenizer 'whitspace': not one of the built-in ones (whitespace, 13a, chars, intl, zh, char, rouge-score, rouge-score-stem)" in capsys.readouterr().err


@pytest.mark.parametrize("output, message", [
    ("folder", "is not a regular file"),
    ("/dev/null", "is not a regular file"),
    ("c.txt/out.jsonl", "cannot create its folder"),  # unwritable even for root, unlike a read-only folder
])
def test_outputs_that_cannot_be_written_are_messages(tmp_path, files, capsys, output, message):
    train, candidates = files
    (tmp_path / "folder").mkdir()
    target = output if output.startswith("/") else str(tmp_path / output)
    assert main(score(train, candidates, target)) == 2
    error = capsys.readouterr().err  # after the training set's one-line warnings, if any
    lines = [line for line in error.splitlines() if not line.startswith("gpu-neighbors: warning: ")]
    assert lines[0].startswith("gpu-neighbors: error:") and message in error and "Traceback" not in error
    assert not Path("/dev/null.meta.json").exists()


def test_dev_stdout_is_refused_in_favour_of_dash(tmp_path, files):
    train, candidates = files
    done = subprocess.run([*COMMAND, *score(train, candidates, "/dev/stdout")], capture_output=True,
                          text=True, timeout=300)  # stdout is a pipe: not a file to resume into
    assert done.returncode == 2 and "is not a regular file; give a file path, or - for standard output" in done.stderr
    assert not Path("/dev/stdout.meta.json").exists() and done.stdout == ""


def test_a_full_disk_is_one_message(tmp_path, files, capsys, monkeypatch):
    train, candidates = files
    import gpu_neighbors.data.writer as writer

    def no_space(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer.os, "fsync", no_space)
    assert main(score(train, candidates, tmp_path / "out.jsonl")) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("gpu-neighbors: warning: ")]
    assert len(lines) == 1 and lines[0].startswith(f"gpu-neighbors: error: {tmp_path / 'out.jsonl'}"), lines
    assert lines[0].endswith(": No space left on device")  # issue 50: which file, named


def test_device_meta_is_refused(tmp_path, files, capsys):
    train, candidates = files
    arguments = score(train, candidates, tmp_path / "out.jsonl")
    arguments[arguments.index("cpu")] = "meta"
    assert main(arguments) == 2
    assert "device 'meta' cannot score" in capsys.readouterr().err


def wait_for_reader(fifo: Path, process: subprocess.Popen) -> int:
    """The write end of `fifo`, opened once `process` has opened it for reading (a non-blocking
    open for writing fails with ENXIO until then); fails if the process ends first."""
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno != errno.ENXIO:
                raise
        if process.poll() is not None:
            pytest.fail(f"exited with {process.returncode} before reading {fifo}: {process.communicate()[1]}")
        time.sleep(0.01)  # polling the condition, not waiting on a guess


def wait_until_blocked_reading(process: subprocess.Popen) -> None:
    """Returns once the process's main thread sleeps in a pipe read. A signal that lands between
    its open() of the FIFO and that read() runs Python's handler before the read starts, and the
    read then blocks with the KeyboardInterrupt pending (1 run in ~10 under load: the test hung);
    a signal during the read interrupts it."""
    wchan = Path(f"/proc/{process.pid}/wchan")
    while "pipe_read" not in (state := wchan.read_text()):
        if state.strip() in ("", "0"):  # a kernel that hides where threads sleep: signal at once, as before
            return
        if process.poll() is not None:
            pytest.fail(f"exited with {process.returncode} before reading: {process.communicate()[1]}")
        time.sleep(0.01)  # polling the condition


def test_ctrl_c_while_loading_is_a_message(tmp_path, files):
    _, candidates = files
    train = tmp_path / "pipe.jsonl"
    os.mkfifo(train)  # the child blocks reading it: interrupted while loading, whatever the machine's speed
    # SIGINT restored in the child: a shell starts background jobs with it ignored, and a test
    # suite run as one would otherwise see no interrupt at all.
    process = subprocess.Popen([*COMMAND, *score(train, candidates, tmp_path / "out.jsonl")],
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    writer = wait_for_reader(train, process)  # the child has opened the training file
    try:
        wait_until_blocked_reading(process)
        process.send_signal(signal.SIGINT)
        _, error = process.communicate(timeout=120)
    finally:
        os.close(writer)
    assert process.returncode == 130, error
    assert "gpu-neighbors: interrupted" in error and "Traceback" not in error


def test_help_lists_every_tokenizer_and_default(capsys):
    with pytest.raises(SystemExit):
        main(["score", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for name in ("whitespace", "13a", "chars"):
        assert name in shown
    assert "--overwrite" in shown and "--max-chars" in shown and "default: 100,000" in shown


# ---------------------------------------------------------------- 7: settings that cannot work


@pytest.mark.parametrize("tau", ["-0.5", "1.5"])
def test_a_threshold_outside_a_bounded_kernel_s_range_is_refused(tmp_path, files, capsys, tau):
    train, candidates = files
    assert main(score(train, candidates, tmp_path / "out.jsonl", "--tau", tau)) == 2
    assert f"--tau must be in [0, 1] for the bleu kernel (its similarities lie there), not {float(tau)}" in capsys.readouterr().err


def test_more_neighbours_than_training_texts_is_refused_or_warned(tmp_path, files, capsys, huse_records):
    _, candidates = files
    tiny = write_jsonl(tmp_path / "tiny.jsonl", [{"text": r["text"], "score": r["score"]} for r in huse_records[:3]])
    assert main(score(tiny, candidates, tmp_path / "out.jsonl", "--min-neighbors", "4")) == 2
    assert "--min-neighbors must be at most the 3 training texts" in capsys.readouterr().err
    assert main(score(tiny, candidates, tmp_path / "out.jsonl")) == 0
    assert ("gpu-neighbors: warning: 3 training texts are fewer than the 5 neighbours an estimate needs"
            in capsys.readouterr().err)


def test_duplicate_training_texts_are_warned_about(huse_texts, huse_scores):
    from gpu_neighbors import NeighborsScorer

    texts, scores = huse_texts[:60] + huse_texts[:4], huse_scores[:60] + huse_scores[:4]
    with pytest.warns(UserWarning, match="4 of the 64 training texts repeat another one"):
        NeighborsScorer(kernel="bleu", estimator=Threshold.paper(), device="cpu").fit(texts, scores)
