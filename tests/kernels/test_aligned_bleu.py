"""Aligned BLEU (each candidate against its own references) against NLTK's `sentence_bleu` and
`corpus_bleu` and sacrebleu's corpus BLEU, on the shared HUSE data and adversarial texts, by
text and by token ids; no host synchronisation on the token-id path."""
from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch
from nltk.translate import bleu_score

import gpu_neighbors
from census import Census
from conftest import ADVERSARIAL_TEXTS
from gpu_neighbors.kernels import aligned_bleu
from gpu_neighbors.text.tokenizers import HuggingFaceTokenizer, Sacrebleu13aTokenizer
from minilm import MODEL_PATH

SMOOTHING = bleu_score.SmoothingFunction()
NLTK_SMOOTHING = {"none": SMOOTHING.method0, "epsilon": SMOOTHING.method1, "add1": SMOOTHING.method2,
                  "exp": SMOOTHING.method3}
WEIGHTS = [(0.25, 0.25, 0.25, 0.25), (1.0,), (0.5, 0.5), (0.2, 0.3, 0.5), (0.0, 1 / 3, 1 / 3, 1 / 3),
           (0.1, 0.2, 0.3, 0.4)]
LONG = " ".join(f"t{i % 53}" for i in range(960))


def nltk_sentence(candidates, references, weights, smoothing, split=str.split) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NLTK warns on every zero count under method0
        return np.array([
            bleu_score.sentence_bleu([split(r) for r in refs], split(c), weights=weights,
                                     smoothing_function=NLTK_SMOOTHING[smoothing])
            for c, refs in zip(candidates, references)
        ])


def edited(text: str, rng: random.Random) -> str:
    """A reference that shares much of the candidate: some words dropped, swapped or repeated."""
    words = text.split()
    out = []
    for word in words:
        roll = rng.random()
        if roll < 0.15:
            continue
        out.append(word if roll < 0.85 else rng.choice(words))
        if roll > 0.95:
            out.append(word)
    return " ".join(out)


@pytest.fixture(scope="module")
def pairs(huse_texts):
    """Real candidates with one to three real references each (ragged), plus adversarial rows."""
    rng = random.Random(0)
    candidates, references = [], []
    for index, text in enumerate(huse_texts):
        refs = [edited(text, rng)] + huse_texts[index + 1 : index + 1 + rng.randrange(3)]
        candidates.append(text)
        references.append(refs)
    adversarial = ADVERSARIAL_TEXTS + [LONG]
    for index, text in enumerate(adversarial):
        candidates.append(text)
        references.append([adversarial[(index + 1) % len(adversarial)], text, ""][: 1 + index % 3])
    candidates += ["a", "", "a a a a", "the cat", LONG, "a a a b b", "the the the cat sat"]
    # the last two: the clip is the largest count in one reference, not the sum over references
    references += [["a"], ["a"], ["a a"], [""], [LONG[: len(LONG) // 2]], ["a b", "a b b", "a"],
                   ["the cat", "the the", "cat sat the"]]
    return candidates, references


@pytest.mark.parametrize("smoothing", list(NLTK_SMOOTHING))
@pytest.mark.parametrize("weights", WEIGHTS)
def test_equals_nltk_sentence_bleu(pairs, weights, smoothing):
    candidates, references = pairs
    ours = gpu_neighbors.sentence_bleu(candidates, references, weights=weights, smoothing=smoothing)
    assert ours.dtype == torch.float64 and ours.shape == (len(candidates),)
    np.testing.assert_allclose(ours.numpy(), nltk_sentence(candidates, references, weights, smoothing),
                               rtol=0, atol=1e-9)


def test_one_reference_per_candidate_as_strings(pairs):
    candidates, references = pairs
    single = [refs[0] for refs in references]
    np.testing.assert_array_equal(gpu_neighbors.sentence_bleu(candidates, single, smoothing="exp").numpy(),
                                  gpu_neighbors.sentence_bleu(candidates, [[r] for r in single],
                                                              smoothing="exp").numpy())


def test_any_chunk_size_and_batch_order(pairs, monkeypatch):
    candidates, references = pairs
    whole = gpu_neighbors.sentence_bleu(candidates, references, smoothing="add1").numpy()
    monkeypatch.setattr(aligned_bleu, "CHUNK_ELEMENTS", 1)  # one row per chunk
    np.testing.assert_array_equal(
        gpu_neighbors.sentence_bleu(candidates, references, smoothing="add1").numpy(), whole)
    order = np.random.default_rng(0).permutation(len(candidates))
    shuffled = gpu_neighbors.sentence_bleu([candidates[i] for i in order], [references[i] for i in order],
                                           smoothing="add1").numpy()
    np.testing.assert_array_equal(shuffled, whole[order])


def test_corpus_bleu_equals_nltk_and_sacrebleu(huse_records):
    """sacrebleu's 13a tokenizer on both sides; every candidate is >= 4 tokens long, where NLTK's
    and sacrebleu's corpus formulas coincide."""
    rng = random.Random(1)
    candidates = [r["text"] for r in huse_records if len(r["text"].split()) >= 4]
    references = [[edited(text, rng), candidates[(i + 7) % len(candidates)]] for i, text in enumerate(candidates)]
    ours = float(gpu_neighbors.corpus_bleu(candidates, references, tokenizer="13a"))
    streams = [[refs[k] for refs in references] for k in range(2)]
    sacrebleu = pytest.importorskip("sacrebleu")  # with lxml, which a bare environment lacks
    theirs = sacrebleu.corpus_bleu(candidates, streams, smooth_method="none").score / 100
    assert ours == pytest.approx(theirs, abs=1e-9)
    split = Sacrebleu13aTokenizer().tokenize
    nltk_value = bleu_score.corpus_bleu([[split(r) for r in refs] for refs in references],
                                        [split(c) for c in candidates])
    assert ours == pytest.approx(nltk_value, abs=1e-9)
    assert 0.2 < ours < 0.9  # a real overlap, not a degenerate 0 or 1


@pytest.fixture(scope="module")
def tokenizer() -> HuggingFaceTokenizer:
    return HuggingFaceTokenizer(MODEL_PATH)


def id_batch(tokenizer, texts, side="right"):
    tokenizer.hf.padding_side = side
    try:
        batch = tokenizer.hf(texts, padding=True, add_special_tokens=False, return_tensors="pt")
    finally:
        tokenizer.hf.padding_side = "right"
    return batch["input_ids"], batch["attention_mask"]


@pytest.mark.parametrize("smoothing", list(NLTK_SMOOTHING))
def test_token_ids_equal_nltk_on_the_tokens(tokenizer, pairs, smoothing):
    """Ids [batch, length] and references [batch, R, length'] with masks and counts (left padding
    for the references), against NLTK on the same token strings."""
    candidates, references = pairs
    ids, mask = id_batch(tokenizer, candidates)
    slots = max(map(len, references))
    flat = [refs[k] if k < len(refs) else "zzz unused" for refs in references for k in range(slots)]
    reference_ids, reference_mask = id_batch(tokenizer, flat, side="left")
    reference_ids = reference_ids.view(len(candidates), slots, -1)
    reference_mask = reference_mask.view(len(candidates), slots, -1)
    counts = torch.tensor([len(refs) for refs in references])
    weights = (0.1, 0.2, 0.3, 0.4)
    ours = gpu_neighbors.sentence_bleu(ids, reference_ids, attention_mask=mask, reference_mask=reference_mask,
                                       reference_counts=counts, weights=weights, smoothing=smoothing)
    expected = nltk_sentence(candidates, references, weights, smoothing, split=tokenizer.hf.tokenize)
    np.testing.assert_allclose(ours.numpy(), expected, rtol=0, atol=1e-9)


def test_token_ids_drop_masked_and_negative_positions(tokenizer, pairs):
    candidates, references = pairs
    ids, mask = id_batch(tokenizer, candidates[:40])
    refs, ref_mask = id_batch(tokenizer, [r[0] for r in references[:40]])
    plain = gpu_neighbors.sentence_bleu(ids, refs, attention_mask=mask, reference_mask=ref_mask, smoothing="exp")
    labels = torch.where(mask.bool(), ids, -100)  # label padding, no mask
    noisy = torch.cat([torch.full((40, 3), 999), ids], dim=1)
    noisy_mask = torch.cat([torch.zeros((40, 3), dtype=mask.dtype), mask], dim=1)
    np.testing.assert_array_equal(
        gpu_neighbors.sentence_bleu(labels, refs, reference_mask=ref_mask, smoothing="exp").numpy(), plain.numpy())
    np.testing.assert_array_equal(
        gpu_neighbors.sentence_bleu(noisy, refs, attention_mask=noisy_mask, reference_mask=ref_mask,
                                    smoothing="exp").numpy(), plain.numpy())


@pytest.mark.parametrize("smoothing", list(NLTK_SMOOTHING))
def test_no_host_synchronisation_on_token_ids(tokenizer, pairs, smoothing):
    candidates, references = pairs
    ids, mask = id_batch(tokenizer, candidates[:64])
    refs, ref_mask = id_batch(tokenizer, [r[0] for r in references[:64]])
    counts = torch.full((64,), 2)
    for weights in [(0.25,) * 4, (0.5, 0.5)]:  # the first call per setting and width makes its tables
        gpu_neighbors.sentence_bleu(ids, refs, weights=weights, smoothing=smoothing)
    audit = Census(scope="ids")  # the census's list of syncing operations and host copies (tests/census.py)
    with audit, audit.host_copies():
        gpu_neighbors.sentence_bleu(ids, refs, attention_mask=mask, reference_mask=ref_mask, smoothing=smoothing)
        gpu_neighbors.sentence_bleu(ids, refs[:, None, :].expand(64, 2, -1), weights=(0.5, 0.5),
                                    reference_counts=counts, smoothing=smoothing)
    assert audit.syncs["ids"] == 0, audit.sync_ops
    texts = Census(scope="texts")
    with texts, texts.host_copies():  # the audit sees syncs where there are some
        gpu_neighbors.sentence_bleu(candidates[:8], references[:8], smoothing=smoothing)
    assert texts.syncs["texts"] > 0


def test_candidate_without_reference():
    ids = torch.tensor([[5, 6, 7], [5, 6, 7]])
    refs = torch.tensor([[[5, 6, 7]], [[5, 6, 7]]])
    scores = gpu_neighbors.sentence_bleu(ids, refs, reference_counts=torch.tensor([1, 0]), weights=(1.0,))
    assert scores.tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match=r"references\[1\]: candidate 1 has no reference"):
        gpu_neighbors.sentence_bleu(["a b", "c"], [["a b"], []])


def test_clear_errors():
    with pytest.raises(ValueError, match="one entry per candidate"):
        gpu_neighbors.sentence_bleu(["a", "b"], ["a"])
    with pytest.raises(TypeError, match=r"references\[0\]\[1\]: expected a string"):
        gpu_neighbors.sentence_bleu(["a"], [["a", 3]])
    with pytest.raises(TypeError, match="token-id references"):
        gpu_neighbors.sentence_bleu(torch.zeros((1, 2), dtype=torch.long), ["a"])
    with pytest.raises(ValueError, match="reference_mask: shape"):
        gpu_neighbors.sentence_bleu(torch.zeros((2, 3), dtype=torch.long), torch.zeros((2, 3), dtype=torch.long),
                                    reference_mask=torch.ones((2, 4)))
    with pytest.raises(ValueError, match="integer tensor"):
        gpu_neighbors.sentence_bleu(torch.zeros((2, 3)), torch.zeros((2, 3), dtype=torch.long))
    with pytest.raises(ValueError, match="smoothing must be one of"):
        gpu_neighbors.sentence_bleu(["a"], ["a"], smoothing="method8")
    with pytest.raises(TypeError, match="references: expected a list"):
        gpu_neighbors.sentence_bleu(["a"], (text for text in ["a"]))
    with pytest.raises(TypeError, match=r"candidates: expected a list of strings \(or token ids: a tensor\)"):
        gpu_neighbors.sentence_bleu(np.array(["a"]), ["a"])


def test_token_id_errors_name_the_argument_as_passed():
    ids = torch.zeros((2, 5), dtype=torch.long)
    with pytest.raises(TypeError, match="attention_mask: expected a tensor, got list"):
        gpu_neighbors.sentence_bleu(ids, ids, attention_mask=[[1] * 5] * 2)
    with pytest.raises(TypeError, match="reference_counts: expected a tensor, got list"):
        gpu_neighbors.sentence_bleu(ids, ids, reference_counts=[1, 1])
    with pytest.raises(ValueError, match=r"reference_counts: expected an integer tensor of shape \(2,\), "
                                         r"got torch.float32 \(2,\)"):
        gpu_neighbors.sentence_bleu(ids, ids, reference_counts=torch.tensor([1.5, 0.5]))
    with pytest.raises(ValueError, match=r"reference_mask: shape \(2, 4\) differs from its ids' \(2, 5\)"):
        gpu_neighbors.sentence_bleu(ids, ids, reference_mask=torch.ones((2, 4)))
    with pytest.raises(ValueError, match=r"batch = 2, got torch.int64 \(1, 5\)"):
        gpu_neighbors.sentence_bleu(ids, ids[:1])


def test_no_reference_slot_at_all_scores_zero():
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    none = torch.zeros((2, 0, 5), dtype=torch.long)
    assert gpu_neighbors.sentence_bleu(ids, none).tolist() == [0.0, 0.0]
    assert gpu_neighbors.sentence_bleu(ids, none, reference_mask=torch.ones((2, 0, 5))).tolist() == [0.0, 0.0]
    assert gpu_neighbors.corpus_bleu(ids, none).item() == 0.0


@pytest.mark.parametrize("weights", [(0.2, 0.2, 0.2, 0.2, 0.1, 0.1), (0.5, 0.2), (0.0, 0.0, 2.0), (0.0,)])
@pytest.mark.parametrize("smoothing", list(NLTK_SMOOTHING))
def test_weights_as_nltk_takes_them(pairs, weights, smoothing):
    """More than four orders, and weights that do not sum to 1: NLTK computes them, so do we."""
    candidates, references = pairs
    ours = gpu_neighbors.sentence_bleu(candidates, references, weights=weights, smoothing=smoothing)
    np.testing.assert_allclose(ours.numpy(), nltk_sentence(candidates, references, weights, smoothing),
                               rtol=0, atol=1e-9)
    candidates_ids, references_ids, mask = random_ids(6, 40, 4)
    counts = torch.tensor([2, 1] * 3)
    ours = gpu_neighbors.sentence_bleu(candidates_ids, references_ids, attention_mask=mask, reference_counts=counts,
                                       weights=weights, smoothing=smoothing)
    np.testing.assert_allclose(ours.numpy(), nltk_on_ids(candidates_ids, references_ids, mask, counts, weights,
                                                         smoothing), rtol=0, atol=1e-9)


def random_ids(rows: int, length: int, vocabulary: int,
               seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Candidates, two references per row and a candidate mask: few distinct ids so that n-grams
    repeat, references sharing much of their candidate."""
    generator = torch.Generator().manual_seed(seed)
    candidates = torch.randint(0, vocabulary, (rows, length), generator=generator)
    redrawn = torch.randint(0, vocabulary, (rows, 2, length), generator=generator)
    keep = torch.rand((rows, 2, length), generator=generator) < 0.6
    references = torch.where(keep, candidates[:, None, :], redrawn)
    mask = torch.rand((rows, length), generator=generator) < 0.9
    return candidates, references, mask


def nltk_on_ids(candidates, references, mask, counts, weights, smoothing) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.array([
            bleu_score.sentence_bleu([refs[k].tolist() for k in range(int(count))],
                                     candidate[keep].tolist(), weights=weights,
                                     smoothing_function=NLTK_SMOOTHING[smoothing]) if count else 0.0
            for candidate, keep, refs, count in zip(candidates, mask, references, counts)
        ])


@pytest.mark.parametrize("key_bits", [62, 36])  # 36: no n-gram key fits a flat sort with its row
@pytest.mark.parametrize("vocabulary, vocab_size", [(3, None), (3, 3), (40, 64), (40, None), (1000, 32000),
                                                    (1000, 1 << 40)])
def test_vocab_size_and_every_sort_path_equal_nltk(monkeypatch, key_bits, vocabulary, vocab_size):
    """Ids from 3 distinct (every n-gram repeats) to 1,000, with and without a known vocabulary
    size (whose fields fit a flat sort without renumbering, after renumbering in int32 or int64,
    or only after ranking the chunk), with masked positions and ragged references."""
    monkeypatch.setattr(aligned_bleu, "KEY_BITS", key_bits)
    assert_random_ids_equal_nltk(vocabulary, vocab_size, "add1")


def assert_random_ids_equal_nltk(vocabulary: int, vocab_size: int | None, smoothing: str) -> None:
    """24 masked candidates of 60 ids below `vocabulary`, ragged references, against NLTK."""
    candidates, references, mask = random_ids(24, 60, vocabulary)
    counts = torch.tensor([2, 2, 1] * 8)
    weights = (0.1, 0.2, 0.3, 0.4)
    ours = gpu_neighbors.sentence_bleu(candidates, references, attention_mask=mask, reference_counts=counts,
                                       weights=weights, smoothing=smoothing, vocab_size=vocab_size)
    np.testing.assert_allclose(ours.numpy(), nltk_on_ids(candidates, references, mask, counts, weights, smoothing),
                               rtol=0, atol=1e-9)


@pytest.mark.parametrize("table_rows", [0, 5, 1000])  # 0: ranked by sorts; 5: the table in 5 parts
def test_occurrence_table_in_parts_equals_nltk(monkeypatch, table_rows):
    """The ids renumbered through a table of (at most) `table_rows` rows at a time, or by sorts."""
    vocab_size, slots = 32000, 2
    monkeypatch.setattr(aligned_bleu, "TABLE_ENTRIES", table_rows * (vocab_size + slots + 1))
    assert_random_ids_equal_nltk(1000, vocab_size, "exp")


@pytest.mark.parametrize("weights", [(1.0,), (0.25,) * 4])
def test_ids_near_the_int64_bounds_and_repeated_tokens(weights):
    """Ids near 2**63 (no field of them fits a key), all-same-token rows, empty rows."""
    big = (1 << 63) - 1
    candidates = torch.tensor([[big, big - 1, big, big - 1, big], [7, 7, 7, 7, 7], [0, big, 0, big, 0],
                               [5, 5, -1, -1, -1]])
    references = torch.tensor([[big - 1, big, big - 1, big, 3], [7, 7, 7, -1, -1], [big, 0, big, 0, big],
                               [-1, -1, -1, -1, -1]])
    mask = candidates >= 0
    ours = gpu_neighbors.sentence_bleu(candidates, references, weights=weights, smoothing="exp")
    expected = nltk_on_ids(candidates, references[:, None, :].clamp(min=0), mask, torch.ones(4),
                           weights, "exp")
    expected[3] = nltk_on_ids(candidates[3:], torch.zeros((1, 1, 0), dtype=torch.long), mask[3:], torch.ones(1),
                              weights, "exp")[0]
    np.testing.assert_allclose(ours.numpy(), expected, rtol=0, atol=1e-9)


def test_vocab_size_is_checked():
    candidates, references, mask = random_ids(4, 10, 50)
    dropped = torch.where(mask, candidates, 10_000)  # masked ids may be anything
    expected = gpu_neighbors.sentence_bleu(candidates, references, attention_mask=mask)
    np.testing.assert_array_equal(
        gpu_neighbors.sentence_bleu(dropped, references, attention_mask=mask, vocab_size=50).numpy(),
        expected.numpy())
    with pytest.raises(RuntimeError, match=r"token ids must be below vocab_size \(49\)"):
        gpu_neighbors.sentence_bleu(candidates, references, vocab_size=49)
    for bad in (0, -3, 1 << 64, True, 2.0, "50"):
        with pytest.raises(ValueError, match="vocab_size must be a positive integer below 2\\^63"):
            gpu_neighbors.sentence_bleu(candidates, references, vocab_size=bad)
    for integer in (np.int64(50), torch.tensor(50)):  # the tokenizer's size, however it is held
        np.testing.assert_array_equal(
            gpu_neighbors.sentence_bleu(candidates, references, attention_mask=mask, vocab_size=integer).numpy(),
            expected.numpy())
    with pytest.raises(ValueError, match="go with token ids"):
        gpu_neighbors.sentence_bleu(["a"], ["a"], vocab_size=5)


@pytest.mark.parametrize("key_bits", [21, 16, 9, 4])  # 2, 2, 1 and (< one field) 1 fields per word
@pytest.mark.parametrize("vocabulary, vocab_size", [(3, None), (40, 64), (1000, None)])
def test_rows_too_wide_for_one_key_sort_by_words(monkeypatch, key_bits, vocabulary, vocab_size):
    """Where one int64 cannot hold the key of every order, rows are sorted by several words (the
    path of a candidate with its references past ~16,000 tokens): equal to NLTK all the same."""
    monkeypatch.setattr(aligned_bleu, "KEY_BITS", key_bits)
    assert_random_ids_equal_nltk(vocabulary, vocab_size, "epsilon")


def test_a_candidate_with_references_past_one_key_equals_nltk():
    """4 x 4,000 ids with 4 references: 20,015 positions, 15 bits a field, no 4-gram key in
    62 bits; with and without vocab_size (the two used to differ: one raised)."""
    generator = torch.Generator().manual_seed(1)
    candidates = torch.randint(0, 50, (1, 4000), generator=generator)
    references = torch.randint(0, 50, (1, 4, 4000), generator=generator)
    expected = nltk_on_ids(candidates, references, torch.ones_like(candidates, dtype=torch.bool), torch.tensor([4]),
                           (0.25,) * 4, "none")
    for vocab_size in (None, 50):
        ours = gpu_neighbors.sentence_bleu(candidates, references, vocab_size=vocab_size)
        np.testing.assert_allclose(ours.numpy(), expected, rtol=0, atol=1e-9)


def test_brevity_from_each_rows_lengths_equals_the_table(monkeypatch):
    """Past BREVITY_TABLE_CELLS each row's penalty is computed from its own lengths (a table of
    every length pair grows with the square of the widths): the same bits as the table's."""
    candidates, references, mask = random_ids(24, 60, 40)
    counts = torch.tensor([2, 1, 2] * 8)
    tabled = gpu_neighbors.sentence_bleu(candidates, references, attention_mask=mask, reference_counts=counts)
    monkeypatch.setattr(aligned_bleu, "BREVITY_TABLE_CELLS", 0)
    assert torch.equal(gpu_neighbors.sentence_bleu(candidates, references, attention_mask=mask,
                                                   reference_counts=counts), tabled)


@pytest.mark.parametrize("vocab_size", [None, 5])
@pytest.mark.parametrize("weights", [(1.0,), (0.25,) * 4])
def test_zero_width_ids_score_zero(weights, vocab_size):
    """[batch, 0] ids (unigrams only: rows with no column at all) score 0, as NLTK on empty texts."""
    empty = torch.zeros((3, 0), dtype=torch.long)
    ours = gpu_neighbors.sentence_bleu(empty, empty, weights=weights, vocab_size=vocab_size)
    assert ours.tolist() == [0.0, 0.0, 0.0]


def test_corpus_bleu_counts_a_candidate_without_reference_as_nltk_with_an_empty_one():
    ids = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 4, 5], [6, 7, 8, 9, 9]])
    ours = gpu_neighbors.corpus_bleu(ids, ids[:, None, :], reference_counts=torch.tensor([1, 0, 1]))
    theirs = bleu_score.corpus_bleu([[[1, 2, 3, 4, 5]], [[]], [[6, 7, 8, 9, 9]]], ids.tolist())
    assert abs(float(ours) - theirs) <= 1e-9 and theirs < 1.0


def test_numpy_weights_as_nltk_takes_them(pairs):
    """Issue 50: numpy weights raised "the truth value of an array is ambiguous"; NLTK takes
    them, one array as one tuple and a 2-D array as one tuple a row."""
    candidates, references = pairs
    for weights in (np.array([0.25] * 4), np.array([0.5, 0.5])):
        ours = gpu_neighbors.sentence_bleu(candidates, references, weights=weights)
        np.testing.assert_allclose(ours.numpy(), nltk_sentence(candidates, references, weights, "none"),
                                   rtol=0, atol=1e-9)
    several = gpu_neighbors.sentence_bleu(candidates, references, weights=np.array([[0.5, 0.5], [1.0, 0.0]]))
    for column, weights in enumerate([(0.5, 0.5), (1.0, 0.0)]):
        np.testing.assert_allclose(several[:, column].numpy(), nltk_sentence(candidates, references, weights, "none"),
                                   rtol=0, atol=1e-9)


@pytest.mark.parametrize("weights", [(1e6,), (700,), (40.0, 3.0), (0.0, 1e6), (1e300, 1e300)])
@pytest.mark.parametrize("smoothing", list(NLTK_SMOOTHING))
def test_large_weights_as_nltk(weights, smoothing):
    """Issue 50: NLTK allows weights of any size; (1e6,) gave NaN on 'a b' against itself (NLTK
    1.0) and (700,) gave 0.0 where NLTK gives 5.4e-124: p^w, which is not the ratio of two powers
    that overflow. Compared relatively, as NLTK's numbers are tiny."""
    candidates = ["a b", "a b c", "a b c d e f", "x y", "a b a b a b"]
    references = [["a b"], ["a b d"], ["a b c d e g", "a c"], ["x z w"], ["a b a b"]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning reaches the caller either
        ours = gpu_neighbors.sentence_bleu(candidates, references, weights=weights, smoothing=smoothing).numpy()
    try:
        theirs = nltk_sentence(candidates, references, weights, smoothing)
    except OverflowError:  # NLTK's fsum of two logs past float range: its limit is 0
        theirs = None
    if theirs is not None:
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=0)
    assert np.isfinite(ours).all()
    if weights == (700,):
        assert ours[1] == pytest.approx(5.4e-124, rel=0.01)


def test_weights_that_are_not_finite_are_refused():
    with pytest.raises(ValueError, match="weights must be finite"):
        gpu_neighbors.sentence_bleu(["a"], ["a"], weights=(float("inf"),))


def test_the_sacrebleu_preset_is_sacrebleu_with_nothing_else_to_know(huse_texts):
    """preset="sacrebleu" gives sacrebleu's corpus_bleu and sentence_bleu, defaults and all, on
    real and adversarial text (short hypotheses included, where the plain settings differ)."""
    sacrebleu = pytest.importorskip("sacrebleu", reason="sacrebleu (with lxml) is not installed")
    hypotheses = huse_texts[:40] + ["a", "the cat", "", "Hello, world!"] + ADVERSARIAL_TEXTS[:6]
    references = huse_texts[40:80] + ["a b", "the cat sat", "x", "hello world"] + ADVERSARIAL_TEXTS[6:12]
    corpus = gpu_neighbors.corpus_bleu(hypotheses, references, preset="sacrebleu")
    assert 100 * corpus.item() == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score, abs=1e-9)
    sentences = gpu_neighbors.sentence_bleu(hypotheses, references, preset="sacrebleu")
    expected = [sacrebleu.sentence_bleu(h, [r]).score / 100 for h, r in zip(hypotheses, references)]
    np.testing.assert_allclose(sentences.numpy(), expected, rtol=0, atol=1e-11)
    plain = gpu_neighbors.corpus_bleu(hypotheses, references, smoothing="exp", tokenizer="13a")
    assert abs(100 * plain.item() - sacrebleu.corpus_bleu(hypotheses, [references]).score) > 1e-6  # needs the preset
    with pytest.raises(ValueError, match="preset 'sacrebleu' sets smoothing"):
        gpu_neighbors.corpus_bleu(hypotheses, references, preset="sacrebleu", smoothing="add1")
    with pytest.raises(ValueError, match="preset: 'nltk2' is none of"):
        gpu_neighbors.sentence_bleu(hypotheses, references, preset="nltk2")


@pytest.mark.parametrize("given", [{"tokenizer": "whitespace"}, {"smoothing": "none"}, {"effective_order": False}])
def test_the_preset_refuses_a_setting_given_at_the_plain_default(given):
    """A setting given beside the preset is refused whenever it differs from the preset's, even at
    the value the functions take without a preset: whitespace tokens asked for are not silently 13a."""
    for function in (gpu_neighbors.corpus_bleu, gpu_neighbors.sentence_bleu):
        with pytest.raises(ValueError, match=f"preset 'sacrebleu' sets {next(iter(given))}"):
            function(["the cat sat on the mat"], ["the cat sat on a mat"], preset="sacrebleu", **given)
    with pytest.raises(ValueError, match="preset 'sacrebleu' sets"):
        gpu_neighbors.bleu_signature(preset="sacrebleu", **given)


def test_the_preset_takes_its_own_settings_given_again():
    hypotheses, references = ["The cat sat on the mat today."], ["The cat sat on a mat today ."]
    assert torch.equal(gpu_neighbors.corpus_bleu(hypotheses, references, preset="sacrebleu", tokenizer="13a",
                                                 smoothing="exp", effective_order=True),
                       gpu_neighbors.corpus_bleu(hypotheses, references, preset="sacrebleu"))


@pytest.mark.parametrize("settings", [{"preset": "sacrebleu"}, {"tokenizer": "intl", "lowercase": True,
                                      "smoothing": "floor", "effective_order": True},
                                      {"smoothing": "add-k", "smooth_value": 2, "effective_order": True,
                                       "tokenizer": "13a"}])
def test_the_signature_names_the_settings_as_sacrebleu_does(settings):
    """bleu_signature's case, eff, tok and smooth fields are sacrebleu's for the same settings, and
    the preset is named, so a printed score says which BLEU it is."""
    sacrebleu = pytest.importorskip("sacrebleu", reason="sacrebleu (with lxml) is not installed")
    theirs = sacrebleu.BLEU(lowercase=settings.get("lowercase", False), tokenize=settings.get("tokenizer", "13a"),
                            smooth_method=settings.get("smoothing", "exp"), smooth_value=settings.get("smooth_value"),
                            effective_order=True)
    theirs.sentence_score("a b c", ["a b c"])
    expected = dict(field.split(":", 1) for field in theirs.get_signature().format().split("|"))
    ours = dict(field.split(":", 1) for field in gpu_neighbors.bleu_signature(**settings).split("|"))
    assert {name: ours[name] for name in ("case", "eff", "tok", "smooth")} == \
        {name: expected[name] for name in ("case", "eff", "tok", "smooth")}
    assert ("preset" in ours) == ("preset" in settings) and ours["version"].startswith("gpu-neighbors-")


def test_the_signature_refuses_what_the_functions_refuse():
    with pytest.raises(ValueError, match="preset 'sacrebleu' sets tokenizer"):
        gpu_neighbors.bleu_signature(preset="sacrebleu", tokenizer="intl")
    with pytest.raises(ValueError, match="smoothing must be one of"):
        gpu_neighbors.bleu_signature(smoothing="method9")


@pytest.mark.parametrize("function", ["sentence_bleu", "corpus_bleu", "rouge"])
def test_reference_counts_beyond_the_slots_are_refused(function):
    """A count of -1 gave the candidate no reference (BLEU 0) and a count above the slots every
    slot, both silently; they are checked on the device as vocab_size is (no host read)."""
    call = getattr(gpu_neighbors, function)
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    references = ids[:, None, :].repeat(1, 2, 1)
    for counts in ([-1, 1], [1, 3]):
        with pytest.raises(RuntimeError, match=r"reference_counts must be in \[0, 2\], the reference slots"):
            call(ids, references, reference_counts=torch.tensor(counts))
    call(ids, references, reference_counts=torch.tensor([0, 2]))
