"""numba against Cython on the host's hottest loop, the char_wb n-gram walk, before choosing one.

The walk (`text.tfidf.TfidfFeatures._char_walk` with its hash lookups, `text.key_index`): from
each position of a chunk's padded words, an n-gram's id is its (n-1)-gram's id times the
alphabet plus its last character, looked up order by order (2 to 5) in the fitted tables; the
walk stops where a character leaves the word or an n-gram is not in the vocabulary. Three
implementations of that loop over the same arrays, the same answers checked:

  * numpy: the package's whole-array passes (`_char_walk` with `KeyIndex.find`);
  * numba: one `njit(nogil=True, cache=True)` loop, position by position;
  * Cython: the same loop, typed memoryviews, compiled here by `cythonize` with the machine's
    gcc (-O3), bounds checks and wraparound off.

Training texts: `--train` HUSE-spliced texts; candidates: `--candidates` more; one thread, best
of `--repeats` each. numba's compile time (first call, no cache) and a cached process's first
call are reported too. Needs `pip install numba cython` (Cython only for this comparison).
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from huse import spliced_texts

CYTHON_SOURCE = r"""
# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint64_t

cdef inline int64_t find(int64_t key, const int64_t[:] slots, const int64_t[:] keys, int shift,
                         int64_t mask, const int64_t[:] dense) noexcept nogil:
    cdef int64_t slot, position, size
    if dense.shape[0]:
        if key < 0 or key >= dense.shape[0] - 1:
            return -1
        return dense[key]
    size = keys.shape[0] - 1
    slot = <int64_t>((<uint64_t>key * <uint64_t>0x9E3779B97F4A7C15ULL) >> shift)
    while True:
        position = slots[slot]
        if keys[position] == key:
            return position
        if position == size:
            return -1
        slot = (slot + 1) & mask

def walk(const int64_t[:] padded, int64_t size, list tables):
    cdef Py_ssize_t n = padded.shape[0], p, order, count = 0
    cdef int64_t ident, following
    out_positions = np.empty(4 * n, dtype=np.int64)
    out_ids = np.empty(4 * n, dtype=np.int64)
    cdef int64_t[:] positions = out_positions, ids = out_ids
    cdef const int64_t[:] s0 = tables[0][0], k0 = tables[0][1], d0 = tables[0][4]
    cdef const int64_t[:] s1 = tables[1][0], k1 = tables[1][1], d1 = tables[1][4]
    cdef const int64_t[:] s2 = tables[2][0], k2 = tables[2][1], d2 = tables[2][4]
    cdef const int64_t[:] s3 = tables[3][0], k3 = tables[3][1], d3 = tables[3][4]
    cdef int h0 = tables[0][2], h1 = tables[1][2], h2 = tables[2][2], h3 = tables[3][2]
    cdef int64_t m0 = tables[0][3], m1 = tables[1][3], m2 = tables[2][3], m3 = tables[3][3]
    with nogil:
        for p in range(n):
            ident = padded[p]
            if ident < 0:
                continue
            for order in range(4):
                if p + order + 1 >= n:
                    break
                following = padded[p + order + 1]
                if following < 0:
                    break
                if order == 0:
                    ident = find(ident * size + following, s0, k0, h0, m0, d0)
                elif order == 1:
                    ident = find(ident * size + following, s1, k1, h1, m1, d1)
                elif order == 2:
                    ident = find(ident * size + following, s2, k2, h2, m2, d2)
                else:
                    ident = find(ident * size + following, s3, k3, h3, m3, d3)
                if ident < 0:
                    break
                positions[count] = p + order * n
                ids[count] = ident
                count += 1
    return out_positions[:count], out_ids[:count]
"""


def numba_walk():
    """The walk in numba over flat arrays: each order's slots, keys and dense table concatenated,
    with their starts and sizes. One function: the lookup written as a helper `njit` function,
    even with inline="always", ran 13x slower (a typed list of arrays, 27x)."""
    from numba import njit

    @njit(nogil=True, cache=True)
    def walk(padded, size, slots, keys, dense, starts, sizes, shifts, masks):
        n = padded.size
        positions = np.empty(4 * n, dtype=np.int64)
        ids = np.empty(4 * n, dtype=np.int64)
        count = 0
        for p in range(n):
            ident = padded[p]
            if ident < 0:
                continue
            for order in range(4):
                if p + order + 1 >= n:
                    break
                following = padded[p + order + 1]
                if following < 0:
                    break
                key = ident * size + following
                if sizes[order, 2]:
                    ident = -1 if key >= sizes[order, 2] - 1 else dense[starts[order, 2] + key]
                else:
                    top = sizes[order, 1] - 1
                    slot = np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(shifts[order]))
                    ident = -1
                    while True:
                        position = slots[starts[order, 0] + slot]
                        if keys[starts[order, 1] + position] == key:
                            ident = position
                            break
                        if position == top:
                            break
                        slot = (slot + 1) & masks[order]
                if ident < 0:
                    break
                positions[count] = p + order * n
                ids[count] = ident
                count += 1
        return positions[:count], ids[:count]

    return walk


def flat_tables(tables) -> tuple[np.ndarray, ...]:
    """`tables_of`'s lookups as the flat arrays `numba_walk` reads."""
    columns = [[np.ascontiguousarray(table[index], dtype=np.int64) for table in tables] for index in (0, 1, 4)]
    sizes = np.array([[len(column[order]) for column in columns] for order in range(len(tables))], dtype=np.int64)
    starts = np.zeros_like(sizes)
    starts[1:] = np.cumsum(sizes, axis=0)[:-1]
    return (*(np.concatenate(column) for column in columns), starts, sizes,
            np.array([table[2] for table in tables], dtype=np.int64), np.array([table[3] for table in tables], dtype=np.int64))


def tables_of(features) -> list[tuple[np.ndarray, np.ndarray, int, int, np.ndarray]]:
    """Each char order's lookup as plain arrays: (slots, keys, shift, mask, dense)."""
    empty = np.zeros(0, dtype=np.int64)
    out = []
    for index in features.lookups().chars:
        if index._dense is not None:
            out.append((empty, empty, 0, 0, index._dense))
        else:
            out.append((index._slots, index._keys, int(index._shift), int(index._mask), empty))
    return out


def padded_of(features, texts: list[str]) -> np.ndarray:
    from gpu_neighbors.text.characters import SPACE as SPACE_CLASS, CodePoints, classes
    from gpu_neighbors.text.tfidf import _padded_words

    lookups = features.lookups()
    points = CodePoints.of([text.lower() for text in texts])
    kinds = classes(points.codes)
    char_ids = lookups.char_ids[points.codes].astype(np.int64)
    return _padded_words(char_ids, kinds, points.runs((kinds & SPACE_CLASS) == 0), lookups.space_id)


def numpy_walk(features, padded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from gpu_neighbors.text.tfidf import CHAR_ORDERS

    indexes = dict(zip(CHAR_ORDERS, features.lookups().chars))
    positions, ids = [], []
    walk = features._char_walk(padded, lambda order, keys: indexes[order].find(keys))
    for order, (where, found) in enumerate(walk):
        positions.append(where + order * padded.size)
        ids.append(found)
    return np.concatenate(positions), np.concatenate(ids)


def sorted_pairs(positions: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(positions, kind="stable")
    return positions[order], ids[order]


def best(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def build_cython(folder: Path):
    """Compile CYTHON_SOURCE into `folder` and import it (gcc, -O3)."""
    source = folder / "walk_cy.pyx"
    source.write_text(CYTHON_SOURCE)
    setup = folder / "setup.py"
    setup.write_text(
        "from setuptools import setup, Extension\nfrom Cython.Build import cythonize\nimport numpy\n"
        "setup(ext_modules=cythonize([Extension('walk_cy', ['walk_cy.pyx'], include_dirs=[numpy.get_include()],"
        " extra_compile_args=['-O3'])], quiet=True))\n")
    start = time.perf_counter()
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=folder, check=True,
                   capture_output=True)
    seconds = time.perf_counter() - start
    sys.path.insert(0, str(folder))
    import walk_cy  # type: ignore[import-not-found]

    return walk_cy.walk, seconds


def first_call_in_fresh_process(cache: Path) -> float:
    """Seconds of the first numba call in a new process whose cache (`cache`) is already filled."""
    code = ("import sys, time; sys.path.insert(0, %r); import numpy as np; import bench_compilers as b; "
            "w = b.numba_walk(); t = time.perf_counter(); "
            "z = np.zeros(0, dtype=np.int64); d = np.full(12, -1, dtype=np.int64); "
            "w(np.zeros(8, dtype=np.int64), 2, z, z, d, np.zeros((4, 3), dtype=np.int64), "
            "np.full((4, 3), 3, dtype=np.int64), np.zeros(4, dtype=np.int64), np.zeros(4, dtype=np.int64)); "
            "print(time.perf_counter() - t)") % str(Path(__file__).parent)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--candidates", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from gpu_neighbors.text.tfidf import TfidfFeatures

    rng = random.Random(0)
    features = TfidfFeatures()
    features.fit(spliced_texts(args.train, rng))
    padded = padded_of(features, spliced_texts(args.candidates, rng))
    size = max(features.alphabet.size, 1)
    tables = tables_of(features)
    expected = sorted_pairs(*numpy_walk(features, padded))

    with tempfile.TemporaryDirectory() as folder:
        os.environ["NUMBA_CACHE_DIR"] = str(Path(folder) / "numba")
        walk = numba_walk()
        arguments = (padded, size, *flat_tables(tables))
        start = time.perf_counter()
        got = walk(*arguments)
        compile_seconds = time.perf_counter() - start
        assert all(np.array_equal(a, b) for a, b in zip(sorted_pairs(*got), expected))
        cached_first = first_call_in_fresh_process(Path(folder) / "numba")
        cy_walk, cy_build = build_cython(Path(folder))
        cy_tables = [tuple(table) for table in tables]
        got = cy_walk(padded, size, cy_tables)
        assert all(np.array_equal(a, b) for a, b in zip(sorted_pairs(*got), expected))
        seconds = {
            "numpy (the package's passes)": best(lambda: numpy_walk(features, padded), args.repeats),
            "numba njit(nogil=True)": best(lambda: walk(*arguments), args.repeats),
            "Cython (gcc -O3)": best(lambda: cy_walk(padded, size, cy_tables), args.repeats),
        }
    positions = int((padded >= 0).sum())
    print(f"char_wb n-gram walk: {args.candidates:,} candidates against {args.train:,} training texts, "
          f"{positions:,} positions, {expected[0].size:,} n-grams found; one thread, best of {args.repeats}")
    print("| implementation | ms | ns a position | us a candidate | against numpy |")
    print("|---|---:|---:|---:|---:|")
    base = seconds["numpy (the package's passes)"]
    for name, value in seconds.items():
        print(f"| {name} | {value * 1e3:.1f} | {value / positions * 1e9:.1f} | {value / args.candidates * 1e6:.2f} "
              f"| {base / value:.1f}x |")
    print(f"numba: first call compiling {compile_seconds:.2f} s; first call of a fresh process from its cache "
          f"{cached_first * 1e3:.0f} ms. Cython: build {cy_build:.1f} s (gcc, at install)")


if __name__ == "__main__":
    main()
