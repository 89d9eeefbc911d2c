"""The kernel protocol: the only thing a kernel does is produce similarity tiles.

A kernel caches its view of the training set once (`fit`), turns a chunk of candidates into its
own representation (`encode`), and returns the similarity of those candidates to a contiguous
block of training texts (`tile`) as a float64 tensor on the scorer's device. Chunking, memory
budgets, thresholds, aggregation and leave-one-out all live outside, in the tile loop
(`core.tiling`) and the neighbour model, so every kernel gets them for free.

`fit` and the `encode*` methods are template methods: they check fitted state here, once, and
delegate to what a kernel writes (`_fit`, `_encode`, optionally `_encode_train` and
`_encode_ids`). What a kernel needs and supports is declared as class facts.
"""
from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar, Generic, TypeVar

import torch

from gpu_neighbors.core.validation import NotFittedError
from gpu_neighbors.text.tokenizers import Tokenizer

Encoded = TypeVar("Encoded")


class Kernel(ABC, Generic[Encoded]):
    """Similarity k(candidate, training text) in [0, 1] for all pairs, tile by tile; `Encoded`
    is the kernel's representation of a chunk of candidates."""

    name: ClassVar[str]
    default_tau: ClassVar[float]
    # False where the kernel brings its own tokenizer (BERTScore's model), so the scorer's
    # tokenizer changes no number and stays out of the signature.
    uses_tokenizer: ClassVar[bool] = True
    # True where `encode_ids` scores token ids straight from a model (no decode, no host sync).
    supports_ids: ClassVar[bool] = False
    # True where `encode` is host work with a small result (token ids, n-gram features), so a
    # streaming run may encode whole batches ahead in its reader thread; false where it is a
    # model's embeddings (large, and made on the device).
    prepares_ahead: ClassVar[bool] = True
    # The estimator a scorer uses when none is given (bench/quality.md): top-k for the sparse
    # overlap kernels, whose similarities are zero for most pairs, and kernel ridge for
    # embedding kernels, whose dense, smooth similarities a regression uses better.
    default_estimator: ClassVar[str] = "topk"

    def __init__(self, *, tokenizer: Tokenizer, device: torch.device) -> None:
        self.tokenizer = tokenizer
        self.device = device
        self.train_texts: list[str] = []
        self._fitted = False

    def __deepcopy__(self, memo: dict[int, object]) -> Kernel[Encoded]:
        """A copy made through pickle: torch cannot deep-copy a sparse CSR tensor (the layout of
        the n-gram and TF-IDF encodings) but pickles one, so a fitted scorer copies as it pickles."""
        copied: Kernel[Encoded] = pickle.loads(pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL))
        memo[id(self)] = copied
        return copied

    def fit(self, texts: Sequence[str]) -> None:
        """Encode the training set once; a later call replaces it."""
        self.train_texts = list(texts)
        self._fitted = False
        self._fit(self.train_texts)
        self._fitted = True

    def saved_encoding(self) -> dict[str, torch.Tensor]:
        """The training set's encoding as host tensors, for a saved scorer to load instead of
        encoding its texts again; empty (the default) where the kernel encodes them again."""
        self._check_fitted()
        return {}

    def load_encoding(self, texts: Sequence[str], tensors: Mapping[str, torch.Tensor]) -> None:
        """`fit(texts)` from `saved_encoding`'s tensors (none: by encoding `texts`); ValueError
        where they cannot be its output for these texts."""
        if not tensors:
            self.fit(texts)
            return
        self.train_texts = list(texts)
        self._fitted = False
        self._load(self.train_texts, tensors)
        self._fitted = True

    def _load(self, texts: list[str], tensors: Mapping[str, torch.Tensor]) -> None:
        """`load_encoding` for kernels whose `saved_encoding` gives tensors."""
        raise ValueError(f"the {self.name} kernel saves no encoding, but tensors {sorted(tensors)} were given")

    def encode(self, texts: Sequence[str]) -> Encoded:
        """Candidate-side representation of a chunk of texts, reused for every training block."""
        self._check_fitted()
        return self._encode(texts)

    def encode_train(self, start: int, stop: int) -> Encoded:
        """`encode` of training texts start..stop-1 (leave-one-out)."""
        self._check_fitted()
        return self._encode_train(start, stop)

    def encode_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> Encoded:
        """`encode` of token ids [rows, length] (with their mask) on their own device, for
        kernels that `supports_ids`; `tile` then runs on that device too."""
        self._check_fitted()
        self.check_ids()
        return self._encode_ids(input_ids, attention_mask)

    def check_ids(self) -> None:
        """Refuse token ids unless this kernel can score them as the text they stand for."""
        if not self.supports_ids:
            raise ValueError(
                f"predict_ids needs the bleu kernel with the ids' Hugging Face tokenizer (tokenizer=its "
                f"name or path); the {self.name!r} kernel takes texts: decode the ids and call predict"
            )

    @property
    def num_train(self) -> int:
        return len(self.train_texts)

    @abstractmethod
    def _fit(self, texts: list[str]) -> None:
        """Build and cache the training-side representation (on `self.device`)."""

    @abstractmethod
    def _encode(self, texts: Sequence[str]) -> Encoded:
        """`encode` after the fitted check."""

    def _encode_train(self, start: int, stop: int) -> Encoded:
        """Override to reuse the training cache."""
        return self._encode(self.train_texts[start:stop])

    def _encode_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> Encoded:
        raise NotImplementedError(f"{type(self).__name__} declares supports_ids but has no _encode_ids")

    def id_row_bytes(self) -> int:
        """Memory budget that `encode_ids` takes per candidate row; chunks of ids are sized
        from it (only for kernels that `supports_ids`)."""
        raise NotImplementedError(f"the {self.name} kernel takes texts, not ids")

    @abstractmethod
    def tile(self, encoded: Encoded, start: int, stop: int) -> torch.Tensor:
        """Similarities [len(chunk), stop - start], float64 on the chunk's device, against
        training texts start..stop-1."""

    @abstractmethod
    def pair_bytes(self) -> int:
        """Peak working memory of `tile` per (candidate, training text) pair, in bytes; the
        scorer sizes tiles from it and its memory budget."""

    @property
    def bounded(self) -> bool:
        """Whether every similarity lies in [0, 1], so a threshold outside it means nothing."""
        return True

    @property
    def similarity_error(self) -> float:
        """How far one similarity may lie from the value another faithful evaluation of this
        kernel gives (another device or tiling, the formula contracted or reordered), at most:
        tuning keeps every threshold farther than this from every training similarity
        (`core.tuning.between_similarities`)."""
        return self.SIMILARITY_ERROR

    # The bound for kernels whose every similarity is a float64 function of integer counts;
    # each kernel states its own.
    SIMILARITY_ERROR: ClassVar[float]

    @property
    def depends_on_training_set(self) -> bool:
        """Whether k(x, s) changes with the rest of the training set (e.g. idf weights), so
        that a sub-matrix of one all-pairs pass is not exactly what a refit on a split gives.
        A property, not a class fact: for BERTScore it depends on the options."""
        return False

    def settings(self) -> dict[str, str]:
        """Every setting that changes the numbers, for the scorer's signature."""
        return {"tok": self.tokenizer.signature} if self.uses_tokenizer else {}

    def _check_fitted(self) -> None:
        if not self._fitted:
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet: call fit(texts) first")
