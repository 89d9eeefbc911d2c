"""scorer.reward: RL rewards from the neighbour estimate, with seeded training subsamples."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from gpu_neighbors import Intervals, NeighborsScorer
from gpu_neighbors.kernels.parts import Bleu
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.text.tokenizers import HuggingFaceTokenizer
from minilm import MODEL_PATH

TRAIN_SIZE = 150


@pytest.fixture(scope="module")
def tokenizer() -> HuggingFaceTokenizer:
    return HuggingFaceTokenizer(MODEL_PATH)


@pytest.fixture(scope="module")
def candidates(huse_texts) -> list[str]:
    return huse_texts[TRAIN_SIZE:] + huse_texts[:40] + ["", "zzz qqq"]


def fitted(tokenizer, huse_texts, huse_scores) -> NeighborsScorer:
    return NeighborsScorer(kernel=Bleu(tokenizer=tokenizer), estimator=Threshold.paper(), device="cpu").fit(
        huse_texts[:TRAIN_SIZE], huse_scores[:TRAIN_SIZE]
    )


def test_defined_estimates_and_the_training_mean_elsewhere(tokenizer, huse_texts, huse_scores, candidates):
    scorer = fitted(tokenizer, huse_texts, huse_scores)
    rewards = scorer.reward(candidates)
    prediction = scorer.predict(candidates)
    assert rewards.dtype == torch.float32 and rewards.shape == (len(candidates),)
    assert 0 < prediction.coverage < 1
    mean = np.mean(huse_scores[:TRAIN_SIZE])
    assert prediction.outside[-2:].all() and not prediction.outside.all()  # the empty text, the unknown words
    low = 0.0  # the score range's: a text outside the training distribution earns nothing
    want = np.where(prediction.outside, low, np.where(prediction.covered, prediction.scores, mean)).astype(np.float32)
    np.testing.assert_array_equal(rewards.cpu().numpy(), want)
    zero = scorer.reward(candidates, undefined=0.0).cpu().numpy()
    np.testing.assert_array_equal(
        zero, np.where(prediction.outside, low, np.where(prediction.covered, prediction.scores, 0.0)).astype(np.float32))


def test_token_ids_give_the_rewards_of_their_decoded_texts(tokenizer, huse_texts, huse_scores, candidates):
    """Two identically fitted scorers draw the same seeded subsets, so ids and decoded texts
    can be compared call by call, with and without subsampling."""
    by_ids, by_texts = (fitted(tokenizer, huse_texts, huse_scores) for _ in range(2))
    encoded = tokenizer.hf(candidates, padding=True, return_tensors="pt")
    decoded = tokenizer.hf.batch_decode(encoded["input_ids"], skip_special_tokens=True)
    for subsample in (None, 0.5, 0.5, 0.3):
        from_ids = by_ids.reward(
            encoded["input_ids"], attention_mask=encoded["attention_mask"], subsample=subsample, seed=7
        )
        assert from_ids.device == encoded["input_ids"].device
        assert torch.equal(from_ids, by_texts.reward(decoded, subsample=subsample, seed=7).to(from_ids.device))


def test_a_subsample_scores_like_a_scorer_fitted_on_that_subset(tokenizer, huse_texts, huse_scores, candidates):
    """Masking training texts out of the fitted neighbour model equals refitting on the subset
    (the b |S| bound included); the subset is replayed from a twin scorer's random stream."""
    train, quality = huse_texts[:TRAIN_SIZE], np.asarray(huse_scores[:TRAIN_SIZE])
    scorer, twin = (fitted(tokenizer, huse_texts, huse_scores) for _ in range(2))
    for _ in range(3):  # three calls, three fresh subsets
        keep = twin.draw_subset(0.4, 11, torch.device("cpu")).mask.numpy()  # the scorer's device draws the same
        assert keep.sum() == round(0.4 * TRAIN_SIZE)
        subset = NeighborsScorer(kernel=Bleu(tokenizer=tokenizer), estimator=Threshold.paper(), device="cpu",
                                 level=Intervals(negatives="none")).fit(  # its neighbours' estimates
            [text for text, kept in zip(train, keep) if kept], quality[keep]
        )
        prediction = subset.predict(candidates)
        assert prediction.covered.any()
        # outside or not, and how far towards the negative evidence a text near the flag goes,
        # is the whole scorer's call, which the subsample does not change
        whole = scorer.predict(candidates)
        keeps = np.clip((whole.typicality - scorer.outside_.level) / scorer.outside_.level, 0, 1)
        negative = scorer.outside_.negative_score
        estimates = np.where(keeps < 1, negative + keeps * (prediction.scores - negative), prediction.scores)
        want = np.where(whole.outside, 0.0, np.where(prediction.covered, estimates, quality.mean())).astype(np.float32)
        np.testing.assert_array_equal(scorer.reward(candidates, subsample=0.4, seed=11).cpu().numpy(), want)


def test_subsets_are_fresh_per_call_and_reproducible_per_seed(tokenizer, huse_texts, huse_scores, candidates):
    first, again = (fitted(tokenizer, huse_texts, huse_scores) for _ in range(2))
    calls = [first.reward(candidates, subsample=0.5, seed=1) for _ in range(3)]
    assert not torch.equal(calls[0], calls[1]) and not torch.equal(calls[1], calls[2])
    for call in calls:
        assert torch.equal(call, again.reward(candidates, subsample=0.5, seed=1))
    assert not torch.equal(calls[0], again.reward(candidates, subsample=0.5, seed=2))
    masks = [first.draw_subset(0.5, 3, torch.device("cpu")).mask for _ in range(2)]
    assert not torch.equal(masks[0], masks[1])
    assert torch.equal(first.reward(candidates, subsample=1.0), first.reward(candidates))


def test_a_refused_call_draws_no_subset(tokenizer, huse_texts, huse_scores, candidates):
    """A reward call refused for its inputs (a None text, a bad outside, a mask with texts) used
    to advance the seed's draw count, so every later call drew other subsets than a run without
    the mistake."""
    first, again = (fitted(tokenizer, huse_texts, huse_scores) for _ in range(2))
    for bad in ({"inputs": [*candidates[:3], None]}, {"inputs": candidates, "outside": float("nan")},
                {"inputs": candidates, "attention_mask": torch.ones((len(candidates), 3))}):
        with pytest.raises((TypeError, ValueError)):
            first.reward(subsample=0.5, seed=1, **bad)
    for _ in range(2):
        assert torch.equal(first.reward(candidates, subsample=0.5, seed=1),
                           again.reward(candidates, subsample=0.5, seed=1))


def test_clear_errors(tokenizer, huse_texts, huse_scores, candidates):
    scorer = fitted(tokenizer, huse_texts, huse_scores)
    for bad in (0, -0.1, 1.5, "half", True):
        with pytest.raises(ValueError, match="subsample must be a fraction"):
            scorer.reward(candidates, subsample=bad)
    with pytest.raises(ValueError, match="fewer than min_neighbors=5"):
        scorer.reward(candidates, subsample=0.02)
    with pytest.raises(ValueError, match="seed must be an integer"):
        scorer.reward(candidates, subsample=0.5, seed=1.5)
    for bad in (float("nan"), float("inf"), "0"):
        with pytest.raises(ValueError, match="undefined must be a finite number"):
            scorer.reward(candidates, undefined=bad)
    with pytest.raises(ValueError, match="attention_mask goes with token ids"):
        scorer.reward(candidates, attention_mask=torch.ones((len(candidates), 3)))
    with pytest.raises(RuntimeError, match="not fitted"):
        NeighborsScorer().reward(candidates)


def test_numpy_numbers_are_numbers_and_booleans_are_not(tokenizer, huse_texts, huse_scores, candidates):
    """undefined=np.float32(0.1) was refused as "must be a finite number, not np.float32(0.1)",
    seed=np.int64(3) as "must be an integer"; reward_function(undefined=True) was accepted when
    made and refused at the trainer's first call."""
    from gpu_neighbors import reward_function

    scorer = fitted(tokenizer, huse_texts, huse_scores)
    want = scorer.reward(candidates, undefined=0.25, outside=0.125, subsample=0.5, seed=3)
    scorer = fitted(tokenizer, huse_texts, huse_scores)  # the same draw: the first with seed 3
    got = scorer.reward(candidates, undefined=np.float32(0.25), outside=np.float16(0.125),
                        subsample=np.float64(0.5), seed=np.int64(3))
    assert torch.equal(got, want)
    for setting in ("undefined", "outside"):
        for bad in (True, np.bool_(False)):
            with pytest.raises(ValueError, match=f"{setting} must be a finite number"):
                reward_function(scorer, **{setting: bad})
            with pytest.raises(ValueError, match=f"{setting} must be a finite number"):
                scorer.reward(candidates, **{setting: bad})
    assert len(reward_function(scorer, undefined=np.float32(0.1))(["p"], ["zzz qqq"])) == 1


def training_loop_example():
    path = Path(__file__).resolve().parents[2] / "examples" / "training_loop.py"
    spec = importlib.util.spec_from_file_location("training_loop_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def test_the_training_loop_example_runs():
    """examples/training_loop.py end to end, two steps of each phase: rewards and the metric on
    the ids a transformers model generates."""
    example = training_loop_example()
    log = example.main(["--steps", "2", "--warmup-steps", "2", "--batch-size", "8", "--device", "cpu",
                        "--tokenizer", MODEL_PATH])
    assert [entry["step"] for entry in log] == [0, 2]
    assert all(entry["count"] == 64 and 0 <= entry["coverage"] <= 1 for entry in log)
    assert np.isfinite(log[-1]["reward"])


def test_the_training_loop_example_trains_on_one_cpu_thread(monkeypatch):
    """torch's default threads spin while they wait: on two busy cores the example took 11 min
    50 s with them and 35 s with one (the same numbers). It trains on one thread (--threads) and
    gives the caller's count back."""
    example = training_loop_example()
    seen = []
    monkeypatch.setattr(example, "train", lambda args: seen.append(torch.get_num_threads()) or [])
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        example.main(["--device", "cpu"])
        assert seen == [1] and torch.get_num_threads() == 2
        example.main(["--device", "cpu", "--threads", "2"])
        assert seen == [1, 2]
    finally:
        torch.set_num_threads(before)


def test_bad_rewards_inputs_are_refused_when_made_or_named_when_met(huse_texts, huse_scores):
    """Issue 32: a text part without text raised a bare KeyError, a None reference a bare
    TypeError, and subsample=2.0 was accepted when the function was made (failing at the
    trainer's first step)."""
    from gpu_neighbors import BleuReward, reward_function

    bleu = reward_function(BleuReward())
    conversation = [{"role": "assistant", "content": [{"type": "text"}]}]
    with pytest.raises(ValueError, match=r"completions\[1\]: content part 0 .* holds no string 'text'"):
        bleu(["p", "p"], ["a cat", conversation], reference=["a cat", "a dog"])
    with pytest.raises(ValueError, match=r"row 1 of the column 'reference' holds None"):
        bleu(["p", "p"], ["a cat", "a dog"], reference=["a cat", None])
    with pytest.raises(ValueError, match=r"row 0 of the column 'reference' holds a list"):
        bleu(["p"], ["a cat"], reference=[[]])
    scorer = NeighborsScorer(kernel="bleu").fit(huse_texts[:60], huse_scores[:60], tune=False)
    for subsample in (2.0, 0.0, 0.001):  # the last keeps no text
        with pytest.raises(ValueError, match="subsample"):
            reward_function(scorer, subsample=subsample)
    assert len(reward_function(scorer, subsample=0.5)(["p"], ["a cat sat"])) == 1


def test_no_numpy_or_torch_warning_reaches_a_library_caller():
    """Issue 32: fit on 2 texts printed torch's sparse-invariant warning (torch warns once per
    process: a fresh one), and scores near -1e308 numpy's overflow warnings."""
    import subprocess
    import sys

    probe = """
import warnings, numpy as np
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from gpu_neighbors import NeighborsScorer, compare_systems
    from gpu_neighbors.evaluation.agreement import agreement
    NeighborsScorer(kernel="bleu").fit(["a b c", "d e f"], [0.1, 0.2], tune=False).predict(["a b c"])
    texts = [f"the cat number {i} sat on mat {i % 7}" for i in range(40)]
    scores = [-1.79e308 + i * 1e306 for i in range(40)]
    scorer = NeighborsScorer(kernel="bleu", score_range=None).fit(texts, scores, tune=False)
    estimates = scorer.leave_one_out()
    agreement(estimates, np.array(scores))
    compare_systems(estimates.scores, ["a", "b"] * 20, resamples=50, trials=50)
for warning in caught:
    if "training texts" not in str(warning.message):  # the library's own, about the data
        print("WARNING", warning.category.__name__, warning.message)
print("DONE")
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert "DONE" in done.stdout, done.stderr
    assert "WARNING" not in done.stdout and "Warning" not in done.stderr, done.stdout + done.stderr


@pytest.mark.parametrize(("completion", "message"), [
    ([{"role": "Assistant", "content": "a cat"}], r"completions\[1\]: message 0's role 'Assistant' is not 'assistant'"),
    ([{"role": "assistant", "content": b"a cat"}], r"completions\[1\]: message 0's content is bytes"),
    ([{"role": "assistant", "content": {"type": "text", "text": "a cat"}}],
     r"completions\[1\]: message 0's content is dict"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": 3}],
     r"completions\[1\]: message 1's content is int"),
    ([{"role": "assistant", "content": ["a cat"]}], r"completions\[1\]: content part 0 .* is str, not"),
    (None, r"completions\[1\]: expected a string or a list of messages, got NoneType"),
    (7, r"completions\[1\]: expected a string or a list of messages, got int"),
])
def test_a_conversation_the_reward_cannot_read_is_refused_by_its_index(completion, message):
    """Issue 50: role "Assistant", bytes or dict content (and a bare string among the content
    parts) scored 0.0 silently, where a None or int completion raised naming its index."""
    from gpu_neighbors import BleuReward, reward_function

    bleu = reward_function(BleuReward())
    with pytest.raises((TypeError, ValueError), match=message):
        bleu(["p", "p"], ["a cat", completion], reference=["a cat", "a cat"])
    tool_call = [{"role": "assistant", "content": None, "tool_calls": []}, {"role": "assistant", "content": "a cat"}]
    assert bleu(["p"], [tool_call], reference=["a cat"]) == bleu(["p"], ["a cat"], reference=["a cat"])
