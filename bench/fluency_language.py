"""The language check before the fluency model's pass (issue 51, `fluency/language.py`): the share
of each text set's words that are English words, on English and non-English text one can read
offline, and what the check costs. Writes part 5 of bench/fluency.md.

- English: the project's sets in ../shared/data (HUSE headlines, GUG learner sentences, MLQE
  et-en English translations), Vim's English tutor, GnuPG's English help.
- Not English: MLQE's Estonian source sentences; Vim's tutor in every language it ships
  (/usr/share/vim/vim*/tutor/tutor.LANG.utf-8) and GnuPG's help texts
  (/usr/share/gnupg/help.LANG.txt), one text a non-empty line, where the machine has them.
  Some of GnuPG's help files are the English text under another language's name (not yet
  translated): a file more than half of whose lines are lines of the English one is listed as
  English, under its own name.
- Cost: the check as `fit` runs it, on the calibration sample (2,000 texts at most; MLQE's
  training side), and on all 7,000 texts, the word list already read (it is read once a process
  for the spelling statistic, about 0.1 s).

    .venv/bin/python bench/fluency_language.py
"""
from __future__ import annotations

import glob
import json
import os
import sys
import time
from pathlib import Path

from gpu_neighbors.core.conformal import MAX_CALIBRATION_TEXTS
from gpu_neighbors.fluency.language import ENGLISH, MIN_ENGLISH_SHARE, english_share
from gpu_neighbors.text.lexicon import words
from pages import write_section  # bench/, beside this script

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "bench" / "fluency.md"
HEADING = "## 5. The language check before the model's pass"
VIM = sorted(glob.glob("/usr/share/vim/vim*/tutor/tutor.*.utf-8"))
GNUPG = sorted(glob.glob("/usr/share/gnupg/help.*.txt"))
GNUPG_ENGLISH = Path("/usr/share/gnupg/help.txt")


def jsonl(name: str, field: str) -> list[str]:
    with (DATA / name).open(encoding="utf-8") as handle:
        return [json.loads(line)[field] for line in handle]


def lines(path: str | Path) -> list[str]:
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def sets() -> list[tuple[str, str, list[str]]]:
    """(name, language, texts) of every set measured."""
    found: list[tuple[str, str, list[str]]] = [
        ("HUSE headlines", "English", jsonl("huse_summarization.jsonl", "text")),
        ("GUG train (learner sentences)", "English", jsonl("gug_train.jsonl", "text")),
        ("GUG dev", "English", jsonl("gug_dev.jsonl", "text")),
        ("MLQE et-en train, English side", "English", jsonl("mlqe_et-en_train.jsonl", "text")),
        ("MLQE et-en dev, English side", "English", jsonl("mlqe_et-en_dev.jsonl", "text")),
        ("MLQE et-en train, Estonian side", "Estonian", jsonl("mlqe_et-en_train.jsonl", "source")),
        ("MLQE et-en dev, Estonian side", "Estonian", jsonl("mlqe_et-en_dev.jsonl", "source")),
    ]
    english_vim = sorted(glob.glob("/usr/share/vim/vim*/tutor/tutor.utf-8"))
    found += [(f"Vim tutor ({Path(path).parent.parent.name})", "English", lines(path)) for path in english_vim[:1]]
    found += [(f"Vim tutor .{Path(path).name.split('.')[1]}", Path(path).name.split(".")[1], lines(path))
              for path in VIM]
    english = set(lines(GNUPG_ENGLISH)) if GNUPG_ENGLISH.exists() else set()
    if english:
        found.append(("GnuPG help", "English", lines(GNUPG_ENGLISH)))
    for path in GNUPG:
        texts, language = lines(path), Path(path).name.split(".")[1]
        untranslated = sum(text in english for text in texts) > len(texts) / 2
        found.append((f"GnuPG help .{language}", "English (untranslated)" if untranslated else language, texts))
    return found


def main() -> int:
    start, load = time.perf_counter(), " ".join(f"{value:.1f}" for value in os.getloadavg())
    words(ENGLISH)  # read once a process
    rows, shares = [], {"English": [], "other": []}
    for name, language, texts in sets():
        share = english_share(texts)
        english = language.startswith("English")
        if share is not None:
            shares["English" if english else "other"].append(share)
        skipped = share is not None and share < MIN_ENGLISH_SHARE
        rows.append(f"| {name} | {language} | {len(texts)} | {'-' if share is None else f'{share:.3f}'} | "
                    f"{'skipped' if skipped else 'runs'}{'' if skipped != english else ' ✗'} |")
    mlqe = jsonl("mlqe_et-en_train.jsonl", "text")
    timings = []
    for count in (MAX_CALIBRATION_TEXTS, len(mlqe)):
        began = time.perf_counter()
        english_share(mlqe[:count])
        timings.append(f"{count:,} texts {1000 * (time.perf_counter() - began):.0f} ms")
    text = "\n".join([
        HEADING, "",
        f"Made by `bench/fluency_language.py` ({time.perf_counter() - start:.1f} s; load average at the start {load}; "
        "see its docstring). With `fluency=\"auto\"` (use \"auto\"), `fit` measures the share of the calibration "
        "texts' words that are English words (pyspellchecker's list, as the spelling statistic reads it) and runs "
        f"no language model where it is below {MIN_ENGLISH_SHARE:g}. ✗ marks a set the check gets wrong.", "",
        "| set | language | texts | share of English words | the model |",
        "|---|---|---|---|---|", *rows, "",
        f"English sets: {min(shares['English']):.3f}-{max(shares['English']):.3f}; other languages: "
        f"{min(shares['other']):.3f}-{max(shares['other']):.3f}. The threshold, {MIN_ENGLISH_SHARE:g} (three words in "
        f"four), sits in that gap, {min(shares['English']) - MIN_ENGLISH_SHARE:.2f} below the least English set and "
        f"{MIN_ENGLISH_SHARE - max(shares['other']):.2f} above the most English of the others. Cost on MLQE's English side, the word list read: "
        + ", ".join(timings) + " (one thread; fit checks the calibration sample, 2,000 texts at most).", ""])
    write_section(OUT, HEADING, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
