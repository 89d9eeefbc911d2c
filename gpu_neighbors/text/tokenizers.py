"""Text to token strings: whitespace, sacrebleu's 13a, characters, or a Hugging Face tokenizer.

Kernels that compare surface forms (BLEU*, ROUGE-L) then map the tokens to integer ids with a
vocabulary frozen on the training set (`vocabulary.py`), so matching runs as tensor work.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from functools import cached_property


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
