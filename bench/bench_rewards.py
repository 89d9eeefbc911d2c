"""The TRL reward functions' own cost: `reward_function(...)(prompts, completions, ...)` against
calling what it wraps directly on the same batch (`scorer.reward` on texts, on padded token ids
with their mask, `sentence_bleu` on texts), on the scorer's default device (auto: the CPU where
there is no GPU), medians of `repeats` interleaved rounds. The difference is the unpacking of
completions, padding the `completion_ids` lists and the list of floats.

    .venv/bin/python bench/bench_rewards.py [--train 2000] [--batch 256] [--repeats 15]"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))


def medians(repeats: int, calls: dict) -> dict:
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def measure(train: int = 2000, batch: int = 256, repeats: int = 15) -> dict:
    from huse import spliced_texts
    from minilm import MODEL_PATH

    from gpu_neighbors import Bleu, BleuReward, NeighborsScorer, Threshold, reward_function, sentence_bleu
    from gpu_neighbors.text.tokenizers import HuggingFaceTokenizer
    from gpu_neighbors.training.rewards import completion_texts, padded

    rng = random.Random(0)
    tokenizer = HuggingFaceTokenizer(MODEL_PATH)
    texts = spliced_texts(train, rng)
    scorer = NeighborsScorer(kernel=Bleu(tokenizer=tokenizer), estimator=Threshold.paper(), fluency=None).fit(texts,
                             np.linspace(0, 1, train))
    completions = spliced_texts(batch, rng)
    references = spliced_texts(batch, rng)
    conversations = [[{"role": "assistant", "content": text}] for text in completions]
    ids = tokenizer.hf(completions, add_special_tokens=False)["input_ids"]
    padded_batch = tokenizer.hf(completions, add_special_tokens=False, padding=True, return_tensors="pt")
    prompts = [""] * batch
    by_text, by_ids = reward_function(scorer), reward_function(scorer, token_ids=True)
    bleu = reward_function(BleuReward(column="reference"))
    rewards = scorer.reward(padded_batch["input_ids"], attention_mask=padded_batch["attention_mask"])  # builds the id tables
    times = medians(repeats, {
        "scorer.reward(texts)": lambda: scorer.reward(completions),
        "reward_function(scorer), strings": lambda: by_text(prompts, completions),
        "reward_function(scorer), conversations": lambda: by_text(prompts, conversations),
        "scorer.reward(ids, mask)": lambda: scorer.reward(padded_batch["input_ids"],
                                                          attention_mask=padded_batch["attention_mask"]),
        "reward_function(scorer, token_ids=True)": lambda: by_ids(prompts, completions, completion_ids=ids),
        "sentence_bleu(texts, references)": lambda: sentence_bleu(completions, references, smoothing="exp"),
        "reward_function(BleuReward())": lambda: bleu(prompts, completions, reference=references),
        # the wrapper's own steps alone: unpacking conversations, padding the id lists, the list
        "own steps: completion_texts(conversations)": lambda: completion_texts(conversations),
        "own steps: padded(completion_ids)": lambda: padded(ids, scorer.device_),
        "own steps: rewards.tolist()": lambda: rewards.tolist(),
    })
    ratios = {
        "strings": times["reward_function(scorer), strings"] / times["scorer.reward(texts)"],
        "conversations": times["reward_function(scorer), conversations"] / times["scorer.reward(texts)"],
        "token ids": times["reward_function(scorer, token_ids=True)"] / times["scorer.reward(ids, mask)"],
        "bleu": times["reward_function(BleuReward())"] / times["sentence_bleu(texts, references)"],
        "own steps / scorer.reward(ids, mask)": (times["own steps: completion_texts(conversations)"]
                                                 + times["own steps: padded(completion_ids)"]
                                                 + times["own steps: rewards.tolist()"]) / times["scorer.reward(ids, mask)"],
    }
    return {"train": train, "batch": batch, "repeats": repeats, "seconds": times, "ratios": ratios}


def section(result: dict) -> list[str]:
    lines = ["| call | seconds (median of %d, interleaved) |" % result["repeats"], "|---|---|"]
    lines += [f"| `{name}` | {seconds:.4f} |" for name, seconds in result["seconds"].items()]
    lines.append("")
    lines.append("Reward function / direct call: " + ", ".join(f"{name} {value:.3f}" for name, value in result["ratios"].items()))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    result = measure(args.train, args.batch, args.repeats)
    print("\n".join(section(result)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
