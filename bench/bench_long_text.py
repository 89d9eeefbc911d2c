"""One long text through the default fit and predict: linear in its length (issue 52).

The outlier test's order statistic once counted every ordered pair of a text's token positions
(a 20,000-token candidate took 43 s, 50,000 did not finish in 110 s; a 10,000-word training text
~65 s). Here: the default scorer fitted on `--train` spliced, scored HUSE texts plus one text of
`--tokens` words drawn from them (32,000 by default, the peers' METEOR linear-time case), then a
`predict` of one candidate of `--candidate-tokens` words (50,000: a 100 KB line), beside the same
fit without the long text. One torch thread; seconds of each, and the load average. `--kernel
tfidf` skips the default's kernel choice, whose ROUGE-L pass pads every pair of a tile to its
longest text (not linear: see bench/results.md).

    .venv/bin/python bench/bench_long_text.py [--train 2000] [--tokens 32000] [--candidate-tokens 50000] [--kernel auto]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import time
import warnings

import torch

from bench_choice import scored_texts
from gpu_neighbors import NeighborsScorer


def long_text(words: list[str], count: int, rng: random.Random) -> str:
    return " ".join(rng.choice(words) for _ in range(count))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--tokens", type=int, default=32000)
    parser.add_argument("--candidate-tokens", type=int, default=50000)
    parser.add_argument("--kernel", default="auto", help="the scorer's kernel (auto: the default's choice)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    texts, scores = scored_texts(args.train, 0)
    rng = random.Random(1)
    words = " ".join(texts).split()
    longest = long_text(words, args.tokens, rng)
    candidate = long_text(words, args.candidate_tokens, rng)
    load_before = os.getloadavg()
    seconds = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        NeighborsScorer(kernel=args.kernel, device="cpu", fluency=None).fit(texts, scores)
        seconds["fit_without"] = time.perf_counter() - start
        start = time.perf_counter()
        scorer = NeighborsScorer(kernel=args.kernel, device="cpu", fluency=None).fit(texts + [longest], [*scores, float(scores.mean())])
        seconds["fit_with_long_text"] = time.perf_counter() - start
        start = time.perf_counter()
        scorer.predict([candidate])
        seconds["predict_long_candidate"] = time.perf_counter() - start
    print(json.dumps({"kernel": args.kernel, "train": args.train, "tokens": args.tokens, "candidate_tokens": args.candidate_tokens,
                      "load_before": load_before, "load_after": os.getloadavg(),
                      **{name: round(value, 2) for name, value in seconds.items()}}))


if __name__ == "__main__":
    main()
