"""Host encoding of candidates, texts a second per core, on 1..N threads (issue 52: "feeding a GPU").

What a GPU host does for every candidate before its tiles: the kernel's encoding (`kernel_.encode`:
TF-IDF's n-gram features, BLEU*'s n-gram counts) and, for the TF-IDF scorer (the default's
usual kernel; fluency off), `prepare` (the encoding and the outlier test's typicality
statistics). Scorers (kernel tfidf and bleu, named) fitted on `--train` spliced, scored HUSE
texts; `--candidates` more spliced texts encoded in batches of `--batch`, the batches shared out
to N threads (a thread pool, one torch thread each: the compiled loops run without the GIL). For each N: texts a second, per core (divided by N), and the speed-up over one
thread. The target: at least 200,000 texts a second per core, and a speed-up that grows with N
(a 16-core GPU host feeding 10^6 x 10^5 in under 60 s).

`--threads` defaults to 1 and the number of CPUs the process may use (1,2 on a 2-core machine).

    .venv/bin/python bench/bench_encoding.py [--train 2000] [--candidates 100000] [--batch 8192]
        [--threads 1,N] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import torch

from bench_choice import scored_texts
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.text.compiled import native
from huse import spliced_texts


WARM_PASSES = 2  # untimed passes over every batch before the timed ones


def rate(work, batches: list[list[str]], threads: int, repeats: int) -> float:
    """Texts a second of `work` over every batch on `threads` threads, best of `repeats`, after
    WARM_PASSES untimed ones. Each batch's encoding is dropped once made, as a feeding loop hands
    it on (holding all 100,000 made the heap grow during the timed passes), and the warm passes
    take the process's first touches of that memory: without them the first work timed (TF-IDF
    `encode`) paid about a second of page faults in the kernel (2026-12-06: 52,235 then 158,643
    texts/s in its first two passes, 266,779 from the fifth), so it measured slower than
    `prepare`, which does the same encoding and more."""
    texts = sum(map(len, batches))
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for timed in [False] * WARM_PASSES + [True] * repeats:
            start = time.perf_counter()
            for _ in pool.map(work, batches):
                pass
            if timed:
                best = min(best, time.perf_counter() - start)
    return texts / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--candidates", type=int, default=100000)
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--threads", default=f"1,{len(os.sched_getaffinity(0))}")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    texts, scores = scored_texts(args.train, 0)
    candidates = spliced_texts(args.candidates, random.Random(1))
    batches = [candidates[first:first + args.batch] for first in range(0, len(candidates), args.batch)]
    counts = [int(count) for count in args.threads.split(",")]
    load_before = os.getloadavg()
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scorers = {kernel: NeighborsScorer(kernel=kernel, device="cpu", fluency=None).fit(texts, scores) for kernel in ("tfidf", "bleu")}
    works = {f"{kernel} encode": scorer.kernel_.encode for kernel, scorer in scorers.items()}
    works["tfidf prepare (tfidf + typicality)"] = scorers["tfidf"].prepare
    for name, work in works.items():
        single = None
        for threads in counts:
            per_second = rate(work, batches, threads, args.repeats)
            single = single or per_second
            rows.append({"work": name, "threads": threads, "texts_per_s": round(per_second),
                         "per_core": round(per_second / threads), "speedup": round(per_second / single, 2)})
    print(f"host encoding: {args.candidates:,} candidates against {args.train:,} training texts, batches of "
          f"{args.batch:,}, compiled loops: {'yes' if native is not None else 'no (numpy)'}; best of {args.repeats}; "
          f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}")
    print("| work | threads | texts / s | per core | speed-up |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['work']} | {row['threads']} | {row['texts_per_s']:,} | {row['per_core']:,} | {row['speedup']}x |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
