"""All-pairs ROUGE-L F: our bit-parallel kernel against rouge-score, used as its authors intend.

Texts are the HUSE summaries, resampled to the sizes asked for. Ours: fit on the training texts,
then every candidate chunk against every training block, in the tiles NeighborsScorer plans for
its default memory budget (tokenizing, encoding and copying the scores to the CPU included),
one torch thread. Peers, on one core (`per_core.one_core`), on a random sample of the same
pairs, extrapolated per pair: one reused `RougeScorer(["rougeL"])` whose tokenizer splits on
whitespace (the tokens our kernel sees), and rouge-score's LCS function `_score_lcs` on tokens
split beforehand (its internals; no tokenizing, which favours the peer). Each repeat times ours,
then the peers (interleaved, so bursts of load on a shared machine hit all alike); medians of
`repeats`. The sampled pairs also check the scores: ours is one rounding of the exact fraction
2 LCS / (|x| + |s|), rouge-score's 2PR / (P + R) three, so about one pair in ten differs by an
ulp (1.1e-16); the pairs differing by more than 1e-9 are counted and printed (none should; nothing
asserts it). The ratio is per core, against the fastest peer.

    .venv/bin/python bench/bench_rouge.py [--train 2000] [--candidates 2000] [--threads 1] [--device auto]
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable

import torch
from rouge_score.rouge_scorer import RougeScorer, _score_lcs

from gpu_neighbors.core.tiling import resolve_device
from gpu_neighbors.kernels.rouge import RougeKernel
from gpu_neighbors.text.tokenizers import WhitespaceTokenizer
from huse import huse_texts
from per_core import kernel_arguments, measured, median, one_core, time_all_pairs, timed

def resampled_texts(count: int, rng: random.Random) -> list[str]:
    texts = huse_texts()
    return [rng.choice(texts) for _ in range(count)]


class WhitespaceSplit:
    """rouge-score's tokenizer interface over `str.split`: the tokens our kernel sees."""

    def tokenize(self, text: str) -> list[str]:
        return text.split()


def peer_scorers() -> dict[str, Callable[[str, str, list[str], list[str]], float]]:
    """The peers as a user would call them: a reused `RougeScorer` (whitespace tokens, so the
    same tokens as ours) and rouge-score's LCS function on tokens split beforehand (its
    internal `_score_lcs`, which favours the peer: no tokenizing, no result dict)."""
    scorer = RougeScorer(["rougeL"], tokenizer=WhitespaceSplit())
    return {
        "rouge_score RougeScorer.score": lambda candidate, reference, tokens, reference_tokens:
            scorer.score(reference, candidate)["rougeL"].fmeasure,
        "rouge_score _score_lcs (pre-tokenized)": lambda candidate, reference, tokens, reference_tokens:
            _score_lcs(reference_tokens, tokens).fmeasure,
    }


def measure(
    train_size: int = 2000,
    candidate_size: int = 2000,
    peer_pairs: int = 20_000,
    repeats: int = 3,
    device: str = "auto",
    threads: int | None = 1,
    seed: int = 0,
) -> dict:
    if threads is not None:
        torch.set_num_threads(threads)
    rng = random.Random(seed)
    train, candidates = resampled_texts(train_size, rng), resampled_texts(candidate_size, rng)
    resolved = resolve_device(device)
    pairs = train_size * candidate_size
    train_tokens = [text.split() for text in train]
    candidate_tokens = [text.split() for text in candidates]
    peers = peer_scorers()
    ours_runs: list[float] = []
    peer_runs: dict[str, list[float]] = {name: [] for name in peers}
    differences: dict[str, list[float]] = {name: [] for name in peers}
    for repeat in range(repeats):
        ours_seconds, scores = time_all_pairs(RougeKernel(tokenizer=WhitespaceTokenizer(), device=resolved),
                                              train, candidates)
        ours_runs.append(ours_seconds)
        sample = [(rng.randrange(candidate_size), rng.randrange(train_size)) for _ in range(peer_pairs)]
        for name, score in peers.items():
            with one_core():
                seconds, values = timed(lambda: [
                    score(candidates[i], train[j], candidate_tokens[i], train_tokens[j]) for i, j in sample
                ])
            peer_runs[name].append(seconds / len(sample))
            if repeat == 0:
                differences[name] = [abs(value - float(scores[i, j])) for value, (i, j) in zip(values, sample)]
    ours_per_pair = median(ours_runs) / pairs
    results = [
        {"peer": name, "us_per_pair": median(runs) * 1e6, "pairs_timed": peer_pairs,
         "max_abs_difference": max(differences[name]),
         "pairs_differing": sum(difference > 1e-9 for difference in differences[name]),
         "ratio": median(runs) / ours_per_pair}
        for name, runs in peer_runs.items()
    ]
    fastest = min(results, key=lambda result: result["us_per_pair"])
    return {
        "benchmark": "rouge-l all pairs",
        "pairs": pairs,
        "ours_seconds": median(ours_runs),
        "ours_ns_per_pair": ours_per_pair * 1e9,
        "peer": fastest["peer"] + " (fastest peer, one core)",
        "peer_seconds": fastest["us_per_pair"] * 1e-6 * peer_pairs,
        "peer_pairs": peer_pairs,
        "ratio": fastest["ratio"],
        "peers": results,
        "device": str(resolved),
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = kernel_arguments(__doc__, 2000)
    args = parser.parse_args()
    result = measured(args, measure)
    print(f"ROUGE-L F on all {result['pairs']:,} pairs (HUSE texts resampled), device "
          f"{result['device']}, {result['torch_threads']} torch thread(s), peers on one core, medians of 3")
    print(f"ours: {result['ours_seconds']:.2f} s, {result['ours_ns_per_pair']:.0f} ns/pair")
    for peer in result["peers"]:
        print(f"  {peer['peer']:<42}{peer['us_per_pair']:8.1f} us/pair  ratio {peer['ratio']:,.0f}x  "
              f"max abs difference {peer['max_abs_difference']:.1e}, "
              f"{peer['pairs_differing']} of {peer['pairs_timed']:,} pairs differing by over 1e-9")
    print(f"against the fastest peer ({result['peer']}): {result['ratio']:,.0f}x per core")


if __name__ == "__main__":
    main()
