"""The BLEU kernel with any weights equals NLTK `sentence_bleu([s], x, weights, smoothing)` pair by
pair (real and adversarial text, every smoothing); BLEU* stays the default and its fast path."""
from __future__ import annotations

import warnings

import pytest
import torch
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

from conftest import ADVERSARIAL_TEXTS
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.kernels.parts import Bleu, Rouge
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.core.validation import ParameterError
from gpu_neighbors.kernels.bleu import BLEU_STAR_WEIGHTS, BleuKernel
from gpu_neighbors.kernels.bleu_tables import SMOOTHINGS
from gpu_neighbors.text.tokenizers import WhitespaceTokenizer
from parity import assert_matches_reference, assert_tiling_invariant
from gpu_neighbors.cli.parts import parts_from_settings

NLTK_METHOD = {"none": "method0", "epsilon": "method1", "add1": "method2", "exp": "method3"}
WEIGHTS = [(0.25, 0.25, 0.25, 0.25), (1.0,), (0.5, 0.5), (0.2, 0.3, 0.5), (0.1, 0.2, 0.3, 0.4)]


def nltk_bleu(candidate: str, reference: str, weights, smoothing: str) -> float:
    method = getattr(SmoothingFunction(), NLTK_METHOD[smoothing])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # method0 warns on every zero count
        return sentence_bleu([reference.split()], candidate.split(), weights=weights, smoothing_function=method)


@pytest.mark.parametrize("smoothing", SMOOTHINGS)
@pytest.mark.parametrize("weights", WEIGHTS)
def test_any_weights_match_nltk(huse_texts, weights, smoothing):
    train = huse_texts[:30] + ADVERSARIAL_TEXTS
    candidates = huse_texts[120:135] + ADVERSARIAL_TEXTS + huse_texts[:3]
    kernel = BleuKernel(tokenizer=WhitespaceTokenizer(), device=torch.device("cpu"), smoothing=smoothing,
                        weights=weights)
    kernel.fit(train)
    _, reference = assert_matches_reference(
        kernel, candidates, train, lambda c, s: nltk_bleu(c, s, weights, smoothing), 1e-9, [11, 29]
    )
    assert (reference > 0.05).sum() >= 10, "the test must exercise non-trivial overlaps"


def test_general_path_is_tiling_invariant(huse_texts):
    kernel = BleuKernel(tokenizer=WhitespaceTokenizer(), device=torch.device("cpu"), weights=(0.25,) * 4)
    kernel.fit(huse_texts[:40] + ADVERSARIAL_TEXTS)
    assert_tiling_invariant(kernel, huse_texts[50:80], [([7, 33], [4, 19]), ([1], [])])


def test_bleu_defaults_to_bleu_star_and_weights_reach_the_signature(huse_texts, huse_scores):
    default = NeighborsScorer(kernel="bleu", device="cpu").fit(huse_texts[:30], huse_scores[:30])
    assert default.kernel_.weights == BLEU_STAR_WEIGHTS
    assert "weights" not in str(default.signature)
    bleu4 = NeighborsScorer(kernel=Bleu(weights=(0.25, 0.25, 0.25, 0.25)), device="cpu").fit(huse_texts[:30],
                            huse_scores[:30])
    assert bleu4.kernel_name == "bleu"  # weights are a BLEU* setting: kernel=None keeps bleu
    assert "weights:0.25,0.25,0.25,0.25" in str(bleu4.signature)
    assert not torch.equal(default.similarity(huse_texts[30:40]), bleu4.similarity(huse_texts[30:40]))


@pytest.mark.parametrize("weights", [(0.5, 0.6), (), (0.2,) * 4 + (0.3,), (1.5, -0.5), (True,), (1e308, 1e308)])
def test_bad_weights_are_refused(huse_texts, huse_scores, weights):
    """Issue 50: weights whose sum passes float range raised OverflowError (math.fsum's)."""
    with pytest.raises(ParameterError, match="weights must be non-negative weights"):
        NeighborsScorer(kernel=Bleu(weights=weights), device="cpu").fit(huse_texts[:10], huse_scores[:10])


def test_weights_apply_to_bleu_only(huse_texts, huse_scores):
    with pytest.raises(TypeError, match="Rouge.. got an unexpected keyword argument 'weights'"):
        Rouge(weights=(1.0,))
    with pytest.raises(ValueError, match="weights applies to the bleu kernel only"):  # the command line's flags
        parts_from_settings({"kernel": "rouge", "weights": (1.0,)})


@pytest.mark.parametrize("smoothing", ["epsilon", "exp"])
def test_token_ids_take_the_same_general_path(huse_texts, huse_scores, smoothing):
    """predict_ids with BLEU-4 weights: the dense path equals the text path on decoded texts."""
    from gpu_neighbors.text.tokenizers import HuggingFaceTokenizer
    from minilm import MODEL_PATH

    tokenizer = HuggingFaceTokenizer(MODEL_PATH)
    scorer = NeighborsScorer(kernel=Bleu(smoothing=smoothing, weights=(0.25,) * 4, tokenizer=tokenizer),
                             estimator=Threshold(tau=0.05), device="cpu").fit(huse_texts[:60], huse_scores[:60])
    batch = tokenizer.hf(huse_texts[60:90] + ADVERSARIAL_TEXTS, padding=True, return_tensors="pt")
    decoded = tokenizer.hf.batch_decode(batch["input_ids"], skip_special_tokens=True)
    expected = scorer.predict(decoded)
    ours = scorer.predict_ids(batch["input_ids"], batch["attention_mask"])
    assert 0 < expected.coverage
    torch.testing.assert_close(ours.num_neighbors.cpu(), torch.as_tensor(expected.num_neighbors))
    torch.testing.assert_close(ours.scores.cpu().double(), torch.as_tensor(expected.scores).double(),
                               rtol=0, atol=1e-12, equal_nan=True)
