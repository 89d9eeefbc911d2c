"""Text to token strings: whitespace, sacrebleu's 13a, characters, or a Hugging Face tokenizer.

Kernels that compare surface forms (BLEU*, ROUGE-L) then map the tokens to integer ids with a
vocabulary frozen on the training set (`vocabulary.py`), so matching runs as tensor work.
"""
from __future__ import annotations

import os
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
    """A `transformers` tokenizer (local folder, or a name in the Hugging Face cache); tokens are
    its subword strings. Code shipped in a folder is never run (`trust_remote_code=False`), and
    nothing is downloaded unless `allow_download`."""

    def __init__(self, name_or_path: str, lowercase: bool = False, allow_download: bool = False) -> None:
        super().__init__(lowercase)
        from transformers import AutoTokenizer

        try:
            self.hf = AutoTokenizer.from_pretrained(
                name_or_path, trust_remote_code=False, local_files_only=not allow_download
            )
        except (OSError, ValueError) as error:
            if os.path.isdir(name_or_path):
                raise ValueError(f"cannot load a Hugging Face tokenizer from the folder "
                                 f"{name_or_path!r}: {error}") from None
            raise ValueError(
                f"unknown tokenizer {name_or_path!r}: not one of the built-in ones "
                f"({', '.join(BUILT_IN_TOKENIZERS)}), and cannot load a Hugging Face tokenizer "
                "from it: give a folder holding one, the name of one in the Hugging Face cache, "
                "or a hub name with --allow-download"
            ) from None
        self.name = f"hf:{name_or_path}"

    def _split(self, text: str) -> list[str]:
        return self.hf.tokenize(text)


BUILT_IN_TOKENIZERS: dict[str, type[Tokenizer]] = {
    "whitespace": WhitespaceTokenizer,
    "13a": Sacrebleu13aTokenizer,
    "chars": CharacterTokenizer,
}


def make_tokenizer(spec: str | Tokenizer, lowercase: bool = False, allow_download: bool = False) -> Tokenizer:
    """`whitespace`, `13a`, `chars`, or a Hugging Face tokenizer folder or cached name (`hf:`
    prefix optional; hub downloads only with `allow_download`)."""
    if isinstance(spec, Tokenizer):
        return spec
    if spec in BUILT_IN_TOKENIZERS:
        return BUILT_IN_TOKENIZERS[spec](lowercase)
    return HuggingFaceTokenizer(spec.removeprefix("hf:"), lowercase, allow_download)
