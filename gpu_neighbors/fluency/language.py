"""Whether training texts are English, the one language the fluency model reads: checked before
`auto` runs the model over them, for next to nothing.

The model's statistic says nothing of quality in another language (Spearman -0.01 on German
targets in the issue's prototype), and `auto`'s leave-one-out only finds that out after the
model has read every calibration text (minutes on a CPU). The check reads the same texts without
the model: the share of their words (runs of letters, as the spelling statistic spells them,
`text.lexicon`) that are words of pyspellchecker's English list, pooled over the texts.

Measured (bench/fluency_language.py, bench/fluency.md part 5): the project's English sets
0.956-0.963 (HUSE's lower-cased, digit-masked headlines 0.959; GUG's learner sentences,
misspellings and all, 0.961-0.963; MLQE's English translations, full of Estonian names,
0.956-0.959), English manuals 0.912-0.964; text in 30 other languages 0.07-0.52 (MLQE's
Estonian sources 0.14-0.15, German 0.25-0.30, French 0.40-0.44, Catalan, which shares many short
words with the list, 0.52). MIN_ENGLISH_SHARE = 0.75, "three words in four are English", sits
in that gap, at least 0.16 from either side. A set in which no word is found (digits, symbols)
cannot be judged: its share is None and the model runs, as before the check.
"""
from __future__ import annotations

from collections.abc import Iterable

from gpu_neighbors.text.lexicon import letter_runs, words

ENGLISH = "en"  # the word list's language: the model's
MIN_ENGLISH_SHARE = 0.75


def english_share(texts: Iterable[str]) -> float | None:
    """The share of the texts' words (letter runs, lower-cased) that are English words; None
    where they hold none."""
    listed = words(ENGLISH)
    found = total = 0
    for text in texts:
        runs = letter_runs(text)
        total += len(runs)
        found += sum(run in listed for run in runs)
    return found / total if total else None


def is_english(share: float | None) -> bool:
    """Whether texts of that share may be English (None: not judged, so yes)."""
    return share is None or share >= MIN_ENGLISH_SHARE
