"""METEOR against NLTK's single_meteor_score, pair by pair, with the same WordNet on both sides.

WordNet must be installed (`apt-get install -y wordnet-base wordnet-sense-index`); without it
these tests fail rather than skip, since the synonym stage would go untested.
"""
from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch
from nltk.translate.meteor_score import single_meteor_score

import gpu_neighbors.kernels.meteor as meteor_module
import gpu_neighbors.kernels.wordnet as wordnet_module
from conftest import ADVERSARIAL_TEXTS
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.core.saved import SavedScorerError
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.scoring.distributed import load_scorer, serialize_scorer
from gpu_neighbors.kernels.meteor import MeteorKernel
from gpu_neighbors.text.tokenizers import WhitespaceTokenizer
from parity import all_pairs, assert_tiling_invariant, reference_matrix

CPU = torch.device("cpu")

# Words with shared Porter stems and WordNet synonym links (checked below to matter).
RELATED_WORDS = (
    "car cars Car CARS auto autos automobile machine buy bought buys purchase purchased "
    "quick fast quickly go went goes going run ran running runs say said says tell told "
    "price prices cost costs plan plans program rise rose climb fall fell drop dropped "
    "head chief boss talk talks speak spoke help aid kill killed war the a of"
).split()

METEOR_TEXTS = [
    "cars car Car CARS",
    "the car and the auto",
    "an automobile is a machine",
    "buy",
    "purchase",
    "I buy cars",
    "they purchased a car",
    "car car auto auto car",
    "auto car",
    "Running runs ran run runner",
    "quick fast speedy rapid",
    "The Party commands",
    "prices rose as costs climbed",
    "the price of the car fell",
    "İstanbul ISTANBUL istanbul ẞ ß ΟΔΟΣ οδος",
    "\t tabs\tand\nnewlines ",
]


class NoWordNet:
    """A WordNet with no synsets: NLTK then runs its exact and stem stages only."""

    def synsets(self, lemma, pos=None, lang="eng", check_exceptions=True):
        return []


@pytest.fixture(scope="module")
def wordnet():
    reader = wordnet_module.load_wordnet()
    if reader is None:
        pytest.fail(f"WordNet is missing: install it with `{wordnet_module.APT_INSTALL}`")
    return reader


def nltk_scores(candidates, train, wordnet, **options) -> np.ndarray:
    return reference_matrix(
        lambda c, s: single_meteor_score(s.split(), c.split(), wordnet=wordnet, **options), candidates, train
    )


def fitted(train: list[str], **options) -> MeteorKernel:
    kernel = MeteorKernel(tokenizer=WhitespaceTokenizer(), device=CPU, **options)
    kernel.fit(train)
    return kernel


def random_texts(count: int, seed: int) -> list[str]:
    generator = random.Random(seed)
    return [
        " ".join(generator.choices(RELATED_WORDS, k=generator.randint(0, 24))) for _ in range(count)
    ]


def test_wordnet_is_available(wordnet):
    assert wordnet.get_version() == "3.0"
    names = {lemma.name() for synset in wordnet.synsets("car") for lemma in synset.lemmas()}
    assert {"auto", "automobile"} <= names
    # The generated lexnames table agrees with the lexicographer file numbers in the data.
    assert wordnet.synset("dog.n.01").lexname() == "noun.animal"
    assert wordnet.synset("run.v.01").lexname() == "verb.motion"
    assert wordnet.synset("car.n.01").lexname() == "noun.artifact"


def test_matches_nltk_on_real_text(huse_texts, wordnet):
    train, candidates = huse_texts[:50], huse_texts[100:150]
    ours = all_pairs(fitted(train), candidates, blocks=[13, 31])
    reference = nltk_scores(candidates, train, wordnet)
    assert ours.dtype == torch.float64
    np.testing.assert_allclose(ours.numpy(), reference, rtol=0, atol=1e-12)
    assert (reference >= MeteorKernel.default_tau).sum() >= 10, "real text must reach tau sometimes"


def test_matches_nltk_on_adversarial_text(huse_texts, wordnet):
    long_real = " ".join(huse_texts[:40])  # 300+ real words
    texts = ADVERSARIAL_TEXTS + METEOR_TEXTS + [long_real]
    assert len(long_real.split()) >= 300
    train = texts + huse_texts[:10]
    candidates = texts + huse_texts[60:70]
    ours = all_pairs(fitted(train), candidates, blocks=[5, 30])
    np.testing.assert_allclose(ours.numpy(), nltk_scores(candidates, train, wordnet), rtol=0, atol=1e-12)


def test_matches_nltk_where_stems_and_synonyms_compete(wordnet):
    train, candidates = random_texts(40, seed=1), random_texts(40, seed=2)
    ours = all_pairs(fitted(train), candidates, blocks=[9]).numpy()
    reference = nltk_scores(candidates, train, wordnet)
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-12)
    without_synonyms = nltk_scores(candidates, train, NoWordNet())
    assert (reference != without_synonyms).sum() >= 50, "the synonym stage must change scores here"
    np.testing.assert_allclose(
        all_pairs(fitted(train, synonyms=False), candidates, blocks=[]).numpy(),
        without_synonyms,
        rtol=0,
        atol=1e-12,
    )


def test_stems_and_synonyms_on_purpose(wordnet):
    cases = [("cars", "car"), ("car", "auto"), ("buy", "purchase"), ("bought", "buy"), ("Car", "cAR")]
    kernel = fitted([reference for _, reference in cases])
    ours = kernel.tile(kernel.encode([candidate for candidate, _ in cases]), 0, len(cases)).numpy()
    for row, (candidate, reference) in enumerate(cases):
        assert ours[row, row] == single_meteor_score([reference], [candidate], wordnet=wordnet)
    assert ours[0, 0] > 0 and ours[1, 1] > 0 and ours[4, 4] > 0


@pytest.mark.parametrize("options", [{"alpha": 0.5, "beta": 2.0, "gamma": 0.3}, {"alpha": 1.0, "gamma": 0.0}])
def test_parameters_match_nltk(huse_texts, wordnet, options):
    train, candidates = random_texts(15, seed=3) + huse_texts[:10], random_texts(15, seed=4)
    ours = all_pairs(fitted(train, **options), candidates, blocks=[]).numpy()
    np.testing.assert_allclose(ours, nltk_scores(candidates, train, wordnet, **options), rtol=0, atol=1e-12)


@pytest.mark.parametrize("options", [{"alpha": 1.5}, {"beta": -1.0}, {"gamma": 2.0}])
def test_bad_parameters_are_refused(options):
    with pytest.raises(ValueError, match="METEOR"):
        MeteorKernel(tokenizer=WhitespaceTokenizer(), device=CPU, **options)


def test_tiles_and_chunks_do_not_change_the_numbers(huse_texts):
    train = huse_texts[:60] + METEOR_TEXTS
    candidates = huse_texts[100:140] + METEOR_TEXTS + ["", "car"]
    kernel = fitted(train)
    whole = assert_tiling_invariant(
        kernel, candidates, [([1, 2, 30, 75], []), ([20], list(range(7, len(candidates), 7)))]
    )
    assert whole.shape == (len(candidates), len(train)) and whole.device == CPU
    own = kernel.tile(kernel.encode_train(10, 40), 0, kernel.num_train)
    assert torch.equal(own, all_pairs(kernel, train[10:40], blocks=[]))
    assert kernel.tile(kernel.encode([]), 0, kernel.num_train).shape == (0, len(train))


def test_scorer_is_invariant_to_chunk_size(huse_texts, huse_scores):
    train, quality = huse_texts[:80], huse_scores[:80]
    candidates = huse_texts[150:190] + METEOR_TEXTS
    runs = []
    for chunk_size, budget in [(1, 144 * 30), (7, None), (None, 144 * 900)]:
        scorer = NeighborsScorer(kernel="meteor", estimator=Threshold(tau=0.1, min_neighbors=2), device="cpu",
                                 memory_budget=budget, chunk_size=chunk_size)
        scorer.fit(train, quality)
        runs.append((scorer.predict(candidates), scorer.leave_one_out(), scorer.similarity(candidates)))
    expected = all_pairs(fitted(train), candidates, blocks=[])
    for prediction, loo, similarity in runs:
        assert torch.equal(similarity, expected)
        for got, want in [(prediction, runs[0][0]), (loo, runs[0][1])]:
            np.testing.assert_array_equal(got.scores, want.scores)
            np.testing.assert_array_equal(got.num_neighbors, want.num_neighbors)
    assert runs[0][0].coverage > 0 and runs[0][1].coverage > 0
    assert "wordnet:3.0" in str(scorer.signature)


def test_without_wordnet_it_warns_once_and_runs_exact_and_stem(monkeypatch, tmp_path):
    monkeypatch.setattr(wordnet_module, "_nltk_wordnet", lambda: None)
    monkeypatch.setattr(wordnet_module, "dictionary_folders", lambda: [tmp_path])
    with pytest.warns(UserWarning, match="apt-get install -y wordnet-base wordnet-sense-index"):
        assert wordnet_module.load_wordnet.__wrapped__() is None
    monkeypatch.setattr(meteor_module, "load_wordnet", lambda: None)
    train, candidates = random_texts(10, seed=5), random_texts(10, seed=6)
    kernel = fitted(train)
    assert kernel.settings()["wordnet"] == "none"
    np.testing.assert_allclose(
        all_pairs(kernel, candidates, blocks=[4]).numpy(),
        nltk_scores(candidates, train, NoWordNet()),
        rtol=0,
        atol=1e-12,
    )


def test_builds_an_nltk_corpus_from_the_dictionary(tmp_path):
    dictionary = wordnet_module.find_dictionary()
    assert dictionary is not None, f"install WordNet: `{wordnet_module.APT_INSTALL}`"
    corpus = wordnet_module.build_nltk_corpus(dictionary, tmp_path)
    assert corpus == tmp_path / "corpora" / "wordnet"
    for name in wordnet_module.REQUIRED_FILES:
        assert (corpus / name).read_bytes() == (dictionary / name).read_bytes()
        assert not (corpus / name).is_symlink()
    rows = [line.split("\t") for line in (corpus / "lexnames").read_text().splitlines()]
    assert len(rows) == 45 and rows[0] == ["00", "adj.all", "3"] and rows[44] == ["44", "adj.ppl", "3"]
    # Every synset's lexicographer file number names a file of its own part of speech.
    category = {"n": "noun", "v": "verb", "a": "adj", "s": "adj", "r": "adv"}
    for part in ("noun", "verb", "adj", "adv"):
        with (dictionary / f"data.{part}").open(encoding="latin-1") as handle:
            for line in handle:
                if line.startswith(" "):
                    continue  # the license header
                _, number, kind = line.split(" ", 3)[:3]
                assert rows[int(number)][1].split(".")[0] == category[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wordnet_module.build_nltk_corpus(dictionary, tmp_path)  # a second build changes nothing


def test_a_fitted_scorer_travels_and_refuses_another_wordnet(huse_texts, huse_scores, monkeypatch):
    """`score --ray` ships the fitted scorer to each worker as its saved folder
    (`serialize_scorer`): the worker's copy, built with the WordNet it finds, scores as the
    original does; where the WordNet found differs (here: none), loading refuses, since its
    synonyms would change the numbers."""
    scorer = NeighborsScorer(kernel="meteor", device="cpu").fit(huse_texts[:60], huse_scores[:60], tune=False)
    payload = serialize_scorer(scorer)
    loaded = load_scorer(payload, torch.device("cpu"))
    candidates = huse_texts[150:] + ["the automobile and the car ran", "a big large dog"]  # new stems: lookups
    expected, got = scorer.predict(candidates), loaded.predict(candidates)
    np.testing.assert_array_equal(got.scores, expected.scores)
    np.testing.assert_array_equal(loaded.similarity(candidates).numpy(), scorer.similarity(candidates).numpy())
    monkeypatch.setattr(meteor_module, "load_wordnet", lambda: None)  # a worker without WordNet
    with pytest.raises(SavedScorerError, match="wordnet 3.0 -> none"):
        load_scorer(payload, torch.device("cpu"))
