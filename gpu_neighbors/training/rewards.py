"""Reward functions in the form TRL's trainers take (`GRPOTrainer(reward_funcs=...)`, RLOO):
`f(prompts, completions, **kwargs) -> list[float]`, one finite float per completion.

Three sources: a fitted `NeighborsScorer` (the neighbour estimate, `NeighborsScorer.reward`), or
`BleuReward` and `RougeReward`, aligned BLEU or ROUGE of each completion against its own
reference(s) from a dataset column (`sentence_bleu`, `rouge`). The function is a picklable object whose `__name__` (TRL's metric name,
`rewards/<name>/mean`) is fixed when it is made.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gpu_neighbors.kernels.aligned_bleu import sentence_bleu
from gpu_neighbors.kernels.aligned_rouge import check_rouge_types, rouge
from gpu_neighbors.kernels.bleu_sets import BLEU4_WEIGHTS
from gpu_neighbors.kernels.bleu_settings import check_setting
from gpu_neighbors.core.neighbours import TensorPrediction
from gpu_neighbors.core.validation import check_flag, check_name, interval, shown
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
        check_name(self.column, "column")
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
        check_name(self.column, "column")
        check_rouge_types([self.rouge_type])
        if self.measure not in ("fmeasure", "precision", "recall"):
            raise ValueError(f"measure must be fmeasure, precision or recall, not {self.measure!r}")
        check_flag("use_stemmer", self.use_stemmer)  # "no" would stem, at the trainer's first step
        if self.tokenizer is not None:
            object.__setattr__(self, "tokenizer", make_tokenizer(self.tokenizer))


ReferenceReward = BleuReward | RougeReward


class RewardFunction:
    """A TRL reward function (see `reward_function`)."""

    def __init__(self, source: NeighborsScorer | ReferenceReward, name: str, undefined: float | None,
                 subsample: float | None, seed: int, token_ids: bool, outside: float | None = None) -> None:
        self.source = source
        self.__name__ = name
        self.undefined = undefined
        self.outside = outside
        self.subsample = subsample
        self.seed = seed
        self.token_ids = token_ids

    def __repr__(self) -> str:
        return f"<gpu-neighbors reward function {self.__name__!r}>"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Sequence[Sequence[int]]
                 | None = None, **kwargs: Any) -> list[float]:
        if (isinstance(prompts, Sized) and isinstance(completions, Sized) and not isinstance(completions, str)
                and len(prompts) != len(completions)):
            raise ValueError(f"{self.__name__}: {len(prompts)} prompts but {len(completions)} completions: a "
                             "trainer passes one prompt per completion")
        if isinstance(self.source, (BleuReward, RougeReward)):
            return self._aligned(self.source, completions, kwargs)
        scorer = self.source
        if self.token_ids:
            if completion_ids is None:
                raise ValueError(f"{self.__name__}: made with token_ids=True, but the trainer passed no completion_ids")
            if isinstance(completions, Sized) and len(completion_ids) != len(completions):
                raise ValueError(f"{self.__name__}: {len(completion_ids)} completion_ids rows but {len(completions)} "
                                 "completions: one row of token ids per completion")
            ids, mask = padded(completion_ids, scorer.device_)
            rewards, prediction = scorer.rewarded(ids, self.undefined, self.subsample, self.seed, mask, self.outside)
        else:
            rewards, prediction = scorer.rewarded(completion_texts(completions), self.undefined, self.subsample,
                                                  self.seed, outside=self.outside)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            for metric, value in _evidence(prediction).items():
                log_metric(f"{self.__name__}/{metric}", value)
        return rewards.tolist()

    def _aligned(self, setting: ReferenceReward, completions: Sequence[Any], columns: Mapping[str, Any]) -> list[float]:
        if setting.column not in columns:
            raise ValueError(f"{self.__name__}: the dataset has no column {setting.column!r} with the references "
                             f"(columns passed: {', '.join(sorted(columns)) or 'none'})")
        if isinstance(columns[setting.column], str):  # else one character a row
            raise ValueError(f"{self.__name__}: the column {setting.column!r} is one string, not one entry per "
                             "completion (a string or a list of strings each)")
        texts = completion_texts(completions)
        references = [self._references(item, setting.column, row) for row, item in enumerate(columns[setting.column])]
        if len(references) != len(texts):  # the kernels' message would name neither the column nor the reward
            raise ValueError(f"{self.__name__}: the column {setting.column!r} has {len(references)} "
                             f"entr{'y' if len(references) == 1 else 'ies'} but there are {len(texts)} completions: "
                             "one entry (a reference or a list of them) per completion")
        if isinstance(setting, RougeReward):
            scores = rouge(texts, references, rouge_types=[setting.rouge_type],
                           use_stemmer=setting.use_stemmer, tokenizer=setting.tokenizer)[setting.rouge_type]
            return getattr(scores, setting.measure).tolist()
        return sentence_bleu(texts, references, weights=setting.weights,
                             smoothing=setting.smoothing, smooth_value=setting.smooth_value,
                             auto_reweigh=setting.auto_reweigh, effective_order=setting.effective_order,
                             tokenizer=setting.tokenizer).tolist()


    def _references(self, item: Any, column: str, row: int) -> list[str]:
        """One row's references: a string, or a list of strings."""
        if isinstance(item, str):
            return [item]
        if isinstance(item, Sequence) and item and all(isinstance(part, str) for part in item):
            return list(item)
        raise ValueError(f"{self.__name__}: row {row} of the column {column!r} holds {shown(item)}, not a reference "
                         f"(a string) or a non-empty list of them")


def reward_function(
    source: NeighborsScorer | ReferenceReward | str | os.PathLike[str],
    *,
    name: str | None = None,
    undefined: float | None = None,
    subsample: float | None = None,
    seed: int = 0,
    token_ids: bool = False,
    outside: float | None = None,
) -> RewardFunction:
    """A TRL reward function `f(prompts, completions, **kwargs) -> list[float]`.

    Completions may be plain strings or conversations (lists of {"role", "content"} messages:
    the assistant messages' text is scored). For a scorer, where the neighbour estimate is
    undefined the reward is `undefined` (default: the training set's mean quality; never NaN,
    see `NeighborsScorer.reward`), and `subsample` scores each call against a fresh random
    fraction of the training set. `token_ids=True` scores the trainer's `completion_ids` with no
    decoding (`predict_ids`): only when the scorer's Hugging Face tokenizer is the policy's.
    `name` (default "neighbors", "bleu" or "rouge") is TRL's `rewards/<name>/mean`. A saved
    scorer's folder (`NeighborsScorer.save`) stands for the scorer in it. A completion outside
    the scorer's training distribution (word salad, repetition, another domain) is rewarded
    `outside` (default: the low end of its interval, the score range's minimum), and where the
    trainer passes TRL's `log_metric`, every call logs `<name>/outside` (the share of such
    completions) and `<name>/nearest` (their mean similarity to the nearest training text).
    """
    if name is not None:
        check_name(name, "name")
    if isinstance(source, (BleuReward, RougeReward)):
        if undefined is not None or subsample is not None or token_ids or outside is not None:
            raise ValueError(f"undefined, subsample, token_ids and outside apply to a NeighborsScorer, not to "
                             f"{type(source).__name__}")
        return RewardFunction(source, name or ("bleu" if isinstance(source, BleuReward) else "rouge"), None, None,
                              seed, False)
    if not (isinstance(source, NeighborsScorer) or (isinstance(source, (str, os.PathLike)) and os.path.isdir(source))):
        missing = f" {os.fspath(source)!r} (not a folder)" if isinstance(source, (str, os.PathLike)) else ""
        raise TypeError(f"reward_function takes a fitted NeighborsScorer, a BleuReward or a RougeReward (or a saved "
                        f"scorer's folder), not {type(source).__name__}{missing}")
    source = NeighborsScorer.fitted(source)
    if check_flag("token_ids", token_ids):
        source.kernel_.check_ids()
    for setting, value in (("undefined", undefined), ("outside", outside)):
        if value is not None and not interval().accepts(value):
            raise ValueError(f"{setting} must be a finite number (a reward reaches the trainer), not {value!r}")
    if subsample is not None:  # refused now, not at the trainer's first step
        source.subset_size(subsample, seed)
    return RewardFunction(source, name or "neighbors", undefined, subsample, seed, token_ids, outside)


def _evidence(prediction: TensorPrediction) -> dict[str, float]:
    """What a step's rewards rest on: the share of samples outside the training distribution
    (rewarded the low end) and the mean nearest similarity to a training text (NaN if none)."""
    assert prediction.outside is not None and prediction.nearest is not None  # rewards judge every sample
    nearest = prediction.nearest[torch.isfinite(prediction.nearest)]
    return {"outside": float(prediction.outside.to(torch.float64).mean()) if len(prediction) else float("nan"),
            "nearest": float(nearest.mean()) if nearest.numel() else float("nan")}


def completion_texts(completions: Sequence[Any]) -> list[str]:
    """The text of each completion: a string as it is, a conversation as its assistant messages'
    text joined by newlines."""
    if isinstance(completions, (str, bytes)):  # else each character would be rewarded
        raise TypeError("completions must be a list of completions (strings or conversations), not one string")
    if isinstance(completions, Mapping):  # one message: else its keys would be rewarded
        raise TypeError(f"completions must be a list of completions (strings or conversations), not a "
                        f"{type(completions).__name__}")
    return [item if isinstance(item, str) else _conversation_text(item, index) for index, item in enumerate(completions)]


def _conversation_text(messages: Any, index: int) -> str:
    """The assistant messages' text of completion `index`; what cannot be read as such (a role
    "Assistant", content that is neither a string, a list of parts nor None) is refused by its
    index, never scored as an empty text."""
    if not isinstance(messages, Sequence) or not all(isinstance(m, Mapping) for m in messages):
        raise TypeError(f"completions[{index}]: expected a string or a list of messages, got {type(messages).__name__}")
    parts = []
    for position, message in enumerate(messages):
        role = message.get("role", "assistant")
        if role != "assistant":
            if isinstance(role, str) and role.strip().casefold() == "assistant":
                raise ValueError(f"completions[{index}]: message {position}'s role {role!r} is not 'assistant' "
                                 "(chat templates spell roles in lower case)")
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):  # multimodal: text parts
            for number, part in enumerate(content):
                if not isinstance(part, Mapping):
                    raise TypeError(f"completions[{index}]: content part {number} of an assistant message is "
                                    f"{type(part).__name__}, not a {{\"type\": ...}} part")
                if part.get("type") == "text":
                    if not isinstance(part.get("text"), str):
                        raise ValueError(f"completions[{index}]: content part {number} of an assistant message "
                                         f"is of type 'text' but holds no string 'text'")
                    parts.append(part["text"])
        elif content is not None:  # None: a message of tool calls alone
            raise TypeError(f"completions[{index}]: message {position}'s content is {type(content).__name__}, not a "
                            "string or a list of content parts")
    return "\n".join(parts)


def padded(rows: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged token-id lists -> ids [rows, longest] and attention mask, on `device`; a row that
    is not a list of integers is refused by its index."""
    arrays = [_token_ids(row, index) for index, row in enumerate(rows)]
    lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
    width = max(int(lengths.max()) if len(arrays) else 0, 1)
    mask = np.arange(width)[None, :] < lengths[:, None]
    ids = np.zeros((len(arrays), width), dtype=np.int64)
    if len(arrays):
        ids[mask] = np.concatenate(arrays)
    return torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device)


def _token_ids(row: Any, index: int) -> np.ndarray:
    """One row of `completion_ids` as int64 (a list of ints, or an integer tensor)."""
    try:
        array = None if row is None or isinstance(row, (str, bytes)) else np.asarray(
            row.cpu() if isinstance(row, torch.Tensor) else row)
    except (TypeError, ValueError):
        array = None
    if array is None or array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise TypeError(f"completion_ids[{index}] must be a list of integer token ids, not {shown(row)}")
    return array.astype(np.int64, copy=False)
