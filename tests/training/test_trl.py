"""Reward functions in a real `trl.GRPOTrainer`: two optimisation steps on the CPU with a tiny
randomly initialised GPT-2 that writes in the MiniLM WordPiece vocabulary (nothing downloaded),
and the reward functions' own contract (plain and conversational completions, names, the
token-id path, the value where no estimate exists)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from rouge_score import rouge_scorer

from gpu_neighbors import BleuReward, NeighborsScorer, RougeReward, reward_function, sentence_bleu
from gpu_neighbors.kernels.parts import Bleu
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.text.tokenizers import HuggingFaceTokenizer
from gpu_neighbors.training.rewards import RewardFunction
from conftest import needs
from minilm import MODEL_PATH


@pytest.fixture(scope="module")
def tokenizer() -> HuggingFaceTokenizer:
    return HuggingFaceTokenizer(MODEL_PATH)


@pytest.fixture(scope="module")
def scorer(tokenizer, huse_texts, huse_scores) -> NeighborsScorer:
    return NeighborsScorer(kernel=Bleu(tokenizer=tokenizer), estimator=Threshold.paper(),
                           device="cpu").fit(huse_texts, huse_scores)


def tiny_policy(vocab_size: int):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=vocab_size, n_positions=64, n_embd=16, n_layer=1, n_head=2)
    return transformers.GPT2LMHeadModel(config)


def test_grpo_trainer_two_steps(tokenizer, scorer, huse_texts, tmp_path, monkeypatch):
    # the [trl] extra with datasets, which needs pyarrow and pandas: present in CI and the
    # device image, absent from a bare environment (the GPU check's summary lists the skip)
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    calls: list[dict] = []
    original = RewardFunction.__call__

    def recording(self, prompts, completions, completion_ids=None, **kwargs):
        rewards = original(self, prompts, completions, completion_ids, **kwargs)
        calls.append({"name": self.__name__, "completions": completions, "completion_ids": completion_ids,
                      "kwargs": set(kwargs), "columns": kwargs.get("reference"), "rewards": rewards})
        return rewards

    monkeypatch.setattr(RewardFunction, "__call__", recording)
    hf = tokenizer.hf
    hf.eos_token = hf.sep_token  # the policy stops on [SEP]
    prompts = [" ".join(text.split()[:3]) for text in huse_texts[:8]]
    dataset = datasets.Dataset.from_dict({"prompt": prompts, "reference": huse_texts[:8]})
    neighbors = reward_function(scorer, token_ids=True, undefined=0.0)
    bleu = reward_function(BleuReward(column="reference", smoothing="exp"))
    rouge = reward_function(RougeReward(column="reference", rouge_type="rougeL", use_stemmer=True))
    config = trl.GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, num_generations=4,
        max_completion_length=12, logging_steps=1, report_to="none", save_strategy="no", use_cpu=True,
        learning_rate=1e-3, seed=0, disable_tqdm=True,
    )
    trainer = trl.GRPOTrainer(model=tiny_policy(len(hf)), reward_funcs=[neighbors, bleu, rouge], args=config,
                              train_dataset=dataset, processing_class=hf)
    trainer.train()

    assert trainer.state.global_step == 2
    assert {call["name"] for call in calls} == {"neighbors", "bleu", "rouge"}
    scorer_l = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    for call in calls:
        assert len(call["completions"]) == 4 and all(isinstance(c, str) for c in call["completions"])
        assert {"trainer_state", "log_metric", "log_extra"} <= call["kwargs"]
        assert all(np.isfinite(call["rewards"]))
        if call["name"] == "neighbors":  # the ids' rewards, computed here independently of the trainer
            ids = [torch.tensor(row) for row in call["completion_ids"]]
            batch = torch.nn.utils.rnn.pad_sequence(ids, batch_first=True)
            mask = torch.nn.utils.rnn.pad_sequence([torch.ones_like(row) for row in ids], batch_first=True)
            assert call["rewards"] == scorer.reward(batch, undefined=0.0, attention_mask=mask).tolist()
            prediction = scorer.predict_ids(batch, mask)
            call["evidence"] = (prediction.outside.float().mean().item(),
                                prediction.nearest[torch.isfinite(prediction.nearest)].mean().item())
        elif call["name"] == "rouge":  # rouge-score's F of each completion against its reference
            assert call["rewards"] == [scorer_l.score(reference, completion)["rougeL"].fmeasure
                                       for completion, reference in zip(call["completions"], call["columns"])]
        else:
            assert call["rewards"] == sentence_bleu(call["completions"], call["columns"], smoothing="exp").tolist()
    logged = [entry for entry in trainer.state.log_history if "rewards/neighbors/mean" in entry]
    assert len(logged) == 2 and all("rewards/bleu/mean" in entry for entry in logged)
    per_step = [np.mean(call["rewards"]) for call in calls if call["name"] == "bleu"]
    np.testing.assert_allclose([entry["rewards/bleu/mean"] for entry in logged], per_step, rtol=1e-6)
    # each step logs what its neighbour rewards rest on: the share outside, the mean nearest similarity
    evidence = [call["evidence"] for call in calls if call["name"] == "neighbors"]
    np.testing.assert_allclose([(entry["neighbors/outside"], entry["neighbors/nearest"]) for entry in logged],
                               evidence, rtol=1e-6)


def test_plain_and_conversational_completions(scorer, huse_texts):
    reward = reward_function(scorer, undefined=-1.0, outside=-2.0)
    texts = huse_texts[:6] + ["zzz qqq", ""]
    conversations = [[{"role": "assistant", "content": text}] for text in texts]
    plain = reward(prompts=[""] * len(texts), completions=texts)
    assert plain == reward(prompts=[[{"role": "user", "content": "hi"}]] * len(texts), completions=conversations)
    prediction = scorer.predict(texts)
    want = np.where(prediction.outside, -2.0, np.where(prediction.covered, prediction.scores, -1.0)).astype(np.float32)
    assert plain == want.tolist() and plain[-2:] == [-2.0, -2.0]  # unknown words, nothing: outside
    parts = [[{"role": "assistant", "content": [{"type": "text", "text": text}]}] for text in texts]
    assert reward(prompts=[""] * len(texts), completions=parts) == plain


def test_names_errors_and_default_undefined(scorer, tokenizer, huse_scores):
    assert reward_function(scorer).__name__ == "neighbors"
    assert reward_function(scorer, name="quality").__name__ == "quality"
    assert reward_function(BleuReward()).__name__ == "bleu"
    assert reward_function(RougeReward()).__name__ == "rouge"
    default = reward_function(scorer)(prompts=[""], completions=["zzz qqq"])
    assert default == [0.0]  # outside the training distribution: the score range's low end
    for setting in ("undefined", "outside"):
        with pytest.raises(ValueError, match=f"{setting} must be a finite number"):
            reward_function(scorer, **{setting: float("nan")})
    with pytest.raises(ValueError, match="apply to a NeighborsScorer"):
        reward_function(BleuReward(), outside=0.0)
    with pytest.raises(ValueError, match="no column 'reference'"):
        reward_function(BleuReward())(prompts=["a"], completions=["a"], answer=["a"])
    with pytest.raises(ValueError, match="no completion_ids"):
        reward_function(scorer, token_ids=True)(prompts=["a"], completions=["a"])
    whitespace = NeighborsScorer(kernel="bleu").fit(["a b c"] * 3 + ["d e"] * 3, [0.1, 0.2, 0.3] * 2)
    with pytest.raises(ValueError, match="Hugging Face tokenizer"):
        reward_function(whitespace, token_ids=True)
    with pytest.raises(TypeError, match="fitted NeighborsScorer, a BleuReward or a RougeReward"):
        reward_function("bleu")  # type: ignore[arg-type]


def test_one_string_or_prompts_of_another_length_are_refused(scorer, huse_texts):
    """completions="a text" was rewarded character by character (a list of 6 rewards), and
    prompts of another length than the completions passed unremarked."""
    for reward in (reward_function(scorer), reward_function(BleuReward()), reward_function(RougeReward())):
        with pytest.raises(TypeError, match="not one string"):
            reward(prompts=[""], completions="a text", reference=["a text"])
        with pytest.raises(ValueError, match="3 prompts but 2 completions"):
            reward(prompts=[""] * 3, completions=huse_texts[:2], reference=huse_texts[:2])
        assert len(reward(prompts=[""] * 2, completions=huse_texts[:2], reference=huse_texts[:2])) == 2


def test_completion_ids_that_are_not_one_row_of_integers_per_completion_are_refused(scorer, tokenizer, huse_texts):
    """Before: one row of ids for two completions returned one reward, silently; float ids failed
    deep in the bleu kernel (a tensor-size RuntimeError), a None row with "object of type
    'NoneType' has no len()", string ids with int()'s "invalid literal"."""
    reward = reward_function(scorer, token_ids=True)
    rows = [tokenizer.hf(text, add_special_tokens=False)["input_ids"] for text in huse_texts[:2]]
    with pytest.raises(ValueError, match="1 completion_ids rows but 2 completions"):
        reward(prompts=["p", "p"], completions=huse_texts[:2], completion_ids=rows[:1])
    for bad, shown in (([1.5, 2.7], "a list"), (None, "None"), (["a", "b"], "a list"), ("abc", "a str"),
                       ([[1, 2], [3, 4]], "a list")):
        with pytest.raises(TypeError, match=rf"completion_ids\[1\] must be a list of integer token ids, not {shown}"):
            reward(prompts=["p", "p"], completions=huse_texts[:2], completion_ids=[rows[0], bad])
    want = reward(prompts=["p", "p"], completions=huse_texts[:2], completion_ids=rows)
    assert reward(prompts=["p", "p"], completions=huse_texts[:2],
                  completion_ids=[np.array(rows[0], np.int32), torch.tensor(rows[1])]) == want
    assert len(reward(prompts=["p"], completions=[""], completion_ids=[[]])) == 1


def test_rouge_reward_equals_rouge_score_multi(huse_texts):
    """Each completion's measure against the references of its row (one string or several),
    as rouge-score's score_multi; bad settings are refused when the reward is made."""
    completions = huse_texts[:30] + ["", "The Cat sat.\nOn the mat!"]
    column = [[huse_texts[i + 1], text[::-1]] if i % 2 else text[: len(text) // 2] for i, text in enumerate(completions)]
    for setting in (RougeReward(column="summary"), RougeReward(column="summary", rouge_type="rouge2", measure="recall"),
                    RougeReward(column="summary", rouge_type="rougeLsum", use_stemmer=True, measure="precision")):
        scorer = rouge_scorer.RougeScorer([setting.rouge_type], use_stemmer=setting.use_stemmer)
        want = [getattr(scorer.score_multi([refs] if isinstance(refs, str) else refs, completion)[setting.rouge_type],
                        setting.measure) for completion, refs in zip(completions, column)]
        assert reward_function(setting)(prompts=[""] * len(completions), completions=completions, summary=column) == want
    with pytest.raises(ValueError, match="unknown type 'rougeX'"):
        RougeReward(rouge_type="rougeX")
    with pytest.raises(ValueError, match="measure must be"):
        RougeReward(measure="f1")
    with pytest.raises(ValueError, match="apply to a NeighborsScorer, not to RougeReward"):
        reward_function(RougeReward(), token_ids=True)


@needs('lxml')
def test_bleu_reward_takes_the_peers_settings(huse_texts):
    """sacrebleu's sentence BLEU defaults (exp smoothing, effective order) and NLTK's method7,
    as the reward: the values sacrebleu and NLTK give; a list of weight tuples is refused."""
    import sacrebleu
    from nltk.translate.bleu_score import SmoothingFunction
    from nltk.translate.bleu_score import sentence_bleu as nltk_sentence_bleu

    completions = huse_texts[:20] + ["a", ""]
    column = [huse_texts[i + 1] if i % 2 else text for i, text in enumerate(completions)]
    reward = reward_function(BleuReward(column="ref", smoothing="exp", effective_order=True, tokenizer="13a"))
    want = [sacrebleu.sentence_bleu(c, [r]).score / 100 for c, r in zip(completions, column)]
    np.testing.assert_allclose(reward(prompts=[""] * len(completions), completions=completions, ref=column), want,
                               rtol=0, atol=1e-9)
    reward = reward_function(BleuReward(column="ref", smoothing="method7", smooth_value=3.0))
    method7 = SmoothingFunction(k=3.0).method7
    want = [nltk_sentence_bleu([r.split()], c.split(), smoothing_function=method7) if c else 0.0
            for c, r in zip(completions, column)]
    np.testing.assert_allclose(reward(prompts=[""] * len(completions), completions=completions, ref=column), want,
                               rtol=0, atol=1e-9)
    with pytest.raises(ValueError, match="one weight tuple"):
        BleuReward(weights=[(1.0,), (0.5, 0.5)])  # type: ignore[arg-type]
