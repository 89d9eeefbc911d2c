"""Per-stage costs of the default `score` in one process, one thread: read, kernel encoding, typicality,
prepare, predict, result encoding. Usage: stages.py TRAIN.jsonl CANDIDATES.jsonl COUNT"""
import json, time, sys
import numpy as np
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.data import iter_candidates, read_scored
from gpu_neighbors.scoring.streaming import _columns
from gpu_neighbors.data.jsonlines import encode_columns
from gpu_neighbors.core.threads import set_threads
set_threads(1)
train = read_scored(sys.argv[1])
n = int(sys.argv[3])
scorer = NeighborsScorer().fit(train.texts, train.scores)
f = scorer.kernel_.features
stream = iter_candidates(sys.argv[2])
timings = {}
def t(name, fn, *a):
    s = time.thread_time(); r = fn(*a); timings[name] = timings.get(name, 0) + time.thread_time() - s; return r
total = 0
for rep in range(2):
    timings.clear(); total = 0
    for batch in stream.batches(8192) if rep else [next(stream.batches(8192))]:
        pass
    batches = []
    s = time.thread_time()
    for batch in stream.batches(8192):
        batches.append(batch); total += len(batch)
        if total >= n: break
    timings["read"] = time.thread_time() - s
    for batch in batches:
        t("transform", f.transform, batch.texts)
        t("kernel encode", scorer.kernel_.encode, batch.texts)
        t("typicality", scorer.typicality_.of_texts, batch.texts)
        prepared = t("prepare (all)", scorer.prepare, batch.texts)
        pred = t("predict(prepared)", scorer.predict, prepared)
        cols = t("columns", _columns, batch, pred)
        t("encode_columns", encode_columns, cols)
print(f"{total} candidates x {len(train)} train")
for k, v in timings.items():
    print(f"  {k:<20} {v:.3f} s  {v / total * 1e6:6.2f} us/cand")
