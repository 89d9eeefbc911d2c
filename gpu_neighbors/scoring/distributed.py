"""Score a Ray Dataset across machines: a pool of actors, each holding the fitted scorer once.

The driver puts the fitted scorer's saved folder (`NeighborsScorer.save`: JSON, safetensors and
its training set; no pickle) once into Ray's object store; each actor loads it as any saved
scorer is loaded, onto its own device, the GPU Ray assigned it or else the CPU. Nothing is tuned
or calibrated again (and the default kernel's encoding is read, not rebuilt), and a scorer fitted
on a CPU-only driver runs on GPU workers.
Rows keep their input columns and gain `score` (NaN where undefined), `num_neighbors`, `std` and
the interval `low`, `high`;
since neighbour sums are exact, every row equals what `NeighborsScorer.predict` gives in one
process. Ray is an optional extra: `pip install 'gpu-neighbors[ray]'`. See docs/ray.md.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from gpu_neighbors.data import CandidateBatch
from gpu_neighbors.core.neighbours import Prediction
from gpu_neighbors.core.validation import check_is_fitted, check_name, first_not_a_string, interval, plain, shown
from gpu_neighbors.estimators.base import check
from gpu_neighbors.scorer import NeighborsScorer

if TYPE_CHECKING:
    import ray.data

OUTPUT_COLUMNS = ("score", "num_neighbors", "std", "low", "high", "nearest", "outside")
DEFAULT_RAY_BATCH = 4096  # rows per actor call


def import_ray():
    try:
        import ray
        import ray.data  # noqa: F401  (the [data] part of the extra)
    except ImportError as error:
        raise ImportError("scoring with Ray needs Ray Data: pip install 'gpu-neighbors[ray]'") from error
    return ray


# Ray's head process asks cloud metadata addresses which cloud it runs on (169.254.169.254 and
# a DNS lookup of metadata.google.internal) whatever the usage statistics setting. While Ray
# starts, its processes get a proxy that refuses every connection (the discard port of this
# machine) for plain HTTP, which only that probe uses; gRPC, Ray's own traffic, is told to use
# no proxy. The driver's environment is restored once Ray runs.
_REFUSING_PROXY = {"http_proxy": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "grpc_proxy": "",
                   "no_proxy": None, "NO_PROXY": None}


def start_ray(ray: Any, address: str | None = None) -> None:
    """`ray.init` unless Ray runs already. Nothing leaves the machine unasked: Ray's usage
    statistics are off (unless the environment turns them on), and a local Ray of our own
    starts without a dashboard and with its cloud probe refused (`_REFUSING_PROXY`)."""
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is not None:  # the user's cluster, run as its owner set it up
        ray.init(address=address)
        return
    saved = {name: os.environ.get(name) for name in _REFUSING_PROXY}
    try:
        for name, value in _REFUSING_PROXY.items():
            _set_environment(name, value)
        ray.init(include_dashboard=False)
    finally:
        for name, value in saved.items():
            _set_environment(name, value)


def _set_environment(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def serialize_scorer(scorer: NeighborsScorer) -> dict[str, bytes]:
    """The fitted scorer as its saved folder's files (`NeighborsScorer.save`), by name."""
    check_is_fitted(scorer)
    with tempfile.TemporaryDirectory() as folder:
        path = scorer.save(Path(folder) / "scorer")
        return {file.name: file.read_bytes() for file in path.iterdir()}


def load_scorer(payload: dict[str, bytes], device: torch.device, allow_download: bool = False) -> NeighborsScorer:
    """The scorer of `serialize_scorer` on `device`, loaded as any saved scorer is (every file
    checked, nothing unpickled; downloads only where `allow_download`, as the driver's scorer)."""
    with tempfile.TemporaryDirectory() as folder:
        for name, data in payload.items():
            (Path(folder) / Path(name).name).write_bytes(data)
        return NeighborsScorer.load(folder, device=device, allow_download=allow_download)


class ScoringActor:
    """One member of the actor pool: loads the scorer once, then scores batches of rows."""

    def __init__(self, payload: list[Any], text_column: str, allow_download: bool = False) -> None:
        ray = import_ray()
        device = torch.device("cuda") if ray.get_gpu_ids() else torch.device("cpu")
        self.scorer = load_scorer(ray.get(payload[0]), device, allow_download)
        self.text_column = text_column

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.text_column not in batch:
            raise ValueError(
                f"the dataset has no column {self.text_column!r} (columns: {', '.join(batch)}); "
                "pass text_column="
            )
        clashes = [name for name in OUTPUT_COLUMNS if name in batch]
        if clashes:
            raise ValueError(
                f"the dataset already has column(s) {', '.join(clashes)}, which scoring adds; "
                "rename or drop them first"
            )
        texts = batch[self.text_column].tolist()
        wrong = first_not_a_string(texts)
        if wrong is not None:  # an index into this batch finds nothing: show the row, whose columns do
            row = {name: plain(values[wrong[0]]) for name, values in batch.items()}
            raise TypeError(f"the column {self.text_column!r} holds {shown(wrong[1])}, not a string, in the row "
                            f"{row!r:.300}; drop or fill such rows first")
        prediction = self.scorer.predict(texts)
        assert prediction.low is not None and prediction.high is not None  # predict gives intervals
        assert prediction.nearest is not None and prediction.outside is not None  # and judges every text
        return {
            **batch,
            "score": prediction.scores,
            "num_neighbors": prediction.num_neighbors,
            "std": prediction.std,
            "low": prediction.low,
            "high": prediction.high,
            "nearest": prediction.nearest,
            "outside": prediction.outside,
        }


def check_pool(batch_size: int, num_gpus: float | None, num_actors: int | None) -> None:
    """The actor pool's settings, refused by name before Ray starts (Ray's own errors named
    none of them, and a negative GPU count or a bool was taken)."""
    check("batch_size", batch_size, interval(1, integer=True), optional=False)
    check("num_gpus", num_gpus, interval(0))
    check("num_actors", num_actors, interval(1, integer=True))


def score_dataset(
    dataset: ray.data.Dataset,
    scorer: NeighborsScorer | str | os.PathLike[str],
    text_column: str = "text",
    batch_size: int = DEFAULT_RAY_BATCH,
    num_gpus: float | None = None,
    num_actors: int | None = None,
) -> ray.data.Dataset:
    """Lazily map `dataset` through a pool of `ScoringActor`s holding the fitted `scorer` (or
    the saved scorer in that folder).

    num_gpus: GPUs per actor; None gives 1 when the cluster has GPUs, else 0 (CPU actors).
    num_actors: pool size; None gives one actor per GPU (GPU actors) or per CPU of the cluster.
    Output order follows Ray Data's `preserve_order` setting, as for any map.
    """
    ray = import_ray()
    scorer = NeighborsScorer.fitted(scorer)
    check_name(text_column, "text_column")
    check_pool(batch_size, num_gpus, num_actors)
    if not isinstance(dataset, ray.data.Dataset):
        raise TypeError(f"dataset must be a Ray Dataset (ray.data.from_items, read_parquet, ...), not "
                        f"{type(dataset).__name__}")
    payload = serialize_scorer(scorer)
    start_ray(ray)
    resources = ray.cluster_resources()
    if num_gpus is None:
        num_gpus = 1 if resources.get("GPU", 0) >= 1 else 0
    if num_actors is None:
        num_actors = int(resources.get("GPU", 0) // num_gpus) if num_gpus else int(resources.get("CPU", 1))
    if num_actors < 1:  # made from the cluster's resources
        raise ValueError(f"the cluster has {resources.get('GPU', 0):g} GPUs, too few for one actor of num_gpus="
                         f"{num_gpus}: give num_gpus=0 for CPU actors")
    return dataset.map_batches(
        ScoringActor,
        fn_constructor_kwargs={"payload": [ray.put(payload)], "text_column": text_column,
                               "allow_download": scorer.kernel_part_.allow_download},
        batch_size=batch_size,
        batch_format="numpy",
        num_gpus=num_gpus,
        compute=ray.data.ActorPoolStrategy(size=int(num_actors)),
    )


class RayBatchScorer:
    """`streaming.score_file`'s batch scorer for `gpu-neighbors score --ray`: the pending
    candidates go to the actor pool as one dataset and come back in input order, regrouped into
    the file's batches, so writing, resuming and rejects stay those of the one-process path.
    The driver holds the pending candidates' texts; the cluster does the scoring."""

    def __init__(
        self,
        address: str | None = None,
        batch_size: int = DEFAULT_RAY_BATCH,
        num_gpus: float | None = None,
        num_actors: int | None = None,
    ) -> None:
        import_ray()  # fail before any work when the extra is missing
        check_pool(batch_size, num_gpus, num_actors)
        self.address = address
        self.batch_size = batch_size
        self.num_gpus = num_gpus
        self.num_actors = num_actors

    def __call__(
        self, scorer: NeighborsScorer, batches: Iterable[CandidateBatch]
    ) -> Iterator[tuple[CandidateBatch, Prediction]]:
        ray = import_ray()
        batches = list(batches)
        if not batches:
            return
        start_ray(ray, self.address)
        context = ray.data.DataContext.get_current()
        preserved = context.execution_options.preserve_order, context.enable_progress_bars
        context.execution_options.preserve_order = True
        context.enable_progress_bars = False  # score_file shows its own
        try:
            rows = [{"index": index, "text": text} for batch in batches
                    for index, text in zip(batch.indices, batch.texts)]
            scored = score_dataset(
                ray.data.from_items(rows), scorer, batch_size=self.batch_size,
                num_gpus=self.num_gpus, num_actors=self.num_actors,
            )
            yield from _regroup(batches, scored.iter_batches(batch_size=None, batch_format="numpy"),
                                scorer.estimator_.name)
        finally:
            context.execution_options.preserve_order, context.enable_progress_bars = preserved


def _regroup(
    batches: list[CandidateBatch], results: Iterable[dict[str, np.ndarray]], estimator: str
) -> Iterator[tuple[CandidateBatch, Prediction]]:
    """Cut the scored rows, which arrive in input order in Ray's own batch sizes, back into
    `batches` (made by `estimator`); a row out of order is a bug, not something to write."""
    columns = ("index", *OUTPUT_COLUMNS)
    pending: dict[str, list[np.ndarray]] = {name: [] for name in columns}
    buffered = 0
    results = iter(results)
    for batch in batches:
        while buffered < len(batch):
            chunk = next(results)
            for name in columns:
                pending[name].append(chunk[name])
            buffered += len(chunk["index"])
        joined = {name: np.concatenate(parts) for name, parts in pending.items()}
        head = {name: values[: len(batch)] for name, values in joined.items()}
        pending = {name: [values[len(batch) :]] for name, values in joined.items()}
        buffered -= len(batch)
        if head["index"].tolist() != list(batch.indices):
            raise RuntimeError("Ray returned scored rows out of input order")
        yield batch, Prediction(
            scores=head["score"],
            num_neighbors=head["num_neighbors"],
            std=head["std"],
            covered=~np.isnan(head["score"]),
            estimator=estimator,
            low=head["low"],
            high=head["high"],
            nearest=head["nearest"],
            outside=head["outside"].astype(bool),
        )
