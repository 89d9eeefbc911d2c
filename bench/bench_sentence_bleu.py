"""Aligned (per-sentence) BLEU on token ids, CPU, one thread: gpu_neighbors.sentence_bleu against
NLTK's sentence_bleu, sacrebleu's sentence_bleu and TensorBLEU (`rxlm.metrics.tensorbleu`, if it
is installed in bench/.tensorbleu: `pip install --no-deps --target bench/.tensorbleu rxlm`), at
TensorBLEU's published shapes (batch 16-512, 256 and 1,024 tokens), one reference each.

Token ids: candidates drawn from a Zipf-like distribution over 32,000 ids (1 to 32,000); each
reference is its candidate with 30% of the positions redrawn, so every order has matches. NLTK and
sacrebleu run on a sample of rows (their cost is per row) and are extrapolated to the batch; ours
and TensorBLEU run on the whole batch, best of `repeats`. Ours is given `vocab_size` (a trainer
knows its tokenizer's), and timed without it too, and on texts (each id written as a word).
sacrebleu runs at its `sentence_bleu` defaults (exp smoothing, effective order), with no tokenizer.

    .venv/bin/python bench/bench_sentence_bleu.py [--repeats 3]

Smoothing: ours "epsilon" is NLTK's method1 (the largest difference from NLTK on the sampled rows
is reported per shape). TensorBLEU's "floor" is the
same rule, but it computes in float32, adds 1e-12 to every precision before the log and picks the
first closest reference on a tie (NLTK the shorter); its "exp" is not NLTK's method3 (a zero
precision becomes 1e-12) and its "add-k" adds k to the unigram order too (NLTK's method2 does not).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

BENCH = Path(__file__).resolve().parent
SHAPES = [(batch, length) for length in (256, 1024) for batch in (16, 64, 256, 512)]
VOCABULARY = 32_000
PEER_ROWS = 32  # rows NLTK and sacrebleu score per shape, extrapolated to the batch


def token_ids(batch: int, length: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    weights = 1.0 / torch.arange(1, VOCABULARY + 1, dtype=torch.float64)
    candidates = torch.multinomial(weights, batch * length, replacement=True, generator=generator).view(batch, length) + 1
    redraw = torch.rand((batch, length), generator=generator) < 0.3
    others = torch.multinomial(weights, batch * length, replacement=True, generator=generator).view(batch, length) + 1
    return candidates, torch.where(redraw, others, candidates)


def best_of(repeats: int, call) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def tensorbleu():
    sys.path.insert(0, str(BENCH / ".tensorbleu"))
    try:
        from rxlm.metrics.tensorbleu import tensor_sentence_bleu
    except ImportError as error:
        return None, f"not installed ({error})"
    return tensor_sentence_bleu, None


def measure(shapes=SHAPES, repeats: int = 3) -> dict:
    import sacrebleu
    from nltk.translate.bleu_score import SmoothingFunction
    from nltk.translate.bleu_score import sentence_bleu as nltk_sentence_bleu

    import gpu_neighbors

    torch.set_num_threads(1)
    method1 = SmoothingFunction().method1
    tensor_sentence_bleu, missing = tensorbleu()
    rows = []
    for batch, length in shapes:
        candidates, references = token_ids(batch, length)
        ours = gpu_neighbors.sentence_bleu(candidates, references, smoothing="epsilon", vocab_size=VOCABULARY + 1)
        ours_seconds = best_of(repeats, lambda: gpu_neighbors.sentence_bleu(
            candidates, references, smoothing="epsilon", vocab_size=VOCABULARY + 1))
        unbounded = gpu_neighbors.sentence_bleu(candidates, references, smoothing="epsilon")
        assert torch.equal(unbounded, ours)
        unbounded_seconds = best_of(repeats, lambda: gpu_neighbors.sentence_bleu(
            candidates, references, smoothing="epsilon"))
        # The text path on the same tokens (each id written as a word): tokenizing and numbering
        # the words is its extra cost over the ids.
        texts = [" ".join(map(str, row)) for row in candidates.tolist()]
        reference_texts = [" ".join(map(str, row)) for row in references.tolist()]
        assert torch.equal(gpu_neighbors.sentence_bleu(texts, reference_texts, smoothing="epsilon"), ours)
        text_seconds = best_of(repeats, lambda: gpu_neighbors.sentence_bleu(texts, reference_texts,
                                                                            smoothing="epsilon"))
        sample = min(PEER_ROWS, batch)
        lists = [(c.tolist(), r.tolist()) for c, r in zip(candidates[:sample], references[:sample])]
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nltk = [nltk_sentence_bleu([r], c, smoothing_function=method1) for c, r in lists]
        nltk_seconds = (time.perf_counter() - start) / sample * batch
        strings = [(" ".join(map(str, c)), " ".join(map(str, r))) for c, r in lists]
        start = time.perf_counter()
        for c, r in strings:
            sacrebleu.sentence_bleu(c, [r], tokenize="none")
        sacrebleu_seconds = (time.perf_counter() - start) / sample * batch
        row = {
            "batch": batch, "length": length, "ours_seconds": ours_seconds,
            "ours_without_vocab_size_seconds": unbounded_seconds, "ours_text_seconds": text_seconds,
            "ratio_text_to_ids": text_seconds / unbounded_seconds,
            "nltk_seconds": nltk_seconds, "sacrebleu_seconds": sacrebleu_seconds,
            "ratio_nltk": nltk_seconds / ours_seconds, "ratio_sacrebleu": sacrebleu_seconds / ours_seconds,
            "max_abs_difference_nltk": float(np.abs(ours[:sample].numpy() - np.array(nltk)).max()),
        }
        if tensor_sentence_bleu is not None:
            refs = references[:, None, :]
            theirs = tensor_sentence_bleu(candidates, refs, smoothing_method="floor")
            row["tensorbleu_seconds"] = best_of(
                repeats, lambda: tensor_sentence_bleu(candidates, refs, smoothing_method="floor"))
            row["ratio_tensorbleu"] = row["tensorbleu_seconds"] / ours_seconds
            row["max_abs_difference_tensorbleu"] = float((ours - theirs.double()).abs().max())
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"rows": rows, "tensorbleu": missing or "rxlm.metrics.tensorbleu", "torch_threads": torch.get_num_threads()}


def section(result: dict) -> list[str]:
    lines = [
        "| batch x tokens | ours (s) | ours without vocab_size (s) | ours on texts (s) | texts / ids "
        "| NLTK (s, extrapolated) | x NLTK "
        "| sacrebleu (s, extrapolated) | x sacrebleu | TensorBLEU on the CPU (s) | x TensorBLEU "
        "| max abs diff vs NLTK | vs TensorBLEU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        tensor = (f"{row['tensorbleu_seconds']:.4f} | {row['ratio_tensorbleu']:.1f}x" if "tensorbleu_seconds" in row
                  else "- | -")
        difference = f"{row['max_abs_difference_tensorbleu']:.1e}" if "tensorbleu_seconds" in row else "-"
        lines.append(
            f"| {row['batch']} x {row['length']:,} | {row['ours_seconds']:.4f} | "
            f"{row['ours_without_vocab_size_seconds']:.4f} | {row['ours_text_seconds']:.4f} | "
            f"{row['ratio_text_to_ids']:.2f}x | {row['nltk_seconds']:.3f} | "
            f"{row['ratio_nltk']:.1f}x | {row['sacrebleu_seconds']:.3f} | {row['ratio_sacrebleu']:.1f}x | {tensor} | "
            f"{row['max_abs_difference_nltk']:.1e} | {difference} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    result = measure(repeats=args.repeats)
    print(f"TensorBLEU: {result['tensorbleu']}; torch threads {result['torch_threads']}")
    print("\n".join(section(result)))


if __name__ == "__main__":
    main()
