"""Threads on a busy machine: `predict` under torch's default threads, one thread, and
OMP_WAIT_POLICY=PASSIVE, each in a fresh child process (the wait policy is read when torch
loads), interleaved, medians of `repeats`.

OpenMP threads that finish a parallel region spin for a while before they sleep; on a machine
whose cores are busy with other work, a spinning thread takes a core from the thread that has
work, so the default can be many times slower than one thread. The passive policy makes them
sleep at once.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
CHILD = """
import json, random, sys, time
sys.path.insert(0, {bench!r})
import numpy as np, torch
from gpu_neighbors import NeighborsScorer
from huse import spliced_texts
threads = {threads!r}
if threads:
    torch.set_num_threads(threads)
rng = random.Random(0)
train, candidates = spliced_texts({train}, rng), spliced_texts({candidates}, rng)
scorer = NeighborsScorer(kernel="bleu", thresholds="paper").fit(train, np.linspace(0, 1, len(train)))
scorer.predict(candidates[:200])
start = time.perf_counter()
scorer.predict(candidates)
print(json.dumps({{"seconds": time.perf_counter() - start, "threads": torch.get_num_threads()}}))
"""
SETTINGS = {
    "torch default threads": ({}, None),
    "1 thread": ({}, 1),
    "default threads, OMP_WAIT_POLICY=PASSIVE": ({"OMP_WAIT_POLICY": "PASSIVE"}, None),
}


def run(environment: dict[str, str], threads: int | None, train: int, candidates: int) -> dict:
    code = CHILD.format(bench=str(BENCH), threads=threads, train=train, candidates=candidates)
    env = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    output = subprocess.run([sys.executable, "-c", code], env={**env, **environment},
                            capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def measure(train: int = 2000, candidates: int = 2000, repeats: int = 3) -> dict:
    runs: dict[str, list[float]] = {name: [] for name in SETTINGS}
    threads: dict[str, int] = {}
    for _ in range(repeats):
        for name, (environment, count) in SETTINGS.items():
            result = run(environment, count, train, candidates)
            runs[name].append(result["seconds"])
            threads[name] = result["threads"]
    pairs = train * candidates
    return {
        "pairs": pairs,
        "load_average": os.getloadavg(),
        "settings": {
            name: {"threads": threads[name], "median_seconds": statistics.median(times),
                   "ns_per_pair": statistics.median(times) / pairs * 1e9, "seconds": times}
            for name, times in runs.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--candidates", type=int, default=2000)
    args = parser.parse_args()
    result = measure(args.train, args.candidates)
    print(f"predict, {args.candidates:,} x {args.train:,} BLEU*, medians of 3; load average "
          f"{' / '.join(f'{value:.2f}' for value in result['load_average'])}")
    for name, setting in result["settings"].items():
        print(f"  {name:<44} {setting['threads']} thread(s) {setting['median_seconds']:7.3f} s "
              f"{setting['ns_per_pair']:7.1f} ns/pair  runs {[round(s, 3) for s in setting['seconds']]}")


if __name__ == "__main__":
    main()
