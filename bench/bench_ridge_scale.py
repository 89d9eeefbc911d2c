"""Scale of the estimators with the training set: `fit` and `predict` time of the kernel's
default estimator, top-k alone and ridge alone, one thread, on texts spliced from the HUSE
summaries (bench/huse.py) with synthetic scores (a noisy function of length and word overlap
with a reference text, so there is something to fit).

Kernel ridge solves on an [n x n] matrix (cubic), so above MAX_RIDGE_TEXTS (2,000) training
texts the scorer fits it on a seeded sample of that many (their dual weights; the others' are
zero); tuning reads a sample of MAX_TUNING_TEXTS (4,000) and the intervals' calibration a sample
of 2,000 texts against all n. This measures what that costs from 10^3 to 10^5 texts by default
(`--sizes` reaches 10^6). The kernel is TF-IDF unless `--kernel` names another (the scorer's own
default, auto, would add its kernel choice to every fit).

    .venv/bin/python bench/bench_ridge_scale.py [--sizes 1000,4000,10000,100000] [--candidates 1000]
        [--estimators default,topk,ridge] [--kernel tfidf]
"""
from __future__ import annotations

import argparse
import random
import sys
import warnings

import numpy as np
import torch

from huse import spliced_texts
from per_core import timed

from gpu_neighbors import NeighborsScorer


def synthetic_scores(texts: list[str], rng: np.random.Generator) -> np.ndarray:
    reference = set(texts[0].split())
    overlap = np.array([len(reference & set(text.split())) / max(1, len(text.split())) for text in texts])
    length = np.array([len(text.split()) for text in texts], dtype=np.float64)
    raw = overlap - 0.01 * length + rng.normal(scale=0.1, size=len(texts))
    return (raw - raw.min()) / (raw.max() - raw.min())


def workload(sizes_text: str, count: int) -> tuple[list[int], list[str], np.ndarray, list[str]]:
    """One thread; the training sizes, the texts and their scores, and the last `count` texts
    as candidates."""
    torch.set_num_threads(1)
    sizes = [int(size) for size in sizes_text.split(",")]
    texts = spliced_texts(max(sizes) + count, random.Random(0))
    return sizes, texts, synthetic_scores(texts, np.random.default_rng(0)), texts[-count:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,4000,10000,100000")
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--estimators", default="default,topk,ridge", help="which rows, comma-separated")
    parser.add_argument("--kernel", default="tfidf", help="the scorer's kernel (default: tfidf; the scorer's own default is auto)")
    args = parser.parse_args(argv)
    sizes, texts, scores, candidates = workload(args.sizes, args.candidates)
    print(f"kernel: {NeighborsScorer(kernel=args.kernel).kernel_name}")
    print(f"| training texts | estimator | chosen | fit (s) | predict {args.candidates:,} (s) | interval coverage on the candidates |")
    print("|---|---|---|---|---|---|")
    for size in sizes:
        for name in args.estimators.split(","):
            estimator = None if name == "default" else name
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit_seconds, scorer = timed(lambda: NeighborsScorer(kernel=args.kernel, estimator=estimator,
                                                                    device="cpu", fluency=None).fit(
                    texts[:size], scores[:size]))
            predict_seconds, prediction = timed(lambda: scorer.predict(candidates))
            truth = scores[-args.candidates:]
            inside = (prediction.low <= truth) & (truth <= prediction.high)
            coverage = inside[prediction.covered].mean()
            print(f"| {size:,} | {estimator or 'default'} | {scorer.estimator_.name} | {fit_seconds:.1f} | "
                  f"{predict_seconds:.2f} | {coverage:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
