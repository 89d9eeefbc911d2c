"""The paths a CUDA device takes, run on the CPU, give the CPU paths' bits.

Several operations have a CPU-only form (compiled loops over CPU tensors, scipy on host memory,
MKL's product into a dense matrix, BLEU*'s cached row slices) and a torch form that a device
runs instead; CI has no device, so each kernel's similarities and the default estimates are
computed both ways here (`census.device_paths` switches the CPU-only forms off, as the operation
census does) and must be equal bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from census import device_paths
from conftest import ADVERSARIAL_TEXTS
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.kernels.parts import BertScore, Bleu, Meteor, Rouge, Tfidf
from minilm import MODEL_LAYERS, MODEL_PATH

pytestmark = pytest.mark.cpu_only  # on a device its own paths run, in the rest of the suite

KERNELS = {
    "bleu-star": lambda: Bleu(),
    "bleu-4 exp": lambda: Bleu(weights=(0.25, 0.25, 0.25, 0.25), smoothing="exp"),
    "bleu-star none": lambda: Bleu(smoothing="none"),
    "tfidf": lambda: Tfidf(),
    "rouge": lambda: Rouge(),
    "meteor": lambda: Meteor(),
    "bertscore": lambda: BertScore(model=MODEL_PATH, layer=MODEL_LAYERS),
}


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_device_paths_give_the_cpu_paths_bits(huse_texts, huse_scores, kernel):
    train, scores = huse_texts[:150], np.asarray(huse_scores[:150])
    candidates = huse_texts[150:260] + ADVERSARIAL_TEXTS
    scorer = NeighborsScorer(kernel=KERNELS[kernel](), device="cpu", fluency=None, chunk_size=37)
    scorer.fit(train, scores, tune=False)
    cpu = scorer.similarity(candidates), scorer.predict(candidates)
    with device_paths():
        device = scorer.similarity(candidates), scorer.predict(candidates)
    assert cpu[0].abs().sum() > 0 and torch.equal(device[0], cpu[0])
    for name in ("scores", "num_neighbors", "std", "low", "high", "nearest", "outside", "typicality"):
        np.testing.assert_array_equal(getattr(device[1], name), getattr(cpu[1], name), err_msg=name)
