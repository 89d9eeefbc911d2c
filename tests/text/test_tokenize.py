"""Tokenizers and the frozen training vocabulary."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ADVERSARIAL_TEXTS, SHARED_DATA, needs
from gpu_neighbors.cli import main as cli_main
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.kernels.parts import Bleu
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.text.tokenizers import (
    BUILT_IN_TOKENIZERS,
    SEPARATOR,
    HuggingFaceTokenizer,
    Sacrebleu13aTokenizer,
    TokenizedTexts,
    WhitespaceTokenizer,
    make_tokenizer,
)
from gpu_neighbors.text import word_ids as word_ids_module
from gpu_neighbors.text.vocabulary import UNKNOWN_ID, Vocabulary
from minilm import MODEL_PATH

TEXTS = ["Hello, World!  It's 3.5 km.", "  ", "", "naïve Café\tüber", "The U.S.A. (really) big"]
# What the 13a rules and case folding look at: punctuation beside digits, at text edges and in
# runs; markup and entities; line breaks; separators Python's split() counts as whitespace;
# letters whose lower case depends on context (final sigma) or changes length (dotted I).
EDGE_TEXTS = [
    ".", ",", "-", ".5", "5.", "5-", "-5", "a.", ",a", "1,000.5", "x.,y", "3-4-5", "..", "a-\nb",
    "line\nbreak", "-\n", "&amp;lt; &quot;q&quot; &gt; &amp;", "<skipped>x<skipped>", "<skip\nped>",
    "\x1cfs\x1dgs\x1ers\x1fus", "\u2028ls\u2029ps\x85nel\xa0nbsp", "ΟΔΟΣ ΣΑΣ Σ", "İstanbul ǅ",
    "tab\tend\t", "{[(<>)]}~`@^|\\/", "'quoted' \"double\"", "\u0301combining", "end.",
]


def real_texts() -> list[str]:
    folder = SHARED_DATA.parent
    texts = []
    for name in ("huse_summarization.jsonl", "gug_dev.jsonl", "mlqe_et-en_dev.jsonl"):
        with (folder / name).open(encoding="utf-8") as handle:
            for line in handle:
                record = json.loads(line)
                texts += [record["text"], record.get("source", "")]
    return texts


def assert_tokenizes_as_text_by_text(tokenizer, texts) -> None:
    many = tokenizer.tokenize_many(texts)
    kept = np.delete(np.arange(len(many.tokens)), many.separators)
    assert [many.tokens[i] for i in kept] == [token for text in texts for token in tokenizer.tokenize(text)]
    assert many.lengths.tolist() == [len(tokenizer.tokenize(text)) for text in texts]


def test_whitespace_and_13a_split_as_their_references():
    reference13a = pytest.importorskip("sacrebleu.tokenizers.tokenizer_13a").Tokenizer13a()  # needs lxml
    for text in TEXTS + EDGE_TEXTS + ADVERSARIAL_TEXTS + real_texts():
        assert WhitespaceTokenizer().tokenize(text) == text.split()
        assert Sacrebleu13aTokenizer().tokenize(text) == reference13a(text).split(), text
        assert WhitespaceTokenizer(lowercase=True).tokenize(text) == text.lower().split()


# The tokenizers that run sacrebleu's own code, which imports lxml.
TOKENIZER_NAMES = [pytest.param(name, marks=needs("lxml")) if name in ("intl", "zh", "char") else name
                   for name in BUILT_IN_TOKENIZERS]


@pytest.mark.parametrize("lowercase", [False, True])
@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_a_batch_is_tokenized_as_its_texts_one_by_one(name, lowercase):
    tokenizer = make_tokenizer(name, lowercase=lowercase)
    texts = TEXTS + EDGE_TEXTS + ADVERSARIAL_TEXTS + real_texts()
    assert_tokenizes_as_text_by_text(tokenizer, texts)
    if tokenizer.splits_joined_texts:  # the batch was split as one string
        assert len(tokenizer.tokenize_many(texts).separators) == len(texts) - 1
    for size in (0, 1, 2):
        assert_tokenizes_as_text_by_text(tokenizer, texts[:size])


@pytest.mark.parametrize("name", ["whitespace", "13a"])
def test_a_text_holding_the_separator_is_still_tokenized_as_it_is(name):
    tokenizer = make_tokenizer(name)
    texts = ["a b", f"x {SEPARATOR} y", f"{SEPARATOR}", "", "c"]
    many = tokenizer.tokenize_many(texts)
    assert len(many.separators) == 0  # went text by text
    assert_tokenizes_as_text_by_text(tokenizer, texts)
    assert many.tokens.count(SEPARATOR) == 2


EDGE_CHARACTERS = "ab09 .,-\n\t&;<>\"'ΣσİI\x1c\u2028\xa0{}"


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(st.text(alphabet=EDGE_CHARACTERS, max_size=12), max_size=8),
       lowercase=st.booleans())
@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_any_batch_of_edge_characters_tokenizes_as_its_texts(name, texts, lowercase):
    assert_tokenizes_as_text_by_text(make_tokenizer(name, lowercase=lowercase), texts)


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
    vocabulary = Vocabulary(TokenizedTexts.from_lists([["a", "b"], ["b", "c"]]))
    batch = vocabulary.batch(TokenizedTexts.from_lists([["c", "z", "a"], []]), torch.device("cpu"))
    assert len(vocabulary) == 3
    assert batch.ids.tolist() == [2, UNKNOWN_ID, 0]
    assert batch.lengths.tolist() == [3, 0]
    assert batch.rows.tolist() == [0, 0, 0] and batch.positions.tolist() == [0, 1, 2]


def assert_encodes_as_its_batch(tokenizer, vocabulary: Vocabulary, texts: list[str]) -> None:
    """`Vocabulary.encode` (whitespace tokens of ASCII text numbered without Python per token)
    gives what tokenizing and `batch` give."""
    for native in {word_ids_module.native, None}:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(word_ids_module, "native", native)
            batch, lengths = vocabulary.encode(tokenizer, texts, torch.device("cpu"))
        tokenized = tokenizer.tokenize_many(texts)
        expected = vocabulary.batch(tokenized, torch.device("cpu"))
        assert torch.equal(batch.ids, expected.ids) and torch.equal(batch.lengths, expected.lengths)
        assert lengths.dtype == np.int64 and lengths.tolist() == tokenized.lengths.tolist()


@pytest.mark.parametrize("lowercase", [False, True])
@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_encode_equals_tokenizing_then_batch(name, lowercase):
    tokenizer = make_tokenizer(name, lowercase=lowercase)
    training = real_texts()[:300] + EDGE_TEXTS
    vocabulary = Vocabulary(tokenizer.tokenize_many(training))
    ascii_texts = [text for text in real_texts()[300:600] + ADVERSARIAL_TEXTS if text.isascii()]
    assert len(ascii_texts) > 100
    assert_encodes_as_its_batch(tokenizer, vocabulary, ascii_texts + ["UNSEEN words", "", "  "])
    assert_encodes_as_its_batch(tokenizer, vocabulary, TEXTS + EDGE_TEXTS)  # not ASCII: tokenized
    assert_encodes_as_its_batch(tokenizer, vocabulary, ["\u212a is K lowercased", "Kelvin"])
    assert_encodes_as_its_batch(tokenizer, vocabulary, [])


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.text(alphabet=EDGE_CHARACTERS, max_size=12), max_size=8), lowercase=st.booleans())
def test_encode_of_any_batch_of_edge_characters_equals_its_batch(texts, lowercase):
    tokenizer = WhitespaceTokenizer(lowercase=lowercase)
    vocabulary = Vocabulary(tokenizer.tokenize_many(EDGE_TEXTS + ["a b", "A B c"]))
    assert_encodes_as_its_batch(tokenizer, vocabulary, texts)


def test_switches_that_are_not_booleans_are_refused():
    """lowercase="no" lowercased, use_stemmer="no" stemmed (any truthy value set them), in
    self_bleu, rouge, sentence_bleu and RougeReward alike."""
    import gpu_neighbors

    for call, name in [(lambda: gpu_neighbors.self_bleu(["a b", "c d"], lowercase="no"), "lowercase"),
                       (lambda: gpu_neighbors.sentence_bleu(["A b"], ["a b"], lowercase=1), "lowercase"),
                       (lambda: make_tokenizer("13a", lowercase="False"), "lowercase"),
                       (lambda: gpu_neighbors.rouge(["a running"], ["a runs"], use_stemmer="no"), "use_stemmer"),
                       (lambda: gpu_neighbors.RougeReward(use_stemmer="no"), "use_stemmer"),
                       (lambda: HuggingFaceTokenizer(MODEL_PATH, allow_download="no"), "allow_download")]:
        with pytest.raises(ValueError, match=f"{name} must be True or False, not"):
            call()
    assert make_tokenizer("whitespace", lowercase=np.bool_(True)).tokenize("A b") == ["a", "b"]


def test_lowercase_makes_case_variants_neighbours():
    train = ["The Cat Sat On The Mat", "the cat sat on the mat today", "A Dog Ran"]
    scores = [0.2, 0.4, 0.9]
    plain = NeighborsScorer(kernel="bleu", estimator=Threshold(tau=0.3, min_neighbors=1)).fit(train,
                            scores).similarity(["the cat sat on the mat"])
    folded = NeighborsScorer(kernel=Bleu(lowercase=True),
                             estimator=Threshold(tau=0.3, min_neighbors=1, max_fraction=1.0)).fit(train, scores)
    similarity = folded.similarity(["THE CAT SAT ON THE MAT"])
    assert similarity[0, 0] == pytest.approx(1.0) and plain[0, 0] < 0.3
    np.testing.assert_allclose(folded.predict(["THE CAT SAT ON THE MAT"]).scores, [0.3], rtol=1e-15)


def test_scorer_with_a_hugging_face_tokenizer_counts_subword_ngrams():
    train = ["unbelievable weather conditions today", "believable stories of weather"]
    scorer = NeighborsScorer(kernel=Bleu(tokenizer=MODEL_PATH),
                             estimator=Threshold(tau=0.0, min_neighbors=1)).fit(train, [0.1, 0.9])
    assert "tok:hf:" in str(scorer.signature)
    assert scorer.similarity(["unbelievable weather conditions today"])[0, 0] == pytest.approx(1.0)


def test_a_tokenizer_folder_without_a_vocabulary_is_refused(tmp_path, capsys):
    """Issue 32: a folder holding only config.json (model_type bert) loaded as a tokenizer of
    five special tokens that maps every word to [UNK], and score wrote estimates with it."""
    from gpu_neighbors.text.tokenizers import make_tokenizer

    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}), encoding="utf-8")
    with pytest.raises(ValueError, match="holds no vocabulary") as raised:
        make_tokenizer(str(folder))
    assert str(folder) in str(raised.value)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"text": f"text {i} here", "score": i / 10}) + "\n" for i in range(8)))
    output = tmp_path / "out.jsonl"
    assert cli_main(["score", "--train", str(data), "--candidates", str(data), "--output", str(output),
                     "--tokenizer", str(folder), "--device", "cpu", "--quiet"]) == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and "holds no vocabulary" in error, error
    assert not output.exists()
