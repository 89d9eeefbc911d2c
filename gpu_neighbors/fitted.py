"""What a fitted scorer does, however it came to be fitted (by `fit`, or loaded from a folder):
predictions, leave-one-out, similarities, token ids and rewards, each one run of the core tile
loop (`core.tiling.reduce_tiles`) with the fitted kernel making the tiles and the estimator's
reduction consuming them (`estimators.TilePass`): `TilePasses` runs the loop, `FittedScorer` makes
estimates of it."""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np
import torch

from gpu_neighbors._version import __version__
from gpu_neighbors.core import conformal, tuning
from gpu_neighbors.core.inputs import PreparedCandidates, finite, validate_ids, validate_texts
from gpu_neighbors.core.neighbours import (
    NearestReduction,
    Prediction,
    Quality,
    TensorPrediction,
    Thresholds,
    TrainingSubset,
)
from gpu_neighbors.core.outside import OutsideRule
from gpu_neighbors.core.signature import Signature
from gpu_neighbors.core.subsets import subset_mask
from gpu_neighbors.core.tiling import (
    MatrixReduction,
    Reduction,
    Result,
    TilePlan,
    TransientCache,
    default_memory_budget,
    reduce_tiles,
)
from gpu_neighbors.core.topk import Both, TopK as Ranking, TopKReduction
from gpu_neighbors.core.validation import check_is_fitted, interval
from gpu_neighbors.estimators import Estimator, RidgeFit, TilePass
from gpu_neighbors.estimators.stacking import Stacking
from gpu_neighbors.fluency import FittedFluency, Fluency
from gpu_neighbors.fluency.language import MIN_ENGLISH_SHARE, is_english
from gpu_neighbors.fluency.model import on
from gpu_neighbors.fluency.outlier import WithinLength, estimate_features
from gpu_neighbors.intervals import Intervals
from gpu_neighbors.kernels import Kernel, kernel_threads
from gpu_neighbors.kernels.parts import Auto, KernelPart
from gpu_neighbors.text.typicality import STATISTICS, Typicality

REWARD_DTYPE = torch.float32
P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S", bound="TilePasses")


def library_threads(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Run a scorer method on one intra-op thread unless the caller chose a count or the kernel
    is a model (core/threads.py); the caller's count is restored on return."""

    @functools.wraps(method)
    def wrapper(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
        with kernel_threads(*self.kernel.kernel_names):
            return method(self, *args, **kwargs)

    return wrapper


class TilePasses:
    """The fitted state every pass reads, and the passes of the one tile loop: estimates (with each row's
    nearest similarity), similarity matrices."""

    kernel: KernelPart | Auto
    estimator: Estimator | None
    intervals_part: Intervals
    memory_budget: int | None
    chunk_size: int | None
    progress: bool
    score_range: tuple[float, float] | None
    kernel_: Kernel[Any]
    estimator_: Estimator
    thresholds_: Thresholds
    tuning_: tuning.TuningResult | None
    selection_: dict[str, float] | None
    calibration_: conformal.Calibration
    outside_: OutsideRule
    typicality_: Typicality
    fluency: Fluency | None
    fluency_: FittedFluency | None
    stacking_: Stacking | None
    within_: WithinLength | None
    fluency_selection_: dict[str, Any] | None
    fluency_english_: float | None  # the share of English words `auto`'s language check measured
    train_scores_: np.ndarray
    device_: torch.device
    _ridge: RidgeFit | None
    _quality: Quality
    _qualities: TransientCache[torch.device, Quality]
    _draws: TransientCache[int, int]

    def _check_fitted(self) -> None:
        check_is_fitted(self)

    @library_threads
    def similarity(self, candidates: Sequence[str]) -> torch.Tensor:
        """All kernel similarities [len(candidates), |S|], float64 on the CPU."""
        self._check_fitted()
        texts = validate_texts(candidates, "candidates", allow_empty=True)
        return self._similarity(lambda first, last: self.kernel_.encode(texts[first:last]), len(texts))

    @library_threads
    def train_similarity(self) -> torch.Tensor:
        """The training set against itself [|S|, |S|], float64 on the CPU, diagonal included:
        one pass from which sweeps over tau, a and b (leave-one-out) need no kernel work."""
        self._check_fitted()
        return self._similarity(self.kernel_.encode_train, self.num_train)

    @property
    def num_train(self) -> int:
        self._check_fitted()
        return self.kernel_.num_train

    # -- tiling --------------------------------------------------------------------------

    def _plan(self) -> TilePlan:
        return TilePlan.for_device(
            self.device_, self.kernel_.pair_bytes(), self.num_train, self.memory_budget, self.chunk_size
        )

    def _pass(
        self,
        encode: Callable[[int, int], Any],
        rows: int,
        *,
        leave_one_out: bool = False,
        subset: TrainingSubset | None = None,
        plan: TilePlan | None = None,
        quality: Quality | None = None,
        progress: bool = True,
        neighbors: int = 0,
        own: torch.Tensor | None = None,
        host_waits: bool = True,
    ) -> tuple[TensorPrediction, Ranking | None]:
        """The tile loop over candidate rows 0..rows-1 with the estimator's reduction (neighbour
        statistics, or a running top-k), and with `neighbors` > 0 the top `neighbors` training
        texts of each row from the same tiles; every row's nearest similarity (to the whole
        training set) comes with the estimates. `own[r]`: row r is that training text, left out
        of its own neighbours (leave-one-out of a sample of the training set). `host_waits`
        False: nothing in the pass makes the host wait for the device (the token-ids path)."""
        quality = quality or self._quality
        plan = plan or self._plan()
        nearest = NearestReduction(rows, quality.device, leave_one_out)
        nearest_of: list[Callable[[], torch.Tensor]] = [nearest.result]

        def run(reduction: Reduction[Result]) -> Result:
            if isinstance(reduction, TopKReduction) and reduction.keeps_nearest(leave_one_out):
                # Each row's nearest is the best of the k it keeps: no second reduction reads the tiles.
                nearest_of[0] = reduction.nearest
                alone: Reduction[Result] = reduction
                return self._reduce(encode, rows, plan, alone if own is None else conformal.WithoutOwn(alone, own),
                                    progress)
            both: Reduction[tuple[Result, torch.Tensor]] = Both(reduction, nearest)
            if own is not None:
                both = conformal.WithoutOwn(both, own)
            return self._reduce(encode, rows, plan, both, progress)[0]

        num_train = (self.num_train if subset is None else subset.size) - int(leave_one_out or own is not None)
        ridge = None if self._ridge is None else self._ridge.weights_on(quality.device)
        prediction, shown = self.estimator_.estimate(TilePass(run, rows, quality, self.thresholds_, num_train,
                                                              leave_one_out, subset, neighbors, ridge, host_waits))
        return replace(prediction, nearest=nearest_of[0]()), shown

    def _similarity(self, encode: Callable[[int, int], Any], rows: int) -> torch.Tensor:
        return self._reduce(encode, rows, self._plan(), MatrixReduction(rows, self.num_train))

    def _reduce(
        self,
        encode: Callable[[int, int], Any],
        rows: int,
        plan: TilePlan,
        reduction: Reduction[Result],
        progress: bool = True,
    ) -> Result:
        """One pass of the tile loop; a progress bar where `progress` and the scorer's setting
        both ask for one (never on the id path of training loops)."""
        chunks, blocks = plan.chunks(rows), plan.blocks(self.num_train)
        if not (progress and self.progress):
            return reduce_tiles(encode, self.kernel_.tile, chunks, blocks, reduction)
        with _progress_bar(rows) as bar:
            return reduce_tiles(encode, self.kernel_.tile, chunks, blocks, reduction, bar.update)

    def _quality_on(self, device: torch.device) -> Quality:
        """The training q on `device` (token ids may live elsewhere than the scorer)."""
        if device == self.device_:
            return self._quality
        if device not in self._qualities:
            self._qualities[device] = self._quality.to(device)
        return self._qualities[device]


class FittedScorer(TilePasses):
    """What a fitted scorer does: predictions judged for the training distribution, intervals,
    token ids, rewards, leave-one-out; `NeighborsScorer` fits (or loads) the state it reads."""

    @library_threads
    def predict(
        self, candidates: Sequence[str] | PreparedCandidates, return_neighbors: int | None = None
    ) -> Prediction:
        """Estimates for `candidates` (texts, or texts already `prepare`d), in order; undefined
        (NaN) where the a/b rule says so. return_neighbors=k: also the k most similar training
        texts of each candidate (index, similarity, known score; all of them when k exceeds the
        training set), from the same pass, in `Prediction.neighbors`."""
        if return_neighbors is None:
            return self._with_intervals(self.predict_tensors(candidates).numpy())
        self._check_fitted()
        if not interval(1, integer=True).accepts(return_neighbors):
            raise ValueError(f"return_neighbors must be a positive integer or None, not {return_neighbors!r}")
        return_neighbors = int(return_neighbors)
        encode, rows, plan, statistics = self._candidate_chunks(candidates)
        prediction, top = self._pass(encode, rows, plan=plan, neighbors=min(return_neighbors, self.num_train))
        assert top is not None  # asked for
        prediction = self._judge(prediction, statistics)
        return replace(self._with_intervals(prediction.numpy()), neighbors=top.neighbors(self._quality.raw))

    def _with_intervals(self, prediction: Prediction) -> Prediction:
        """`prediction` with each estimate's conformal interval at `level` (clipped to
        score_range, where the truth lies)."""
        typicality = None if prediction.typicality is None else torch.from_numpy(prediction.typicality)
        low, high = self._intervals_of(torch.from_numpy(prediction.scores), torch.from_numpy(prediction.std), typicality)
        return replace(prediction, low=low.numpy(), high=high.numpy())

    def intervals(self, prediction: TensorPrediction) -> tuple[torch.Tensor, torch.Tensor]:
        """(low, high) of `predict_tensors`' estimates at `level`, as `predict` gives them, left
        on the estimates' device with no host synchronisation (training loops, metrics)."""
        self._check_fitted()
        return self._intervals_of(prediction.scores, prediction.std, prediction.typicality)

    def _intervals_of(self, scores: torch.Tensor, std: torch.Tensor,
                      typicality: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Conformal intervals, widened towards the whole score range for texts unlike the
        training set (all of it for a text flagged outside)."""
        low, high = self.intervals_part.bounds(self.calibration_, scores, std, self.estimator_.name, self.score_range)
        return (low, high) if typicality is None else self.outside_.widen(low, high, typicality)

    def _judge(self, prediction: TensorPrediction, statistics: torch.Tensor) -> TensorPrediction:
        """`prediction` with its typicality p-values and `outside` flags (from the candidates'
        `statistics`: typicality, then fluency and token count where fluency is in use, and their
        nearest similarities, on their device), the stacked estimate where fluency joins it, and
        the negative evidence's estimate for covered flagged texts (part of the way for texts
        near the flag, `OutsideRule`). The nearest similarity is to the whole training set, even
        when a subsample makes the estimates (rewards): the test was calibrated on the whole set."""
        assert prediction.nearest is not None  # every pass finds it
        nearest = prediction.nearest.masked_fill(torch.isinf(prediction.nearest), float("nan"))
        columns, scores = [statistics[:, : len(STATISTICS)]], prediction.scores
        if self.stacking_ is not None:
            assert self.within_ is not None  # fitted with the outlier test
            fluency = statistics[:, len(STATISTICS) :]
            columns.append(self.within_.columns(fluency))
            scores = self.stacking_.apply(scores, estimate_features(fluency))
        typicality = self.outside_.p_values(torch.cat([*columns, nearest[:, None]], dim=1))  # one device
        scores = self.outside_.estimates(scores, prediction.covered, typicality)
        return replace(prediction, scores=scores, outside=self.outside_.flags(typicality), typicality=typicality)

    def _statistics(self, texts: list[str], own: bool = False) -> torch.Tensor:
        """The outlier test's statistics of texts as `_judge` reads them: typicality (`own`: of
        training texts, each left out of its counts), then fluency and token count."""
        typicality = self.typicality_.of_texts(texts, own=own)
        if self.fluency_ is None or self.stacking_ is None:  # fluency not in use: no model runs
            return typicality
        return torch.cat([typicality, on(self.fluency_.of_texts(texts), typicality.device)], dim=1)

    def _id_statistics(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """`_statistics` of token ids, on their device: the fluency model reads the ids where it
        shares the kernel's tokenizer (no host synchronisation), else their decoded texts."""
        typicality = self.typicality_.of_ids(input_ids, attention_mask)
        if self.fluency_ is None or self.stacking_ is None:
            return typicality
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        tokenizer = getattr(self.kernel_.tokenizer, "hf", None)  # ids need a Hugging Face tokenizer
        assert tokenizer is not None  # `check_ids` refused any other
        if self.fluency_.shares_tokenizer(tokenizer):
            fluency = self.fluency_.of_ids(input_ids, mask)
        else:
            rows = [ids[keep.bool()].tolist() for ids, keep in zip(input_ids.cpu(), mask.cpu())]
            fluency = self.fluency_.of_texts(tokenizer.batch_decode(rows, skip_special_tokens=True))
        return torch.cat([typicality, on(fluency, typicality.device)], dim=1)

    @library_threads
    def prepare(self, candidates: Sequence[str]) -> PreparedCandidates:
        """The host half of `predict`: candidates checked and encoded by the kernel, chunk by
        chunk of the tile plan, for a later `predict`. A reader thread can prepare the next
        batch while this one is scored (the kernels' encoding only reads what `fit` built)."""
        self._check_fitted()
        texts = validate_texts(candidates, "candidates", allow_empty=True)
        plan = self._plan()
        chunks = {(first, last): self.kernel_.encode(texts[first:last]) for first, last in plan.chunks(len(texts))}
        return PreparedCandidates(len(texts), plan, chunks, self._statistics(texts), self.kernel_)

    def _candidate_chunks(
        self, candidates: Sequence[str] | PreparedCandidates
    ) -> tuple[Callable[[int, int], Any], int, TilePlan | None, torch.Tensor]:
        """(encoding of candidates first..last-1, how many there are, the plan they were
        encoded for: None means any, their typicality statistics)."""
        if isinstance(candidates, PreparedCandidates):
            if candidates.encoder is not self.kernel_:
                raise ValueError("candidates were prepared by another scorer, or by this one before it was fitted or "
                                 "loaded again: their encoding fits only the kernel that made it; prepare them with "
                                 "this scorer")
            return candidates.encoded, candidates.size, candidates.plan, candidates.statistics
        texts = validate_texts(candidates, "candidates", allow_empty=True)
        encode = lambda first, last: self.kernel_.encode(texts[first:last])  # noqa: E731
        return encode, len(texts), None, self._statistics(texts)

    @library_threads
    def predict_tensors(
        self,
        candidates: Sequence[str] | PreparedCandidates | torch.Tensor,
        subset: TrainingSubset | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> TensorPrediction:
        """`predict` with the estimates left on the device: texts on the scorer's, token ids
        [batch, length] on theirs (as `predict_ids`). `subset` keeps only some training texts as
        possible neighbours (subsampled rewards)."""
        self._check_fitted()
        if isinstance(candidates, torch.Tensor):
            return self._predict_ids(candidates, attention_mask, subset)
        if attention_mask is not None:
            raise ValueError("attention_mask goes with token ids, not with texts")
        encode, rows, plan, statistics = self._candidate_chunks(candidates)
        return self._judge(self._pass(encode, rows, subset=subset, plan=plan)[0], statistics)

    @library_threads
    def predict_ids(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> TensorPrediction:
        """Estimates for token ids [batch, length] straight from a model, without decoding:
        tensors on the ids' device, equal to `predict` on the decoded texts (bleu kernel with
        the model's Hugging Face tokenizer; see `kernels/bleu.py`). No host synchronisation
        after the first call on a device."""
        self._check_fitted()
        return self._predict_ids(input_ids, attention_mask, None)

    def _predict_ids(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, subset: TrainingSubset | None
    ) -> TensorPrediction:
        self.kernel_.check_ids()
        validate_ids(input_ids, attention_mask)
        device = input_ids.device
        plan = self._plan()
        budget = self.memory_budget or default_memory_budget(device)
        plan = replace(plan, chunk_rows=max(1, min(plan.chunk_rows, budget // self.kernel_.id_row_bytes())))
        quality = self._quality_on(device)

        def encode(first: int, last: int) -> Any:
            mask = None if attention_mask is None else attention_mask[first:last]
            return self.kernel_.encode_ids(input_ids[first:last], mask)

        prediction = self._pass(encode, input_ids.shape[0], subset=subset, plan=plan, quality=quality, progress=False,
                                host_waits=False)[0]
        return self._judge(prediction, self._id_statistics(input_ids, attention_mask))

    @library_threads
    def reward(
        self,
        inputs: torch.Tensor | Sequence[str],
        undefined: float | None = None,
        subsample: float | None = None,
        seed: int = 0,
        attention_mask: torch.Tensor | None = None,
        outside: float | None = None,
    ) -> torch.Tensor:
        """float32 RL rewards [batch] for token ids (on their device) or texts (on the scorer's).

        A reward must exist for every sample, so undefined estimates become `undefined`
        (default: the training mean, which neither rewards nor punishes what the scorer cannot
        judge). A sample flagged outside the training distribution (word salad, repetition,
        another domain: `Prediction.outside`) gets `outside` (default: the low end of its
        interval, the score range's minimum), so a policy is never paid for degenerate text.
        Against reward hacking the paper advises a large training set subsampled at every
        evaluation, so a policy cannot learn the n-grams of a few good texts: `subsample` scores
        each call against a fresh random fraction of the training set (`draw_subset`; the ridge
        estimator sums only that fraction's terms, scaled up, `kernel_ridge.RidgeReduction`)."""
        return self.rewarded(inputs, undefined, subsample, seed, attention_mask, outside)[0]

    @library_threads
    def rewarded(
        self,
        inputs: torch.Tensor | Sequence[str],
        undefined: float | None = None,
        subsample: float | None = None,
        seed: int = 0,
        attention_mask: torch.Tensor | None = None,
        outside: float | None = None,
    ) -> tuple[torch.Tensor, TensorPrediction]:
        """`reward`, with the prediction the rewards come from (what a trainer logs beside them)."""
        self._check_fitted()
        fill = float(np.mean(self.train_scores_)) if undefined is None else finite(undefined, "undefined")
        device = inputs.device if isinstance(inputs, torch.Tensor) else self.device_
        penalty = self.outside_.bounds[0] if outside is None else finite(outside, "outside")
        subset = None if subsample is None else self.draw_subset(subsample, seed, device)
        try:
            prediction = self.predict_tensors(inputs, subset, attention_mask)
        except BaseException:
            if subsample is not None:  # a refused call draws nothing: the next call gets this draw
                self._draws[int(seed)] -= 1
            raise
        assert prediction.outside is not None  # every prediction is judged
        rewards = torch.where(prediction.covered, prediction.scores, fill)
        return torch.where(prediction.outside, penalty, rewards).to(REWARD_DTYPE), prediction

    def subset_size(self, fraction: float, seed: int) -> int:
        """How many training texts a subsample of `fraction` keeps; ValueError where the
        fraction or seed is no such thing or too few texts would be kept (checked when a
        reward function is made, and at each draw)."""
        self._check_fitted()
        if not interval(0, 1, closed="right").accepts(fraction):
            raise ValueError(f"subsample must be a fraction in (0, 1], not {fraction!r}")
        if not interval(integer=True).accepts(seed):
            raise ValueError(f"seed must be an integer, not {seed!r}")
        size = round(fraction * self.num_train)
        fewest = self.estimator_.fewest(self.thresholds_)
        threshold = self.estimator_.name == "threshold"
        if size < fewest:
            raise ValueError(
                f"subsample={fraction} keeps {size} of {self.num_train} training texts, fewer than "
                f"{'min_neighbors=' if threshold else ''}{fewest}: no estimate could ever be defined"
            )
        return size

    def draw_subset(self, fraction: float, seed: int, device: torch.device) -> TrainingSubset:
        """A fresh random subset of round(fraction * |S|) training texts, made on `device`.

        Texts outside it are masked out of the fitted neighbour model and the b |S| bound uses
        its size, so nothing is refitted. The k-th call with a seed since the scorer was fitted
        (or loaded) draws the same subset in every run and on every device (`core.subsets`)."""
        size = self.subset_size(fraction, seed)
        seed = int(seed)
        call = self._draws.get(seed, 0)
        self._draws[seed] = call + 1
        return TrainingSubset(mask=subset_mask(self.num_train, size, seed, call, device), size=size)

    @library_threads
    def leave_one_out(self) -> Prediction:
        """Each training text scored by all the others (the paper's protocol): the training set
        against itself with the diagonal masked, not |S| refits. Ridge: the exact closed form
        (and, fitted on a sample, the estimates of the texts outside it)."""
        self._check_fitted()
        prediction = self._pass(self.kernel_.encode_train, self.num_train, leave_one_out=True)[0]
        if self._ridge is not None:  # the exact closed form where the model saw the text
            exact = self._ridge.loo if self._ridge.sample is None else self._ridge.leave_one_out(prediction.numpy())
            device = prediction.scores.device
            prediction = replace(prediction, scores=torch.as_tensor(exact.scores, device=device),
                                 num_neighbors=torch.as_tensor(exact.num_neighbors, device=device),
                                 std=torch.as_tensor(exact.std, device=device),
                                 covered=torch.as_tensor(exact.covered, device=device))
        return self._judge(prediction, self._statistics(self.kernel_.train_texts, own=True)).numpy()

    @property
    def signature(self) -> Signature:
        """Every setting that changes the numbers; `str()` gives the line stored beside outputs."""
        self._check_fitted()
        chosen = self.thresholds_
        return Signature(
            self.kernel_.name, tuple(self.kernel_.settings().items()), chosen.tau, chosen.min_neighbors,
            chosen.max_fraction, self.num_train, __version__, estimator=chosen.estimator, power=chosen.power,
            top_k=chosen.top_k, penalty=chosen.penalty, tuned=self.tuning_ is not None,
            selection=None if self.selection_ is None else tuple(self.selection_.items()),
            level=self.intervals_part.level,
            outside=f"{self.intervals_part.outside_level:g},{self.intervals_part.negatives},{self.intervals_part.words}",
            fluency=self._fluency_signature(),
        )

    def _fluency_signature(self) -> str | None:
        """The model, its weights and dtype, and whether it is in use (in the estimate and the
        outlier test), with the leave-one-out rho without and with it that decided; where
        `auto`'s language check left the model out, the share of English words it measured;
        None without fluency."""
        if self.fluency_ is None:
            english = self.fluency_english_
            return None if is_english(english) else f"off(english={english:.3f}<{MIN_ENGLISH_SHARE:g})"
        chosen = self.fluency_selection_
        figures = "" if chosen is None else f"({chosen['without']:.3f}->{chosen['with']:.3f})"
        return f"{self.fluency_.signature()},{'on' if self.stacking_ is not None else 'off'}{figures}"


def _progress_bar(total: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="text", dynamic_ncols=True, leave=False)

