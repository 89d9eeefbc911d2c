"""How ordinary a text's own tokens are, measured against the training set: word salad, shuffled,
repeated and mangled text told apart from real text without any kernel.

A neighbour estimate is a mean of the nearest training texts' scores, and a top-k mean exists
however far those nearest texts are: shuffled words, a phrase repeated to length or words drawn
at random from the training vocabulary get the scores of ordinary texts, because no training
text is degenerate. Their own tokens give them away: three statistics, each a share of a text's
token occurrences, all from integer counts:

- `token_support`: tokens that another training text holds; misspelt or mangled words and
  other vocabularies lower it;
- `bigram_support`: token bigrams, with the text's start and end as tokens, that another
  training text holds; shuffled, reversed, truncated, dropped or random words lower it;
- `repetition`: bigram occurrences that repeat an earlier one of the same text, among bigrams
  of tokens with a word character (punctuation and symbols, such as the masked digits "#" of
  some corpora, repeat in ordinary text); a phrase repeated to length or a text doubled raises it.

"Another" training text: for a training text the counts leave the text itself out (its exact
leave-one-out), so its statistics are those of a new text from the same distribution; that is
what `core.outside` compares new texts with. A text with no token has none (NaN).

Tokens are the scorer's tokenizer's. Texts and a model's token ids (`vocabulary.kept_tokens`)
both become a padded [rows, width] tensor of vocabulary ids (the training set's; -1 for a token
it lacks) and one of identities (equal where the tokens are equal, also for tokens the training
set lacks; distinct for every token without a word character), with each row's length: one
computation, on the tokens' device, with shapes known on the host, so the id path never waits
for the device; counts and one division each, the same bits on every device.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpu_neighbors.text.ngrams import lookup_sorted
from gpu_neighbors.text.tokenizers import TokenizedTexts, Tokenizer
from gpu_neighbors.text.vocabulary import UNKNOWN_ID, Vocabulary, id_lookup, kept_tokens

STATISTICS = ("token_support", "bigram_support", "repetition")
LOW_IS_ATYPICAL = (True, True, False)  # repetition is atypical when high
FIT_ROWS = 1 << 12  # texts padded at once
WORDLIKE = re.compile(r"\w")
NOT_A_WORD = -1  # the identity of a token without a word character, before it is made unique


def is_wordlike(token: str) -> bool:
    return WORDLIKE.search(token) is not None


@dataclass(frozen=True)
class Tokens:
    """Padded token rows: vocabulary ids (UNKNOWN_ID: unseen in training), identities (>= 0;
    NOT_A_WORD for tokens without a word character) and lengths; entries past a row's length
    are ignored."""

    ids: torch.Tensor  # int64 [rows, width]
    identities: torch.Tensor  # int64 [rows, width]
    lengths: torch.Tensor  # int64 [rows]
    identity_count: int  # every identity is below it

    @classmethod
    def of(cls, tokenized: TokenizedTexts, vocabulary: Vocabulary, device: torch.device) -> Tokens:
        """The tokens of texts: an unseen token's identity is the vocabulary size plus its rank
        among this batch's distinct unseen tokens."""
        batch = vocabulary.batch(tokenized, torch.device("cpu"))
        strings = np.asarray(tokenized.tokens, dtype=object)
        if len(tokenized.separators):
            strings = np.delete(strings, tokenized.separators)
        ids = batch.ids.numpy()
        wordlike = np.fromiter(map(is_wordlike, strings), dtype=bool, count=strings.size)
        identities = ids.copy()
        unseen = ids == UNKNOWN_ID
        if unseen.any():
            _, rank = np.unique(strings[unseen].astype(str), return_inverse=True)
            identities[unseen] = len(vocabulary) + rank.reshape(-1)
        identities[~wordlike] = NOT_A_WORD
        width = int(batch.lengths.max()) if len(batch) else 0
        padded_ids = torch.full((len(batch), width), UNKNOWN_ID, dtype=torch.int64)
        padded_identities = torch.full((len(batch), width), NOT_A_WORD, dtype=torch.int64)
        padded_ids[batch.rows, batch.positions] = batch.ids
        padded_identities[batch.rows, batch.positions] = torch.from_numpy(identities)
        return cls(padded_ids.to(device), padded_identities.to(device), batch.lengths.to(device),
                   len(vocabulary) + int(unseen.sum()))


def _bigrams(tokens: torch.Tensor, lengths: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """([rows, width + 1] keys of each row's bigrams start t1 .. tn end, where a bigram exists):
    a bigram of two tokens >= 0 (below `count`) has key a * (count + 2) + b; one with a token < 0,
    or past the row's end, a key of its own below -1 that no other position has."""
    rows, width = tokens.shape
    device = tokens.device
    start, end = count, count + 1
    position = torch.arange(width + 2, device=device)
    inside = (position[None, :] >= 1) & (position[None, :] <= lengths[:, None])
    sequence = torch.full((rows, width + 2), end, dtype=torch.int64, device=device)
    sequence[:, 1 : width + 1] = tokens
    sequence = torch.where(inside, sequence, torch.full_like(sequence, end))
    sequence[:, 0].fill_(start)
    left, right = sequence[:, :-1], sequence[:, 1:]
    exists = position[None, : width + 1] <= lengths[:, None]
    known = exists & (left >= 0) & (right >= 0)
    unique = -2 - torch.arange(rows * (width + 1), device=device).view(rows, width + 1)
    return torch.where(known, left * (count + 2) + right, unique), exists


def _per_row_distinct(keys: torch.Tensor) -> torch.Tensor:
    """The keys >= 0 of each row, each once per row (flattened)."""
    ordered = keys.sort(dim=1).values
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    return ordered[first & (ordered >= 0)]


@dataclass(frozen=True)
class DocumentFrequency:
    """Sorted distinct keys and how many training texts hold each."""

    keys: torch.Tensor
    counts: torch.Tensor

    @classmethod
    def of(cls, distinct_per_row: list[torch.Tensor], device: torch.device) -> DocumentFrequency:
        keys = torch.cat(distinct_per_row) if distinct_per_row else torch.zeros(0, dtype=torch.int64, device=device)
        return cls(*torch.unique(keys, return_counts=True))

    def held_by_another(self, keys: torch.Tensor, own: bool) -> torch.Tensor:
        """Whether a training text other than the key's own (own=True: the key's text is one of
        the training texts) holds each key; keys < 0 are held by none."""
        position = lookup_sorted(self.keys, keys)
        if not self.counts.numel():
            return torch.zeros_like(keys, dtype=torch.bool)
        counts = torch.where(position >= 0, self.counts[position.clamp(min=0)], torch.zeros_like(position))
        return counts > int(own)

    @classmethod
    def saved(cls, keys: torch.Tensor, counts: torch.Tensor, device: torch.device) -> DocumentFrequency:
        """The table `keys` and `counts` describe (as `Typicality.state` gave them), on `device`."""
        if (keys.dtype != torch.int64 or counts.dtype != torch.int64 or keys.dim() != 1 or counts.shape != keys.shape
                or bool((keys[1:] <= keys[:-1]).any()) or bool((counts < 1).any())):
            raise ValueError("a typicality table is not sorted distinct int64 keys with positive counts")
        return cls(keys.to(device), counts.to(device))

    def to(self, device: torch.device) -> DocumentFrequency:
        return DocumentFrequency(self.keys.to(device), self.counts.to(device))


@dataclass(frozen=True)
class IdTables:
    """What token ids need on one device: the tables, and per tokenizer id its vocabulary id
    and whether it has a word character."""

    tokens: DocumentFrequency
    bigrams: DocumentFrequency
    lookup: torch.Tensor
    wordlike: torch.Tensor


class Typicality:
    """The training set's tokens (by `tokenizer`, the scorer's) and bigrams with how many texts
    hold each; `of_texts` and `of_ids` give the statistics of new texts or a model's token ids."""

    def __init__(self, texts: Sequence[str], tokenizer: Tokenizer, device: torch.device) -> None:
        self.tokenizer, self.device = tokenizer, device
        self.vocabulary = Vocabulary()
        slices = []
        for first in range(0, len(texts), FIT_ROWS):
            tokenized = tokenizer.tokenize_many(texts[first : first + FIT_ROWS])
            self.vocabulary.add(tokenized)  # before the ids: a slice's own tokens are known
            slices.append(tokenized)
        self.vocab_size = len(self.vocabulary)
        unigrams, bigrams = [], []
        for tokenized in slices:
            rows = Tokens.of(tokenized, self.vocabulary, device)
            unigrams.append(_per_row_distinct(rows.ids))
            bigrams.append(_per_row_distinct(_bigrams(rows.ids, rows.lengths, self.vocab_size)[0]))
        self.tokens = DocumentFrequency.of(unigrams, device)
        self.bigrams = DocumentFrequency.of(bigrams, device)
        self._on: dict[torch.device, IdTables] = {}

    def state(self) -> tuple[list[str], dict[str, torch.Tensor]]:
        """What the constructor learned, for a saved scorer: the vocabulary's tokens in id order
        and each table's keys and counts on the host (`from_state` reads them back)."""
        return self.vocabulary.tokens(), {"token_keys": self.tokens.keys.cpu(), "token_counts": self.tokens.counts.cpu(),
                                          "bigram_keys": self.bigrams.keys.cpu(),
                                          "bigram_counts": self.bigrams.counts.cpu()}

    @classmethod
    def from_state(cls, tokens: list[str], tables: Mapping[str, torch.Tensor], tokenizer: Tokenizer,
                   device: torch.device) -> Typicality:
        """The typicality `state` describes, without the training texts; ValueError where the
        tables are not such a state."""
        typicality = cls.__new__(cls)
        typicality.tokenizer, typicality.device = tokenizer, device
        typicality.vocabulary = Vocabulary.of_tokens(tokens)
        typicality.vocab_size = len(tokens)
        try:
            typicality.tokens = DocumentFrequency.saved(tables["token_keys"], tables["token_counts"], device)
            typicality.bigrams = DocumentFrequency.saved(tables["bigram_keys"], tables["bigram_counts"], device)
        except KeyError as error:
            raise ValueError(f"the typicality tables have no {error}") from None
        typicality._on = {}
        return typicality

    def of_texts(self, texts: Sequence[str], own: bool = False) -> torch.Tensor:
        """float64 [len(texts), 3] on the fitted device; own=True: `texts` are the training
        texts, each left out of its own counts."""
        parts = [torch.zeros((0, len(STATISTICS)), dtype=torch.float64, device=self.device)]
        for first in range(0, len(texts), FIT_ROWS):
            tokenized = self.tokenizer.tokenize_many(texts[first : first + FIT_ROWS])
            parts.append(self.statistics(Tokens.of(tokenized, self.vocabulary, self.device), own,
                                         (self.tokens, self.bigrams)))
        return torch.cat(parts)

    def of_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """float64 [rows, 3] of a model's token ids, on their device, without waiting for it
        (the tables move there on the first call): the statistics of the decoded texts. An
        unseen token's identity is the vocabulary size plus its tokenizer id."""
        tables = self._tables_on(input_ids.device)
        ids, lengths, order = kept_tokens(tables.lookup, input_ids.long(), attention_mask)
        raw = torch.gather(input_ids.long().clamp(0, tables.lookup.numel() - 1), 1, order)
        identities = torch.where(ids == UNKNOWN_ID, self.vocab_size + raw, ids)
        identities = torch.where(tables.wordlike[raw], identities, torch.full_like(identities, NOT_A_WORD))
        tokens = Tokens(ids, identities, lengths, self.vocab_size + tables.lookup.numel())
        return self.statistics(tokens, False, (tables.tokens, tables.bigrams))

    def _tables_on(self, device: torch.device) -> IdTables:
        if device not in self._on:
            hf = getattr(self.tokenizer, "hf", None)
            if hf is None:
                raise ValueError(f"token ids need a Hugging Face tokenizer, not {self.tokenizer.signature!r}")
            names = hf.convert_ids_to_tokens(list(range(len(hf))))
            wordlike = torch.tensor([isinstance(name, str) and is_wordlike(name) for name in names])
            self._on[device] = IdTables(self.tokens.to(device), self.bigrams.to(device),
                                        id_lookup(self.vocabulary, hf).to(device), wordlike.to(device))
        return self._on[device]

    def statistics(self, tokens: Tokens, own: bool, tables: tuple[DocumentFrequency, DocumentFrequency]) -> torch.Tensor:
        """float64 [rows, 3] (`STATISTICS`) of `tokens` against `tables` (the fitted ones, on the
        tokens' device); NaN rows for texts without a token."""
        token_table, bigram_table = tables
        ids, lengths = tokens.ids, tokens.lengths
        rows, width = ids.shape
        inside = torch.arange(width, device=ids.device)[None, :] < lengths[:, None]
        ids = torch.where(inside, ids, torch.full_like(ids, UNKNOWN_ID))
        held_tokens = (token_table.held_by_another(ids, own) & inside).sum(dim=1)
        keys, exists = _bigrams(ids, lengths, self.vocab_size)
        held_bigrams = bigram_table.held_by_another(keys, own).sum(dim=1)
        identities = torch.where(inside, tokens.identities, torch.full_like(tokens.identities, NOT_A_WORD))
        ordered = _bigrams(identities, lengths, tokens.identity_count)[0].sort(dim=1).values
        repeats = ((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)).sum(dim=1)
        counts = torch.stack([held_tokens, held_bigrams, repeats], dim=1).to(torch.float64)
        bigrams = exists.sum(dim=1)
        totals = torch.stack([lengths, bigrams, bigrams], dim=1).to(torch.float64)
        statistics = counts / totals
        return torch.where(lengths[:, None] > 0, statistics, torch.full_like(statistics, float("nan")))
