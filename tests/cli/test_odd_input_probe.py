"""What a careless or unlucky command line gave before: output files whose names said another
format than they held, errors that named no file or flag, and runs on too few scored texts that
ended in an internal message or exited 0 with nothing measured. Each case failed once."""
from __future__ import annotations

import pytest

from conftest import write_jsonl
from gpu_neighbors.cli import main


@pytest.fixture(scope="module")
def files(tmp_path_factory, huse_records):
    folder = tmp_path_factory.mktemp("odd_input")
    train = write_jsonl(folder / "train.jsonl", [{"text": r["text"], "score": r["score"]} for r in huse_records[:30]])
    candidates = folder / "c.txt"
    candidates.write_text("".join(r["text"] + "\n" for r in huse_records[30:40]), encoding="utf-8")
    empty = folder / "empty.txt"
    empty.write_text("", encoding="utf-8")
    one = folder / "one.txt"
    one.write_text("a single text\n", encoding="utf-8")
    return {"train": train, "candidates": candidates, "empty": empty, "one": one}


def one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-neighbors: error: "), lines
    return lines[0]


def filled(argv: list[str], files: dict, tmp_path) -> list[str]:
    return [part.format(tmp=tmp_path, **files) for part in argv]


@pytest.mark.parametrize("argv, flag", [
    (["score", "--train", "{train}", "--kernel", "bleu", "--candidates", "{candidates}", "--output", "{tmp}/o.csv",
      "--quiet"], "--output"),
    (["score", "--train", "{train}", "--kernel", "bleu", "--candidates", "{candidates}", "--output", "{tmp}/o.jsonl",
      "--skip-bad", "--rejects", "{tmp}/bad.tsv", "--quiet"], "--rejects"),
    (["self-bleu", "--data", "{candidates}", "--output", "{tmp}/o.parquet"], "--output"),
    (["self-bleu", "--data", "{candidates}", "--output", "{tmp}/o.tsv"], "--output"),
    (["mbr", "--candidates", "{candidates}", "--output", "{tmp}/o.csv"], "--output"),
])
def test_a_json_lines_output_under_another_format_s_name_is_refused(files, tmp_path, capsys, argv, flag):
    """`score --output o.csv`, `self-bleu --output o.parquet` and `mbr --output o.csv` wrote JSON
    Lines under those names and exited 0: read back (`--candidates o.csv`), they are misread."""
    capsys.readouterr()
    assert main(filled(argv, files, tmp_path)) == 2
    line = one_error_line(capsys)
    assert flag in line and "JSON Lines" in line
    assert not any(tmp_path.iterdir())


def test_a_json_lines_name_and_parquet_for_score_are_still_taken(files, tmp_path, capsys):
    for name in ("o.json", "o.ndjson", "o.txt"):
        assert main(["self-bleu", "--data", str(files["candidates"]), "--output", str(tmp_path / name)]) == 0
        assert (tmp_path / name).read_text().startswith('{"index": 0')


@pytest.mark.parametrize("argv, message", [
    (["pairs", "--candidates", "{empty}", "--output", "{tmp}/p.npy"], "empty.txt: --candidates holds no texts"),
    (["pairs", "--candidates", "{candidates}", "--train", "{empty}", "--output", "{tmp}/p.npy"],
     "empty.txt: --train holds no texts"),
    (["pairs", "--candidates", "{one}", "--output", "{tmp}/p.npy"], "one.txt: --candidates holds one text"),
    (["pairs", "--candidates", "{candidates}", "--output", "{tmp}/p.npy", "--top-k", "3"], "--top-k"),
    (["pairs", "--candidates", "{candidates}", "--output", "{tmp}/p.npy", "--min-similarity", "0.1"],
     "--min-similarity"),
    (["pairs", "--candidates", "{candidates}", "--output", "{tmp}/p.parquet"], "--top-k K or --min-similarity T"),
])
def test_pairs_names_the_file_or_flag_it_refuses(files, tmp_path, capsys, argv, message):
    """`pairs` said "candidates: 0 texts; need at least 1" (no file) and "top_k and min_similarity
    select pairs" (the Python names, not the flags)."""
    capsys.readouterr()
    assert main(filled(argv, files, tmp_path)) == 2
    assert message in one_error_line(capsys)
    assert not any(tmp_path.iterdir())


@pytest.fixture(scope="module")
def few(tmp_path_factory, huse_records):
    """Scored files of 1 to 5 texts."""
    folder = tmp_path_factory.mktemp("few")
    return {f"t{count}": write_jsonl(folder / f"t{count}.jsonl",
                                     [{"text": r["text"], "score": r["score"]} for r in huse_records[:count]])
            for count in range(1, 6)}


@pytest.mark.parametrize("argv, message", [
    (["crossval", "--data", "{t2}", "--folds", "loo"],
     "t2.jsonl: 2 scored texts: leave-one-out needs at least 3 for the TF-IDF + ridge baseline (--no-baselines"),
    (["crossval", "--data", "{t3}", "--folds", "2"], "t3.jsonl: --folds 2: 3 scored texts in 2 folds leave 1"),
    (["crossval", "--data", "{t4}", "--folds", "2", "--tune", "--no-baselines"],
     "t4.jsonl: --folds 2: 4 scored texts in 2 folds leave 2 to train on, too few for --tune: it takes 3"),
    (["evaluate", "--data", "{t3}", "--tune"], "t3.jsonl: 3 scored texts: leave-one-out needs at least 4 for --tune"),
    (["compare", "--data", "{t1}", "--kernels", "bleu", "--no-baselines"], "t1.jsonl: 1 scored text: leave-one-out"),
    (["compare", "--data", "{t2}", "--kernels", "bleu"], "t2.jsonl: 2 scored texts: leave-one-out needs at least 3"),
    (["sweep", "--data", "{t1}"], "t1.jsonl: 1 scored text: leave-one-out needs at least 2"),
    (["curve", "--data", "{t1}"], "t1.jsonl: 1 scored text: leave-one-out needs at least 2"),
    (["report", "--data", "{t5}", "--out", "{tmp}/report", "--kernels", "bleu"],
     "t5.jsonl: --folds 10: more folds than its 5 scored texts"),
    (["report", "--data", "{t5}", "--out", "{tmp}/report", "--kernels", "bleu", "--folds", "2"],
     "t5.jsonl: --folds 2: 5 scored texts in 2 folds leave 2 to train on, too few for the report's tuning"),
    (["fit", "--train", "{t2}", "--save", "{tmp}/scorer", "--tune"], "t2.jsonl: 2 scored texts: --tune needs at least 3"),
    (["cross-task", "--train", "{t2}", "--test", "{t3}", "--tune"], "t2.jsonl: 2 scored texts: --tune needs at least 3"),
])
def test_too_few_scored_texts_are_refused_naming_the_file_and_flag(few, tmp_path, capsys, argv, message):
    """Too few texts for a protocol ended in an internal message naming neither file nor flag
    ("tuning needs at least 3 training items, got 2", "nested kernel ridge needs an [n, n]
    matrix", "folds must be between 2 and the number of items"), after a row was printed; or
    (compare, sweep on one text) exited 0 with rows of nothing measured."""
    capsys.readouterr()
    assert main(filled(argv, few, tmp_path)) == 2
    assert message in one_error_line(capsys)
    assert not any(tmp_path.iterdir())


def test_the_fewest_texts_each_protocol_takes_still_run(few, tmp_path, capsys):
    assert main(["crossval", "--data", str(few["t4"]), "--folds", "2"]) == 0
    assert main(["compare", "--data", str(few["t3"]), "--kernels", "bleu"]) == 0
    assert main(["evaluate", "--data", str(few["t4"]), "--tune"]) == 0


@pytest.mark.parametrize("command", [["evaluate"], ["crossval", "--no-baselines"], ["compare", "--kernels", "bleu",
                                                                                   "--no-baselines"]])
def test_scores_all_alike_are_warned_about(tmp_path, huse_records, capsys, command):
    """Scores all alike (a column of defaults) printed spearman nan or — and exited 0, saying
    nothing of why."""
    data = write_jsonl(tmp_path / "same.jsonl", [{"text": r["text"], "score": 0.5} for r in huse_records[:12]])
    capsys.readouterr()
    assert main([command[0], "--data", str(data), *command[1:]]) == 0
    printed = capsys.readouterr()
    assert (f"gpu-neighbors: warning: {data}: every score is 0.5, so agreement with them (spearman, pearson) "
            "is undefined") in printed.err
    assert "nan" not in printed.out  # an undefined figure is a dash in every command's print (evaluate's read nan)
    assert "—" in printed.out, printed.out


def test_test_scores_all_alike_are_warned_about_in_cross_task(tmp_path, huse_records, capsys):
    """cross-task --test with every score alike printed spearman — and said nothing of why, where
    evaluate, crossval and compare warn."""
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": r["text"], "score": r["score"]} for r in huse_records[:30]])
    test = write_jsonl(tmp_path / "same.jsonl", [{"text": r["text"], "score": 0.5} for r in huse_records[30:42]])
    capsys.readouterr()
    assert main(["cross-task", "--train", str(train), "--test", str(test), "--kernel", "bleu"]) == 0
    assert (f"gpu-neighbors: warning: {test}: every score is 0.5, so agreement with them (spearman, pearson) "
            "is undefined") in capsys.readouterr().err
