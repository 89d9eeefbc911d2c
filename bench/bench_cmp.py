"""The same bytes from `score` before and after a change: `cmp` of the default command's output.

Writes `--train` spliced, scored HUSE texts and `--candidates` spliced candidates (100,000 x
2,000 by default, seeded), then runs the default `gpu-neighbors score` on them three ways, each
in a fresh process: the tree of `--base` (a git revision, unpacked by `git archive` into a
temporary folder and run from its source, as it stood), this tree with its compiled loops, and
this tree with them turned off (GPU_NEIGHBORS_COMPILED=0: the numpy passes); this tree's runs
with `--fluency none`, as the base had no fluency part. Each output is
compared byte for byte with the base's by `cmp`; the command exits 1 on any difference. Seconds
of each run are printed beside (indicative: one run each). `--options` adds settings to every
run (`--options="--kernel bleu"`: BLEU*'s compiled n-gram pass against the base's torch passes).

    .venv/bin/python bench/bench_cmp.py [--base dfd5098] [--candidates 100000] [--train 2000] [--options=...]
"""
from __future__ import annotations

import argparse
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_host import write_jsonl
from huse import spliced_texts

ROOT = Path(__file__).resolve().parents[1]
WITHOUT_FLUENCY = ["--fluency", "none"]


def score(tree: Path, train: Path, candidates: Path, output: Path, compiled: bool, options: list[str]) -> float:
    """Seconds of the default `score` run from `tree`'s source."""
    env = dict(os.environ, PYTHONPATH=str(tree), GPU_NEIGHBORS_COMPILED="1" if compiled else "0")
    command = [sys.executable, "-m", "gpu_neighbors.cli", "score", "--train", str(train), "--candidates",
               str(candidates), "--output", str(output), "--overwrite", "--quiet", *options]
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, cwd=tree, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="dfd5098")
    parser.add_argument("--candidates", type=int, default=100_000)
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--options", default="", help="more `score` settings for every run, one string")
    args = parser.parse_args()
    extra = shlex.split(args.options)
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="bench_cmp_") as folder:
        folder = Path(folder)
        train = write_jsonl(folder / "train.jsonl", spliced_texts(args.train, rng),
                            [rng.random() for _ in range(args.train)])
        candidates = write_jsonl(folder / "candidates.jsonl", spliced_texts(args.candidates, rng))
        base = folder / "base"
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        # The base predates the fluency part; this tree runs without it (the same scorer).
        runs = {f"base {args.base}": (base, True, extra), "this tree, compiled": (ROOT, True, WITHOUT_FLUENCY + extra),
                "this tree, numpy (GPU_NEIGHBORS_COMPILED=0)": (ROOT, False, WITHOUT_FLUENCY + extra)}
        outputs, differing = {}, 0
        for index, (name, (tree, compiled, options)) in enumerate(runs.items()):
            outputs[name] = folder / f"out{index}.jsonl"
            seconds = score(tree, train, candidates, outputs[name], compiled, options)
            print(f"{name}: {seconds:.1f} s, {outputs[name].stat().st_size:,} bytes")
        first = next(iter(outputs.values()))
        for name, output in list(outputs.items())[1:]:
            same = subprocess.run(["cmp", str(first), str(output)]).returncode == 0
            differing += not same
            print(f"cmp base / {name}: {'the same bytes' if same else 'DIFFERENT'}")
    print(f"{args.candidates:,} candidates x {args.train:,} training texts{', ' + args.options if extra else ''}, load average {os.getloadavg()[0]:.1f}")
    sys.exit(1 if differing else 0)


if __name__ == "__main__":
    main()
