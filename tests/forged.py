"""Forging a saved scorer as a tamperer would: scorer.json or the tensors edited, with every
recorded size and SHA-256 recomputed, so the integrity check passes and what is refused is the
content itself (issues 21, 50)."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from safetensors.torch import load_file, save_file

from gpu_neighbors.core.saved import CONFIG, TENSORS


def rewrite_config(folder: Path, change: Callable[[dict], object]) -> None:
    config = json.loads((folder / CONFIG).read_text())
    change(config)
    (folder / CONFIG).write_text(json.dumps(config))


def record_file(folder: Path, name: str) -> None:
    """Make scorer.json vouch for the file as it now is (a tamperer who also edits the JSON)."""
    data = (folder / name).read_bytes()
    rewrite_config(folder, lambda config: config["files"].__setitem__(
        name, {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}))


def forge_tensors(folder: Path, change: Callable[[dict], object]) -> None:
    """Change tensors and make scorer.json vouch for them (a tamperer who edits both files)."""
    tensors = load_file(folder / TENSORS)
    change(tensors)
    save_file(tensors, folder / TENSORS)
    record_file(folder, TENSORS)
    rewrite_config(folder, lambda config: config.__setitem__("tensors", {
        name: {"dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape)}
        for name, tensor in tensors.items()}))
