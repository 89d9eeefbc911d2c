"""NeighborsScorer: a kernel, an estimator and intervals, composed (fit on scored texts, predict
unscored ones).

The parts hold their own settings (`kernels/parts.py`, `estimators/`, `intervals.py`); the
scorer holds only the run's (device, memory, progress, the score range), fits the parts on one
training set, and runs every pass (predict, leave-one-out, similarities, token ids, rewards) as
one run of the core tile loop (`core.tiling.reduce_tiles`): the kernel makes the tiles and the
estimator's reduction consumes them, so every kernel and estimator share this one pipeline.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gpu_neighbors import choice, saving
from gpu_neighbors.core import conformal, kernel_ridge, saved, tuning
from gpu_neighbors.core.caller_warnings import warn
from gpu_neighbors.core.correlation import spearman_rows
from gpu_neighbors.core.inputs import PreparedCandidates, ScoreError, validate_scores, validate_texts
from gpu_neighbors.core.neighbours import NearestReduction, Quality, Thresholds, canonical_sample, text_checksums
from gpu_neighbors.core.outside import OutlierTest, OutsideRule
from gpu_neighbors.core.pairwise import DEFAULT_SIMILARITY_ERROR, PairwiseSimilarities
from gpu_neighbors.core.tiling import TransientCache, resolve_device
from gpu_neighbors.core.validation import (
    BOOLEAN,
    DEFAULT_LEVEL,
    DEFAULT_MIN_COVERAGE,
    FIT_PARAMETERS,
    MIN_TUNING_TEXTS,
    SCORER_PARAMETERS,
    check_flag,
    check_path,
    plain,
)
from gpu_neighbors.estimators import Estimator, Ridge, RidgeFit, estimator_part
from gpu_neighbors.estimators.stacking import Stacking, stacked_leave_one_out
from gpu_neighbors.fitted import FittedScorer, library_threads
from gpu_neighbors.fluency import FittedFluency, Fluency, fluency_part, resolved_dtype
from gpu_neighbors.fluency.language import MIN_ENGLISH_SHARE, english_share, is_english
from gpu_neighbors.fluency.part import AUTO_MIN_TEXTS
from gpu_neighbors.fluency.outlier import FLUENCY_ALONE, FLUENCY_LOW_IS_ATYPICAL, WithinLength, estimate_features
from gpu_neighbors.intervals import Intervals
from gpu_neighbors.kernels import kernel_threads
from gpu_neighbors.kernels.parts import Auto, Combined, KernelPart, kernel_part
from gpu_neighbors.text.typicality import TEST_ALONE, TEST_LOW_IS_ATYPICAL, Typicality

__all__ = ["NeighborsScorer", "PreparedCandidates", "ScoreError"]
MAX_TUNING_TEXTS = 4_000  # tuning holds an [n x n] float64 matrix (128 MB here) and its per-tau copies
RUN_SETTINGS = ("device", "memory_budget", "chunk_size", "progress", "score_range", "fluency")


class NeighborsScorer(FittedScorer):
    """Estimate text quality from the known quality of a text's kernel neighbours.

    kernel: a part (`Bleu(smoothing="exp")`, `Tfidf()`, `Rouge()`, `Meteor()`,
        `BertScore(model=..., layer=...)`, `Auto([...])`, `Combined([...])`) or a name for that
        part with its defaults ("bleu", ..., "auto", "combined"); default "auto": tfidf, unless
        bleu or rouge predicts the training scores better by leave-one-out on a sample of 1,000
        training texts by more than the sample's noise (`choice.py`; tfidf below 50 texts).
    estimator: a part (`Threshold(...)`, `Threshold.paper()`, `TopK(k=...)`, `Ridge(...)`) or a
        name for its defaults; None: the kernel's (topk; ridge for bertscore).
    level: nominal coverage of the interval [low, high] `predict` gives with each estimate, or
        an `Intervals` part.
    device: "auto" (CUDA when present), "cpu", "cuda", "cuda:1", ...; memory_budget: bytes of
    tile working memory (None: from the device); chunk_size: candidates per chunk (None: from
    the budget; results never depend on it); progress: a progress bar on stderr;
    score_range: (low, high) every training score must lie in; None accepts any finite score.
    fluency: a language model's judgment beside the neighbours' (`fluency/part.py`,
        docs/fluency.md): "auto" (the offline model where fetched, in the estimate where
        leave-one-out gains beyond noise, from AUTO_MIN_TEXTS = 150 training texts, not run
        where under 3 in 4 of their words are English: `fluency/language.py`), "none", a
        model's path (always used) or a `Fluency` part.
    """

    def __init__(
        self,
        kernel: str | KernelPart | Auto = "auto",
        estimator: str | Estimator | None = None,
        level: float | Intervals = DEFAULT_LEVEL,
        device: str | torch.device = "auto",
        memory_budget: int | None = None,
        chunk_size: int | None = None,
        progress: bool = False,
        score_range: tuple[float, float] | None = (0.0, 1.0),
        fluency: str | os.PathLike[str] | Fluency | None = "auto",
    ) -> None:
        self.kernel = kernel_part(kernel)
        self.estimator = None if estimator is None else estimator_part(estimator)
        self.intervals_part = level if isinstance(level, Intervals) else Intervals(level)
        self.device, self.memory_budget, self.chunk_size = device, memory_budget, chunk_size
        self.progress, self.score_range = progress, score_range
        SCORER_PARAMETERS["fluency"].check(fluency)
        self.fluency = fluency_part(fluency)
        for name in RUN_SETTINGS:
            if name != "fluency":
                SCORER_PARAMETERS[name].check(getattr(self, name))
        self.memory_budget, self.chunk_size, self.progress = plain(memory_budget), plain(chunk_size), plain(progress)
        if score_range is not None and any(isinstance(end, np.generic) for end in score_range):
            self.score_range = (plain(score_range[0]), plain(score_range[1]))

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's settings, by name (as scikit-learn's `get_params`, which
        `sklearn.base.clone` calls with `deep`; the parts hold no nested parameters to expand)."""
        return {"kernel": self.kernel, "estimator": self.estimator, "level": self.intervals_part,
                **{name: getattr(self, name) for name in RUN_SETTINGS}}

    def _estimator(self, kernel: KernelPart | None = None) -> Estimator:
        """The estimator used: as given, else the kernel's default with its default settings."""
        if self.estimator is not None:
            return self.estimator
        part = kernel or self.kernel
        return estimator_part(part.default_estimator if isinstance(part, KernelPart) else "topk")

    # -- fitting -------------------------------------------------------------------------

    @library_threads
    def fit(self, texts: Sequence[str], scores: Sequence[float] | np.ndarray, tune: bool | None = None,
            min_coverage: float = DEFAULT_MIN_COVERAGE) -> NeighborsScorer:
        """Validate the training set, encode it once with the kernel, and fit the estimator and
        the intervals; returns self. tune: choose the estimator's settings on this training set
        alone (inner leave-one-out over its grid, highest Spearman with coverage >=
        min_coverage; `tuning.py`); None follows the estimator's `tuning`. The values used are
        `thresholds_`; `tuning_` says how they were chosen; with `Auto`, `selection_` holds
        each kernel's inner leave-one-out rho on the choice's sample (with `Combined` and no
        weights, each kernel's alone and the chosen sum's; `choice.py`). All or nothing: a fit
        that raises leaves the scorer as it was (fitted on the earlier data, or unfitted)."""
        before = dict(self.__dict__)
        try:
            FIT_PARAMETERS["min_coverage"].check(min_coverage)
            if tune is not None and not BOOLEAN.accepts(tune):  # "no" would tune
                raise ValueError(f"tune must be True, False or None, not {tune!r}")
            texts = validate_texts(texts, "training texts")
            quality = validate_scores(scores, len(texts), self.score_range)
            part, selection = self._choose(texts, quality, tune, min_coverage)
            self._fit(part, texts, quality, tune, min_coverage)
            self.selection_ = selection
            return self
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(before)
            raise

    def _choose(self, texts: list[str], quality: np.ndarray, tune: bool | None, min_coverage: float,
                ) -> tuple[KernelPart, dict[str, float] | None]:
        """The kernel to fit: `Auto`'s choice, a `Combined` kernel with its weights chosen, or
        the part as given; with the choice's figures (`choice.py`)."""
        run = choice.ChoiceRun(resolve_device(self.device), self.memory_budget, self.chunk_size, tune, min_coverage)
        if isinstance(self.kernel, Auto):
            return choice.choose_kernel(self.kernel, self._estimator, texts, quality, run)
        if isinstance(self.kernel, Combined) and self.kernel.weights is None:
            weights, selection = choice.choose_weights(self.kernel, self._estimator(), texts, quality, run)
            return self.kernel.with_weights(weights), selection
        return self.kernel, None

    def _fit(self, part: KernelPart, texts: list[str], quality: np.ndarray, tune: bool | None,
             min_coverage: float) -> NeighborsScorer:
        self._encode(part, self._estimator(part), texts, quality)
        self.estimator_.check_training_set(len(texts), part.name, self.kernel_.bounded)
        _warn_duplicates(texts)
        self._use(self.estimator_.start(self.kernel_.default_tau, len(texts)))
        self.tuning_: tuning.TuningResult | None = None
        self.selection_: dict[str, float] | None = None
        self._ridge: RidgeFit | None = None
        sample_pass = None
        if self._tunes(len(texts), tune):
            # One similarity pass over the training set; the tau it was fitted with joins the grid.
            sample_pass = _tuning_pass(self, texts)
            self.tuning_ = self.estimator_.tune(sample_pass[1], self.thresholds_, min_coverage)
            self._use(self.tuning_.thresholds)
            if not self.tuning_.spearman > 0:
                warn(f"tuning found no setting whose leave-one-out estimates rank the training texts as "
                     f"their scores do (best Spearman rho {self.tuning_.spearman:.2f}): on this training set the "
                     "estimates say nothing about quality; check that each score belongs to its text, or try "
                     "another kernel")
        if isinstance(self.estimator_, Ridge):
            sample, similarities = sample_pass or _tuning_pass(self, texts)
            self._ridge = RidgeFit.fit(sample, similarities, self.penalty_, self.num_train)
            self._use(replace(self.thresholds_, penalty=self._ridge.model.penalty))
        self.calibration_ = self._calibrate(texts)
        return self

    def _encode(self, part: KernelPart, estimator: Estimator, texts: list[str], quality: np.ndarray,
                stored: saved.SavedScorer | None = None) -> None:
        """The parts' fitted state that the training set alone decides (what `load` reads from
        the `stored` scorer, or rebuilds): the kernel's encoding of it, its typicality, and its
        scores as exact limbs with their tie ranks."""
        self.device_ = resolve_device(self.device)
        self.kernel_part_, self.estimator_ = part, estimator
        self.kernel_ = part.build(self.device_)
        self.stacking_: Stacking | None = None
        self.within_: WithinLength | None = None
        self.fluency_selection_: dict[str, Any] | None = None
        if stored is None:
            self.kernel_.fit(texts)
            self.typicality_ = Typicality(texts, self.kernel_.tokenizer, self.device_, self.intervals_part.words)
        else:
            saving.load_encoding(self.kernel_, stored)
            self.typicality_ = saving.typicality_of(stored, self.kernel_.tokenizer, self.device_,
                                                    self.intervals_part.words)
        self.train_scores_ = quality
        self.training_fields_: dict[str, list[Any]] = {}
        self._quality = Quality.encode(torch.as_tensor(quality, dtype=torch.float64, device=self.device_),
                                       text_checksums(texts))
        # `canonical_order`, read off the tie ranks Quality made from it: samples of the training
        # set draw from it, and calibration splits its texts in it, so the same texts and the same
        # split whatever order the training set came in.
        self._canonical = np.argsort(self._quality.tie_rank.cpu().numpy())
        self.fluency_english_: float | None = None
        self.fluency_ = self._resolve_fluency(texts, stored)
        self._qualities: TransientCache[torch.device, Quality] = TransientCache()
        self._draws: TransientCache[int, int] = TransientCache()

    def _resolve_fluency(self, texts: list[str], stored: saved.SavedScorer | None) -> FittedFluency | None:
        """The fluency model this scorer runs: as saved (the same weights, or refused by name),
        else the part's where it can decide (use "auto": from AUTO_MIN_TEXTS texts, and where
        the calibration sample's texts, which the model would read first, are English, a check
        that costs next to nothing: `fluency/language.py`; the share of English words it
        measured is `fluency_english_`). A model named by its path (use "always") always runs."""
        if stored is not None:
            return saving.fluency_of(stored, self.fluency, self.device_)
        part = self.fluency
        if part is None or (part.use == "auto" and len(texts) < AUTO_MIN_TEXTS):
            return None
        files = part.files()
        if files is None:
            return None
        if part.use == "auto":
            share = english_share(texts[index] for index in self.intervals_part.sample(self._canonical))
            self.fluency_english_ = share
            if not is_english(share):
                warn(f"fluency left out (auto means none here): {share:.0%} of the training texts' words are English "
                     f"words (English text: over 90%; under {MIN_ENGLISH_SHARE:.0%} is taken for another language), and "
                     "the language model reads English only, so it was not run. To run a model whatever the "
                     "language, name it: --fluency PATH (fluency=PATH)")
                return None
        return FittedFluency(files, resolved_dtype(part.dtype, self.device_), self.device_)

    def _use(self, chosen: Thresholds) -> None:
        """Predict with `chosen` (also readable one by one: tau_, min_neighbors_, ...)."""
        self.thresholds_ = chosen
        self.tau_: float = chosen.tau
        self.min_neighbors_: int = chosen.min_neighbors
        self.max_fraction_: float = chosen.max_fraction
        self.power_: float = chosen.power
        self.top_k_: int | None = chosen.top_k
        self.penalty_: float | None = chosen.penalty

    def save(self, folder: str | os.PathLike[str], overwrite: bool = False,
             fields: Mapping[str, Sequence[Any]] | None = None) -> Path:
        """Write this fitted scorer to `folder`: scorer.json (its parts' settings and what fit
        chose), tensors.safetensors (what it learned) and training.jsonl -- **its training texts
        and scores: sharing a saved scorer shares its training data**. BERTScore's model is
        referenced by its name or path, never copied. `overwrite` replaces a saved scorer.
        `fields`: labels to keep beside the training texts, one JSON value per text in the order
        fit took them (each text's system, for `systems`' self-check); None keeps those of the
        folder this scorer was loaded from. A loaded scorer has them as `training_fields_`."""
        self._check_fitted()
        check_path("folder", folder)
        check_flag("overwrite", overwrite)  # "no" would replace the saved scorer
        if fields is not None and not isinstance(fields, Mapping):
            raise TypeError(f"fields must be a mapping of names to one value per training text, not "
                            f"{type(fields).__name__}")
        for name, values in (fields or {}).items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                raise TypeError(f"fields[{name!r}] must be a sequence of values, one per training text, not "
                                f"{type(values).__name__}")
        kept = self.training_fields_ if fields is None else {name: list(values) for name, values in fields.items()}
        return saved.write(folder, saving.state_of(self, self.kernel_part_, kept), overwrite)

    @classmethod
    def fitted(cls, scorer: NeighborsScorer | str | os.PathLike[str], device: str | torch.device | None = None,
               ) -> NeighborsScorer:
        """`scorer` if it is a fitted scorer, else the saved scorer in folder `scorer` (on
        `device`, with no downloads: load it yourself to allow them): what training loops,
        metrics and rewards take."""
        if isinstance(scorer, NeighborsScorer):
            scorer._check_fitted()
            return scorer
        if isinstance(scorer, (str, os.PathLike)):
            return cls.load(scorer, device)
        raise TypeError(f"a fitted NeighborsScorer or a saved scorer's folder, not {type(scorer).__name__}")

    @classmethod
    def load(cls, folder: str | os.PathLike[str], device: str | torch.device | None = None,
             allow_download: bool = False, fluency: str | os.PathLike[str] | None = None,
             memory_budget: int | None = None) -> NeighborsScorer:
        """A scorer saved by `save`, on `device` (None: auto), predicting the same bits as the
        scorer that saved it. Nothing in the folder is unpickled or run, and no tokenizer or
        model comes from the hub unless `allow_download` (whatever the folder says); a folder
        that is not a complete, unchanged saved scorer, or whose settings and fitted values are
        not ones `fit` could have made, is refused with the file named (`core/saved.py`,
        `saving.check_saved`). `fluency`: where its fluency model is (a path; None or "auto":
        where it was fitted from); weights other than those it was fitted with are refused by name.
        `memory_budget`: the tiles' working memory in this process (None: the saved scorer's), a
        setting of the run, not the fit, as no result depends on it."""
        SCORER_PARAMETERS["allow_download"].check(allow_download)
        check_path("folder", folder)
        stored = saved.read(folder)
        saving.check_saved(stored)
        settings = saving.constructor_of(stored, allow_download)
        if fluency is not None and str(fluency) != "auto":
            settings["fluency"] = fluency
        if memory_budget is not None:
            settings["memory_budget"] = memory_budget
        scorer = cls(**settings, device="auto" if device is None else device)
        kernel, estimator = saving.fitted_parts(stored, allow_download)
        with kernel_threads(kernel.name):
            scorer._encode(kernel, estimator, stored.texts, saving.training_scores(stored), stored)
        saving.restore(scorer, stored)
        if fluency is not None and str(fluency) not in ("auto", "none") and scorer.stacking_ is None:
            kept = "was fitted without fluency" if scorer.fluency_ is None else "left fluency out of its estimate"
            warn(f"fluency={str(fluency)!r}: this saved scorer {kept}, so no model runs; fit it again with the model "
                 "to use one (--train ... --fluency PATH)")
        scorer.training_fields_ = stored.fields
        scorer._use(scorer.thresholds_)
        return scorer

    @property
    def ridge_(self) -> kernel_ridge.KernelRidge | None:
        """The fitted kernel ridge model (ridge estimator only)."""
        self._check_fitted()
        return None if self._ridge is None else self._ridge.model

    def _calibrate(self, texts: list[str]) -> conformal.Calibration:
        """Exact leave-one-out of the calibration texts (all training texts, or a seeded sample
        of them when there are many), each scored by every other training text through the tile
        loop with the settings `predict` uses; their residuals calibrate the intervals, and their
        statistics the outlier test (`outside_`). Ridge: its closed-form leave-one-out (constant
        width: the model has no spread); where it was fitted on a sample, its estimates of the
        texts outside it, which it never saw. With fluency, the same estimates and the texts'
        fluency fit the stacked estimate (`_stack`), whose own leave-one-out calibrates, and
        where it is used, fluency is a column of the outlier test."""
        canonical = self._canonical
        if self._ridge is not None and self._ridge.sample is None:
            chosen = self.intervals_part.sample(canonical)
            estimates = self._ridge.loo.scores[chosen]
        elif self._ridge is not None and self._ridge.sample is not None:
            chosen = self.intervals_part.sample(canonical[~np.isin(canonical, self._ridge.sample)])
            estimates = self._pass(self._encoder(texts, chosen), chosen.size, progress=False)[0].scores.cpu().numpy()
        else:
            chosen = self.intervals_part.sample(canonical)
            own = torch.as_tensor(chosen, dtype=torch.int64, device=self.device_)
            encode = self.kernel_.encode_train if chosen.size == len(texts) else self._encoder(texts, chosen)
            prediction = self._pass(encode, chosen.size, own=own, progress=False)[0].numpy()
            assert prediction.nearest is not None  # every pass finds it
            fluency = self._fluency_statistics([texts[index] for index in chosen])
            estimates = self._stack(prediction.scores, fluency, chosen)
            self.outside_ = self._outside_rule(texts, chosen, prediction.nearest, self._in_use(fluency))
            return self.intervals_part.calibrate(chosen, estimates, prediction.std, self.train_scores_, canonical)
        fluency = self._fluency_statistics([texts[index] for index in chosen])
        estimates = self._stack(estimates, fluency, chosen)
        self.outside_ = self._outside_rule(texts, chosen, self._nearest_without_own(texts, chosen),
                                           self._in_use(fluency))
        spreads = conformal.difficulty("ridge", estimates)
        return self.intervals_part.calibrate(chosen, estimates, spreads, self.train_scores_, canonical)

    def _fluency_statistics(self, texts: list[str]) -> np.ndarray | None:
        """The calibration texts' [texts, 3] fluency statistics (`fluency.part.statistics`) on
        the host, the unigram table learned from them on the way; None without fluency."""
        return None if self.fluency_ is None else self.fluency_.calibrate(texts).cpu().numpy()

    def _in_use(self, fluency: np.ndarray | None) -> np.ndarray | None:
        """The calibration texts' fluency where it is in use (it joined the estimate), so that it
        joins the outlier test too; None elsewhere: with use "auto", fluency is left out wholly
        where it does not gain (no column, and no model runs on what the scorer predicts)."""
        return fluency if self.stacking_ is not None else None

    def _stack(self, estimates: np.ndarray, fluency: np.ndarray | None, chosen: np.ndarray) -> np.ndarray:
        """The calibration texts' estimates: the stacked model's leave-one-out where fluency
        joins the estimate (always, or with use "auto" where its gain in leave-one-out rho over
        the neighbour estimate alone beats the noise: `choice.gains_beyond_noise`), else the
        neighbour estimates as they are; `stacking_` and `fluency_selection_` say which."""
        if fluency is None or self.fluency is None:
            return estimates
        truth = self.train_scores_[chosen]
        stacked = stacked_leave_one_out(estimates, estimate_features(torch.from_numpy(fluency)).numpy(), truth,
                                        self.score_range)
        if stacked is None:
            return estimates  # too few texts to fit the stacked model on
        model, loo = stacked
        rows = spearman_rows(np.vstack([np.where(np.isfinite(estimates), estimates, np.nan),
                                        np.where(np.isfinite(loo), loo, np.nan)]), truth)
        used = self.fluency.use == "always" or choice.gains_beyond_noise(loo, estimates, truth)
        self.fluency_selection_ = {"without": float(rows[0]), "with": float(rows[1]), "used": bool(used)}
        if not used:
            warn(f"fluency left out (auto): the training set's leave-one-out Spearman is {rows[0]:.3f} without the "
                 f"language model's statistic and {rows[1]:.3f} with it, no gain beyond the noise. The model reads "
                 "English: text in another language, or lower-cased and tokenized text, gains nothing; "
                 "--fluency none (fluency='none') spares the model's pass over the training texts")
        self.stacking_ = model if used else None
        return loo if used else estimates

    def _outside_rule(self, texts: list[str], chosen: np.ndarray, nearest: np.ndarray,
                      fluency: np.ndarray | None) -> OutsideRule:
        """The outlier test calibrated on training texts `chosen`'s leave-one-out statistics:
        their typicality (each left out of its own counts), fluency within length (where there
        is fluency), nearest similarities and degeneracy scores (learned from degenerate copies
        of some of them, `Intervals.degeneracy`)."""
        own = self.typicality_.of_texts([texts[index] for index in chosen], own=True).cpu().numpy()
        degeneracy = self.intervals_part.degeneracy(self.typicality_, texts, chosen, self._canonical, own)
        columns = [own]
        low: tuple[bool, ...] = TEST_LOW_IS_ATYPICAL
        alone: tuple[bool, ...] = TEST_ALONE
        if fluency is not None:
            self.within_ = WithinLength.fit(fluency)
            columns.append(self.within_.columns(torch.from_numpy(fluency)).numpy())
            low, alone = FLUENCY_LOW_IS_ATYPICAL, FLUENCY_ALONE
        statistics = np.column_stack([*columns, np.where(np.isfinite(nearest), nearest, np.nan),
                                      degeneracy.score(torch.from_numpy(own)).numpy()])
        test = OutlierTest.fit(statistics, low, alone)
        return self.intervals_part.outside_rule(test, degeneracy, self.train_scores_, self.score_range)

    def _nearest_without_own(self, texts: list[str], chosen: np.ndarray) -> np.ndarray:
        """Each of training texts `chosen`'s highest similarity to another training text."""
        own = torch.as_tensor(chosen, dtype=torch.int64, device=self.device_)
        reduction = conformal.WithoutOwn(NearestReduction(chosen.size, self.device_), own)
        return self._reduce(self._encoder(texts, chosen), chosen.size, self._plan(), reduction, False).cpu().numpy()

    def _encoder(self, texts: list[str], positions: np.ndarray) -> Callable[[int, int], Any]:
        return lambda first, last: self.kernel_.encode([texts[index] for index in positions[first:last]])

    def tuning_grid(self) -> tuning.TuningGrid:
        """What tuning searches for this estimator."""
        return self._estimator().grid()

    def tunes(self, num_texts: int) -> bool:
        """Whether `fit` on `num_texts` texts tunes by default (the estimator's `tuning`)."""
        return self._estimator().tunes(num_texts)

    def _tunes(self, num_texts: int, tune: bool | None) -> bool:
        if tune is not None:
            return tune
        if self.estimator_.tunes(num_texts):
            return True
        if self.estimator_.tuning == "auto" and not self.estimator_.given() and num_texts < MIN_TUNING_TEXTS:
            warn(f"{num_texts} training texts are fewer than {MIN_TUNING_TEXTS}: too few to tune the "
                 f"settings on, so the {'paper' if self.estimator_.name == 'threshold' else 'default'}'s "
                 f"are used ({self.signature})")
        return False

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

    @library_threads
    def fit_pairwise(self, texts: Sequence[str], scores: Sequence[float] | np.ndarray) -> PairwiseSimilarities:
        """Fit on all items (never tuned: protocols tune inside their splits, see `tunes`) and
        run the kernel over every pair, once: the pass that evaluation protocols cut their
        splits from."""
        self.fit(texts, scores, tune=False)
        return self.splits_pass()

    def splits_pass(self) -> PairwiseSimilarities:
        """`training_pass`, for protocols that cut splits from it (cross-validation, curves,
        sweeps): warns where the kernel's similarities depend on the whole training set, and
        where the kernel (or a combined kernel's weights) was chosen on all items."""
        if self.kernel_.depends_on_training_set:
            warn(f"the {self.kernel_name} kernel's similarities depend on the whole training set "
                 f"({self.signature}): splits cut from one pass see idf weights or a baseline "
                 "computed on all items, so they approximate refitting on each split")
        if self.selection_ is not None:
            warn(f"the kernel was chosen on all {self.num_train} items ({self.signature}): every split's test "
                 "items took part in the choice, which flatters the measure; name one kernel to measure it "
                 "(bench/quality.py chooses inside each training side)")
        return self.training_pass()

    def training_fluency(self) -> np.ndarray | None:
        """The training texts' fluency features as the stacked estimate reads them, where fluency
        joins the estimate (None elsewhere): what protocols that cut splits from one pass stack
        each split's out-of-sample estimates with (`evaluation.protocols.SplitFluency`)."""
        self._check_fitted()
        if self.fluency_ is None or self.stacking_ is None:
            return None
        return estimate_features(self.fluency_.of_texts(list(self.kernel_.train_texts))).cpu().numpy()

    def training_pass(self) -> PairwiseSimilarities:
        """The one all-pairs similarity pass of the fitted training set (what evaluation
        protocols and tuning cut their splits from), with the kernel's error bound (at least
        the default, which every exact kernel's is below: their thresholds stay as they were)."""
        return PairwiseSimilarities(self.train_similarity(), self.train_scores_,
                                    text_checksums(self.kernel_.train_texts),
                                    max(self.kernel_.similarity_error, DEFAULT_SIMILARITY_ERROR))

    @property
    def kernel_name(self) -> str:
        """The kernel's name: the one fitted (with `Auto`, the one chosen), else the part's."""
        return self.kernel_part_.name if hasattr(self, "kernel_part_") else self.kernel.name



def _warn_duplicates(texts: list[str]) -> None:
    """Each copy of a text is the other's neighbour, so leave-one-out flatters."""
    duplicates = len(texts) - len(set(texts))
    if duplicates:
        warn(f"{duplicates} of the {len(texts)} training texts repeat another one: in "
             "leave-one-out (evaluate, crossval, tuning) each copy is the other's nearest "
             "neighbour, which flatters coverage and agreement; deduplicate the training set")


def _tuning_pass(scorer: NeighborsScorer, texts: list[str]) -> tuple[np.ndarray | None, PairwiseSimilarities]:
    """The training set's one similarity pass for tuning (and the ridge fit), with the sample it
    covers: all texts (None), or above MAX_TUNING_TEXTS texts a seeded random sample of that
    many, fitted alone (its [n x n] matrix must fit in memory)."""
    if scorer.num_train <= MAX_TUNING_TEXTS:
        return None, scorer.training_pass()
    warn(f"tuning on a random sample of {MAX_TUNING_TEXTS} of the {scorer.num_train} training texts "
         f"({scorer.estimator_.tuned} chosen for a training set of that size)")
    sample = canonical_sample(scorer._canonical, MAX_TUNING_TEXTS, seed=0)
    clone = NeighborsScorer(kernel=scorer.kernel_part_, device=scorer.device, memory_budget=scorer.memory_budget,
                            chunk_size=scorer.chunk_size, score_range=None, fluency=None)
    # The sample's encoding alone: its pass reads no tuning, calibration or outlier test.
    clone._encode(scorer.kernel_part_, scorer.estimator_, [texts[index] for index in sample],
                  scorer.train_scores_[sample])
    return sample, clone.training_pass()
