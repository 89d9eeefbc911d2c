"""What the default's kernel choice costs in a fit (issue 34), beside issue 30's yardstick.

Issue 30 asks the default fit on 50,000 texts, one thread, to cost at most 2.5x scikit-learn's
TF-IDF `fit_transform` of the same texts (the TF-IDF + ridge baseline's feature union). The
default now chooses its kernel (tfidf, bleu or rouge) by leave-one-out on a seeded sample of
1,000 training texts (`gpu_neighbors/choice.py`) before fitting the one it chose. Timed here,
one torch thread, each once (a fit is long; the machine is shared, so figures are indicative):

- peer: scikit-learn's feature union `fit_transform` of the training texts;
- choice: the choice alone (each kernel fitted on the sample and run over its pairs, the
  estimator tuned on each);
- default: `NeighborsScorer().fit` (the choice, then the chosen kernel's fit);
- tfidf: `NeighborsScorer(kernel="tfidf").fit`, the default before (no choice).

Texts: HUSE summaries spliced (a prefix of one joined to a suffix of another, `huse.py`), each
scored by the length-weighted mean of its two sources' scores, so the choice sees real signal.
`--train` defaults to 2,000 texts; issue 30's yardstick is `--train 50000`. `--choice-only` times
the peer and the choice alone (no fits).

    .venv/bin/python bench/bench_choice.py [--train 2000] [--seed 0] [--choice-only]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import time
import warnings

import numpy as np
import torch
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import FeatureUnion

from gpu_neighbors import NeighborsScorer
from gpu_neighbors.choice import ChoiceRun, choose_kernel
from gpu_neighbors.core.validation import DEFAULT_MIN_COVERAGE
from gpu_neighbors.kernels.parts import Auto
from huse import huse_records


def scored_texts(count: int, seed: int) -> tuple[list[str], np.ndarray]:
    rng = random.Random(seed)
    records = [(record["text"].split(), record["score"]) for record in huse_records()]
    texts, scores = [], []
    for _ in range(count):
        (head, head_score), (tail, tail_score) = rng.choice(records), rng.choice(records)
        head, tail = head[: rng.randint(1, len(head))], tail[rng.randint(0, len(tail) - 1):]
        texts.append(" ".join(head + tail))
        scores.append((len(head) * head_score + len(tail) * tail_score) / (len(head) + len(tail)))
    return texts, np.asarray(scores)


def seconds(work) -> tuple[float, object]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--choice-only", action="store_true", help="time the peer and the choice, not the fits")
    args = parser.parse_args()
    torch.set_num_threads(1)
    texts, scores = scored_texts(args.train, args.seed)
    union = FeatureUnion([
        ("word", TfidfVectorizer(analyzer="word", ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"(?u)\b\w+\b")),
        ("char", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True)),
    ])
    peer, _ = seconds(lambda: union.fit_transform(texts))
    run = ChoiceRun(torch.device("cpu"), None, None, None, DEFAULT_MIN_COVERAGE)
    choice, (chosen, rhos) = seconds(lambda: choose_kernel(Auto(), lambda part: NeighborsScorer()._estimator(part),
                                                          texts, scores, run))
    figures = {"train": args.train, "load": os.getloadavg(), "peer_s": round(peer, 2), "choice_s": round(choice, 2),
               "choice_over_peer": round(choice / peer, 2), "chosen": chosen.name,
               "selection": {name: round(rho, 3) for name, rho in (rhos or {}).items()}}
    if not args.choice_only:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            default, scorer = seconds(lambda: NeighborsScorer(device="cpu").fit(texts, scores))
            tfidf, _ = seconds(lambda: NeighborsScorer(kernel="tfidf", device="cpu").fit(texts, scores))
        assert scorer.kernel_name == chosen.name
        figures.update(default_s=round(default, 2), tfidf_s=round(tfidf, 2),
                       default_over_peer=round(default / peer, 2), tfidf_over_peer=round(tfidf / peer, 2))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
