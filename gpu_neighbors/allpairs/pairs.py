"""All-pairs similarities of a set of candidates against a training set (or against itself):
the whole matrix streamed into a float32 `.npy` file, or, sparse, the k most similar texts per
candidate or the pairs at or above a similarity threshold written to Parquet. Memory stays
bounded by the tile (and, for top-k, by k entries per candidate) whatever the size.

Sparse outputs of a set against itself leave out each text paired with itself; the `.npy`
matrix keeps its diagonal. Top-k rows are ordered by similarity, ties to the lower index.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

from gpu_neighbors.allpairs.passes import fitted_kernel, kernel_settings, run_block
from gpu_neighbors.core.validation import check_flag, check_path, check_texts, interval
from gpu_neighbors.core.reductions import MaskBelow, NpyReduction, PairsAboveReduction
from gpu_neighbors.core.topk import TopKReduction
from gpu_neighbors.data.formats import import_pyarrow
from gpu_neighbors.data.output import SafeOutput, check_outputs
from gpu_neighbors.kernels import threads_by_kernel
from gpu_neighbors.text.tokenizers import Tokenizer

FORMATS = (".npy", ".parquet")
PARQUET_ROWS = 1 << 20  # pairs buffered per Parquet row group


@dataclass(frozen=True)
class PairsResult:
    path: Path
    candidates: int
    train: int
    pairs: int  # entries written: the whole matrix for .npy, the selected pairs for Parquet


def check_selection(suffix: str, top_k: object, min_similarity: object,
                    names: tuple[str, str, str] = ("top_k", "min_similarity", "output")) -> None:
    """A selection of pairs (`top_k`, `min_similarity`) goes with a .parquet output and only there;
    refused by `names` (the command line names its flags and --output)."""
    k, similarity, output = names
    selected = top_k is not None or min_similarity is not None
    if suffix == ".npy" and selected:
        raise ValueError(f"{k} and {similarity} select pairs for a .parquet {output}; a .npy {output} holds every pair")
    if suffix == ".parquet" and not selected:
        raise ValueError(f"a .parquet {output} needs {k} or {similarity}; the whole matrix goes to a .npy {output}")


@threads_by_kernel
def pairs(
    candidates: Sequence[str],
    train: Sequence[str] | None = None,
    *,
    output: str | os.PathLike[str] | SafeOutput,
    top_k: int | None = None,
    min_similarity: float | None = None,
    overwrite: bool = False,
    kernel: str = "bleu",
    smoothing: str | None = None,
    weights: Sequence[float] | None = None,
    tokenizer: str | Tokenizer = "whitespace",
    lowercase: bool = False,
    kernel_options: Mapping[str, Any] | None = None,
    device: str = "auto",
    memory_budget: int | None = None,
    inputs: Mapping[str, str | os.PathLike[str] | None] | None = None,
) -> PairsResult:
    """k(candidate, train text) for every pair (`train` None: the candidates against
    themselves) into `output`: `.npy` for the matrix [candidates, train] as float32; `.parquet`
    for the `top_k` most similar per candidate and/or the pairs with similarity >=
    `min_similarity` (columns candidate, train, similarity; with top_k also rank, from 1).
    The file is written as every output is (`data.output.SafeOutput`): locked, through a
    partial file renamed into place when complete, never onto one of `inputs` ({name: path},
    the files the texts came from). `output` may be a `SafeOutput` the caller holds open (e.g.
    locked while it reads the texts): its main output is written, and the caller commits it."""
    check_flag("overwrite", overwrite)  # "no" would replace the file
    held = output if isinstance(output, SafeOutput) else None
    if held is None:
        check_path("output", output)
    path = Path(output.main) if isinstance(output, SafeOutput) else Path(output)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"output {str(path)!r}: give a .npy (the whole matrix) or .parquet (sparse pairs) path")
    check_selection(suffix, top_k, min_similarity)
    if top_k is not None and not interval(1, integer=True).accepts(top_k):
        raise ValueError(f"top_k must be a positive integer, not {top_k!r}")
    if min_similarity is not None and not interval().accepts(min_similarity):
        raise ValueError(f"min_similarity must be a finite number, not {min_similarity!r}")
    top_k = None if top_k is None else int(top_k)
    min_similarity = None if min_similarity is None else float(min_similarity)
    if held is None:
        check_outputs({"output": path}, inputs, overwrite=overwrite)
    if suffix != ".npy":
        import_pyarrow(path, "writing Parquet")  # refused before the work, naming the extra
    rows = check_texts(candidates, "candidates", at_least=1)
    itself = train is None
    columns = rows if train is None else check_texts(train, "train", at_least=1)
    if itself and len(rows) < 2:
        raise ValueError("candidates: 1 text against itself has no pairs; give two or more, or a train set")
    settings = kernel_settings(kernel, smoothing=smoothing, weights=weights, tokenizer=tokenizer,
                               lowercase=lowercase, kernel_options=kernel_options, device=device,
                               memory_budget=memory_budget)
    fitted = fitted_kernel(settings, columns)
    encode = fitted.encode_train if itself else (lambda first, last: fitted.encode(rows[first:last]))
    span, width = (0, len(rows)), (0, len(columns))
    opened = contextlib.nullcontext(held) if held else SafeOutput({"output": path}, inputs=inputs, overwrite=overwrite)
    with opened as files:
        if suffix == ".npy":
            run_block(fitted, encode, span, width,
                      NpyReduction(files.create_path(), len(rows), len(columns)), memory_budget)
            count = len(rows) * len(columns)
        else:
            with _ParquetPairs(files.create(), ranked=top_k is not None) as sink:
                if top_k is None:
                    assert min_similarity is not None
                    count = run_block(fitted, encode, span, width,
                                      PairsAboveReduction(float(min_similarity), sink.write, exclude_self=itself),
                                      memory_budget)
                else:
                    # no scores here: ties in similarity go to the lower column index
                    positions = torch.arange(len(columns), device=fitted.device)
                    # a k past the set keeps the whole set: no k slots a row beyond it
                    top = TopKReduction(len(rows), min(top_k, len(columns)), positions, leave_one_out=itself)
                    reduction = top if min_similarity is None else MaskBelow(top, float(min_similarity))
                    best = run_block(fitted, encode, span, width, reduction, memory_budget)
                    count = sink.write_top(best.similarity, best.index)
    return PairsResult(path=path, candidates=len(rows), train=len(columns), pairs=count)


class _ParquetPairs:
    """Pairs appended to a Parquet file in row groups of PARQUET_ROWS."""

    def __init__(self, sink: IO[bytes], ranked: bool) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.pa = pa
        fields = [("candidate", pa.int64()), ("train", pa.int64()), ("similarity", pa.float64())]
        if ranked:
            fields.append(("rank", pa.int32()))
        self.writer = pq.ParquetWriter(sink, pa.schema(fields))
        self.parts: list[list[Any]] = []
        self.buffered = 0

    def __enter__(self) -> _ParquetPairs:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is not None:  # the first error is the one to report: no footer after it
            with contextlib.suppress(Exception):
                self.writer.close()
            return
        self._flush()
        self.writer.close()

    def write(self, rows: torch.Tensor, columns: torch.Tensor, values: torch.Tensor, *extra: torch.Tensor) -> None:
        if rows.numel():
            self.parts.append([part.numpy() for part in (rows, columns, values, *extra)])
            self.buffered += rows.numel()
        if self.buffered >= PARQUET_ROWS:
            self._flush()

    def write_top(self, similarity: torch.Tensor, index: torch.Tensor) -> int:
        """The top-k buffers [rows, k] (index -1 where fewer than k), row by row in rank order."""
        similarity, index = similarity.cpu(), index.cpu()
        kept = index >= 0
        rows, ranks = kept.nonzero(as_tuple=True)
        for first in range(0, rows.numel(), PARQUET_ROWS):
            part = slice(first, first + PARQUET_ROWS)
            row, rank = rows[part], ranks[part]
            self.write(row, index[row, rank], similarity[row, rank], (rank + 1).to(torch.int32))
        return int(rows.numel())

    def _flush(self) -> None:
        if not self.parts:
            return
        import numpy as np

        columns = [np.concatenate(column) for column in zip(*self.parts)]
        self.writer.write_table(self.pa.Table.from_arrays(columns, schema=self.writer.schema))
        self.parts, self.buffered = [], 0
