"""The shared HUSE summaries, the texts every benchmark is built from."""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

# The shared data folder: ../shared beside the project, or GPU_NEIGHBORS_SHARED (the GPU check
# points it at the copy it carries in .gpu/shared, as ../shared does not travel).
SHARED = Path(os.environ.get("GPU_NEIGHBORS_SHARED") or Path(__file__).resolve().parents[2] / "shared")
HUSE = SHARED / "data" / "huse_summarization.jsonl"


def huse_records() -> list[dict]:
    """The 200 scored summaries, one dict each (text, score, source, judgments)."""
    with HUSE.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def huse_texts() -> list[str]:
    return [record["text"] for record in huse_records()]


def spliced_texts(count: int, rng: random.Random) -> list[str]:
    """`count` headline-like texts: a prefix of one HUSE summary joined to a suffix of another,
    so texts are new but vocabulary and n-gram statistics are those of real headlines."""
    texts = [text.split() for text in huse_texts()]
    spliced = []
    for _ in range(count):
        head, tail = rng.choice(texts), rng.choice(texts)
        spliced.append(" ".join(head[: rng.randint(1, len(head))] + tail[rng.randint(0, len(tail) - 1) :]))
    return spliced
