"""METEOR as `nltk.translate.meteor_score.single_meteor_score(training text, candidate)`.

NLTK aligns a hypothesis (the candidate) to a reference (the training text) in three greedy
stages: exact matches of lower-cased words, then matches of Porter stems among the words left,
then WordNet synonyms among the stems left (the synonym stage looks up the hypothesis word's
stem and compares stems). Each stage walks the hypothesis from its last word to its first and
takes the last still-free reference word that matches. The score is the F-mean (recall weighted
by alpha) times the fragmentation penalty 1 - gamma * (chunks / matches)^beta.

Almost all of NLTK's time goes to stemming and WordNet lookups repeated for every pair. Here
every distinct string is stemmed and looked up once (`Lexicon`), each text is indexed once by
stem (`TextIndex`), a sparse product of candidate and training "match-class" incidence matrices
finds the pairs that can align any word at all (every other pair scores 0), and only those pairs
run the greedy alignment, on integer ids and only over the stems the two texts relate.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from nltk.stem.porter import PorterStemmer

from gpu_neighbors.core.sparse import coo_matrix, sparse_mm
from gpu_neighbors.text.tokenizers import Tokenizer
from gpu_neighbors.kernels.wordnet import LazyWordNet, load_wordnet
from gpu_neighbors.kernels.base import Kernel


class Lexicon:
    """Every string seen (lower-cased words, stems, WordNet lemma names) gets an integer id;
    each word's Porter stem and each stem's synonyms are computed once and cached."""

    def __init__(self, wordnet: LazyWordNet | None) -> None:
        self._stemmer = PorterStemmer()
        self._wordnet = wordnet
        self._ids: dict[str, int] = {}
        self._strings: list[str] = []
        self._stem_of: dict[int, int] = {}
        self._synonyms_of: dict[int, frozenset[int]] = {}

    def __len__(self) -> int:
        return len(self._strings)

    def _id(self, string: str) -> int:
        found = self._ids.get(string)
        if found is None:
            found = self._ids[string] = len(self._strings)
            self._strings.append(string)
        return found

    def words_and_stems(self, tokens: Sequence[str]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Ids of the lower-cased tokens (NLTK's `str.lower` preprocessing) and of their stems."""
        words = tuple(self._id(token.lower()) for token in tokens)
        return words, tuple(self._stem(word) for word in words)

    def _stem(self, word: int) -> int:
        stem = self._stem_of.get(word)
        if stem is None:
            stem = self._stem_of[word] = self._id(self._stemmer.stem(self._strings[word]))
        return stem

    def synonyms(self, stem: int) -> frozenset[int]:
        """The other strings the synonym stage lets this stem match: the single-word lemma names
        of the WordNet synsets of the stem (empty without WordNet)."""
        related = self._synonyms_of.get(stem)
        if related is None:
            names: set[int] = set()
            if self._wordnet is not None:
                for synset in self._wordnet.reader().synsets(self._strings[stem]):
                    names.update(
                        self._id(lemma.name()) for lemma in synset.lemmas() if "_" not in lemma.name()
                    )
            names.discard(stem)
            related = self._synonyms_of[stem] = frozenset(names)
        return related


@dataclass(frozen=True)
class TextIndex:
    """One text, indexed by stem for the alignment."""

    words: tuple[int, ...]
    positions: dict[int, tuple[int, ...]]  # stem -> its positions, ascending
    stems: frozenset[int]
    mixed: frozenset[int]  # stems written as more than one word in this text
    synonyms: dict[int, frozenset[int]]  # stem -> its synonyms, where it has any
    reach: frozenset[int]  # every string this text's stems can align to

    @classmethod
    def build(cls, words: tuple[int, ...], stems: tuple[int, ...], lexicon: Lexicon) -> TextIndex:
        positions: dict[int, list[int]] = {}
        for position, stem in enumerate(stems):
            positions.setdefault(stem, []).append(position)
        synonyms = {stem: lexicon.synonyms(stem) for stem in positions}
        synonyms = {stem: related for stem, related in synonyms.items() if related}
        return cls(
            words=words,
            positions={stem: tuple(where) for stem, where in positions.items()},
            stems=frozenset(positions),
            mixed=frozenset(
                stem for stem, where in positions.items() if len({words[p] for p in where}) > 1
            ),
            synonyms=synonyms,
            reach=frozenset(positions).union(*synonyms.values()),
        )

    def __len__(self) -> int:
        return len(self.words)


def align(hyp: TextIndex, ref: TextIndex) -> tuple[int, int]:
    """(matches, chunks) of NLTK's three-stage greedy alignment of `hyp` to `ref`.

    Equals `nltk.translate.meteor_score._enum_align_words` followed by `_count_chunks`. Exact
    and stem matches only pair words of one stem, so those two stages run stem by stem: within a
    stem, each stage lets the last free hypothesis word take the last free reference word (with
    one surface form per side, both stages together do just that once). The synonym stage then
    visits the hypothesis words left, last to first, each taking the last free reference word
    whose stem is among its stem's synonyms. (A hypothesis word left after the stem stage never
    finds a free reference word of its own stem: the stem stage used up one side.)
    """
    pairs: list[tuple[int, int]] = []
    hyp_left: dict[int, tuple[int, ...]] = {}
    ref_left: dict[int, list[int]] = {}
    shared = hyp.stems & ref.stems
    hyp_free: Sequence[int]
    ref_free: Sequence[int]
    for stem in shared:
        if stem in hyp.mixed or stem in ref.mixed:
            hyp_free, ref_free = _exact_stage(hyp, ref, stem, pairs)
        else:
            hyp_free, ref_free = hyp.positions[stem], ref.positions[stem]
        taken = min(len(hyp_free), len(ref_free))
        hyp_rest, ref_rest = len(hyp_free) - taken, len(ref_free) - taken
        pairs += zip(hyp_free[hyp_rest:], ref_free[ref_rest:])
        if hyp_rest:
            hyp_left[stem] = tuple(hyp_free[:hyp_rest])
        if ref_rest:
            ref_left[stem] = list(ref_free[:ref_rest])
    if hyp.synonyms:
        _synonym_stage(hyp, ref, shared, hyp_left, ref_left, pairs)
    pairs.sort()
    adjacent = sum(
        1
        for (hyp_a, ref_a), (hyp_b, ref_b) in zip(pairs, pairs[1:])
        if hyp_b == hyp_a + 1 and ref_b == ref_a + 1
    )
    return len(pairs), len(pairs) - adjacent


def _exact_stage(
    hyp: TextIndex, ref: TextIndex, stem: int, pairs: list[tuple[int, int]]
) -> tuple[list[int], list[int]]:
    """Exact matches among the words of one stem; returns the hypothesis and reference
    positions left free, ascending."""
    pools: dict[int, list[int]] = {}
    for position in ref.positions[stem]:
        pools.setdefault(ref.words[position], []).append(position)
    hyp_free, taken = [], set()
    for position in reversed(hyp.positions[stem]):
        pool = pools.get(hyp.words[position])
        if pool:
            match = pool.pop()
            pairs.append((position, match))
            taken.add(match)
        else:
            hyp_free.append(position)
    hyp_free.reverse()
    return hyp_free, [position for position in ref.positions[stem] if position not in taken]


def _synonym_stage(
    hyp: TextIndex,
    ref: TextIndex,
    shared: frozenset[int],
    hyp_left: dict[int, tuple[int, ...]],
    ref_left: dict[int, list[int]],
    pairs: list[tuple[int, int]],
) -> None:
    """NLTK's third stage over the words the first two left free."""
    free: dict[int, list[int]] = {}
    waiting: list[tuple[int, frozenset[int]]] = []
    for stem, synonyms in hyp.synonyms.items():
        targets = synonyms & ref.stems
        if not targets:
            continue
        for target in targets:
            if target not in free:
                free[target] = ref_left.get(target, []) if target in shared else list(ref.positions[target])
        positions = hyp_left.get(stem, ()) if stem in shared else hyp.positions[stem]
        waiting += ((position, targets) for position in positions)
    waiting.sort(key=lambda item: item[0], reverse=True)
    for position, targets in waiting:
        best, best_target = -1, -1
        for target in targets:
            pool = free[target]
            if pool and pool[-1] > best:
                best, best_target = pool[-1], target
        if best >= 0:
            pairs.append((position, free[best_target].pop()))


@dataclass(frozen=True)
class MeteorBatch:
    """A chunk of indexed texts and the sparse incidence [strings x rows] of every string each
    text can align to, for the pair filter."""

    texts: list[TextIndex]
    reach: torch.Tensor

    def __len__(self) -> int:
        return len(self.texts)


class MeteorKernel(Kernel[MeteorBatch]):
    """METEOR of each candidate (hypothesis) against each training text (reference), as NLTK's
    `single_meteor_score` with its Porter stemmer and WordNet; `synonyms=False` (or no WordNet
    on the machine) leaves out the synonym stage."""

    name = "meteor"
    default_tau = 0.18
    # NLTK's formula on integer counts: 8 roundings and one pow (libm's, within 1 ulp) of values
    # <= 1 at most, so within 16 ulps of 1 of the exact value.
    SIMILARITY_ERROR = 2.0**-48

    def __init__(
        self,
        *,
        tokenizer: Tokenizer,
        device: torch.device,
        alpha: float = 0.9,
        beta: float = 3.0,
        gamma: float = 0.5,
        synonyms: bool = True,
    ) -> None:
        super().__init__(tokenizer=tokenizer, device=device)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"METEOR alpha must be in [0, 1], got {alpha}")
        if not beta >= 0.0:
            raise ValueError(f"METEOR beta must be >= 0, got {beta}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"METEOR gamma must be in [0, 1], got {gamma}")
        self.alpha, self.beta, self.gamma = float(alpha), float(beta), float(gamma)
        reader = load_wordnet() if synonyms else None
        self.wordnet = None if reader is None else LazyWordNet.opened(reader)  # pickles without open files
        self.lexicon = Lexicon(self.wordnet)
        self._train: list[TextIndex] = []

    def _fit(self, texts: list[str]) -> None:
        self._train = self._index(texts)
        # Training side of the pair filter: (text, stem) for each distinct stem of each text,
        # grouped by text; `_train_offsets[i]` is where text i starts (Python ints).
        self._train_offsets = [0]
        for text in self._train:
            self._train_offsets.append(self._train_offsets[-1] + len(text.stems))
        self._train_entries = torch.tensor(
            [[row, stem] for row, text in enumerate(self._train) for stem in sorted(text.stems)],
            dtype=torch.int64,
            device=self.device,
        ).reshape(-1, 2).t()
        self._train_width = len(self.lexicon)

    def _index(self, texts: Sequence[str]) -> list[TextIndex]:
        return [
            TextIndex.build(*self.lexicon.words_and_stems(self.tokenizer.tokenize(text)), self.lexicon)
            for text in texts
        ]

    def _encode(self, texts: Sequence[str]) -> MeteorBatch:
        return self._batch(self._index(texts))

    def _encode_train(self, start: int, stop: int) -> MeteorBatch:
        return self._batch(self._train[start:stop])

    def _batch(self, texts: list[TextIndex]) -> MeteorBatch:
        """Candidate side of the pair filter, limited to the strings known when the training set
        was fitted (no training stem lies beyond them)."""
        width = self._train_width
        rows: list[int] = []
        columns: list[int] = []
        for row, text in enumerate(texts):
            reachable = [string for string in text.reach if string < width]
            rows += [row] * len(reachable)
            columns += reachable
        indices = torch.tensor([columns, rows], dtype=torch.int64, device=self.device)
        return MeteorBatch(texts, _binary_sparse(indices.reshape(2, -1), (width, len(texts))))

    def tile(self, encoded: MeteorBatch, start: int, stop: int) -> torch.Tensor:
        train = self._train
        tile = torch.zeros(len(encoded), stop - start, dtype=torch.float64, device=self.device)
        pairs = self._alignable_pairs(encoded, start, stop)
        if pairs.numel() == 0:
            return tile
        scores = []
        for block_row, row in zip(*pairs.cpu().tolist()):
            hyp, ref = encoded.texts[row], train[start + block_row]
            scores.append(self._score(*align(hyp, ref), len(hyp), len(ref)))
        tile[pairs[1], pairs[0]] = torch.tensor(scores, dtype=torch.float64, device=self.device)
        return tile

    def _alignable_pairs(self, encoded: MeteorBatch, start: int, stop: int) -> torch.Tensor:
        """(row in the training block, candidate row) of every pair where some candidate stem
        reaches some training stem; every other pair aligns nothing and scores 0."""
        entries = self._train_entries[:, self._train_offsets[start] : self._train_offsets[stop]]
        block = _binary_sparse(
            entries - torch.tensor([[start], [0]], device=self.device),
            (stop - start, self._train_width),
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            return sparse_mm(block, encoded.reach).coalesce().indices()

    def _score(self, matches: int, chunks: int, hyp_length: int, ref_length: int) -> float:
        """NLTK's formula in its operation order, so the floats agree to the last bit."""
        if matches == 0:
            return 0.0
        precision = float(matches) / hyp_length
        recall = float(matches) / ref_length
        fmean = (precision * recall) / (self.alpha * precision + (1 - self.alpha) * recall)
        penalty = self.gamma * (float(chunks) / matches) ** self.beta
        return (1 - penalty) * fmean

    def pair_bytes(self) -> int:
        # Worst case every pair can align: the float64 tile (8), the sparse product and its
        # coalesced indices (~32), and the Python ints and floats of the per-pair loop (~104).
        return 144

    def settings(self) -> dict[str, str]:
        version = self.wordnet.version if self.wordnet is not None else "none"
        return {
            **super().settings(),
            "meteor": f"a{self.alpha}-b{self.beta}-g{self.gamma}",
            "stem": "porter",
            "wordnet": version,
        }


def _binary_sparse(indices: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    values = torch.ones(indices.shape[1], dtype=torch.float32, device=indices.device)
    return coo_matrix(indices, values, size)
