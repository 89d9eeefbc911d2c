"""Threads, idle and on a busy machine: library calls under torch's default thread count (which
the library now runs on one thread, restoring the caller's count after), under one thread set
by the caller, and under the default count chosen explicitly (`set_threads`, which the library
keeps: the behaviour before), each in a fresh child process, interleaved, medians of `repeats`;
then the same with `--load` processes spinning on cores.

OpenMP threads that finish a parallel region spin for a while before they sleep; on a machine
whose cores are busy with other work, a spinning thread takes a core from the thread that has
work, so many threads can be much slower than one.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
CHILD = """
import json, random, sys, time
sys.path.insert(0, {bench!r})
import numpy as np, torch
import gpu_neighbors
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.core.threads import TORCH_DEFAULT, set_threads
from huse import spliced_texts
setting = {setting!r}
if setting == "one":
    torch.set_num_threads(1)
elif setting == "chosen":
    set_threads(TORCH_DEFAULT)
rng = random.Random(0)
train, candidates = spliced_texts({train}, rng), spliced_texts({candidates}, rng)
references = [[text] for text in spliced_texts({candidates}, rng)]
scorer = NeighborsScorer(kernel="bleu", thresholds="paper").fit(train, np.linspace(0, 1, len(train)))
scorer.predict(candidates[:200])
times = {{}}
start = time.perf_counter(); scorer.predict(candidates); times["predict"] = time.perf_counter() - start
start = time.perf_counter(); gpu_neighbors.self_bleu(candidates, device="cpu"); times["self_bleu"] = time.perf_counter() - start
start = time.perf_counter(); gpu_neighbors.sentence_bleu(candidates, references); times["sentence_bleu"] = time.perf_counter() - start
print(json.dumps({{"seconds": times, "threads_after": torch.get_num_threads(), "default": TORCH_DEFAULT}}))
"""
SETTINGS = {
    "default": "torch's default count, untouched (library: one thread inside its calls)",
    "one": "torch.set_num_threads(1) by the caller",
    "chosen": "the default count chosen explicitly (kept by the library: the old behaviour)",
}


def spin() -> None:
    while True:
        pass


def run(setting: str, train: int, candidates: int) -> dict:
    code = CHILD.format(bench=str(BENCH), setting=setting, train=train, candidates=candidates)
    env = {key: value for key, value in os.environ.items() if key not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = str(ROOT)
    output = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def measure(train: int, candidates: int, repeats: int, load: int) -> dict:
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(load)]
    for process in spinners:
        process.start()
    try:
        runs: dict[str, list[dict]] = {name: [] for name in SETTINGS}
        for _ in range(repeats):
            for name in SETTINGS:
                runs[name].append(run(name, train, candidates))
        load_average = os.getloadavg()
    finally:
        for process in spinners:
            process.terminate()
            process.join()
    calls = runs["default"][0]["seconds"].keys()
    medians = {name: {call: statistics.median(r["seconds"][call] for r in results) for call in calls}
               for name, results in runs.items()}
    return {
        "load_processes": load, "load_average": load_average, "medians": medians,
        "threads_after": {name: results[0]["threads_after"] for name, results in runs.items()},
        "torch_default": runs["default"][0]["default"],
        "ratio_default_to_one": {call: medians["default"][call] / medians["one"][call] for call in calls},
        "ratio_old_to_one": {call: medians["chosen"][call] / medians["one"][call] for call in calls},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--candidates", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--load", type=int, default=1, help="spinning processes in the loaded condition")
    args = parser.parse_args()
    for load in (0, args.load):
        result = measure(args.train, args.candidates, args.repeats, load)
        print(f"{load} spinning process(es), load average {' / '.join(f'{v:.2f}' for v in result['load_average'])}, "
              f"torch default {result['torch_default']} threads; medians of {args.repeats} (s):")
        for name, medians in result["medians"].items():
            print(f"  {name:<8} {'  '.join(f'{call} {value:.3f}' for call, value in medians.items())}"
                  f"   threads after: {result['threads_after'][name]}   ({SETTINGS[name]})")
        print("  default / one thread: " + ", ".join(f"{call} {value:.2f}" for call, value in result["ratio_default_to_one"].items()))
        print("  old (default count kept) / one thread: "
              + ", ".join(f"{call} {value:.2f}" for call, value in result["ratio_old_to_one"].items()))
        print(json.dumps(result))


if __name__ == "__main__":
    main()
