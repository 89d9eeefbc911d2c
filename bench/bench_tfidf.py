"""All-pairs TF-IDF cosine (the default auto's first kernel): ours against scikit-learn, as its authors intend.

The kernel is the mean of the cosines of two TfidfVectorizer blocks (word 1-2-grams and char_wb
2-5-grams, sublinear tf): the features of the TF-IDF + ridge baseline (`kernels/tfidf.py`). The
peer computes the same matrix the way a scikit-learn user would: a `FeatureUnion` of the two
vectorizers fitted on the training texts, the candidates transformed, and one scipy sparse
product `candidates @ train.T / 2` (both blocks are l2-normalised, so this is the cosine mean).
It is all-pairs by nature, so both sides are timed on every pair, fitting included: ours with
one torch thread in the tiles NeighborsScorer plans, the peer pinned to one core. Repeats
alternate the sides; medians. The matrices are compared: ours floors each feature to 2^-26, so
it is never above the peer's and below it by under 1e-6 on these texts (`kernels/tfidf.py`).

    .venv/bin/python bench/bench_tfidf.py [--train 2000] [--candidates 2000] [--threads 1] [--device auto]
"""
from __future__ import annotations

import random

import numpy as np
import torch
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import FeatureUnion

from gpu_neighbors.core.tiling import resolve_device
from gpu_neighbors.kernels.tfidf import TfidfKernel
from gpu_neighbors.text.tokenizers import WhitespaceTokenizer
from huse import spliced_texts
from per_core import kernel_arguments, measured, median, one_core, time_all_pairs, timed


def scikit_learn_all_pairs(train: list[str], candidates: list[str]) -> np.ndarray:
    """The peer: the baseline's feature union, fitted on `train`, and one sparse product."""
    union = FeatureUnion([
        ("word", TfidfVectorizer(analyzer="word", ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"(?u)\b\w+\b")),
        ("char", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True)),
    ])
    train_features = union.fit_transform(train)
    return (union.transform(candidates) @ train_features.T).toarray() / 2


def measure(
    train_size: int = 2000,
    candidate_size: int = 2000,
    repeats: int = 3,
    device: str = "auto",
    threads: int | None = 1,
    seed: int = 0,
) -> dict:
    if threads is not None:
        torch.set_num_threads(threads)
    texts = spliced_texts(train_size + candidate_size, random.Random(seed))  # every text new, HUSE's n-grams
    train, candidates = texts[:train_size], texts[train_size:]
    resolved = resolve_device(device)
    pairs = train_size * candidate_size
    ours_runs: list[float] = []
    peer_runs: list[float] = []
    difference = below = 0.0
    for repeat in range(repeats):
        ours_seconds, scores = time_all_pairs(TfidfKernel(tokenizer=WhitespaceTokenizer(), device=resolved),
                                              train, candidates)
        ours_runs.append(ours_seconds)
        with one_core():
            peer_seconds, reference = timed(lambda: scikit_learn_all_pairs(train, candidates))
        peer_runs.append(peer_seconds)
        if repeat == 0:
            gap = reference - scores.numpy()
            difference, below = float(np.abs(gap).max()), float(gap.min())
    peer = "scikit-learn TfidfVectorizer union + scipy sparse product (one core)"
    return {
        "benchmark": "tf-idf cosine all pairs",
        "pairs": pairs,
        "ours_seconds": median(ours_runs),
        "ours_ns_per_pair": median(ours_runs) / pairs * 1e9,
        "peer": peer,
        "peer_seconds": median(peer_runs),
        "peer_pairs": pairs,
        "ratio": median(peer_runs) / median(ours_runs),
        "peers": [{"peer": peer, "us_per_pair": median(peer_runs) / pairs * 1e6, "pairs_timed": pairs,
                   "max_abs_difference": difference, "ours_above_peer_by": max(0.0, -below),
                   "ratio": median(peer_runs) / median(ours_runs)}],
        "device": str(resolved),
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = kernel_arguments(__doc__, 2000)
    args = parser.parse_args()
    result = measured(args, measure)
    peer = result["peers"][0]
    print(f"TF-IDF cosine on all {result['pairs']:,} pairs (spliced HUSE texts), device {result['device']}, "
          f"{result['torch_threads']} torch thread(s), the peer on one core, medians of 3, fitting included")
    print(f"ours: {result['ours_seconds']:.2f} s, {result['ours_ns_per_pair']:.0f} ns/pair")
    print(f"  {peer['peer']}: {result['peer_seconds']:.2f} s, ratio {result['ratio']:.2f}x, "
          f"max abs difference {peer['max_abs_difference']:.1e}, ours above it by {peer['ours_above_peer_by']:.1e}")


if __name__ == "__main__":
    main()
