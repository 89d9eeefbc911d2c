"""Text unlike the training set (issue 35): how often the default scorer flags it `outside`, how
wide its intervals get, and what the negative evidence costs on real held-out texts.

For each development set the default scorer is fitted on its training side (HUSE: each of 5
seeded folds in turn, so every text is held out once; GUG and MLQE et-en: train -> dev, the MLQE
training side a seeded sample, size below) and predicts:

- its own held-out texts: the share flagged outside (the outlier test's level is 0.05), interval
  coverage at 0.9, mean interval width, and Spearman of the estimates with the known scores
  with the negative evidence (`negatives="lowest_decile"`, the default) and without it
  (`negatives="none"`: the neighbours' estimate for every text; the flag is the same);
- the other two sets' texts (a seeded sample of each): the share flagged and the mean interval
  width, against the held-out texts'.

    .venv/bin/python bench/outside.py [--mlqe-train 2000] [--other 300] [--output bench/outside.md]
        [--fluency auto|none] [--heading "## ..."]

Each run is a section of the page, first after its title (a section of the same heading is
replaced): the page keeps the earlier runs and what was written of them.

`--fluency`: the scorers' fluency part (default auto, the library's default: the offline language
model where fetched; none: without it, as before issue 51).
"""
from __future__ import annotations

import argparse
from collections import Counter
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from gpu_neighbors import Intervals, NeighborsScorer  # noqa: E402
from gpu_neighbors.core.correlation import spearman_rows  # noqa: E402
from gpu_neighbors.evaluation.protocols import fold_indices  # noqa: E402
from gpu_neighbors.evaluation.tables import markdown_table  # noqa: E402
from lm_memo import remembered  # noqa: E402  (bench/, beside this script)
from pages import replace_section, section_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TITLE = "# Text unlike the training set: the default scorer"
DATA = ROOT.parent / "shared" / "data"


def read(name: str) -> tuple[list[str], np.ndarray]:
    with (DATA / name).open(encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    return [record["text"] for record in records], np.array([record["score"] for record in records])


def sample(texts: list[str], scores: np.ndarray, size: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
    if len(texts) <= size:
        return texts, scores
    chosen = np.sort(np.random.default_rng(seed).permutation(len(texts))[:size])
    return [texts[index] for index in chosen], scores[chosen]


def splits(name: str, mlqe_train: int, huse_folds: int = 5, seed: int = 0,
           ) -> list[tuple[list[str], np.ndarray, list[str], np.ndarray]]:
    if name == "huse":
        texts, scores = read("huse_summarization.jsonl")
        folds = []
        for test in fold_indices(len(texts), huse_folds, seed=seed):
            train = np.setdiff1d(np.arange(len(texts)), test)
            folds.append(([texts[i] for i in train], scores[train], [texts[i] for i in test], scores[test]))
        return folds
    stem = {"gug": "gug", "mlqe": "mlqe_et-en"}[name]
    train_texts, train_scores = read(f"{stem}_train.jsonl")
    if name == "mlqe":
        train_texts, train_scores = sample(train_texts, train_scores, mlqe_train)
    return [(train_texts, train_scores, *read(f"{stem}_dev.jsonl"))]


OTHER = {"huse": "huse_summarization.jsonl", "gug": "gug_dev.jsonl", "mlqe": "mlqe_et-en_dev.jsonl"}


def spearman(estimates: np.ndarray, truth: np.ndarray) -> float:
    return float(spearman_rows(estimates, truth)[0])


def measure(name: str, mlqe_train: int, other_size: int, kernel: str | None = None, huse_folds: int = 5,
            seed: int = 0, fluency: str = "auto") -> dict[str, object]:
    held = {"flagged": [], "covered": [], "width": [], "with": [], "without": [], "truth": []}
    others: dict[str, dict[str, list[float]]] = {}
    chosen: list[str] = []
    part: dict[str, str] = {"fluency": fluency} if kernel is None else {"kernel": kernel, "fluency": fluency}
    for train_texts, train_scores, test_texts, test_scores in splits(name, mlqe_train, huse_folds, seed):
        default = NeighborsScorer(device="cpu", **part).fit(train_texts, train_scores)
        plain = NeighborsScorer(device="cpu", level=Intervals(negatives="none"), **part).fit(train_texts, train_scores)
        chosen.append(default.kernel_name)
        prediction, neighbours_only = default.predict(test_texts), plain.predict(test_texts)
        assert prediction.outside is not None and prediction.low is not None and prediction.high is not None
        held["flagged"] += prediction.outside.tolist()
        defined = np.isfinite(prediction.scores)
        held["covered"] += ((test_scores >= prediction.low) & (test_scores <= prediction.high))[defined].tolist()
        held["width"] += (prediction.high - prediction.low)[defined].tolist()
        held["with"] += prediction.scores.tolist()
        held["without"] += neighbours_only.scores.tolist()
        held["truth"] += test_scores.tolist()
        for other, path in OTHER.items():
            if other == name:
                continue
            texts, scores = sample(*read(path), other_size, seed=1)
            foreign = default.predict(texts)
            assert foreign.outside is not None and foreign.low is not None and foreign.high is not None
            entry = others.setdefault(other, {"flagged": [], "width": []})
            entry["flagged"] += foreign.outside.tolist()
            entry["width"] += (foreign.high - foreign.low)[np.isfinite(foreign.scores)].tolist()
    truth = np.array(held["truth"])
    width = float(np.mean(held["width"]))
    return {
        "set": name,
        "kernels fitted": ", ".join(f"{kernel} {count}" for kernel, count in Counter(chosen).most_common()),
        "held-out texts": len(truth),
        "flagged": float(np.mean(held["flagged"])),
        "coverage at 0.9": float(np.mean(held["covered"])),
        "mean width": width,
        "rho, negatives on": spearman(np.array(held["with"]), truth),
        "rho, negatives off": spearman(np.array(held["without"]), truth),
        **{f"{other}: flagged": float(np.mean(entry["flagged"])) for other, entry in others.items()},
        **{f"{other}: width / held-out width": float(np.mean(entry["width"])) / width for other, entry in others.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mlqe-train", type=int, default=2000)
    parser.add_argument("--other", type=int, default=300, help="texts of each other set")
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "outside.md")
    parser.add_argument("--kernel", default=None, help="a kernel other than the default's (e.g. auto)")
    parser.add_argument("--huse-folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="HUSE's fold seed")
    parser.add_argument("--fluency", default="auto", help="auto (the default) or none")
    parser.add_argument("--sets", default="huse,gug,mlqe", help="the sets measured, comma-separated")
    parser.add_argument("--heading", default=None,
                        help="the run's section heading (## ...; default: the scorer, options and time): a "
                             "section of that heading is replaced, else the run goes first")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    started = time.perf_counter()
    with remembered():
        rows = [measure(name, args.mlqe_train, args.other, args.kernel, args.huse_folds, args.seed, args.fluency)
                for name in args.sets.split(",")]
    load = os.getloadavg()[0]
    columns = sorted({key for row in rows for key in row},  # by name last: a set's order changes run to run
                     key=lambda key: (key.count(":"), list(rows[0]).index(key) if key in rows[0] else 99, key))
    table = markdown_table([{column: _cell(row.get(column)) for column in columns} for row in rows])
    options = "".join(f" --{name} {value}" for name, value in (("kernel", args.kernel), ("huse-folds", args.huse_folds),
                                                                 ("seed", args.seed), ("fluency", args.fluency),
                                                                 ("sets", args.sets))
                      if value not in (None, 5, 0, "auto", "huse,gug,mlqe"))
    scorer = "the default scorer" if args.kernel is None else f"the {args.kernel} kernel"
    heading = args.heading or (f"## {scorer[0].upper()}{scorer[1:]}{options}, "
                               f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC")
    text = (f"{heading}\n\nMade by `.venv/bin/python bench/outside.py --mlqe-train {args.mlqe_train} --other {args.other}"
            f"{options}` in {time.perf_counter() - started:.0f} s (load average {load:.1f} on {os.cpu_count()} cores). "
            f"HUSE: {args.huse_folds} seeded folds (seed {args.seed}); GUG, MLQE et-en: train "
            f"-> dev (MLQE's training side: a seeded sample of {args.mlqe_train}). Columns named after another "
            f"set: {args.other} of its texts scored by the same scorer.\n\n{table}\n")
    write_first(args.output, heading, text)
    return 0


def write_first(path: Path, heading: str, text: str) -> None:
    """The section under `heading` of the page at `path` replaced by `text`, or `text` put first
    after the page's title (made where missing): the earlier runs' sections, and what was written
    of them, stay."""
    page = path.read_text(encoding="utf-8") if path.exists() else TITLE + "\n"
    if section_of(page, heading + "\n"):
        page = replace_section(page, heading + "\n", text)
    else:
        title, _, rest = page.partition("\n")
        page = f"{title}\n\n{text}\n{rest.lstrip(chr(10))}" if rest.strip() else f"{title}\n\n{text}"
    path.write_text(page, encoding="utf-8")
    print(text)


def _cell(value: object) -> object:
    return f"{value:.3f}" if isinstance(value, float) else ("" if value is None else value)


if __name__ == "__main__":
    sys.exit(main())
