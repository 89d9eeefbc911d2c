"""METEOR on all pairs: gpu-neighbors' MeteorKernel against NLTK's single_meteor_score.

Both sides use the same WordNet (gpu_neighbors.kernels.wordnet) and whitespace tokens of texts drawn from
the shared HUSE file (resampled with replacement past its 200 texts; `concat` > 1 joins several
texts into one, for longer inputs). Ours: fit on the training texts plus the full
[candidates x training] similarity matrix through NeighborsScorer. NLTK: one call per pair,
timed on random pairs for about `peer_seconds` and extrapolated per pair; the same pairs check
that both give the same numbers. Loading WordNet is left out of both timings.

    python bench/bench_meteor.py [--candidates 1000] [--train 1000] [--concat 1] [--peer-seconds 20]
"""
from __future__ import annotations

import argparse
import random
import time

from nltk.translate.meteor_score import single_meteor_score

from gpu_neighbors import NeighborsScorer
from huse import huse_texts
from gpu_neighbors.kernels.wordnet import load_wordnet

def joined_texts(count: int, concat: int, seed: int) -> list[str]:
    """`count` texts, each `concat` HUSE texts drawn at random and joined."""
    pool = huse_texts()
    generator = random.Random(seed)
    return [" ".join(generator.choices(pool, k=concat)) for _ in range(count)]


def measure(
    candidates: int = 1000, train: int = 1000, concat: int = 1, peer_seconds: float = 20.0, seed: int = 0
) -> dict:
    wordnet = load_wordnet()
    if wordnet is None:
        raise RuntimeError("WordNet is missing; see gpu_neighbors.kernels.wordnet.APT_INSTALL")
    train_texts = joined_texts(train, concat, seed)
    candidate_texts = joined_texts(candidates, concat, seed + 1)

    started = time.perf_counter()
    scorer = NeighborsScorer(kernel="meteor", device="cpu", fluency=None).fit(train_texts, [0.0] * train)
    similarity = scorer.similarity(candidate_texts)
    ours_seconds = time.perf_counter() - started

    generator = random.Random(seed + 2)
    peer_pairs, largest_difference = 0, 0.0
    started = time.perf_counter()
    while time.perf_counter() - started < peer_seconds:
        row, column = generator.randrange(candidates), generator.randrange(train)
        score = single_meteor_score(
            train_texts[column].split(), candidate_texts[row].split(), wordnet=wordnet
        )
        largest_difference = max(largest_difference, abs(score - float(similarity[row, column])))
        peer_pairs += 1
    peer_seconds_measured = time.perf_counter() - started

    pairs = candidates * train
    return {
        "benchmark": "meteor",
        "pairs": pairs,
        "tokens_per_text": sum(len(text.split()) for text in train_texts) / train,
        "ours_seconds": ours_seconds,
        "peer": "nltk.translate.meteor_score.single_meteor_score",
        "peer_seconds": peer_seconds_measured,
        "peer_pairs": peer_pairs,
        "peer_sampled": True,
        "max_abs_difference": largest_difference,
        "ratio": (peer_seconds_measured / peer_pairs) / (ours_seconds / pairs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--train", type=int, default=1000)
    parser.add_argument("--concat", type=int, default=1)
    parser.add_argument("--peer-seconds", type=float, default=20.0)
    args = parser.parse_args()
    result = measure(args.candidates, args.train, args.concat, args.peer_seconds)
    ours_us = result["ours_seconds"] / result["pairs"] * 1e6
    peer_us = result["peer_seconds"] / result["peer_pairs"] * 1e6
    print(f"METEOR, {args.candidates} x {args.train} pairs, {result['tokens_per_text']:.1f} tokens per text")
    print(f"{'':8}{'pairs timed':>14}{'seconds':>10}{'us/pair':>10}")
    print(f"{'ours':8}{result['pairs']:>14,}{result['ours_seconds']:>10.2f}{ours_us:>10.2f}")
    print(f"{'NLTK':8}{result['peer_pairs']:>14,}{result['peer_seconds']:>10.2f}{peer_us:>10.2f}")
    print(
        f"ratio (NLTK / ours, per pair): {result['ratio']:.1f}x; NLTK timed on a random sample of "
        f"pairs and extrapolated per pair; largest |difference| on that sample: "
        f"{result['max_abs_difference']:.1e}"
    )


if __name__ == "__main__":
    main()
