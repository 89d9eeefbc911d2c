"""Fit once, score anywhere: loading a saved scorer against the refit it replaces.

A `score --train` run (and before 0.2 every training job and Ray worker) fits the scorer again:
the kernel's encoding of the training set, tuning, the ridge fit, the calibration. A saved
scorer (`NeighborsScorer.save`) keeps what fit chose and learned; `load` reads it back and
rebuilds only what it does not save (for TF-IDF, this script's default kernel, whose encoding is
saved: the scores' exact limbs and the tie ranks, `saving.py`). This times both, one thread, on texts spliced from the HUSE summaries (bench/huse.py) with
synthetic scores, and checks that the loaded scorer predicts the same bits. The load is timed
twice: in the process that saved (as a training job that reloads) and in a fresh process, as
`score --scorer` meets it (the package imported first, not timed: first touches of new memory
make this one slower).

    .venv/bin/python bench/bench_load.py [--sizes 1000,10000,100000] [--kernel tfidf] [--candidates 200]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

from bench_ridge_scale import workload
from per_core import timed

from gpu_neighbors import NeighborsScorer


FRESH = """
import sys, time, torch
torch.set_num_threads(1)
from gpu_neighbors import NeighborsScorer
start = time.perf_counter()
NeighborsScorer.load(sys.argv[1], device="cpu")
print(time.perf_counter() - start)
"""


def fresh_load_seconds(folder: Path) -> float:
    """Seconds a new Python process takes to load the scorer at `folder` (imports excluded)."""
    done = subprocess.run([sys.executable, "-c", FRESH, str(folder)], check=True, capture_output=True, text=True)
    return float(done.stdout.split()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--kernel", default="tfidf")
    parser.add_argument("--candidates", type=int, default=200)
    args = parser.parse_args(argv)
    sizes, texts, scores, candidates = workload(args.sizes, args.candidates)
    print(f"kernel: {args.kernel}, default estimator; one thread")
    print("| training texts | fit (s) | save (s) | load (s) | load, fresh process (s) | folder (MB) | same bits |")
    print("|---|---|---|---|---|---|---|")
    for size in sizes:
        with warnings.catch_warnings(), tempfile.TemporaryDirectory() as folder:
            warnings.simplefilter("ignore")
            fit_seconds, scorer = timed(lambda: NeighborsScorer(kernel=args.kernel, device="cpu", fluency=None).fit(
                texts[:size], scores[:size]))
            save_seconds, path = timed(lambda: scorer.save(folder, overwrite=True))
            load_seconds, loaded = timed(lambda: NeighborsScorer.load(path, device="cpu"))
            fresh_seconds = fresh_load_seconds(path)
            megabytes = sum(file.stat().st_size for file in path.iterdir()) / 1e6
            same = loaded.predict(candidates).scores.tobytes() == scorer.predict(candidates).scores.tobytes()
        print(f"| {size:,} | {fit_seconds:.2f} | {save_seconds:.2f} | {load_seconds:.2f} | {fresh_seconds:.2f} | "
              f"{megabytes:.1f} | "
              f"{'yes' if same else 'NO'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
