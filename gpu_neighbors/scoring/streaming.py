"""Score a candidates file into a results file as a stream.

Memory stays bounded whatever the number of candidates: candidates are read lazily, scored
`batch_size` at a time (the scorer cuts each batch into memory-budgeted tiles) and written at
once, in input order, through the durable `ResultWriter`. After a kill at any moment, a run with
`resume=True` continues from what is safely on disk; since every row depends only on its own
candidate (neighbour sums are exact, whatever the tiling), the final file is byte-identical to
an uninterrupted run. The progress record keeps a SHA-256 of the candidate texts already
written, so a resume over a candidates file whose first rows changed is refused instead of
mixing old and new rows.
"""
from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from gpu_neighbors.core.caller_warnings import warn
from gpu_neighbors.data import (
    CandidateBatch,
    CandidateStream,
    InputError,
    PathLike,
    count_records,
    iter_candidates,
    open_results,
)
from gpu_neighbors.data.jsonlines import Column
from gpu_neighbors.data.paths import spelled_once
from gpu_neighbors.data.readers import DEFAULT_MAX_CHARS
from gpu_neighbors.core.neighbours import Prediction
from gpu_neighbors.scoring.progress import ScoringProgress
from gpu_neighbors.scorer import NeighborsScorer, PreparedCandidates

T = TypeVar("T")
R = TypeVar("R")
# Arrow types of the result columns, for a Parquet output (a batch may hold only nulls).
RESULT_TYPES = {"index": "int64", "text": "string", "score": "double", "num_neighbors": "int64",
                "std": "double", "estimator": "string", "low": "double", "high": "double",
                "nearest": "double", "outside": "bool"}
# Every column a result row may have: no field of the candidates is carried under one of these names.
RESULT_COLUMNS = (*RESULT_TYPES, "neighbors")
DEFAULT_BATCH_SIZE = 8192  # candidates scored and made durable per step
READ_AHEAD = 2  # batches a reader thread may parse while one is scored


@dataclass(frozen=True)
class RunSummary:
    """What a run did: rows it wrote, rows now in the output, bad records skipped, time."""

    scored: int
    rows: int
    rejected: int
    seconds: float
    num_train: int
    outside: int  # of the rows this run wrote, those flagged outside the training distribution

    @property
    def texts_per_second(self) -> float:
        return self.scored / self.seconds if self.seconds > 0 else float("nan")

    @property
    def pairs_per_second(self) -> float:
        return self.texts_per_second * self.num_train


def score_file(
    scorer: NeighborsScorer,
    candidates: PathLike,
    output: PathLike,
    *,
    text_field: str = "text",
    resume: bool = False,
    skip_bad: bool = False,
    rejects: PathLike | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool = False,
    header: dict[str, Any] | None = None,
    score_batches: BatchScorer | None = None,
    overwrite: bool = False,
    file_format: str | None = None,
    quoting: str = "none",
    max_chars: int = DEFAULT_MAX_CHARS,
    explain: int = 0,
    train_texts: list[str] | None = None,
    workers: int = 1,
    inputs: Mapping[str, PathLike | None] | None = None,
    encoders: int = 1,
    keep_fields: Sequence[str] = (),
) -> RunSummary:
    """Scores every candidate of `candidates` with a fitted `scorer` into `output`: JSON Lines,
    or Parquet for a `.parquet` name (the same rows and values; no resume).

    One row per candidate in input order: {"index", "text", "score", "num_neighbors", "std",
    "estimator", "low", "high", "nearest", "outside"}, score, std and the interval [low, high]
    null where undefined; "nearest" the highest similarity to a training text (null: none may
    be one), "outside" whether the text lies outside the training distribution. A bad record stops the run with an InputError naming
    file and line (rows before it stay on disk, so a fixed file can be resumed), or with
    `skip_bad` goes to `rejects`. `header` adds settings that must match on resume.
    `score_batches` scores the batches elsewhere (e.g. on a Ray cluster); default: this process.
    `overwrite` allows replacing a finished output (only once the new run completes).
    `explain` > 0 adds each candidate's most similar training texts to its row ("neighbors":
    [{index, similarity, score}], with "text" when `train_texts` are given).
    `workers` > 1 scores that many batches at once in this process, each in its own thread
    (torch releases the GIL inside its operations, so on a multi-core CPU each batch's tiles run
    on their own core), and `encoders` > 1 encodes that many batches at once ahead of the
    scoring; rows are written in input order and are the same whatever the counts.
    `inputs` ({name: path}) are other files the run reads (e.g. the training set): no output,
    rejects file or sidecar may be one of them, nor the candidates.
    `keep_fields` are fields of the candidates copied into their rows after the columns above,
    as they are (null where a record lacks one), e.g. an id or the system that made the text;
    none may be named as a column of the rows (RESULT_COLUMNS).
    """
    taken = sorted(set(keep_fields) & set(RESULT_COLUMNS))
    if taken:
        raise ValueError(f"keep_fields: {', '.join(taken)} is a column of the results already")
    for name, value in (("batch_size", batch_size), ("workers", workers), ("encoders", encoders)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, not {value!r}")
    carried = tuple(dict.fromkeys(keep_fields))
    stream = iter_candidates(candidates, text_field=text_field, skip_bad=skip_bad, rejects=rejects,
                             file_format=file_format, quoting=quoting, max_chars=max_chars, carry_fields=carried)
    settings = {
        "signature": str(scorer.signature),
        "candidates": spelled_once(candidates),
        "text_field": text_field,
        "skip_bad": skip_bad,  # rejected records take no index, so skipping shifts every row
        **(header or {}),
        **({"explain": explain} if explain else {}),
        **({"explain_text": True} if train_texts is not None else {}),  # rows with texts or without
        **({"keep_fields": list(carried)} if carried else {}),  # rows with them or without
    }
    started = time.perf_counter()
    with open_results(output, resume=resume, header=settings, overwrite=overwrite, types=RESULT_TYPES,
                      inputs={"--candidates": candidates, **(inputs or {})},
                      companions={"--rejects": rejects}) as writer:
        if rejects is not None:  # moved into place with the output, once the run completes
            stream.rejects = writer.companion_partial(rejects)
        already = writer.done
        outside = 0
        absent = set(carried)  # kept fields no candidate read so far has (a typo, most often)
        total = count_records(candidates, file_format=file_format, quoting=quoting) if progress else None
        consumed = hashlib.sha256()
        expected = writer.checkpoint.get(CANDIDATES_DIGEST)
        with ScoringProgress(total, initial=already, pairs_per_text=scorer.num_train,
                             enabled=progress) as bar:
            batches = _pending_batches(stream, batch_size, already, consumed, expected, candidates)
            scored: Iterable[tuple[CandidateBatch, Prediction]]
            if score_batches is None:
                scored = _score_here(scorer, batches, explain or None, workers, encoders)
            else:
                scored = score_batches(scorer, _read_ahead(batches, READ_AHEAD))
            for batch, prediction in scored:
                outside += int(prediction.outside.sum()) if prediction.outside is not None else 0
                absent -= {name for name in absent if any(value is not None for value in batch.labels[name])}
                _digest_texts(consumed, batch.texts)
                writer.write_columns(_columns(batch, prediction, train_texts),
                                     checkpoint={CANDIDATES_DIGEST: consumed.hexdigest()})
                bar.update(batch.start + len(batch) + stream.rejected - bar.n)
    if writer.done > already:
        for name in sorted(absent):
            warn(f"kept field {name!r} (--keep-fields): no candidate has it; its column is null")
    return RunSummary(
        scored=writer.done - already,
        rows=writer.done,
        rejected=stream.rejected,
        seconds=time.perf_counter() - started,
        num_train=scorer.num_train,
        outside=outside,
    )


BatchScorer = Callable[
    [NeighborsScorer, Iterable[CandidateBatch]], Iterable[tuple[CandidateBatch, Prediction]]
]
"""Scores batches of candidates and yields each batch with its prediction, in input order
(`score_file(score_batches=...)`; `distributed.RayBatchScorer` spreads them over a Ray cluster)."""


def predict_batches(
    scorer: NeighborsScorer, batches: Iterable[CandidateBatch], workers: int = 1, encoders: int = 1
) -> Iterator[tuple[CandidateBatch, Prediction]]:
    """Each batch with its prediction, in input order, exactly as `score_file` scores them
    (read ahead in a thread, `encoders` batches encoded and `workers` scored at once): for
    callers that reduce the estimates instead of writing them, e.g. the comparison of systems."""
    return _score_here(scorer, batches, None, workers, encoders)


def _score_here(
    scorer: NeighborsScorer, batches: Iterable[CandidateBatch], neighbors: int | None, workers: int = 1,
    encoders: int = 1,
) -> Iterator[tuple[CandidateBatch, Prediction]]:
    """Each batch scored in this process, `workers` at a time, in input order. A reader thread
    reads the next batches meanwhile and, where the kernel's encoding is host work
    (`prepares_ahead`), has `encoders` threads encode them, in order (the encodings are numpy
    and torch work, which release the GIL, so they run on as many cores)."""
    read: Iterator[CandidateBatch] = iter(batches)
    items: Iterator[tuple[CandidateBatch, Any]]
    if scorer.kernel_.prepares_ahead:
        prepared = _ordered_map(lambda batch: (batch, _prepare_aside(scorer, batch.texts)),
                                _read_ahead(read, READ_AHEAD) if encoders > 1 else read, encoders)
        items = _read_ahead(prepared, READ_AHEAD)
    else:
        items = ((batch, batch.texts) for batch in _read_ahead(read, READ_AHEAD))
    yield from _ordered_map(lambda item: (item[0], scorer.predict(item[1], return_neighbors=neighbors)),
                            items, workers)


def _ordered_map(function: Callable[[T], R], items: Iterator[T], workers: int) -> Iterator[R]:
    """`map(function, items)` with up to `workers` calls running at once, each in its own
    thread, the results in input order. An error raised by `items` (a bad record) comes after
    the results of the items before it."""
    if workers == 1:
        yield from map(function, items)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="gpu-neighbors-worker") as pool:
        running: deque[Future[R]] = deque()
        stopped: Exception | None = None
        while stopped is None:
            try:
                item = next(items)
            except StopIteration:
                break
            except Exception as error:  # a bad record: the batches before it still go out first
                stopped = error
                break
            running.append(pool.submit(function, item))
            if len(running) == workers:
                yield running.popleft().result()
        while running:
            yield running.popleft().result()
        if stopped is not None:
            raise stopped


def _prepare_aside(scorer: NeighborsScorer, texts: list[str]) -> PreparedCandidates:
    """`scorer.prepare` for the reader thread. On CUDA its device work (copying the encodings
    over) goes to a stream of its own, so that it overlaps the scoring on the default stream
    instead of queueing behind it: the stream first waits for the work already queued (fit's
    tables), and the reader waits for the stream before handing the batch over, so every
    encoding is complete when scoring reads it. `predict` ends with a copy to the host, so no
    scoring work still reads a batch's encodings when they are freed and their memory returns
    to this stream. Not run here: no CUDA machine has run the suite yet."""
    device = scorer.device_
    if device.type != "cuda":
        return scorer.prepare(texts)
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        prepared = scorer.prepare(texts)
    stream.synchronize()
    return prepared


CANDIDATES_DIGEST = "candidates_sha256"  # of the texts written so far, in the progress record


def _digest_texts(digest: Any, texts: list[str]) -> None:
    """Each text's UTF-8 bytes and a NUL, in order."""
    if texts:
        digest.update(("\0".join(texts) + "\0").encode("utf-8", "surrogatepass"))


def _pending_batches(
    stream: CandidateStream, size: int, done: int, consumed: Any, expected: str | None,
    path: PathLike,
) -> Iterator[CandidateBatch]:
    """Batches of the candidates with index >= done (those before are already on disk). The
    skipped ones go into `consumed`, which must then match the digest the earlier run recorded
    (`expected`; None when there is nothing to check)."""
    verified = done == 0 or expected is None
    for batch in stream.batches(size):
        if batch.start < done:
            _digest_texts(consumed, batch.texts[: done - batch.start])
            batch = batch.without_first(done - batch.start)
            if not batch:
                continue
        if not verified:
            _check_consumed(consumed, expected, done, path)
            verified = True
        yield batch
    if not verified:
        _check_consumed(consumed, expected, done, path)


def _check_consumed(consumed: Any, expected: str | None, done: int, path: PathLike) -> None:
    if consumed.hexdigest() != expected:
        raise InputError(f"cannot resume: the candidates changed since the earlier run (their "
                         f"first {done:,} texts, already scored, are not the same); pass "
                         f"--overwrite (not --resume) to start over", path=path)


def _read_ahead(items: Iterable[T], depth: int) -> Iterator[T]:
    """`items` made by a thread that stays at most `depth` ahead: parsing and encoding are
    Python and hold the GIL, scoring is torch and releases it, so on a second core reading
    costs little; memory stays bounded by the depth. Errors reach the consumer in order."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def hand_over(item: Any) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for item in items:
                if not hand_over(item):
                    return
            hand_over(end)
        except BaseException as error:  # handed to the consumer, raised there
            hand_over(error)

    reader = threading.Thread(target=read, name="gpu-neighbors-reader", daemon=True)
    reader.start()
    try:
        while (item := ready.get()) is not end:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        reader.join()


def _columns(
    batch: CandidateBatch, prediction: Prediction, train_texts: list[str] | None = None
) -> dict[str, Column]:
    """The batch's result rows as columns: index, text, score, num_neighbors, std, estimator,
    the interval low and high (score, std, low and high are float arrays whose NaN, where
    undefined or unbounded, is written as null), the nearest similarity and the outside flag,
    with explained predictions their neighbours, and the fields the stream carries."""
    columns: dict[str, Column] = {
        "index": batch.indices,
        "text": batch.texts,
        "score": prediction.scores,
        "num_neighbors": prediction.num_neighbors.tolist(),
        "std": prediction.std,
        "estimator": [prediction.estimator] * len(batch),
    }
    if prediction.low is not None and prediction.high is not None:
        # an unbounded end (too few calibration texts for the level, and no score range) is null too
        columns.update(low=np.where(np.isinf(prediction.low), np.nan, prediction.low),
                       high=np.where(np.isinf(prediction.high), np.nan, prediction.high))
    if prediction.nearest is not None and prediction.outside is not None:
        columns.update(nearest=np.where(np.isinf(prediction.nearest), np.nan, prediction.nearest),
                       outside=prediction.outside.tolist())
    if prediction.neighbors is not None:
        columns["neighbors"] = [
            [{**neighbor, "text": train_texts[int(neighbor["index"])]} if train_texts is not None else neighbor
             for neighbor in prediction.neighbors.rows(position)]
            for position in range(len(batch))
        ]
    columns.update(batch.labels)
    return columns
