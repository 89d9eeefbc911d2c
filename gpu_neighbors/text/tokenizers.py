"""Text to token strings: whitespace, the 13a tokenizer, characters, or a Hugging Face tokenizer.

Kernels that compare surface forms (BLEU*, ROUGE-L) then map the tokens to integer ids with a
vocabulary frozen on the training set (`vocabulary.py`), so matching runs as tensor work.

A scoring run tokenizes millions of texts, so `tokenize_many` splits a whole batch in one call
where the tokenizer allows it: the texts are joined with a separator token that no rule of the
tokenizer can touch (a private-use character between spaces), split at once, and cut apart
again at the separators; the tokens are exactly those `tokenize` gives text by text (tested).
A batch in which some text holds the separator character goes text by text.
"""
from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence, Sized
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from gpu_neighbors.text.hub import hub_access

SEPARATOR = "\ue000"  # private use: no tokenizer rule matches it, no text is expected to hold it


@dataclass(frozen=True)
class TokenizedTexts:
    """The tokens of many texts in one list, each text's count, and the positions of the
    separator entries in `tokens` that belong to no text (sorted; empty when there are none)."""

    tokens: list[str]
    lengths: np.ndarray
    separators: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @classmethod
    def from_lists(cls, token_lists: Sequence[Sequence[str]]) -> TokenizedTexts:
        return cls(list(chain.from_iterable(token_lists)), _lengths(token_lists))

    @classmethod
    def from_joined(cls, tokens: list[str], num_texts: int) -> TokenizedTexts:
        """`tokens` of `num_texts` texts that were split as one string with SEPARATOR between
        them (so exactly num_texts - 1 SEPARATOR tokens, every one a separator)."""
        separators = np.empty(max(num_texts - 1, 0), dtype=np.int64)
        position = -1
        for gap in range(num_texts - 1):
            position = tokens.index(SEPARATOR, position + 1)
            separators[gap] = position
        ends = np.append(separators, len(tokens))
        lengths = np.diff(ends, prepend=-1) - 1
        return cls(tokens, lengths, separators)

    def __len__(self) -> int:
        return len(self.lengths)


def _lengths(items: Sequence[Sized]) -> np.ndarray:
    return np.fromiter(map(len, items), dtype=np.int64, count=len(items))


class Tokenizer(ABC):
    """Splits a text into token strings; `lowercase` folds case first."""

    name: str = ""
    # Whether `_split` of texts joined by " SEPARATOR " is their splits with SEPARATOR tokens
    # between them (true of rules that look at most one character beside a space).
    splits_joined_texts: bool = False

    def __init__(self, lowercase: bool = False) -> None:
        self.lowercase = _flag("lowercase", lowercase)

    def tokenize(self, text: str) -> list[str]:
        return self._split(text.lower() if self.lowercase else text)

    def tokenize_many(self, texts: Sequence[str]) -> TokenizedTexts:
        """`tokenize` of every text, as one flat list: in one split where the tokenizer allows."""
        return self._split_many(list(map(str.lower, texts)) if self.lowercase else texts)

    def _split_many(self, texts: Sequence[str]) -> TokenizedTexts:
        """`tokenize_many` after case folding."""
        if self.splits_joined_texts and len(texts) > 1:
            joined = f" {SEPARATOR} ".join(texts)
            if joined.count(SEPARATOR) == len(texts) - 1:
                return TokenizedTexts.from_joined(self._split(joined), len(texts))
        return TokenizedTexts.from_lists(list(map(self._split, texts)))

    @abstractmethod
    def _split(self, text: str) -> list[str]: ...

    @property
    def signature(self) -> str:
        return f"{self.name}{'+lc' if self.lowercase else ''}"


class WhitespaceTokenizer(Tokenizer):
    """`str.split()`: the right choice for text that is already tokenized."""

    name = "whitespace"
    splits_joined_texts = True

    def _split(self, text: str) -> list[str]:
        return text.split()


# The rules of mteval-v13a.pl (NIST's BLEU script), the tokenization WMT reports BLEU with and
# sacrebleu's default: markup and line breaks first, then four substitutions.
_13A_REPLACEMENTS = (("<skipped>", ""), ("-\n", ""), ("\n", " "))
_13A_ENTITIES = (("&quot;", '"'), ("&amp;", "&"), ("&lt;", "<"), ("&gt;", ">"))
_13A_RULES = (
    (re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),  # punctuation and symbols
    (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),  # period, comma not after a digit
    (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),  # period, comma not before a digit
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),  # dash after a digit
)


class Sacrebleu13aTokenizer(Tokenizer):
    """The `13a` tokenizer (mteval-v13a), the WMT standard for detokenized text: the same tokens
    as sacrebleu's `Tokenizer13a` (tested), without its per-line cache, so that a whole batch
    can go through the rules as one string."""

    name = "13a"
    splits_joined_texts = True

    def _split(self, text: str) -> list[str]:
        for old, new in _13A_REPLACEMENTS:
            text = text.replace(old, new)
        if "&" in text:
            for entity, character in _13A_ENTITIES:
                text = text.replace(entity, character)
        text = f" {text} "
        for pattern, replacement in _13A_RULES:
            text = pattern.sub(replacement, text)
        return text.split()


class CharacterTokenizer(Tokenizer):
    """Every character is a token, spaces included: what NLTK's `sentence_bleu` scores when it is
    given raw strings instead of token lists (the reading that reproduces the paper's BLEU
    figures; see docs/reproduction.md)."""

    name = "chars"

    def _split(self, text: str) -> list[str]:
        return list(text)

    def _split_many(self, texts: Sequence[str]) -> TokenizedTexts:
        return TokenizedTexts(list("".join(texts)), _lengths(texts))


class SacrebleuTokenizer(Tokenizer):
    """One of sacrebleu's own tokenizers (`sacrebleu_name`), its output split at whitespace: the
    tokens sacrebleu's BLEU counts. Text by text, as sacrebleu (no rule is known to leave a
    separator alone)."""

    sacrebleu_name = ""

    def __init__(self, lowercase: bool = False) -> None:
        super().__init__(lowercase)
        from sacrebleu.tokenizers import tokenizer_char, tokenizer_intl, tokenizer_zh

        made = {"intl": tokenizer_intl.TokenizerV14International, "zh": tokenizer_zh.TokenizerZh,
                "char": tokenizer_char.TokenizerChar}[self.sacrebleu_name]
        self._tokenizer = made()

    def _split(self, text: str) -> list[str]:
        return self._tokenizer(text.rstrip()).split()  # sacrebleu strips the right end first


class IntlTokenizer(SacrebleuTokenizer):
    """sacrebleu's `intl` (mteval-v14 international): Unicode punctuation and symbols split off."""

    name = sacrebleu_name = "intl"


class ZhTokenizer(SacrebleuTokenizer):
    """sacrebleu's `zh`: every CJK character a token, the rest as `13a`."""

    name = sacrebleu_name = "zh"


class SacrebleuCharTokenizer(SacrebleuTokenizer):
    """sacrebleu's `char`: every character but whitespace a token (our `chars` keeps spaces)."""

    name = sacrebleu_name = "char"


_ROUGE_WORD = re.compile("[a-z0-9]+")
_ROUGE_WORD_OR_SEPARATOR = re.compile(f"[a-z0-9]+|{SEPARATOR}")


class RougeScoreTokenizer(Tokenizer):
    """rouge-score's tokenization (the ROUGE-1.5.5 script's): lowercase, every run of ASCII
    letters and digits a token, the rest dropped; with `use_stemmer`, NLTK's Porter stemmer on
    tokens of more than 3 characters, as rouge-score has it. The same tokens as
    `rouge_score.tokenize.tokenize` (tested); each distinct token is stemmed once per batch.
    Built-in names: "rouge-score" and, stemmed, "rouge-score-stem" (e.g. the rouge kernel's
    `Rouge(tokenizer="rouge-score-stem")`)."""

    def __init__(self, use_stemmer: bool = False) -> None:
        super().__init__(lowercase=False)  # always lowercased, in `_split`
        self.use_stemmer = use_stemmer = _flag("use_stemmer", use_stemmer)
        self.name = "rouge-score-stem" if use_stemmer else "rouge-score"
        if use_stemmer:
            from nltk.stem.porter import PorterStemmer

            self._stemmer = PorterStemmer()

    def _split(self, text: str) -> list[str]:
        return self._stemmed(_ROUGE_WORD.findall(text.lower()))

    def _split_many(self, texts: Sequence[str]) -> TokenizedTexts:
        joined = f" {SEPARATOR} ".join(texts)
        if len(texts) > 1 and joined.count(SEPARATOR) == len(texts) - 1:
            tokens = self._stemmed(_ROUGE_WORD_OR_SEPARATOR.findall(joined.lower()))
            return TokenizedTexts.from_joined(tokens, len(texts))
        return TokenizedTexts.from_lists(list(map(self._split, texts)))

    def _stemmed(self, tokens: list[str]) -> list[str]:
        """Each token stemmed where longer than 3 characters; a stem that is no longer letters
        and digits is dropped (rouge-score's last check)."""
        if not self.use_stemmer:
            return tokens
        stems = {token: self._stemmer.stem(token) if len(token) > 3 else token for token in dict.fromkeys(tokens)}
        stems = {token: stem if stem == SEPARATOR or _ROUGE_WORD.fullmatch(stem) else None
                 for token, stem in stems.items()}
        return [stem for stem in map(stems.__getitem__, tokens) if stem is not None]

    @classmethod
    def named(cls, stemmed: bool) -> Callable[[bool], RougeScoreTokenizer]:
        """The built-in factory: lower-cased always, so `lowercase` changes nothing."""
        def make(lowercase: bool = False) -> RougeScoreTokenizer:
            return cls(use_stemmer=stemmed)

        return make


class HuggingFaceTokenizer(Tokenizer):
    """A `transformers` tokenizer (local folder, or a name in the Hugging Face cache); tokens are
    its subword strings. Code shipped in a folder is never run (`trust_remote_code=False`), and
    nothing is downloaded unless `allow_download`."""

    def __init__(self, name_or_path: str, lowercase: bool = False, allow_download: bool = False) -> None:
        super().__init__(lowercase)
        allow_download = _flag("allow_download", allow_download)
        from transformers import AutoTokenizer

        try:
            with hub_access(allow_download):
                self.hf = AutoTokenizer.from_pretrained(
                    name_or_path, trust_remote_code=False, local_files_only=not allow_download
                )
        except Exception as error:  # a damaged folder fails in many ways, each an input error
            if os.path.isdir(name_or_path):
                raise ValueError(f"cannot load a Hugging Face tokenizer from the folder "
                                 f"{name_or_path!r}: {one_line(error)}") from None
            raise ValueError(
                f"unknown tokenizer {name_or_path!r}: not one of the built-in ones "
                f"({', '.join(BUILT_IN_TOKENIZERS)}), and cannot load a Hugging Face tokenizer "
                "from it: give a folder holding one, the name of one in the Hugging Face cache, "
                "or a hub name with --allow-download"
            ) from None
        # A folder with a config but no vocabulary file loads as a tokenizer of special tokens
        # alone, which maps every word to its unknown token: every text would look alike.
        if not set(self.hf.get_vocab()) - set(self.hf.all_special_tokens):
            where = "the folder" if os.path.isdir(name_or_path) else "the Hugging Face tokenizer"
            raise ValueError(f"{where} {name_or_path!r} holds no vocabulary, only special tokens "
                             f"({', '.join(self.hf.all_special_tokens)}): its vocabulary file (vocab.txt, "
                             f"tokenizer.json, ...) is missing or damaged")
        self.name = f"hf:{name_or_path}"

    def _split(self, text: str) -> list[str]:
        return self.hf.tokenize(text)


def one_line(error: Exception) -> str:
    """An error of a loader as one line: its type where its text is empty or unhelpful."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


BUILT_IN_TOKENIZERS: dict[str, Callable[[bool], Tokenizer]] = {
    "whitespace": WhitespaceTokenizer,
    "13a": Sacrebleu13aTokenizer,
    "chars": CharacterTokenizer,
    "intl": IntlTokenizer,
    "zh": ZhTokenizer,
    "char": SacrebleuCharTokenizer,
    "rouge-score": RougeScoreTokenizer.named(stemmed=False),
    "rouge-score-stem": RougeScoreTokenizer.named(stemmed=True),
}


def _flag(name: str, value: object) -> bool:
    """`value` as a bool; anything else refused, since "no" or 0.0 would silently read as set or not."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, not {value!r}")
    return bool(value)


def make_tokenizer(spec: str | Tokenizer, lowercase: bool = False, allow_download: bool = False) -> Tokenizer:
    """`whitespace`, `13a`, `chars`, sacrebleu's `intl`, `zh` or `char`, or a Hugging Face
    tokenizer folder or cached name (`hf:` prefix optional; hub downloads only with
    `allow_download`). A `Tokenizer` is taken as it is: `lowercase` goes to its constructor."""
    if isinstance(spec, Tokenizer):
        if lowercase and not spec.lowercase:
            raise ValueError(f"lowercase=True with a tokenizer made without it ({spec.signature}): make it with "
                             "lowercase=True, or give its name")
        return spec
    if not isinstance(spec, str):  # else "'int' object has no attribute 'removeprefix'"
        raise TypeError(f"tokenizer must be a tokenizer name or a Tokenizer, not {type(spec).__name__}")
    if spec in BUILT_IN_TOKENIZERS:
        return BUILT_IN_TOKENIZERS[spec](lowercase)
    return HuggingFaceTokenizer(spec.removeprefix("hf:"), lowercase, allow_download)
