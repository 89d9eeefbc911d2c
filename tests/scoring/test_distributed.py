"""Ray Data scoring: a local Ray with 2 CPUs gives, row for row, what one process gives."""
from __future__ import annotations

import importlib.util
import json
import pickle

import numpy as np
import pytest
import torch

from conftest import ADVERSARIAL_TEXTS
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.cli import main
from gpu_neighbors.core.saved import SavedScorerError
from gpu_neighbors.scoring.distributed import ScoringActor, load_scorer, score_dataset, serialize_scorer
from gpu_neighbors.kernels.tfidf import TfidfKernel
from gpu_neighbors.text.typicality import Typicality

TRAIN_SIZE = 150


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module: start-up costs seconds. Ray is the [ray] extra: CI installs
    it; the device image lacks it (too large to carry), so the tests that need it skip there."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def scorer(huse_texts, huse_scores) -> NeighborsScorer:
    return NeighborsScorer(device="cpu").fit(huse_texts[:TRAIN_SIZE], huse_scores[:TRAIN_SIZE])


@pytest.fixture(scope="module")
def candidates(huse_texts) -> list[str]:
    return huse_texts + ADVERSARIAL_TEXTS


def test_dataset_rows_equal_the_single_process_run(local_ray, scorer, candidates):
    dataset = local_ray.data.from_items([{"id": i, "body": text} for i, text in enumerate(candidates)])
    rows = score_dataset(dataset, scorer, text_column="body", batch_size=32, num_actors=2).take_all()
    expected = scorer.predict(candidates)
    assert [row["id"] for row in rows] == list(range(len(candidates)))
    assert [row["body"] for row in rows] == candidates
    assert 0 < expected.coverage < 1
    np.testing.assert_array_equal([row["num_neighbors"] for row in rows], expected.num_neighbors)
    np.testing.assert_array_equal([row["score"] for row in rows], expected.scores)
    np.testing.assert_array_equal([row["std"] for row in rows], expected.std)


def test_cli_ray_writes_the_same_file(local_ray, tmp_path, huse_records, candidates):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in huse_records[:TRAIN_SIZE]), encoding="utf-8")
    texts = [text for text in candidates if text.strip()]  # plain text: one candidate per line
    cands = tmp_path / "candidates.txt"
    cands.write_text("\n".join(texts) + "\n", encoding="utf-8")
    common = ["score", "--train", str(train), "--candidates", str(cands), "--quiet", "--batch-size", "64",
              "--kernel", "bleu"]  # BLEU* leaves some candidates without an estimate: None must travel too
    assert main([*common, "--output", str(tmp_path / "one.jsonl")]) == 0
    assert main([*common, "--output", str(tmp_path / "ray.jsonl"), "--ray"]) == 0
    one = (tmp_path / "one.jsonl").read_text(encoding="utf-8").splitlines()
    distributed = (tmp_path / "ray.jsonl").read_text(encoding="utf-8").splitlines()
    assert distributed == one
    meta = [(tmp_path / f"{name}.jsonl.meta.json").read_text(encoding="utf-8") for name in ("one", "ray")]
    assert meta[0] == meta[1]  # same settings recorded: either mode can resume the other's run
    rows = [json.loads(line) for line in one]
    assert [row["text"] for row in rows] == texts
    assert any(row["score"] is None for row in rows) and any(row["score"] is not None for row in rows)


def test_the_actor_loads_the_fitted_scorer_without_refitting(local_ray, scorer, candidates, monkeypatch):
    """What each actor does, in this process: load the shipped saved folder onto its device and
    score. Unpickling, the kernel's fit, the typicality tables' build, tuning and calibration are
    all disabled, to prove that a TF-IDF scorer (whose kernel saves its encoding) travels as a saved
    one and nothing is rebuilt."""
    scorer = NeighborsScorer(kernel="tfidf", device="cpu").fit(scorer.kernel_.train_texts, scorer.train_scores_)
    payload = serialize_scorer(scorer)
    assert sorted(payload) == ["scorer.json", "tensors.safetensors", "training.jsonl"]
    refuse = lambda *args, **kwargs: pytest.fail("the actor rebuilt or unpickled the scorer")  # noqa: E731
    for owner, name in ((TfidfKernel, "fit"), (Typicality, "__init__"), (NeighborsScorer, "fit"),
                        (pickle, "loads"), (torch, "load")):
        monkeypatch.setattr(owner, name, refuse)
    assert isinstance(scorer.kernel_, TfidfKernel)
    actor = ScoringActor([local_ray.put(payload)], text_column="text")
    assert actor.scorer.device_ == torch.device("cpu")
    out = actor({"text": np.array(candidates, dtype=object), "id": np.arange(len(candidates))})
    expected = scorer.predict(candidates)
    np.testing.assert_array_equal(out["score"], expected.scores)
    np.testing.assert_array_equal(out["num_neighbors"], expected.num_neighbors)
    np.testing.assert_array_equal(out["id"], np.arange(len(candidates)))
    with pytest.raises(ValueError, match="no column 'text'"):
        actor({"body": np.array(["a"], dtype=object)})
    with pytest.raises(ValueError, match="already has column"):
        actor({"text": np.array(["a"], dtype=object), "score": np.array([1.0])})
    loaded = load_scorer(serialize_scorer(scorer), torch.device("cpu"))
    assert loaded.kernel_.device == torch.device("cpu") and loaded.signature == scorer.signature


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray (the [ray] extra) is not installed: "
                    "score_dataset says so before it reads its arguments")
def test_bad_arguments_fail_before_any_ray_work(scorer):
    with pytest.raises(RuntimeError, match="not fitted"):
        score_dataset(None, NeighborsScorer())
    with pytest.raises(ValueError, match="batch_size"):
        score_dataset(None, scorer, batch_size=0)
    with pytest.raises(TypeError, match="dataset must be a Ray Dataset"):
        score_dataset(None, scorer)


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray (the [ray] extra) is not installed: "
                    "score_dataset says so before it reads its arguments")
@pytest.mark.parametrize(("setting", "value", "message"), [
    ("num_actors", 1.5, "num_actors must be an integer >= 1 or None, not 1.5"),  # was Ray's "'float' object cannot be
    ("num_actors", "2", "num_actors must be an integer >= 1 or None, not '2'"),  # interpreted as an integer"; "'<' not
    ("num_actors", True, "num_actors must be an integer >= 1 or None, not True"),  # supported"; True a pool of one
    ("num_gpus", -1, "num_gpus must be a finite number >= 0 or None, not -1"),  # was taken, failing inside Ray later
    ("num_gpus", "1", "num_gpus must be a finite number >= 0 or None, not '1'"),  # "'>' not supported ..."
    ("num_gpus", True, "num_gpus must be a finite number >= 0 or None, not True"),
    ("text_column", 3, "text_column must be a non-empty string, not 3"),  # failed in every actor
])
def test_pool_settings_are_checked_by_name_before_any_ray_work(scorer, setting, value, message):
    with pytest.raises((TypeError, ValueError), match=message):
        score_dataset(None, scorer, **{setting: value})


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray (the [ray] extra) is not installed")
def test_a_dataset_that_is_no_ray_dataset_is_refused_by_name(scorer, candidates):
    """A list of rows was taken, Ray started, and then "'list' object has no attribute 'map_batches'"."""
    with pytest.raises(TypeError, match=r"dataset must be a Ray Dataset \(ray.data.from_items, read_parquet, "
                                        r"\.\.\.\), not list"):
        score_dataset([{"text": text} for text in candidates], scorer)


def test_gpu_actors_on_a_cluster_without_gpus_are_refused(local_ray, scorer):
    dataset = local_ray.data.from_items([{"text": "a"}])
    with pytest.raises(ValueError, match="the cluster has 0 GPUs, too few for one actor of num_gpus=1"):
        score_dataset(dataset, scorer, num_gpus=1)


def test_the_scorer_is_a_fitted_scorer_or_a_saved_folder(local_ray, scorer, candidates, tmp_path):
    """A string was read as an unfitted estimator: "this str is not fitted yet: call fit(texts,
    scores) first"; the metric and the rewards take a saved scorer's folder, and now so does
    score_dataset (the folder's files are what travels to the actors)."""
    with pytest.raises(TypeError, match="a fitted NeighborsScorer or a saved scorer's folder, not int"):
        score_dataset(None, 3)
    with pytest.raises(SavedScorerError, match="not a saved scorer"):
        score_dataset(None, str(tmp_path))
    dataset = local_ray.data.from_items([{"text": text} for text in candidates[:40]])
    rows = score_dataset(dataset, scorer.save(tmp_path / "scorer"), num_actors=1).take_all()
    np.testing.assert_array_equal([row["score"] for row in rows], scorer.predict(candidates[:40]).scores)



def test_a_row_without_a_text_is_named_by_its_columns(local_ray, scorer):
    """A None in the text column of the dataset's row 7 read "candidates[3] is NoneType, not str":
    the index within one actor's batch, and no column. Now the row is shown with its columns (an id
    finds it) and the text column is named."""
    actor = ScoringActor([local_ray.put(serialize_scorer(scorer))], text_column="body")
    batch = {"id": np.arange(4, 8), "body": np.array(["a b", "c", "d", None], dtype=object)}
    with pytest.raises(TypeError, match=r"the column 'body' holds None, not a string, in the row "
                                        r"\{'id': 7, 'body': None\}"):
        actor(batch)
