"""Ray Data path against the one-process path: same rows, and how long each takes.

Candidates are the shared HUSE summaries repeated up to --rows (every row a real text); the
scorer is BLEU* fitted on all 200. Timed: one process (`predict` in batches of 8192, as
`gpu-neighbors score` does) and `score_dataset` on a local Ray with --cpus CPUs, start-up of
Ray itself excluded and reported apart (actor start-up and scorer shipping included).

Run: .venv/bin/python bench/bench_ray.py [--rows 200000] [--cpus 2]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from gpu_neighbors import NeighborsScorer
from gpu_neighbors.scoring.distributed import score_dataset
from huse import HUSE as DATA

BATCH = 8192


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    records = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    texts = [record["text"] for record in records]
    scorer = NeighborsScorer(kernel="bleu", device="cpu", fluency=None).fit(texts, [record["score"] for record in records])
    candidates = [texts[i % len(texts)] for i in range(args.rows)]

    import ray

    started = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    ray_start = time.perf_counter() - started
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    dataset = ray.data.from_items([{"text": text} for text in candidates]).materialize()

    for repeat in range(args.repeats):
        started = time.perf_counter()
        parts = [scorer.predict(candidates[i : i + BATCH]) for i in range(0, len(candidates), BATCH)]
        one_process = time.perf_counter() - started
        scores = np.concatenate([part.scores for part in parts])
        counts = np.concatenate([part.num_neighbors for part in parts])

        started = time.perf_counter()
        batches = list(score_dataset(dataset, scorer, num_actors=args.cpus).iter_batches(
            batch_size=None, batch_format="numpy"))
        distributed = time.perf_counter() - started
        same = np.array_equal(np.concatenate([b["score"] for b in batches]), scores, equal_nan=True) and \
            np.array_equal(np.concatenate([b["num_neighbors"] for b in batches]), counts)
        print(json.dumps({
            "repeat": repeat, "rows": args.rows, "train": scorer.num_train, "ray_cpus": args.cpus,
            "one_process_s": round(one_process, 2), "ray_s": round(distributed, 2),
            "ray_init_s": round(ray_start, 2),
            "one_process_rows_per_s": round(args.rows / one_process),
            "ray_rows_per_s": round(args.rows / distributed), "rows_equal": bool(same),
        }))
    ray.shutdown()


if __name__ == "__main__":
    main()
