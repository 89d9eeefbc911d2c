"""Tuned thresholds keep clear of the similarities: on every kernel and development set (a seeded
subsample of each, to stay fast), no tau of the tuning grid, the chosen one included, lies
within the kernel's stated error bound (`Kernel.similarity_error`) of any training similarity,
nor, for the kernels whose similarities are exact functions of integer counts, of any
candidate's similarity. Before, a tau could sit on thousands of similarities: ROUGE-L's F in
three roundings put one fraction on up to three floats an ulp apart, and the midpoint of two
adjacent floats rounds onto one of them."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from conftest import SHARED
from gpu_neighbors import BertScore, NeighborsScorer
from gpu_neighbors.core.pairwise import DEFAULT_SIMILARITY_ERROR
from gpu_neighbors.core.tuning import TuningGrid, between_similarities, tune
from minilm import MODEL_PATH

DEVELOPMENT_SETS = ("huse_summarization.jsonl", "gug_dev.jsonl", "mlqe_et-en_dev.jsonl")
EXACT_KERNELS = ("bleu", "rouge", "meteor", "tfidf")
# (training texts, candidates) sampled from each set (HUSE has 200 texts); BERTScore's model
# makes it the slowest kernel by far, so it gets fewer.
SIZES = {"bertscore": (80, 40)}
DEFAULT_SIZES = (140, 60)


def sample(name: str, train: int, candidates: int) -> tuple[list[str], list[float], list[str]]:
    records = [json.loads(line) for line in (SHARED / "data" / name).read_text(encoding="utf-8").splitlines()]
    chosen = random.Random(0).sample(records, train + candidates)
    texts = [record["text"] for record in chosen]
    return texts[:train], [record["score"] for record in chosen[:train]], texts[train:]


def nearest_distance(values: torch.Tensor, tau: float) -> float:
    return float((values - tau).abs().min())


@pytest.mark.parametrize("data", DEVELOPMENT_SETS)
@pytest.mark.parametrize("kernel", [*EXACT_KERNELS, "bertscore"])
def test_no_tuned_tau_within_the_error_bound_of_a_similarity(kernel, data):
    train, scores, candidates = sample(data, *SIZES.get(kernel, DEFAULT_SIZES))
    part = BertScore(model=MODEL_PATH, layer=4) if kernel == "bertscore" else kernel
    scorer = NeighborsScorer(kernel=part, device="cpu").fit(train, scores, tune=False)
    error = scorer.kernel_.similarity_error
    pairs = scorer.training_pass()  # what fit tunes on: it carries the kernel's bound
    assert pairs.error == max(error, DEFAULT_SIMILARITY_ERROR)
    chosen = tune(pairs, default_tau=scorer.kernel_.default_tau, estimator="threshold").thresholds.tau
    training = pairs.off_diagonal(np.arange(len(train)))
    taus = [*TuningGrid().tau_values(training, scorer.kernel_.default_tau, pairs.error), chosen]
    training, against = torch.from_numpy(training), scorer.similarity(candidates).reshape(-1)
    for tau in taus:
        if tau <= 0 and kernel in EXACT_KERNELS and float(training.min()) == 0:
            continue  # every pair a neighbour: 0 is exact there (no overlap), which tuning keeps
        assert nearest_distance(training, tau) > error, (tau, nearest_distance(training, tau), error)
        if kernel in EXACT_KERNELS:
            assert nearest_distance(against, tau) > error, (tau, nearest_distance(against, tau), error)


def test_exact_kernels_are_within_the_default_bound():
    """`fit` tunes with the pass's default bound: it covers every exact kernel's own."""
    for kernel in EXACT_KERNELS:
        fitted = NeighborsScorer(kernel=kernel, device="cpu").fit(["a b c", "a b d", "b c d"], [0.1, 0.5, 0.9],
                                                                 tune=False)
        assert 0 < fitted.kernel_.similarity_error <= DEFAULT_SIMILARITY_ERROR


def test_a_gap_of_adjacent_floats_is_passed_over():
    """The midpoint of two adjacent floats is one of them; tau goes to the nearest clear gap."""
    fraction = 4 / 35
    values = np.array([0.05, fraction, np.nextafter(fraction, 1), 0.2])
    moved = between_similarities(np.array([values[2]]), values, error=2.0**-50)
    assert moved[0] == 0.05 + (fraction - 0.05) / 2  # the lower clear gap is the nearer one
    assert between_similarities(np.array([0.19]), values, error=2.0**-50)[0] == values[2] + (0.2 - values[2]) / 2
