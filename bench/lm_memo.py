"""The fluency model's per-text memo kept on disk between bench runs (bench/.fluency-memo/), so
that the benches that score the same development texts (quality.py, checklist.py, outside.py,
fluency.py, fluency_columns.py, fluency_ranked.py) run the language model over each text once per machine, not once per run. The memo
is the library's own (`LanguageModel.remembered`: a text's statistic is computed once a process);
this only carries it across processes. Delete the folder to measure from scratch."""
from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from gpu_neighbors.fluency import model_files, offline_model
from gpu_neighbors.fluency.model import LanguageModel
from gpu_neighbors.fluency.part import resolved_dtype

FOLDER = Path(__file__).resolve().parent / ".fluency-memo"


@contextmanager
def remembered(device: str = "cpu", dtype: str = "auto") -> Iterator[None]:
    """Within the block, the offline model (if fetched) starts from the texts remembered on disk;
    what it computed is written back at the end."""
    path = offline_model()
    if path is None:
        yield
        return
    files = model_files(path)
    chosen = resolved_dtype(dtype, torch.device(device))
    model = LanguageModel.load(files, torch.device(device), chosen)
    memo = FOLDER / f"{files.sha256[:16]}-{device}-{str(chosen).removeprefix('torch.')}.pkl"
    if memo.exists():
        model.remembered.update(pickle.loads(memo.read_bytes()))
    try:
        yield
    finally:  # merged with what other runs wrote meanwhile
        FOLDER.mkdir(exist_ok=True)
        merged = pickle.loads(memo.read_bytes()) if memo.exists() else {}
        merged.update(model.remembered)
        partial = memo.with_suffix(f".{os.getpid()}.partial")
        partial.write_bytes(pickle.dumps(merged))
        partial.replace(memo)
