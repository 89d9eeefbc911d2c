"""Throughput on a CUDA device against the device's own ceilings (issue 31's targets), in one
short run whose every figure is written as it is measured.

    python bench/gpu_throughput.py --budget 240 --output $OUT/throughput.jsonl

Parts, in order of what the targets ask, each skipped with the reason when the budget left
cannot hold it (its projected time from the smaller size measured first):

1. `ceilings`: the device's copy bandwidth (a 4 GiB device-to-device copy: bytes read plus
   written over CUDA-event time) and its float32/bfloat16 matrix rate (8192^3), measured here.
2. `csr_add`: one TF-IDF tile's sparse product added into the dense tile by torch and by
   `core.sparse.add_entries` (74% of TF-IDF's GPU time on the H200 went to torch's), same bits.
3. `predict`: BLEU* (add1) and TF-IDF neighbours, `NeighborsScorer(kernel, device="cuda")` fitted
   on |S| spliced HUSE texts without tuning, `predict` of C new ones: pairs a second, the share
   of the time the GPU was busy (NVML's utilisation, sampled every 50 ms) and, for the smaller
   C, the profiler's top CUDA kernels. C grows 10x while the projected time fits.
4. `score`: `gpu-neighbors score --kernel tfidf` (TF-IDF named, so `auto`'s kernel choice is not
   timed; the default estimator) in a child process on 10^6 candidates x 10^5 training texts
   (JSONL written here), with the GPU's busy share; stopped before the budget ends, where its
   output is not written yet (the safe writer) and the rate is its last progress line's.
5. `fluency`: texts of 20 tokens a second through the fluency statistic (`FittedFluency.of_texts`,
   bfloat16 on CUDA), on a model of SmolLM2-135M's shape (its config and tokenizer: `.gpu/smollm2`,
   packed by `gpu_check.sh prepare`, or `--fluency-model`) with seeded random weights: the 94 MB
   model does not travel, and the cost of a forward pass does not depend on the weights. N grows
   10x while the projected time fits (goal: 50,000 texts a second).
6. `bertscore`: bench_bertscore's all-pairs BERTScore (2,000 x 2,000 texts, the peer on a 100 x
   100 sub-grid, best of 2) against `bert_score.BERTScorer.score` on the device (the peer
   re-encodes every text of every pair, so the ratio includes that).
7. `aligned`: `sentence_bleu` on token ids on the device against TensorBLEU
   (`rxlm.metrics.tensorbleu`, from bench/.tensorbleu) at its published shapes, epsilon against
   its "floor" smoothing; best of 5 after a warm-up, synchronised.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from huse import spliced_texts  # noqa: E402
from per_core import timed  # noqa: E402

SAMPLE_SECONDS = 0.05
DEVICE = "cuda"


class Record:
    """One JSON line a result, appended and flushed at once, so a run cut off keeps what it
    measured."""

    def __init__(self, path: Path, deadline: float) -> None:
        self.path, self.deadline = path, deadline
        path.write_text("", encoding="utf-8")

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def write(self, part: str, **values: Any) -> None:
        line = json.dumps({"part": part, **values}, default=str)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
        print(line, file=sys.stderr, flush=True)


class Busy:
    """The GPU's utilisation (NVML: the share of each sample period a kernel ran), sampled in a
    thread while the block runs; `share` is their mean, None without NVML."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self.share: float | None = None

    @contextmanager
    def sampling(self) -> Iterator[Busy]:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        except Exception:  # no NVML: the figure is left out, not guessed
            yield self
            return
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(SAMPLE_SECONDS):
                self.samples.append(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()
            self.share = float(np.mean(self.samples)) / 100 if self.samples else None


def synchronise() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def synchronised(call: Callable[[], Any]) -> tuple[float, Any]:
    """`per_core.timed` with the device's queued work finished before and inside the timing."""
    synchronise()
    return timed(lambda: (call(), synchronise())[0])


def best_seconds(call: Callable[[], Any], repeats: int = 5) -> float:
    """The best of `repeats` synchronised timings after one warm-up."""
    call()
    return min(synchronised(call)[0] for _ in range(repeats))


def ceilings(record: Record) -> None:
    size = 4 << 30
    source = torch.empty(size, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    seconds = best_seconds(lambda: target.copy_(source))
    record.write("ceilings", what="device-to-device copy", bytes=size, seconds=seconds,
                 bandwidth_bytes_per_second=2 * size / seconds)
    del source, target
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(8192, 8192, device="cuda", dtype=dtype)
        b = torch.randn(8192, 8192, device="cuda", dtype=dtype)
        seconds = best_seconds(lambda: a @ b)
        record.write("ceilings", what=f"matrix product 8192^3 {dtype}", seconds=seconds,
                     flops_per_second=2 * 8192**3 / seconds, tf32=torch.backends.cuda.matmul.allow_tf32)
    torch.cuda.empty_cache()


def kernel_table(call: Callable[[], Any]) -> str:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        call()
        torch.cuda.synchronize()
    averages = profiler.key_averages()
    for key in ("self_device_time_total", "self_cuda_time_total", "device_time_total"):
        try:
            return str(averages.table(sort_by=key, row_limit=15))
        except Exception:
            continue
    return str(averages.table(row_limit=15))


def predict_rates(record: Record, kernel: Any, name: str, train_size: int, sizes: tuple[int, ...],
                  reserve: float) -> None:
    """`reserve`: seconds kept for the parts after this one."""
    from gpu_neighbors import NeighborsScorer

    if record.left() < reserve + 15:
        record.write("predict", kernel=name, skipped=f"{record.left():.0f} s of the budget left")
        return
    rng = random.Random(0)
    texts = spliced_texts(train_size + max(sizes), rng)
    train, candidates = texts[:train_size], texts[train_size:]
    scores = np.array([rng.random() for _ in train])
    scorer = NeighborsScorer(kernel=kernel, device=DEVICE)
    fit_seconds, _ = synchronised(lambda: scorer.fit(train, scores, tune=False))
    record.write("predict", kernel=name, train=train_size, fit_seconds=fit_seconds)
    last: tuple[int, float] | None = None
    for size in sizes:
        if last is not None and last[1] * size / last[0] * 1.2 > record.left() - reserve:
            record.write("predict", kernel=name, train=train_size, candidates=size,
                         skipped=f"projected {last[1] * size / last[0]:.0f} s, {record.left():.0f} s left")
            break
        batch = candidates[:size]
        busy = Busy()
        with busy.sampling():
            seconds, _ = synchronised(lambda: scorer.predict(batch))
        pairs = size * train_size
        record.write("predict", kernel=name, train=train_size, candidates=size, seconds=seconds,
                     pairs_per_second=pairs / seconds, gpu_busy_share=busy.share,
                     peak_gpu_bytes=torch.cuda.max_memory_allocated() if DEVICE == "cuda" else None)
        if last is None and DEVICE == "cuda":
            record.write("predict", kernel=name, train=train_size, candidates=size,
                                      profile=kernel_table(lambda: scorer.predict(batch)))
        last = (size, seconds)
    del scorer
    torch.cuda.empty_cache()


def csr_addition(record: Record, train_size: int, rows: int = 4096, columns: int = 16384) -> None:
    """One TF-IDF tile's tail product (candidates x a training block, CSR) added into a dense tile
    by torch (`dense.add_(csr)`: one thread a row on CUDA) and by `core.sparse.add_entries`, each
    the best of 5 synchronised, and their results compared."""
    from gpu_neighbors import NeighborsScorer
    from gpu_neighbors.core.sparse import add_entries

    rng = random.Random(2)
    texts = spliced_texts(train_size + rows, rng)
    scorer = NeighborsScorer(kernel="tfidf", device=DEVICE).fit(texts[:train_size], np.zeros(train_size), tune=False)
    kernel = scorer.kernel_
    block = min(columns, train_size)
    encoded = kernel.encode(texts[train_size:])
    product = torch.sparse.mm(encoded.tail, kernel._block_columns(0, block))
    base = torch.zeros((rows, block), dtype=torch.float64, device=DEVICE)
    by_torch, by_entries = base.clone().add_(product), add_entries(base.clone(), product)
    record.write("csr_add", rows=rows, columns=block, entries=int(product.values().numel()),
                 torch_seconds=best_seconds(lambda: base.clone().add_(product)),
                 entries_seconds=best_seconds(lambda: add_entries(base.clone(), product)),
                 clone_seconds=best_seconds(base.clone), identical=bool(torch.equal(by_torch, by_entries)))


def score_command(record: Record, candidates: int, train_size: int, reserve: float) -> None:
    """`gpu-neighbors score` with TF-IDF on written files, stopped `reserve` seconds before the
    budget ends."""
    rng = random.Random(1)
    texts = spliced_texts(train_size + candidates, rng)
    with tempfile.TemporaryDirectory(prefix="gpu_throughput_") as folder:
        train_file, candidate_file, output = (Path(folder) / name for name in ("train.jsonl", "c.jsonl", "out.jsonl"))
        with train_file.open("w", encoding="utf-8") as handle:
            for text in texts[:train_size]:
                handle.write(json.dumps({"text": text, "score": round(rng.random(), 4)}) + "\n")
        with candidate_file.open("w", encoding="utf-8") as handle:
            for text in texts[train_size:]:
                handle.write(json.dumps({"text": text}) + "\n")
        del texts
        command = [sys.executable, "-m", "gpu_neighbors.cli", "score", "--train", str(train_file),
                   "--candidates", str(candidate_file), "--output", str(output), "--kernel", "tfidf",
                   "--device", DEVICE]
        limit = record.left() - reserve
        busy = Busy()
        started = time.perf_counter()
        with busy.sampling(), (Path(folder) / "log").open("w") as log:
            child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
            try:
                child.wait(timeout=max(limit, 1))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        wall = time.perf_counter() - started
        rows = sum(1 for _ in output.open(encoding="utf-8")) if output.exists() else 0
        tail = (Path(folder) / "log").read_text(encoding="utf-8", errors="replace")[-1500:]
        progress = re.findall(r"([0-9.]+) texts/s", tail)
        record.write("score", candidates=candidates, train=train_size, exit=child.returncode, wall_seconds=wall,
                     rows_written=rows, pairs_per_second=rows * train_size / wall, gpu_busy_share=busy.share,
                     progress_texts_per_second=float(progress[-1]) if progress else None,
                     stopped_at_budget=child.returncode not in (0, None) and wall >= limit, log_tail=tail)


def bertscore(record: Record) -> None:
    import bench_bertscore

    result = bench_bertscore.measure(train_size=2_000, candidate_size=2_000, peer_grid=100, repeats=2,
                                     device=DEVICE, threads=None)
    record.write("bertscore", **result)


FLUENCY_TOKENS = 20  # the length the fluency target is stated for


def fluency(record: Record, source: Path, sizes: tuple[int, ...] = (1_000, 10_000, 100_000)) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from gpu_neighbors.fluency import FittedFluency, model_files

    folder = Path(tempfile.mkdtemp(prefix="gpu-neighbors-fluency-")) / "random-smollm2"
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source)).save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.save_pretrained(folder)
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    fitted = FittedFluency(model_files(folder), dtype, torch.device(DEVICE))
    rng = random.Random(0)
    halves = spliced_texts(2 * (max(sizes) + 256), rng)  # two headlines make a text past 20 tokens
    texts = [tokenizer.decode(tokenizer(f"{first} {second}", add_special_tokens=False)["input_ids"][:FLUENCY_TOKENS])
             for first, second in zip(halves[::2], halves[1::2])]
    fitted.of_texts(texts[:256])  # load and warm up (the memo keeps these; the rest are new)
    rate = None
    for size in sizes:
        projected = None if rate is None else size / rate
        if projected is not None and projected > record.left() - 10:
            record.write("fluency", texts=size, skipped=f"projected {projected:.0f} s, {record.left():.0f} s left")
            break
        chosen = texts[256 : 256 + size]
        seconds, statistics = synchronised(lambda: fitted.of_texts(chosen))
        rate = size / seconds
        record.write("fluency", texts=size, dtype=str(dtype).removeprefix("torch."), seconds=seconds,
                     texts_per_second=rate, tokens_mean=float(statistics[:, 2].mean()),
                     model="SmolLM2-135M's shape, random weights")


def aligned(record: Record) -> None:
    from bench_sentence_bleu import SHAPES, VOCABULARY, tensorbleu, token_ids

    import gpu_neighbors

    tensor_sentence_bleu, missing = tensorbleu()
    for batch, length in SHAPES:
        if record.left() < 5:
            record.write("aligned", batch=batch, length=length, skipped=f"{record.left():.0f} s of the budget left")
            continue
        candidates, references = (ids.to(DEVICE) for ids in token_ids(batch, length))
        ours = gpu_neighbors.sentence_bleu(candidates, references, smoothing="epsilon", vocab_size=VOCABULARY + 1)
        row: dict[str, Any] = {"batch": batch, "length": length, "ours_seconds": best_seconds(
            lambda: gpu_neighbors.sentence_bleu(candidates, references, smoothing="epsilon",
                                                vocab_size=VOCABULARY + 1))}
        if tensor_sentence_bleu is None:
            row["tensorbleu"] = missing
        else:
            references_3d = references[:, None, :]
            theirs = tensor_sentence_bleu(candidates, references_3d, smoothing_method="floor")
            row["tensorbleu_seconds"] = best_seconds(
                lambda: tensor_sentence_bleu(candidates, references_3d, smoothing_method="floor"))
            row["ratio_tensorbleu"] = row["tensorbleu_seconds"] / row["ours_seconds"]
            row["max_abs_difference"] = float((ours - theirs.double()).abs().max())
        record.write("aligned", **row)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=240.0, help="seconds for all parts together")
    parser.add_argument("--output", type=Path, default=Path("out/gpu/throughput.jsonl"))
    parser.add_argument("--train", type=int, default=100_000, help="|S| of predict and score")
    parser.add_argument("--score-candidates", type=int, default=1_000_000)
    parser.add_argument("--candidates", default="10000,100000", help="predict's sizes of C, in order")
    parser.add_argument("--parts", default="ceilings,csr_add,predict,score,fluency,bertscore,aligned")
    parser.add_argument("--fluency-model", type=Path, default=BENCH.parent / ".gpu" / "smollm2",
                        help="fluency: a folder with the model's config.json and tokenizer (packed by gpu_check.sh)")
    parser.add_argument("--fluency-texts", default="1000,10000,100000", help="fluency's sizes of N, in order")
    parser.add_argument("--device", default="cuda", help="cpu: to try the script where there is no GPU")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    sizes = tuple(int(size) for size in args.candidates.split(","))
    from gpu_neighbors.kernels.parts import Bleu

    args.output.parent.mkdir(parents=True, exist_ok=True)
    record = Record(args.output, time.monotonic() + args.budget)
    record.write("machine", gpu=torch.cuda.get_device_name() if DEVICE == "cuda" else "none",
                 torch=torch.__version__, cuda=torch.version.cuda, python=sys.version.split()[0])
    parts: dict[str, Callable[[], None]] = {
        "ceilings": lambda: ceilings(record),
        "predict": lambda: (predict_rates(record, Bleu(smoothing="add1"), "bleu", args.train, sizes, reserve=150),
                            predict_rates(record, "tfidf", "tfidf", args.train, sizes, reserve=130)),
        "csr_add": lambda: csr_addition(record, min(args.train, 20_000)),
        "score": lambda: score_command(record, args.score_candidates, args.train, reserve=50),
        "fluency": lambda: fluency(record, args.fluency_model,
                                   tuple(int(size) for size in args.fluency_texts.split(","))),
        "bertscore": lambda: bertscore(record),
        "aligned": lambda: aligned(record),
    }
    failed = False
    for name in args.parts.split(","):
        if record.left() < 15:
            record.write(name, skipped=f"{record.left():.0f} s of the budget left")
            continue
        try:
            parts[name]()
        except Exception as error:
            traceback.print_exc()
            record.write(name, error=f"{type(error).__name__}: {error}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
