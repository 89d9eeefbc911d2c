"""How ordinary a text's own tokens are, measured against the training set: word salad, shuffled,
repeated, cut-off and mangled text told apart from real text without any kernel.

A neighbour estimate is a mean of the nearest training texts' scores, and a top-k mean exists
however far those nearest texts are: shuffled words, a phrase repeated to length or words drawn
at random from the training vocabulary get the scores of ordinary texts, because no training
text is degenerate. Their own tokens give them away: five statistics, all from integer counts:

- `support`: the share of the text's tokens that another training text holds, less two for each
  distinct character of its tokens that no other training text holds; misspelt or mangled words
  and other vocabularies lower it, and a character the training set never uses (another script,
  case convention, punctuation or markup: a text from another source) puts a text below every
  text without one, whatever its share: a new word is common, a new character is rare;
- `order`: how many more of the text's bigrams (with its start and end as tokens) another
  training text holds in the text's own order than in a random order of the same tokens, per
  bigram: (held in order - held in a random order on average) / bigrams. The random order's
  mean is exact: with n tokens, (pairs of positions i != j whose bigram (t_i, t_j) is held +
  tokens held after the start + tokens held before the end) / n. Words new to the training set
  weigh on both sides alike, so a text of unusual content keeps it near that of real text,
  while a shuffled, reversed, word-salad, dropped or replaced-word copy loses it (a shuffled
  copy's is 0 on average);
- `repetition`: bigram occurrences that repeat an earlier one of the same text, among bigrams
  of tokens with a word character (punctuation and symbols, such as the masked digits "#" of
  some corpora, repeat in ordinary text); a phrase repeated to length or a text doubled raises it;
- `ending`: the share of other training texts whose last token ends in the same character as
  the text's: a text cut off mid-sentence ends where real texts seldom do;
- `spelling`: the share of the text's tokens that no other training text holds and that are
  misspelt: not a word of the language's list but one edit from one (`text.lexicon`); a new
  word or name is common in real text, a word one letter off is not, so typos and corrupted
  characters raise it where `support` cannot tell them from new names.

"Another" training text: for a training text the counts leave the text itself out (its exact
leave-one-out), so its statistics are those of a new text from the same distribution; that is
what `core.outside` compares new texts with. A text with no token has none (NaN).

Tokens are the scorer's tokenizer's. Texts and a model's token ids (`vocabulary.kept_tokens`)
both become a padded [rows, width] tensor of vocabulary ids (the training set's; -1 for a token
it lacks), one of identities (equal where the tokens are equal, also for tokens the training
set lacks; distinct for every token without a word character), each row's length, the code
point of its last token's last character and the code points of its tokens' characters: one
computation, on the tokens' device, with shapes known on the host, so the id path never waits
for the device; counts and one division each, the same bits on every device.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from gpu_neighbors.text.compiled import native
from gpu_neighbors.text.key_index import KeyIndex, concatenated, indexed_by_key
from gpu_neighbors.text.lexicon import misspelt_table
from gpu_neighbors.text.token_runs import RunVocabulary, SplitTokens, split_tokens
from gpu_neighbors.text.tokenizers import TokenizedTexts, Tokenizer, WhitespaceTokenizer
from gpu_neighbors.text.vocabulary import UNKNOWN_ID, TokenBatch, Vocabulary, id_lookup, kept_tokens

LANGUAGE = "en"  # of the spelling statistic's word list where none is named (`text.lexicon`)
STATISTICS = ("support", "order", "repetition", "ending", "spelling")
LOW_IS_ATYPICAL = (True, True, False, True, False)  # repetition and spelling are atypical when high
# The outlier test's columns (`core.outside.OutlierTest`): these statistics, the nearest
# similarity (low is atypical) and the degeneracy score learned from degenerate copies
# (`core.discriminant`; high is atypical). Support, repetition, the ending, spelling and the
# degeneracy score may flag a text alone (Bonferroni's test over five); the order statistic, on
# which the degeneracy score leans most, and the nearest similarity only add up (Fisher's
# product), which joins Bonferroni's above k / level = 100 calibration texts
# (`core.outside.OutsideRule.bonferroni_share`).
TEST_LOW_IS_ATYPICAL = LOW_IS_ATYPICAL + (True, False)
TEST_ALONE = (True, False, True, True, True, False, True)
FIT_ROWS = 1 << 12  # texts padded at once
# New texts whose statistics one compiled pass makes at once: their code points and tokens stay
# small enough that the allocator reuses their memory (`prepare` of 100,000 candidates in batches
# of 8,192, one thread: 62,437 page faults with a batch at once, 26,417 at this size).
COMPILED_ROWS = 1 << 11
SHORT_TEXT = 64  # characters: texts up to twice this long share a slice whatever their lengths
PAIR_BLOCK = 1 << 22  # bigram keys of position pairs (`order`) made at once
# The order statistic counts a row's pairs of positions one by one (width^2 lookups) unless its
# width^2 passes this many times the bigram table's size and the vocabulary's, where it reads the
# table instead (linear in the row's length; the same integers either way).
TABLE_PAIRS = 4
# Devices whose tables count the other keys by a hash index of them on the host (`KeyIndex`);
# elsewhere by binary search on the device.
HASHED_ON = frozenset({"cpu"})
WORDLIKE = re.compile(r"\w")
NOT_A_WORD = -1  # the identity of a token without a word character, before it is made unique


def is_wordlike(token: str) -> bool:
    return WORDLIKE.search(token) is not None


@dataclass(frozen=True)
class Tokens:
    """Padded token rows: vocabulary ids (UNKNOWN_ID: unseen in training), identities (>= 0;
    NOT_A_WORD for tokens without a word character), lengths and endings; entries past a row's
    length are ignored."""

    ids: torch.Tensor  # int64 [rows, width]
    identities: torch.Tensor  # int64 [rows, width]
    lengths: torch.Tensor  # int64 [rows]
    identity_count: int  # every identity is below it
    endings: torch.Tensor  # int64 [rows]: code point of the last token's last character; -1: no token
    characters: torch.Tensor  # int64 [rows, characters]: code points of the row's tokens (from token
    # ids only those no training text holds: all that the statistic counts); -1 past them
    misspelt: torch.Tensor  # bool [rows, width]: tokens one edit from a listed word (`text.lexicon`)

    @classmethod
    def of(cls, tokenized: TokenizedTexts, vocabulary: Vocabulary, wordlike_ids: np.ndarray,
           misspelt_ids: np.ndarray | None, language: str, device: torch.device) -> Tokens:
        """The tokens of texts: an unseen token's identity is the vocabulary size plus its rank
        among this batch's distinct unseen tokens. `wordlike_ids`, `misspelt_ids`: whether each
        vocabulary token has a word character (`wordlike_table`) and is misspelt in the word
        list of `language` (`lexicon.misspelt_table`; None: vocabulary tokens not judged), so
        only unseen tokens are read."""
        batch = vocabulary.batch(tokenized, torch.device("cpu"))
        strings = np.asarray(tokenized.tokens, dtype=object)
        if len(tokenized.separators):
            strings = np.delete(strings, tokenized.separators)
        ids = batch.ids.numpy()
        unseen = ids == UNKNOWN_ID
        wordlike = _vocabulary_flags(wordlike_ids, ids)
        misspelt = _vocabulary_flags(misspelt_ids, ids)
        identities = ids.copy()
        if unseen.any():  # each distinct unseen token read once
            distinct, rank = np.unique(strings[unseen].astype(str), return_inverse=True)
            rank = rank.reshape(-1)
            wordlike[unseen] = np.fromiter(map(is_wordlike, distinct), dtype=bool, count=len(distinct))[rank]
            misspelt[unseen] = misspelt_table(distinct, language)[rank]
            identities[unseen] = len(vocabulary) + rank
        identities[~wordlike] = NOT_A_WORD
        lengths = batch.lengths.numpy()
        last = np.cumsum(lengths) - 1
        endings = torch.tensor([last_character(strings[end]) if length else -1 for end, length in zip(last, lengths)],
                               dtype=torch.int64)
        characters = _characters(strings, batch.rows.numpy(), len(batch))
        return cls._padded(batch, identities, misspelt, len(vocabulary) + int(unseen.sum()), endings, characters,
                           device)

    @classmethod
    def of_split(cls, split: SplitTokens, vocab_size: int, misspelt_ids: np.ndarray | None, language: str,
                 device: torch.device) -> Tokens:
        """`of` for tokens read from code points (`text.token_runs`): the same tensors but for
        the unseen tokens' identities, numbered in another order (equal where the tokens are
        equal, distinct elsewhere: all that the statistics read of them). `misspelt_ids`: as
        `of`'s."""
        batch = TokenBatch(ids=torch.from_numpy(split.ids), lengths=torch.from_numpy(split.lengths))
        unseen = split.ids == UNKNOWN_ID
        identities = np.where(split.wordlike, np.where(unseen, vocab_size + split.unknown_rank, split.ids), NOT_A_WORD)
        misspelt = _vocabulary_flags(misspelt_ids, split.ids)
        if split.unknown_tokens:
            misspelt[unseen] = misspelt_table(split.unknown_tokens, language)[split.unknown_rank[unseen]]
        characters = _padded_codes(split.codes, split.code_rows, len(batch))
        return cls._padded(batch, identities, misspelt, vocab_size + int(unseen.sum()),
                           torch.from_numpy(split.endings), characters, device)

    @classmethod
    def _padded(cls, batch: TokenBatch, identities: np.ndarray, misspelt: np.ndarray, identity_count: int,
                endings: torch.Tensor, characters: torch.Tensor, device: torch.device) -> Tokens:
        """The batch's ids, their `identities` and `misspelt` padded to [rows, longest], on `device`."""
        width = int(batch.lengths.max()) if len(batch) else 0
        padded_ids = torch.full((len(batch), width), UNKNOWN_ID, dtype=torch.int64)
        padded_identities = torch.full((len(batch), width), NOT_A_WORD, dtype=torch.int64)
        padded_misspelt = torch.zeros((len(batch), width), dtype=torch.bool)
        padded_ids[batch.rows, batch.positions] = batch.ids
        padded_identities[batch.rows, batch.positions] = torch.from_numpy(identities)
        padded_misspelt[batch.rows, batch.positions] = torch.from_numpy(np.asarray(misspelt, dtype=bool))
        return cls(padded_ids.to(device), padded_identities.to(device), batch.lengths.to(device), identity_count,
                   endings.to(device), characters.to(device), padded_misspelt.to(device))


def _vocabulary_flags(table: np.ndarray | None, ids: np.ndarray) -> np.ndarray:
    """bool per token: `table` (wordlike or misspelt, by vocabulary id) at its vocabulary id
    (False for unseen tokens, which callers judge themselves, and everywhere without a table)."""
    if table is None or not len(table):
        return np.zeros(ids.shape, dtype=bool)
    return np.where(ids == UNKNOWN_ID, False, table[np.where(ids == UNKNOWN_ID, 0, ids)])


def _characters(strings: np.ndarray, rows: np.ndarray, count: int) -> torch.Tensor:
    """int64 [count, width]: the code points of each row's tokens (`strings`, of rows `rows` in
    ascending order), -1 past them; lone surrogates are code points too."""
    sizes = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
    codes = np.frombuffer("".join(strings).encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.int64)
    return _padded_codes(codes, np.repeat(rows, sizes), count)


def _padded_codes(codes: np.ndarray, owner: np.ndarray, count: int) -> torch.Tensor:
    """int64 [count, width]: `codes` by row (`owner`, ascending), -1 past each row's."""
    per_row = np.bincount(owner, minlength=count)
    padded = np.full((count, int(per_row.max()) if codes.size else 0), -1, dtype=np.int64)
    padded[owner, np.arange(codes.size) - (np.cumsum(per_row) - per_row)[owner]] = codes
    return torch.from_numpy(padded)


def new_character_table(names: Sequence[str | None], characters: DocumentFrequency) -> torch.Tensor:
    """int64 [len(names), most]: the code points of each token name that no training text holds
    (`characters`, on the host), first in each row, -1 after them: what a new text's statistics
    read of its tokens' characters, at a width of the most any name has (mostly 0 or 1) instead
    of the longest name's length."""
    strings = np.array([name if isinstance(name, str) else "" for name in names], dtype=object)
    codes = _characters(strings, np.arange(len(strings)), len(strings))
    new = torch.where((codes >= 0) & (characters.count(codes) == 0), codes, torch.full_like(codes, -1))
    most = int((new >= 0).sum(dim=1).max()) if new.numel() else 0
    return new.sort(dim=1, descending=True).values[:, :most]


def wordlike_table(vocabulary: Vocabulary) -> np.ndarray:
    """Whether each vocabulary token (by id) has a word character (bool)."""
    return np.fromiter(map(is_wordlike, vocabulary.tokens()), dtype=bool, count=len(vocabulary))


def last_character(token: str | None) -> int:
    """The code point of a token's last character (-1 for none)."""
    return ord(token[-1]) if token else -1


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
    """Sorted distinct keys and how many training texts hold each; where the keys' range is
    small (token ids, most code points, a small training set's bigrams:
    `key_index.indexed_by_key`, the rule `KeyIndex` follows), also the counts indexed by key, so
    that a count is one read instead of a binary search (which was a third of a candidate's
    statistics against 10 training texts)."""

    keys: torch.Tensor
    counts: torch.Tensor
    by_key: torch.Tensor | None = field(default=None, compare=False, repr=False)  # int64 [largest key + 1]

    @classmethod
    def of(cls, distinct_per_row: list[torch.Tensor], device: torch.device) -> DocumentFrequency:
        keys = torch.cat(distinct_per_row) if distinct_per_row else torch.zeros(0, dtype=torch.int64, device=device)
        return cls.indexed(*torch.unique(keys, return_counts=True))

    @classmethod
    def indexed(cls, keys: torch.Tensor, counts: torch.Tensor) -> DocumentFrequency:
        """The table with its counts indexed by key where their range allows (read on the host
        once, here: `count` then reads nothing)."""
        size = int(keys[-1]) + 1 if keys.numel() else 0
        if not keys.numel() or not indexed_by_key(size, keys.numel()):
            return cls(keys, counts)
        by_key = torch.zeros(size, dtype=torch.int64, device=keys.device)
        by_key[keys] = counts
        return cls(keys, counts, by_key)

    def count(self, keys: torch.Tensor, host_waits: bool = True) -> torch.Tensor:
        """How many training texts hold each key (0 for keys < 0: the table's keys are not);
        `host_waits` false: the host reads nothing from the keys (the token-ids path)."""
        if not self.counts.numel():
            return torch.zeros_like(keys)
        if self.by_key is not None:
            inside = (keys >= 0) & (keys < self.by_key.numel())
            return torch.where(inside, self.by_key[keys.clamp(0, self.by_key.numel() - 1)], 0)
        if host_waits and keys.device.type in HASHED_ON:
            flat = keys.contiguous().numpy().reshape(-1)
            asked = np.flatnonzero(flat >= 0)  # padding and unknown tokens' keys are not asked
            found = self._hashed.find(flat[asked])
            hit = found >= 0
            counts = np.zeros(flat.size, dtype=np.int64)
            counts[asked[hit]] = self.counts.numpy()[found[hit]]
            return torch.from_numpy(counts).view(keys.shape)
        position = torch.searchsorted(self.keys, keys).clamp(max=self.keys.numel() - 1)
        return torch.where(self.keys[position] == keys, self.counts[position], 0)

    @cached_property
    def _hashed(self) -> KeyIndex:
        """The keys' hash index, for counts on the CPU: about two slots read a key against a
        binary search's dependent, mispredicted reads (the statistics of 20,000 candidates
        against 2,000 training texts, one thread: 0.19-0.22 against 0.27-0.30 s)."""
        return KeyIndex(self.keys.cpu().numpy())

    @classmethod
    def saved(cls, keys: torch.Tensor, counts: torch.Tensor, device: torch.device) -> DocumentFrequency:
        """The table `keys` and `counts` describe (as `Typicality.state` gave them), on `device`."""
        if (keys.dtype != torch.int64 or counts.dtype != torch.int64 or keys.dim() != 1 or counts.shape != keys.shape
                or bool((keys[1:] <= keys[:-1]).any()) or bool((keys[:1] < 0).any()) or bool((counts < 1).any())):
            raise ValueError("a typicality table is not sorted distinct non-negative int64 keys with positive counts")
        return cls.indexed(keys.to(device), counts.to(device))

    def to(self, device: torch.device) -> DocumentFrequency:
        return DocumentFrequency(self.keys.to(device), self.counts.to(device),
                                 None if self.by_key is None else self.by_key.to(device))


@dataclass(frozen=True)
class IdTables:
    """What token ids need on one device: the tables, and per tokenizer id its vocabulary id
    and whether it has a word character."""

    tables: Tables
    lookup: torch.Tensor
    wordlike: torch.Tensor
    misspelt: torch.Tensor  # bool per tokenizer id the training set lacks (`text.lexicon`; False for the rest)
    last_character: torch.Tensor  # int64 per tokenizer id (-1: a token without a name)
    new_characters: torch.Tensor  # int64 [tokenizer ids, most]: code points no training text holds


TABLE_NAMES = ("tokens", "bigrams", "endings", "characters")  # the document frequencies of `Tables`


@dataclass(frozen=True)
class Tables:
    """What the statistics count against: the training texts' tokens, bigrams, endings (each
    text's last character, `Tokens.endings`) and characters, and how many texts there are."""

    tokens: DocumentFrequency
    bigrams: DocumentFrequency
    endings: DocumentFrequency
    characters: DocumentFrequency
    texts: int

    def to(self, device: torch.device) -> Tables:
        return Tables(self.tokens.to(device), self.bigrams.to(device), self.endings.to(device),
                      self.characters.to(device), self.texts)


@dataclass(frozen=True)
class HeldOut:
    """Per row, the sorted keys of the training text left out of the counts (-1 and other
    negative keys: none), and its ending."""

    ids: torch.Tensor
    characters: torch.Tensor
    bigrams: torch.Tensor
    endings: torch.Tensor


def _by_length(texts: Sequence[str]) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The texts' order by length (characters) and its slices of similar lengths."""
    sizes = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    order = np.argsort(sizes, kind="stable")
    return order, _similar_lengths(sizes[order])


def _similar_lengths(ascending: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) slices of ascending text lengths: at most FIT_ROWS texts each, the longest at
    most twice the first's (or SHORT_TEXT)."""
    slices, first = [], 0
    while first < ascending.size:
        limit = 2 * max(int(ascending[first]), SHORT_TEXT)
        last = min(first + FIT_ROWS, int(np.searchsorted(ascending, limit, side="right")))
        slices.append((first, max(last, first + 1)))
        first = slices[-1][1]
    return slices


def _within(ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """`ids` with UNKNOWN_ID past each row's length."""
    inside = torch.arange(ids.shape[1], device=ids.device)[None, :] < lengths[:, None]
    return torch.where(inside, ids, torch.full_like(ids, UNKNOWN_ID))


def _held(table: DocumentFrequency, keys: torch.Tensor, excluded: torch.Tensor | None,
          host_waits: bool = True) -> torch.Tensor:
    """Whether a training text holds each key of `keys` [rows, ...] (keys < 0: none), leaving out
    per row the text whose sorted keys are `excluded` [rows, width] (None: leaving out none)."""
    counts = table.count(keys, host_waits)
    if excluded is not None and excluded.shape[1]:
        flat = keys.flatten(1)  # [rows, keys], also for no rows
        found = torch.searchsorted(excluded, flat).clamp(max=excluded.shape[1] - 1)
        member = (torch.gather(excluded, 1, found) == flat) & (flat >= 0)
        counts = counts - member.reshape(keys.shape).long()
    return counts > 0


class Typicality:
    """The training set's tokens (by `tokenizer`, the scorer's) and bigrams with how many texts
    hold each; `of_texts` and `of_ids` give the statistics of new texts or a model's token ids."""

    def __init__(self, texts: Sequence[str], tokenizer: Tokenizer, device: torch.device,
                 language: str = LANGUAGE) -> None:
        self.tokenizer, self.device, self.language = tokenizer, device, language
        self.vocabulary = Vocabulary()
        for first in range(0, len(texts), FIT_ROWS):  # ids in order of first occurrence
            self.vocabulary.add(tokenizer.tokenize_many(texts[first : first + FIT_ROWS]))
        self.vocab_size = len(self.vocabulary)
        self.wordlike = wordlike_table(self.vocabulary)
        unigrams, bigrams, endings, characters = [], [], [], []
        order, slices = _by_length(texts)
        for first, last in slices:  # counted in slices of similar lengths: one long text pads no others
            rows = self._tokens([texts[index] for index in order[first:last]])
            unigrams.append(_per_row_distinct(rows.ids))
            bigrams.append(_per_row_distinct(_bigrams(rows.ids, rows.lengths, self.vocab_size)[0]))
            endings.append(rows.endings[rows.endings >= 0])
            characters.append(_per_row_distinct(rows.characters))
        self.tables = Tables(DocumentFrequency.of(unigrams, device), DocumentFrequency.of(bigrams, device),
                             DocumentFrequency.of(endings, device), DocumentFrequency.of(characters, device),
                             len(texts))
        self._on: dict[torch.device, IdTables] = {}

    def state(self) -> tuple[list[str], dict[str, torch.Tensor]]:
        """What the constructor learned, for a saved scorer: the vocabulary's tokens in id order
        and each table's keys and counts on the host, with the number of texts (`from_state`
        reads them back)."""
        tables = {name: getattr(self.tables, name) for name in TABLE_NAMES}
        return self.vocabulary.tokens(), {
            "texts": torch.tensor([self.tables.texts], dtype=torch.int64),
            **{f"{name}_keys": table.keys.cpu() for name, table in tables.items()},
            **{f"{name}_counts": table.counts.cpu() for name, table in tables.items()}}

    @classmethod
    def from_state(cls, tokens: list[str], tables: Mapping[str, torch.Tensor], tokenizer: Tokenizer,
                   device: torch.device, language: str = LANGUAGE) -> Typicality:
        """The typicality `state` describes, without the training texts; ValueError where the
        tables are not such a state."""
        typicality = cls.__new__(cls)
        typicality.tokenizer, typicality.device = tokenizer, device
        typicality.vocabulary = Vocabulary.of_tokens(tokens)
        typicality.vocab_size = len(tokens)
        typicality.wordlike = wordlike_table(typicality.vocabulary)
        typicality.language = language
        try:
            texts = tables["texts"]
            frequencies = {name: DocumentFrequency.saved(tables[f"{name}_keys"], tables[f"{name}_counts"], device)
                           for name in TABLE_NAMES}
        except KeyError as error:
            raise ValueError(f"the typicality tables have no {error}") from None
        if texts.dtype != torch.int64 or texts.shape != (1,) or int(texts[0]) < 0:
            raise ValueError("the typicality tables' number of texts is not one non-negative int64")
        typicality.tables = Tables(**frequencies, texts=int(texts[0]))
        typicality._on = {}
        return typicality

    def of_texts(self, texts: Sequence[str], own: bool = False, originals: Sequence[str] | None = None,
                 ) -> torch.Tensor:
        """float64 [len(texts), 5] on the fitted device; own=True: `texts` are the training
        texts, each left out of its own counts; `originals`: for each text, a training text to
        leave out of the counts instead (that of which it is a copy: the statistics a copy of a
        text the training set never saw would get)."""
        if originals is not None and (own or len(originals) != len(texts)):
            raise ValueError("originals go one to a text, and not with own=True")
        if not own and originals is None and (compiled := self._compiled_statistics(texts)) is not None:
            return compiled
        # By length, in slices whose longest text is at most twice its shortest, so that a slice's
        # rows pad to about their own width: the order statistic reads every pair of positions of
        # the padded rows. A row's statistics do not depend on the other rows of its slice.
        order, slices = _by_length(texts)
        parts = [torch.zeros((0, len(STATISTICS)), dtype=torch.float64, device=self.device)]
        for first, last in slices:
            rows = order[first:last]
            tokens = self._tokens([texts[index] for index in rows], left_out=own or originals is not None)
            excluded = tokens if own else None if originals is None else self._tokens([originals[i] for i in rows])
            parts.append(self.statistics(tokens, self.tables, excluded))
        in_order = torch.cat(parts)
        statistics = torch.empty_like(in_order)
        statistics[torch.from_numpy(order).to(self.device)] = in_order
        return statistics

    def _tokens(self, texts: Sequence[str], left_out: bool = False) -> Tokens:
        """The texts' tokens: for the whitespace tokenizer read from their code points where that
        answers (`text.token_runs`: the same tokens, no Python per token), else tokenized.
        `left_out`: the texts are measured with a training text left out, so their vocabulary
        tokens are judged for spelling too."""
        misspelt_ids = self._misspelt_once if left_out else None
        if self._runs is not None:
            split = split_tokens(list(map(str.lower, texts)) if self.tokenizer.lowercase else texts, self._runs)
            if split is not None:
                return Tokens.of_split(split, self.vocab_size, misspelt_ids, self.language, self.device)
        return Tokens.of(self.tokenizer.tokenize_many(texts), self.vocabulary, self.wordlike, misspelt_ids,
                         self.language, self.device)

    def _compiled_statistics(self, texts: Sequence[str]) -> torch.Tensor | None:
        """`of_texts` of new texts in one compiled pass per text (`typicality_of_tokens`: the
        same integers, the same divisions), where the install built it, the tables are on the
        CPU and the texts' tokens are read from their code points (`split_tokens`); else None.
        COMPILED_ROWS texts at a time (a row's statistics depend on it alone)."""
        if native is None or self.device.type != "cpu" or self._runs is None:
            return None
        statistics = np.empty((len(texts), len(STATISTICS)))
        for first in range(0, max(len(texts), 1), COMPILED_ROWS):
            if not self._compiled_rows(texts[first:first + COMPILED_ROWS], self._runs,
                                       statistics[first:first + COMPILED_ROWS]):
                return None
        return torch.from_numpy(statistics)

    def _compiled_rows(self, texts: Sequence[str], runs: RunVocabulary, statistics: np.ndarray) -> bool:
        """`_compiled_statistics` of some texts into `statistics`; False where their tokens are
        not read from their code points (two unknown tokens share a hash)."""
        assert native is not None
        split = split_tokens(list(map(str.lower, texts)) if self.tokenizer.lowercase else texts, runs)
        if split is None:
            return False
        unseen = split.ids == UNKNOWN_ID
        identities = np.where(split.wordlike, np.where(unseen, self.vocab_size + split.unknown_rank, split.ids),
                              NOT_A_WORD)
        misspelt = np.zeros(split.ids.size, dtype=bool)
        if split.unknown_tokens:
            misspelt[unseen] = misspelt_table(split.unknown_tokens, self.language)[split.unknown_rank[unseen]]
        native.typicality_of_tokens(split.ids, identities, misspelt.view(np.uint8), split.lengths, split.endings,
                                    split.codes, split.code_bounds, self.vocab_size,
                                    self.vocab_size + int(unseen.sum()), *self._native_tables, self.tables.texts,
                                    TABLE_PAIRS, float("nan"), statistics)
        return True

    @cached_property
    def _native_tables(self) -> tuple[np.ndarray, ...]:
        """What `typicality_of_tokens` reads of the tables, on the host: their indexes
        (`TABLE_NAMES` order), the endings' counts, the bigrams' keys a * (vocabulary + 2) + b
        (sorted), where those of each first token a start (the start and end tokens too, then
        the table's size), and per token whether a bigram after the start or before the end
        holds it."""
        tables = [getattr(self.tables, name) for name in TABLE_NAMES]
        keys = self.tables.bigrams.keys.cpu().numpy()
        size = self.vocab_size + 2
        successors = np.searchsorted(keys, np.arange(size + 1, dtype=np.int64) * size).astype(np.int64)
        first, second = keys // size, keys % size
        opens, closes = np.zeros(size, dtype=np.uint8), np.zeros(size, dtype=np.uint8)
        opens[second[first == self.vocab_size]] = 1
        closes[first[second == self.vocab_size + 1]] = 1
        return (*concatenated([table._hashed for table in tables]), self.tables.endings.counts.cpu().numpy(), keys,
                successors, opens, closes)

    @cached_property
    def _misspelt_once(self) -> np.ndarray:
        """Per vocabulary id whether it is misspelt, judged for the tokens one training text
        holds (False for the rest): only those can go unheld, where a text is measured without
        itself or its original (at fit). A new text's known tokens are all held, so loading and
        predicting never judge the vocabulary."""
        table = self.tables.tokens
        once = table.keys[table.counts == 1].cpu().numpy()
        flags = np.zeros(self.vocab_size, dtype=bool)
        tokens = self.vocabulary.tokens()
        flags[once] = misspelt_table([tokens[index] for index in once], self.language)
        return flags

    @cached_property
    def _runs(self) -> RunVocabulary | None:
        """The vocabulary as code point runs, where the tokenizer is `str.split()`."""
        return RunVocabulary.of(self.vocabulary.tokens()) if type(self.tokenizer) is WhitespaceTokenizer else None

    def of_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """float64 [rows, 5] of a model's token ids, on their device, without waiting for it
        (the tables move there on the first call): the statistics of the decoded texts. An
        unseen token's identity is the vocabulary size plus its tokenizer id."""
        tables = self._tables_on(input_ids.device)
        ids, lengths, order = kept_tokens(tables.lookup, input_ids.long(), attention_mask)
        raw = torch.gather(input_ids.long().clamp(0, tables.lookup.numel() - 1), 1, order)
        identities = torch.where(ids == UNKNOWN_ID, self.vocab_size + raw, ids)
        identities = torch.where(tables.wordlike[raw], identities, torch.full_like(identities, NOT_A_WORD))
        if raw.shape[1]:
            last = torch.gather(raw, 1, (lengths - 1).clamp(min=0)[:, None])[:, 0]
            endings = torch.where(lengths > 0, tables.last_character[last], torch.full_like(lengths, -1))
        else:
            endings = torch.full_like(lengths, -1)
        inside = torch.arange(raw.shape[1], device=raw.device)[None, :] < lengths[:, None]
        characters = torch.where(inside[:, :, None], tables.new_characters[raw], torch.full_like(raw[:, :, None], -1))
        tokens = Tokens(ids, identities, lengths, self.vocab_size + tables.lookup.numel(), endings,
                        characters.flatten(1), inside & tables.misspelt[raw])
        return self.statistics(tokens, tables.tables, host_waits=False)

    def _tables_on(self, device: torch.device) -> IdTables:
        if device not in self._on:
            hf = getattr(self.tokenizer, "hf", None)
            if hf is None:
                raise ValueError(f"token ids need a Hugging Face tokenizer, not {self.tokenizer.signature!r}")
            names = hf.convert_ids_to_tokens(list(range(len(hf))))
            wordlike = torch.tensor([isinstance(name, str) and is_wordlike(name) for name in names])
            last = torch.tensor([last_character(name if isinstance(name, str) else None) for name in names],
                                dtype=torch.int64)
            lookup = id_lookup(self.vocabulary, hf)
            unseen = [name if known == UNKNOWN_ID else None for name, known in zip(names, lookup.tolist())]
            self._on[device] = IdTables(self.tables.to(device), lookup.to(device), wordlike.to(device),
                                        torch.from_numpy(misspelt_table(unseen, self.language)).to(device),
                                        last.to(device),
                                        new_character_table(names, self.tables.characters.to(torch.device("cpu"))).to(device))
        return self._on[device]

    def statistics(self, tokens: Tokens, tables: Tables, excluded: Tokens | None = None,
                   host_waits: bool = True) -> torch.Tensor:
        """float64 [rows, 5] (`STATISTICS`) of `tokens` against `tables` (the fitted ones, on the
        tokens' device); NaN rows for texts without a token. `excluded`: per row, the training
        text whose counts are left out (the row itself for training texts, `own`); `host_waits`
        false: the host reads nothing from the tensors (the token-ids path)."""
        ids, lengths = tokens.ids, tokens.lengths
        rows, width = ids.shape
        inside = torch.arange(width, device=ids.device)[None, :] < lengths[:, None]
        ids = torch.where(inside, ids, torch.full_like(ids, UNKNOWN_ID))
        keys, exists = _bigrams(ids, lengths, self.vocab_size)
        if excluded is None:
            held_out = None
        else:
            excluded_ids = _within(excluded.ids, excluded.lengths)
            held_out = HeldOut(excluded_ids.sort(dim=1).values, excluded.characters.sort(dim=1).values,
                               _bigrams(excluded_ids, excluded.lengths, self.vocab_size)[0].sort(dim=1).values,
                               excluded.endings)
        held_mask = _held(tables.tokens, ids, None if held_out is None else held_out.ids, host_waits) & inside
        held_tokens = held_mask.sum(dim=1)
        misspellings = (tokens.misspelt & inside & ~held_mask).sum(dim=1)
        codes = tokens.characters.sort(dim=1).values
        first = codes >= 0
        first[:, 1:] &= codes[:, 1:] != codes[:, :-1]
        own_characters = None if held_out is None else held_out.characters
        new_characters = (first & ~_held(tables.characters, codes, own_characters, host_waits)).sum(dim=1)
        own_bigrams = None if held_out is None else held_out.bigrams
        held_bigrams = _held(tables.bigrams, keys, own_bigrams, host_waits).sum(dim=1)
        shuffled = self._held_in_any_order(ids, lengths, own_bigrams, tables.bigrams, host_waits)
        identities = torch.where(inside, tokens.identities, torch.full_like(tokens.identities, NOT_A_WORD))
        ordered = _bigrams(identities, lengths, tokens.identity_count)[0].sort(dim=1).values
        repeats = ((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)).sum(dim=1)
        ending = tables.endings.count(tokens.endings, host_waits)
        if held_out is not None:
            ending = ending - ((held_out.endings == tokens.endings) & (tokens.endings >= 0)).long()
        bigrams = exists.sum(dim=1)
        # support: held / n - 2 new, and order: (held - shuffled / n) / (n + 1), each as one
        # division of integers
        counts = torch.stack([held_tokens - 2 * new_characters * lengths, lengths * held_bigrams - shuffled, repeats,
                              ending, misspellings], dim=1)
        others = torch.full_like(lengths, max(1, tables.texts - int(excluded is not None)))
        totals = torch.stack([lengths, lengths * bigrams, bigrams, others, lengths], dim=1)
        statistics = counts.to(torch.float64) / totals.to(torch.float64)
        return torch.where(lengths[:, None] > 0, statistics, torch.full_like(statistics, float("nan")))

    def _held_in_any_order(self, ids: torch.Tensor, lengths: torch.Tensor, excluded: torch.Tensor | None,
                           table: DocumentFrequency, host_waits: bool) -> torch.Tensor:
        """int64 [rows]: n times the mean number of a row's bigrams another training text holds
        when its n tokens come in a uniformly random order: the position pairs i != j whose
        bigram is held, plus the tokens held after the start and before the end. A pair's
        bigram counts as held where a training text holds it other than the one left out
        (`excluded`: its sorted bigram keys per row; None: none left out)."""
        rows, width = ids.shape
        device = ids.device
        size, start, end = self.vocab_size + 2, self.vocab_size, self.vocab_size + 1
        position = torch.arange(width, device=device)
        inside = position[None, :] < lengths[:, None]
        known = inside & (ids >= 0)

        def held(pair_keys: torch.Tensor, valid: torch.Tensor, owner: torch.Tensor | None) -> torch.Tensor:
            keys = torch.where(valid, pair_keys, torch.full_like(pair_keys, -1))
            return _held(table, keys, owner, host_waits).flatten(1).sum(dim=1)

        total = held(start * size + ids, known, excluded) + held(ids * size + end, known, excluded)
        if host_waits and device.type == "cpu" and rows:
            # Only pairs of known tokens can be held: each row's known tokens moved to the front
            # and the rest cut off (the pairs counted are the same; their order does not count).
            # Not on a GPU, nor where the host must not wait: the width kept is read on the host.
            front = torch.sort((~known).to(torch.uint8), dim=1, stable=True).indices
            width = int(known.sum(dim=1).max())
            ids, known = torch.gather(ids, 1, front[:, :width]), torch.gather(known, 1, front[:, :width])
        if width * width > TABLE_PAIRS * (table.keys.numel() + size):
            pairs = _held_pairs_by_table(ids, known, excluded, table, size, host_waits)
        else:
            pairs = _held_pairs_by_position(ids, known, excluded, table, size, host_waits)
        return total + pairs


def _held_pairs_by_position(ids: torch.Tensor, known: torch.Tensor, excluded: torch.Tensor | None,
                            table: DocumentFrequency, size: int, host_waits: bool) -> torch.Tensor:
    """int64 [rows]: the ordered pairs of distinct positions of known tokens whose bigram key
    (first * `size` + second) a training text holds other than the row's `excluded` one, each
    pair looked up: width^2 lookups a row, the cheaper way for rows short beside the table."""
    rows, width = ids.shape
    position = torch.arange(width, device=ids.device)
    block_rows = max(1, PAIR_BLOCK // max(1, width * width))
    block_positions = max(1, PAIR_BLOCK // max(1, block_rows * width))
    parts = [torch.zeros(0, dtype=torch.int64, device=ids.device)]
    for first in range(0, rows, block_rows):
        block = slice(first, first + block_rows)
        count = torch.zeros(ids[block].shape[0], dtype=torch.int64, device=ids.device)
        for left in range(0, width, block_positions):
            span = slice(left, left + block_positions)
            pairs = ids[block, span, None] * size + ids[block, None, :]
            valid = known[block, span, None] & known[block, None, :]
            valid &= position[span, None] != position[None, :]
            keys = torch.where(valid, pairs, torch.full_like(pairs, -1))
            owner = None if excluded is None else excluded[block]
            count = count + _held(table, keys, owner, host_waits).flatten(1).sum(dim=1)
        parts.append(count)
    return torch.cat(parts)


def _held_pairs_by_table(ids: torch.Tensor, known: torch.Tensor, excluded: torch.Tensor | None,
                         table: DocumentFrequency, size: int, host_waits: bool) -> torch.Tensor:
    """`_held_pairs_by_position`'s count read from the table's side, linear in a row's length:
    with m(a) the row's occurrences of token a, the pairs of distinct positions holding bigram
    (a, b) number m(a) (m(b) - [a = b]); summed over every bigram of the table, less those the
    row's excluded text alone holds (a table count of 1 and a key of the excluded row). Exact
    integers, so the same count as pair by pair; which of the two runs is read from shapes."""
    rows, width = ids.shape
    device = ids.device
    block_rows = max(1, PAIR_BLOCK // max(1, size + 1))
    block_keys = max(1, PAIR_BLOCK // block_rows)
    keys = table.keys
    parts = [torch.zeros(0, dtype=torch.int64, device=device)]
    for first in range(0, rows, block_rows):
        block = slice(first, first + block_rows)
        block_ids, block_known = ids[block], known[block]
        # occurrences per token id, column `size` gathering the unknown tokens (never read)
        occurrences = torch.zeros((block_ids.shape[0], size + 1), dtype=torch.int64, device=device)
        occurrences.scatter_add_(1, torch.where(block_known, block_ids, torch.full_like(block_ids, size)),
                                 block_known.long())

        def pairs_of(bigrams: torch.Tensor) -> torch.Tensor:
            """[block rows, len(bigrams)] (or per row: [block rows, n]): m(a) (m(b) - [a = b])."""
            first_token, second_token = bigrams // size, bigrams % size
            if bigrams.dim() == 1:
                first_token, second_token = first_token.expand(occurrences.shape[0], -1), \
                    second_token.expand(occurrences.shape[0], -1)
            second = torch.gather(occurrences, 1, second_token) - (first_token == second_token).long()
            return torch.gather(occurrences, 1, first_token) * second

        count = torch.zeros(block_ids.shape[0], dtype=torch.int64, device=device)
        for start in range(0, keys.numel(), block_keys):
            count = count + pairs_of(keys[start:start + block_keys]).sum(dim=1)
        if excluded is not None and excluded.shape[1]:
            own = excluded[block]  # sorted per row: each distinct key once, keys < 0 none
            distinct = own >= 0
            distinct[:, 1:] &= own[:, 1:] != own[:, :-1]
            alone = distinct & (table.count(own, host_waits) == 1)
            safe = torch.where(alone, own, torch.zeros_like(own))
            count = count - torch.where(alone, pairs_of(safe), torch.zeros_like(own)).sum(dim=1)
        parts.append(count)
    return torch.cat(parts)
