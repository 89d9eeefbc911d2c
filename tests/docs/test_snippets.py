"""The README and the documentation pages as a reader uses them: every bash and Python block is
marked runnable or says why not, every runnable one runs on the shipped example (tests/snippets.py),
and what the pages say of the results holds."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml

from snippets import ROOT, blocks, run_document, unmarked

# Written by a command (`gpu-neighbors report --page docs/reproduction.md`), not by hand.
GENERATED = {"reproduction.md"}


def nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [page for value in node.values() for page in nav_pages(value)]
    if isinstance(node, list):
        return [page for value in node for page in nav_pages(value)]
    return []


def documents() -> list[Path]:
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    return [ROOT / "README.md", *(ROOT / "docs" / page for page in nav_pages(nav) if page not in GENERATED)]


def runnable_documents() -> list[Path]:
    return [document for document in documents() if any(block.runnable for block in blocks(document))]


def ids(paths: list[Path]) -> list[str]:
    return [str(path.relative_to(ROOT)) for path in paths]


@pytest.mark.parametrize("document", documents(), ids=ids(documents()))
def test_every_code_block_says_whether_it_runs(document):
    assert unmarked(document) == []


def readme_fields() -> list[str]:
    """The field names of the README's table of output fields, in order."""
    table = re.search(r"^\| field \| meaning \|\n\|---\|---\|\n((?:\|.*\n)+)", (ROOT / "README.md").read_text(), re.M)
    assert table, "the README has lost its table of output fields"
    names = [re.findall(r"`([^`]+)`", row.split("|")[1]) for row in table[1].splitlines()]
    return [name for row in names for name in row]


def check_readme(namespace: dict, folder: Path) -> None:
    rows = [json.loads(line) for line in (folder / "out" / "example_scores.jsonl").read_text().splitlines()]
    assert len(rows) == len((ROOT / "examples" / "candidates.txt").read_text().splitlines())
    assert list(rows[0]) == readme_fields()
    assert namespace["reward"] is not None


def check_training_loop(namespace: dict, folder: Path) -> None:
    from nltk.translate import bleu_score

    if "trainer" in namespace:  # the GRPO example (skipped where TRL or the tokenizer is absent)
        logged = [entry for entry in namespace["trainer"].state.log_history if "rewards/neighbors/mean" in entry]
        assert namespace["trainer"].state.global_step == 2 and len(logged) == 2
        assert all(math.isfinite(entry["rewards/neighbors/mean"]) for entry in logged)
    method3 = bleu_score.SmoothingFunction().method3
    want = [
        bleu_score.sentence_bleu([r.split() for r in ["the cat sat on a mat", "a cat sat on the mat"]],
                                 "the cat sat on the mat".split(), smoothing_function=method3),
        bleu_score.sentence_bleu(["the dog barked".split()], "a dog barked".split(), smoothing_function=method3),
    ]
    assert namespace["rewards"] == pytest.approx(want, abs=1e-9)
    of_ids = namespace["sentence_bleu"](namespace["ids"], namespace["references"], attention_mask=namespace["mask"],
                                        smoothing="exp")
    refs = [[11, 12, 13, 14, 17, 16], [11, 12, 13, 18, 15, 16]]
    assert of_ids.item() == pytest.approx(bleu_score.sentence_bleu(refs, [11, 12, 13, 14, 15, 16],
                                                                   smoothing_function=method3), abs=1e-9)


CHECKS = {"README.md": check_readme, "training_loop.md": check_training_loop}


@pytest.mark.parametrize("document", runnable_documents(), ids=ids(runnable_documents()))
def test_runnable_blocks_run_on_the_example(document, tmp_path):
    namespace, skipped = run_document(document, tmp_path)
    if document.name in CHECKS:
        CHECKS[document.name](namespace, tmp_path)
    if skipped:
        pytest.skip("ran the other blocks; " + "; ".join(skipped))


def test_a_broken_block_fails_naming_its_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("intro\n\n<!-- run -->\n```bash\ngpu-neighbors fit --train examples/nothing.jsonl --save out/s\n```\n"
                    "\n```python\nprint('unmarked')\n```\n")
    assert unmarked(page) == [f"{page}:8"]
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(AssertionError, match=r":4: `gpu-neighbors fit --train examples/nothing.jsonl"):
        run_document(page, work)
    page.write_text("<!-- run -->\n```python\nassert 1 + 1 == 3\n```\n")
    again = tmp_path / "again"
    again.mkdir()
    with pytest.raises(AssertionError, match=r":2: the Python block raised"):
        run_document(page, again)
