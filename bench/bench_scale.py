"""Scale: BLEU* neighbours for 10^6 candidates in bounded memory, through the real CLI.

Every run is `gpu-neighbors score` in a child process on files written here (JSONL, texts
spliced from the HUSE summaries by bench/huse.py, so every text is new but the
vocabulary and n-gram statistics are those of real headlines). A run is timed twice: the wall
time of the whole command (start-up, reading and fitting the training set, scoring, writing)
and the scoring loop alone (the `in X s` of its summary line: reading candidates, scoring,
writing results). Peak resident memory is the child's own high-water mark (VmHWM in
/proc, read every 50 ms while it runs), so the parent's texts and the peer do not count.

The peer is the fastest of the exact BLEU* peers `fast-bleu` and `bleuscore` (used as in
bench_bleu.py, on one core) over training texts x a sample of the candidates, sized to run about
`peer_seconds`, and extrapolated per pair;
ratio = peer seconds per pair / our wall seconds per pair (the whole command, the conservative
choice). The command gets `--threads threads --workers 1` (default 1: the peer is a Python loop
on one core, so the ratio is per core; on this busy 2-core machine torch's default of two
spin-waiting OpenMP threads was 3x slower than one; see docs/benchmarks.md). The headline run
is then repeated without `--workers 1` (the command's default workers: on a CPU, one batch
worker per core, at most 2), `--threads` as before, which is what a user gets; that figure is
not per core. Every run passes `--kernel bleu` and `--fluency none` (the peers run no language model; its
cost is measured on its own, bench/fluency.py).

    .venv/bin/python bench/bench_scale.py [--quick] [--threads 1] [--plots bench/figures]

Scaling: the number of candidates C at |S| = `train` and the training-set size |S| at a fixed C.
Linear throughput shows as a constant time per pair across sizes.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_bleu import BleuScore, FastBleu
from huse import spliced_texts
from per_core import one_core, timed

BENCH = Path(__file__).resolve().parent
SUMMARY = re.compile(r"scored (\d+) candidates.* in ([0-9.]+) s,")
GIB = 1 << 30
POLL_SECONDS = 0.05


def write_jsonl(path: Path, texts: list[str], rng: random.Random | None = None) -> Path:
    """Candidates ({"text"}), or with `rng` a training set ({"text", "score"})."""
    with path.open("w", encoding="utf-8") as handle:
        for text in texts:
            record = {"text": text} if rng is None else {"text": text, "score": round(rng.random(), 4)}
            handle.write(json.dumps(record) + "\n")
    return path


def run_cli(train: Path, candidates: Path, output: Path, threads: int | None,
            extra: tuple[str, ...] = ("--workers", "1")) -> dict:
    """One `gpu-neighbors score` in a child process: wall and scoring seconds, peak RSS."""
    command = [sys.executable, "-m", "gpu_neighbors.cli", "score", "--train", str(train),
               "--candidates", str(candidates), "--output", str(output), "--kernel", "bleu", "--fluency", "none", *extra]  # BLEU*'s figures
    if threads:
        command += ["--threads", str(threads)]
    log = output.with_suffix(".log")
    started = time.perf_counter()
    peak = 0
    with log.open("w") as stderr:
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        while child.poll() is None:
            peak = max(peak, high_water_mark(child.pid))
            time.sleep(POLL_SECONDS)
    wall = time.perf_counter() - started
    text = log.read_text(encoding="utf-8", errors="replace")
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({child.returncode}):\n{text[-2000:]}")
    found = SUMMARY.search(text)
    if not found:
        raise RuntimeError(f"no summary line in the output of {' '.join(command)}:\n{text[-2000:]}")
    output.unlink()  # the results of the large runs take disk space and are not needed
    return {"rows": int(found.group(1)), "wall_seconds": wall,
            "scoring_seconds": float(found.group(2)), "peak_rss_bytes": peak}


def high_water_mark(pid: int) -> int:
    """Peak resident bytes of a running process (VmHWM), 0 once it is gone.

    Not ru_maxrss: a child started by (v)fork + exec carries the parent's peak into its own,
    and this parent holds every text of the benchmark."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass
    return 0


def peer_seconds_per_pair(train: list[str], candidates: list[str], target_seconds: float,
                          rng: random.Random) -> tuple[float, int, str]:
    """The fastest exact BLEU* peers of bench_bleu (fast-bleu, bleuscore), each on one core over
    training texts x a sample of candidates, used as bench_bleu uses them: (seconds per pair of
    the fastest, pairs timed, its name)."""
    sample = [candidates[rng.randrange(len(candidates))] for _ in range(500)]
    sample_tokens = [text.split() for text in sample]
    best: tuple[float, int, str] | None = None
    for peer in (FastBleu(), BleuScore()):
        seconds = 0.0
        pairs = 0
        with one_core():
            while seconds < target_seconds / 2:
                reference = train[rng.randrange(len(train))]
                prepared = peer.prepare(reference.split(), reference)
                seconds += timed(lambda: peer.score(prepared, sample_tokens, sample))[0]
                pairs += len(sample)
        if best is None or seconds / pairs < best[0]:
            best = (seconds / pairs, pairs, peer.name)
    assert best is not None
    return best


def measure(
    candidates: int = 1_000_000,
    train: int = 2_000,
    candidate_sweep: tuple[int, ...] = (62_500, 125_000, 250_000, 500_000),
    train_sweep: tuple[int, ...] = (2_000, 10_000, 30_000, 100_000),
    sweep_candidates: int = 20_000,
    huge_train: int | None = 1_000_000,
    huge_train_candidates: int = 2_000,
    threads: int | None = 1,
    peer_seconds: float = 20.0,
    seed: int = 0,
    workdir: str | None = None,
) -> dict:
    """The headline run (C = `candidates` against |S| = `train`), the peer, and both sweeps;
    `huge_train` adds one run against a training set that large (None: skipped)."""
    rng = random.Random(seed)
    largest_train = max([train, *train_sweep, huge_train or 0])
    train_texts = spliced_texts(largest_train, rng)
    candidate_texts = spliced_texts(max(candidates, *candidate_sweep, sweep_candidates), rng)
    with tempfile.TemporaryDirectory(dir=workdir, prefix="bench_scale_") as folder:
        folder = Path(folder)
        train_files: dict[int, Path] = {}
        candidate_files: dict[int, Path] = {}

        def run(size_c: int, size_s: int, extra: tuple[str, ...] = ("--workers", "1")) -> dict:
            if size_s not in train_files:
                train_files[size_s] = write_jsonl(folder / f"train_{size_s}.jsonl",
                                                  train_texts[:size_s], random.Random(size_s))
            if size_c not in candidate_files:
                candidate_files[size_c] = write_jsonl(folder / f"candidates_{size_c}.jsonl",
                                                      candidate_texts[:size_c])
            result = run_cli(train_files[size_s], candidate_files[size_c],
                             folder / f"out_{size_c}_{size_s}.jsonl", threads, extra)
            pairs = size_c * size_s
            result.update(candidates=size_c, train=size_s, pairs=pairs,
                          wall_ns_per_pair=result["wall_seconds"] / pairs * 1e9,
                          scoring_ns_per_pair=result["scoring_seconds"] / pairs * 1e9)
            print(f"  C={size_c:>9,} |S|={size_s:>9,}: {result['wall_seconds']:8.1f} s wall, "
                  f"{result['scoring_seconds']:8.1f} s scoring, peak RSS "
                  f"{result['peak_rss_bytes'] / GIB:.2f} GiB", file=sys.stderr, flush=True)
            return result

        headline = run(candidates, train)
        peer_per_pair, peer_pairs, peer_name = peer_seconds_per_pair(
            train_texts[:train], candidate_texts[:candidates], peer_seconds, rng
        )
        by_candidates = [run(size, train) for size in candidate_sweep] + [headline]
        by_train = [run(sweep_candidates, size) for size in train_sweep]
        huge = run(huge_train_candidates, huge_train) if huge_train else None
        defaults = run(candidates, train, extra=())  # the command's own defaults: both cores
    ours_per_pair = headline["wall_seconds"] / headline["pairs"]
    return {
        "benchmark": f"BLEU* neighbours, {candidates:,} candidates x {train:,} training texts (CLI)",
        "pairs": headline["pairs"],
        "ours_seconds": headline["wall_seconds"],
        "scoring_seconds": headline["scoring_seconds"],
        "peak_rss_bytes": headline["peak_rss_bytes"],
        "peer": f"{peer_name} (fastest peer, one core)",
        "peer_seconds": peer_per_pair * peer_pairs,
        "peer_pairs": peer_pairs,
        "peer_extrapolated_seconds": peer_per_pair * headline["pairs"],
        "ratio": peer_per_pair / ours_per_pair,
        "ratio_scoring_only": peer_per_pair / (headline["scoring_seconds"] / headline["pairs"]),
        "threads": threads,
        "by_candidates": by_candidates,
        "by_train": by_train,
        "huge_train": huge,
        "with_defaults": defaults,
    }


def plot(result: dict, directory: Path) -> list[Path]:
    """PNGs: time and time per pair against C, the same against |S|, and peak memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    huge = result["huge_train"]
    sweeps = [
        ("candidates", result["by_candidates"], None,
         f"candidates C (|S| = {result['by_candidates'][0]['train']:,})"),
        ("train", result["by_train"], huge,
         f"training texts |S| (C = {result['by_train'][0]['candidates']:,})"),
    ]
    paths = []
    for size_key, runs, extra, label in sweeps:
        runs = sorted(runs, key=lambda run: run[size_key])
        sizes = [run[size_key] for run in runs]
        figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        for field, name in (("wall_seconds", "whole command"), ("scoring_seconds", "scoring loop")):
            seconds = [run[field] for run in runs]
            left.plot(sizes, seconds, "o-", label=name)
            slope = sum(s * t for s, t in zip(sizes, seconds)) / sum(s * s for s in sizes)
            left.plot([0, sizes[-1]], [0, slope * sizes[-1]], ":", color="grey")
        left.set(xlabel=label, ylabel="seconds", title="time (dotted: least-squares line through 0)")
        left.legend()
        for field, name in (("wall_ns_per_pair", "whole command"), ("scoring_ns_per_pair", "scoring loop")):
            line, = right.plot(sizes, [run[field] for run in runs], "o-", label=name)
            if extra:
                right.plot([extra[size_key]], [extra[field]], "s", color=line.get_color(),
                           label=f"{name}, C = {extra['candidates']:,}")
        right.set(xlabel=label, ylabel="ns per pair", xscale="log", ylim=(0, None),
                  title="time per pair (flat or falling = linear)")
        right.legend(fontsize=8)
        figure.tight_layout()
        path = directory / f"scale_{size_key}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        paths.append(path)
    top = 1.15 * max(2.0, *(run["peak_rss_bytes"] / GIB for run in all_runs(result)))
    figure, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for axis, (size_key, runs, extra, label) in zip(axes, sweeps):
        runs = sorted(runs, key=lambda run: run[size_key])
        axis.plot([run[size_key] for run in runs], [run["peak_rss_bytes"] / GIB for run in runs], "o-")
        if extra:
            axis.plot([extra[size_key]], [extra["peak_rss_bytes"] / GIB], "s",
                      label=f"C = {extra['candidates']:,}")
        axis.axhline(2, color="red", linestyle="--", label="2 GiB")
        axis.set(xscale="log", xlabel=label, ylim=(0, top), title="peak resident memory of the command")
        axis.legend()
    axes[0].set_ylabel("GiB")
    figure.tight_layout()
    path = directory / "scale_memory.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return [*paths, path]


def all_runs(result: dict) -> list[dict]:
    runs = result["by_candidates"] + result["by_train"] + ([result["huge_train"]] if result["huge_train"] else [])
    unique = {(run["candidates"], run["train"]): run for run in runs}
    return sorted(unique.values(), key=lambda run: run["pairs"])


def table(result: dict) -> str:
    """Markdown table of every run."""
    lines = ["| C | abs(S) | pairs | whole command (s) | scoring loop (s) | ns/pair (command) | ns/pair (scoring) | peak RSS (GiB) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for run in all_runs(result):
        lines.append(
            f"| {run['candidates']:,} | {run['train']:,} | {run['pairs']:,} | {run['wall_seconds']:.1f} | "
            f"{run['scoring_seconds']:.1f} | {run['wall_ns_per_pair']:.1f} | {run['scoring_ns_per_pair']:.1f} | "
            f"{run['peak_rss_bytes'] / GIB:.2f} |"
        )
    return "\n".join(lines).replace("abs(S)", "\\|S\\|")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, to try the script")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the command (0: torch's default)")
    parser.add_argument("--plots", type=Path, default=BENCH / "figures", help="where the PNGs go")
    args = parser.parse_args()
    sizes = QUICK if args.quick else {}
    result = measure(threads=args.threads or None, **sizes)
    print(f"{result['benchmark']}, {result['threads'] or 'default'} torch thread(s)")
    print(f"  whole command {result['ours_seconds']:.1f} s, scoring loop {result['scoring_seconds']:.1f} s, "
          f"peak RSS {result['peak_rss_bytes'] / GIB:.2f} GiB")
    print(f"  {result['peer']}: {result['peer_seconds']:.1f} s for {result['peer_pairs']:,} pairs, "
          f"extrapolated {result['peer_extrapolated_seconds'] / 3600:.0f} h for all pairs")
    print(f"  ratio (peer / ours per pair): {result['ratio']:,.0f}x (scoring loop only: "
          f"{result['ratio_scoring_only']:,.0f}x)")
    print(table(result))
    for path in plot(result, args.plots):
        print(f"  plot: {path}")


QUICK = {
    "candidates": 20_000, "train": 500, "candidate_sweep": (2_500, 5_000, 10_000),
    "train_sweep": (500, 1_000, 2_000), "sweep_candidates": 2_000, "huge_train": 20_000,
    "huge_train_candidates": 500, "peer_seconds": 3.0,
}


if __name__ == "__main__":
    main()
