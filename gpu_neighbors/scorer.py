"""NeighborsScorer: the BLEU Neighbors estimator (fit on scored texts, predict unscored ones).

Parameters live in the constructor and are validated at `fit`, as scikit-learn estimators do.
The scorer owns tau, a, b, the device and the tiling; the kernel only makes similarity tiles
and the neighbour model only reduces them, so every kernel shares this one pipeline.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gpu_neighbors._version import __version__
from gpu_neighbors.kernels import Kernel, kernel_class
from gpu_neighbors.core.neighbours import (
    NeighborStats,
    Prediction,
    Quality,
    TensorPrediction,
    TrainingSubset,
    estimate,
    estimate_tensors,
)
from gpu_neighbors.core.signature import Signature
from gpu_neighbors.core.validation import (
    DEFAULT_MIN_COVERAGE,
    DEFAULTS,
    SCORER_PARAMETERS,
    check_is_fitted,
    validate_parameters,
)
from gpu_neighbors.text.tokenizers import Tokenizer, make_tokenizer

DEFAULT_CPU_BUDGET = 1 << 30  # bytes of tile working memory on CPU
CUDA_BUDGET_SHARE = 0.5  # of the device's free memory
MAX_CHUNK_ROWS = 4096
# Fewer candidates per chunk and the fixed costs of a tile (encoding, cutting the training side
# into a block) dominate: a large training set is cut into more blocks instead.
MIN_CHUNK_ROWS = 1024
# On a CPU a bigger tile is no faster (measured: 1-8 Mi pairs within noise), and past 32 MiB
# (4 Mi float64 pairs) glibc maps fresh pages for every tile: 3 Mi pairs stay below that.
CPU_TILE_PAIRS = 3 << 20


def resolve_device(device: str | torch.device) -> torch.device:
    """`auto` picks CUDA when present, else the CPU; anything else is taken as given."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"unknown device {device!r}: {error}") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but CUDA is not available here")
    return resolved


def default_memory_budget(device: torch.device) -> int:
    """Half the free memory of a CUDA device; on the CPU 1 GiB, or a quarter of the memory
    the host has available when that is less."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * CUDA_BUDGET_SHARE)
    available = _available_host_memory()
    return DEFAULT_CPU_BUDGET if available is None else min(DEFAULT_CPU_BUDGET, available // 4)


def _available_host_memory() -> int | None:
    """MemAvailable of Linux (free memory plus what the page cache would give back), else the
    free physical memory where the platform tells it, else None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


@dataclass(frozen=True)
class TilePlan:
    """How many candidates per chunk and training texts per block fit the memory budget."""

    chunk_rows: int
    block_columns: int

    @classmethod
    def from_budget(
        cls,
        budget: int,
        pair_bytes: int,
        num_train: int,
        chunk_rows: int | None,
        max_pairs: int | None = None,
    ) -> TilePlan:
        """Tiles of at most budget / pair_bytes pairs (and `max_pairs`): whole training rows
        when they fit MIN_CHUNK_ROWS candidates, else MIN_CHUNK_ROWS candidates against
        training blocks, so that |S| = 10^6 runs in the same budget as |S| = 10^3."""
        pairs = max(budget // max(pair_bytes, 1), 1)
        if max_pairs is not None:
            pairs = min(pairs, max_pairs)
        if chunk_rows is None:
            chunk_rows = int(min(MAX_CHUNK_ROWS, pairs, max(pairs // max(num_train, 1), MIN_CHUNK_ROWS)))
        block = int(min(max(num_train, 1), max(pairs // chunk_rows, 1)))
        return cls(chunk_rows=chunk_rows, block_columns=block)


class NeighborsScorer:
    """Estimate text quality as the mean known quality of a text's kernel neighbours.

    kernel: "bleu" (BLEU*), "rouge" (ROUGE-L F), "meteor" or "bertscore".
    tau: similarity threshold; None takes the kernel's default from the paper.
    min_neighbors (a) and max_fraction (b): an estimate exists when a <= |N(x)| <= b |S|.
    device: "auto" (CUDA when present), "cpu", "cuda", "cuda:1", ...
    smoothing: BLEU* smoothing ("none", "epsilon", "add1", "exp"); None for the default, add1.
    tokenizer: "whitespace", "13a", "chars", or a Hugging Face tokenizer name or path.
    kernel_options: keyword arguments of the kernel (e.g. model/layer for BERTScore).
    memory_budget: bytes of tile working memory; None sizes it from the device.
    chunk_size: candidates per chunk; None derives it from the budget. Results never depend on it.
    progress: show a progress bar on stderr for long predictions.
    score_range: (low, high) every training score must lie in; None accepts any finite score.
    Defaults, types and ranges are declared once, in `core.validation.SCORER_PARAMETERS`.
    """

    def __init__(
        self,
        kernel: str = DEFAULTS["kernel"],
        tau: float | None = DEFAULTS["tau"],
        min_neighbors: int = DEFAULTS["min_neighbors"],
        max_fraction: float = DEFAULTS["max_fraction"],
        device: str | torch.device = DEFAULTS["device"],
        smoothing: str | None = DEFAULTS["smoothing"],
        tokenizer: str | Tokenizer = DEFAULTS["tokenizer"],
        lowercase: bool = DEFAULTS["lowercase"],
        kernel_options: Mapping[str, Any] | None = DEFAULTS["kernel_options"],
        memory_budget: int | None = DEFAULTS["memory_budget"],
        chunk_size: int | None = DEFAULTS["chunk_size"],
        progress: bool = DEFAULTS["progress"],
        score_range: tuple[float, float] | None = DEFAULTS["score_range"],
    ) -> None:
        self.kernel = kernel
        self.tau = tau
        self.min_neighbors = min_neighbors
        self.max_fraction = max_fraction
        self.device = device
        self.smoothing = smoothing
        self.tokenizer = tokenizer
        self.lowercase = lowercase
        self.kernel_options = kernel_options
        self.memory_budget = memory_budget
        self.chunk_size = chunk_size
        self.progress = progress
        self.score_range = score_range

    # -- fitting -------------------------------------------------------------------------

    def fit(
        self,
        texts: Sequence[str],
        scores: Sequence[float] | np.ndarray,
        tune: bool = False,
        min_coverage: float = DEFAULT_MIN_COVERAGE,
    ) -> NeighborsScorer:
        """Validate the training set and encode it once with the kernel; returns self.

        tune: choose tau, a and b on this training set alone (inner leave-one-out over a grid,
        highest Spearman with coverage >= min_coverage; see `tuning.py`). The values used are
        `tau_`, `min_neighbors_` and `max_fraction_`; `tuning_` says how they were chosen.
        """
        validate_parameters({**self.get_params(), "min_coverage": min_coverage})
        texts = _validate_texts(texts, "training texts")
        quality = _validate_scores(scores, len(texts), self.score_range)
        self.device_ = resolve_device(self.device)
        options = dict(self.kernel_options or {})
        if self.smoothing is not None:
            if self.kernel != "bleu":
                raise ValueError(f"smoothing applies to the bleu kernel only, not {self.kernel!r}")
            options["smoothing"] = self.smoothing
        self.kernel_ = self._make_kernel(options)
        self.kernel_.fit(texts)
        self.tau_ = float(self.kernel_.default_tau if self.tau is None else self.tau)
        self.train_scores_ = quality
        self._quality = Quality.encode(torch.as_tensor(quality, dtype=torch.float64, device=self.device_))
        self.min_neighbors_, self.max_fraction_, self.tuning_ = self.min_neighbors, self.max_fraction, None
        if tune:
            from gpu_neighbors.core.tuning import tune_scorer

            self.tuning_ = tune_scorer(self, min_coverage)
            chosen = self.tuning_.thresholds
            self.tau_, self.min_neighbors_, self.max_fraction_ = chosen.tau, chosen.min_neighbors, chosen.max_fraction
        return self

    def _make_kernel(self, options: dict[str, Any]) -> Kernel:
        cls = kernel_class(self.kernel)
        tokenizer = make_tokenizer(self.tokenizer, self.lowercase)
        try:
            return cls(tokenizer=tokenizer, device=self.device_, **options)
        except TypeError as error:
            raise ValueError(f"bad kernel_options for {self.kernel!r}: {error}") from None

    def get_params(self) -> dict[str, Any]:
        """The constructor's settings, by name (as scikit-learn's `get_params`)."""
        return {name: getattr(self, name) for name in SCORER_PARAMETERS}

    def _check_fitted(self) -> None:
        check_is_fitted(self)

    # -- prediction ----------------------------------------------------------------------

    def predict(self, candidates: Sequence[str]) -> Prediction:
        """Estimates for `candidates`, in order; undefined (NaN) where the a/b rule says so."""
        return self.predict_tensors(candidates).numpy()

    def predict_tensors(
        self, candidates: Sequence[str], subset: TrainingSubset | None = None
    ) -> TensorPrediction:
        """`predict` with the estimates left on the scorer's device; `subset` keeps only some
        training texts as possible neighbours (subsampled rewards)."""
        self._check_fitted()
        candidates = _validate_texts(candidates, "candidates", allow_empty=True)
        num_train = self.num_train if subset is None else subset.size
        stats = self._stats(candidates, leave_one_out=False, subset=subset)
        return estimate_tensors(stats, self._quality, num_train, self.min_neighbors_, self.max_fraction_)

    def predict_ids(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> TensorPrediction:
        """Estimates for token ids [batch, length] straight from a model, without decoding:
        tensors on the ids' device, equal to `predict` on the decoded texts (bleu kernel with
        the model's Hugging Face tokenizer; see `token_ids.py`)."""
        from gpu_neighbors.training.ids import predict_ids

        return predict_ids(self, input_ids, attention_mask)

    def reward(
        self,
        inputs: torch.Tensor | Sequence[str],
        undefined: float | None = None,
        subsample: float | None = None,
        seed: int = 0,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """float32 RL rewards for token ids or texts: undefined estimates become `undefined`
        (default: the training mean); `subsample` scores each call against a fresh seeded
        random fraction of the training set, against reward hacking (see `reward.py`)."""
        from gpu_neighbors.training.reward import reward

        return reward(self, inputs, undefined, subsample, seed, attention_mask)

    def leave_one_out(self) -> Prediction:
        """Each training text scored by all the others (the paper's protocol): the training set
        against itself with the diagonal masked, not |S| refits."""
        self._check_fitted()
        return self._predict_stats(self._stats(None, leave_one_out=True), self.num_train - 1)

    def similarity(self, candidates: Sequence[str]) -> torch.Tensor:
        """All kernel similarities [len(candidates), |S|], float64 on the CPU."""
        self._check_fitted()
        return self._similarity(_validate_texts(candidates, "candidates", allow_empty=True))

    def train_similarity(self) -> torch.Tensor:
        """The training set against itself [|S|, |S|], float64 on the CPU, diagonal included:
        one pass from which sweeps over tau, a and b (leave-one-out) need no kernel work."""
        self._check_fitted()
        return self._similarity(None)

    def _similarity(self, candidates: Sequence[str] | None) -> torch.Tensor:
        rows = []
        for encoded, _, _ in self._chunks(candidates):
            blocks = [tile.cpu() for _, tile in self._tiles(encoded)]
            rows.append(torch.cat(blocks, dim=1))
        if not rows:
            return torch.zeros((0, self.num_train), dtype=torch.float64)
        return torch.cat(rows, dim=0)

    @property
    def num_train(self) -> int:
        self._check_fitted()
        return self.kernel_.num_train

    @property
    def signature(self) -> Signature:
        """Every setting that changes the numbers; `str()` gives the line stored beside outputs."""
        self._check_fitted()
        return Signature(
            self.kernel, tuple(self.kernel_.settings().items()), self.tau_, self.min_neighbors_,
            self.max_fraction_, self.num_train, __version__,
        )

    def _predict_stats(self, stats: NeighborStats, num_train: int) -> Prediction:
        return estimate(stats, self._quality, num_train, self.min_neighbors_, self.max_fraction_)

    # -- tiling --------------------------------------------------------------------------

    def _plan(self) -> TilePlan:
        budget = self.memory_budget or default_memory_budget(self.device_)
        max_pairs = CPU_TILE_PAIRS if self.device_.type == "cpu" else None
        return TilePlan.from_budget(
            budget, self.kernel_.pair_bytes(), self.num_train, self.chunk_size, max_pairs
        )

    def _chunks(
        self, candidates: Sequence[str] | None
    ) -> Iterator[tuple[Any, int, int]]:
        """(encoded chunk, first row, row count); `None` means the training set itself."""
        total = self.num_train if candidates is None else len(candidates)
        rows = self._plan().chunk_rows
        with _progress_bar(total, self.progress) as bar:
            for first in range(0, total, rows):
                last = min(first + rows, total)
                if candidates is None:
                    encoded = self.kernel_.encode_train(first, last)
                else:
                    encoded = self.kernel_.encode(candidates[first:last])
                yield encoded, first, last - first
                bar.update(last - first)

    def _tiles(self, encoded: Any) -> Iterator[tuple[int, torch.Tensor]]:
        block = self._plan().block_columns
        for start in range(0, self.num_train, block):
            stop = min(start + block, self.num_train)
            yield start, self.kernel_.tile(encoded, start, stop)

    def _stats(
        self,
        candidates: Sequence[str] | None,
        leave_one_out: bool,
        subset: TrainingSubset | None = None,
    ) -> NeighborStats:
        """Neighbour statistics per candidate; `subset` keeps only some training texts as
        possible neighbours (subsampled rewards)."""
        total = self.num_train if candidates is None else len(candidates)
        stats = NeighborStats.zeros(total, self.device_)
        for encoded, first, count in self._chunks(candidates):
            chunk = NeighborStats.zeros(count, self.device_)
            for start, tile in self._tiles(encoded):
                excluded = None
                if leave_one_out:
                    rows = torch.arange(first, first + count, device=self.device_)
                    columns = torch.arange(start, start + tile.shape[1], device=self.device_)
                    excluded = rows[:, None] == columns[None, :]
                stop = start + tile.shape[1]
                if subset is not None:
                    outside = ~subset.mask[None, start:stop]
                    excluded = outside if excluded is None else excluded | outside
                chunk.add_tile(tile, self._quality.block(start, stop), self.tau_, excluded)
            stats.assign(first, chunk)
        return stats


def _progress_bar(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, unit="text", dynamic_ncols=True, leave=False)


def _validate_texts(texts: Sequence[str], what: str, allow_empty: bool = False) -> list[str]:
    if isinstance(texts, str):
        raise TypeError(f"{what} must be a sequence of strings, not one string")
    texts = list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{what}[{index}] is {type(text).__name__}, not str")
    if not texts and not allow_empty:
        raise ValueError(f"{what}: empty training set; give at least one scored text")
    return texts


class ScoreError(ValueError):
    """A training score that cannot be used; `index` says which, so callers reading files can
    name the line, and `setting` the parameter that would admit it, named by `explain`."""

    def __init__(self, index: int, reason: str, setting: str | None = None) -> None:
        self.index = index
        self.reason = reason
        self.setting = setting
        super().__init__(f"scores[{index}] {self.explain(setting)}")

    def explain(self, setting_name: str | None) -> str:
        """The reason, naming `setting` as the caller knows it (the CLI: by its flag)."""
        return self.reason if self.setting is None else f"{self.reason} or set {setting_name}"


def _validate_scores(
    scores: Sequence[float] | np.ndarray, count: int, score_range: tuple[float, float] | None
) -> np.ndarray:
    try:
        quality = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("scores must be numbers") from None
    if quality.ndim != 1:
        raise ValueError(f"scores must be one-dimensional, got shape {quality.shape}")
    if quality.size != count:
        raise ValueError(f"{count} training texts but {quality.size} scores: lengths must match")
    bad = np.flatnonzero(~np.isfinite(quality))
    if bad.size:
        raise ScoreError(int(bad[0]), f"is {quality[bad[0]]}: every score must be a finite number")
    if score_range is not None:
        low, high = score_range
        outside = np.flatnonzero((quality < low) | (quality > high))
        if outside.size:
            raise ScoreError(
                int(outside[0]),
                f"is {quality[outside[0]]:g}, outside the score range [{low:g}, {high:g}]: "
                "rescale the scores (the paper maps them to [0, 1])",
                setting="score_range",
            )
    return quality
