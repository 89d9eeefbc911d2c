"""pairs against brute force: the .npy matrix against scorer.similarity, top-k and threshold
pairs against a selection from the full matrix; tiles cut small so pairs cross tile edges."""
from __future__ import annotations

import numpy as np
import pytest

from allpairs_cases import SMALL, full_matrix, texts  # noqa: F401  (texts is a fixture)
from gpu_neighbors.allpairs.pairs import pairs
from gpu_neighbors.data import InputError


@pytest.fixture
def pq():
    """pyarrow.parquet (the [parquet] extra), which the top-k and threshold passes write: their
    tests skip where it is absent (a bare environment), the others run."""
    return pytest.importorskip("pyarrow.parquet")


def test_pairs_npy_equals_similarity(texts, tmp_path):
    candidates, train = texts[:37], texts[37:]
    result = pairs(candidates, train, output=tmp_path / "m.npy", device="cpu", memory_budget=SMALL,
                   weights=(0.5, 0.5))
    matrix = np.load(result.path, mmap_mode="r")
    assert matrix.dtype == np.float32 and matrix.shape == (37, len(train))
    np.testing.assert_array_equal(matrix, full_matrix(candidates, train, weights=(0.5, 0.5)).astype(np.float32))
    itself = np.load(pairs(texts, output=tmp_path / "s.npy", device="cpu", memory_budget=SMALL).path)
    np.testing.assert_array_equal(itself, full_matrix(texts, texts).astype(np.float32))


def brute_force_top(matrix: np.ndarray, k: int | None, threshold: float | None, itself: bool) -> list[tuple]:
    rows = []
    for row in range(matrix.shape[0]):
        # similarity descending, then column ascending: the order the job promises
        order = sorted(range(matrix.shape[1]), key=lambda column: (-matrix[row, column], column))
        order = [c for c in order if not (itself and c == row) and (threshold is None or matrix[row, c] >= threshold)]
        rows += [(row, c, matrix[row, c], rank + 1) for rank, c in enumerate(order[:k])]
    return rows


@pytest.mark.parametrize("k, threshold", [(3, None), (5, 0.1), (400, 0.2)])
@pytest.mark.parametrize("itself", [True, False])
def test_pairs_top_k_equals_brute_force(texts, tmp_path, k, threshold, itself, pq):
    candidates, train = texts[:40], None if itself else texts[40:]
    output = tmp_path / "top.parquet"
    result = pairs(candidates, train, output=output, top_k=k, min_similarity=threshold, device="cpu",
                   memory_budget=SMALL)
    table = pq.read_table(output).to_pydict()
    got = list(zip(table["candidate"], table["train"], table["similarity"], table["rank"]))
    expected = brute_force_top(full_matrix(candidates, train or candidates), k, threshold, itself)
    assert [(r, c, rank) for r, c, _, rank in got] == [(r, c, rank) for r, c, _, rank in expected]
    np.testing.assert_allclose([g[2] for g in got], [e[2] for e in expected], rtol=0, atol=1e-15)
    assert result.pairs == len(expected)


@pytest.mark.parametrize("itself", [True, False])
def test_pairs_threshold_equals_brute_force(texts, tmp_path, itself, pq):
    candidates, train = texts[:40], None if itself else texts[40:]
    output = tmp_path / "above.parquet"
    result = pairs(candidates, train, output=output, min_similarity=0.1, device="cpu", memory_budget=SMALL)
    table = pq.read_table(output).to_pandas().sort_values(["candidate", "train"])
    matrix = full_matrix(candidates, train or candidates)
    keep = matrix >= 0.1
    if itself:
        np.fill_diagonal(keep, False)
    rows, columns = np.nonzero(keep)
    assert result.pairs == len(rows)
    np.testing.assert_array_equal(table["candidate"], rows)
    np.testing.assert_array_equal(table["train"], columns)
    np.testing.assert_allclose(table["similarity"], matrix[rows, columns], rtol=0, atol=1e-15)


def test_pairs_bad_input(tmp_path):
    existing = tmp_path / "m.npy"
    existing.write_bytes(b"")
    with pytest.raises(InputError, match="exists already"):
        pairs(["a b", "c d"], output=existing, device="cpu")
    pairs(["a b", "c d"], output=existing, overwrite=True, device="cpu")
    assert np.load(existing).shape == (2, 2)
    for kwargs, message in [
        ({"output": tmp_path / "m.csv"}, "give a .npy"),
        ({"output": tmp_path / "x.npy", "top_k": 3}, "a .npy output holds every pair"),
        ({"output": tmp_path / "x.parquet"}, "needs top_k or min_similarity"),
        ({"output": tmp_path / "x.parquet", "top_k": 0}, "top_k must be a positive integer"),
    ]:
        with pytest.raises(ValueError, match=message):
            pairs(["a b", "c d"], device="cpu", **kwargs)
    with pytest.raises(ValueError, match="1 text against itself"):
        pairs(["a b"], output=tmp_path / "y.npy", device="cpu")
    with pytest.raises(ValueError, match="candidates: 0 texts"):
        pairs([], ["a"], output=tmp_path / "y.npy", device="cpu")
    assert not list(tmp_path.glob("*.partial"))


def test_numpy_numbers_are_numbers_for_pairs_and_self_bleu(texts, tmp_path, pq):
    """top_k=np.int64(2) was refused as "top_k must be a positive integer, not np.int64(2)",
    min_similarity=np.float32(...) likewise; self_bleu's sample too, and its seed="x" failed in
    numpy's SeedSequence."""
    import gpu_neighbors

    want = pairs(texts[:6], texts, output=tmp_path / "a.parquet", top_k=2, min_similarity=0.25, device="cpu")
    got = pairs(texts[:6], texts, output=tmp_path / "b.parquet", top_k=np.int64(2), min_similarity=np.float32(0.25),
                device="cpu")
    assert got.pairs == want.pairs
    assert pq.read_table(tmp_path / "a.parquet").equals(pq.read_table(tmp_path / "b.parquet"))
    sampled = gpu_neighbors.self_bleu(texts, sample=np.int64(3), seed=np.int64(1), device="cpu")
    assert np.array_equal(sampled.indices, gpu_neighbors.self_bleu(texts, sample=3, seed=1, device="cpu").indices)
    with pytest.raises(ValueError, match="seed must be a non-negative integer, not 'x'"):
        gpu_neighbors.self_bleu(texts, sample=3, seed="x", device="cpu")


def test_the_npy_writer_never_follows_a_link(tmp_path):
    """A link put where the output mechanism made the partial file is refused, and its target
    is left as it was."""
    import errno

    from gpu_neighbors.core.reductions import NpyReduction

    target = tmp_path / "precious.txt"
    target.write_text("keep me\n", encoding="utf-8")
    link = tmp_path / "out.npy.partial"
    link.symlink_to(target)
    with pytest.raises(OSError) as error:
        NpyReduction(link, 2, 2)
    assert error.value.errno == errno.ELOOP
    assert target.read_text(encoding="utf-8") == "keep me\n"


def test_parquet_pairs_without_pyarrow_name_the_extra_before_the_work(texts, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    output = tmp_path / "top.parquet"
    with pytest.raises(InputError, match=r"writing Parquet needs pyarrow: pip install 'gpu-neighbors\[parquet\]'"):
        pairs(texts[:3], texts[3:], output=output, top_k=2, device="cpu")
    assert list(tmp_path.iterdir()) == []


def test_overwrite_is_true_or_false(tmp_path):
    """overwrite="no" replaced the file (any truthy value did)."""
    output = tmp_path / "m.npy"
    output.write_bytes(b"kept")
    with pytest.raises(ValueError, match="overwrite must be True or False, not 'no'"):
        pairs(["a b", "b c"], output=output, overwrite="no")
    assert output.read_bytes() == b"kept"


def test_an_output_that_is_not_a_path_is_refused_by_name():
    """output=None failed in pathlib with "expected str, bytes or os.PathLike object"."""
    with pytest.raises(TypeError, match="output must be a path .*not NoneType"):
        pairs(["a b", "b c"], output=None)


def test_a_top_k_past_the_set_keeps_every_pair_without_k_slots_a_row(tmp_path, pq):
    """top_k=2**40 failed allocating [candidates, 2**40] buffers (a k entries per candidate whatever
    the set's size); now a k past the set keeps every pair, as a smaller k past it did."""
    result = pairs(["a b", "a c", "b c"], ["a b c", "c"], output=tmp_path / "top.parquet", top_k=1 << 40, device="cpu")
    table = pq.read_table(result.path).to_pydict()
    assert result.pairs == 6 and table["rank"] == [1, 2] * 3
