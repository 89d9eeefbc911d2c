"""All-pairs jobs against the tools people use for them: Self-BLEU against fast-bleu's C++
`SelfBLEU` (and NLTK's `sentence_bleu` loop on a sample), MBR against `mbrs`, and `pairs` (the
full matrix to .npy) with its peak memory.

Texts are spliced from the HUSE summaries (see huse.py). Both sides compute BLEU-4 with NLTK's
method1 (epsilon) smoothing, each text against all the others; fast-bleu is timed on the same
texts, whole, as its authors intend it to be used (one `SelfBLEU` object, `get_score()`), and
its scores are checked against ours. NLTK is timed on a sample of texts (each against all the
others) and extrapolated per text. Each side is timed `repeats` times and the fastest kept.

MBR: 1,000 groups of 64 spliced texts, BLEU-4 with 13a tokens and exp smoothing (mbrs' default
metric is sacrebleu's sentence BLEU with these settings; sacrebleu also gives a pair that shares
no word a small smoothed score where NLTK, and so ours, give 0, and uses the effective order on
texts under 4 tokens). mbrs cannot import beside transformers 5 in the project's environment, so
it runs in its own (`MBRS_PYTHON`, default bench/.mbrs-venv/bin/python, ignored by git: made by
`python3.11 -m venv bench/.mbrs-venv` and its pip installing torch==2.13.0, mbrs and
'setuptools<81', as torchmetrics still imports pkg_resources), on the first
`mbrs_groups` groups (extrapolated per group); selections are compared on those groups.

pairs: 20,000 x 20,000 BLEU* to a float32 .npy in a child process (the command line, one torch
thread), its peak resident memory from the kernel (the child's own VmHWM). The file is written
with positioned writes, not a writable memory map, so none of it counts as the process's memory.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from gpu_neighbors.allpairs.mbr import mbr
from gpu_neighbors.allpairs.self_bleu import self_bleu
from huse import spliced_texts

SIZES = (2_000, 20_000, 100_000)
WEIGHTS = (0.25, 0.25, 0.25, 0.25)
MBRS_PYTHON = os.environ.get("MBRS_PYTHON", str(Path(__file__).resolve().parent / ".mbrs-venv" / "bin" / "python"))
WORKER = Path(__file__).resolve().parent / "mbrs_worker.py"


def _one_thread() -> None:
    """Ours on one torch thread, as the peers run (one core): torch's default two threads spin
    and run about 10x slower on a busy two-core machine (bench_threads.py)."""
    import torch

    torch.set_num_threads(1)


def _fastest(repeats: int, run) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return best, result


def measure_self_bleu(sizes=SIZES, nltk_sample: int = 20, repeats: int = 3, device: str = "auto",
                      seed: int = 0) -> list[dict]:
    _one_thread()
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


def measure_mbr(groups: int = 1_000, group_size: int = 64, mbrs_groups: int = 100, device: str = "auto",
                seed: int = 0, repeats: int = 3) -> dict:
    _one_thread()
    texts = spliced_texts(groups * group_size, random.Random(seed))
    labels = [index // group_size for index in range(len(texts))]
    ours, result = _fastest(repeats, lambda: mbr(texts, labels, weights=WEIGHTS, smoothing="exp", tokenizer="13a",
                                                 device=device))
    row = {"groups": groups, "group_size": group_size, "ours_seconds": ours, "mbrs_groups": 0}
    if not Path(MBRS_PYTHON).exists():
        return {**row, "mbrs_error": f"no mbrs environment at {MBRS_PYTHON} (set MBRS_PYTHON)"}
    sampled = [texts[g * group_size:(g + 1) * group_size] for g in range(min(mbrs_groups, groups))]
    run = subprocess.run([MBRS_PYTHON, str(WORKER)], input=json.dumps({"groups": sampled}), text=True,
                         capture_output=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if run.returncode != 0:
        return {**row, "mbrs_error": f"mbrs worker failed: {run.stderr.strip().splitlines()[-1:]}"}
    theirs = json.loads(run.stdout)
    chosen = result.selected_indices[: len(sampled)] - np.arange(len(sampled)) * group_size
    same = int((chosen == np.asarray(theirs["selected"])).sum())
    # mbrs averages over all samples including the candidate itself (BLEU 100 with itself).
    first = np.asarray(theirs["expected"][0]) / 100
    ours_first = (result.utility[:group_size] * (group_size - 1) + 1) / group_size
    mbrs_per_group = theirs["seconds"] / len(sampled)
    return {**row, "mbrs_groups": len(sampled), "mbrs_seconds_timed": theirs["seconds"],
            "mbrs_seconds_extrapolated": mbrs_per_group * groups,
            "ratio_mbrs": mbrs_per_group * groups / ours, "identical_selections": same,
            "max_abs_utility_difference_group0": float(np.abs(first - ours_first).max())}


def measure_pairs(size: int = 20_000, seed: int = 0, device: str = "cpu", threads: int = 1) -> dict:
    """`gpu-neighbors pairs` on size x size spliced texts to .npy in a child process."""
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "texts.txt"
        data.write_text("\n".join(spliced_texts(size, random.Random(seed))) + "\n", encoding="utf-8")
        output = Path(folder) / "matrix.npy"
        # The child reports its own high-water mark, VmHWM (kB): ru_maxrss would carry this
        # process's peak into the child across fork + exec, and RUSAGE_CHILDREN is the largest
        # of every child this process ever ran.
        command = [sys.executable, "-c", "import sys, torch; torch.set_num_threads(int(sys.argv[1])); "
                   "from gpu_neighbors.cli import main; code = main(sys.argv[2:]); "
                   "print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:'))); "
                   "sys.exit(code)", str(threads),
                   "pairs", "--candidates", str(data), "--output", str(output), "--device", device]
        start = time.perf_counter()
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        peak = int(done.stdout.split()[-1]) * 1024
        matrix = np.load(output, mmap_mode="r")
        return {"texts": size, "pairs": size * size, "seconds": seconds, "threads": threads,
                "peak_rss_bytes": peak,
                "output_bytes": output.stat().st_size, "shape": list(matrix.shape),
                "diagonal_mean": float(np.mean(np.diagonal(matrix)))}


QUICK = {"sizes": (2_000,), "groups": 20, "mbrs_groups": 5, "pairs_size": 2_000, "repeats": 1}


def measure(sizes=SIZES, groups: int = 1_000, mbrs_groups: int = 100, pairs_size: int = 20_000,
            repeats: int = 3, device: str = "auto") -> dict:
    """Every all-pairs benchmark, for run_all.py."""
    return {
        "self_bleu": measure_self_bleu(sizes, repeats=repeats, device=device),
        "mbr": measure_mbr(groups=groups, mbrs_groups=mbrs_groups, device=device, repeats=repeats),
        "pairs": measure_pairs(pairs_size, device="cuda" if device != "cpu" and _has_cuda() else "cpu"),
    }


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def section(result: dict) -> list[str]:
    """The markdown section of run_all.py's results."""
    gib = 1 << 30
    lines = ["## All-pairs jobs", "", "Self-BLEU (BLEU-4, epsilon smoothing; spliced HUSE texts) against fast-bleu's "
             "`SelfBLEU` on the same texts and NLTK's `sentence_bleu` loop on a sample (extrapolated):", "",
             "| texts | ours: s | fast-bleu: s | ratio | NLTK (extrapolated): s | ratio | max abs diff fast-bleu / NLTK |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for row in result["self_bleu"]:
        lines.append(f"| {row['texts']:,} | {row['ours_seconds']:.2f} | {row['fast_bleu_seconds']:.2f} | "
                     f"**{row['ratio_fast_bleu']:.0f}x** | {row['nltk_seconds_extrapolated']:,.0f} | "
                     f"{row['ratio_nltk']:,.0f}x | {row['max_abs_difference_fast_bleu']:.1e} / "
                     f"{row['max_abs_difference_nltk']:.1e} |")
    mbr_row = result["mbr"]
    lines += ["", f"MBR: {mbr_row['groups']:,} groups of {mbr_row['group_size']} samples, BLEU-4 (13a, exp "
              f"smoothing): ours {mbr_row['ours_seconds']:.1f} s for all groups."]
    if "mbrs_error" in mbr_row:
        lines.append(f"mbrs not run: {mbr_row['mbrs_error']}")
    else:
        lines.append(f"mbrs (DecoderMBR, MetricBLEU defaults) on {mbr_row['mbrs_groups']} groups: "
                     f"{mbr_row['mbrs_seconds_timed']:.1f} s, extrapolated to all "
                     f"{mbr_row['mbrs_seconds_extrapolated']:,.0f} s: **{mbr_row['ratio_mbrs']:.0f}x**; identical "
                     f"selections in {mbr_row['identical_selections']} of {mbr_row['mbrs_groups']} groups "
                     f"(largest utility gap in group 0, ours rescaled to mbrs' mean over all samples including "
                     f"the candidate itself: {mbr_row['max_abs_utility_difference_group0']:.1e}).")
    pairs_row = result["pairs"]
    lines += ["", f"pairs: {pairs_row['texts']:,} x {pairs_row['texts']:,} BLEU* to .npy "
              f"({pairs_row['output_bytes'] / gib:.2f} GiB file) through the command line, "
              f"{pairs_row['threads']} torch thread: {pairs_row['seconds']:.1f} s, peak resident memory "
              f"{pairs_row['peak_rss_bytes'] / gib:.2f} GiB (the whole process; the file is not mapped).", ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--only", choices=("self-bleu", "mbr", "pairs"), default=None)
    parser.add_argument("--mbrs-groups", type=int, default=100, help="groups mbrs decodes (extrapolated to all)")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.only in (None, "mbr"):
        row = measure_mbr(mbrs_groups=args.mbrs_groups, device=args.device)
        print(json.dumps(row))
    if args.only in (None, "pairs"):
        print(json.dumps(measure_pairs()))
    if args.only not in (None, "self-bleu"):
        return
    for row in measure_self_bleu(sizes, device=args.device):
        print(f"Self-BLEU of {row['texts']:,} texts: ours {row['ours_seconds']:.2f} s, fast-bleu "
              f"{row['fast_bleu_seconds']:.2f} s ({row['ratio_fast_bleu']:.1f}x), NLTK ~"
              f"{row['nltk_seconds_extrapolated']:,.0f} s ({row['ratio_nltk']:,.0f}x); max |diff| "
              f"fast-bleu {row['max_abs_difference_fast_bleu']:.1e}, NLTK {row['max_abs_difference_nltk']:.1e}")


if __name__ == "__main__":
    main()
