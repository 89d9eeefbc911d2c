"""Library calls run on one intra-op thread where the caller left torch's default, and give the
caller's count back; an explicit count (set_num_threads, OMP_NUM_THREADS, the command line's
--threads) is kept. Each case runs in a fresh interpreter: the default is read at import."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHILD = r"""
import json, torch
torch.set_num_threads(3)  # stands for torch's default here: it is the count at import
import gpu_neighbors
from gpu_neighbors import NeighborsScorer, NotFittedError
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.kernels.bleu import BleuKernel
{setup}
seen = []
tile = BleuKernel.tile
def recording(self, *args):
    seen.append(torch.get_num_threads())
    return tile(self, *args)
BleuKernel.tile = recording
texts = ["the cat sat", "a dog ran", "birds fly south", "rain fell", "the sun rose", "a cat ran"]
scorer = NeighborsScorer(kernel="bleu", estimator=Threshold(min_neighbors=1, tuning="never")).fit(texts,
                         [0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
scorer.predict(["the cat ran"])
inside_fit_and_predict = sorted(set(seen))
counts = []
import gpu_neighbors.kernels.aligned_bleu as aligned
counted = aligned.count_packed
aligned.count_packed = lambda *a, **k: (counts.append(torch.get_num_threads()), counted(*a, **k))[1]
gpu_neighbors.sentence_bleu(["a b c"], ["a b d"])
seen.clear()
import tempfile, os
with tempfile.TemporaryDirectory() as folder:
    gpu_neighbors.pairs(texts, output=os.path.join(folder, "matrix.npy"), device="cpu")
    gpu_neighbors.mbr(texts, device="cpu")
allpairs = sorted(set(seen))
try:
    NeighborsScorer().predict(["x"])
except NotFittedError:
    pass
print(json.dumps({{"fit_predict": inside_fit_and_predict, "sentence_bleu": counts, "allpairs": allpairs, "after": torch.get_num_threads()}}))
"""


def run(setup: str = "", environment: dict[str, str] | None = None) -> dict:
    env = {key: value for key, value in os.environ.items() if key not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # the GPU check's packages
    child = subprocess.run([sys.executable, "-c", CHILD.format(setup=setup)], env={**env, **(environment or {})},
                           capture_output=True, text=True, cwd=ROOT)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def test_the_default_becomes_one_thread_inside_calls_and_comes_back():
    result = run()
    assert result == {"fit_predict": [1], "sentence_bleu": [1], "allpairs": [1], "after": 3}


@pytest.mark.parametrize("setup, environment, count", [
    ("torch.set_num_threads(2)", None, 2),  # chosen after import
    ("from gpu_neighbors.core.threads import set_threads; set_threads(3)", None, 3),  # the CLI's --threads
    ("", {"OMP_NUM_THREADS": "3"}, 3),
])
def test_an_explicit_count_is_kept(setup, environment, count):
    result = run(setup, environment)
    assert result == {"fit_predict": [count], "sentence_bleu": [count], "allpairs": [count], "after": count}
