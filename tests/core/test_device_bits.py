"""The same bits on every device, by construction (issue 18).

No CUDA machine runs in CI, so each test simulates what differs on one: another math library
(every exp, log and pow an ulp off), CUDA's division by a host number (a multiplication by its
reciprocal) and square root (an ulp off), another summation order (permuted inputs), a tuned tau an ulp away, an empty sparse
operand, a scorer loaded with `map_location` onto another device.
"""
from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import gpu_neighbors
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.kernels.parts import BertScore, Bleu
from gpu_neighbors.estimators import Threshold, TopK
from gpu_neighbors.core import portable
from gpu_neighbors.core.tiling import CUDA_TILE_PAIRS, TilePlan
from gpu_neighbors.kernels.bleu_sets import BLEU4_WEIGHTS
from gpu_neighbors.kernels.bleu_tables import SMOOTHINGS
from minilm import MODEL_LAYERS, MODEL_PATH

aten = torch.ops.aten
# What a device's math library may round its own way: everything but +, -, *, / and sqrt.
TRANSCENDENTAL = {
    aten.exp, aten.exp_, aten.exp2, aten.expm1, aten.log, aten.log_, aten.log2, aten.log10, aten.log1p,
    aten.pow, aten.pow_, aten.float_power, aten.sin, aten.cos, aten.tan, aten.tanh, aten.sigmoid,
    aten.erf, aten.erfc, aten.rsqrt, aten.reciprocal, aten.xlogy, aten.special_xlog1py,
}


class AnotherMathLibrary(TorchDispatchMode):
    """Every transcendental torch operation returns its finite, non-zero float results moved one
    ulp up: a device whose math library rounds differently, on every value at once."""

    def __init__(self) -> None:
        super().__init__()
        self.perturbed = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in TRANSCENDENTAL and isinstance(out, torch.Tensor) and out.is_floating_point():
            bumped = torch.where(torch.isfinite(out) & (out != 0), torch.nextafter(out, torch.full_like(out, math.inf)), out)
            out.copy_(bumped)
            self.perturbed += out.numel()
        return out


def test_the_simulated_library_does_differ():
    x = torch.tensor([0.3, 1.7], dtype=torch.float64)
    with AnotherMathLibrary() as library:
        other = torch.exp(x)
    assert library.perturbed == 2 and not torch.equal(other, torch.exp(x))


class CudaArithmetic(TorchDispatchMode):
    """What PyTorch's CUDA kernels do that the CPU's do not, as seen on an H200 (issue 31): a
    float tensor divided by a host number (a Python number or a 0-d tensor) is multiplied by the
    number's reciprocal (aten/src/ATen/native/cuda/BinaryDivTrueKernel.cu, "compute a *
    reciprocal(b)"), and a float64 square root that is an ulp away from the host's (on the H200
    the GPU's roots were the nearest floats and torch's CPU roots the ones an ulp off; either way
    the two devices disagree: here every other root is moved one ulp up or down by position)."""

    def __init__(self) -> None:
        super().__init__()
        self.replaced = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func in (aten.div.Tensor, aten.div_.Tensor) and args[0].is_floating_point() and args[0].dim() > 0:
            divisor = args[1]
            if isinstance(divisor, (int, float)) or (isinstance(divisor, torch.Tensor) and divisor.dim() == 0):
                self.replaced += 1
                inverse = 1.0 / float(divisor)
                return args[0].mul_(inverse) if func is aten.div_.Tensor else args[0] * inverse
        out = func(*args, **(kwargs or {}))
        if func is aten.sqrt.default and out.dtype == torch.float64 and out.numel():
            self.replaced += 1
            position = torch.arange(out.numel(), device=out.device).reshape(out.shape) % 4
            direction = torch.where(position == 1, math.inf, 0.0).to(out)
            off = torch.where((position % 2 == 1) & torch.isfinite(out) & (out > 0), torch.nextafter(out, direction), out)
            out = off
        return out


def test_the_simulated_arithmetic_does_differ():
    x = torch.arange(1, 200, dtype=torch.float64)
    with CudaArithmetic() as arithmetic:
        quotient, root = x / 49.0, torch.sqrt(x)
    assert arithmetic.replaced == 2
    assert not torch.equal(quotient, x / 49.0) and not torch.equal(root, torch.sqrt(x))


def test_rounded_sqrt_is_the_nearest_float_whatever_the_device_root(monkeypatch):
    """Against Python's sqrt (IEEE: the nearest float) on random values of every magnitude, exact
    squares, squares of midpoints, the extremes and subnormals, with torch's root exact or an ulp off."""
    rng = np.random.default_rng(0)
    values = np.concatenate([
        rng.uniform(0, 1, 20000), rng.exponential(1, 20000) * 10.0 ** rng.integers(-300, 300, 20000),
        np.arange(1, 5000, dtype=np.float64) ** 2, (np.arange(1, 5000) + 0.5) ** 2,
        [0.0, 5e-324, 1e-310, 2.2250738585072014e-308, 1.7976931348623157e308, 0.5, 1.0, 2.0, 4.0]])
    expected = np.array([math.sqrt(value) for value in values])
    assert portable.rounded_sqrt(torch.from_numpy(values)).numpy().tobytes() == expected.tobytes()
    with CudaArithmetic():
        assert portable.rounded_sqrt(torch.from_numpy(values)).numpy().tobytes() == expected.tobytes()
    monkeypatch.setattr(portable, "ROOT_CHUNK", 256)  # a tile in pieces: the same bits
    chunked = torch.from_numpy(values[:3000].copy()).view(30, 100)
    assert portable.rounded_sqrt(chunked).numpy().tobytes() == expected[:3000].reshape(30, 100).tobytes()
    special = portable.rounded_sqrt(torch.tensor([math.nan, math.inf, -1.0], dtype=torch.float64))
    assert torch.isnan(special[0]) and special[1] == math.inf and torch.isnan(special[2])


@pytest.fixture(scope="module")
def split(huse_texts, huse_scores):
    return huse_texts[:150], np.asarray(huse_scores[:150]), huse_texts[150:]


@pytest.mark.parametrize("weights", [None, BLEU4_WEIGHTS])
@pytest.mark.parametrize("smoothing", SMOOTHINGS)
def test_bleu_tiles_are_the_same_bits_under_another_math_library(split, smoothing, weights):
    texts, scores, candidates = split
    settings = {"kernel": Bleu(smoothing=smoothing, weights=weights), "estimator": Threshold.paper(), "device": "cpu"}
    expected = NeighborsScorer(**settings).fit(texts, scores).similarity(candidates)
    with AnotherMathLibrary():
        scorer = NeighborsScorer(**settings).fit(texts, scores)
        actual = scorer.similarity(candidates)
    assert actual.abs().sum() > 0 and torch.equal(actual, expected)


@pytest.mark.parametrize("settings", [
    {"kernel": "bleu", "estimator": Threshold.paper()},
    {"kernel": "bleu", "estimator": Threshold(weighting="similarity", power=1.5, tau=0.05, min_neighbors=1,
                                              tuning="never")},
    {"estimator": TopK(k=9, power=2.0)},
    {"kernel": "rouge", "estimator": TopK(k=5, power=1.0)},
])
def test_estimates_are_the_same_bits_under_another_math_library(split, settings):
    texts, scores, candidates = split
    expected = NeighborsScorer(device="cpu", **settings).fit(texts, scores).predict(candidates)
    with AnotherMathLibrary():
        actual = NeighborsScorer(device="cpu", **settings).fit(texts, scores).predict(candidates)
    assert np.isfinite(expected.scores).any()
    assert actual.scores.tobytes() == expected.scores.tobytes()
    assert actual.std.tobytes() == expected.std.tobytes()


@pytest.mark.parametrize("kernel", ["bleu", "rouge", "tfidf"])
@pytest.mark.parametrize("estimator", [Threshold.paper(), "topk", "ridge"], ids=["paper", "topk", "ridge"])
def test_estimates_are_the_same_bits_under_cuda_arithmetic(split, kernel, estimator):
    """Issue 31, on an H200: estimates, intervals, spreads and typicality p-values an ulp off in
    one text of 80 to 120, from p-values and the outside rule's weights divided by host numbers
    and from torch's square root."""
    texts, scores, candidates = split
    expected = NeighborsScorer(kernel=kernel, estimator=estimator, device="cpu").fit(texts, scores)
    with CudaArithmetic():
        scorer = NeighborsScorer(kernel=kernel, estimator=estimator, device="cpu").fit(texts, scores)
        actual = (scorer.predict(candidates), scorer.leave_one_out())
    for got, wanted in zip(actual, (expected.predict(candidates), expected.leave_one_out())):
        assert np.isfinite(wanted.scores).any() and wanted.outside is not None
        for field in dataclasses.fields(wanted):  # every field, arrays bit for bit
            mine, theirs = getattr(got, field.name), getattr(wanted, field.name)
            assert (mine.tobytes() == theirs.tobytes()) if isinstance(theirs, np.ndarray) else mine == theirs, field.name


def test_token_id_path_is_the_same_bits_under_another_math_library(split):
    from transformers import AutoTokenizer

    texts, scores, candidates = split
    scorer = NeighborsScorer(kernel=Bleu(tokenizer=MODEL_PATH), estimator=Threshold.paper(), device="cpu").fit(texts,
                             scores)
    hf = AutoTokenizer.from_pretrained(MODEL_PATH)
    batch = hf(candidates[:40], padding=True, return_tensors="pt")
    expected = scorer.predict_ids(batch["input_ids"], batch["attention_mask"])
    with AnotherMathLibrary():
        actual = scorer.predict_ids(batch["input_ids"], batch["attention_mask"])
    assert torch.equal(actual.scores.nan_to_num(-1), expected.scores.nan_to_num(-1))


def test_self_bleu_and_mbr_are_the_same_bits_under_another_math_library(huse_texts):
    texts = huse_texts[:120]
    expected_self = gpu_neighbors.self_bleu(texts, device="cpu")
    groups = [index % 6 for index in range(len(texts))]
    expected_mbr = gpu_neighbors.mbr(texts, groups, device="cpu").utility
    with AnotherMathLibrary():
        actual_self = gpu_neighbors.self_bleu(texts, device="cpu")
        actual_mbr = gpu_neighbors.mbr(texts, groups, device="cpu").utility
    assert actual_self.scores.tobytes() == expected_self.scores.tobytes()
    assert actual_mbr.tobytes() == expected_mbr.tobytes()


def test_aligned_rouge_and_bleu_settings_are_the_same_bits_under_another_math_library(huse_texts):
    """ROUGE is counts and IEEE divisions; the BLEU settings computed on the host use
    core.portable's exp and log: no device math library enters either."""
    candidates = huse_texts[:60]
    references = [[huse_texts[i + 1], text[: len(text) // 2]] for i, text in enumerate(candidates)]
    settings = [{"smoothing": "method7", "weights": [(0.5, 0.5), (0.2,) * 5]},
                {"smoothing": "add-k", "effective_order": True}, {"smoothing": "method6", "auto_reweigh": True}]
    expected_rouge = gpu_neighbors.rouge(candidates, references, use_stemmer=True)
    expected_bleu = [gpu_neighbors.sentence_bleu(candidates, references, **setting) for setting in settings]
    with AnotherMathLibrary():
        actual_rouge = gpu_neighbors.rouge(candidates, references, use_stemmer=True)
        actual_bleu = [gpu_neighbors.sentence_bleu(candidates, references, **setting) for setting in settings]
    for name, score in expected_rouge.items():
        assert score.fmeasure.sum() > 0 and torch.equal(actual_rouge[name].fmeasure, score.fmeasure)
    for actual, expected in zip(actual_bleu, expected_bleu):
        assert expected.sum() > 0 and torch.equal(actual, expected)


def test_mbr_utilities_do_not_depend_on_summation_order(huse_texts):
    """Candidates of each group in another input order: each one's utility is the same bits
    (a float sum would add its terms in another order)."""
    texts = huse_texts[:200]
    groups = [index % 4 for index in range(len(texts))]
    reference = gpu_neighbors.mbr(texts, groups, device="cpu", smoothing="add1").utility
    for seed in range(3):
        order = np.random.default_rng(seed).permutation(len(texts))
        permuted = gpu_neighbors.mbr([texts[i] for i in order], [groups[i] for i in order], device="cpu",
                                     smoothing="add1").utility
        assert permuted.tobytes() == reference[order].tobytes()


@pytest.mark.parametrize("settings", [
    {},
    {"kernel": "rouge"},
    {"estimator": "topk"},
])
def test_a_tuned_tau_lies_between_training_similarities(huse_texts, huse_scores, settings):
    """No training pair is within a few ulp of a tuned tau, so a similarity computed an ulp
    differently flips no neighbour; the pairs on each side are those of the grid's quantile."""
    scorer = NeighborsScorer(device="cpu", **settings).fit(huse_texts[:200], huse_scores[:200])
    assert scorer.tuning_ is not None
    similarities = scorer.train_similarity().numpy()
    off_diagonal = similarities[~np.eye(len(similarities), dtype=bool)]
    gap = np.abs(off_diagonal - scorer.tau_).min()
    assert gap > 4 * np.spacing(scorer.tau_), (scorer.tau_, gap)


def test_no_sparse_product_gets_an_empty_operand(split):
    """A chunk sharing nothing with the training set (empty or unseen texts) never reaches
    the sparse library with nnz = 0 (cuSPARSE cannot take it)."""
    texts, scores, _ = split
    products = {aten._sparse_sparse_matmul.default, aten._sparse_addmm.default, aten._sparse_mm.default,
                aten.addmm.default, aten.mm.default}
    empty: list[str] = []

    class EmptyOperands(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func in products:
                for operand in args:
                    if isinstance(operand, torch.Tensor) and operand.layout == torch.sparse_coo and operand._nnz() == 0:
                        empty.append(str(func))
            return func(*args, **(kwargs or {}))

    for weights in (None, BLEU4_WEIGHTS):
        scorer = NeighborsScorer(kernel=Bleu(weights=weights), estimator=Threshold.paper(), device="cpu").fit(texts,
                                 scores)
        with EmptyOperands():
            prediction = scorer.predict(["", "zzqx wvvk", "   "])
        assert not prediction.covered.any()
    assert empty == []


def test_gpu_tiles_are_capped_for_the_sparse_workspace():
    plan = TilePlan.for_device(torch.device("cuda"), pair_bytes=64, num_train=10**6, memory_budget=40 << 30)
    assert plan.chunk_rows * plan.block_columns <= CUDA_TILE_PAIRS


def test_host_side_tensors_stay_on_the_host_through_map_location(split):
    """A Ray worker loads the scorer with map_location=its GPU: the BERTScore kernel's host-side
    tensors (token weights indexed by host ids, the texts' lengths) must not move with it."""
    texts, scores, _ = split
    scorer = NeighborsScorer(kernel=BertScore(model=MODEL_PATH, layer=MODEL_LAYERS), estimator=Threshold.paper(),
                             device="cpu").fit(texts[:20], scores[:20])
    buffer = io.BytesIO()
    torch.save(scorer, buffer)
    loaded = torch.load(io.BytesIO(buffer.getvalue()), map_location="meta", weights_only=False)
    kernel = loaded.kernel_
    assert kernel._train.vectors.device.type == "meta"  # the device side did move
    assert kernel._token_weight.device.type == "cpu" and kernel._train.lengths.device.type == "cpu"
    assert torch.equal(kernel._token_weight, scorer.kernel_._token_weight)


@pytest.mark.parametrize("function, reference", [(portable.exp, math.exp), (portable.log, math.log)])
def test_portable_math_is_within_two_ulp(function, reference):
    rng = np.random.default_rng(0)
    if function is portable.exp:
        values = np.concatenate([-rng.exponential(5, 20000), -rng.uniform(0, 700, 5000), [0.0, -1e-300]])
    else:
        values = np.concatenate([rng.uniform(0, 1, 10000), rng.exponential(100, 10000), np.arange(1.0, 3000)])
    got = function(values)
    expected = np.array([reference(value) for value in values])
    ulps = np.abs(got - expected) / np.spacing(np.abs(expected))
    assert ulps[expected != 0].max() <= 2
