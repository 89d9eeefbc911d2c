"""The compiled host loops (`text._compiled`, Cython) against the numpy passes they replace: the
same bits in every output, and the numpy passes still there where no compiler built them."""
from __future__ import annotations

import random
import shutil

import numpy as np
import pytest

from gpu_neighbors.text import compiled
from gpu_neighbors.text.tfidf import FeatureRows, TfidfFeatures
from tests.conftest import ADVERSARIAL_TEXTS


def test_the_install_built_the_compiled_loops():
    """setup.py builds them wherever a C compiler is found; a silent fall back to numpy there
    would keep every answer and lose the speed."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: the install leaves the numpy passes (tested below)")
    assert compiled.native is not None


def test_the_environment_turns_them_off(monkeypatch):
    monkeypatch.setenv("GPU_NEIGHBORS_COMPILED", "0")
    assert compiled._load() is None
    monkeypatch.setenv("GPU_NEIGHBORS_COMPILED", "1")
    assert compiled._load() is compiled.native


def _same(one: FeatureRows, other: FeatureRows) -> None:
    for name in ("indptr", "indices", "values"):
        a, b = getattr(one, name), getattr(other, name)
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)  # bit for bit: no tolerance
    assert one.num_features == other.num_features


def _texts(huse_records: list[dict], seed: int) -> list[str]:
    """Real summaries, the suite's adversarial texts, and texts that stress the loops: a long
    line (thousands of each n-gram: the large-segment sort), repeats (counts above 1), and
    characters the training set never saw."""
    rng = random.Random(seed)
    words = " ".join(record["text"] for record in huse_records).split()
    long_line = " ".join(rng.choice(words) for _ in range(6_000))
    return ([record["text"] for record in huse_records] + ADVERSARIAL_TEXTS
            + [long_line, "the the the the the", "ÆØÅ ☃☃ naïve", "x", "", "   \t\n", "a-b_c d.e"])


@pytest.mark.skipif(compiled.native is None, reason="the compiled loops were not built (no C compiler)")
@pytest.mark.parametrize("hashed", [False, True], ids=["default-tables", "hashed-tables"])
@pytest.mark.parametrize("count_texts", [1 << 14, 7])
def test_tfidf_fit_and_transform_are_the_same_bits_compiled_or_not(huse_records, monkeypatch, count_texts, hashed):
    """Also with every table hashed (a small training set's tables are indexed by key)."""
    monkeypatch.setattr("gpu_neighbors.text.tfidf.COUNT_TEXTS", count_texts)
    if hashed:
        monkeypatch.setattr("gpu_neighbors.text.key_index.DENSE_KEYS", 0)
        monkeypatch.setattr("gpu_neighbors.text.key_index.DENSE_PER_KEY", 0)
    training = [record["text"] for record in huse_records[:120]] + ["ÆØÅ tøken", "x"]
    candidates = _texts(huse_records[120:], seed=count_texts)
    fitted = TfidfFeatures()
    rows = fitted.fit(training), fitted.transform(candidates), fitted.transform(training)
    monkeypatch.setattr("gpu_neighbors.text.tfidf.native", None)
    plain = TfidfFeatures()
    expected = plain.fit(training), plain.transform(candidates), plain.transform(training)
    for one, other in zip(rows, expected):
        _same(one, other)


@pytest.mark.skipif(compiled.native is None, reason="the compiled loops were not built (no C compiler)")
def test_counting_refuses_rows_out_of_order():
    native = compiled.native
    indptr, out = np.empty(3, dtype=np.int64), np.empty(4, dtype=np.int64)
    counts = np.empty(4, dtype=np.int64)
    rows, features = np.array([0, 1, 0, 1]), np.array([1, 2, 5, 6])
    native.count_rows(rows, features, np.array([0, 2, 4]), indptr, out, counts)  # two streams, each ascending
    assert indptr.tolist() == [0, 2, 4] and out.tolist() == [1, 5, 2, 6] and counts.tolist() == [1, 1, 1, 1]
    with pytest.raises(ValueError, match="do not ascend"):
        native.count_rows(rows, features, np.array([0, 4]), indptr, out, counts)  # one stream: 0, 1, 0, 1
    with pytest.raises(ValueError, match="ascending feature ranges"):
        native.count_rows(rows, np.array([5, 6, 1, 2]), np.array([0, 2, 4]), indptr, out, counts)
