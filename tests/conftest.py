"""Shared fixtures: the real HUSE summarization data and adversarial texts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "huse_summarization.jsonl"

ADVERSARIAL_TEXTS = [
    "",
    "   ",
    "a",
    "a a a a a a",
    "the the the",
    "a b",
    "a b c",
    "x y z w",
    "the cat sat on the mat",
    "the cat sat",
    "the mat sat on the cat the cat",
    " ".join(f"tok{i % 37}" for i in range(320)),
    " ".join(f"w{i}" for i in range(300)),
    "naïve café 東京 über straße",
    "ÉCOLE école Ecole",
    "emoji 🙂 🙂 text",
]


@pytest.fixture(scope="session")
def huse_records() -> list[dict]:
    if not SHARED_DATA.exists():
        pytest.fail(f"the shared data is missing: {SHARED_DATA} (CI runs with ../shared beside the repo)")
    with SHARED_DATA.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


@pytest.fixture(scope="session")
def huse_texts(huse_records) -> list[str]:
    return [record["text"] for record in huse_records]


@pytest.fixture(scope="session")
def huse_scores(huse_records) -> list[float]:
    return [record["score"] for record in huse_records]
