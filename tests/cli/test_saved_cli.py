"""`gpu-neighbors fit --save` and `score --scorer`: fit once, score with the saved scorer; the same
bytes as fitting in the run; a resumed run refuses another scorer; the training and metric
entry points take a saved scorer's folder."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import write_jsonl
from gpu_neighbors import NeighborsQuality, NeighborsScorer, reward_function
from gpu_neighbors.cli import main
from gpu_neighbors.evaluation.agreement import agreement


@pytest.fixture(scope="module")
def files(tmp_path_factory, huse_records):
    folder = tmp_path_factory.mktemp("saved_cli")
    train = write_jsonl(folder / "train.jsonl", huse_records[:120])
    candidates = write_jsonl(folder / "candidates.jsonl", [{"text": r["text"]} for r in huse_records[120:170]])
    return train, candidates


def test_score_with_a_saved_scorer_writes_the_bytes_of_a_fitting_run(files, tmp_path, capsys):
    train, candidates = files
    for options in ([], ["--kernel", "bleu", "--estimator", "threshold"]):
        folder = tmp_path / f"scorer{len(options)}"
        assert main(["fit", "--train", str(train), "--save", str(folder), "--device", "cpu", *options]) == 0
        printed = capsys.readouterr().out
        assert f"saved -> {folder} (120 training texts; tuned by leave-one-out: rho " in printed
        assert str(NeighborsScorer.load(folder).signature) in printed
        fitted, loaded = tmp_path / f"fitted{len(options)}.jsonl", tmp_path / f"loaded{len(options)}.jsonl"
        assert main(["score", "--train", str(train), "--candidates", str(candidates), "--output", str(fitted),
                     "--device", "cpu", "--quiet", "--explain", "2", "--explain-text", *options]) == 0
        assert main(["score", "--scorer", str(folder), "--candidates", str(candidates), "--output", str(loaded),
                     "--device", "cpu", "--quiet", "--explain", "2", "--explain-text"]) == 0
        assert loaded.read_bytes() == fitted.read_bytes()
        meta = json.loads((tmp_path / f"loaded{len(options)}.jsonl.meta.json").read_text())
        assert meta["header"]["scorer"] == str(folder.resolve()) and len(meta["header"]["scorer_sha256"]) == 64


def test_train_or_scorer_one_of_them(files, tmp_path, capsys):
    train, candidates = files
    assert main(["score", "--candidates", str(candidates), "--output", str(tmp_path / "o.jsonl")]) == 2
    assert "give --train FILE (the scorer is fitted here) or --scorer FOLDER" in capsys.readouterr().err
    assert main(["score", "--scorer", str(tmp_path), "--candidates", str(candidates),
                 "--output", str(tmp_path / "o.jsonl")]) == 2
    assert "not a saved scorer (no scorer.json in it)" in capsys.readouterr().err
    folder = tmp_path / "s"
    assert main(["fit", "--train", str(train), "--save", str(folder), "--device", "cpu"]) == 0
    assert main(["fit", "--train", str(train), "--save", str(folder), "--device", "cpu"]) == 2
    assert "a saved scorer is already there" in capsys.readouterr().err
    assert main(["fit", "--train", str(train), "--save", str(folder), "--device", "cpu", "--overwrite"]) == 0


def test_resume_refuses_another_scorer(files, tmp_path, capsys):
    train, candidates = files
    first, second = tmp_path / "first", tmp_path / "second"
    assert main(["fit", "--train", str(train), "--save", str(first), "--device", "cpu"]) == 0
    assert main(["fit", "--train", str(train), "--save", str(second), "--device", "cpu", "--kernel", "rouge"]) == 0
    broken = write_jsonl(tmp_path / "broken.jsonl",
                         [json.loads(line) for line in candidates.read_text(encoding="utf-8").splitlines()[:20]]
                         + [{"no text": 1}])
    output = tmp_path / "out.jsonl"
    base = ["score", "--candidates", str(broken), "--output", str(output), "--device", "cpu", "--quiet"]
    assert main([*base, "--scorer", str(first), "--batch-size", "8"]) == 2  # stops at the bad line
    assert "broken.jsonl:21" in capsys.readouterr().err
    assert main([*base, "--scorer", str(second), "--resume"]) == 2
    error = capsys.readouterr().err
    assert "cannot resume: the earlier run used other settings (" in error and "scorer: " in error, error


def test_rewards_and_the_metric_take_a_saved_folder(huse_texts, huse_scores, tmp_path):
    scorer = NeighborsScorer(kernel="bleu", device="cpu").fit(huse_texts[:80], huse_scores[:80])
    folder = scorer.save(tmp_path / "s")
    completions = huse_texts[80:90]
    assert reward_function(folder)(prompts=[""] * 10, completions=completions) == \
        reward_function(scorer)(prompts=[""] * 10, completions=completions)
    metric = NeighborsQuality(str(folder))
    metric.update(completions)
    expected = NeighborsQuality(scorer)
    expected.update(completions)
    assert np.array_equal(metric.compute()["quality"].numpy(), expected.compute()["quality"].numpy())
    with pytest.raises(TypeError, match="fitted NeighborsScorer, a BleuReward or a RougeReward"):
        reward_function(3)


def test_systems_with_a_saved_scorer_prints_what_a_fitting_run_prints(huse_records, tmp_path, capsys):
    """`fit --keep-fields source` keeps each training text's system beside it, so `systems
    --scorer` makes the training set's leave-one-out comparison as `systems --train` does, and
    the candidates' comparison; without the field kept it says how to keep it."""
    records = [{**record, "input": index // 2} for index, record in enumerate(huse_records[:140])]
    train = write_jsonl(tmp_path / "train.jsonl", records)
    candidates = write_jsonl(tmp_path / "candidates.jsonl",
                             [{"text": r["text"], "system": ["a", "b"][i % 2]} for i, r in enumerate(huse_records[140:])])
    draws = ["--resamples", "100", "--trials", "100", "--device", "cpu", "--quiet", "--json"]
    kept, bare = tmp_path / "kept", tmp_path / "bare"
    assert main(["fit", "--train", str(train), "--save", str(kept), "--keep-fields", "source,input", "--device", "cpu"]) == 0
    assert main(["fit", "--train", str(train), "--save", str(bare), "--device", "cpu"]) == 0
    capsys.readouterr()
    assert [json.loads(line)["source"] for line in (kept / "training.jsonl").read_text().splitlines()] == \
        [r["source"] for r in records]
    assert main(["systems", "--train", str(train), "--system-field", "source", *draws]) == 0
    fitted = json.loads(capsys.readouterr().out)
    assert main(["systems", "--scorer", str(kept), "--system-field", "source", *draws]) == 0
    assert json.loads(capsys.readouterr().out) == fitted
    assert fitted["training"] is not None
    assert main(["systems", "--train", str(train), "--candidates", str(candidates), "--system-field", "system",
                 *draws]) == 0
    expected = json.loads(capsys.readouterr().out)["candidates"]
    assert sorted(row["system"] for row in expected["systems"]) == ["a", "b"]
    for folder in (kept, bare):
        assert main(["systems", "--scorer", str(folder), "--candidates", str(candidates), "--system-field", "system",
                     *draws]) == 0
        assert json.loads(capsys.readouterr().out)["candidates"] == expected
    assert main(["systems", "--scorer", str(bare), "--system-field", "source", *draws]) == 2
    assert "field 'source': no field 'source' in the training data (save the scorer with fit --keep-fields" in \
        capsys.readouterr().err
    assert main(["fit", "--train", str(train), "--save", str(tmp_path / "x"), "--keep-fields", "nowhere"]) == 2
    assert "train.jsonl: field 'nowhere': no record has it (--keep-fields)" in capsys.readouterr().err
    assert main(["fit", "--train", str(train), "--save", str(tmp_path / "x"), "--keep-fields", "text"]) == 2
    assert "--keep-fields: text is kept already" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["systems", "--scorer", str(kept), "--train", str(train), "--system-field", "source"])
    assert "argument --train: not allowed with argument --scorer" in capsys.readouterr().err


def test_evaluate_measures_a_saved_scorer_on_held_out_data(files, huse_records, tmp_path, capsys):
    """evaluate --scorer: the saved scorer's estimates of --data's texts against their scores
    (the numbers of predict and agreement on them), interval coverage, the flagged share, and the
    checklist on those texts."""
    train, _ = files
    held = write_jsonl(tmp_path / "held.jsonl", huse_records[120:])
    folder = tmp_path / "scorer"
    assert main(["fit", "--train", str(train), "--save", str(folder), "--device", "cpu"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--scorer", str(folder), "--data", str(held), "--json", "--checklist"]) == 0
    result = json.loads(capsys.readouterr().out)
    scorer = NeighborsScorer.load(folder)
    truth = np.array([r["score"] for r in huse_records[120:]])
    prediction = scorer.predict([r["text"] for r in huse_records[120:]])
    assert result["spearman"] == pytest.approx(agreement(prediction, truth).spearman, abs=1e-12)
    inside = (prediction.low <= truth) & (truth <= prediction.high)
    assert result["interval_coverage"] == pytest.approx(inside[prediction.covered].mean(), abs=1e-12)
    assert result["outside"] == pytest.approx(prediction.outside.mean(), abs=1e-12)
    assert [row["perturbation"] for row in result["checklist"]["rows"]][:2] == ["shuffled", "repeated"]
    assert main(["evaluate", "--scorer", str(folder), "--data", str(held), "--checklist", "--heldout", str(held)]) == 2
    assert "--heldout is for a scorer fitted here" in capsys.readouterr().err


@pytest.mark.parametrize("options", [["--kernel", "bleu"], ["--tau", "0.3"], ["--tune"], ["--level", "0.8"]])
def test_fitting_options_with_a_saved_scorer_are_refused(files, tmp_path, capsys, options):
    train, candidates = files
    folder = tmp_path / "scorer"
    assert main(["fit", "--train", str(train), "--save", str(folder), "--device", "cpu"]) == 0
    capsys.readouterr()
    assert main(["score", "--scorer", str(folder), "--candidates", str(candidates), "--output",
                 str(tmp_path / "out.jsonl"), "--device", "cpu", "--quiet", *options]) == 2
    assert f"{options[0]}: fitting settings, and a saved scorer (--scorer) keeps those" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()


def test_a_memory_budget_applies_to_a_saved_scorer(files, tmp_path, capsys):
    """--memory-budget is a run setting (the tiles' working memory; no result changes with it),
    so it goes with --scorer as --device does: a budget of a few tiles' rows gives the same bytes
    as the saved scorer's own, and the scorer runs under it."""
    train, candidates = files
    folder = tmp_path / "scorer"
    assert main(["fit", "--train", str(train), "--save", str(folder), "--device", "cpu"]) == 0
    outputs = []
    for budget in ([], ["--memory-budget", "64K"]):
        output = tmp_path / f"out{len(outputs)}.jsonl"
        assert main(["score", "--scorer", str(folder), "--candidates", str(candidates), "--output", str(output),
                     "--device", "cpu", "--quiet", *budget]) == 0, capsys.readouterr().err
        outputs.append(output.read_bytes())
    assert outputs[0] == outputs[1]
    assert NeighborsScorer.load(folder, memory_budget=1 << 16).memory_budget == 1 << 16
    with pytest.raises(ValueError, match="memory_budget"):
        NeighborsScorer.load(folder, memory_budget=0)
