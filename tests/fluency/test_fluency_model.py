"""The fluency statistics of a causal LM (a tiny random Llama built here; the real offline model
where it was fetched): the same numbers in any batch order and size, by text and by token ids,
NaN for a text without a token, SLOR against the model's own unigram table, the start token, the
model's files named by their digest."""
from __future__ import annotations

import itertools
import shutil

import numpy as np
import pytest
import torch

from conftest import ADVERSARIAL_TEXTS, REAL_FLUENCY_MODEL
from fluency_model import tiny_model
from gpu_neighbors.fluency import FittedFluency, model_files
from gpu_neighbors.fluency import model as model_module
from gpu_neighbors.fluency.files import OFFLINE_SHA256, file_digest, is_converted
from gpu_neighbors.fluency.model import LanguageModel, start_token
from gpu_neighbors.fluency.part import ROUNDING


@pytest.fixture(scope="module")
def folder(tmp_path_factory, huse_texts):
    return tiny_model(tmp_path_factory.mktemp("tiny"), huse_texts)


def fresh(folder, dtype=torch.float32, calibration: list[str] | None = None) -> FittedFluency:
    """The model with nothing remembered: each call computes again; its unigram table learned
    from `calibration` where given."""
    fluency = FittedFluency(model_files(folder), dtype, torch.device("cpu"))
    fluency.model.remembered.clear()
    fluency.model.masses.clear()
    if calibration is not None:
        fluency.calibrate(calibration)
        fluency.model.remembered.clear()
    return fluency


def test_batch_order_and_size_change_nothing(folder, huse_texts, monkeypatch):
    texts = huse_texts[:60] + ADVERSARIAL_TEXTS
    calibration = huse_texts[60:160]
    first = fresh(folder, calibration=calibration)
    reference, table = first.of_texts(texts).numpy(), first.unigram
    order = np.random.default_rng(0).permutation(len(texts))
    for rows in (1, 3, 32):
        monkeypatch.setattr(model_module, "BATCH_ROWS", rows)
        fluency = fresh(folder, calibration=[calibration[index] for index in np.random.default_rng(rows).permutation(100)])
        assert torch.equal(fluency.unigram, table)
        shuffled = fluency.of_texts([texts[index] for index in order]).numpy()
        np.testing.assert_array_equal(shuffled, reference[order])
        fluency.model.remembered.clear()
        pieces = np.vstack([fluency.of_texts(texts[first : first + 7]).numpy() for first in range(0, len(texts), 7)])
        np.testing.assert_array_equal(pieces, reference)


def test_statistics_are_the_rounded_mean_log_probability_and_slor(folder, huse_texts):
    """Against a plain forward pass of each text alone, in float64: the mean log-probability of
    its tokens, and SLOR against the table of the model's distributions averaged over the
    calibration texts' positions (with one uniform pseudo-position)."""
    calibration = huse_texts[100:140]
    fluency = fresh(folder, calibration=calibration)
    before = fresh(folder).of_texts(huse_texts[:3]).numpy()
    values = fluency.of_texts(huse_texts[:20] + ["", "   "]).numpy()
    assert np.isnan(values[-2:, :2]).all() and (values[-2:, 2] == 0).all()
    assert np.isnan(before[:, 1]).all() and np.array_equal(before[:, [0, 2]], values[:3, [0, 2]])  # no table yet: no SLOR
    assert np.array_equal(values[:-2] * ROUNDING, np.round(values[:-2] * ROUNDING))
    lm = fluency.model

    def distributions(row: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return lm.model(torch.tensor([row])).logits.double().log_softmax(-1)[0, :-1]

    calibration_rows = {tuple(row) for row in lm.tokenize(calibration)}
    mass = sum(distributions(list(row)).exp().sum(0) for row in calibration_rows)
    positions = sum(len(row) - 1 for row in calibration_rows)
    table = torch.log((mass + 1 / mass.numel()) / (positions + 1))
    assert (fluency.unigram - table).abs().max() <= 0.5 / ROUNDING + 1e-9
    for row, (mean, slor, count) in zip(lm.tokenize(huse_texts[:3]), values[:3]):
        logs = distributions(row)
        exact = logs.gather(-1, torch.tensor(row[1:])[:, None]).sum().item() / (len(row) - 1)
        assert count == len(row) - 1 and abs(mean - exact) <= 1 / ROUNDING
        assert abs(slor - (exact - table[row[1:]].mean().item())) <= 2 / ROUNDING


def test_the_same_calibration_texts_are_read_once(folder, huse_texts, monkeypatch):
    """A second scorer calibrated on the same texts, in any order (`compare` fits one a kernel),
    reuses their summed distributions: the same table, no model pass."""
    first = fresh(folder)
    first.calibrate(huse_texts[:50])
    monkeypatch.setattr(LanguageModel, "sequence_log_probs", lambda *args: pytest.fail("the model ran again"))
    second = FittedFluency(model_files(folder), torch.float32, torch.device("cpu"))  # the same model, loaded once
    statistics = second.calibrate(list(reversed(huse_texts[:50])))
    assert torch.equal(second.unigram, first.unigram) and torch.isfinite(statistics[:, 1]).all()


def test_token_ids_give_the_texts_statistics(folder, huse_texts):
    fluency = fresh(folder, calibration=huse_texts[100:140])
    texts = huse_texts[:40]
    tokenizer = fluency.model.tokenizer
    batch = tokenizer(texts, add_special_tokens=False, padding=True, return_tensors="pt")
    by_ids = fluency.of_ids(batch["input_ids"], batch["attention_mask"]).numpy()
    assert np.isfinite(by_ids).all()
    fluency.model.remembered.clear()
    np.testing.assert_array_equal(by_ids, fluency.of_texts(texts).numpy())
    assert fluency.shares_tokenizer(tokenizer)


def test_left_padded_token_ids_give_the_texts_statistics(folder, huse_texts, monkeypatch):
    """Left padding (a generation batch's usual side), and rows longer than MAX_TOKENS: the
    model read the padding's start tokens before each text and cut the text's end off at
    MAX_TOKENS columns, so estimates moved silently (up to 0.26 on 20 HUSE texts with this
    model) where the kernel, reading the mask as a set, was right."""
    monkeypatch.setattr(model_module, "MAX_TOKENS", 6)
    fluency = fresh(folder, calibration=huse_texts[100:140])
    texts = huse_texts[:40] + ["", "one"]
    tokenizer = fluency.model.tokenizer
    tokenizer.padding_side = "left"
    try:
        batch = tokenizer(texts, add_special_tokens=False, padding=True, return_tensors="pt")
    finally:
        tokenizer.padding_side = "right"
    assert not batch["attention_mask"][:, 0].all()  # padded on the left
    by_ids = fluency.of_ids(batch["input_ids"], batch["attention_mask"]).numpy()
    fluency.model.remembered.clear()
    np.testing.assert_array_equal(by_ids, fluency.of_texts(texts).numpy())


def test_texts_start_after_endoftext(folder):
    tokenizer = fresh(folder).model.tokenizer
    assert start_token(tokenizer) == tokenizer.get_vocab()["<|endoftext|>"]
    assert all(row[0] == start_token(tokenizer) for row in fresh(folder).model.tokenize(["a b", ""]))


def test_weights_are_named_by_their_digest(tmp_path, huse_texts):
    one, other = tiny_model(tmp_path / "one", huse_texts, seed=0), tiny_model(tmp_path / "two", huse_texts, seed=1)
    assert model_files(one).sha256 == model_files(one).sha256 != model_files(other).sha256
    with pytest.raises(ValueError, match="no such GGUF file"):
        model_files(tmp_path / "absent")


@pytest.mark.skipif(REAL_FLUENCY_MODEL is None, reason="the offline model is not fetched (gpu-neighbors fetch-model)")
def test_the_offline_model_judges_english():
    """The real GGUF file (converted once a machine into the models folder, then read back):
    a sentence is likelier than its words reversed or its letters swapped."""
    assert file_digest(REAL_FLUENCY_MODEL) == OFFLINE_SHA256
    fluency = FittedFluency(model_files(REAL_FLUENCY_MODEL), torch.float32, torch.device("cpu"))
    assert fluency.model.start_id == 0  # <|endoftext|>, not the chat token the file declares as BOS
    good = "The committee approved the new budget after a long debate."
    bad = [" ".join(reversed(good.split())), "Teh comimttee apporved teh new bugdet aftre a lnog debaet."]
    values = fluency.of_texts([good, *bad]).numpy()[:, 0]
    assert values[0] > max(values[1:]) + 1.0, values
    assert list(itertools.chain(values)) == list(fluency.of_texts([good, *bad]).numpy()[:, 0])


def damaged(kind: str, folder, tmp_path):
    """A model damaged as a careless copy or an interrupted download leaves it."""
    if kind == "truncated weights":
        copy = tmp_path / "copy"
        shutil.copytree(folder, copy)
        weights = copy / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])
        return copy
    if kind == "weights that are not weights":
        (tmp_path / "junk").mkdir()
        (tmp_path / "junk" / "config.json").write_text("{}")
        (tmp_path / "junk" / "model.safetensors").write_bytes(b"junk")
        return tmp_path / "junk"
    path = tmp_path / "damaged.gguf"
    if kind == "the offline model cut short":
        with REAL_FLUENCY_MODEL.open("rb") as handle:
            path.write_bytes(handle.read(5 << 20))
    else:
        path.write_bytes(b"hello\n")
    return path


@pytest.mark.parametrize("kind", ["truncated weights", "weights that are not weights", "a text file named .gguf",
                                  pytest.param("the offline model cut short", marks=pytest.mark.skipif(
                                      REAL_FLUENCY_MODEL is None, reason="the offline model is not fetched"))])
def test_a_damaged_model_is_refused_in_one_line_naming_it(kind, folder, tmp_path, monkeypatch):
    """transformers fails on each in its own way (a safetensors error, a tokenizer's five-line
    note, numpy's "cannot reshape array of size 3214336 into shape (49152,612)"): each is one
    ValueError naming the model as given."""
    monkeypatch.setenv("GPU_NEIGHBORS_HOME", str(tmp_path / "home"))
    path = damaged(kind, folder, tmp_path)
    with pytest.raises(ValueError) as refused:
        FittedFluency(model_files(path), torch.float32, torch.device("cpu")).model
    message = str(refused.value)
    assert message.startswith(f"fluency model {path}: ") and "\n" not in message, message
    assert not [item for item in (tmp_path / "home").rglob("*") if item.is_dir()]  # nothing half-converted left


def test_an_interrupted_conversion_leaves_no_half_written_folder(folder, tmp_path, monkeypatch):
    """De-quantising a GGUF file writes half a gigabyte into a staging folder: interrupted (here
    while the tokenizer is written, after the weights), it is removed, not left in the models
    folder for good; the next conversion writes the whole folder."""
    import transformers

    monkeypatch.setenv("GPU_NEIGHBORS_HOME", str(tmp_path / "home"))
    source = tmp_path / "tiny.gguf"
    source.write_bytes(b"GGUF stands in for the file")
    files = model_files(source)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)

    class Interrupted:
        def save_pretrained(self, where):
            raise KeyboardInterrupt

    loaded = transformers.AutoModelForCausalLM.from_pretrained(folder)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *args, **kwargs: loaded)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *args, **kwargs: Interrupted())
    with pytest.raises(KeyboardInterrupt):
        model_module.convert(files)
    assert list(files.folder.parent.iterdir()) == []
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *args, **kwargs: tokenizer)
    model_module.convert(files)
    assert [item.name for item in files.folder.parent.iterdir()] == [files.folder.name]
    assert is_converted(files.folder)


def test_loading_shows_no_progress_bar(folder, tmp_path, capfd):
    """transformers draws a "Loading weights" bar on stderr at every load: `score --quiet`
    printed it; the load takes under a second and says nothing."""
    capfd.readouterr()
    LanguageModel._read(model_files(folder), torch.device("cpu"), torch.float32)  # not the once-a-process `load`
    assert "Loading weights" not in capfd.readouterr().err


def test_a_damaged_converted_copy_is_named_with_the_way_out(folder, tmp_path, monkeypatch):
    """A GGUF file's converted folder damaged after its conversion (a disk filled, a copy cut
    short): the GGUF file itself is sound, so the error names the folder and says to remove it;
    removed, the next load converts again."""
    monkeypatch.setenv("GPU_NEIGHBORS_HOME", str(tmp_path / "home"))
    source = tmp_path / "tiny.gguf"
    source.write_bytes(b"GGUF stands in for the file")
    files = model_files(source)
    shutil.copytree(damaged("truncated weights", folder, tmp_path), files.folder)
    (files.folder / "converted.json").write_text("{}\n")
    with pytest.raises(ValueError) as refused:
        FittedFluency(files, torch.float32, torch.device("cpu")).model
    message = str(refused.value)
    assert message.startswith(f"fluency model {source}: its converted copy {files.folder} cannot be loaded (")
    assert message.endswith("remove that folder, and the next load converts the file again") and "\n" not in message


def test_a_lone_surrogate_is_read_as_the_replacement_character(folder):
    """The library takes texts with lone surrogates (JSON's "\\ud800" escape; the kernels read
    them as code points), but the tokenizer's Rust side raised TypeError ('TextEncodeInput must
    be Union[...]') on them, in fit and predict alike, wherever fluency ran."""
    fluency = fresh(folder)
    texts = ["the \ud800 report", "the \udfff\ud800 report"]
    replaced = ["the \ufffd report", "the \ufffd\ufffd report"]
    np.testing.assert_array_equal(fluency.of_texts(texts).numpy(), fluency.of_texts(replaced).numpy())
