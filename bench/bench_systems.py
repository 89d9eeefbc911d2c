"""`gpu-neighbors systems` against `gpu-neighbors score` on the same inputs, in the same run.

The issue's target: 10^6 candidates x 2,000 training texts, 10 systems, the comparison within
1.2x of `score` alone. Both commands run as child processes (start-up, reading and fitting the
training set included) on the same files: a training set of spliced HUSE headlines (bench/huse.py)
with random scores, and candidates {"text", "system", "input"}, candidate i made by system
i mod S for input i // S (so every system answers every input: paired tests). Both get the
same --threads and --workers; runs alternate (score, systems, score, systems, ...) so load
drifts on this shared machine hit both. Reported: each run's wall seconds and peak resident
memory (the child's VmHWM), and the ratio of the medians.

    python bench/bench_systems.py --candidates 100000            # ~2 minutes here
    python bench/bench_systems.py --candidates 1000000 --repeats 1
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_scale import POLL_SECONDS, high_water_mark
from huse import spliced_texts

GIB = 1 << 30


def write_files(folder: Path, candidates: int, train: int, systems: int, seed: int) -> tuple[Path, Path]:
    rng = random.Random(seed)
    train_path, candidates_path = folder / "train.jsonl", folder / "candidates.jsonl"
    with train_path.open("w", encoding="utf-8") as handle:
        for text in spliced_texts(train, rng):
            handle.write(json.dumps({"text": text, "score": round(rng.random(), 4)}) + "\n")
    with candidates_path.open("w", encoding="utf-8") as handle:
        for index, text in enumerate(spliced_texts(candidates, rng)):
            handle.write(json.dumps({"text": text, "system": f"system-{index % systems}",
                                     "input": index // systems}) + "\n")
    return train_path, candidates_path


def run(command: list[str]) -> dict:
    """One child process: wall seconds and peak resident bytes."""
    started = time.perf_counter()
    peak = 0
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while child.poll() is None:
        peak = max(peak, high_water_mark(child.pid))
        time.sleep(POLL_SECONDS)
    wall = time.perf_counter() - started
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{child.stderr.read().decode()[-2000:]}")
    return {"wall_seconds": wall, "peak_rss_gib": peak / GIB}


def measure(candidates: int, train: int, systems: int, repeats: int, threads: int, workers: int,
            seed: int = 0, workdir: str | None = None) -> dict:
    with tempfile.TemporaryDirectory(dir=workdir, prefix="bench_systems_") as folder:
        folder = Path(folder)
        train_path, candidates_path = write_files(folder, candidates, train, systems, seed)
        common = ["--train", str(train_path), "--candidates", str(candidates_path), "--quiet",
                  "--threads", str(threads), "--workers", str(workers), "--fluency", "none"]
        base = [sys.executable, "-m", "gpu_neighbors.cli"]
        score = [*base, "score", *common, "--output", str(folder / "scores.jsonl"), "--overwrite"]
        compare = [*base, "systems", *common, "--system-field", "system", "--pair-field", "input", "--json",
                   "--save", str(folder / "systems.json"), "--overwrite"]
        runs: dict[str, list[dict]] = {"score": [], "systems": []}
        for _ in range(repeats):
            runs["score"].append(run(score))
            runs["systems"].append(run(compare))
        result = json.loads((folder / "systems.json").read_text())
    median = {name: statistics.median(r["wall_seconds"] for r in found) for name, found in runs.items()}
    return {"candidates": candidates, "train": train, "systems": systems, "threads": threads, "workers": workers,
            "runs": runs, "median_seconds": median, "ratio": median["systems"] / median["score"],
            "pairs_compared": len(result["candidates"]["pairs"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=int, default=100_000)
    parser.add_argument("--train", type=int, default=2_000)
    parser.add_argument("--systems", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    result = measure(args.candidates, args.train, args.systems, args.repeats, args.threads, args.workers,
                     workdir=args.workdir)
    print(json.dumps(result, indent=2))
    print(f"\n{args.candidates:,} candidates x {args.train:,} training texts, {args.systems} systems: "
          f"score {result['median_seconds']['score']:.1f} s, systems {result['median_seconds']['systems']:.1f} s, "
          f"ratio {result['ratio']:.2f}")


if __name__ == "__main__":
    main()
