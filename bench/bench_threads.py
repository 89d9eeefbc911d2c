"""Threads, idle and on a busy machine: library calls under torch's default thread count (which
the library now runs on one thread, restoring the caller's count after), under one thread set
by the caller, and under the default count chosen explicitly (as `set_threads` records it; the
library keeps it: the behaviour before), in one child process: the default alternating with one
thread, then the old behaviour alternating with one thread, medians of `--repeats` (one thread's
apart for each block: "one" beside the default, "one beside chosen" beside the old behaviour, so
each ratio compares runs that alternated); first with no load, then the same in a fresh child
with `--load` processes spinning on cores.

    .venv/bin/python bench/bench_threads.py [--train 2000] [--candidates 2000] [--repeats 6] [--load 1]

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
import json, random, statistics, sys, time
sys.path.insert(0, {bench!r})
import numpy as np, torch
import gpu_neighbors
from gpu_neighbors.core import threads
from gpu_neighbors import NeighborsScorer
from huse import spliced_texts
rng = random.Random(0)
train, candidates = spliced_texts({train}, rng), spliced_texts({candidates}, rng)
references = [[text] for text in spliced_texts({candidates}, rng)]
scorer = NeighborsScorer(kernel="bleu", thresholds="paper").fit(train, np.linspace(0, 1, len(train)))
scorer.predict(candidates[:200])
calls = {{
    "predict": lambda: scorer.predict(candidates),
    "self_bleu": lambda: gpu_neighbors.self_bleu(candidates, device="cpu"),
    "sentence_bleu": lambda: gpu_neighbors.sentence_bleu(candidates, references),
}}
def setting(name):
    torch.set_num_threads(1 if name == "one" else threads.TORCH_DEFAULT)
    threads._chosen = name == "chosen"  # what set_threads records
times = {{name: {{call: [] for call in calls}} for name in ("default", "one", "chosen")}}
after = {{}}
# Two blocks, each alternating with one thread in both orders: the default against one thread,
# then the old behaviour against one thread (its spinning threads must not follow into the
# default's calls, which no real caller has).
for pair in (("default", "one"), ("chosen", "one")):
    for repeat in range({repeats}):
        for name in (pair if repeat % 2 == 0 else pair[::-1]):
            setting(name)
            for call, run in calls.items():
                start = time.perf_counter(); run(); times[name][call].append(time.perf_counter() - start)
            after[name] = torch.get_num_threads()
print(json.dumps({{"seconds": times, "threads_after": after, "default": threads.TORCH_DEFAULT}}))
"""
SETTINGS = {
    "default": "torch's default count, untouched (library: one thread inside its calls)",
    "one": "torch.set_num_threads(1) by the caller",
    "chosen": "the default count chosen explicitly (kept by the library: the old behaviour)",
}


def spin() -> None:
    while True:
        pass


def run(train: int, candidates: int, repeats: int) -> dict:
    code = CHILD.format(bench=str(BENCH), train=train, candidates=candidates, repeats=repeats)
    env = {key: value for key, value in os.environ.items() if key not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = str(ROOT)
    output = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def measure(train: int, candidates: int, repeats: int, load: int) -> dict:
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(load)]
    for process in spinners:
        process.start()
    try:
        result = run(train, candidates, repeats)
        load_average = os.getloadavg()
    finally:
        for process in spinners:
            process.terminate()
            process.join()
    calls = result["seconds"]["default"].keys()
    seconds = result["seconds"]
    blocks = {  # one thread's times from the block it alternated in
        "default": seconds["default"], "chosen": seconds["chosen"],
        "one": {call: values[:repeats] for call, values in seconds["one"].items()},
        "one beside chosen": {call: values[repeats:] for call, values in seconds["one"].items()},
    }
    medians = {name: {call: statistics.median(values[call]) for call in calls} for name, values in blocks.items()}
    return {
        "load_processes": load, "load_average": load_average, "medians": medians,
        "threads_after": result["threads_after"], "torch_default": result["default"],
        "ratio_default_to_one": {call: medians["default"][call] / medians["one"][call] for call in calls},
        "ratio_old_to_one": {call: medians["chosen"][call] / medians["one beside chosen"][call] for call in calls},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--candidates", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--load", type=int, default=1, help="spinning processes in the loaded condition")
    args = parser.parse_args()
    for load in (0, args.load):
        result = measure(args.train, args.candidates, args.repeats, load)
        print(f"{load} spinning process(es), load average {' / '.join(f'{v:.2f}' for v in result['load_average'])}, "
              f"torch default {result['torch_default']} threads; medians of {args.repeats} (s):")
        for name, medians in result["medians"].items():
            print(f"  {name:<18} {'  '.join(f'{call} {value:.3f}' for call, value in medians.items())}"
                  f"   {SETTINGS.get(name, 'one thread, alternating with chosen')}")
        print(f"  threads after the calls: {result['threads_after']}")
        print("  default / one thread: " + ", ".join(f"{call} {value:.2f}" for call, value in result["ratio_default_to_one"].items()))
        print("  old (default count kept) / one thread: "
              + ", ".join(f"{call} {value:.2f}" for call, value in result["ratio_old_to_one"].items()))
        print(json.dumps(result))


if __name__ == "__main__":
    main()
