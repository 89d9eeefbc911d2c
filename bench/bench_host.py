"""Host path: the whole `score` command against the I/O floor, on the same lines, in one run.

Candidates (JSONL, texts spliced from the HUSE summaries) are scored by the default command
(TF-IDF cosine + top-k + intervals, no scorer option given but `--fluency none`: the target is
stated without the fluency part, whose cost is its own; `--workers` at its default, every
core given) against a training set of `train` texts (10 by default: almost no kernel work, so
what is timed is the host: start-up, reading, encoding, the typicality statistics, writing).
Beside it, the same file read and JSON lines of the same fields written (index, text, score,
num_neighbors, std, estimator) by
  * the simplest Python loop: `json.loads` per line, `json.dumps` per row;
  * pyarrow: `pyarrow.json.read_json` for the reading, then the same `json.dumps` per row
    (pyarrow has no JSON writer).
The loops write null for score and std and no interval, nearest similarity or outside flag (ours
writes ten fields), so the comparison leans against us. Each is timed in a
fresh child process (start-up included, as a user would run it), interleaved, medians of
`repeats`; ratio = `score` seconds / loop seconds. `score --workers 1` runs beside it: how much
the default's encoder threads gain on this machine's cores (on a GPU machine's many cores, the
figure that says whether the host needs encoder processes).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from huse import spliced_texts

BENCH = Path(__file__).resolve().parent
PYTHON_LOOP = """
import json, sys
with open(sys.argv[1], encoding="utf-8") as source, open(sys.argv[2], "w", encoding="utf-8") as sink:
    for index, line in enumerate(source):
        text = json.loads(line)["text"]
        sink.write(json.dumps({"index": index, "text": text, "score": None, "num_neighbors": 0,
                               "std": None, "estimator": "threshold"}, ensure_ascii=False) + "\\n")
"""
PYARROW_LOOP = """
import json, sys
import pyarrow.json as pj
texts = pj.read_json(sys.argv[1]).column("text").to_pylist()
with open(sys.argv[2], "w", encoding="utf-8") as sink:
    sink.writelines(json.dumps({"index": index, "text": text, "score": None, "num_neighbors": 0,
                                "std": None, "estimator": "threshold"}, ensure_ascii=False) + "\\n"
                    for index, text in enumerate(texts))
"""


def write_jsonl(path: Path, texts: list[str], scores: list[float] | None = None) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for index, text in enumerate(texts):
            record = {"text": text} if scores is None else {"text": text, "score": scores[index]}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def timed_child(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - start


def measure(candidates: int = 1_000_000, train: int = 10, repeats: int = 3, seed: int = 0,
            workdir: str | None = None) -> dict:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(dir=workdir, prefix="bench_host_") as folder:
        folder = Path(folder)
        train_file = write_jsonl(folder / "train.jsonl", spliced_texts(train, rng),
                                 [rng.random() for _ in range(train)])
        candidate_file = write_jsonl(folder / "candidates.jsonl", spliced_texts(candidates, rng))
        output = folder / "out.jsonl"
        score = [sys.executable, "-m", "gpu_neighbors.cli", "score", "--train", str(train_file), "--candidates",
                 str(candidate_file), "--output", str(output), "--overwrite", "--quiet", "--fluency", "none"]
        commands = {
            "gpu-neighbors score": score,
            "gpu-neighbors score --workers 1": [*score, "--workers", "1"],
            "Python loop (json)": [sys.executable, "-c", PYTHON_LOOP, str(candidate_file), str(output)],
            "pyarrow read + json write": [sys.executable, "-c", PYARROW_LOOP, str(candidate_file), str(output)],
        }
        runs: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(repeats):
            for name, command in commands.items():
                runs[name].append(timed_child(command))
    medians = {name: statistics.median(times) for name, times in runs.items()}
    return {
        "benchmark": f"host path, {candidates:,} candidates x {train} training texts",
        "candidates": candidates,
        "load_average": os.getloadavg(),
        "seconds": runs,
        "median_seconds": medians,
        "ratio_to_python_loop": medians["gpu-neighbors score"] / medians["Python loop (json)"],
        "ratio_to_pyarrow": medians["gpu-neighbors score"] / medians["pyarrow read + json write"],
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "speedup_of_workers": medians["gpu-neighbors score --workers 1"] / medians["gpu-neighbors score"],
    }


QUICK = {"candidates": 20_000, "repeats": 1}


def section(result: dict) -> list[str]:
    """The host benchmark as a results.md section."""
    count = result["candidates"]
    lines = ["## Host path: the whole `score` command against the I/O floor", "",
             f"{result['benchmark']}: each command in a fresh process (start-up included), "
             f"interleaved, medians of {len(next(iter(result['seconds'].values())))}. The loops read "
             "the same file and write the same fields (null scores: cheaper than ours).", "",
             "| command | median s | us / candidate | runs (s) |", "|---|---:|---:|---|"]
    for name, seconds in result["median_seconds"].items():
        runs = ", ".join(f"{value:.2f}" for value in result["seconds"][name])
        lines.append(f"| {name} | {seconds:.2f} | {seconds / count * 1e6:.2f} | {runs} |")
    lines += ["", f"**`score` / Python loop: {result['ratio_to_python_loop']:.2f}x**; `score` / pyarrow "
              f"reading: {result['ratio_to_pyarrow']:.2f}x; `score` with its default workers (every one of "
              f"the {result['cores']} cores given) against `--workers 1`: {result['speedup_of_workers']:.2f}x "
              "faster.", ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=1_000_000)
    parser.add_argument("--train", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    result = measure(args.candidates, args.train, args.repeats)
    print(f"{result['benchmark']}, medians of {args.repeats}, load average "
          f"{' / '.join(f'{value:.2f}' for value in result['load_average'])}")
    for name, seconds in result["median_seconds"].items():
        print(f"  {name:<34}{seconds:8.2f} s  {seconds / args.candidates * 1e6:6.2f} us/candidate  "
              f"runs {[round(value, 2) for value in result['seconds'][name]]}")
    print(f"  score / Python loop: {result['ratio_to_python_loop']:.1f}x; "
          f"score / pyarrow: {result['ratio_to_pyarrow']:.1f}x; default workers ({result['cores']} cores) "
          f"{result['speedup_of_workers']:.2f}x faster than --workers 1")


if __name__ == "__main__":
    main()
