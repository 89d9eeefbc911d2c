"""Every benchmark in one command: `python bench/run_all.py` writes bench/results.md and PNGs.

Each kernel against its peer library (bench_bleu, bench_rouge, bench_meteor, bench_bertscore,
bench_tfidf:
their `measure()` with its defaults), then the scale benchmark (bench_scale: 10^6 candidates
through the CLI, scaling in C and |S|, peak memory), the host path (bench_host: 10^6
candidates against 10 training texts, against the simplest read-and-write loop), the default
predict against scikit-learn + sparse_dot_topn (bench_predict), then the
all-pairs jobs (bench_allpairs:
Self-BLEU, MBR against mbrs, pairs to .npy), then the host's compiled loops (issue 52:
bench_compilers, bench_encoding, bench_long_text, bench_cmp, as child processes). The machine (CPU, cores, memory, GPU,
torch, load average before and after, as the machine may be shared) is recorded beside the
figures. On a CUDA machine most benchmarks measure the GPU path (their device is "auto", or the
command line's default); bench_meteor, bench_predict, bench_encoding and bench_long_text fix the
CPU, and bench_compilers times host loops. A benchmark that cannot run is reported as such, with
the reason, and the others still run.
`--quick` shrinks every size to try the suite in a few minutes (not for the record).
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import inspect
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

KERNEL_BENCHMARKS = (
    ("bench_bleu", "BLEU*"),
    ("bench_rouge", "ROUGE-L"),
    ("bench_meteor", "METEOR"),
    ("bench_bertscore", "BERTScore"),
    ("bench_tfidf", "TF-IDF cosine"),
)
STANDARD_KEYS = {"benchmark", "pairs", "ours_seconds", "peer", "peer_seconds", "peer_pairs", "ratio"}
QUICK_SIZES = {"train_size": 300, "candidate_size": 300, "train": 300, "candidates": 300,
               "peer_pairs": 2_000, "peer_seconds": 3.0, "peer_target_seconds": 3.0, "repeats": 1}


def machine() -> dict:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": None if memory is None else round(memory / (1 << 30), 1),
        "gpu": ", ".join(gpus) if gpus else "none",
        "cuda": torch.version.cuda if gpus else "-",
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def load_average() -> str:
    try:
        return " / ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


def run_kernel_benchmark(module_name: str, quick: bool) -> dict:
    """The module's `measure()` result, or {"error": why it did not run}."""
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # a missing or broken script is reported, not fatal
        return {"error": f"cannot import {module_name}: {type(error).__name__}: {error}"}
    if not hasattr(module, "measure"):
        return {"error": f"{module_name} has no measure()"}
    parameters = inspect.signature(module.measure).parameters
    sizes = {key: value for key, value in QUICK_SIZES.items() if key in parameters} if quick else {}
    started = time.perf_counter()
    try:
        result = module.measure(**sizes)
    except Exception as error:
        traceback.print_exc()
        return {"error": f"{module_name}.measure() failed: {type(error).__name__}: {error}"}
    result["bench_wall_seconds"] = time.perf_counter() - started
    # on the log at once, so a run stopped before results.md is written still has the figures
    print(f"result: {module_name} {json.dumps(result, default=str)}", file=sys.stderr, flush=True)
    return result


def kernel_section(results: list[tuple[str, str, dict]], figures: Path, output: Path) -> list[str]:
    lines = [
        "## Kernels against their peers",
        "",
        "All pairs of candidates x training texts (HUSE summaries, resampled or spliced to size). "
        "Each peer is used as its authors intend (reused objects, cached references), timed on "
        "a sample of the same pairs and extrapolated per pair (TF-IDF's on all of them), with "
        "the process pinned to one core (BLEU*, ROUGE-L and TF-IDF; METEOR's and BERTScore's "
        "peers unpinned); ours runs with one torch thread, so every ratio is per core. The peer named is "
        "the fastest of those measured (all of them are listed below the table, with how their "
        "numbers compare to ours); ratio = peer time per pair / our time per pair, both measured "
        "in this run. Each script's own notes on what is timed are in its docstring.",
        "",
        "| kernel | peer | pairs (ours) | ours: s | ours: ns/pair | peer: us/pair | pairs timed (peer) | ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for module_name, kernel, result in results:
        if "error" in result:
            lines.append(f"| {kernel} | - | - | - | - | - | - | not run |")
            notes.append(f"- `{module_name}`: not run. {result['error']}")
            continue
        ours_per_pair = result["ours_seconds"] / result["pairs"]
        peer_per_pair = result["ratio"] * ours_per_pair
        lines.append(
            f"| {kernel} | `{result['peer']}` | {result['pairs']:,} | {result['ours_seconds']:.2f} | "
            f"{ours_per_pair * 1e9:,.0f} | {peer_per_pair * 1e6:,.1f} | {result['peer_pairs']:,} | "
            f"**{result['ratio']:,.0f}x** |"
        )
        extra = {key: value for key, value in result.items() if key not in STANDARD_KEYS | {"peers"}}
        if "peers" in result:
            notes += [f"- `{module_name}`, every peer:", "", peers_table(result["peers"]), ""]
        notes.append(f"- `{module_name}`: " + ", ".join(f"{key} = {_shown(value)}" for key, value in extra.items()))
    lines += ["", *notes, ""]
    measured = [(kernel, result) for _, kernel, result in results if "error" not in result]
    if measured:
        path = plot_ratios(measured, figures)
        lines += [f"![ratio per kernel]({_link(path, output)})", ""]
    return lines


PEER_COLUMNS = (
    ("peer", "peer (one core)", "{}"),
    ("us_per_pair", "us / pair", "{:,.1f}"),
    ("build_ms_per_reference", "build, ms / reference", "{:,.2f}"),
    ("pairs_timed", "pairs timed", "{:,}"),
    ("compared_with", "checked against ours", "{}"),
    ("max_abs_difference", "max abs difference", "{:.1e}"),
    ("pairs_differing", "pairs differing (> 1e-9)", "{:,}"),
    ("ratio", "ratio (peer / ours)", "{:,.0f}x"),
)


def peers_table(peers: list[dict]) -> str:
    """Every peer of one benchmark, fastest first, with the columns its results carry."""
    columns = [column for column in PEER_COLUMNS if any(column[0] in peer for peer in peers)]
    lines = ["  | " + " | ".join(title for _, title, _ in columns) + " |",
             "  |" + "|".join("---" if key in ("peer", "compared_with") else "---:" for key, _, _ in columns) + "|"]
    for peer in sorted(peers, key=lambda peer: peer["us_per_pair"]):
        cells = [shape.format(peer[key]) if key in peer else "-" for key, _, shape in columns]
        lines.append("  | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_ratios(measured: list[tuple[str, dict]], figures: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures.mkdir(parents=True, exist_ok=True)
    figure, axis = plt.subplots(figsize=(6, 3.5))
    names = [kernel for kernel, _ in measured]
    ratios = [result["ratio"] for _, result in measured]
    axis.bar(names, ratios, color="tab:blue")
    for index, ratio in enumerate(ratios):
        axis.annotate(f"{ratio:,.0f}x", (index, ratio), ha="center", va="bottom", fontsize=9)
    axis.set(yscale="log", ylabel="fastest peer time / our time, per pair",
             title="speed-up over the fastest peer, per core (log scale)")
    figure.tight_layout()
    path = figures / "kernel_ratios.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def scale_section(result: dict | None, error: str | None, figures: Path, output: Path) -> list[str]:
    lines = ["## Scale: streaming through the CLI", ""]
    if result is None:
        return lines + [f"Not run. {error}", ""]
    import bench_scale

    gib = 1 << 30
    headline = result["by_candidates"][-1]
    lines += [
        f"{result['benchmark']}: `gpu-neighbors score` in a child process, "
        f"{result['threads'] or 'default'} torch thread(s) and one batch worker (the peer loop runs "
        "on one core), unless the row says otherwise.",
        "",
        "| figure | value |",
        "|---|---:|",
        f"| whole command (start-up, fit, read, score, write) | {result['ours_seconds']:,.1f} s |",
        f"| scoring loop (read, score, write) | {result['scoring_seconds']:,.1f} s |",
        f"| pairs per second (whole command) | {result['pairs'] / result['ours_seconds']:,.0f} |",
        f"| peak resident memory of the command | {result['peak_rss_bytes'] / gib:.2f} GiB |",
        f"| `{result['peer']}` per pair ({result['peer_pairs']:,} pairs timed) | "
        f"{result['peer_seconds'] / result['peer_pairs'] * 1e6:,.0f} us |",
        f"| peer extrapolated to all pairs | {result['peer_extrapolated_seconds'] / 3600:,.0f} h |",
        f"| **ratio, per pair (whole command)** | **{result['ratio']:,.0f}x** |",
        f"| ratio, per pair (scoring loop only) | {result['ratio_scoring_only']:,.0f}x |",
        f"| whole command with its defaults (a batch worker per core: not per core) | "
        f"{result['with_defaults']['wall_seconds']:,.1f} s, peak RSS "
        f"{result['with_defaults']['peak_rss_bytes'] / gib:.2f} GiB |",
        "",
        "Every run (C candidates against |S| training texts; the time per pair stays flat as "
        "either grows, so throughput is linear):",
        "",
        bench_scale.table(result),
        "",
    ]
    for path in bench_scale.plot(result, figures):
        lines += [f"![{path.stem}]({_link(path, output)})", ""]
    assert headline["pairs"] == result["pairs"]
    return lines


def module_section(module_name: str, title: str, quick: bool) -> list[str]:
    """`section(measure())` of a benchmark module (its QUICK sizes with --quick), or why it did
    not run."""
    print(f"== {module_name}", file=sys.stderr, flush=True)
    try:
        module = importlib.import_module(module_name)
        return module.section(module.measure(**(module.QUICK if quick else {})))
    except Exception as error:
        traceback.print_exc()
        return [f"## {title}", "", f"Not run. {module_name} failed: {type(error).__name__}: {error}", ""]


# The host's compiled loops (issue 52): each script's own table, run as a child process (its
# sizes shrunk with --quick), in the order the issue names its targets.
HOST_COMMANDS = (
    ("bench_compilers.py", [], ["--candidates", "2000", "--train", "300", "--repeats", "1"]),
    ("bench_encoding.py", [], ["--candidates", "5000", "--train", "300", "--repeats", "1"]),
    ("bench_long_text.py", ["--kernel", "tfidf"], ["--kernel", "tfidf", "--train", "300", "--tokens", "4000",
                                                   "--candidate-tokens", "5000"]),
    ("bench_cmp.py", [], ["--candidates", "2000", "--train", "300"]),
)


def host_section(quick: bool) -> list[str]:
    """The issue-52 scripts' printed results, one block each (or why one failed)."""
    import subprocess

    lines = ["## The host's compiled loops (issue 52)", "",
             "Each script's own output (its docstring says what it times), one after another; load average "
             "is printed by each.", ""]
    for script, arguments, quick_arguments in HOST_COMMANDS:
        command = [sys.executable, str(BENCH / script), *(quick_arguments if quick else arguments)]
        print(f"== {script}", file=sys.stderr, flush=True)
        done = subprocess.run(command, capture_output=True, text=True, cwd=BENCH)
        shown = " ".join(["python", f"bench/{script}", *command[2:]])
        lines += [f"`{shown}`" + ("" if done.returncode == 0 else f" (exit status {done.returncode})"), "",
                  "```", *(done.stdout.strip() or done.stderr.strip()[-2000:]).splitlines(), "```", ""]
    return lines


def _link(path: Path, output: Path) -> str:
    return os.path.relpath(path, output.resolve().parent)


def _shown(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value)[:200]
    return str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, to try the suite (not for the record)")
    parser.add_argument("--output", type=Path, default=BENCH / "results.md")
    parser.add_argument("--figures", type=Path, default=BENCH / "figures")
    parser.add_argument("--skip-scale", action="store_true", help="the kernel benchmarks only")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the scale runs (0: torch's default)")
    args = parser.parse_args()

    started, load_before = datetime.datetime.now(), load_average()
    info = machine()
    kernels = []
    for module_name, kernel in KERNEL_BENCHMARKS:
        print(f"== {module_name}", file=sys.stderr, flush=True)
        kernels.append((module_name, kernel, run_kernel_benchmark(module_name, args.quick)))
    scale, scale_error = None, "skipped (--skip-scale)"
    if not args.skip_scale:
        print("== bench_scale", file=sys.stderr, flush=True)
        try:
            import bench_scale

            scale = bench_scale.measure(threads=args.threads or None, **(bench_scale.QUICK if args.quick else {}))
            print(f"result: bench_scale {json.dumps(scale, default=str)}", file=sys.stderr, flush=True)
        except Exception as error:
            traceback.print_exc()
            scale_error = f"bench_scale.measure() failed: {type(error).__name__}: {error}"
    finished = datetime.datetime.now()

    lines = [
        "# Benchmark results",
        "",
        f"Written by `python bench/run_all.py{' --quick' if args.quick else ''}` "
        f"({started:%Y-%m-%d %H:%M} to {finished:%H:%M}, {(finished - started).total_seconds() / 60:.0f} min)."
        + (" **Quick sizes: not for the record.**" if args.quick else ""),
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        *(f"| {key} | {value} |" for key, value in info.items()),
        f"| load average (1/5/15 min) before | {load_before} |",
        f"| load average (1/5/15 min) after | {load_average()} |",
        "",
        "A load average above the core count means other work shared the machine during the "
        "run; both sides of every ratio ran in the same run, so they shared it alike.",
        "",
    ]
    lines += kernel_section(kernels, args.figures, args.output)
    lines += scale_section(scale, scale_error, args.figures, args.output)
    lines += module_section("bench_host", "Host path", args.quick)
    lines += module_section("bench_predict", "Default predict", args.quick)
    lines += module_section("bench_allpairs", "All-pairs jobs", args.quick)
    lines += host_section(args.quick)
    if info["gpu"] == "none":
        lines += ["## GPU", "",
                  "No CUDA device here: every figure above is the CPU path. An estimate of GPU "
                  "throughput from the operation counts is in "
                  f"[docs/benchmarks.md]({_link(BENCH.parent / 'docs' / 'benchmarks.md', args.output)}).", ""]
    args.output.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
