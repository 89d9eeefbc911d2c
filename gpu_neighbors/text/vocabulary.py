"""Token ids: a training-set vocabulary and ragged batches of id sequences on a device."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import torch

UNKNOWN_ID = -1  # a token the training set never had


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
