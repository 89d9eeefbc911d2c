"""numba against Cython on the host's hottest loop, the char_wb n-gram walk, before choosing one.

The walk (`text.tfidf.TfidfFeatures._char_walk` with its hash lookups, `text.key_index`): from
each position of a chunk's padded words, an n-gram's id is its (n-1)-gram's id times the
alphabet plus its last character, looked up order by order (2 to 5) in the fitted tables; the
walk stops where a character leaves the word or an n-gram is not in the vocabulary. Three
implementations of that loop over the same arrays, the same answers checked:

  * numpy: the package's whole-array passes (`_char_walk` with `KeyIndex.find`);
  * Cython: the package's own loop (`gpu_neighbors/text/_compiled.pyx`, `char_walk`), built
    afresh here as setup.py builds it (the machine's gcc, -O3), its build timed;
  * numba: the same loop ported to one `njit(nogil=True, cache=True)` function.

Training texts: `--train` HUSE-spliced texts; candidates: `--candidates` more; one thread, best
of `--repeats` each. numba's compile time (first call, no cache) and a cached process's first
call are reported too. Needs numba and cython (the bench extra).
"""
from __future__ import annotations

import argparse
import importlib
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from huse import spliced_texts

ROOT = Path(__file__).resolve().parents[1]

def numba_walk():
    """The package's compiled walk (`_compiled.char_walk`) ported to numba, over the same flat
    tables (`key_index.concatenated`) and into the same outputs. One function: the lookup written
    as a helper `njit` function, even with inline="always", ran 13x slower (a typed list of
    arrays, 27x)."""
    from numba import njit

    @njit(nogil=True, cache=True)
    def walk(padded, size, dense, slots, keys, bounds, positions, ids, counts):
        n = padded.size
        counts[:] = 0
        for p in range(n):
            ident = padded[p]
            if ident < 0:
                continue
            for order in range(bounds.shape[0]):
                if p + order + 1 >= n:
                    break
                following = padded[p + order + 1]
                if following < 0:
                    break
                key = ident * size + following
                if bounds[order, 1]:
                    ident = -1 if key >= bounds[order, 1] - 1 else dense[bounds[order, 0] + key]
                else:
                    slot = np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(bounds[order, 5]))
                    ident = -1
                    while True:
                        position = slots[bounds[order, 2] + slot]
                        if keys[bounds[order, 3] + position] == key:
                            ident = position
                            break
                        if position == bounds[order, 4] - 1:
                            break
                        slot = (slot + 1) & bounds[order, 6]
                if ident < 0:
                    break
                positions[order, counts[order]] = p
                ids[order, counts[order]] = ident
                counts[order] += 1

    return walk


def padded_of(features, texts: list[str]) -> np.ndarray:
    from gpu_neighbors.text.characters import SPACE as SPACE_CLASS, CodePoints, classes
    from gpu_neighbors.text.tfidf import _padded_words

    lookups = features.lookups()
    points = CodePoints.of([text.lower() for text in texts])
    kinds = classes(points.codes)
    char_ids = lookups.char_ids[points.codes].astype(np.int64)
    return _padded_words(char_ids, kinds, points.runs((kinds & SPACE_CLASS) == 0), lookups.space_id)


def numpy_walk(features, padded: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    from gpu_neighbors.text.tfidf import CHAR_ORDERS

    indexes = dict(zip(CHAR_ORDERS, features.lookups().chars))
    return list(features._char_walk(padded, lambda order, keys: indexes[order].find(keys)))


def compiled_walk(walk, padded: np.ndarray, size: int, tables) -> list[tuple[np.ndarray, np.ndarray]]:
    """A compiled walk's per-order (positions, ids), as `numpy_walk` gives them."""
    positions = np.empty((4, padded.size), dtype=np.int64)
    ids, counts = np.empty_like(positions), np.zeros(4, dtype=np.int64)
    walk(padded, size, *tables, positions, ids, counts)
    return [(positions[order, :count], ids[order, :count]) for order, count in enumerate(counts.tolist())]


def same(one, other) -> bool:
    return all(np.array_equal(a, b) and np.array_equal(c, d) for (a, c), (b, d) in zip(one, other))


def best(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def build_cython(folder: Path):
    """The package's Cython loops (`gpu_neighbors/text/_compiled.pyx`) built afresh in `folder`
    as setup.py builds them (gcc, -O3), timed, and imported: (its char_walk, build seconds)."""
    source = folder / "walk_cy.pyx"
    source.write_text((ROOT / "gpu_neighbors" / "text" / "_compiled.pyx").read_text())
    (folder / "setup.py").write_text(
        "from setuptools import setup, Extension\nfrom Cython.Build import cythonize\n"
        "setup(ext_modules=cythonize([Extension('walk_cy', ['walk_cy.pyx'], "
        "extra_compile_args=['-O3', '-ffp-contract=off'])], quiet=True))\n")
    start = time.perf_counter()
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=folder, check=True,
                   capture_output=True)
    seconds = time.perf_counter() - start
    sys.path.insert(0, str(folder))
    built = importlib.import_module("walk_cy")  # made just above, in a temporary folder
    return built.char_walk, seconds


def first_call_in_fresh_process(cache: Path) -> float:
    """Seconds of the first numba call in a new process whose cache (`cache`) is already filled."""
    code = ("import sys, time; sys.path.insert(0, %r); import numpy as np; import bench_compilers as b; "
            "w = b.numba_walk(); t = time.perf_counter(); "
            "z = np.zeros(0, dtype=np.int64); o = np.zeros((4, 8), dtype=np.int64); "
            "w(np.full(8, -1, dtype=np.int64), 2, np.full(4, -1, dtype=np.int64), z, z, "
            "np.array([[0, 1, 0, 0, 0, 0, 0]] * 4, dtype=np.int64), o, o.copy(), np.zeros(4, dtype=np.int64)); "
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
    from gpu_neighbors.text.key_index import concatenated
    from gpu_neighbors.text.tfidf import TfidfFeatures

    rng = random.Random(0)
    features = TfidfFeatures()
    features.fit(spliced_texts(args.train, rng))
    padded = padded_of(features, spliced_texts(args.candidates, rng))
    size = max(features.alphabet.size, 1)
    tables = concatenated(features.lookups().chars)
    expected = numpy_walk(features, padded)

    with tempfile.TemporaryDirectory() as folder:
        os.environ["NUMBA_CACHE_DIR"] = str(Path(folder) / "numba")
        walk = numba_walk()
        start = time.perf_counter()
        assert same(compiled_walk(walk, padded, size, tables), expected)
        compile_seconds = time.perf_counter() - start
        cached_first = first_call_in_fresh_process(Path(folder) / "numba")
        cy_walk, cy_build = build_cython(Path(folder))
        assert same(compiled_walk(cy_walk, padded, size, tables), expected)
        seconds = {
            "numpy (the package's passes)": best(lambda: numpy_walk(features, padded), args.repeats),
            "numba njit(nogil=True)": best(lambda: compiled_walk(walk, padded, size, tables), args.repeats),
            "Cython (gcc -O3)": best(lambda: compiled_walk(cy_walk, padded, size, tables), args.repeats),
        }
    positions = int((padded >= 0).sum())
    print(f"char_wb n-gram walk: {args.candidates:,} candidates against {args.train:,} training texts, "
          f"{positions:,} positions, {sum(found.size for _, found in expected):,} n-grams found; one thread, best of {args.repeats}")
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
