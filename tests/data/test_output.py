"""`data.output.SafeOutput`, the one way every command writes: its rules on real files."""
from __future__ import annotations

import os

import pytest

from gpu_neighbors.data import InputError, SafeOutput


def test_a_hard_link_of_an_input_is_refused_as_output_or_sidecar(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("precious\n")
    output = tmp_path / "out.jsonl"
    os.link(data, tmp_path / "out.jsonl.meta.json")
    with pytest.raises(InputError, match="--output's .meta.json file and --data are the same file"):
        SafeOutput({"--output": output}, inputs={"--data": data})
    os.link(data, tmp_path / "other.jsonl")
    with pytest.raises(InputError, match="--output and --data are the same file"):
        SafeOutput({"--output": tmp_path / "other.jsonl"}, inputs={"--data": data}, overwrite=True)
    assert data.read_text() == "precious\n"


def test_outputs_appear_together_only_on_success(tmp_path):
    page, image = tmp_path / "page.md", tmp_path / "plot.png"
    with SafeOutput({"--page": page, "--image": image}) as files:
        files.create(image).write(b"png")
        files.create().write(b"page")
        assert not page.exists() and not image.exists()
    assert (page.read_bytes(), image.read_bytes()) == (b"page", b"png")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["page.md", "plot.png"]  # no lock, no partial

    with pytest.raises(InputError, match="exists already; pass --overwrite"):
        SafeOutput({"--page": page, "--image": image})
    with pytest.raises(RuntimeError):
        with SafeOutput({"--page": page, "--image": image}, overwrite=True) as files:
            files.create(image).write(b"new png")
            files.create().write(b"new page")
            raise RuntimeError("the run fails before it completes")
    assert (page.read_bytes(), image.read_bytes()) == (b"page", b"png")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["page.md", "plot.png"]


def test_a_stale_partial_file_or_link_is_replaced_never_written_through(tmp_path):
    output, victim = tmp_path / "out.bin", tmp_path / "victim"
    victim.write_bytes(b"keep")
    (tmp_path / "out.bin.partial").write_bytes(b"stale")
    with SafeOutput({"--output": output}) as files:
        files.create().write(b"fresh")
    assert output.read_bytes() == b"fresh" and victim.read_bytes() == b"keep"
    (tmp_path / "out.bin.partial").symlink_to(victim)
    with pytest.raises(InputError, match="symbolic link"):
        SafeOutput({"--output": output}, overwrite=True)
    assert victim.read_bytes() == b"keep"


def test_a_second_holder_is_refused_while_the_first_holds_the_lock(tmp_path):
    output = tmp_path / "out.bin"
    with SafeOutput({"--output": output}) as files:
        with pytest.raises(InputError, match="another gpu-neighbors run is writing this output"):
            SafeOutput({"--output": output}, overwrite=True)
        files.create().write(b"first")
    assert output.read_bytes() == b"first"
