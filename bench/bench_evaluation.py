"""The evaluation commands on 1,000 scored texts: `evaluate`, `compare`, `report` and `crossval`,
each against the target of issue 53, one minute on two CPU cores.

Each command runs as a child process (start-up, reading, fitting and printing included) with
its defaults on the first N texts of each data set (../shared/data: MLQE et-en train, GUG
train; N = 1,000), one after another, so each has the machine to itself as far as it is ours.
`compare` runs bleu, rouge, meteor and tfidf (the default list less bertscore, whose default
model, roberta-large, is not installed here; `--model PATH` adds it with that model). Reported
per run: wall seconds, the child's CPU seconds (user + system: what a quiet machine's wall time
is close to, since the CLI runs torch and BLAS on one thread), peak resident memory, and the
load average before it (on a shared machine wall time is only as good as that).

    python bench/bench_evaluation.py                      # ~5-10 minutes here, quiet
    python bench/bench_evaluation.py --texts 300 --commands evaluate,crossval
    python bench/bench_evaluation.py --json results.json
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_scale import POLL_SECONDS, high_water_mark

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SETS = {"mlqe": DATA / "mlqe_et-en_train.jsonl", "gug": DATA / "gug_train.jsonl"}
TARGET_SECONDS = 60.0
GIB = 1 << 30
COMMANDS = ("evaluate", "compare", "report", "crossval")


def arguments(command: str, data: Path, folder: Path, model: str | None) -> list[str]:
    """The command line of one command on `data` (its defaults, bar compare's kernels)."""
    extra = {
        "evaluate": [],
        "crossval": [],
        "compare": ["--kernels", "bleu,rouge,meteor,tfidf" + (",bertscore" if model else "")],
        "report": ["--out", str(folder / f"report-{data.stem}"), "--overwrite"],
    }[command]
    if model and command == "compare":
        extra += ["--model", model]
    return [sys.executable, "-m", "gpu_neighbors.cli", command, "--data", str(data), *extra]


def first_texts(source: Path, count: int, folder: Path) -> Path:
    """The first `count` records of `source`, as a file of their own."""
    target = folder / f"{source.stem}-{count}.jsonl"
    with source.open(encoding="utf-8") as handle, target.open("w", encoding="utf-8") as out:
        for number, line in enumerate(handle):
            if number == count:
                break
            out.write(line)
    return target


def run(command: list[str]) -> dict:
    """One child: wall and CPU seconds, peak resident memory, the load average before it."""
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    peak = 0
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    while child.poll() is None:
        peak = max(peak, high_water_mark(child.pid))
        time.sleep(POLL_SECONDS)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{child.stderr.read().decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2), "peak_rss_gib": round(peak / GIB, 3),
            "load_before": round(load, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=1000, help="texts taken from the start of each set (1000)")
    parser.add_argument("--sets", default=",".join(SETS), help=f"comma list of {', '.join(SETS)}")
    parser.add_argument("--commands", default=",".join(COMMANDS), help=f"comma list of {', '.join(COMMANDS)}")
    parser.add_argument("--model", default=None, help="a local BERTScore model: compare adds bertscore with it")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        for label in args.sets.split(","):
            data = first_texts(SETS[label], args.texts, folder)
            for command in args.commands.split(","):
                result = {"set": label, "texts": args.texts, "command": command,
                          **run(arguments(command, data, folder, args.model))}
                rows.append(result)
                print(json.dumps(result), file=sys.stderr, flush=True)
    print(f"| set | command | wall s | CPU s | peak GiB | load before | within {TARGET_SECONDS:.0f} s |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['set']} {row['texts']} | {row['command']} | {row['wall_seconds']:.1f} | {row['cpu_seconds']:.1f} "
              f"| {row['peak_rss_gib']:.2f} | {row['load_before']:.1f} | "
              f"{'yes' if row['wall_seconds'] <= TARGET_SECONDS else 'no'} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
