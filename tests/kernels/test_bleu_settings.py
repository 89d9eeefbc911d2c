"""Every BLEU setting of NLTK and sacrebleu on `sentence_bleu` and `corpus_bleu`: NLTK's smoothing
methods 0-7 with custom values, `auto_reweigh`, lists of weight tuples; sacrebleu's effective
order, floor and add-k smoothing, `lowercase` and its `intl`, `zh` and `char` tokenizers. Cases
ported from NLTK's doctests and unit tests and from sacrebleu's test suite, then a differential
test against both on real and adversarial text."""
from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch
from nltk.translate import bleu_score

import gpu_neighbors
from conftest import ADVERSARIAL_TEXTS

ADVERSARIAL = ADVERSARIAL_TEXTS + [
    "«Bonjour», dit-il… “Quoted” ‘single’ ¿Qué? ¡Sí! 3·14 ½ € £ ™ © — end.",
    "東京は日本の首都です。京都も、東京も。 ABC東京def",
    "The CAT sat. the cat SAT! The Cat sat?",
    "line one\n\nline two\n",
    "İstanbul \u212aelvin ÉCOLE Straße ﬁne ＡＢＣ１２３",
    "a a a a b b b b a a a a b b b b",
]
# The BLEU paper's example sentences, as NLTK's doctests use them.
HYPOTHESIS_1 = "It is a guide to action which ensures that the military always obeys the commands of the party"
HYPOTHESIS_2 = "It is to insure the troops forever hearing the activity guidebook that party direct"
REFERENCE_1 = "It is a guide to action that ensures that the military will forever heed Party commands"
REFERENCE_2 = ("It is the guiding principle which guarantees the military forces always being under the command "
               "of the Party")
REFERENCE_3 = "It is the practical guide for the army always to heed the directions of the party"
HYPOTHESIS_3 = "he read the book because he was interested in world history"
REFERENCE_4 = "he was interested in world history because he read the book"
PAPER_REFERENCES = [REFERENCE_1, REFERENCE_2, REFERENCE_3]
CHENCHERRY = bleu_score.SmoothingFunction()


@pytest.fixture(scope="module")
def sacrebleu():
    """sacrebleu, the peer; it imports lxml, which a bare device environment may lack."""
    return pytest.importorskip("sacrebleu", reason="sacrebleu (with lxml) is not installed")


def nltk(function, references, candidates, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(references, candidates, **kwargs)


def digits(values) -> list[int]:
    """The first four decimals, as a doctest's `0.5045...` shows them."""
    return [int(value * 10_000) for value in np.atleast_1d(np.asarray(values))]


def test_nltk_doctests():
    """bleu_score.py's doctests: BLEU-4, BLEU-5, method1, several BLEU-n at once, corpus BLEU."""
    refs = [PAPER_REFERENCES]
    assert digits(gpu_neighbors.sentence_bleu([HYPOTHESIS_1], refs)) == [5045]
    assert digits(gpu_neighbors.sentence_bleu([HYPOTHESIS_2], refs, smoothing="method1")) == [370]
    assert digits(gpu_neighbors.sentence_bleu([HYPOTHESIS_1], refs, weights=(0.2,) * 5)) == [3920]
    several = gpu_neighbors.sentence_bleu([HYPOTHESIS_1], refs, weights=[(1 / 2,) * 2, (1 / 3,) * 3, (1 / 4,) * 4])
    assert several.shape == (1, 3)
    assert digits(several[0]) == [7453, 6240, 5045]
    candidates, references = [HYPOTHESIS_1, HYPOTHESIS_3], [PAPER_REFERENCES, [REFERENCE_4]]
    assert digits(gpu_neighbors.corpus_bleu(candidates, references)) == [5920]
    assert digits(gpu_neighbors.corpus_bleu(candidates, references, weights=(0.1, 0.3, 0.5, 0.1))) == [5818]
    weights = [(0.5, 0.5), (0.333, 0.333, 0.334), (0.25, 0.25, 0.25, 0.25), (0.2, 0.2, 0.2, 0.2, 0.2)]
    corpus = gpu_neighbors.corpus_bleu(candidates, references, weights=weights)
    assert digits(corpus) == [8242, 7067, 5920, 4719]
    theirs = nltk(bleu_score.corpus_bleu, [[r.split() for r in refs] for refs in references],
                  [c.split() for c in candidates], weights=weights)
    np.testing.assert_allclose(corpus.numpy(), theirs, rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", [f"method{n}" for n in range(8)])
def test_nltk_unit_test_cases(method):
    """NLTK's test_bleu.py cases (zero, full and partial matches, n above the hypothesis length,
    empty sides, the bad-sentence corpus) under every smoothing method, against NLTK itself."""
    cases = [
        ("John loves Mary", "The candidate has no alignment to any of the references", (1 / 3,) * 3),
        ("John loves Mary", "John loves Mary", (0.5, 0.5)),
        ("John loves Mary who loves Mike", "John loves Mary", (0.25,) * 4),
        ("John loves Mary", "John loves Mary ?", (0.25,) * 4),
        ("John loves Mary", "John loves Mary", (0.25,) * 4),
        ("", "The candidate has no alignment to any of the references", (0.25,) * 4),
        ("John loves Mary", "", (0.25,) * 4),
        ("let go it", "let it go", (0.25,) * 4),
        ("Foo", "The candidate has no alignment to any of the references", (0.25,) * 4),
        ("Teo S yb , oe uNb , R , T t , , t Tue Ar saln S , , 5istsi l , 5oe R ulO sae oR R",
         "Their tasks include changing a pump on the faulty stokehold .Likewise , two species that are very "
         "similar in morphology were distinguished using genetics .", (0.25,) * 4),
    ]
    for candidate, reference, weights in cases:
        function = getattr(CHENCHERRY, method)
        try:
            want = nltk(bleu_score.sentence_bleu, [reference.split()], candidate.split(), weights=weights,
                        smoothing_function=function)
        except AssertionError:  # method6 without a trigram match: NLTK refuses
            continue
        except IndexError:  # method6 under 3 orders: NLTK fails on it, we refuse it
            with pytest.raises(ValueError, match="method6 needs at least 3 orders"):
                gpu_neighbors.sentence_bleu([candidate], [reference], weights=weights, smoothing=method)
            continue
        ours = gpu_neighbors.sentence_bleu([candidate], [reference], weights=weights, smoothing=method)
        assert float(ours[0]) == pytest.approx(want, abs=1e-9), (candidate, reference)
        corpus = gpu_neighbors.corpus_bleu([candidate], [reference], weights=weights, smoothing=method)
        assert float(corpus) == pytest.approx(want, abs=1e-9)


def test_sacrebleu_test_suite_cases(sacrebleu):
    """sacrebleu's test_bleu.py: raw_corpus_bleu (floor 0.01, effective order, no tokenization),
    effective order, the README corpus under tokenizers and smoothings, empty hypotheses, the
    floor offset."""
    def raw(hypotheses, references, floor=0.01):
        """sacrebleu's raw_corpus_bleu, checked against the installed sacrebleu too."""
        ours = float(gpu_neighbors.corpus_bleu(hypotheses, references, smoothing="floor", smooth_value=floor,
                                               effective_order=True))
        assert ours == pytest.approx(sacrebleu.raw_corpus_bleu(hypotheses, [references], floor).score / 100, abs=1e-9)
        return ours

    # 0.0038 in the suite's older version; no match at all scores 0 since sacrebleu 1.5 (its #141)
    assert raw(["this is a test", "another test"], ["ref1", "ref2"]) == 0.0
    assert raw(["this is a test"], ["this is a test"]) == pytest.approx(1.0, abs=1e-9)
    assert raw(["this is a fest"], ["this is a test"]) == pytest.approx(0.223606797749979, abs=1e-9)
    assert raw(["test"], ["a test"]) == pytest.approx(0.3678794411714425, abs=1e-9)
    assert raw(["a test"], ["a test"]) == pytest.approx(1.0, abs=1e-9)
    assert raw(["a little test"], ["a test"]) == pytest.approx(0.03218297948685433, abs=1e-9)
    offset = (["am I am a character sequence"], ["I am a symbol string sequence a a"])
    assert raw(*offset, floor=0.0) == 0.0
    assert raw(*offset, floor=0.1) == pytest.approx(0.1555722182, abs=1e-9)
    assert float(gpu_neighbors.corpus_bleu(*offset, smoothing="floor", effective_order=True)) == raw(*offset, 0.1)
    hypotheses = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]
    streams = [["The dog bit the man.", "It was not unexpected.", "The man bit him first."],
               ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."]]
    references = [list(group) for group in zip(*streams)]
    for tokenizer, want in (("13a", 48.530827), ("intl", 43.91623493)):
        for smoothing in ("exp", "none"):
            ours = float(gpu_neighbors.corpus_bleu(hypotheses, references, tokenizer=tokenizer, smoothing=smoothing))
            assert ours == pytest.approx(want / 100, abs=1e-9), tokenizer
    # Its `tokenize: none` case (49.19) splits "It wasn't surprising." into 3 words: sacrebleu counts
    # no 4-gram for it where NLTK counts one, the documented difference; NLTK's value here.
    ours = float(gpu_neighbors.corpus_bleu(hypotheses, references, smoothing="exp"))
    want = nltk(bleu_score.corpus_bleu, [[r.split() for r in refs] for refs in references],
                [h.split() for h in hypotheses], smoothing_function=CHENCHERRY.method3)
    assert ours == pytest.approx(want, abs=1e-9) and abs(ours - 0.491919566) > 0.01
    assert float(gpu_neighbors.corpus_bleu(["", "", ""], references, tokenizer="13a", smoothing="exp")) == 0.0


@pytest.fixture(scope="module")
def pairs(huse_texts):
    rng = random.Random(3)
    candidates, references = [], []
    for index, text in enumerate(huse_texts[:120]):
        words = text.split()
        edited = [w.upper() if rng.random() < 0.2 else w for w in words if rng.random() > 0.2]
        candidates.append(text if index % 3 else text.capitalize())
        references.append([" ".join(edited), huse_texts[index + 1]][: 1 + index % 2])
    for index, text in enumerate(ADVERSARIAL):
        candidates.append(text)
        references.append([ADVERSARIAL[(index + 3) % len(ADVERSARIAL)], text.lower()][: 1 + index % 2])
    return candidates, references


VALUES = {"method1": 0.05, "method4": 3.0, "method6": 2.0, "method7": 4.0}
WEIGHT_SETS = [(0.25,) * 4, (0.5, 0.3, 0.2), (0.1,) * 6, [(1.0,), (0.5, 0.5), (0.25,) * 4, (0.2,) * 5]]


@pytest.mark.parametrize("method", [f"method{n}" for n in range(8)])
@pytest.mark.parametrize("custom", [False, True])
def test_differential_against_nltk(pairs, method, custom):
    """Every method, with NLTK's default or a custom epsilon / k / alpha, every weight set, with
    and without auto_reweigh, sentence by sentence and as a corpus (whose methods 5 and 6 read the
    last hypothesis)."""
    candidates, references = pairs
    value = VALUES.get(method) if custom else None
    smoothing = bleu_score.SmoothingFunction(
        **({"epsilon": 0.05, "k": 3.0 if method == "method4" else 4.0, "alpha": 2.0} if custom else {}))
    function = getattr(smoothing, method)
    split_refs = [[r.split() for r in refs] for refs in references]
    split_hyps = [c.split() for c in candidates]
    for weights in WEIGHT_SETS:
        if method == "method6" and min(map(len, weights if isinstance(weights, list) else [weights])) < 3:
            continue
        for auto_reweigh in (False, True):
            ours = gpu_neighbors.sentence_bleu(candidates, references, weights=weights, smoothing=method,
                                               smooth_value=value, auto_reweigh=auto_reweigh).numpy()
            checked = 0
            for index, (refs, hyp) in enumerate(zip(split_refs, split_hyps)):
                try:
                    want = nltk(bleu_score.sentence_bleu, refs, hyp, weights=weights, smoothing_function=function,
                                auto_reweigh=auto_reweigh)
                except AssertionError:  # method6 without a trigram match
                    continue
                np.testing.assert_allclose(ours[index], want, rtol=0, atol=1e-9, err_msg=f"{index} {weights}")
                checked += 1
            assert checked > (10 if method == "method6" else len(candidates) - 1)
            try:
                want = nltk(bleu_score.corpus_bleu, split_refs, split_hyps, weights=weights, smoothing_function=function,
                            auto_reweigh=auto_reweigh)
            except AssertionError:
                continue
            corpus = gpu_neighbors.corpus_bleu(candidates, references, weights=weights, smoothing=method,
                                               smooth_value=value, auto_reweigh=auto_reweigh).numpy()
            np.testing.assert_allclose(corpus, want, rtol=0, atol=1e-9)


@pytest.mark.parametrize("smoothing, value", [("none", None), ("exp", None), ("floor", None), ("floor", 0.01),
                                              ("add-k", None), ("add-k", 0.5)])
@pytest.mark.parametrize("tokenizer", ["13a", "intl", "zh", "char"])
def test_differential_against_sacrebleu(sacrebleu, pairs, smoothing, value, tokenizer):
    candidates, references = pairs
    two = [(refs * 2)[:2] for refs in references]
    streams = [[refs[k] for refs in two] for k in range(2)]
    for effective_order in (True, False):
        if not effective_order and smoothing in ("none", "exp"):
            continue  # NLTK's formula: equal to sacrebleu's only where no candidate is shorter than the order
        for lowercase in (False, True):
            settings = dict(smoothing=smoothing, smooth_value=value, effective_order=effective_order,
                            tokenizer=tokenizer, lowercase=lowercase)
            peer = dict(smooth_method=smoothing, smooth_value=value, use_effective_order=effective_order,
                        tokenize=tokenizer, lowercase=lowercase)
            ours = gpu_neighbors.sentence_bleu(candidates, references, **settings).numpy()
            want = [sacrebleu.sentence_bleu(c, refs, **peer).score / 100 for c, refs in zip(candidates, references)]
            np.testing.assert_allclose(ours, want, rtol=0, atol=1e-9)
            corpus = float(gpu_neighbors.corpus_bleu(candidates, two, **settings))
            assert corpus == pytest.approx(sacrebleu.corpus_bleu(candidates, streams, **peer).score / 100, abs=1e-9)


def test_sacrebleu_tokenizers_split_as_sacrebleu(sacrebleu, pairs):
    from sacrebleu.tokenizers import tokenizer_char, tokenizer_intl, tokenizer_zh

    theirs = {"intl": tokenizer_intl.TokenizerV14International(), "zh": tokenizer_zh.TokenizerZh(),
              "char": tokenizer_char.TokenizerChar()}
    candidates, _ = pairs
    for name, tokenizer in theirs.items():
        for lowercase in (False, True):
            ours = gpu_neighbors.make_tokenizer(name, lowercase=lowercase)
            for text in candidates:
                assert ours.tokenize(text) == tokenizer((text.lower() if lowercase else text).rstrip()).split()


def test_settings_on_token_ids_equal_the_text_path():
    """A setting computed on the host still takes token ids, and gives what the same tokens give
    as words."""
    rng = np.random.default_rng(0)
    ids = torch.from_numpy(rng.integers(0, 6, size=(30, 12)))
    refs = torch.from_numpy(rng.integers(0, 6, size=(30, 2, 10)))
    words = [" ".join(map(str, row.tolist())) for row in ids]
    ref_words = [[" ".join(map(str, r.tolist())) for r in group] for group in refs]
    for settings in ({"smoothing": "method5", "weights": [(1.0,), (0.25,) * 4]}, {"smoothing": "method7"},
                     {"smoothing": "add-k", "effective_order": True}, {"smoothing": "method4", "auto_reweigh": True}):
        np.testing.assert_array_equal(gpu_neighbors.sentence_bleu(ids, refs, **settings).numpy(),
                                      gpu_neighbors.sentence_bleu(words, ref_words, **settings).numpy())
        np.testing.assert_array_equal(gpu_neighbors.corpus_bleu(ids, refs, **settings).numpy(),
                                      gpu_neighbors.corpus_bleu(words, ref_words, **settings).numpy())


def test_clear_errors():
    with pytest.raises(ValueError, match="smoothing must be one of"):
        gpu_neighbors.sentence_bleu(["a"], ["a"], smoothing="method8")
    with pytest.raises(ValueError, match="smooth_value: smoothing 'exp' takes no value"):
        gpu_neighbors.sentence_bleu(["a"], ["a"], smoothing="exp", smooth_value=0.2)
    with pytest.raises(ValueError, match="smooth_value must be a non-negative number"):
        gpu_neighbors.sentence_bleu(["a"], ["a"], smoothing="floor", smooth_value=-1)
    with pytest.raises(ValueError, match="weighs its orders equally"):
        gpu_neighbors.sentence_bleu(["a"], ["a"], weights=(0.5, 0.3, 0.2), effective_order=True)
    with pytest.raises(ValueError, match="is NLTK's"):
        gpu_neighbors.corpus_bleu(["a"], ["a"], smoothing="method4", effective_order=True)
    with pytest.raises(ValueError, match="method6 needs at least 3 orders"):
        gpu_neighbors.sentence_bleu(["a"], ["a"], weights=(0.5, 0.5), smoothing="method6")
    with pytest.raises(ValueError, match="lowercase applies to texts"):
        gpu_neighbors.sentence_bleu(torch.zeros((1, 2), dtype=torch.long), torch.zeros((1, 2), dtype=torch.long),
                                    lowercase=True)
    with pytest.raises(ValueError, match="lowercase=True with a tokenizer made without it"):
        gpu_neighbors.sentence_bleu(["a"], ["a"], tokenizer=gpu_neighbors.WhitespaceTokenizer(), lowercase=True)


@pytest.mark.parametrize("flag", ["auto_reweigh", "effective_order"])
@pytest.mark.parametrize("function", ["sentence_bleu", "corpus_bleu", "bleu_signature"])
def test_flags_are_true_or_false(function, flag):
    """effective_order="no" was read as True (a candidate short of 4-grams scored 0.0 instead of
    1.5e-154), and auto_reweigh="no" too."""
    call = getattr(gpu_neighbors, function)
    inputs = () if function == "bleu_signature" else (["the cat"], [["the cat"]])
    with pytest.raises(ValueError, match=f"{flag} must be True or False, not 'no'"):
        call(*inputs, **{flag: "no"})


@pytest.mark.parametrize("function", ["sentence_bleu", "corpus_bleu", "rouge"])
def test_a_device_that_cannot_score_is_refused_by_name(function, monkeypatch):
    """device="tpu" failed in torch with "Expected one of cpu, cuda, ..." and device="cuda" on a
    machine without it with "Torch not compiled with CUDA enabled" (an AssertionError)."""
    call = getattr(gpu_neighbors, function)
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        call(["the cat"], ["the cat"], device="tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="device 'cuda' asked for, but CUDA is not available here"):
        call(["the cat"], ["the cat"], device="cuda")


def test_weights_as_one_number_or_a_tensor():
    """weights=0.25 failed with "object of type 'float' has no len()"; a tensor, which numpy's
    array is taken as, with "weights must be real numbers, not tensor(0.2500)"."""
    with pytest.raises(TypeError, match="weights must be a sequence of weights, one per n-gram order"):
        gpu_neighbors.sentence_bleu(["the cat"], ["the cat"], weights=0.25)
    expected = gpu_neighbors.sentence_bleu(["the cat sat"], ["the cat sat"], weights=[(0.5, 0.5), (1.0,)])
    got = gpu_neighbors.sentence_bleu(["the cat sat"], ["the cat sat"], weights=torch.tensor([[0.5, 0.5], [1.0, 0.0]]))
    assert torch.equal(got, gpu_neighbors.sentence_bleu(["the cat sat"], ["the cat sat"],
                                                        weights=np.array([[0.5, 0.5], [1.0, 0.0]])))
    assert got.shape == expected.shape
