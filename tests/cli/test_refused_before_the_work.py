"""Command lines that cannot do what they ask: each is one error line (exit status 2) before the
work, with no input touched, or a warning where a flag given changes nothing. Each case once
failed (a traceback, a saved scorer overwritten, a bad value run with the default)."""
from __future__ import annotations

import pytest

from conftest import write_jsonl
from gpu_neighbors.cli import main


@pytest.fixture(scope="module")
def files(tmp_path_factory, huse_records):
    folder = tmp_path_factory.mktemp("input_audit")
    train = write_jsonl(folder / "train.jsonl",
                        [{"text": r["text"], "score": r["score"], "source": r["source"]} for r in huse_records[:60]])
    candidates = write_jsonl(folder / "c.jsonl", [{"text": r["text"], "source": r["source"]} for r in huse_records[60:80]])
    scorer = folder / "scorer"
    assert main(["fit", "--train", str(train), "--save", str(scorer), "--kernel", "bleu", "--device", "cpu",
                 "--keep-fields", "source"]) == 0
    return {"train": train, "candidates": candidates, "scorer": scorer}


def one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-neighbors: error: "), lines
    return lines[0]


@pytest.mark.parametrize("name", ["tensors.safetensors", "training.jsonl"])
@pytest.mark.parametrize("command", ["score", "systems"])
def test_no_output_overwrites_a_file_of_the_saved_scorer_it_reads(files, capsys, name, command):
    """`score --scorer S --output S/training.jsonl --overwrite` replaced the scorer's training texts
    with the results (only S/scorer.json was counted as an input): the scorer no longer loaded."""
    target = files["scorer"] / name
    before = target.read_bytes()
    capsys.readouterr()
    if command == "score":
        argv = ["score", "--scorer", str(files["scorer"]), "--candidates", str(files["candidates"]),
                "--output", str(target), "--overwrite", "--quiet", "--device", "cpu"]
    else:
        argv = ["systems", "--scorer", str(files["scorer"]), "--candidates", str(files["candidates"]),
                "--system-field", "source", "--json", "--save", str(target), "--overwrite", "--resamples", "20",
                "--trials", "20", "--device", "cpu", "--quiet"]
    assert main(argv) == 2
    assert f"and --scorer's {name} are the same file" in one_error_line(capsys)
    assert target.read_bytes() == before


@pytest.mark.parametrize("argv, flag", [
    (["self-bleu", "--data", "{candidates}", "--output", "-"], "--output"),
    (["mbr", "--candidates", "{candidates}", "--output", "-"], "--output"),
    (["pairs", "--candidates", "{candidates}", "--output", "-"], "--output"),
    (["systems", "--train", "{train}", "--system-field", "source", "--save", "-", "--resamples", "20",
      "--trials", "20"], "--save"),
    (["report", "--data", "{train}", "--out", "{tmp}/report", "--page", "-", "--kernels", "bleu"], "--page"),
    (["score", "--train", "{train}", "--kernel", "bleu", "--candidates", "{candidates}", "--output", "{tmp}/o.jsonl",
      "--skip-bad", "--rejects", "-", "--quiet"], "--rejects"),
])
def test_standard_output_where_a_command_writes_a_file_is_refused(files, tmp_path, monkeypatch, capsys, argv, flag):
    """`-` as an output other than score's --output: self-bleu, mbr and pairs ended in an
    IndexError traceback, systems --save in "- is not one of this run's outputs" after the whole
    run, report --page - and score --rejects - exited 0 having written the page nowhere and the
    rejected records to a stray file named -.partial."""
    monkeypatch.chdir(tmp_path)  # where a file named - or -.partial would be written
    capsys.readouterr()
    names = {"train": files["train"], "candidates": files["candidates"], "tmp": tmp_path}
    assert main([part.format(**names) for part in argv] + ["--device", "cpu"]) == 2
    line = one_error_line(capsys)
    assert f"-: {flag} is written to a file, not to standard output: give a file path" in line, line
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where, message", [
    ("scorer", "scorer.json: a saved scorer is already there; pass --overwrite to replace it"),
    ("file", "is a file, not a folder to save a scorer in"),
    ("folder", "holds notes.txt, not a saved scorer: choose an empty folder"),
])
def test_fit_refuses_a_save_folder_it_cannot_write_before_fitting(files, tmp_path, monkeypatch, capsys, where,
                                                                     message):
    """fit --save onto an existing scorer, a file or a folder of other files fitted first (minutes
    on a large set) and only then failed, for a scorer in Python's words ("give overwrite=True")."""
    import gpu_neighbors.cli.commands as commands

    def never(*args, **kwargs):
        raise AssertionError("fitted although the folder cannot be written")

    monkeypatch.setattr(commands, "fit_on_file", never)
    target = {"scorer": files["scorer"], "file": files["train"], "folder": tmp_path}[where]
    (tmp_path / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main(["fit", "--train", str(files["train"]), "--save", str(target), "--kernel", "bleu",
                 "--device", "cpu"]) == 2
    assert message in one_error_line(capsys)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_report_refuses_an_unknown_kernel_name_before_the_work(files, tmp_path, capsys):
    """report --kernels bleu,nosuch exited 0 with a report that said "nosuch could not be
    evaluated", where compare --kernels refuses the same typo at once."""
    capsys.readouterr()
    assert main(["report", "--data", str(files["train"]), "--out", str(tmp_path / "r"), "--kernels", "bleu,nosuch",
                 "--device", "cpu"]) == 2
    assert "--kernels: unknown kernel 'nosuch'; choose one of bleu, rouge" in one_error_line(capsys)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("argv, message", [
    (["crossval", "--data", "{train}", "--folds", "61"], "train.jsonl: --folds 61: more folds than its 60 scored texts"),
    (["curve", "--data", "{train}", "--sizes", "20,61", "--runs", "1"],
     "train.jsonl: --sizes 61: a subset holds from 2 texts to all its 60 scored texts"),
    (["curve", "--data", "{train}", "--sizes", "1", "--runs", "1"],
     "train.jsonl: --sizes 1: a subset holds from 2 texts"),
    (["sweep", "--data", "{train}", "--parameter", "a", "--values", "0,1"], "--values: a must be a whole number >= 1"),
    (["sweep", "--data", "{train}", "--parameter", "b", "--values", "0.5,2"], "--values: b must be in (0, 1], not 2.0"),
])
def test_settings_the_data_rules_out_name_their_flag(files, capsys, argv, message):
    """Settings checked against the number of texts were refused in the library's words, naming
    neither flag nor file: "folds must be between 2 and the number of items (60), not 61",
    "subset size 61 must be between 2 and ...", "a must be a whole number >= 1, not 0.0"."""
    capsys.readouterr()
    assert main([part.format(train=files["train"]) for part in argv] + ["--kernel", "bleu", "--device", "cpu"]) == 2
    assert message in one_error_line(capsys)


@pytest.mark.parametrize("options", [["--kernel", "bleu"], ["--tau", "0.2"]])
def test_a_kernel_list_that_one_kernel_never_reads_is_warned_about(files, capsys, options):
    """--kernels with one kernel (given, or bleu from a paper setting) was dropped without the
    warning the library gives: the command line removed it before the parts were made."""
    capsys.readouterr()
    assert main(["evaluate", "--data", str(files["train"]), "--kernels", "rouge,tfidf", *options,
                 "--device", "cpu"]) == 0
    assert ("gpu-neighbors: warning: kernels (--kernels) = rouge,tfidf is read only with kernel 'auto' or "
            "'combined': it changes no estimate") in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["evaluate", "--data", "{train}", "--kernel", "tfidf"],
    ["pairs", "--candidates", "{candidates}", "--output", "{tmp}/p.npy", "--kernel", "tfidf"],
    ["mbr", "--candidates", "{candidates}", "--output", "{tmp}/m.jsonl", "--kernel", "tfidf"],
])
def test_a_tokenizer_the_kernel_never_reads_is_warned_about(files, tmp_path, capsys, argv):
    """--kernel tfidf --tokenizer 13a --lowercase ran tfidf's own analyzers without a word, where
    --smoothing with rouge is refused and an estimator's unread flag is warned about."""
    capsys.readouterr()
    names = {"train": files["train"], "candidates": files["candidates"], "tmp": tmp_path}
    assert main([part.format(**names) for part in argv] + ["--tokenizer", "13a", "--lowercase", "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    for flag, value in (("tokenizer", "'13a'"), ("lowercase", "True")):
        assert (f"gpu-neighbors: warning: {flag} (--{flag}) = {value} is not read by the tfidf kernel, which "
                "tokenizes in its own way: it changes no estimate") in err, err


def test_a_training_text_without_the_pair_field_is_named(tmp_path, huse_records, capsys):
    """One training text without --pair-field's field made the whole training comparison
    unpaired without a word; one without --system-field's field is refused naming its line."""
    records = [{"text": r["text"], "score": r["score"], "sys": "AB"[i % 2], "input": str(i // 2)}
               for i, r in enumerate(huse_records[:40])]
    del records[6]["input"]
    train = write_jsonl(tmp_path / "train.jsonl", records)
    assert main(["systems", "--train", str(train), "--system-field", "sys", "--pair-field", "input",
                 "--resamples", "20", "--trials", "20", "--kernel", "bleu", "--device", "cpu", "--quiet"]) == 2
    assert "train.jsonl:7: field 'input': missing, though other training texts have it" in one_error_line(capsys)


@pytest.mark.parametrize("argv, flag", [
    (["report", "--data", "d.jsonl", "--out", "r", "--sizes", ""], "--sizes"),
    (["curve", "--data", "d.jsonl", "--sizes", " , "], "--sizes"),
    (["sweep", "--data", "d.jsonl", "--parameter", "tau", "--values", ""], "--values"),
])
def test_an_empty_list_of_values_is_refused_by_its_parser(argv, flag, capsys):
    """report --sizes '' ran the whole report and ended in an IndexError traceback drawing an
    empty curve; curve and sweep printed an empty table and exited 0."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert f"argument {flag}: " in one_error_line(capsys)


@pytest.mark.parametrize("argv, flags", [
    (["score", "--train", "-", "--kernel", "bleu", "--candidates", "-", "--output", "{tmp}/o.jsonl"],
     "--train and --candidates"),
    (["pairs", "--candidates", "-", "--train", "-", "--output", "{tmp}/p.npy"], "--candidates and --train"),
    (["systems", "--train", "-", "--candidates", "-", "--system-field", "source"], "--train and --candidates"),
])
def test_two_inputs_from_standard_input_are_refused(files, tmp_path, monkeypatch, capsys, argv, flags):
    """score --train - --candidates - read the training set from the pipe, left the candidates
    nothing, and exited 0 having scored 0 candidates."""
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(files["train"].read_bytes()))))
    capsys.readouterr()
    assert main([part.format(tmp=tmp_path) for part in argv] + ["--device", "cpu"]) == 2
    assert f"-: {flags} are both standard input, which can be read only once" in one_error_line(capsys)
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kernel, kernels", [("auto", "auto"), ("combined", "bleu,auto"), ("auto", "combined")])
def test_auto_or_combined_in_the_kernel_list_is_one_error_line(files, capsys, kernel, kernels):
    """--kernel auto --kernels auto ended in a TypeError traceback (Auto() takes no tokenizer)."""
    capsys.readouterr()
    assert main(["evaluate", "--data", str(files["train"]), "--kernel", kernel, "--kernels", kernels,
                 "--device", "cpu"]) == 2
    assert "kernels (--kernels): " in one_error_line(capsys)


def test_a_model_folder_without_a_known_layer_names_the_flag(files, tmp_path, capsys):
    """The refusal told the command-line user to "pass kernel_options={'layer': N}"."""
    capsys.readouterr()
    assert main(["evaluate", "--data", str(files["train"]), "--kernel", "bertscore", "--model", str(tmp_path),
                 "--device", "cpu"]) == 2
    line = one_error_line(capsys)
    assert "no default layer for BERTScore model" in line and "--layer N on the command line" in line, line


@pytest.mark.parametrize("command, kernels, named", [
    ("compare", "bleu,tfidf,bleu", "bleu"),
    ("compare", "bleu, tfidf ,tfidf", "tfidf"),
    ("report", "bleu,bleu", "bleu"),
    ("report", "bleu:tau=0.08,bleu:tau=0.080", "bleu:tau=0.08"),
])
def test_a_kernel_named_twice_is_refused_before_the_work(files, tmp_path, fits_seen, capsys, command, kernels, named):
    """compare --kernels bleu,tfidf,bleu ran bleu twice and printed two equal rows; report
    --kernels bleu,bleu wrote every table row twice and one checklist section of the two."""
    capsys.readouterr()
    out = ["--out", str(tmp_path / "r")] if command == "report" else []
    assert main([command, "--data", str(files["train"]), "--kernels", kernels, *out, "--device", "cpu"]) == 2
    assert f"--kernels: {named} is named twice; name each kernel once" in one_error_line(capsys)
    assert fits_seen == [] and not (tmp_path / "r").exists()


def test_compare_names_the_unknown_kernel(files, capsys):
    """compare said "--kernels takes a comma list of ...; got 'bleu,blue'" without saying which
    entry was wrong; report named it."""
    capsys.readouterr()
    assert main(["compare", "--data", str(files["train"]), "--kernels", "bleu,blue", "--device", "cpu"]) == 2
    assert "--kernels: unknown kernel 'blue'; choose one of bleu, rouge" in one_error_line(capsys)


@pytest.fixture()
def fits_seen(monkeypatch):
    """Every scorer fitted (none may be before a refusal)."""
    from gpu_neighbors import NeighborsScorer

    seen: list[str] = []
    original = NeighborsScorer.fit

    def fit(self, *args, **kwargs):
        seen.append(self.kernel.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(NeighborsScorer, "fit", fit)
    return seen


def test_report_refuses_an_image_of_its_out_folder_before_the_work(files, tmp_path, monkeypatch, capsys):
    """report --out DIR --page ELSEWHERE.md, DIR holding an earlier report's figures: only the
    page was checked before the work, so every kernel, sweep and curve ran, then the run was
    refused on DIR/kernels.png."""
    from gpu_neighbors import NeighborsScorer

    passes: list[str] = []
    monkeypatch.setattr(NeighborsScorer, "fit_pairwise", lambda self, *args, **kwargs: passes.append("pass"))
    out = tmp_path / "r"
    out.mkdir()
    (out / "sweep_tau.png").write_bytes(b"an earlier figure")
    capsys.readouterr()
    assert main(["report", "--data", str(files["train"]), "--out", str(out), "--page", str(tmp_path / "p.md"),
                 "--kernels", "bleu", "--device", "cpu"]) == 2
    assert "sweep_tau.png: exists already (--out sweep_tau.png); pass --overwrite" in one_error_line(capsys)
    assert passes == [] and (out / "sweep_tau.png").read_bytes() == b"an earlier figure"


def test_sweep_values_without_one_parameter_are_refused_before_the_pass(files, fits_seen, capsys):
    """sweep --values 0.1 (the parameter left at its default, all) ran the whole similarity
    pass, then said --values needs one --parameter."""
    capsys.readouterr()
    assert main(["sweep", "--data", str(files["train"]), "--values", "0.1", "--device", "cpu"]) == 2
    assert "--values needs one --parameter (tau, a or b)" in one_error_line(capsys)
    assert fits_seen == []


@pytest.mark.parametrize("taus, message", [
    (["bleu=nan"], "--tau takes KERNEL=VALUE with a finite VALUE, e.g. rouge=0.06, not 'bleu=nan'"),
    (["bleu=inf"], "--tau takes KERNEL=VALUE with a finite VALUE, e.g. rouge=0.06, not 'bleu=inf'"),
    (["bleu=0.1", "bleu=0.2"], "--tau: bleu is given twice (0.1 and 0.2); give each kernel's tau once"),
])
def test_compare_s_tau_is_refused_before_the_work(files, fits_seen, capsys, taus, message):
    """compare --tau bleu=nan read the data and printed its heading, then failed with "tau must be
    a finite number or None, not nan", naming no flag; --tau bleu=0.1 --tau bleu=0.2 ran 0.2 and
    said nothing of the 0.1."""
    capsys.readouterr()
    argv = ["compare", "--data", str(files["train"]), "--kernels", "bleu", "--no-baselines", "--device", "cpu"]
    assert main([*argv, *(f"--tau={tau}" for tau in taus)]) == 2
    assert message in one_error_line(capsys)
    assert fits_seen == []


def test_report_refuses_an_out_folder_that_is_a_file_before_the_work(files, tmp_path, monkeypatch, capsys):
    """report --out FILE ran every protocol (4.7 s on the shipped example, minutes on real data)
    and then failed with "FILE/report.md: cannot create its folder: FILE is a file"."""
    from gpu_neighbors import NeighborsScorer

    passes: list[str] = []
    monkeypatch.setattr(NeighborsScorer, "fit_pairwise", lambda self, *args, **kwargs: passes.append("pass"))
    out = tmp_path / "notes.txt"
    out.write_text("mine")
    capsys.readouterr()
    assert main(["report", "--data", str(files["train"]), "--out", str(out / "deeper"), "--kernels", "bleu",
                 "--device", "cpu"]) == 2
    assert f"report.md: cannot create its folder: {out} is a file" in one_error_line(capsys)
    assert passes == [] and out.read_text() == "mine"
