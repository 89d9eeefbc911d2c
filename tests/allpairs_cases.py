"""What the all-pairs tests share: texts (HUSE, adversarial, duplicates) and the full matrix."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import ADVERSARIAL_TEXTS
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.kernels.parts import kernel_part

SMALL = 40_000  # bytes of tile memory: many small tiles


@pytest.fixture(scope="module")
def texts(huse_texts) -> list[str]:
    return huse_texts[:90] + ADVERSARIAL_TEXTS[2:] + [huse_texts[5], huse_texts[5]]  # duplicates tie


def full_matrix(candidates, train, kernel="bleu", **settings) -> np.ndarray:
    scorer = NeighborsScorer(kernel=kernel_part(kernel, **settings), device="cpu").fit(train, np.zeros(len(train)))
    return scorer.similarity(candidates).numpy()
