"""Perturbations the checklist does not make (issue 35's held-back check, done our own way): does
what the outlier test learned carry over to damage it never saw? Writes the section
"Perturbations beyond the checklist" of bench/quality.md.

The default scorer is fitted on each development set's training side and rates its good held-out
texts (as bench/checklist.py: the same sets, samples and target) beside copies with one word in
three changed by a character deleted, inserted or substituted (random positions and letters
a-z), and with the first half of the words said twice. None of these is among the checklist's
perturbations (`text/perturbations.py`) that teach the degeneracy score. Each cell: the drop of
the copies' mean estimate below the originals', ✓ where it reaches half the gap to the training
set's lowest-decile mean, and the share of copies flagged outside.

    .venv/bin/python bench/beyond_checklist.py [--held 100] [--mlqe-train 2000]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from checklist import OUT, load, good_sample
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.core.outside import lowest_decile_mean
from gpu_neighbors.text.perturbations import generator
from pages import replace_section

HEADING = "## Perturbations beyond the checklist"
LETTERS = "abcdefghijklmnopqrstuvwxyz"
WORDS_PER_CHANGE = 3
SEED = 7  # not the checklist's 0: other random positions too


def deleted(word: str, rng: np.random.Generator) -> str:
    if len(word) < 2:
        return word
    at = int(rng.integers(len(word)))
    return word[:at] + word[at + 1:]


def inserted(word: str, rng: np.random.Generator) -> str:
    at = int(rng.integers(len(word) + 1))
    return word[:at] + LETTERS[int(rng.integers(len(LETTERS)))] + word[at:]


def substituted(word: str, rng: np.random.Generator) -> str:
    at = int(rng.integers(len(word)))
    return word[:at] + LETTERS[int(rng.integers(len(LETTERS)))] + word[at + 1:]


def per_word(name: str, change: Callable[[str, np.random.Generator], str]) -> Callable[[str], str]:
    """One word in WORDS_PER_CHANGE (at least one) changed by `change`, at seeded positions."""
    def copy(text: str) -> str:
        words, rng = text.split(), generator(SEED, name, text)
        if not words:
            return text
        for index in rng.choice(len(words), size=max(1, round(len(words) / WORDS_PER_CHANGE)), replace=False):
            words[index] = change(words[index], rng)
        return " ".join(words)
    return copy


def half_twice(text: str) -> str:
    words = text.split()
    return " ".join(words[: max(1, len(words) // 2)] * 2)


PERTURBATIONS: dict[str, Callable[[str], str]] = {
    "character deleted": per_word("deleted", deleted),
    "character inserted": per_word("inserted", inserted),
    "character substituted": per_word("substituted", substituted),
    "first half twice": half_twice,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--held", type=int, default=100)
    parser.add_argument("--mlqe-train", type=int, default=2000)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    load_average = " ".join(f"{value:.1f}" for value in os.getloadavg())
    start = time.perf_counter()
    lines = ["| set | texts | original | needed | " + " | ".join(PERTURBATIONS) + " |",
             "|" + "---|" * (len(PERTURBATIONS) + 4)]
    for data in load(args.mlqe_train):
        texts, scores = data.train
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # repeated training texts: the benchmark states its data
            scorer = NeighborsScorer(device="cpu").fit(texts, scores)
        held, _ = good_sample(data, scores, args.held)
        original = float(scorer.predict(held).scores.mean())
        needed = (original - lowest_decile_mean(scores)) / 2
        cells = []
        for name, copy in PERTURBATIONS.items():
            prediction = scorer.predict([copy(text) for text in held])
            drop = original - float(np.nanmean(prediction.scores))
            cells.append(f"{drop:.3f}{' ✓' if drop >= needed else ''} ({prediction.outside.mean():.0%} flagged)")
        lines.append(f"| {data.name} | {len(held)} | {original:.3f} | {needed:.3f} | " + " | ".join(cells) + " |")
        print(lines[-1], file=sys.stderr, flush=True)
    text = "\n".join([
        HEADING, "",
        f"Made by `bench/beyond_checklist.py` in {(time.perf_counter() - start) / 60:.1f} min (load average before "
        f"the run: {load_average}). The default scorer on each set's training side (as the checklist above: the "
        "same held-out good texts and target) rates copies changed in ways the checklist never makes, so the "
        "degeneracy score never learned them: one word in three with a character deleted, inserted or substituted "
        "(random letters a-z, seed 7), and the first half of the words said twice. Each cell: the drop of the "
        "copies' mean estimate below the originals', ✓ where it reaches *needed*, and the share flagged outside.",
        "", *lines, ""])
    out = Path(args.out)
    out.write_text(replace_section(out.read_text(encoding="utf-8"), HEADING + "\n", text), encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
