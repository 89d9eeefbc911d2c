"""All-pairs jobs against the tools people use for them: Self-BLEU against fast-bleu's C++
`SelfBLEU` (and NLTK's `sentence_bleu` loop on a sample).

Texts are spliced from the HUSE summaries (see huse.py). Both sides compute BLEU-4 with NLTK's
method1 (epsilon) smoothing, each text against all the others; fast-bleu is timed on the same
texts, whole, as its authors intend it to be used (one `SelfBLEU` object, `get_score()`), and
its scores are checked against ours. NLTK is timed on a sample of texts (each against all the
others) and extrapolated per text. Each side is timed `repeats` times and the fastest kept.
"""
from __future__ import annotations

import argparse
import random
import time
import warnings

import numpy as np

from gpu_neighbors.allpairs.self_bleu import self_bleu
from huse import spliced_texts

SIZES = (2_000, 20_000, 100_000)
WEIGHTS = (0.25, 0.25, 0.25, 0.25)


def _fastest(repeats: int, run) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return best, result


def measure_self_bleu(sizes=SIZES, nltk_sample: int = 20, repeats: int = 3, device: str = "auto",
                      seed: int = 0) -> list[dict]:
    from fast_bleu import SelfBLEU
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    rows = []
    for size in sizes:
        texts = spliced_texts(size, random.Random(seed))
        tokens = [text.split() for text in texts]
        ours, result = _fastest(repeats, lambda: self_bleu(texts, weights=WEIGHTS, smoothing="epsilon", device=device))
        peer, theirs = _fastest(repeats, lambda: SelfBLEU(tokens, {"bleu": WEIGHTS}, smoothing_func=1).get_score())
        theirs = np.asarray(theirs["bleu"])
        rng = random.Random(seed + 1)
        picked = rng.sample(range(size), min(nltk_sample, size))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            nltk = [sentence_bleu(tokens[:i] + tokens[i + 1:], tokens[i], weights=WEIGHTS,
                                  smoothing_function=SmoothingFunction().method1) for i in picked]
            nltk_per_text = (time.perf_counter() - start) / len(picked)
        rows.append({
            "texts": size,
            "ours_seconds": ours,
            "mean": result.mean,
            "fast_bleu_seconds": peer,
            "ratio_fast_bleu": peer / ours,
            "max_abs_difference_fast_bleu": float(np.abs(theirs - result.scores).max()),
            "nltk_seconds_extrapolated": nltk_per_text * size,
            "nltk_texts_timed": len(picked),
            "ratio_nltk": nltk_per_text * size / ours,
            "max_abs_difference_nltk": float(np.abs(np.array(nltk) - result.scores[picked]).max()),
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    for row in measure_self_bleu(sizes, device=args.device):
        print(f"Self-BLEU of {row['texts']:,} texts: ours {row['ours_seconds']:.2f} s, fast-bleu "
              f"{row['fast_bleu_seconds']:.2f} s ({row['ratio_fast_bleu']:.1f}x), NLTK ~"
              f"{row['nltk_seconds_extrapolated']:,.0f} s ({row['ratio_nltk']:,.0f}x); max |diff| "
              f"fast-bleu {row['max_abs_difference_fast_bleu']:.1e}, NLTK {row['max_abs_difference_nltk']:.1e}")


if __name__ == "__main__":
    main()
