"""Reward functions in a real `trl.GRPOTrainer`: two optimisation steps on the CPU with a tiny
randomly initialised GPT-2 that writes in the MiniLM WordPiece vocabulary (nothing downloaded),
and the reward functions' own contract (plain and conversational completions, names, the
token-id path, the value where no estimate exists)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from gpu_neighbors import BleuReward, NeighborsScorer, reward_function, sentence_bleu
from gpu_neighbors.text.tokenizers import HuggingFaceTokenizer
from gpu_neighbors.training.rewards import RewardFunction
from minilm import MODEL_PATH


@pytest.fixture(scope="module")
def tokenizer() -> HuggingFaceTokenizer:
    return HuggingFaceTokenizer(MODEL_PATH)


@pytest.fixture(scope="module")
def scorer(tokenizer, huse_texts, huse_scores) -> NeighborsScorer:
    return NeighborsScorer(tokenizer=tokenizer, device="cpu", thresholds="paper").fit(huse_texts, huse_scores)


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
    config = trl.GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, num_generations=4,
        max_completion_length=12, logging_steps=1, report_to="none", save_strategy="no", use_cpu=True,
        learning_rate=1e-3, seed=0, disable_tqdm=True,
    )
    trainer = trl.GRPOTrainer(model=tiny_policy(len(hf)), reward_funcs=[neighbors, bleu], args=config,
                              train_dataset=dataset, processing_class=hf)
    trainer.train()

    assert trainer.state.global_step == 2
    assert {call["name"] for call in calls} == {"neighbors", "bleu"}
    for call in calls:
        assert len(call["completions"]) == 4 and all(isinstance(c, str) for c in call["completions"])
        assert {"trainer_state", "log_metric", "log_extra"} <= call["kwargs"]
        assert all(np.isfinite(call["rewards"]))
        if call["name"] == "neighbors":  # the ids' rewards, computed here independently of the trainer
            ids = [torch.tensor(row) for row in call["completion_ids"]]
            batch = torch.nn.utils.rnn.pad_sequence(ids, batch_first=True)
            mask = torch.nn.utils.rnn.pad_sequence([torch.ones_like(row) for row in ids], batch_first=True)
            assert call["rewards"] == scorer.reward(batch, undefined=0.0, attention_mask=mask).tolist()
        else:
            assert call["rewards"] == sentence_bleu(call["completions"], call["columns"], smoothing="exp").tolist()
    logged = [entry for entry in trainer.state.log_history if "rewards/neighbors/mean" in entry]
    assert len(logged) == 2 and all("rewards/bleu/mean" in entry for entry in logged)
    per_step = [np.mean(call["rewards"]) for call in calls if call["name"] == "bleu"]
    np.testing.assert_allclose([entry["rewards/bleu/mean"] for entry in logged], per_step, rtol=1e-6)


def test_plain_and_conversational_completions(scorer, huse_texts):
    reward = reward_function(scorer, undefined=-1.0)
    texts = huse_texts[:6] + ["zzz qqq", ""]
    conversations = [[{"role": "assistant", "content": text}] for text in texts]
    plain = reward(prompts=[""] * len(texts), completions=texts)
    assert plain == reward(prompts=[[{"role": "user", "content": "hi"}]] * len(texts), completions=conversations)
    prediction = scorer.predict(texts)
    want = np.where(prediction.covered, prediction.scores, -1.0).astype(np.float32)
    assert plain == want.tolist() and -1.0 in plain  # the undefined value where no estimate exists
    parts = [[{"role": "assistant", "content": [{"type": "text", "text": text}]}] for text in texts]
    assert reward(prompts=[""] * len(texts), completions=parts) == plain


def test_names_errors_and_default_undefined(scorer, tokenizer, huse_scores):
    assert reward_function(scorer).__name__ == "neighbors"
    assert reward_function(scorer, name="quality").__name__ == "quality"
    assert reward_function(BleuReward()).__name__ == "bleu"
    default = reward_function(scorer)(prompts=[""], completions=["zzz qqq"])
    assert default == [pytest.approx(float(np.mean(huse_scores)), rel=1e-6)]  # the training mean
    with pytest.raises(ValueError, match="finite"):
        reward_function(scorer, undefined=float("nan"))
    with pytest.raises(ValueError, match="no column 'reference'"):
        reward_function(BleuReward())(prompts=["a"], completions=["a"], answer=["a"])
    with pytest.raises(ValueError, match="no completion_ids"):
        reward_function(scorer, token_ids=True)(prompts=["a"], completions=["a"])
    whitespace = NeighborsScorer(kernel="bleu", tokenizer="whitespace").fit(["a b c"] * 3 + ["d e"] * 3, [0.1, 0.2, 0.3] * 2)
    with pytest.raises(ValueError, match="Hugging Face tokenizer"):
        reward_function(whitespace, token_ids=True)
    with pytest.raises(TypeError, match="fitted NeighborsScorer or a BleuReward"):
        reward_function("bleu")  # type: ignore[arg-type]
