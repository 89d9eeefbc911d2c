"""Tokenizers and the frozen training vocabulary."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from gpu_neighbors import NeighborsScorer
from gpu_neighbors.text.tokenizers import (
    HuggingFaceTokenizer,
    Sacrebleu13aTokenizer,
    WhitespaceTokenizer,
    make_tokenizer,
)
from gpu_neighbors.text.vocabulary import UNKNOWN_ID, Vocabulary
from minilm import MODEL_PATH

TEXTS = ["Hello, World!  It's 3.5 km.", "  ", "", "naïve Café\tüber", "The U.S.A. (really) big"]


def test_whitespace_and_13a_split_as_their_references():
    for text in TEXTS:
        assert WhitespaceTokenizer().tokenize(text) == text.split()
        assert Sacrebleu13aTokenizer().tokenize(text) == Tokenizer13a()(text).split()
        assert WhitespaceTokenizer(lowercase=True).tokenize(text) == text.lower().split()


def test_hugging_face_tokenizer_from_a_local_path():
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(MODEL_PATH)
    tokenizer = make_tokenizer(MODEL_PATH)
    assert isinstance(tokenizer, HuggingFaceTokenizer)
    for text in TEXTS:
        assert tokenizer.tokenize(text) == reference.tokenize(text)
    assert tokenizer.signature == f"hf:{MODEL_PATH}"


def test_unloadable_hugging_face_tokenizer_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="cannot load a Hugging Face tokenizer"):
        make_tokenizer(str(tmp_path / "no-such-model"))


def test_vocabulary_is_frozen_on_training_tokens():
    vocabulary = Vocabulary([["a", "b"], ["b", "c"]])
    batch = vocabulary.batch([["c", "z", "a"], []], torch.device("cpu"))
    assert len(vocabulary) == 3
    assert batch.ids.tolist() == [2, UNKNOWN_ID, 0]
    assert batch.lengths.tolist() == [3, 0]
    assert batch.rows.tolist() == [0, 0, 0] and batch.positions.tolist() == [0, 1, 2]


def test_lowercase_makes_case_variants_neighbours():
    train = ["The Cat Sat On The Mat", "the cat sat on the mat today", "A Dog Ran"]
    scores = [0.2, 0.4, 0.9]
    plain = NeighborsScorer(min_neighbors=1, tau=0.3).fit(train, scores).similarity(["the cat sat on the mat"])
    folded = NeighborsScorer(min_neighbors=1, max_fraction=1.0, tau=0.3, lowercase=True).fit(train, scores)
    similarity = folded.similarity(["THE CAT SAT ON THE MAT"])
    assert similarity[0, 0] == pytest.approx(1.0) and plain[0, 0] < 0.3
    np.testing.assert_allclose(folded.predict(["THE CAT SAT ON THE MAT"]).scores, [0.3], rtol=1e-15)


def test_scorer_with_a_hugging_face_tokenizer_counts_subword_ngrams():
    train = ["unbelievable weather conditions today", "believable stories of weather"]
    scorer = NeighborsScorer(tokenizer=MODEL_PATH, tau=0.0, min_neighbors=1).fit(train, [0.1, 0.9])
    assert "tok:hf:" in str(scorer.signature)
    assert scorer.similarity(["unbelievable weather conditions today"])[0, 0] == pytest.approx(1.0)
