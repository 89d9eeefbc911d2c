"""Aligned ROUGE (`gpu_neighbors.rouge`) against rouge-score's `RougeScorer.score_multi`, on the
shared HUSE data and adversarial texts (Unicode punctuation, CJK, empty lines, repeated tokens,
long lines past one 62-bit word), by text and by token ids; no host synchronisation on ids."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from rouge_score import rouge_scorer, tokenize
from nltk.stem import porter

import gpu_neighbors
from census import Census
from conftest import ADVERSARIAL_TEXTS
from gpu_neighbors.kernels import aligned_rouge
from gpu_neighbors.text.tokenizers import RougeScoreTokenizer

TYPES = ["rouge1", "rouge2", "rouge3", "rougeL", "rougeLsum"]
FIELDS = ("precision", "recall", "fmeasure")
UNICODE = [
    "«Bonjour» — dit-il… “quoted” ‘single’ ¿qué? ¡sí! 3·14 ½ € £ ™ ©",
    "東京は日本の首都です。 京都 東京 ABC東京def",
    "naïve CAFÉ İstanbul \u212aelvin straße ﬁne ＡＢＣ１２３",
    "tab\tseparated\u00a0nbsp\u2003em space\u200bzero-width",
    "emoji 🙂 🙂 text 🙂\n\n🙂 text",
    "line one\n\n\nline two\n \nline three\n",
    "\n\n\n",
    "the the the the\nthe the\nthe",
]


def random_lines(rng: random.Random, words: int, vocabulary: int, lines: int) -> str:
    """A text of `lines` lines over a small vocabulary: many repeated tokens, so that several
    LCS exist and the backtrack's choice among them matters."""
    tokens = [f"w{rng.randrange(vocabulary)}" for _ in range(words)]
    cuts = sorted(rng.sample(range(1, words), min(lines - 1, words - 1))) if words > 1 else []
    parts = [tokens[a:b] for a, b in zip([0, *cuts], [*cuts, words])]
    return "\n".join(" ".join(part) for part in parts)


@pytest.fixture(scope="module")
def pairs(huse_texts):
    """Real candidates with one to three references; adversarial and random multi-line rows."""
    rng = random.Random(0)
    candidates, references = [], []
    for index, text in enumerate(huse_texts):
        words = text.split()
        shuffled = " ".join(rng.sample(words, len(words)))
        multiline = "\n".join(" ".join(words[i : i + 4]) for i in range(0, len(words), 4))
        refs = [shuffled, multiline, huse_texts[(index + 1) % len(huse_texts)]]
        candidates.append(text if index % 2 else multiline)
        references.append(refs[: 1 + index % 3])
    adversarial = ADVERSARIAL_TEXTS + UNICODE
    for index, text in enumerate(adversarial):
        candidates.append(text)
        references.append([adversarial[(index + 1) % len(adversarial)], text, ""][: 1 + index % 3])
    for index in range(60):  # long lines: several words of the bit vectors
        words = rng.choice([5, 30, 70, 150])
        candidates.append(random_lines(rng, words, rng.choice([3, 8, 40]), rng.randint(1, 5)))
        references.append([random_lines(rng, rng.choice([4, 40, 130]), rng.choice([3, 8]), rng.randint(1, 4))
                           for _ in range(1 + index % 2)])
    return candidates, references


def rouge_score_values(candidates, references, types, use_stemmer=False, tokenizer=None):
    scorer = rouge_scorer.RougeScorer(types, use_stemmer=use_stemmer, tokenizer=tokenizer)
    scores = [scorer.score_multi(refs, candidate) for candidate, refs in zip(candidates, references)]
    return {name: {field: np.array([getattr(score[name], field) for score in scores]) for field in FIELDS}
            for name in types}


def assert_equal(ours, theirs, types):
    for name in types:
        for field in FIELDS:
            values = getattr(ours[name], field)
            assert values.dtype == torch.float64
            np.testing.assert_array_equal(values.cpu().numpy(), theirs[name][field], err_msg=f"{name} {field}")


@pytest.mark.parametrize("use_stemmer", [False, True])
def test_equals_rouge_score_on_texts(pairs, use_stemmer):
    candidates, references = pairs
    ours = gpu_neighbors.rouge(candidates, references, rouge_types=TYPES, use_stemmer=use_stemmer)
    assert_equal(ours, rouge_score_values(candidates, references, TYPES, use_stemmer), TYPES)


def test_default_types_and_one_reference_as_a_string(pairs):
    candidates, references = pairs
    single = [refs[0] for refs in references]
    ours = gpu_neighbors.rouge(candidates, single)
    assert list(ours) == ["rouge1", "rouge2", "rougeL", "rougeLsum"]
    assert_equal(ours, rouge_score_values(candidates, [[r] for r in single], list(ours)), list(ours))
    assert ours["rougeLsum"].fmeasure.mean() > 0.1  # a real overlap


def test_only_rouge_lsum_and_a_given_tokenizer(pairs):
    """rouge-score tokenizes nothing but the sentences when rougeLsum is the one type; a
    tokenizer of ours given by name is the one rouge-score is given as an object."""
    candidates, references = pairs
    assert_equal(gpu_neighbors.rouge(candidates, references, rouge_types=["rougeLsum"]),
                 rouge_score_values(candidates, references, ["rougeLsum"]), ["rougeLsum"])
    ours = gpu_neighbors.rouge(candidates, references, rouge_types=TYPES, tokenizer="whitespace")

    class Whitespace:
        def tokenize(self, text):
            return text.split()

    assert_equal(ours, rouge_score_values(candidates, references, TYPES, tokenizer=Whitespace()), TYPES)


def test_any_chunk_size_and_batch_order(pairs, monkeypatch):
    candidates, references = pairs
    whole = gpu_neighbors.rouge(candidates, references, rouge_types=TYPES)
    monkeypatch.setattr(aligned_rouge, "MASK_TABLE_ENTRIES", 200_000)  # several chunks and groups
    assert_equal(gpu_neighbors.rouge(candidates, references, rouge_types=TYPES),
                 {name: {field: getattr(whole[name], field).numpy() for field in FIELDS} for name in TYPES}, TYPES)
    order = np.random.default_rng(0).permutation(len(candidates))
    shuffled = gpu_neighbors.rouge([candidates[i] for i in order], [references[i] for i in order], rouge_types=TYPES)
    for name in TYPES:
        np.testing.assert_array_equal(shuffled[name].fmeasure.numpy(), whole[name].fmeasure.numpy()[order])


def test_tokenizer_equals_rouge_scores(pairs):
    candidates, _ = pairs
    texts = candidates + UNICODE + ["a\ue000b c", "Caresses FLIES dies mules denied agreed"]
    for use_stemmer in (False, True):
        ours = RougeScoreTokenizer(use_stemmer)
        stemmer = porter.PorterStemmer() if use_stemmer else None
        expected = [tokenize.tokenize(text, stemmer) for text in texts]
        assert [ours.tokenize(text) for text in texts] == expected
        many = ours.tokenize_many(texts)  # one text holds the separator: text by text
        assert list(many.lengths) == [len(tokens) for tokens in expected]
        joined = ours.tokenize_many(texts[:-2])  # in one split
        assert len(joined.separators) == len(texts) - 3
        kept = [token for index, token in enumerate(joined.tokens) if index not in set(joined.separators.tolist())]
        assert kept == [token for tokens in expected[:-2] for token in tokens]


def id_rows(rng: np.random.Generator, rows: int, width: int, vocabulary: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.from_numpy(rng.integers(0, vocabulary, size=(rows, width)))
    lengths = torch.from_numpy(rng.integers(0, width + 1, size=rows))
    return ids, (torch.arange(width)[None, :] < lengths[:, None]).long()


def as_words(ids: torch.Tensor, mask: torch.Tensor) -> str:
    return " ".join(str(int(i)) for i, m in zip(ids, mask) if m)


@pytest.mark.parametrize("vocab_size", [None, 9])
def test_token_ids_equal_rouge_score_on_the_same_tokens(vocab_size):
    """Ids against up to three references each ([batch, R, length] with `reference_counts`),
    masked and negative positions dropped; rouge-score given the same tokens as words (no
    newline: rougeLsum is rougeL). A candidate with no reference scores 0."""
    rng = np.random.default_rng(1)
    rows, slots = 50, 3
    ids, mask = id_rows(rng, rows, 140, 9)
    refs, ref_mask = id_rows(rng, rows * slots, 75, 9)
    refs, ref_mask = refs.view(rows, slots, -1), ref_mask.view(rows, slots, -1)
    counts = torch.from_numpy(rng.integers(1, slots + 1, size=rows))
    counts[0] = 0
    refs[:, :, ::7] = -1  # dropped, as a masked position
    ours = gpu_neighbors.rouge(ids, refs, rouge_types=TYPES, attention_mask=mask, reference_mask=ref_mask,
                               reference_counts=counts, vocab_size=vocab_size)
    candidates = [as_words(i, m) for i, m in zip(ids, mask)]
    references = [[as_words(r, m & (r >= 0)) for r, m in zip(refs[k], ref_mask[k])][: int(counts[k])]
                  for k in range(rows)]

    class Words:
        def tokenize(self, text):
            return text.split()

    theirs = rouge_score_values(candidates[1:], references[1:], TYPES, tokenizer=Words())
    for name in TYPES:
        for field in FIELDS:
            values = getattr(ours[name], field)
            assert float(values[0]) == 0.0
            np.testing.assert_array_equal(values[1:].numpy(), theirs[name][field], err_msg=f"{name} {field}")


def test_no_host_synchronisation_on_token_ids():
    rng = np.random.default_rng(2)
    ids, mask = id_rows(rng, 32, 70, 20)
    refs, ref_mask = id_rows(rng, 32, 80, 20)
    gpu_neighbors.rouge(ids, refs, attention_mask=mask, reference_mask=ref_mask)
    audit = Census(scope="ids")
    with audit, audit.host_copies():
        gpu_neighbors.rouge(ids, refs, attention_mask=mask, reference_mask=ref_mask)
        gpu_neighbors.rouge(ids, refs, vocab_size=20)
    assert audit.syncs["ids"] == 0, audit.sync_ops


def test_backtrack_picks_rouge_scores_lcs():
    """Lines where the LCS is not unique: the union of the particular LCS rouge-score's
    backtrack reads differs from another choice's (the fails-if-changed check of the tie rule)."""
    candidate = "a b\nb a"
    reference = "a b a"
    ours = gpu_neighbors.rouge([candidate, "b a c\na"], [reference, "a b c a"], rouge_types=["rougeLsum"])
    theirs = rouge_score_values([candidate, "b a c\na"], [[reference], ["a b c a"]], ["rougeLsum"])
    np.testing.assert_array_equal(ours["rougeLsum"].fmeasure.numpy(), theirs["rougeLsum"]["fmeasure"])


def test_clear_errors():
    with pytest.raises(ValueError, match="unknown type 'rouge10'"):
        gpu_neighbors.rouge(["a"], ["a"], rouge_types=["rouge10"])
    with pytest.raises(ValueError, match="unknown type 'rougeW'"):
        gpu_neighbors.rouge(["a"], ["a"], rouge_types=["rougeW"])
    with pytest.raises(TypeError, match="not a string"):
        gpu_neighbors.rouge(["a"], ["a"], rouge_types="rougeL")
    with pytest.raises(ValueError, match="use_stemmer applies to rouge-score's tokenizer"):
        gpu_neighbors.rouge(["a"], ["a"], use_stemmer=True, tokenizer="13a")
    with pytest.raises(ValueError, match="use_stemmer and tokenizer apply to texts"):
        gpu_neighbors.rouge(torch.zeros((1, 2), dtype=torch.long), torch.zeros((1, 2), dtype=torch.long),
                            use_stemmer=True)
    with pytest.raises(ValueError, match="one entry per candidate"):
        gpu_neighbors.rouge(["a", "b"], ["a"])
    with pytest.raises(ValueError, match=r"references\[1\]: candidate 1 has no reference"):
        gpu_neighbors.rouge(["a", "b"], [["a"], []])
    with pytest.raises(TypeError, match="text candidates need text references"):
        gpu_neighbors.rouge(["a"], torch.zeros((1, 2), dtype=torch.long))


# rouge-score's own test cases (rouge_scorer_test.py), as (target, prediction) pairs with the
# values it asserts: short texts, empty ones, one of non-word characters alone.
ROUGE_SCORE_CASES = [
    ("testing one two", "testing", {"rouge1": (1, 1 / 3, 1 / 2)}),
    ("testing one two", "", {name: (0, 0, 0) for name in ("rouge1", "rouge2", "rougeL", "rougeLsum")}),
    ("testing one two", "testing one", {"rouge2": (1, 1 / 2, 2 / 3), "rougeL": (1, 2 / 3, 4 / 5)}),
    ("testing one two", "testing two", {"rougeL": (1, 2 / 3, 4 / 5)}),
    ("w1 w2 w3 w4 w5", "w1 w2 w6 w7 w8\nw1 w3 w8 w9 w5", {"rougeLsum": (0.4, 0.8, 0.4 * 0.8 * 2 / 1.2)}),
    ("w1 w2 w3 w4 w5", "", {"rougeLsum": (0, 0, 0)}),
    ("", "w1", {"rougeLsum": (0, 0, 0)}),
    ("w1 w2 w3 w4 w5", "/", {"rougeLsum": (0, 0, 0)}),
]


@pytest.mark.parametrize(("target", "prediction", "expected"), ROUGE_SCORE_CASES)
def test_rouge_scores_own_cases_one_call_each(target, prediction, expected):
    """Issue 50: a call in which no pair has tokens on both sides (target "testing one two",
    prediction "") raised "zero-size array to reduction operation maximum" under rougeLsum;
    rouge-score gives 0, 0, 0. Each case alone in its call, as rouge-score's tests score them,
    against rouge-score itself and the values its tests assert."""
    ours = gpu_neighbors.rouge([prediction], [[target]], rouge_types=TYPES)
    assert_equal(ours, rouge_score_values([prediction], [[target]], TYPES), TYPES)
    for name, values in expected.items():
        got = tuple(getattr(ours[name], field).item() for field in FIELDS)
        assert got == pytest.approx(values, abs=1e-12), name


def test_aligned_rouge_with_no_pair_holding_tokens_on_both_sides():
    """Issue 50: the metric's update of such a batch raised; it adds zeros, as rouge-score."""
    metric = gpu_neighbors.AlignedRouge(rouge_types=["rougeLsum", "rougeL"])
    metric.update(["", "w1"], ["testing one two", ""])
    assert {key: value.item() for key, value in metric.compute().items()} == {
        **{f"{name}_{field}": 0.0 for name in ("rougeLsum", "rougeL") for field in FIELDS}, "count": 2}


def test_an_empty_batch_scores_nothing():
    """rouge([], []) (a last, empty batch of an evaluation loop) failed under the default types
    with "cannot reshape tensor of 0 elements into shape [0, -1]" in rougeLsum's sentence step;
    sentence_bleu([], []) gave an empty tensor, as this does now, and AlignedRouge counts nothing."""
    for candidates, references in (([], []), (torch.zeros((0, 3), dtype=torch.long), torch.zeros((0, 3), dtype=torch.long))):
        scores = gpu_neighbors.rouge(candidates, references)
        assert set(scores) == set(aligned_rouge.ROUGE_TYPES)
        for score in scores.values():
            assert all(values.shape == (0,) and values.dtype == torch.float64
                       for values in (score.precision, score.recall, score.fmeasure))
