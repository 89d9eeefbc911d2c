"""Text to tokens, and tokens to integer ids.

Kernels that compare surface forms (BLEU*, ROUGE-L) work on integer token ids so that n-gram
matching and LCS run as tensor work. The ids come from a vocabulary frozen on the training set:
a candidate token the training set never saw gets id -1, which can match nothing.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import torch

UNKNOWN_ID = -1


class Tokenizer(ABC):
    """Splits a text into token strings; `lowercase` folds case first."""

    name: str = ""

    def __init__(self, lowercase: bool = False) -> None:
        self.lowercase = lowercase

    def tokenize(self, text: str) -> list[str]:
        return self._split(text.lower() if self.lowercase else text)

    @abstractmethod
    def _split(self, text: str) -> list[str]: ...

    @property
    def signature(self) -> str:
        return f"{self.name}{'+lc' if self.lowercase else ''}"


class WhitespaceTokenizer(Tokenizer):
    """`str.split()`: the right choice for text that is already tokenized."""

    name = "whitespace"

    def _split(self, text: str) -> list[str]:
        return text.split()


class Sacrebleu13aTokenizer(Tokenizer):
    """sacrebleu's `13a` tokenizer (mteval-v13a), the WMT standard for detokenized text."""

    name = "13a"

    @cached_property
    def _tokenizer13a(self):
        from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

        return Tokenizer13a()

    def _split(self, text: str) -> list[str]:
        return self._tokenizer13a(text).split()


class CharacterTokenizer(Tokenizer):
    """Every character is a token, spaces included: what NLTK's `sentence_bleu` scores when it is
    given raw strings instead of token lists (the reading that reproduces the paper's BLEU
    figures; see docs/reproduction.md)."""

    name = "chars"

    def _split(self, text: str) -> list[str]:
        return list(text)


class HuggingFaceTokenizer(Tokenizer):
    """A `transformers` tokenizer (name or local path); tokens are its subword strings."""

    def __init__(self, name_or_path: str, lowercase: bool = False) -> None:
        super().__init__(lowercase)
        from transformers import AutoTokenizer

        try:
            self.hf = AutoTokenizer.from_pretrained(name_or_path)
        except OSError as error:
            raise ValueError(
                f"cannot load a Hugging Face tokenizer from {name_or_path!r}: give a local "
                f"folder or a model already in the Hugging Face cache ({error})"
            ) from error
        self.name = f"hf:{name_or_path}"

    def _split(self, text: str) -> list[str]:
        return self.hf.tokenize(text)


def make_tokenizer(spec: str | Tokenizer, lowercase: bool = False) -> Tokenizer:
    """`whitespace`, `13a`, `chars`, or a Hugging Face tokenizer name or path (`hf:` prefix optional)."""
    if isinstance(spec, Tokenizer):
        return spec
    if spec == "whitespace":
        return WhitespaceTokenizer(lowercase)
    if spec == "13a":
        return Sacrebleu13aTokenizer(lowercase)
    if spec == "chars":
        return CharacterTokenizer(lowercase)
    return HuggingFaceTokenizer(spec.removeprefix("hf:"), lowercase)


@dataclass(frozen=True)
class TokenBatch:
    """Ragged batch of token-id sequences: `ids` concatenated, `lengths` per text (on a device)."""

    ids: torch.Tensor
    lengths: torch.Tensor

    def __len__(self) -> int:
        return int(self.lengths.numel())

    @cached_property
    def offsets(self) -> torch.Tensor:
        """Start of each text in `ids`."""
        return torch.cumsum(self.lengths, 0) - self.lengths

    @cached_property
    def rows(self) -> torch.Tensor:
        """Text index of every token."""
        return torch.repeat_interleave(
            torch.arange(len(self), device=self.ids.device), self.lengths
        )

    @cached_property
    def positions(self) -> torch.Tensor:
        """Position of every token inside its text."""
        return torch.arange(self.ids.numel(), device=self.ids.device) - self.offsets[self.rows]


class Vocabulary:
    """Token string -> id, built from the training set and then frozen."""

    def __init__(self, token_lists: Iterable[Sequence[str]]) -> None:
        self._ids: dict[str, int] = {}
        for tokens in token_lists:
            for token in tokens:
                self._ids.setdefault(token, len(self._ids))

    def __len__(self) -> int:
        return len(self._ids)

    def batch(self, token_lists: Sequence[Sequence[str]], device: torch.device) -> TokenBatch:
        """Ids of every token (UNKNOWN_ID for tokens unseen in training), as a ragged batch."""
        lookup = self._ids.get
        flat = [lookup(token, UNKNOWN_ID) for tokens in token_lists for token in tokens]
        lengths = [len(tokens) for tokens in token_lists]
        return TokenBatch(
            ids=torch.tensor(flat, dtype=torch.int64, device=device),
            lengths=torch.tensor(lengths, dtype=torch.int64, device=device),
        )
