"""Fit the default scorer on TRAIN.jsonl, then predict CANDIDATES.jsonl (one thread), each timed: the
predict profile. Usage: predict_prof.py TRAIN.jsonl CANDIDATES.jsonl"""
import json, time, sys, warnings
warnings.simplefilter("ignore")
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.data import read_scored
from gpu_neighbors.core.threads import set_threads
set_threads(1)
train = read_scored(sys.argv[1])
cands = [json.loads(l)["text"] for l in open(sys.argv[2])]
t = time.perf_counter(); scorer = NeighborsScorer().fit(train.texts, train.scores, tune=False); print("fit", time.perf_counter() - t, file=sys.stderr)
print("features", scorer.kernel_.features.num_features, file=sys.stderr)
t = time.perf_counter(); p = scorer.predict(cands); print("predict", time.perf_counter() - t, file=sys.stderr)
