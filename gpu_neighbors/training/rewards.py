"""Reward functions in the form TRL's trainers take (`GRPOTrainer(reward_funcs=...)`, RLOO):
`f(prompts, completions, **kwargs) -> list[float]`, one finite float per completion.

Three sources: a fitted `NeighborsScorer` (the neighbour estimate, `NeighborsScorer.reward`), or
`BleuReward` and `RougeReward`, aligned BLEU or ROUGE of each completion against its own
reference(s) from a dataset column (`sentence_bleu`, `rouge`). The function is a picklable object whose `__name__` (TRL's metric name,
`rewards/<name>/mean`) is fixed when it is made.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gpu_neighbors.kernels.aligned_bleu import sentence_bleu
from gpu_neighbors.kernels.aligned_rouge import check_rouge_types, rouge
from gpu_neighbors.kernels.bleu_sets import BLEU4_WEIGHTS
from gpu_neighbors.kernels.bleu_settings import check_setting
from gpu_neighbors.scorer import NeighborsScorer
from gpu_neighbors.text.tokenizers import Tokenizer, make_tokenizer


@dataclass(frozen=True)
class BleuReward:
    """Aligned BLEU as a reward: each completion against the references in the dataset column
    `column` (a string or a list of strings per row; TRL passes every dataset column to reward
    functions by name), under any one setting of `sentence_bleu` (one weight tuple)."""

    column: str = "reference"
    weights: tuple[float, ...] = BLEU4_WEIGHTS
    smoothing: str = "exp"  # NLTK method3: a short sample missing a 4-gram still gets a gradient
    tokenizer: str | Tokenizer = "whitespace"
    smooth_value: float | None = None
    auto_reweigh: bool = False
    effective_order: bool = False

    def __post_init__(self) -> None:
        setting = check_setting(self.weights, self.smoothing, self.smooth_value, self.auto_reweigh,
                                self.effective_order)
        if setting.several:
            raise ValueError("BleuReward: give one weight tuple (a reward is one number per completion)")
        object.__setattr__(self, "weights", setting.weights[0])
        object.__setattr__(self, "tokenizer", make_tokenizer(self.tokenizer))


@dataclass(frozen=True)
class RougeReward:
    """Aligned ROUGE as a reward (the reward summarization policies are trained on): each
    completion's `measure` ("fmeasure", "precision" or "recall") of `rouge_type` against the
    references in the dataset column `column`, as rouge-score's `score_multi`."""

    column: str = "reference"
    rouge_type: str = "rougeL"
    measure: str = "fmeasure"
    use_stemmer: bool = False
    tokenizer: str | Tokenizer | None = None

    def __post_init__(self) -> None:
        check_rouge_types([self.rouge_type])
        if self.measure not in ("fmeasure", "precision", "recall"):
            raise ValueError(f"measure must be fmeasure, precision or recall, not {self.measure!r}")
        if self.tokenizer is not None:
            object.__setattr__(self, "tokenizer", make_tokenizer(self.tokenizer))


ReferenceReward = BleuReward | RougeReward


class RewardFunction:
    """A TRL reward function (see `reward_function`)."""

    def __init__(self, source: NeighborsScorer | ReferenceReward, name: str, undefined: float | None,
                 subsample: float | None, seed: int, token_ids: bool) -> None:
        self.source = source
        self.__name__ = name
        self.undefined = undefined
        self.subsample = subsample
        self.seed = seed
        self.token_ids = token_ids

    def __repr__(self) -> str:
        return f"<gpu-neighbors reward function {self.__name__!r}>"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Sequence[Sequence[int]]
                 | None = None, **kwargs: Any) -> list[float]:
        if isinstance(self.source, (BleuReward, RougeReward)):
            return self._aligned(self.source, completions, kwargs)
        scorer = self.source
        if self.token_ids:
            if completion_ids is None:
                raise ValueError(f"{self.__name__}: made with token_ids=True, but the trainer passed no completion_ids")
            ids, mask = padded(completion_ids, scorer.device_)
            rewards = scorer.reward(ids, self.undefined, self.subsample, self.seed, attention_mask=mask)
        else:
            rewards = scorer.reward(completion_texts(completions), self.undefined, self.subsample, self.seed)
        return rewards.tolist()

    def _aligned(self, setting: ReferenceReward, completions: Sequence[Any], columns: Mapping[str, Any]) -> list[float]:
        if setting.column not in columns:
            raise ValueError(f"{self.__name__}: the dataset has no column {setting.column!r} with the references "
                             f"(columns passed: {', '.join(sorted(columns)) or 'none'})")
        references = [[item] if isinstance(item, str) else list(item) for item in columns[setting.column]]
        if isinstance(setting, RougeReward):
            scores = rouge(completion_texts(completions), references, rouge_types=[setting.rouge_type],
                           use_stemmer=setting.use_stemmer, tokenizer=setting.tokenizer)[setting.rouge_type]
            return getattr(scores, setting.measure).tolist()
        return sentence_bleu(completion_texts(completions), references, weights=setting.weights,
                             smoothing=setting.smoothing, smooth_value=setting.smooth_value,
                             auto_reweigh=setting.auto_reweigh, effective_order=setting.effective_order,
                             tokenizer=setting.tokenizer).tolist()


def reward_function(
    source: NeighborsScorer | ReferenceReward,
    *,
    name: str | None = None,
    undefined: float | None = None,
    subsample: float | None = None,
    seed: int = 0,
    token_ids: bool = False,
) -> RewardFunction:
    """A TRL reward function `f(prompts, completions, **kwargs) -> list[float]`.

    Completions may be plain strings or conversations (lists of {"role", "content"} messages:
    the assistant messages' text is scored). For a scorer, where the neighbour estimate is
    undefined the reward is `undefined` (default: the training set's mean quality; never NaN,
    see `NeighborsScorer.reward`), and `subsample` scores each call against a fresh random
    fraction of the training set. `token_ids=True` scores the trainer's `completion_ids` with no
    decoding (`predict_ids`): only when the scorer's Hugging Face tokenizer is the policy's.
    `name` (default "neighbors", "bleu" or "rouge") is TRL's `rewards/<name>/mean`.
    """
    if isinstance(source, (BleuReward, RougeReward)):
        if undefined is not None or subsample is not None or token_ids:
            raise ValueError(f"undefined, subsample and token_ids apply to a NeighborsScorer, not to "
                             f"{type(source).__name__}")
        return RewardFunction(source, name or ("bleu" if isinstance(source, BleuReward) else "rouge"), None, None,
                              seed, False)
    if not isinstance(source, NeighborsScorer):
        raise TypeError(f"reward_function takes a fitted NeighborsScorer, a BleuReward or a RougeReward, not "
                        f"{type(source).__name__}")
    source._check_fitted()
    if token_ids:
        source.kernel_.check_ids()
    if undefined is not None and not (isinstance(undefined, (int, float)) and np.isfinite(undefined)):
        raise ValueError(f"undefined must be a finite number (a reward reaches the trainer), not {undefined!r}")
    return RewardFunction(source, name or "neighbors", undefined, subsample, seed, token_ids)


def completion_texts(completions: Sequence[Any]) -> list[str]:
    """The text of each completion: a string as it is, a conversation as its assistant messages'
    text joined by newlines."""
    return [item if isinstance(item, str) else _conversation_text(item, index) for index, item in enumerate(completions)]


def _conversation_text(messages: Any, index: int) -> str:
    if not isinstance(messages, Sequence) or not all(isinstance(m, Mapping) for m in messages):
        raise TypeError(f"completions[{index}]: expected a string or a list of messages, got {type(messages).__name__}")
    parts = []
    for message in messages:
        if message.get("role", "assistant") != "assistant":
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, Sequence):  # multimodal content: its text parts
            parts.extend(part["text"] for part in content if isinstance(part, Mapping) and part.get("type") == "text")
    return "\n".join(parts)


def padded(rows: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged token-id lists -> ids [rows, longest] and attention mask, on `device`."""
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    width = max(int(lengths.max()) if len(rows) else 0, 1)
    mask = np.arange(width)[None, :] < lengths[:, None]
    ids = np.zeros((len(rows), width), dtype=np.int64)
    if len(rows):
        ids[mask] = np.concatenate([np.asarray(row, dtype=np.int64) for row in rows])
    return torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device)
