"""The default fit against scikit-learn's TF-IDF `fit_transform` of the same texts (issue 30).

A default `fit` (kernel `auto`) first chooses its kernel by leave-one-out on a seeded sample of
1,000 training texts (`choice.py`: TF-IDF unless bleu or rouge beats it beyond the sample's
noise), then encodes the training texts with the chosen kernel (TF-IDF: word and character
n-grams, the baseline's features), tunes top-k by leave-one-out (on a seeded sample of
MAX_TUNING_TEXTS, 4,000, above that size), and calibrates the intervals and the outlier test by
exact leave-one-out of up to 2,000 texts against all the others. The peer is TF-IDF's encoding
step alone, as a scikit-learn user runs it: the TF-IDF + ridge baseline's `FeatureUnion` of two
`TfidfVectorizer`s (word 1-2-grams, char_wb 2-5-grams, sublinear tf) `fit_transform` of the
training texts. Ours on one torch thread, the peer pinned to one core; repeats alternate the
sides; medians of wall and of process CPU time (the steadier where other work shares the
machine). Texts: HUSE summaries spliced, scored by their sources' length-weighted mean score
(`bench_choice.scored_texts`), so tuning sees signal.

    .venv/bin/python bench/bench_fit.py [--train 50000] [--repeats 2] [--seed 0]
"""
from __future__ import annotations

import argparse
import json
import os
import time
import warnings

import torch
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import FeatureUnion

from bench_choice import scored_texts
from gpu_neighbors import NeighborsScorer
from per_core import median, one_core


def peer_union() -> FeatureUnion:
    return FeatureUnion([
        ("word", TfidfVectorizer(analyzer="word", ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"(?u)\b\w+\b")),
        ("char", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True)),
    ])


def clocked(work) -> tuple[float, float, object]:
    """(wall seconds, process CPU seconds, result) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", type=int, default=50000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    texts, scores = scored_texts(args.train, args.seed)
    load_before = os.getloadavg()
    ours: list[tuple[float, float]] = []
    peer: list[tuple[float, float]] = []
    signature = ""
    for _ in range(args.repeats):
        with one_core():
            wall, cpu, _ = clocked(lambda: peer_union().fit_transform(texts))
        peer.append((wall, cpu))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wall, cpu, scorer = clocked(lambda: NeighborsScorer(device="cpu", fluency=None).fit(texts, scores))
        ours.append((wall, cpu))
        signature = str(scorer.signature)
    ours_wall, ours_cpu = median([wall for wall, _ in ours]), median([cpu for _, cpu in ours])
    peer_wall, peer_cpu = median([wall for wall, _ in peer]), median([cpu for _, cpu in peer])
    print(json.dumps({
        "train": args.train, "repeats": args.repeats, "load_before": load_before, "load_after": os.getloadavg(),
        "ours_s": [round(wall, 2) for wall, _ in ours], "peer_s": [round(wall, 2) for wall, _ in peer],
        "ours_wall_s": round(ours_wall, 2), "peer_wall_s": round(peer_wall, 2),
        "ours_over_peer_wall": round(ours_wall / peer_wall, 2), "ours_over_peer_cpu": round(ours_cpu / peer_cpu, 2),
        "signature": signature,
    }))


if __name__ == "__main__":
    main()
