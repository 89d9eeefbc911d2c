"""All-pairs ROUGE-L F: our bit-parallel kernel against rouge-score's LCS, pair by pair.

Texts are the HUSE summaries, resampled to the sizes asked for. Ours: fit on the training texts,
then every candidate chunk against every training block, in the tiles NeighborsScorer plans for
its default memory budget (tokenizing, encoding and copying the scores to the CPU included). Peer: `rouge_score.rouge_scorer._score_lcs` on a random sample of
pairs, on the same tokens (tokenized beforehand, which favours the peer), extrapolated per pair.
Both sides are timed `repeats` times (the peer on `repeats` equal parts of its sample) and the
fastest kept, so that a busy machine distorts neither side more than the other. The peer runs on
one core, and by default so does torch (`threads=1`): the ratio is per core, and multi-threaded
torch on a machine busy with other work loses more to contention than it gains. The sampled
pairs also check that both give the same scores.
"""
from __future__ import annotations

import argparse
import random
import time

import torch
from rouge_score.rouge_scorer import _score_lcs

from gpu_neighbors.core.tiling import MatrixReduction, TilePlan, default_memory_budget, reduce_tiles, resolve_device
from gpu_neighbors.kernels.rouge import RougeKernel
from gpu_neighbors.text.tokenizers import WhitespaceTokenizer
from huse import huse_texts

def resampled_texts(count: int, rng: random.Random) -> list[str]:
    texts = huse_texts()
    return [rng.choice(texts) for _ in range(count)]


def time_ours(train: list[str], candidates: list[str], device: torch.device):
    """Seconds for all pairs, tiled as NeighborsScorer plans it for its default memory budget,
    and the scores."""
    start = time.perf_counter()
    kernel = RougeKernel(tokenizer=WhitespaceTokenizer(), device=device)
    kernel.fit(train)
    plan = TilePlan.from_budget(
        default_memory_budget(device), kernel.pair_bytes(), len(train), chunk_rows=None
    )
    scores = reduce_tiles(
        lambda first, last: kernel.encode(candidates[first:last]), kernel.tile,
        plan.chunks(len(candidates)), plan.blocks(len(train)), MatrixReduction(len(candidates), len(train)),
    )
    return time.perf_counter() - start, scores


def time_peer(pairs: list[tuple[list[str], list[str]]]) -> float:
    start = time.perf_counter()
    for candidate, reference in pairs:
        _score_lcs(reference, candidate)
    return time.perf_counter() - start


def measure(
    train_size: int = 2000,
    candidate_size: int = 2000,
    peer_target_seconds: float = 15.0,
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
    ours_seconds, scores = min(
        (time_ours(train, candidates, resolved) for _ in range(repeats)),
        key=lambda result: result[0],
    )
    pairs = train_size * candidate_size

    train_tokens = [text.split() for text in train]
    candidate_tokens = [text.split() for text in candidates]

    def sample(count: int) -> list[tuple[int, int]]:
        return [(rng.randrange(candidate_size), rng.randrange(train_size)) for _ in range(count)]

    def as_tokens(indices):
        return [(candidate_tokens[i], train_tokens[j]) for i, j in indices]

    probe = sample(2000)
    per_pair_guess = time_peer(as_tokens(probe)) / len(probe)
    part_size = max(1, min(pairs, int(peer_target_seconds / per_pair_guess / repeats)))
    parts = [sample(part_size) for _ in range(repeats)]
    peer_seconds = min(time_peer(as_tokens(part)) for part in parts)

    mismatches = sum(
        _score_lcs(train_tokens[j], candidate_tokens[i]).fmeasure != float(scores[i, j])
        for i, j in parts[0]
    )
    ours_per_pair = ours_seconds / pairs
    peer_per_pair = peer_seconds / part_size
    return {
        "benchmark": "rouge-l all pairs",
        "pairs": pairs,
        "ours_seconds": ours_seconds,
        "peer": "rouge_score.rouge_scorer._score_lcs",
        "peer_seconds": peer_seconds,
        "peer_pairs": part_size,
        "peer_extrapolated_seconds": peer_per_pair * pairs,
        "ratio": peer_per_pair / ours_per_pair,
        "mismatches_on_peer_pairs": mismatches,
        "device": str(resolved),
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=2000, help="training texts")
    parser.add_argument("--candidates", type=int, default=2000, help="candidate texts")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    result = measure(
        train_size=args.train,
        candidate_size=args.candidates,
        device=args.device,
        threads=args.threads or None,
    )
    print(
        f"ROUGE-L F on all {result['pairs']:,} pairs (HUSE texts resampled), "
        f"device {result['device']}, {result['torch_threads']} torch threads, best of 3 each"
    )
    print(f"{'':<34}{'seconds':>10}{'pairs':>12}{'ns / pair':>12}")
    ours_ns = result["ours_seconds"] / result["pairs"] * 1e9
    peer_ns = result["peer_seconds"] / result["peer_pairs"] * 1e9
    print(f"{'gpu-neighbors RougeKernel':<34}{result['ours_seconds']:>10.2f}{result['pairs']:>12,}{ours_ns:>12.0f}")
    print(f"{'rouge-score _score_lcs (sample)':<34}{result['peer_seconds']:>10.2f}{result['peer_pairs']:>12,}{peer_ns:>12.0f}")
    print(
        f"peer extrapolated to all pairs: {result['peer_extrapolated_seconds']:.0f} s; "
        f"ratio (peer / ours per pair): {result['ratio']:.0f}x; "
        f"score mismatches on the sampled pairs: {result['mismatches_on_peer_pairs']}"
    )


if __name__ == "__main__":
    main()
