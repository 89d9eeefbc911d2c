"""Token ids: a training-set vocabulary and ragged batches of id sequences on a device."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import repeat
from typing import Any

import numpy as np
import torch

from gpu_neighbors.text.tokenizers import SEPARATOR, TokenizedTexts, Tokenizer, WhitespaceTokenizer
from gpu_neighbors.text.word_ids import word_ids

UNKNOWN_ID = -1  # a token the training set never had
DROPPED = -2  # id-table value of ids that decode would drop (special tokens, vocabulary holes)


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
    """Token string -> id in order of first occurrence, built from the training set (`add`)
    and then only read (`batch`)."""

    def __init__(self, tokenized: TokenizedTexts | None = None) -> None:
        self._ids: dict[str, int] = {}
        if tokenized is not None:
            self.add(tokenized)

    def __len__(self) -> int:
        return len(self._ids)

    @classmethod
    def of_tokens(cls, tokens: list[str]) -> Vocabulary:
        """The vocabulary whose tokens in id order are `tokens` (`tokens()`, as saved)."""
        vocabulary = cls()
        vocabulary._ids = {token: index for index, token in enumerate(tokens)}
        if len(vocabulary._ids) != len(tokens):
            raise ValueError("a vocabulary's tokens must be distinct")
        return vocabulary

    def tokens(self) -> list[str]:
        """Every token, in id order."""
        return list(self._ids)

    def add(self, tokenized: TokenizedTexts) -> None:
        """Give the tokens not seen yet the next ids, in order of first occurrence."""
        new = dict.fromkeys(tokenized.tokens)
        if len(tokenized.separators):
            del new[SEPARATOR]
        ids = self._ids
        for token in new:
            if token not in ids:
                ids[token] = len(ids)

    def batch(self, tokenized: TokenizedTexts, device: torch.device) -> TokenBatch:
        """Ids of every token (UNKNOWN_ID for tokens unseen in training), as a ragged batch."""
        ids = self._ids_of(tokenized.tokens)
        if len(tokenized.separators):
            ids = np.delete(ids, tokenized.separators)
        return TokenBatch(
            ids=torch.from_numpy(ids).to(device),
            lengths=torch.from_numpy(np.ascontiguousarray(tokenized.lengths, dtype=np.int64)).to(device),
        )

    def encode(self, tokenizer: Tokenizer, texts: Sequence[str], device: torch.device) -> tuple[TokenBatch, np.ndarray]:
        """`batch(tokenizer.tokenize_many(texts))` and each text's token count on the host.
        Whitespace tokens of ASCII text come from `word_ids`, which numbers them with no Python
        step per token, so the vocabulary is asked once per distinct word (splitting, cutting
        apart and looking up every token were a third of BLEU*'s encoding)."""
        numbered = None
        if type(tokenizer) is WhitespaceTokenizer:
            numbered = word_ids(list(map(str.lower, texts)) if tokenizer.lowercase else texts)
        if numbered is None:
            tokenized = tokenizer.tokenize_many(texts)
            return self.batch(tokenized, device), np.ascontiguousarray(tokenized.lengths, dtype=np.int64)
        known = self._ids_of(numbered.words())
        batch = TokenBatch(ids=torch.from_numpy(known[numbered.ids]).to(device),
                           lengths=torch.from_numpy(numbered.counts).to(device))
        return batch, numbered.counts

    def _ids_of(self, tokens: list[str]) -> np.ndarray:
        """int64 id of each token (UNKNOWN_ID where the training set never had it)."""
        return np.fromiter(map(self._ids.get, tokens, repeat(UNKNOWN_ID)), dtype=np.int64, count=len(tokens))


def id_lookup(vocabulary: Vocabulary, hf: Any) -> torch.Tensor:
    """int64 [tokenizer size] on the host: the vocabulary id of each of a Hugging Face
    tokenizer's ids (UNKNOWN_ID: a token the training set never had; DROPPED: special tokens
    and holes, which decoding drops). Built once, with one pass over the tokenizer's tokens."""
    size = len(hf)
    names = hf.convert_ids_to_tokens(list(range(size)))
    ids = vocabulary.batch(
        TokenizedTexts.from_lists([[name] if isinstance(name, str) else [] for name in names]), torch.device("cpu"))
    lookup = torch.full((size,), DROPPED, dtype=torch.int64)
    present = ids.lengths == 1
    lookup[present] = ids.ids
    special = torch.tensor(sorted(set(hf.all_special_ids)), dtype=torch.int64)
    lookup[special[special < size]] = DROPPED
    return lookup


def kept_tokens(
    lookup: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A model's token ids [rows, length] as vocabulary ids with the kept tokens first in each
    row (UNKNOWN_ID where unseen in training; what follows a row's count is not its tokens), the
    number kept per row, and where in its row each entry came from: what decoding the row and
    tokenizing the text would give. Shapes only, so nothing waits for the device."""
    in_range = (input_ids >= 0) & (input_ids < lookup.numel())
    mapped = lookup[input_ids.clamp(0, lookup.numel() - 1)]
    kept = in_range & (mapped != DROPPED)
    if attention_mask is not None:
        kept &= attention_mask != 0
    order = torch.argsort((~kept).to(torch.uint8), dim=1, stable=True)
    return torch.gather(mapped, 1, order), kept.sum(dim=1), order
