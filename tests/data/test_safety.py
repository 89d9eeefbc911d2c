"""Nothing lost, nothing wrong: outputs that cannot destroy inputs or each other, one run per
output, pipes read once, resume that knows its inputs, TSV read as TSV, a cap on text length.

Where the case is about processes, pipes, locks or files, a real one is used (a FIFO, a second
process holding the lock, symlinks and hard links).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gpu_neighbors import NeighborsScorer
from gpu_neighbors.data import InputError, ResultWriter, count_records, iter_candidates, read_scored
from gpu_neighbors.data.paths import check_distinct
from gpu_neighbors.scoring.streaming import score_file

HEADER = {"kernel": "bleu"}


def rows(count: int) -> list[dict]:
    return [{"index": index, "score": index / 4} for index in range(count)]


# ---------------------------------------------------------------- outputs vs inputs


def test_an_output_that_is_an_input_is_refused_however_it_is_spelled(tmp_path, monkeypatch):
    candidates = tmp_path / "c.txt"
    candidates.write_text("a b c\n", encoding="utf-8")
    train = tmp_path / "train.jsonl"
    train.write_text('{"text": "a", "score": 0.5}\n', encoding="utf-8")
    (tmp_path / "link.txt").symlink_to(candidates)
    os.link(train, tmp_path / "hard.jsonl")
    monkeypatch.chdir(tmp_path)
    inputs = {"--candidates": "c.txt", "--train": "train.jsonl"}
    for output in ("c.txt", "./c.txt", str(candidates), "link.txt", "hard.jsonl", "sub/../train.jsonl"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        with pytest.raises(InputError, match="are the same file"):
            check_distinct(inputs, {"--output": output})
    with pytest.raises(InputError, match="--rejects and --output are the same file"):
        check_distinct(inputs, {"--output": "out.jsonl", "--rejects": "./out.jsonl"})
    check_distinct(inputs, {"--output": "out.jsonl", "--rejects": "out.rejects.jsonl"})
    check_distinct({"--candidates": "-"}, {"--output": "-"})  # stdin and stdout are not files
    assert candidates.read_text(encoding="utf-8") == "a b c\n"


# ---------------------------------------------------------------- one run per output

HOLD_LOCK = """
import sys, time
from gpu_neighbors.data import ResultWriter
with ResultWriter(sys.argv[1], header={"kernel": "bleu"}) as writer:
    writer.write_many([{"index": 0}])
    print("writing", flush=True)
    sys.stdin.readline()
"""


def test_a_second_run_on_the_same_output_fails_at_once(tmp_path):
    output = tmp_path / "out.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(output)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "writing"
        with pytest.raises(InputError, match="another gpu-neighbors run is writing this output"):
            ResultWriter(output, header=HEADER)
        assert not output.exists()  # the first run is still writing its partial file
    finally:
        holder.communicate("done\n", timeout=60)
    assert holder.returncode == 0
    assert output.read_text(encoding="utf-8") == '{"index": 0}\n'
    with ResultWriter(output, header=HEADER, overwrite=True) as writer:  # the lock is free again
        writer.write_many(rows(2))
    assert not Path(f"{output}.lock").exists()


def test_outputs_that_are_not_regular_files_are_refused(tmp_path):
    (tmp_path / "folder").mkdir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (tmp_path / "folder", fifo, Path("/dev/null")):
        with pytest.raises(InputError, match="is not a regular file"):
            ResultWriter(path, header=HEADER)
    assert not Path("/dev/null.meta.json").exists()


def test_standard_output_takes_rows_without_a_progress_record(tmp_path):
    script = ("from gpu_neighbors.data import ResultWriter\n"
              "with ResultWriter('-', header={'kernel': 'bleu'}) as w:\n"
              "    w.write_many([{'index': 0}, {'index': 1}])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, cwd=tmp_path, check=True)
    assert done.stdout == b'{"index": 0}\n{"index": 1}\n'
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InputError, match="cannot resume a run written to standard output"):
        ResultWriter("-", resume=True, header=HEADER)


# ---------------------------------------------------------------- pipes are read once


def feed_fifo(path: Path, data: bytes) -> threading.Thread:
    def write() -> None:
        with open(path, "wb") as fifo:
            fifo.write(data)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("data, texts", [
    (b"first line\nsecond line\n", ["first line", "second line"]),
    (b'{"text": "from json"}\n{"text": "two"}\n', ["from json", "two"]),
])
def test_a_fifo_is_read_once_with_its_format_sniffed(tmp_path, data, texts):
    fifo = tmp_path / "candidates"
    os.mkfifo(fifo)
    writer = feed_fifo(fifo, data)
    assert count_records(fifo) is None  # counting would consume the pipe
    stream = iter_candidates(fifo)
    assert [candidate.text for candidate in stream] == texts
    writer.join(timeout=10)
    with pytest.raises(InputError, match="can be read only once"):
        list(stream)


def test_standard_input_scores_every_candidate(tmp_path, huse_texts, huse_scores):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": t, "score": s}) + "\n"
                             for t, s in zip(huse_texts[:60], huse_scores[:60])), encoding="utf-8")
    script = ("import sys\nfrom gpu_neighbors.data import iter_candidates\n"
              "print(sum(1 for _ in iter_candidates('-')))\n")
    piped = "".join(text + "\n" for text in huse_texts[60:100]).encode("utf-8")
    done = subprocess.run([sys.executable, "-c", script], input=piped, capture_output=True, check=True)
    assert done.stdout.decode().strip() == "40"


# ---------------------------------------------------------------- resume knows its inputs


def test_resume_refuses_candidates_that_changed_under_the_same_path(tmp_path, huse_texts, huse_scores):
    scorer = NeighborsScorer(device="cpu").fit(huse_texts[:80], huse_scores[:80])
    source = tmp_path / "c.txt"
    source.write_text("".join(t + "\n" for t in huse_texts[80:140]), encoding="utf-8")
    output = tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        def interrupt_after_two(scorer, batches):
            for count, batch in enumerate(batches):
                if count == 2:
                    raise KeyboardInterrupt
                yield batch, scorer.predict([candidate.text for candidate in batch])

        score_file(scorer, source, output, batch_size=10, score_batches=interrupt_after_two)
    changed = huse_texts[80:140]
    changed[5] = "a different fifth candidate"
    source.write_text("".join(t + "\n" for t in changed), encoding="utf-8")
    with pytest.raises(InputError, match="the candidates changed since the earlier run"):
        score_file(scorer, source, output, batch_size=10, resume=True)
    source.write_text("".join(t + "\n" for t in huse_texts[80:140]), encoding="utf-8")
    summary = score_file(scorer, source, output, batch_size=10, resume=True)
    assert summary.rows == 60 and summary.scored == 40


def test_resume_refuses_a_training_set_that_changed(tmp_path, huse_texts, huse_scores):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": t, "score": s}) + "\n"
                             for t, s in zip(huse_texts[:50], huse_scores[:50])), encoding="utf-8")
    before = read_scored(train).digest()
    train.write_text("".join(json.dumps({"text": t, "score": s}) + "\n"
                             for t, s in zip(huse_texts[:50], [0.5] + huse_scores[1:50])), encoding="utf-8")
    assert read_scored(train).digest() != before
    output = tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        with ResultWriter(output, header={"train_content_sha256": before}) as writer:
            writer.write_many(rows(3))
            raise KeyboardInterrupt
    with pytest.raises(InputError, match="train_content_sha256: .* before, .* now"):
        ResultWriter(output, resume=True, header={"train_content_sha256": read_scored(train).digest()})


# ---------------------------------------------------------------- TSV as TSV, text length


def test_tsv_quotes_are_ordinary_characters_unless_csv_quoting_is_asked(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_bytes(b'text\tscore\n"quoted start\t0.5\nnext line\t0.25\nsays "hi"\t1\n')
    data = read_scored(path)
    assert data.texts == ['"quoted start', "next line", 'says "hi"']
    assert data.scores.tolist() == [0.5, 0.25, 1.0]
    assert count_records(path) == 3
    quoted = tmp_path / "quoted.tsv"
    quoted.write_bytes(b'text\tscore\n"two\nlines"\t0.5\n')
    assert read_scored(quoted, quoting="csv").texts == ["two\nlines"]


def test_texts_longer_than_max_chars_are_refused_with_file_line_and_field(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"text": "ok"}) + "\n" + json.dumps({"text": "x" * 101}) + "\n",
                    encoding="utf-8")
    with pytest.raises(InputError, match=r"c.jsonl:2: field 'text': is 101 characters long, more "
                                         r"than the limit of 100 \(--max-chars\)"):
        list(iter_candidates(path, max_chars=100))
    stream = iter_candidates(path, max_chars=100, skip_bad=True)
    assert [candidate.text for candidate in stream] == ["ok"] and stream.rejected == 1
    assert [candidate.text for candidate in iter_candidates(path, max_chars=101)] == ["ok", "x" * 101]


# ---------------------------------------------------------------- no code from folders, no downloads

CUSTOM_CODE = """
import os, pathlib
pathlib.Path(os.environ["CODE_RAN_MARKER"]).write_text("the folder's code ran")
from transformers import BertTokenizerFast
class EvilTokenizer(BertTokenizerFast):
    pass
"""


def test_a_tokenizer_folder_with_custom_code_never_runs_it(tmp_path):
    from minilm import MODEL_PATH

    folder = tmp_path / "tokenizer"
    folder.mkdir()
    for name in ("tokenizer.json", "vocab.txt", "special_tokens_map.json"):
        (folder / name).write_bytes((Path(MODEL_PATH) / name).read_bytes())
    config = json.loads((Path(MODEL_PATH) / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["auto_map"] = {"AutoTokenizer": ["evil.EvilTokenizer", "evil.EvilTokenizer"]}
    del config["tokenizer_class"]  # else transformers picks the stock class and ignores auto_map
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "evil.py").write_text(CUSTOM_CODE, encoding="utf-8")
    script = ("import sys\nfrom gpu_neighbors.text.tokenizers import make_tokenizer\n"
              "try:\n    make_tokenizer(sys.argv[1])\nexcept ValueError as error:\n    print(error)\n")
    marker = tmp_path / "code-ran"
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "CODE_RAN_MARKER": str(marker),
                   "HF_MODULES_CACHE": str(tmp_path / "modules")}
    done = subprocess.run([sys.executable, "-c", script, str(folder)], input="y\ny\n", text=True,
                          capture_output=True, timeout=120, env=environment)
    assert not marker.exists(), done.stdout + done.stderr


def test_an_unknown_tokenizer_name_fails_at_once_listing_the_built_in_ones():
    from gpu_neighbors.text.tokenizers import make_tokenizer

    with pytest.raises(ValueError, match=r"unknown tokenizer 'whitspace': not one of the built-in "
                                         r"ones \(whitespace, 13a, chars, intl, zh, char, rouge-score, rouge-score-stem\)"):
        make_tokenizer("whitspace")
