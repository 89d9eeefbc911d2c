"""Saved scorers (`NeighborsScorer.save` / `load`, `core/saved.py`): a loaded scorer predicts the
same bits as the one that saved it, for every kernel and estimator and any chunk size; a folder
that is not a complete, unchanged saved scorer is refused in one line naming the file, and
nothing in it is ever unpickled."""
from __future__ import annotations

import hashlib
import json
import pickle
import warnings

import numpy as np
import pytest
import torch

from gpu_neighbors import (
    Auto,
    BertScore,
    Bleu,
    HuggingFaceTokenizer,
    NeighborsScorer,
    NotFittedError,
    Sacrebleu13aTokenizer,
    Ridge,
    Threshold,
    TopK,
    WhitespaceTokenizer,
    __version__,
)

from gpu_neighbors.core.saved import (CONFIG, FORMAT_VERSION, TENSORS, TRAINING, SavedScorerError, pack_strings,
                                      unpack_strings)
from gpu_neighbors.text.tfidf import TfidfFeatures
from gpu_neighbors.text.typicality import Typicality
from forged import forge_tensors, record_file, rewrite_config
from minilm import MODEL_PATH

CASES = {
    "tfidf-default": {},
    "bleu-paper": {"kernel": Bleu(smoothing="exp", tokenizer="13a"), "estimator": Threshold.paper()},
    "bleu-threshold-tuned": {"kernel": "bleu", "estimator": Threshold(weighting="similarity")},
    "rouge-topk": {"kernel": "rouge", "estimator": TopK(k=7, power=2.0)},
    "tfidf-ridge": {"estimator": Ridge()},
    "meteor-topk": {"kernel": "meteor"},
    "bertscore-ridge": {"kernel": BertScore(model=MODEL_PATH, layer=2, rescale=False)},
    "bertscore-threshold": {"kernel": BertScore(model=MODEL_PATH, layer=2, idf=True), "estimator": "threshold"},
    "auto": {"kernel": Auto(["bleu", "rouge"]), "level": 0.8},
}


@pytest.fixture(scope="module")
def data(huse_texts, huse_scores):
    return huse_texts[:90], np.asarray(huse_scores[:90]), huse_texts[150:] + ["", "zzz unseen words"]


def fitted(settings, data) -> NeighborsScorer:
    texts, scores, _ = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return NeighborsScorer(device="cpu", **settings).fit(texts, scores)


def same_bits(first, second) -> None:
    for name in ("scores", "num_neighbors", "std", "covered", "low", "high", "nearest", "outside"):
        got, want = getattr(first, name), getattr(second, name)
        assert (got is None and want is None) or got.tobytes() == want.tobytes(), name


@pytest.mark.parametrize("case", list(CASES))
def test_a_loaded_scorer_gives_the_same_bits(case, data, tmp_path):
    texts, scores, candidates = data
    scorer = fitted(CASES[case], data)
    folder = scorer.save(tmp_path / "scorer")
    assert sorted(path.name for path in folder.iterdir()) == [CONFIG, TENSORS, TRAINING]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = NeighborsScorer.load(folder)
    assert str(loaded.signature) == str(scorer.signature)
    assert loaded.thresholds_ == scorer.thresholds_ and loaded.estimator_ == scorer.estimator_
    same_bits(loaded.predict(candidates), scorer.predict(candidates))
    same_bits(loaded.leave_one_out(), scorer.leave_one_out())
    near, expected = loaded.predict(candidates, return_neighbors=3), scorer.predict(candidates, return_neighbors=3)
    assert near.neighbors.index.tobytes() == expected.neighbors.index.tobytes()
    assert torch.equal(loaded.reward(candidates, subsample=0.5, seed=3), scorer.reward(candidates, subsample=0.5, seed=3))
    assert loaded.inner_spearman() == scorer.inner_spearman()
    if not case.startswith("bertscore"):  # a model's batches are padded alike only for equal chunks
        loaded.chunk_size, loaded.memory_budget = 3, 40_000  # any tiling: the same bits
        same_bits(loaded.predict(candidates), scorer.predict(candidates))


def test_a_loaded_scorer_scores_token_ids_as_the_saver(data, tmp_path):
    texts, scores, candidates = data
    tokenizer = HuggingFaceTokenizer(MODEL_PATH)
    scorer = fitted({"kernel": Bleu(tokenizer=tokenizer)}, data)
    loaded = NeighborsScorer.load(scorer.save(tmp_path / "ids"))
    batch = tokenizer.hf(candidates, padding=True, return_tensors="pt")
    got = loaded.predict_ids(batch["input_ids"], batch["attention_mask"])
    want = scorer.predict_ids(batch["input_ids"], batch["attention_mask"])
    assert torch.equal(got.scores.nan_to_num(-1), want.scores.nan_to_num(-1))
    assert torch.equal(got.outside, want.outside) and torch.equal(got.nearest, want.nearest)


def test_a_tokenizer_object_saves_by_its_name(data, tmp_path):
    scorer = fitted({"kernel": Bleu(tokenizer=Sacrebleu13aTokenizer(lowercase=True))}, data)
    loaded = NeighborsScorer.load(scorer.save(tmp_path / "13a"))
    assert loaded.kernel == Bleu(tokenizer="13a", lowercase=True)
    same_bits(loaded.predict(data[2]), scorer.predict(data[2]))

    class Own(WhitespaceTokenizer):
        name = "mine"

    with pytest.raises(ValueError, match="cannot be saved: give it by name"):
        fitted({"kernel": Bleu(tokenizer=Own())}, data).save(tmp_path / "own")


def test_the_folder_says_what_it_holds(data, tmp_path):
    texts, scores, _ = data
    scorer = fitted(CASES["rouge-topk"], data)
    folder = scorer.save(tmp_path / "s")
    config = json.loads((folder / CONFIG).read_text())
    assert config["format_version"] == FORMAT_VERSION and config["package_version"] == __version__
    assert config["signature"] == str(scorer.signature) and config["training"] == {"count": len(texts), "fields": []}
    assert config["parts"]["estimator"] == {"name": "topk", "k": 7, "weighting": "similarity", "power": 2.0,
                                            "tuning": "auto"}
    lines = (folder / TRAINING).read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [{"text": t, "score": s} for t, s in zip(texts, scores.tolist())]
    assert config["files"][TRAINING]["sha256"] == hashlib.sha256((folder / TRAINING).read_bytes()).hexdigest()


def test_saving_refuses_what_it_would_overwrite(data, tmp_path):
    scorer = fitted({}, data)
    folder = scorer.save(tmp_path / "s")
    with pytest.raises(FileExistsError, match="a saved scorer is already there"):
        scorer.save(folder)
    scorer.save(folder, overwrite=True)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="notes.txt, not a saved scorer"):
        scorer.save(tmp_path / "other", overwrite=True)
    assert not list(folder.glob("*.partial"))
    with pytest.raises(NotFittedError):
        NeighborsScorer().save(tmp_path / "unfitted")


@pytest.fixture
def saved(data, tmp_path):
    return fitted(CASES["tfidf-ridge"], data).save(tmp_path / "saved")


def test_a_newer_or_older_format_is_refused(saved):
    rewrite_config(saved, lambda config: config.__setitem__("format_version", FORMAT_VERSION + 1))
    with pytest.raises(SavedScorerError, match=rf"scorer.json: format version {FORMAT_VERSION + 1} is newer"):
        NeighborsScorer.load(saved)
    rewrite_config(saved, lambda config: config.__setitem__("format_version", FORMAT_VERSION - 1))
    with pytest.raises(SavedScorerError, match=rf"scorer.json: format version {FORMAT_VERSION - 1} is older .* "
                                               "fit the scorer again"):
        NeighborsScorer.load(saved)


def test_a_truncated_or_changed_file_is_refused(saved):
    data = (saved / TENSORS).read_bytes()
    (saved / TENSORS).write_bytes(data[:-8])
    with pytest.raises(SavedScorerError, match=rf"{TENSORS}: {len(data) - 8} bytes, but scorer.json says {len(data)}"):
        NeighborsScorer.load(saved)
    (saved / TENSORS).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(SavedScorerError, match=rf"{TENSORS}: its SHA-256 is not the one"):
        NeighborsScorer.load(saved)
    (saved / TENSORS).write_bytes(data)
    text = (saved / TRAINING).read_text(encoding="utf-8")
    (saved / TRAINING).write_text(text.replace('"score": 0.', '"score": 1.', 1), encoding="utf-8")
    with pytest.raises(SavedScorerError, match=rf"{TRAINING}: .* bytes, but|{TRAINING}: its SHA-256"):
        NeighborsScorer.load(saved)


def test_a_degeneracy_score_that_is_not_five_finite_weights_is_refused(saved):
    """The outlier test's learned score is kept in scorer.json as numbers; one that could not
    be the one fit learned is refused naming the file, and the one saved is read back exactly."""
    fitted_state = json.loads((saved / CONFIG).read_text())["fitted"]["degeneracy"]
    assert NeighborsScorer.load(saved).outside_.degeneracy.weights == tuple(fitted_state["weights"])
    rewrite_config(saved, lambda config: config["fitted"]["degeneracy"]["weights"].pop())
    with pytest.raises(SavedScorerError, match=r"scorer.json: the fitted state cannot be rebuilt \(the degeneracy "
                                               r"score has 4 weights, not 5\)"):
        NeighborsScorer.load(saved)
    rewrite_config(saved, lambda config: config["fitted"]["degeneracy"].update(
        weights=fitted_state["weights"], intercept=float("nan")))
    with pytest.raises(SavedScorerError, match="the degeneracy score's coefficients are not all finite"):
        NeighborsScorer.load(saved)
    rewrite_config(saved, lambda config: config["fitted"].pop("degeneracy"))
    with pytest.raises(SavedScorerError, match="scorer.json: the fitted state cannot be rebuilt"):
        NeighborsScorer.load(saved)


def test_shapes_and_dtypes_must_be_what_the_settings_declare(saved):
    rewrite_config(saved, lambda config: config["tensors"]["ridge_alpha"].__setitem__("shape", [3]))
    with pytest.raises(SavedScorerError, match=rf"{TENSORS}: tensor 'ridge_alpha' is float64 \[90\], but"):
        NeighborsScorer.load(saved)
    rewrite_config(saved, lambda config: config["tensors"]["ridge_alpha"].update(shape=[90], dtype="float32"))
    with pytest.raises(SavedScorerError, match="tensor 'ridge_alpha' is float64"):
        NeighborsScorer.load(saved)


class Planted:
    """Unpickling this writes a file: if a load ever unpickled the tensors, the test sees it."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_pickle_in_place_of_the_tensors_is_refused_without_running(saved, tmp_path):
    marker = tmp_path / "ran"
    with open(saved / TENSORS, "wb") as handle:
        pickle.dump({"tie_rank": Planted(str(marker))}, handle)
    with pytest.raises(SavedScorerError, match=rf"{TENSORS}: .*bytes, but|{TENSORS}: its SHA-256"):
        NeighborsScorer.load(saved)
    torch.save({"tie_rank": Planted(str(marker))}, saved / TENSORS)
    record_file(saved, TENSORS)
    with pytest.raises(SavedScorerError, match=rf"{TENSORS}: not a safetensors file"):
        NeighborsScorer.load(saved)
    assert not marker.exists()


def test_a_folder_that_is_not_a_saved_scorer_is_refused(tmp_path, saved):
    with pytest.raises(SavedScorerError, match=r"nothing: not a saved scorer \(no scorer.json in it\)"):
        NeighborsScorer.load(tmp_path / "nothing")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / CONFIG).write_text('{"model": "bert"}')
    with pytest.raises(SavedScorerError, match=r"notes/scorer.json: not a saved scorer's settings \(no \"format\""):
        NeighborsScorer.load(tmp_path / "notes")
    (tmp_path / "notes" / CONFIG).write_text("not json")
    with pytest.raises(SavedScorerError, match=r"notes/scorer.json: not a saved scorer's settings \(not JSON"):
        NeighborsScorer.load(tmp_path / "notes")
    (saved / TRAINING).unlink()
    with pytest.raises(SavedScorerError, match=rf"{TRAINING}: cannot be read"):
        NeighborsScorer.load(saved)


def test_the_default_scorer_loads_its_encoding_without_encoding_again(data, tmp_path, monkeypatch):
    """The TF-IDF kernel's features and the typicality tables are read, not rebuilt: building
    either is made to fail, and the loaded scorer still gives the saver's bits."""
    scorer = fitted(CASES["tfidf-default"], data)
    folder = scorer.save(tmp_path / "scorer")
    refuse = lambda *args, **kwargs: pytest.fail("load rebuilt what was saved")  # noqa: E731
    monkeypatch.setattr(TfidfFeatures, "fit", refuse)
    monkeypatch.setattr(Typicality, "__init__", refuse)
    loaded = NeighborsScorer.load(folder, device="cpu")
    same_bits(loaded.predict(data[2]), scorer.predict(data[2]))
    assert torch.equal(loaded.similarity(data[2]), scorer.similarity(data[2]))


@pytest.mark.parametrize(("name", "change", "message"), [
    ("kernel.tail_features", lambda tensor: tensor.fill_(1 << 30), "tail entries do not fit"),
    ("kernel.head_columns", lambda tensor: tensor[:-1], "head entries do not fit"),
    ("kernel.head_features", lambda tensor: tensor.fill_(3), "not distinct feature ids"),
    ("kernel.tail_rows", lambda tensor: tensor.flip(0), "row offsets are not those of 90 texts"),
    ("kernel.char3", lambda tensor: tensor.flip(0), "not sorted distinct int64 keys"),
    ("kernel.unigram_ends", lambda tensor: tensor.add_(1), "ends are not increasing up to"),
    ("typicality.tokens_keys", lambda tensor: tensor.flip(0), "typicality tables cannot be read"),
    ("typicality.bigrams_keys", lambda tensor: tensor - (int(tensor[0]) + 1), "typicality tables cannot be read"),
    ("typicality.texts", lambda tensor: tensor.sub_(1000), "number of texts is not one non-negative"),
    ("training.text_ends", lambda tensor: tensor.flip(0), "training texts cannot be read .*ends are not increasing"),
    ("training.texts", lambda tensor: tensor.fill_(0xFF), "training texts cannot be read .*not UTF-8"),
    ("training.scores", lambda tensor: tensor[:-1], "89 scores, but scorer.json says 90"),
    ("training.scores", lambda tensor: tensor.fill_(float("nan")), "training score 0: nan is not a finite number"),
])
def test_a_forged_encoding_is_refused_before_it_is_used(data, tmp_path, name, change, message):
    """Indices out of range in a sparse tensor built without checks would read past its
    memory: every saved encoding tensor is bounded before it is used, even when scorer.json
    vouches for it."""
    folder = fitted(CASES["tfidf-default"], data).save(tmp_path / "scorer")
    forge_tensors(folder, lambda tensors: tensors.__setitem__(name, change(tensors[name].clone()).contiguous()))
    with pytest.raises(SavedScorerError, match=message):
        NeighborsScorer.load(folder, device="cpu")


@pytest.mark.parametrize("strings", [[], [""], ["a", "", "héllo wörld", "日本語", "x\ny", "\x00"]])
def test_strings_pack_into_tensors_and_back(strings):
    data, ends = pack_strings(strings)
    assert data.dtype == torch.uint8 and ends.dtype == torch.int64
    assert unpack_strings(data, ends) == strings


def test_fields_kept_beside_the_training_texts_load_and_save_again(data, tmp_path):
    texts, _, _ = data
    systems = [f"system {index % 3}" for index in range(len(texts))]
    scorer = fitted(CASES["tfidf-default"], data)
    with pytest.raises(ValueError, match="one value per training text"):
        scorer.save(tmp_path / "short", fields={"system": systems[:-1]})
    with pytest.raises(ValueError, match="named other than text and score"):
        scorer.save(tmp_path / "clash", fields={"score": systems})
    folder = scorer.save(tmp_path / "s", fields={"system": systems, "input": [None] * len(texts)})
    loaded = NeighborsScorer.load(folder)
    assert loaded.training_fields_ == {"system": systems, "input": [None] * len(texts)}
    again = NeighborsScorer.load(loaded.save(tmp_path / "again"))  # a loaded scorer keeps them
    assert again.training_fields_ == loaded.training_fields_
    lines = (folder / TRAINING).read_text(encoding="utf-8").splitlines()
    (folder / TRAINING).write_text("\n".join([lines[0].replace('"system"', '"other"'), *lines[1:]]) + "\n",
                                   encoding="utf-8")
    record_file(folder, TRAINING)
    with pytest.raises(SavedScorerError, match=rf"{TRAINING}:1: not a .* record with the fields scorer.json names "
                                               r"\(system, input\)"):
        NeighborsScorer.load(folder)
    (folder / TRAINING).write_text("\n".join([*lines[:4], lines[4] + " " + lines[5], *lines[6:]]) + "\n",
                                   encoding="utf-8")
    record_file(folder, TRAINING)
    with pytest.raises(SavedScorerError, match=rf"{TRAINING}:5: not a JSON line"):
        NeighborsScorer.load(folder)


def test_fields_that_cannot_be_kept_are_refused_by_name_and_leave_no_folder(data, tmp_path):
    """Before: fields=[...] raised AttributeError ('list' object has no attribute 'items'), a
    string was kept one character per text, a value JSON cannot hold raised json's "Object of type
    object is not JSON serializable"; and each refused save (a wrong length too) left an empty
    folder behind. A file where the folder should be was a bare [Errno 17]."""
    texts, _, _ = data
    scorer = fitted(CASES["tfidf-default"], data)
    for fields, error, message in [
        (["a"] * len(texts), TypeError, "fields must be a mapping of names to one value per training text, not list"),
        ({"system": "a" * len(texts)}, TypeError, r"fields\['system'\] must be a sequence of values, .* not str"),
        ({"system": None}, TypeError, r"fields\['system'\] must be a sequence of values, .* not NoneType"),
        ({"system": ["a", object(), *["b"] * (len(texts) - 2)]}, TypeError,
         r"fields\['system'\]\[1\]: <object object at .*> \(object\) is not a JSON value"),
        ({"system": ["a"]}, ValueError, "one value per training text"),
    ]:
        with pytest.raises(error, match=message):
            scorer.save(tmp_path / "refused", fields=fields)
        assert not (tmp_path / "refused").exists()
    (tmp_path / "a-file").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(FileExistsError, match="is a file, not a folder"):
            scorer.save(tmp_path / "a-file", overwrite=overwrite)
    assert (tmp_path / "a-file").read_text() == "mine"
    assert NeighborsScorer.load(scorer.save(tmp_path / "nested" / "s", fields={"n": range(len(texts))})
                                ).training_fields_ == {"n": list(range(len(texts)))}


@pytest.mark.parametrize("settings", [
    {"kernel": "bleu", "estimator": TopK(k=np.int64(5), power=np.float32(2.0))},
    {"kernel": "bleu", "estimator": Ridge(penalty=np.float32(0.5))},
    {"kernel": Bleu(weights=(np.float64(0.5), np.float32(0.5))),
     "estimator": Threshold(tau=np.float64(0.1), min_neighbors=np.int64(2), max_fraction=np.float32(0.5))},
    {"kernel": "bleu", "score_range": (np.float32(0), np.int64(1)), "memory_budget": np.int64(10**8),
     "chunk_size": np.int64(7)},
])
def test_settings_given_as_numpy_numbers_save_and_load(settings, data, tmp_path):
    """Accepted at construction and fit, numpy scalars made save fail with json's "Object of type
    int64 is not JSON serializable" (a grid from np.arange or np.linspace gives them)."""
    scorer = fitted(settings, data)
    loaded = NeighborsScorer.load(scorer.save(tmp_path / "s"))
    _, _, candidates = data
    assert str(loaded.signature) == str(scorer.signature)
    assert loaded.predict(candidates).scores.tobytes() == scorer.predict(candidates).scores.tobytes()


def test_a_training_text_with_a_lone_surrogate_saves_and_loads(data, tmp_path):
    """The tensors pack texts with surrogatepass, but training.jsonl was encoded strictly: save
    failed with "UnicodeEncodeError: 'utf-8' codec can't encode character '\\ud800'"."""
    texts, scores, candidates = data
    odd = [*texts[:-1], "a text read with surrogateescape \udcff here"]
    scorer = NeighborsScorer(kernel="bleu", device="cpu").fit(odd, scores)
    folder = scorer.save(tmp_path / "s", fields={"system": ["x \ud800"] * len(odd)})
    loaded = NeighborsScorer.load(folder)
    assert loaded.kernel_.train_texts == odd and loaded.training_fields_["system"][0] == "x \ud800"
    assert loaded.predict(candidates).scores.tobytes() == scorer.predict(candidates).scores.tobytes()
    assert json.loads((folder / TRAINING).read_text(encoding="utf-8").splitlines()[-1])["text"] == odd[-1]


def test_training_texts_read_back_whatever_they_hold(data, tmp_path):
    """Line separators JSON writes unescaped (U+2028, U+0085, U+001C) stay inside their text; a
    training.jsonl record that is not {"text", "score"} and the fields, a line that is not one
    JSON value, bytes that are not UTF-8, and a text or score that is not the tensors' copy are
    named by line (where scorer.json vouches for the file: a tamperer who edits both)."""
    texts, scores, candidates = data
    odd = [f"{text}{separator}tail" for text, separator in zip(texts, ["\u2028", "\x85", "\x1c", "\r", "\u2029"])]
    scorer = fitted(CASES["tfidf-default"], (odd + texts[len(odd):], scores, candidates))
    folder = scorer.save(tmp_path / "s", fields={"system": ["a"] * len(texts)})
    loaded = NeighborsScorer.load(folder)
    assert list(loaded.kernel_.train_texts[:len(odd)]) == odd and loaded.training_fields_["system"][0] == "a"
    same_bits(loaded.predict(candidates), scorer.predict(candidates))
    lines = (folder / TRAINING).read_bytes().split(b"\n")
    for number, bad, message in [
            (3, lines[2].replace(b'"score"', b'"scores"'), "not a .* record with the fields scorer.json names"),
            (4, lines[3][:-1] + b', "extra": 1}', "not a .* record"),
            (2, lines[1].replace(b'"text": "', b'"text": 7, "x": "'), "not a .* record"),
            (5, lines[4] + b" " + lines[5], "not a JSON line"),
            (6, lines[5].replace(b'"text": "', b'"text": "changed '), "its text or score is not the one"),
            (7, lines[6].replace(b'"score": 0.', b'"score": 1.', 1), "its text or score is not the one")]:
        changed = [*lines[:number - 1], bad, *lines[number + (number == 5):]]
        (folder / TRAINING).write_bytes(b"\n".join(changed))
        record_file(folder, TRAINING)
        with pytest.raises(SavedScorerError, match=rf"{TRAINING}:{number}: {message}"):
            NeighborsScorer.load(folder)
    (folder / TRAINING).write_bytes(b"\n".join([lines[0], b'{"text": "\xff", "score": 0.5}', *lines[2:]]))
    record_file(folder, TRAINING)
    with pytest.raises(SavedScorerError, match=rf"{TRAINING}: not UTF-8 text"):
        NeighborsScorer.load(folder)
