"""NeighborsScorer: the BLEU Neighbors estimator (fit on scored texts, predict unscored ones).

Parameters live in the constructor and are validated at `fit`, as scikit-learn estimators do.
The scorer owns tau, a, b and the device; every pass (predict, leave-one-out, similarities,
token ids, rewards) is one run of the core tile loop (`core.tiling.reduce_tiles`) with a kernel
making the tiles and a reduction (`core.neighbours.NeighborReduction`, `MatrixReduction`)
consuming them, so every kernel shares this one pipeline.
"""
from __future__ import annotations

import functools
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np
import torch

from gpu_neighbors._version import __version__
from gpu_neighbors.kernels import KERNEL_NAMES, Kernel, kernel_class, kernel_threads
from gpu_neighbors.core.caller_warnings import warn
from gpu_neighbors.core.correlation import spearman_rows
from gpu_neighbors.core.neighbours import (
    NearestReduction,
    NeighborReduction,
    Prediction,
    Quality,
    TensorPrediction,
    Thresholds,
    TrainingSubset,
    canonical_sample,
    estimate_tensors,
    text_checksums,
)
from gpu_neighbors.core.kernel_ridge import RidgeReduction
from gpu_neighbors.core.pairwise import PairwiseSimilarities
from gpu_neighbors.core.topk import Both, TopK, TopKReduction, estimate_topk
from gpu_neighbors.core.signature import Signature
from gpu_neighbors.core.validation import (
    DEFAULT_KERNEL,
    DEFAULT_MIN_COVERAGE,
    DEFAULT_TOP_K,
    DEFAULTS,
    MIN_TUNING_TEXTS,
    PAPER_KERNEL,
    SCORER_PARAMETERS,
    ParameterError,
    check_is_fitted,
    check_texts,
    validate_parameters,
)
from gpu_neighbors.core.tiling import (
    MatrixReduction,
    Reduction,
    Result,
    TilePlan,
    TransientCache,
    default_memory_budget,
    reduce_tiles,
    resolve_device,
)
from gpu_neighbors.core import conformal, kernel_ridge, tuning
from gpu_neighbors.core.outside import OutlierTest, OutsideRule, lowest_decile_mean
from gpu_neighbors.text.tokenizers import Tokenizer, make_tokenizer
from gpu_neighbors.text.typicality import LOW_IS_ATYPICAL, STATISTICS, Typicality

REWARD_DTYPE = torch.float32
AUTO_KERNEL = "auto"
P = ParamSpec("P")
R = TypeVar("R")
BLEU_ONLY = ("smoothing", "weights")  # settings only the bleu kernel takes
PAPER_MIN_NEIGHBORS, PAPER_MAX_FRACTION = 5, 0.66  # the paper's a and b
DEFAULT_POWER = 1.0  # p of similarity weighting when it is not tuned
MAX_TUNING_TEXTS = 4_000  # tuning holds an [n x n] float64 matrix (128 MB here) and its per-tau copies
NEAREST = len(STATISTICS)  # the outlier test's columns: the typicality statistics, then the nearest similarity

@dataclass(frozen=True)
class PreparedCandidates:
    """Candidates encoded ahead (`NeighborsScorer.prepare`): each chunk of `plan` mapped to the
    kernel's encoding of it."""

    size: int
    plan: TilePlan
    chunks: dict[tuple[int, int], Any]
    statistics: torch.Tensor  # `Typicality.of_texts` of the texts

    def encoded(self, first: int, last: int) -> Any:
        return self.chunks[first, last]

    def __len__(self) -> int:
        return self.size


def _library_threads(method: Callable[Concatenate[NeighborsScorer, P], R]) -> Callable[Concatenate[NeighborsScorer, P], R]:
    """Run a scorer method on one intra-op thread unless the caller chose a count or the kernel
    is a model (core/threads.py); the caller's count is restored on return."""

    @functools.wraps(method)
    def wrapper(self: NeighborsScorer, *args: P.args, **kwargs: P.kwargs) -> R:
        kernels = self.kernels if self.kernel_name == AUTO_KERNEL else (self.kernel_name,)
        with kernel_threads(*kernels):
            return method(self, *args, **kwargs)

    return wrapper


class NeighborsScorer:
    """Estimate text quality as the mean known quality of a text's kernel neighbours.

    kernel: "bleu" (BLEU*), "rouge" (ROUGE-L F), "meteor", "bertscore" or "tfidf" (cosine of
        the TF-IDF + ridge baseline's word and char_wb n-gram features); None (the default):
        tfidf, or bleu when a setting of the paper's method is given (`kernel_name`).
    tau: similarity threshold; None takes the kernel's default (the paper's; 0.03 for tfidf).
    min_neighbors (a) and max_fraction (b): an estimate exists when a <= |N(x)| <= b |S|.
    thresholds: "auto" tunes tau, a and b (and p, k) by leave-one-out on the training set when
        it has at least 50 texts and none of them is given (else the paper's, with a warning
        below 50 texts); "tuned" always; "paper" never: the paper's settings, exactly.
    estimator: "threshold" (the paper's rule), "topk" (similarity-weighted mean q of the
        top_k most similar training texts; defined whenever any training text is similar) or
        "ridge" (kernel ridge regression on the similarities, `core/kernel_ridge.py`; defined
        for every text with any similar training text); None (the default): the kernel's
        (topk; ridge for bertscore, where it measured better on every development set);
        thresholds="paper" or tau, min_neighbors or max_fraction given ask for the paper's rule.
    weighting: "uniform" (plain mean) or "similarity" (weights k(x, s)^power); None: uniform
        for threshold, similarity for topk. power, top_k: None tunes them (else 1 and 50).
    penalty: lambda of the ridge estimator; None chooses it by exact leave-one-out.
    kernels: with kernel="auto", the kernels to choose from (with their estimator settings) by
        inner leave-one-out on the training set; kernel_options is then keyed by kernel name.
    device: "auto" (CUDA when present), "cpu", "cuda", "cuda:1", ...
    smoothing: BLEU* smoothing ("none", "epsilon", "add1", "exp"); None for the default, add1.
    weights: bleu kernel weights per n-gram order from 1 (1 to 4, summing to 1), e.g. BLEU-4's
        (0.25, 0.25, 0.25, 0.25); None for BLEU*'s (0, 1/3, 1/3, 1/3).
    tokenizer: "whitespace", "13a", "chars", or a Hugging Face tokenizer name or path.
    allow_download: let a Hugging Face tokenizer or model come from the hub (else only local
        folders and the cache); a folder's own code never runs either way.
    kernel_options: keyword arguments of the kernel (e.g. model/layer for BERTScore).
    memory_budget: bytes of tile working memory; None sizes it from the device.
    chunk_size: candidates per chunk; None derives it from the budget. Results never depend on it.
    progress: show a progress bar on stderr for long predictions.
    score_range: (low, high) every training score must lie in; None accepts any finite score.
    level: nominal coverage of the interval [low, high] `predict` gives with each estimate
        (conformal prediction on the training set's exact leave-one-out residuals, scaled by
        the neighbours' spread; `core/conformal.py` states the guarantee).
    outside_level: the share of texts from the training distribution that may be flagged
        `outside` (`core/outside.py`: a conformal outlier test of how ordinary a text's words
        are, `text/typicality.py`, and how similar its nearest training text is).
    negatives: the estimate of a covered text flagged outside: "lowest_decile" (the mean of
        the training set's lowest tenth of scores), "minimum" (the score range's low end) or
        "none" (its neighbours' estimate); its interval is the whole score range either way.
    Defaults, types and ranges are declared once, in `core.validation.SCORER_PARAMETERS`.
    """

    def __init__(
        self,
        kernel: str | None = DEFAULTS["kernel"],
        tau: float | None = DEFAULTS["tau"],
        min_neighbors: int | None = DEFAULTS["min_neighbors"],
        max_fraction: float | None = DEFAULTS["max_fraction"],
        thresholds: str = DEFAULTS["thresholds"],
        estimator: str | None = DEFAULTS["estimator"],
        weighting: str | None = DEFAULTS["weighting"],
        power: float | None = DEFAULTS["power"],
        top_k: int | None = DEFAULTS["top_k"],
        penalty: float | None = DEFAULTS["penalty"],
        kernels: Sequence[str] = DEFAULTS["kernels"],
        device: str | torch.device = DEFAULTS["device"],
        smoothing: str | None = DEFAULTS["smoothing"],
        weights: Sequence[float] | None = DEFAULTS["weights"],
        tokenizer: str | Tokenizer = DEFAULTS["tokenizer"],
        lowercase: bool = DEFAULTS["lowercase"],
        allow_download: bool = DEFAULTS["allow_download"],
        kernel_options: Mapping[str, Any] | None = DEFAULTS["kernel_options"],
        memory_budget: int | None = DEFAULTS["memory_budget"],
        chunk_size: int | None = DEFAULTS["chunk_size"],
        progress: bool = DEFAULTS["progress"],
        score_range: tuple[float, float] | None = DEFAULTS["score_range"],
        level: float = DEFAULTS["level"],
        negatives: str = DEFAULTS["negatives"],
        outside_level: float = DEFAULTS["outside_level"],
    ) -> None:
        self.kernel = kernel
        self.tau = tau
        self.min_neighbors = min_neighbors
        self.max_fraction = max_fraction
        self.thresholds = thresholds
        self.estimator = estimator
        self.weighting = weighting
        self.power = power
        self.top_k = top_k
        self.penalty = penalty
        self.kernels = kernels
        self.device = device
        self.smoothing = smoothing
        self.weights = weights
        self.tokenizer = tokenizer
        self.lowercase = lowercase
        self.allow_download = allow_download
        self.kernel_options = kernel_options
        self.memory_budget = memory_budget
        self.chunk_size = chunk_size
        self.progress = progress
        self.score_range = score_range
        self.level = level
        self.negatives = negatives
        self.outside_level = outside_level

    # -- fitting -------------------------------------------------------------------------

    @_library_threads
    def fit(
        self,
        texts: Sequence[str],
        scores: Sequence[float] | np.ndarray,
        tune: bool | None = None,
        min_coverage: float = DEFAULT_MIN_COVERAGE,
    ) -> NeighborsScorer:
        """Validate the training set and encode it once with the kernel; returns self.

        tune: choose tau, a and b (and p, or k and p for topk) on this training set alone
        (inner leave-one-out over a grid, highest Spearman with coverage >= min_coverage; see
        `tuning.py`); None follows `thresholds`, True and False force it. The values used are
        `thresholds_` (`tau_`, `min_neighbors_`, `max_fraction_`, `power_`, `top_k_`);
        `tuning_` says how they were chosen. With kernel="auto", `selection_` holds each
        kernel's inner leave-one-out rho and the best one is kept. All or nothing: a fit that
        raises leaves the scorer as it was (fitted on the earlier data, or unfitted).
        """
        before = dict(self.__dict__)
        try:
            return self._fit(texts, scores, tune, min_coverage)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(before)
            raise

    def _fit(self, texts: Sequence[str], scores: Sequence[float] | np.ndarray, tune: bool | None,
             min_coverage: float) -> NeighborsScorer:
        validate_parameters({**self.get_params(), "min_coverage": min_coverage})
        self._warn_unused_settings()
        texts = _validate_texts(texts, "training texts")
        quality = _validate_scores(scores, len(texts), self.score_range)
        if self.kernel_name == AUTO_KERNEL:
            return self._fit_auto(texts, quality, tune, min_coverage)
        self.device_ = resolve_device(self.device)
        self.kernel_ = self.make_kernel()
        self.kernel_.fit(texts)
        self._check_against_training_set(texts)
        self.tau_ = float(self.kernel_.default_tau if self.tau is None else self.tau)
        self.train_scores_ = quality
        self._quality = Quality.encode(torch.as_tensor(quality, dtype=torch.float64, device=self.device_),
                                       text_checksums(texts))
        # `canonical_order`, read off the tie ranks Quality made from it: samples of the training
        # set draw from it, and calibration splits its texts in it, so the same texts and the same
        # split whatever order the training set came in.
        self._canonical = np.argsort(self._quality.tie_rank.cpu().numpy())
        self._qualities: TransientCache[torch.device, Quality] = TransientCache()
        self._streams: TransientCache[tuple[int, torch.device], torch.Generator] = TransientCache()
        weighted = self._weighting() == "similarity" and self._estimator() != "ridge"
        self._use(Thresholds(
            self.tau_,
            PAPER_MIN_NEIGHBORS if self.min_neighbors is None else self.min_neighbors,
            PAPER_MAX_FRACTION if self.max_fraction is None else self.max_fraction,
            (DEFAULT_POWER if self.power is None else float(self.power)) if weighted else 0.0,
            self._estimator(),
            min(self.top_k or DEFAULT_TOP_K, len(texts)) if self._estimator() == "topk" else None,
            self.penalty,
        ))
        self.tuning_: tuning.TuningResult | None = None
        self.selection_: dict[str, float] | None = None
        self.ridge_: kernel_ridge.KernelRidge | None = None
        self._ridge_sample: np.ndarray | None = None
        sample_pass = None
        if self._tunes(len(texts), tune):
            # One similarity pass over the training set; the tau it was fitted with joins the grid.
            sample_pass = self._tuning_pass(texts)
            self.tuning_ = tuning.tune(
                sample_pass[1], grid=self.tuning_grid(), min_coverage=min_coverage,
                default_tau=self.tau_, estimator=self._estimator(), base=self.thresholds_,
            )
            self._use(self.tuning_.thresholds)
            if not self.tuning_.spearman > 0:
                warn(f"tuning found no setting whose leave-one-out estimates rank the training texts as "
                     f"their scores do (best Spearman rho {self.tuning_.spearman:.2f}): on this training set the "
                     "estimates say nothing about quality; check that each score belongs to its text, or try "
                     "another kernel")
        if self.estimator_ == "ridge":
            self._fit_ridge(sample_pass or self._tuning_pass(texts))
        self.typicality_ = Typicality(texts, self.kernel_.tokenizer, self.device_)
        self.calibration_ = self._calibrate(texts)
        return self

    def _fit_ridge(self, sample_pass: tuple[np.ndarray | None, PairwiseSimilarities]) -> None:
        """Kernel ridge on the training set (above MAX_TUNING_TEXTS texts, on the tuning pass's
        seeded sample of them: the other texts' dual weights are zero), at the tuned or given
        penalty, else at the one exact leave-one-out chooses."""
        sample, similarities = sample_pass
        everything = np.arange(len(similarities))
        model = similarities.ridge(everything, self.penalty_)
        self._ridge_loo = kernel_ridge.leave_one_out_prediction(model.loo, similarities.similar_counts(everything))
        if sample is not None:
            alpha = np.zeros(self.num_train)
            alpha[sample] = model.alpha
            model = replace(model, alpha=alpha)
        self.ridge_, self._ridge_sample = model, sample
        self.penalty_: float | None = model.penalty
        self._ridge_weights: TransientCache[torch.device, kernel_ridge.RidgeWeights] = TransientCache()

    def _calibrate(self, texts: list[str]) -> conformal.Calibration:
        """Exact leave-one-out of the calibration texts (all training texts, or a seeded sample
        of them when there are many), each scored by every other training text through the tile
        loop with the settings `predict` uses; their residuals calibrate the intervals."""
        if self.estimator_ == "ridge":
            return self._calibrate_ridge(texts)
        sample = conformal.calibration_sample(self._canonical)
        own = torch.as_tensor(sample, dtype=torch.int64, device=self.device_)
        encode: Callable[[int, int], Any]
        if sample.size == len(texts):  # every training text: the kernel's encoding of them, made by fit
            encode = self.kernel_.encode_train
        else:
            chosen = [texts[index] for index in sample]
            encode = lambda first, last: self.kernel_.encode(chosen[first:last])  # noqa: E731
        prediction = self._pass(encode, len(sample), own=own, progress=False)[0].numpy()
        self.outside_ = self._outside_rule(texts, sample, prediction.nearest)
        return self._calibration(sample, prediction.scores, prediction.std)

    def _outside_rule(self, texts: list[str], sample: np.ndarray, nearest: np.ndarray | None) -> OutsideRule:
        """The outlier test calibrated on the leave-one-out statistics of calibration texts
        `sample` (their nearest similarities, each without itself), with the estimate and the
        interval bounds a flagged text gets."""
        if nearest is None:
            nearest = self._nearest_without_own(texts, sample)
        statistics = np.column_stack([self.typicality_.of_texts(texts, own=True).cpu().numpy()[sample],
                                      np.where(np.isfinite(nearest), nearest, np.nan)])
        test = OutlierTest.fit(statistics, LOW_IS_ATYPICAL + (True,))
        low, high = self.score_range or (float(self.train_scores_.min()), float(self.train_scores_.max()))
        negative = {"lowest_decile": lowest_decile_mean(self.train_scores_), "minimum": float(low)}.get(self.negatives)
        return OutsideRule(test, self.outside_level, negative, (float(low), float(high)))

    def _nearest_without_own(self, texts: list[str], sample: np.ndarray) -> np.ndarray:
        """Each of training texts `sample`'s highest similarity to another training text."""
        chosen = [texts[index] for index in sample]
        own = torch.as_tensor(sample, dtype=torch.int64, device=self.device_)
        reduction = conformal.WithoutOwn(NearestReduction(len(sample), self.device_), own)
        nearest = self._reduce(lambda first, last: self.kernel_.encode(chosen[first:last]), len(sample),
                               self._plan(), reduction, progress=False)
        return nearest.cpu().numpy()

    def _calibration(self, texts: np.ndarray, estimates: np.ndarray, spreads: np.ndarray) -> conformal.Calibration:
        """`Calibration.fit` on the leave-one-out results of training texts `texts` (positions),
        handed over in the canonical order, where its seeded split cuts the same halves whatever
        order the training set came in."""
        ranks = np.empty(self.num_train, dtype=np.int64)
        ranks[self._canonical] = np.arange(self.num_train)
        arranged = np.argsort(ranks[texts])
        return conformal.Calibration.fit(estimates[arranged], spreads[arranged], self.train_scores_[texts][arranged])

    def _calibrate_ridge(self, texts: list[str]) -> conformal.Calibration:
        """Ridge intervals from exact closed-form leave-one-out residuals (constant width: the
        model has no spread); where it was fitted on a sample, from its estimates of the training
        texts outside the sample, which it never saw."""
        if self._ridge_sample is None:
            chosen = conformal.calibration_sample(self._canonical)
            estimates = self._ridge_loo.scores[chosen]
        else:
            chosen = conformal.calibration_sample(self._canonical[~np.isin(self._canonical, self._ridge_sample)])
            encode = lambda first, last: self.kernel_.encode([texts[index] for index in chosen[first:last]])  # noqa: E731
            estimates = self._pass(encode, chosen.size, progress=False)[0].scores.cpu().numpy()
        self.outside_ = self._outside_rule(texts, chosen, None)
        return self._calibration(chosen, estimates, conformal.difficulty("ridge", estimates))

    def _check_against_training_set(self, texts: list[str]) -> None:
        """Refuse settings that cannot work on this training set and the fitted kernel, and warn
        about duplicate texts (each copy is the other's neighbour, so leave-one-out flatters)."""
        if self.tau is not None and self.kernel_.bounded and not 0 <= self.tau <= 1:
            requirement = f"in [0, 1] for the {self.kernel_name} kernel (its similarities lie there)"
            raise ParameterError(SCORER_PARAMETERS["tau"], self.tau, requirement)
        if self._estimator() == "ridge" and len(texts) < 2:
            requirement = f"topk or threshold for {len(texts)} training text (kernel ridge fits on at least 2)"
            raise ParameterError(SCORER_PARAMETERS["estimator"], "ridge", requirement)
        needed = PAPER_MIN_NEIGHBORS if self.min_neighbors is None else self.min_neighbors
        if self._estimator() == "threshold" and needed > len(texts):
            if self.min_neighbors is not None:
                requirement = (f"at most the {len(texts)} training texts, or no text could ever "
                               "have enough neighbours for an estimate")
                raise ParameterError(SCORER_PARAMETERS["min_neighbors"], needed, requirement)
            warn(f"{len(texts)} training texts are fewer than the {needed} neighbours an "
                 "estimate needs (min_neighbors): every estimate will be undefined")
        duplicates = len(texts) - len(set(texts))
        if duplicates:
            warn(
                f"{duplicates} of the {len(texts)} training texts repeat another one: in "
                "leave-one-out (evaluate, crossval, tuning) each copy is the other's nearest "
                "neighbour, which flatters coverage and agreement; deduplicate the training set")

    def tuning_grid(self) -> tuning.TuningGrid:
        """What tuning searches for these settings: p only under similarity weighting (and
        only when not given), k only for topk (and only when not given)."""
        if self._weighting() == "uniform":
            powers: tuple[float, ...] = tuning.UNIFORM_POWERS
        else:
            powers = tuning.SIMILARITY_POWERS if self.power is None else (float(self.power),)
        top_ks = tuning.DEFAULT_TOP_KS if self.top_k is None else (self.top_k,)
        return tuning.TuningGrid(powers=powers, top_ks=top_ks)

    def _warn_unused_settings(self) -> None:
        """A warning for each setting given that the estimator used never reads (the threshold
        rule's tau, a and b under topk or ridge, k outside topk, lambda outside ridge, p where
        nothing is weighted, the kernel list outside kernel="auto"): silently ignoring it would
        let a user believe it shaped the estimates."""
        estimator = self._estimator()
        unread = {
            "tau": estimator != "threshold", "min_neighbors": estimator != "threshold",
            "max_fraction": estimator != "threshold", "top_k": estimator != "topk",
            "penalty": estimator != "ridge", "weighting": estimator == "ridge",
            "power": estimator == "ridge" or self._weighting() != "similarity",
        }
        for name, ignored in unread.items():
            if ignored and getattr(self, name) is not None:
                warn(f"{name} ({SCORER_PARAMETERS[name].flag}) = {getattr(self, name)!r} is not read by the "
                     f"{estimator} estimator (threshold reads tau, a and b; topk k; ridge lambda; p weights "
                     "threshold and topk): it changes no estimate")
        if self.kernel != AUTO_KERNEL and tuple(self.kernels) != tuple(SCORER_PARAMETERS["kernels"].default):
            warn(f"kernels ({SCORER_PARAMETERS['kernels'].flag}) = {','.join(self.kernels)} is read only with "
                 "kernel 'auto': it changes no estimate")

    def _weighting(self) -> str:
        if self.weighting is not None:
            return self.weighting
        return "uniform" if self._estimator() == "threshold" else "similarity"

    def _estimator(self) -> str:
        """The estimator used: as given; by default the kernel's (`Kernel.default_estimator`:
        topk, an estimate for every text with any similar training text; ridge for BERTScore),
        unless the paper's rule is asked for (thresholds="paper", or tau, min_neighbors or
        max_fraction given), which keeps the paper's threshold rule."""
        if self.estimator is not None:
            return self.estimator
        if self._asks_for_paper_rule():
            return "threshold"
        return kernel_class(self.kernel_name).default_estimator if self.kernel_name in KERNEL_NAMES else "topk"

    def _asks_for_paper_rule(self) -> bool:
        return self.thresholds == "paper" or any(
            value is not None for value in (self.tau, self.min_neighbors, self.max_fraction)
        )

    @property
    def kernel_name(self) -> str:
        """The kernel used: as given; by default (kernel=None) tfidf, the TF-IDF cosine (with
        its default estimator it measured level with the TF-IDF + ridge baseline on every
        development set, bench/quality.md), unless a setting of the paper's method is given --
        its rule (thresholds="paper", tau, min_neighbors, max_fraction, estimator="threshold")
        or a BLEU* setting (smoothing, weights, a tokenizer other than whitespace, lowercase,
        kernel_options: keyword arguments of the kernel kernel=None used to mean) -- which keeps
        the paper's BLEU*: what kernel=None meant before, so those calls give the same numbers as
        ever and the token-id path keeps its kernel."""
        if self.kernel is not None:
            return self.kernel
        bleu_settings = (
            any(getattr(self, name) is not None for name in BLEU_ONLY)
            or self.tokenizer != DEFAULTS["tokenizer"]
            or self.lowercase
            or bool(self.kernel_options)
        )
        paper = self._asks_for_paper_rule() or self.estimator == "threshold" or bleu_settings
        return PAPER_KERNEL if paper else DEFAULT_KERNEL

    def _tunes(self, num_texts: int, tune: bool | None) -> bool:
        """Whether `fit` tunes: as forced by `tune`, else as `thresholds` says (auto: when no
        setting the estimator uses was given and the training set is big enough)."""
        if tune is not None:
            return tune
        if self.tunes(num_texts):
            return True
        if self.thresholds == "auto" and not self._given() and num_texts < MIN_TUNING_TEXTS:
            warn(
                f"{num_texts} training texts are fewer than {MIN_TUNING_TEXTS}: too few to tune the "
                f"settings on, so the {'paper' if self.estimator_ == 'threshold' else 'default'}'s "
                f"are used ({self.signature})")
        return False

    def tunes(self, num_texts: int) -> bool:
        """Whether `fit` on `num_texts` texts tunes by default: `thresholds="tuned"`, or "auto"
        with no setting the estimator uses given and at least MIN_TUNING_TEXTS texts.
        Protocols that fit one pass use it to tune inside each training split instead."""
        if self.thresholds != "auto":
            return self.thresholds == "tuned"
        return not self._given() and num_texts >= MIN_TUNING_TEXTS

    def _given(self) -> bool:
        """Whether a setting the estimator uses was given (then `auto` keeps the settings)."""
        estimator = self._estimator()
        if estimator == "ridge":
            return self.penalty is not None
        given = [self.power] + (
            [self.top_k] if estimator == "topk" else [self.tau, self.min_neighbors, self.max_fraction]
        )
        return any(value is not None for value in given)

    def _tuning_pass(self, texts: list[str]) -> tuple[np.ndarray | None, PairwiseSimilarities]:
        """The training set's one similarity pass for tuning (and the ridge fit), with the
        sample it covers: all texts (None), or above MAX_TUNING_TEXTS texts a seeded random sample
        of that many, fitted alone (its [n x n] matrix must fit in memory)."""
        if self.num_train <= MAX_TUNING_TEXTS:
            return None, self.training_pass()
        warn(
            f"tuning on a random sample of {MAX_TUNING_TEXTS} of the {self.num_train} training texts "
            "(a and b are chosen for a training set of that size)")
        sample = canonical_sample(self._canonical, MAX_TUNING_TEXTS, seed=0)
        clone = NeighborsScorer(**{**self.get_params(), "kernel": self.kernel_name, "thresholds": "paper"})
        clone.fit([texts[index] for index in sample], self.train_scores_[sample], tune=False)
        return sample, clone.training_pass()

    def _use(self, chosen: Thresholds) -> None:
        self.tau_, self.min_neighbors_, self.max_fraction_ = chosen.tau, chosen.min_neighbors, chosen.max_fraction
        self.power_, self.estimator_, self.top_k_ = chosen.power, chosen.estimator, chosen.top_k
        self.penalty_ = chosen.penalty

    def _fit_auto(
        self, texts: list[str], quality: np.ndarray, tune: bool | None, min_coverage: float
    ) -> NeighborsScorer:
        """kernel="auto": fit a scorer per kernel of `kernels` (each tuned as `fit` would), keep
        the one whose inner leave-one-out rho on this training set is highest (ties: the first)."""
        unknown = [name for name in self.kernels if name not in KERNEL_NAMES]
        if unknown:
            raise ValueError(
                f"kernels: unknown kernel {', '.join(map(repr, unknown))}; choose from {', '.join(KERNEL_NAMES)}"
            )
        options = dict(self.kernel_options or {})
        stray = sorted(set(options) - set(self.kernels))
        if stray:
            raise ValueError(
                f"with kernel='auto', kernel_options maps kernel names to their options; {stray} "
                f"are not among kernels={tuple(self.kernels)}"
            )
        params = self.get_params()
        selection: dict[str, float] = {}
        best: NeighborsScorer | None = None
        for name in dict.fromkeys(self.kernels):
            settings = {**params, "kernel": name, "kernel_options": options.get(name),
                        "kernels": SCORER_PARAMETERS["kernels"].default}  # read by this auto fit, not by each kernel's
            if name != "bleu":
                settings.update({option: None for option in BLEU_ONLY if option in settings})
            candidate = NeighborsScorer(**settings).fit(texts, quality, tune=tune, min_coverage=min_coverage)
            selection[name] = candidate.inner_spearman()
            if best is None or selection[name] > selection[best.kernel_name]:
                best = candidate
        assert best is not None  # kernels is never empty (validated)
        self.__dict__.update({key: value for key, value in vars(best).items() if key.endswith("_") or key.startswith("_")})
        self.selection_ = selection
        return self

    def inner_spearman(self) -> float:
        """rho of this fitted scorer on its own training set by leave-one-out: the tuning's
        inner figure when it was tuned, else leave-one-out at its settings (-inf if undefined)."""
        self._check_fitted()
        if self.tuning_ is not None:
            rho = self.tuning_.spearman
        else:
            prediction = self.leave_one_out()
            rho = float(spearman_rows(np.where(prediction.covered, prediction.scores, np.nan), self.train_scores_)[0])
        return rho if np.isfinite(rho) else -np.inf

    @_library_threads
    def fit_pairwise(
        self, texts: Sequence[str], scores: Sequence[float] | np.ndarray
    ) -> PairwiseSimilarities:
        """Fit on all items (never tuned: protocols tune inside their splits, see `tunes`) and
        run the kernel over every pair, once: the pass that evaluation protocols cut their
        splits from."""
        self.fit(texts, scores, tune=False)
        return self.splits_pass()

    def splits_pass(self) -> PairwiseSimilarities:
        """`training_pass`, for protocols that cut splits from it (cross-validation, curves,
        sweeps): warns where the kernel's similarities depend on the whole training set."""
        if self.kernel_.depends_on_training_set:
            warn(
                f"the {self.kernel_name} kernel's similarities depend on the whole training set "
                f"({self.signature}): splits cut from one pass see idf weights or a baseline "
                "computed on all items, so they approximate refitting on each split")
        return self.training_pass()

    def training_pass(self) -> PairwiseSimilarities:
        """The one all-pairs similarity pass of the fitted training set (what evaluation
        protocols and tuning cut their splits from)."""
        return PairwiseSimilarities(self.train_similarity(), self.train_scores_,
                                    text_checksums(self.kernel_.train_texts))

    def make_kernel(self) -> Kernel[Any]:
        """A new, unfitted kernel with this scorer's settings (validated) on its device: what
        `fit` encodes the training set with, and what all-pairs jobs run the tile loop on."""
        validate_parameters(self.get_params(), SCORER_PARAMETERS)
        options = dict(self.kernel_options or {})
        for name in ("smoothing", "weights"):
            value = getattr(self, name)
            if value is not None:
                if self.kernel_name != "bleu":
                    raise ValueError(f"{name} applies to the bleu kernel only, not {self.kernel_name!r}")
                options[name] = value
        cls = kernel_class(self.kernel_name)
        if self.kernel_name == "bertscore" and self.allow_download:
            options.setdefault("allow_download", True)
        tokenizer = make_tokenizer(self.tokenizer, self.lowercase, self.allow_download)
        try:
            return cls(tokenizer=tokenizer, device=resolve_device(self.device), **options)
        except TypeError as error:
            raise ValueError(f"bad kernel_options for {self.kernel_name!r}: {error}") from None

    def get_params(self) -> dict[str, Any]:
        """The constructor's settings, by name (as scikit-learn's `get_params`)."""
        return {name: getattr(self, name) for name in SCORER_PARAMETERS}

    def _check_fitted(self) -> None:
        check_is_fitted(self)

    # -- prediction ----------------------------------------------------------------------

    @_library_threads
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
        if isinstance(return_neighbors, bool) or not isinstance(return_neighbors, int) or return_neighbors < 1:
            raise ValueError(f"return_neighbors must be a positive integer or None, not {return_neighbors!r}")
        encode, rows, plan, statistics = self._candidate_chunks(candidates)
        prediction, top = self._pass(encode, rows, plan=plan, neighbors=min(return_neighbors, self.num_train))
        assert top is not None  # asked for
        prediction = self._judge(prediction, statistics)
        return replace(self._with_intervals(prediction.numpy()), neighbors=top.neighbors(self._quality.raw))

    def _with_intervals(self, prediction: Prediction) -> Prediction:
        """`prediction` with each estimate's conformal interval at `level` (clipped to
        score_range, where the truth lies)."""
        outside = None if prediction.outside is None else torch.from_numpy(prediction.outside)
        low, high = self._intervals_of(torch.from_numpy(prediction.scores), torch.from_numpy(prediction.std), outside)
        return replace(prediction, low=low.numpy(), high=high.numpy())

    def intervals(self, prediction: TensorPrediction) -> tuple[torch.Tensor, torch.Tensor]:
        """(low, high) of `predict_tensors`' estimates at `level`, as `predict` gives them, left
        on the estimates' device with no host synchronisation (training loops, metrics)."""
        self._check_fitted()
        return self._intervals_of(prediction.scores, prediction.std, prediction.outside)

    def _intervals_of(self, scores: torch.Tensor, std: torch.Tensor,
                      outside: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Conformal intervals; a text flagged outside gets the whole score range."""
        bounds = None if self.score_range is None else (float(self.score_range[0]), float(self.score_range[1]))
        low, high = self.calibration_.interval_tensors(scores, conformal.difficulty(self.estimator_, std), self.level, bounds)
        return (low, high) if outside is None else self.outside_.widen(low, high, outside)

    def _judge(self, prediction: TensorPrediction, statistics: torch.Tensor) -> TensorPrediction:
        """`prediction` with its `outside` flags (from the candidates' typicality `statistics`
        and their nearest similarities, on their device) and the negative evidence's estimate
        for covered flagged texts. The nearest similarity is to the whole training set, even when
        a subsample makes the estimates (rewards): the test was calibrated on the whole set."""
        assert prediction.nearest is not None  # every pass finds it
        nearest = prediction.nearest.masked_fill(torch.isinf(prediction.nearest), float("nan"))
        values = torch.cat([statistics.to(nearest.device), nearest[:, None]], dim=1)
        outside = self.outside_.flags(values)
        scores = self.outside_.estimates(prediction.scores, prediction.covered, outside)
        return replace(prediction, scores=scores, outside=outside)

    @_library_threads
    def prepare(self, candidates: Sequence[str]) -> PreparedCandidates:
        """The host half of `predict`: candidates checked and encoded by the kernel, chunk by
        chunk of the tile plan, for a later `predict`. A reader thread can prepare the next
        batch while this one is scored (the kernels' encoding only reads what `fit` built)."""
        self._check_fitted()
        texts = _validate_texts(candidates, "candidates", allow_empty=True)
        plan = self._plan()
        chunks = {(first, last): self.kernel_.encode(texts[first:last]) for first, last in plan.chunks(len(texts))}
        return PreparedCandidates(len(texts), plan, chunks, self.typicality_.of_texts(texts))

    def _candidate_chunks(
        self, candidates: Sequence[str] | PreparedCandidates
    ) -> tuple[Callable[[int, int], Any], int, TilePlan | None, torch.Tensor]:
        """(encoding of candidates first..last-1, how many there are, the plan they were
        encoded for: None means any, their typicality statistics)."""
        if isinstance(candidates, PreparedCandidates):
            return candidates.encoded, candidates.size, candidates.plan, candidates.statistics
        texts = _validate_texts(candidates, "candidates", allow_empty=True)
        encode = lambda first, last: self.kernel_.encode(texts[first:last])  # noqa: E731
        return encode, len(texts), None, self.typicality_.of_texts(texts)

    @_library_threads
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

    @_library_threads
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
        _validate_ids(input_ids, attention_mask)
        device = input_ids.device
        plan = self._plan()
        budget = self.memory_budget or default_memory_budget(device)
        plan = replace(plan, chunk_rows=max(1, min(plan.chunk_rows, budget // self.kernel_.id_row_bytes())))
        quality = self._quality_on(device)

        def encode(first: int, last: int) -> Any:
            mask = None if attention_mask is None else attention_mask[first:last]
            return self.kernel_.encode_ids(input_ids[first:last], mask)

        prediction = self._pass(encode, input_ids.shape[0], subset=subset, plan=plan, quality=quality, progress=False)[0]
        return self._judge(prediction, self.typicality_.of_ids(input_ids, attention_mask))

    @_library_threads
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
        interval, the score range's minimum), so a policy is never paid for degenerate text. Against reward hacking the paper advises a large training set subsampled at every
        evaluation, so a policy cannot learn the n-grams of a few good texts: `subsample` scores
        each call against a fresh random fraction of the training set (`draw_subset`; the ridge
        estimator sums only that fraction's terms, scaled up, `kernel_ridge.RidgeReduction`)."""
        return self.rewarded(inputs, undefined, subsample, seed, attention_mask, outside)[0]

    @_library_threads
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
        fill = float(np.mean(self.train_scores_)) if undefined is None else _finite(undefined, "undefined")
        device = inputs.device if isinstance(inputs, torch.Tensor) else self.device_
        subset = None if subsample is None else self.draw_subset(subsample, seed, device)
        penalty = self.outside_.bounds[0] if outside is None else _finite(outside, "outside")
        prediction = self.predict_tensors(inputs, subset, attention_mask)
        assert prediction.outside is not None  # every prediction is judged
        rewards = torch.where(prediction.covered, prediction.scores, fill)
        return torch.where(prediction.outside, penalty, rewards).to(REWARD_DTYPE), prediction

    def subset_size(self, fraction: float, seed: int) -> int:
        """How many training texts a subsample of `fraction` keeps; ValueError where the
        fraction or seed is no such thing or too few texts would be kept (checked when a
        reward function is made, and at each draw)."""
        self._check_fitted()
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise ValueError(f"subsample must be a fraction in (0, 1], not {fraction!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, not {seed!r}")
        size = round(fraction * self.num_train)
        fewest = self.min_neighbors_ if self.estimator_ == "threshold" else 1
        if size < fewest:
            raise ValueError(
                f"subsample={fraction} keeps {size} of {self.num_train} training texts, fewer than "
                f"{'min_neighbors=' if self.estimator_ == 'threshold' else ''}{fewest}: no estimate could ever be defined"
            )
        return size

    def draw_subset(self, fraction: float, seed: int, device: torch.device) -> TrainingSubset:
        """A fresh random subset of round(fraction * |S|) training texts, drawn on `device`.

        Texts outside it are masked out of the fitted neighbour model and the b |S| bound uses
        its size, so nothing is refitted. Subsets come from one random stream per (seed, device)
        kept by this scorer until it is refitted: the k-th call with a seed draws the same subset
        in every run."""
        size = self.subset_size(fraction, seed)
        key = (seed, device)
        if key not in self._streams:
            self._streams[key] = torch.Generator(device=device).manual_seed(seed)
        chosen = torch.randperm(self.num_train, generator=self._streams[key], device=device)[:size]
        mask = torch.zeros(self.num_train, dtype=torch.bool, device=device).index_fill_(0, chosen, True)
        return TrainingSubset(mask=mask, size=size)

    @_library_threads
    def leave_one_out(self) -> Prediction:
        """Each training text scored by all the others (the paper's protocol): the training set
        against itself with the diagonal masked, not |S| refits. Ridge: the exact closed form
        (and, fitted on a sample, the estimates of the texts outside it)."""
        self._check_fitted()
        prediction = self._pass(self.kernel_.encode_train, self.num_train, leave_one_out=True)[0]
        if self.ridge_ is not None:
            prediction = self._ridge_leave_one_out(prediction)
        statistics = self.typicality_.of_texts(self.kernel_.train_texts, own=True)
        return self._judge(prediction, statistics).numpy()

    def _ridge_leave_one_out(self, prediction: TensorPrediction) -> TensorPrediction:
        """The exact closed-form leave-one-out made at fit from the training pass, for the texts
        that pass held (all, or its sample); `prediction`'s (the pass with the diagonal masked)
        for the texts outside the sample (dual weight zero, so never seen by the model)."""
        device = prediction.scores.device
        exact = self._ridge_loo
        if self._ridge_sample is None:
            return replace(prediction, scores=torch.as_tensor(exact.scores, device=device),
                           num_neighbors=torch.as_tensor(exact.num_neighbors, device=device),
                           std=torch.as_tensor(exact.std, device=device), covered=torch.as_tensor(exact.covered, device=device))
        sample = torch.as_tensor(self._ridge_sample, device=device)
        scores = prediction.scores.index_copy(0, sample, torch.as_tensor(exact.scores, device=device))
        return replace(prediction, scores=scores, covered=torch.isfinite(scores))

    @_library_threads
    def similarity(self, candidates: Sequence[str]) -> torch.Tensor:
        """All kernel similarities [len(candidates), |S|], float64 on the CPU."""
        self._check_fitted()
        texts = _validate_texts(candidates, "candidates", allow_empty=True)
        return self._similarity(lambda first, last: self.kernel_.encode(texts[first:last]), len(texts))

    @_library_threads
    def train_similarity(self) -> torch.Tensor:
        """The training set against itself [|S|, |S|], float64 on the CPU, diagonal included:
        one pass from which sweeps over tau, a and b (leave-one-out) need no kernel work."""
        self._check_fitted()
        return self._similarity(self.kernel_.encode_train, self.num_train)

    @property
    def num_train(self) -> int:
        self._check_fitted()
        return self.kernel_.num_train

    @property
    def signature(self) -> Signature:
        """Every setting that changes the numbers; `str()` gives the line stored beside outputs."""
        self._check_fitted()
        return Signature(
            self.kernel_.name, tuple(self.kernel_.settings().items()), self.tau_, self.min_neighbors_,
            self.max_fraction_, self.num_train, __version__, estimator=self.estimator_, power=self.power_,
            top_k=self.top_k_, penalty=self.penalty_, tuned=self.tuning_ is not None,
            selection=None if self.selection_ is None else tuple(self.selection_.items()),
            level=self.level, outside=f"{self.outside_level:g},{self.negatives}",
        )

    @property
    def thresholds_(self) -> Thresholds:
        """The settings this scorer predicts with (tuned ones when it was tuned): tau, a, b,
        the weight power p, the estimator and its k."""
        self._check_fitted()
        return Thresholds(
            self.tau_, self.min_neighbors_, self.max_fraction_, self.power_, self.estimator_, self.top_k_,
            self.penalty_,
        )

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
    ) -> tuple[TensorPrediction, TopK | None]:
        """The tile loop over candidate rows 0..rows-1 with the estimator's reduction (neighbour
        statistics, or a running top-k), and with `neighbors` > 0 the top `neighbors` training
        texts of each row from the same tiles; every row's nearest similarity comes with the
        estimates. `own[r]`: row r is that training text, left out of its own neighbours
        (leave-one-out of a sample of the training set)."""
        quality = quality or self._quality
        plan = plan or self._plan()
        nearest = NearestReduction(rows, quality.device, leave_one_out)  # of the whole training set: see _judge

        def ranking(k: int) -> TopKReduction:
            return TopKReduction(rows, k, quality.tie_rank, leave_one_out=leave_one_out, subset=subset)

        def reduce(reduction: Reduction[Result]) -> Result:
            both: Reduction[tuple[Result, torch.Tensor]] = Both(reduction, nearest)
            if own is not None:
                both = conformal.WithoutOwn(both, own)
            return self._reduce(encode, rows, plan, both, progress)[0]

        prediction, shown = self._estimate(reduce, ranking, rows, quality, leave_one_out, subset, neighbors, own)
        return replace(prediction, nearest=nearest.result()), shown

    def _estimate(
        self,
        reduce: Callable[[Reduction[Any]], Any],
        ranking: Callable[[int], TopKReduction],
        rows: int,
        quality: Quality,
        leave_one_out: bool,
        subset: TrainingSubset | None,
        neighbors: int,
        own: torch.Tensor | None,
    ) -> tuple[TensorPrediction, TopK | None]:
        """The estimator's reduction of one pass (`_pass`), and its estimates."""
        if self.estimator_ == "ridge":
            weights = self._ridge_weights_on(quality.device)
            if neighbors:
                estimates, top = reduce(Both(RidgeReduction(rows, weights, leave_one_out, subset),
                                             ranking(neighbors)))
                return estimates, top
            return reduce(RidgeReduction(rows, weights, leave_one_out, subset)), None
        if self.estimator_ == "topk":
            k = int(self.top_k_ or 1)
            top = reduce(ranking(max(k, neighbors)))
            return estimate_topk(top, quality, k, self.power_), top.first(neighbors) if neighbors else None
        counts = NeighborReduction(
            rows, quality, self.tau_, leave_one_out=leave_one_out, subset=subset, power=self.power_
        )
        shown = None
        if neighbors:
            stats, shown = reduce(Both(counts, ranking(neighbors)))
        else:
            stats = reduce(counts)
        num_train = (self.num_train if subset is None else subset.size) - int(leave_one_out or own is not None)
        return estimate_tensors(stats, quality, num_train, self.min_neighbors_, self.max_fraction_), shown

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

    def _ridge_weights_on(self, device: torch.device) -> kernel_ridge.RidgeWeights:
        """The ridge model's dual weights as limbs on `device`, made once per device."""
        assert self.ridge_ is not None
        if device not in self._ridge_weights:
            self._ridge_weights[device] = kernel_ridge.RidgeWeights.of(self.ridge_, device)
        return self._ridge_weights[device]

    def _quality_on(self, device: torch.device) -> Quality:
        """The training q on `device` (token ids may live elsewhere than the scorer)."""
        if device == self.device_:
            return self._quality
        if device not in self._qualities:
            self._qualities[device] = self._quality.to(device)
        return self._qualities[device]


def _progress_bar(total: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="text", dynamic_ncols=True, leave=False)


def _validate_texts(texts: Sequence[str], what: str, allow_empty: bool = False) -> list[str]:
    texts = check_texts(texts, what)
    if not texts and not allow_empty:
        raise ValueError(f"{what}: empty training set; give at least one scored text")
    return texts


def _validate_ids(input_ids: object, attention_mask: object) -> None:
    """Shape and dtype checks only (host metadata), so validation never waits on the device."""
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.Tensor, not {type(input_ids).__name__}")
    if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
        raise TypeError(f"input_ids must hold integer token ids, not {input_ids.dtype}")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, length], got shape {tuple(input_ids.shape)}")
    if attention_mask is None:
        return
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"attention_mask must be a torch.Tensor, not {type(attention_mask).__name__}")
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)}, input_ids "
            f"{tuple(input_ids.shape)}: they must match"
        )
    if attention_mask.device != input_ids.device:
        raise ValueError(
            f"attention_mask is on {attention_mask.device}, input_ids on {input_ids.device}"
        )


def _finite(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number or None, not {value!r}")
    return float(value)


class ScoreError(ValueError):
    """A training score that cannot be used; `index` says which, so callers reading files can
    name the line, and `setting` the parameter that would admit it, named by `explain`."""

    def __init__(self, index: int, reason: str, setting: str | None = None) -> None:
        self.index = index
        self.reason = reason
        self.setting = setting
        super().__init__(f"scores[{index}]: {self.explain(setting)}")

    def explain(self, setting_name: str | None) -> str:
        """The reason, naming `setting` as the caller knows it (the CLI: by its flag)."""
        return self.reason if self.setting is None else f"{self.reason} or set {setting_name}"


def _validate_scores(
    scores: Sequence[float] | np.ndarray, count: int, score_range: tuple[float, float] | None
) -> np.ndarray:
    if isinstance(scores, torch.Tensor):
        scores = scores.detach().cpu().numpy()
    if not (isinstance(scores, np.ndarray) and scores.dtype.kind in "iuf"):
        for index, value in enumerate(scores):  # a string "0.5" would convert silently
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
                raise ScoreError(index, f"{value!r} ({type(value).__name__}) is not a number")
    quality = np.asarray(scores, dtype=np.float64)
    if quality.ndim != 1:
        raise ValueError(f"scores must be one-dimensional, got shape {quality.shape}")
    if quality.size != count:
        raise ValueError(f"{count} training texts but {quality.size} scores: lengths must match")
    bad = np.flatnonzero(~np.isfinite(quality))
    if bad.size:
        raise ScoreError(int(bad[0]), f"{quality[bad[0]]} is not a finite number")
    if score_range is not None:
        low, high = score_range
        outside = np.flatnonzero((quality < low) | (quality > high))
        if outside.size:
            raise ScoreError(
                int(outside[0]),
                f"{quality[outside[0]]:g} is outside the score range [{low:g}, {high:g}]: "
                "rescale the scores (the paper maps them to [0, 1])",
                setting="score_range",
            )
    return quality
