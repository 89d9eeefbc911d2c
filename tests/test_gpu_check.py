"""bench/gpu_check.py's step guard: whatever fails inside a step (here, the data it reads is
missing, as ../shared is on a bare device), the step's result is still written to the output
folder, and nothing there is large (the random model goes to a temporary folder)."""
from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

CHECK = Path(__file__).resolve().parents[1] / "bench" / "gpu_check.py"


def test_a_failing_step_still_writes_its_result(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("gpu_check", CHECK)
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)  # puts bench/ on sys.path
    import huse

    monkeypatch.setattr(huse, "HUSE", tmp_path / "nowhere" / "huse_summarization.jsonl")
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    args = argparse.Namespace(device="cpu")
    assert check.run_step("parity", args) is False
    result = json.loads((tmp_path / "out" / "parity.json").read_text(encoding="utf-8"))
    assert not result["passed"] and "FileNotFoundError" in result["error"] and "nowhere" in result["error"]
    assert "passed: **False**" in (tmp_path / "out" / "parity.md").read_text(encoding="utf-8")
    written = sorted(path.name for path in (tmp_path / "out").rglob("*"))
    assert written == ["parity.json", "parity.md"]
