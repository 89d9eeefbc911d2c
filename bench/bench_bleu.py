"""All-pairs BLEU*: our kernel against the fastest exact peers, each used as its authors intend.

Texts are new sentences spliced from the HUSE summaries (first part of one, rest of another), so
every text is distinct but the vocabulary and n-gram statistics are those of real headlines.
Ours: the scorer's full similarity pass over all candidates x training texts (tokenizing,
n-gram features, the tile loop, BLEU* for every pair, copy to the CPU), after `fit`, which is
timed apart; one torch thread, on one core (`per_core.one_core`: the process pinned, as for the
peers, so no helper thread of any library runs beside it and the scheduler moves it nowhere).
Peers, on one core, each over a block of `peer_references` training texts x all candidates (a
fresh block per repeat), on the same tokens, the way their authors mean them to be used:

* `fast-bleu` (C++): one `BLEU([reference], {"star": (0, 1/3, 1/3, 1/3)}, smoothing_func=1)`
  object per training text, `get_score(all candidates)`. Its building is timed apart and left
  out of the per-pair figure (a user amortises it over all candidates). It offers method0 and
  method1 (epsilon) smoothing only: checked against our `epsilon` BLEU*.
* `bleuscore` (Rust): `compute([[reference]], [candidate], 4, smooth=True)` per pair; it
  tokenizes with 13a and smooths every order by add-one (Lin and Och): BLEU* is computed from
  its precisions and brevity penalty and checked against our `add1` BLEU* with the 13a
  tokenizer (its timing is on the same texts as the others). What still differs: candidates
  shorter than four tokens, where it takes an order with no n-grams as precision 1 (t_n = 0,
  (0 + 1) / (0 + 1)) and NLTK, hence we, as 1 / 2 (t_n = max(len - n + 1, 1)).
* `sacrebleu`: one reused `BLEU(tokenize="none", effective_order=True)` object,
  `sentence_score(candidate, [reference])`; and the same object with each reference's n-grams
  extracted once (`_extract_reference_info`, then `_compute_segment_statistics` and
  `_compute_score_from_stats` per candidate: its internal API, what `corpus_score` does with
  cached references). sacrebleu computes BLEU-4 with equal weights (unigrams included) and
  cannot weight orders as BLEU* does: its match counts, totals and lengths are checked instead,
  as BLEU* (add1) recomputed from them against ours.
* NLTK `sentence_bleu([reference], candidate, weights=(0, 1/3, 1/3, 1/3), method2)` per pair:
  the definition itself, checked against our `add1` BLEU*.

Each repeat times ours, then every peer (sides interleaved, so bursts of load on a shared
machine hit all alike); medians of `repeats`. Ratios are per core, against each peer and
against the fastest one.

`--predict` times our whole `predict` instead of the similarity pass: the same BLEU* (add1)
scorer, fluency off, its other settings the defaults (top-k at its untuned k, intervals, the
outlier test and its typicality statistics; random training scores, fitted with tune=False),
against the same peers per pair: what a user of the estimate pays, not the kernel alone.

    .venv/bin/python bench/bench_bleu.py [--train 2000] [--candidates 2000] [--threads 1] [--device auto]
        [--predict]
"""
from __future__ import annotations

import math
import random
import warnings

import numpy as np
import torch

from gpu_neighbors import NeighborsScorer
from gpu_neighbors.kernels.parts import Bleu
from huse import spliced_texts
from per_core import kernel_arguments, measured, median, one_core, timed

WEIGHTS = (0.0, 1 / 3, 1 / 3, 1 / 3)


def _bleu_star_from_counts(counts, totals, hyp_len: int, ref_len: int) -> float:
    """BLEU* with add1 smoothing from n-gram match counts and totals (orders 1-4)."""
    if hyp_len == 0 or counts[0] == 0:
        return 0.0
    brevity = math.exp(min(0.0, 1 - ref_len / hyp_len))
    logs = [math.log((counts[n] + 1) / (max(totals[n], 1) + 1)) for n in (1, 2, 3)]
    return brevity * math.exp(sum(logs) / 3)


class FastBleu:
    name = "fast-bleu BLEU.get_score"
    compared_with = "epsilon"

    def __init__(self) -> None:
        import fast_bleu

        self.module = fast_bleu

    def prepare(self, reference: list[str], reference_text: str):
        return self.module.BLEU([reference], {"star": WEIGHTS}, smoothing_func=1)

    def score(self, prepared, candidates: list[list[str]], candidate_texts: list[str]) -> list[float]:
        return prepared.get_score(candidates)["star"]


class BleuScore:
    name = "bleuscore.compute"
    compared_with = "add1 13a"

    def __init__(self) -> None:
        import bleuscore

        self.compute = bleuscore.compute

    def prepare(self, reference: list[str], reference_text: str):
        return [[reference_text]]

    def score(self, prepared, candidates, candidate_texts) -> list[dict]:
        compute = self.compute
        return [compute(prepared, [text], 4, True) for text in candidate_texts]

    @staticmethod
    def as_bleu_star(result: dict) -> float:
        precisions = result["precisions"]
        if result["translation_length"] == 0 or precisions[0] == 0:
            return 0.0
        # smooth=True gives (m_n + 1) / (t_n + 1) for every order; unigrams: m_1 = 0 exactly
        # when that is 1 / (t_1 + 1), which the line above cannot see, so test the count.
        if precisions[0] * (result["translation_length"] + 1) <= 1 + 1e-9:
            return 0.0
        return result["brevity_penalty"] * math.exp(sum(math.log(p) for p in precisions[1:]) / 3)


class SacreBleu:
    name = "sacrebleu BLEU.sentence_score"
    compared_with = "add1"

    def __init__(self) -> None:
        from sacrebleu.metrics import BLEU

        self.bleu = BLEU(tokenize="none", effective_order=True)

    def prepare(self, reference: list[str], reference_text: str):
        return [reference_text]

    def score(self, prepared, candidates, candidate_texts):
        sentence_score = self.bleu.sentence_score
        return [sentence_score(text, prepared) for text in candidate_texts]

    @staticmethod
    def as_bleu_star(result) -> float:
        return _bleu_star_from_counts(result.counts, result.totals, result.sys_len, result.ref_len)


class SacreBleuCached(SacreBleu):
    name = "sacrebleu, references cached"

    def prepare(self, reference, reference_text):
        return self.bleu._extract_reference_info([self.bleu._preprocess_segment(reference_text)])

    def score(self, prepared, candidates, candidate_texts):
        bleu = self.bleu
        preprocess, statistics, compute = (
            bleu._preprocess_segment, bleu._compute_segment_statistics, bleu._compute_score_from_stats
        )
        return [compute(statistics(preprocess(text), prepared)) for text in candidate_texts]


class Nltk:
    name = "nltk sentence_bleu"
    compared_with = "add1"

    def __init__(self) -> None:
        from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

        self.sentence_bleu = sentence_bleu
        self.add1 = SmoothingFunction().method2

    def prepare(self, reference, reference_text):
        return [reference]

    def score(self, prepared, candidates, candidate_texts):
        sentence_bleu, add1 = self.sentence_bleu, self.add1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return [sentence_bleu(prepared, tokens, weights=WEIGHTS, smoothing_function=add1)
                    for tokens in candidates]


PEERS = (FastBleu, BleuScore, SacreBleu, SacreBleuCached, Nltk)


def measure(
    train_size: int = 2000,
    candidate_size: int = 2000,
    peer_references: int = 6,
    slow_peer_candidates: int = 500,
    repeats: int = 3,
    device: str = "auto",
    threads: int | None = 1,
    seed: int = 0,
    predict: bool = False,
) -> dict:
    """`slow_peer_candidates`: the per-pair peers (all but fast-bleu) score this many of the
    candidates against each reference, so the run stays short; fast-bleu scores all. `predict`:
    ours timed is the whole `predict` (top-k, the default estimator, at its untuned k, with the
    intervals and the outlier test; random training scores) instead of the similarity pass."""
    if threads is not None:
        torch.set_num_threads(threads)
    rng = random.Random(seed)
    train, candidates = spliced_texts(train_size, rng), spliced_texts(candidate_size, rng)
    train_tokens = [text.split() for text in train]
    candidate_tokens = [text.split() for text in candidates]
    scorer = NeighborsScorer(kernel=Bleu(smoothing="add1"), device=device, fluency=None)
    scores = np.array([rng.random() for _ in train]) if predict else np.zeros(train_size)
    fit_seconds, _ = timed(lambda: scorer.fit(train, scores, tune=not predict))  # random scores: nothing to tune
    references = rng.sample(range(train_size), min(train_size, peer_references * repeats))
    blocks = [references[i::repeats] for i in range(repeats)]
    peers = [peer() for peer in PEERS]

    ours_runs: list[float] = []
    peer_runs: dict[str, list[float]] = {peer.name: [] for peer in peers}
    build_runs: dict[str, list[float]] = {peer.name: [] for peer in peers}
    peer_pairs: dict[str, int] = {}
    checked: dict[str, tuple[list[int], list[int], list]] = {}
    similarity = None
    for repeat in range(repeats):
        with one_core():
            if predict:
                seconds, _ = timed(lambda: scorer.predict(candidates))
            else:
                seconds, similarity = timed(lambda: scorer.similarity(candidates))
        if predict and repeat == 0:
            similarity = scorer.similarity(candidates)
        ours_runs.append(seconds)
        for peer in peers:
            count = candidate_size if isinstance(peer, FastBleu) else min(slow_peer_candidates, candidate_size)
            rows = list(range(count))
            scored, built = 0.0, 0.0
            outputs = []
            with one_core():
                for reference in blocks[repeat]:
                    build, prepared = timed(lambda: peer.prepare(train_tokens[reference], train[reference]))
                    run, output = timed(lambda: peer.score(prepared, candidate_tokens[:count], candidates[:count]))
                    built += build
                    scored += run
                    outputs.append(output)
            pairs = count * len(blocks[repeat])
            peer_runs[peer.name].append(scored / pairs)
            build_runs[peer.name].append(built / len(blocks[repeat]))
            peer_pairs[peer.name] = pairs
            if repeat == 0:
                checked[peer.name] = (rows, blocks[0], outputs)
    assert similarity is not None
    ours = median(ours_runs)
    pairs = train_size * candidate_size
    ours_per_pair = ours / pairs

    epsilon = NeighborsScorer(kernel=Bleu(smoothing="epsilon"), device=device, fluency=None).fit(train, np.zeros(train_size))
    with_13a = NeighborsScorer(kernel=Bleu(smoothing="add1", tokenizer="13a"), device=device, fluency=None)
    ours_by_smoothing = {
        "add1": similarity.numpy(),
        "epsilon": epsilon.similarity(candidates).numpy(),
        "add1 13a": with_13a.fit(train, np.zeros(train_size)).similarity(candidates).numpy(),
    }
    peer_results = []
    for peer in peers:
        rows, columns, outputs = checked[peer.name]
        convert = getattr(peer, "as_bleu_star", float)
        theirs = np.array([[convert(value) for value in output] for output in outputs])  # [refs, rows]
        expected = ours_by_smoothing[peer.compared_with][np.ix_(rows, columns)].T
        difference = np.abs(theirs - expected)
        per_pair = median(peer_runs[peer.name])
        peer_results.append({
            "peer": peer.name,
            "us_per_pair": per_pair * 1e6,
            "build_ms_per_reference": median(build_runs[peer.name]) * 1e3,
            "pairs_timed": peer_pairs[peer.name],
            "compared_with": f"BLEU* {peer.compared_with}",
            "max_abs_difference": float(difference.max()),
            "pairs_differing": int((difference > 1e-9).sum()),
            "pairs_checked": int(difference.size),
            "ratio": per_pair / ours_per_pair,
        })
    fastest = min(peer_results, key=lambda result: result["us_per_pair"])
    return {
        "benchmark": "bleu",
        "timed": "predict" if predict else "similarity",
        "top_k": scorer.thresholds_.top_k if predict else None,
        "device": str(scorer.device_),
        "torch_threads": torch.get_num_threads(),
        "pairs": pairs,
        "fit_seconds": fit_seconds,
        "ours_seconds": ours,
        "ours_ns_per_pair": ours_per_pair * 1e9,
        "peer": fastest["peer"] + " (fastest peer, one core)",
        "peer_seconds": fastest["us_per_pair"] * 1e-6 * fastest["pairs_timed"],
        "peer_pairs": fastest["pairs_timed"],
        "ratio": fastest["ratio"],
        "peers": peer_results,
    }


def peers_table(result: dict) -> str:
    lines = [
        "| peer (one core) | us / pair | build, ms / reference | pairs timed | checked against | "
        "max abs difference | pairs differing (> 1e-9) | ratio (peer / ours) |",
        "|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for peer in sorted(result["peers"], key=lambda peer: peer["us_per_pair"]):
        lines.append(
            f"| {peer['peer']} | {peer['us_per_pair']:,.1f} | {peer['build_ms_per_reference']:,.2f} | "
            f"{peer['pairs_timed']:,} | {peer['compared_with']} | {peer['max_abs_difference']:.1e} | "
            f"{peer['pairs_differing']:,} of {peer['pairs_checked']:,} | {peer['ratio']:,.0f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = kernel_arguments(__doc__, 2000)
    parser.add_argument("--predict", action="store_true",
                        help="time the default predict (top-k, intervals, outlier test), not the similarity pass")
    args = parser.parse_args()
    result = measured(args, measure, predict=args.predict)
    what = f"predict (top-k, k = {result['top_k']})" if args.predict else "all-pairs"
    print(f"{what} BLEU*, {args.candidates} x {args.train} texts on {result['device']}, "
          f"{result['torch_threads']} torch thread(s), medians of 3")
    print(f"ours: {result['ours_seconds']:.3f} s, {result['ours_ns_per_pair']:.1f} ns/pair "
          f"(fit {result['fit_seconds']:.3f} s)")
    print(peers_table(result))
    print(f"against the fastest peer ({result['peer']}): {result['ratio']:,.0f}x per core")


if __name__ == "__main__":
    main()
