"""Issue 50's probe of saved scorers, write side: replacing a saved scorer is all or nothing. A
full disk at any step of the save, or a kill -9 at any moment, leaves the old scorer whole and
loadable at its name (or, once swapped in, the new one), and nothing half-written beside it that
the next save does not clear. Before, `fit --save DIR --overwrite` on a full disk left the old
scorer.json beside the new tensors: the old scorer was lost."""
from __future__ import annotations

import errno
import os
import select
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from gpu_neighbors import NeighborsScorer
from gpu_neighbors.core import files, saved
from gpu_neighbors.core.saved import CONFIG, TENSORS, SavedScorerError


@pytest.fixture(scope="module")
def scorers(tmp_path_factory, huse_texts, huse_scores) -> dict[str, Path]:
    """Two saved scorers on different training texts: the one on disk ("old") and its successor."""
    root = tmp_path_factory.mktemp("scorers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {name: NeighborsScorer(kernel="tfidf", device="cpu").fit(huse_texts[part], huse_scores[part])
                .save(root / name) for name, part in (("old", slice(0, 40)), ("new", slice(40, 80)))}


def which(folder: Path, scorers: dict[str, Path]) -> str:
    """"old" or "new": the complete scorer that loads from `folder` (a broken one fails here)."""
    texts = NeighborsScorer.load(folder, device="cpu").kernel_.train_texts
    found = [name for name in scorers if NeighborsScorer.load(scorers[name], device="cpu").kernel_.train_texts == texts]
    assert len(found) == 1
    return found[0]


def old_in_place(scorers: dict[str, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(scorers["old"], tmp_path / "place" / "scorer"))


class FullDisk:
    """Every step of a save that writes or renames (the file system calls below), counted; the
    `fail_at`-th fails with ENOSPC as the OS would: a write, flush or fsync naming no file, an
    open, rename or swap naming its path."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail_at: int) -> None:
        self.calls, self.fail_at = 0, fail_at
        for owner, name, named in ((files.NamedWriter, "write", False), (os, "fsync", False),
                                   (saved, "create_new", True), (os, "replace", True), (os, "rename", True),
                                   (os, "mkdir", True), (saved, "exchange", True)):
            monkeypatch.setattr(owner, name, self.counted(getattr(owner, name), named))

    def counted(self, function, named):
        def step(*args, **kwargs):
            self.calls += 1
            if self.calls == self.fail_at:
                path = next((str(arg) for arg in args if isinstance(arg, (str, Path))), None) if named else None
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
            return function(*args, **kwargs)
        return step


@pytest.mark.parametrize("swap", ["exchange", "two renames"])
def test_a_full_disk_at_any_step_keeps_the_old_scorer(scorers, tmp_path, monkeypatch, swap):
    """A failure injected at each step in turn, until the save gets through: every failure
    leaves one complete scorer at the name (the old one, unless the step came after the swap),
    nothing beside it, and an error naming a file."""
    new = NeighborsScorer.load(scorers["new"], device="cpu")
    outcomes = []
    for fail_at in range(1, 100):
        folder = old_in_place(scorers, tmp_path / str(fail_at))
        with monkeypatch.context() as patch:
            if swap == "two renames":  # a system or file system without renameat2's exchange
                patch.setattr(saved, "exchange", lambda first, second: False)
            disk = FullDisk(patch, fail_at)
            try:
                new.save(folder, overwrite=True)
            except OSError as error:
                assert error.errno == errno.ENOSPC and error.filename and str(tmp_path) in error.filename, error
                outcomes.append(which(folder, scorers))
            else:
                assert disk.calls < fail_at  # every step passed: the save is done
                break
        assert os.listdir(folder.parent) == ["scorer"], (fail_at, os.listdir(folder.parent))
    assert which(folder, scorers) == "new"
    assert len(outcomes) >= 10 and outcomes[0] == "old", outcomes  # each file's open, write, fsync, rename...
    assert outcomes == sorted(outcomes, key=["old", "new"].index)  # old until the swap, new after


def test_a_save_killed_in_a_fresh_folder_leaves_no_scorer_and_the_next_save_writes_one(scorers, tmp_path,
                                                                                       monkeypatch):
    folder = tmp_path / "fresh"
    with monkeypatch.context() as patch:
        FullDisk(patch, 4)  # the tensors written, their rename refused
        with pytest.raises(OSError):
            NeighborsScorer.load(scorers["new"], device="cpu").save(folder)
    assert not (folder / CONFIG).exists()  # no scorer.json: not a scorer, nothing to lose
    NeighborsScorer.load(scorers["new"], device="cpu").save(folder)
    assert which(folder, scorers) == "new" and sorted(os.listdir(folder)) == sorted([CONFIG, TENSORS,
                                                                                      saved.TRAINING])


# The child saves "new" over the folder holding "old", pausing (then waiting to be killed) at one
# moment of the save: it says so on stdout, and the test kills it there with SIGKILL.
CHILD = """
import os, signal, sys
from pathlib import Path
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.core import saved

source, folder, moment = sys.argv[1:]

def pause():
    print("paused", flush=True)
    while True:
        signal.pause()

write, swap = saved._write_atomically, saved.exchange

def written(path, data):
    write(path, data)
    if moment == "tensors written" and path.name == saved.TENSORS and path.parent.name.endswith(".partial"):
        pause()

def swapped(first, second):
    if moment == "before the swap":
        pause()
    done = swap(first, second)
    if moment == "after the swap":
        pause()
    return done

saved._write_atomically, saved.exchange = written, swapped
NeighborsScorer.load(source, device="cpu").save(folder, overwrite=True)
print("finished", flush=True)
"""


@pytest.mark.parametrize(("moment", "expected"), [("tensors written", "old"), ("before the swap", "old"),
                                                  ("after the swap", "new")])
def test_kill_9_at_any_moment_keeps_a_whole_scorer(scorers, tmp_path, moment, expected):
    folder = old_in_place(scorers, tmp_path)
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HF_HUB_OFFLINE": "1"}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(scorers["new"]), str(folder), moment],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
    try:
        ready, _, _ = select.select([child.stdout], [], [], 300)  # the condition, with a deadline
        line = child.stdout.readline() if ready else ""
        assert line == "paused\n", (line, child.stderr.read() if child.poll() is not None else "")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert which(folder, scorers) == expected  # whole, at its name
    assert os.listdir(folder.parent) == ["scorer", "scorer.partial"]  # the killed save's folder
    NeighborsScorer.load(scorers["new"], device="cpu").save(folder, overwrite=True)  # clears it
    assert which(folder, scorers) == "new" and os.listdir(folder.parent) == ["scorer"]


def test_a_stranger_beside_the_folder_is_never_removed(scorers, tmp_path):
    """The next save clears what a save left beside the folder, and nothing else."""
    folder = old_in_place(scorers, tmp_path)
    leftover = folder.parent / "scorer.partial"
    leftover.mkdir()
    (leftover / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"scorer.partial: holds notes.txt, not what a save .* leaves"):
        NeighborsScorer.load(scorers["new"], device="cpu").save(folder, overwrite=True)
    assert (leftover / "notes.txt").read_text() == "mine" and which(folder, scorers) == "old"


def test_a_link_to_the_folder_replaces_the_folder_it_names(scorers, tmp_path):
    folder = old_in_place(scorers, tmp_path)
    link = tmp_path / "latest"
    link.symlink_to(folder, target_is_directory=True)
    NeighborsScorer.load(scorers["new"], device="cpu").save(link, overwrite=True)
    assert link.is_symlink() and which(folder, scorers) == "new" and os.listdir(folder.parent) == ["scorer"]


def test_a_mount_point_is_refused_before_the_fit_and_a_bind_mount_at_the_swap(scorers, tmp_path, monkeypatch):
    """A scorer in a folder that is a mount point cannot be swapped: check_folder (which fit
    --save calls before fitting) says so; a bind mount, which looks like any folder, is refused
    at the swap (EBUSY) with the same reason, the old scorer kept."""
    folder = old_in_place(scorers, tmp_path)
    new = NeighborsScorer.load(scorers["new"], device="cpu")
    with monkeypatch.context() as patch:
        patch.setattr(saved, "exchange", lambda first, second: (_ for _ in ()).throw(
            OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(second))))
        with pytest.raises(OSError, match="which a mount point cannot be: save into a folder inside it"):
            new.save(folder, overwrite=True)
    assert which(folder, scorers) == "old" and os.listdir(folder.parent) == ["scorer"]
    mount = tmp_path / "mount"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("no file system can be mounted here (not root)")
    try:
        new.save(mount)  # a first save writes in place: nothing to swap
        with pytest.raises(FileExistsError, match=r"mount: a mount point, and a saved scorer is replaced by swapping"):
            saved.check_folder(mount, overwrite=True)
        assert which(mount, scorers) == "new"
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_save_stopped_between_its_two_renames_says_where_the_old_scorer_is(scorers, tmp_path, monkeypatch):
    """Without renameat2's exchange, a kill between the two renames leaves no scorer at the
    name: loading it says where the old one is (FOLDER.replaced), and a save there clears it."""
    folder = old_in_place(scorers, tmp_path)
    with monkeypatch.context() as patch:
        patch.setattr(saved, "exchange", lambda first, second: False)
        renames = iter([os.rename])
        patch.setattr(os, "rename", lambda *args: next(renames)(*args))  # the first one only
        with pytest.raises(StopIteration):  # the second rename never comes: as if killed there
            NeighborsScorer.load(scorers["new"], device="cpu").save(folder, overwrite=True)
    with pytest.raises(SavedScorerError, match=r"scorer: not a saved scorer \(no scorer.json in it\); a save that "
                                               r"replaced it was stopped .* the earlier scorer is in .*scorer.replaced"):
        NeighborsScorer.load(folder, device="cpu")
    assert which(folder.parent / "scorer.replaced", scorers) == "old"


def test_the_replaced_folder_keeps_its_permissions(scorers, tmp_path):
    folder = old_in_place(scorers, tmp_path)
    folder.chmod(0o750)
    NeighborsScorer.load(scorers["new"], device="cpu").save(folder, overwrite=True)
    assert which(folder, scorers) == "new" and folder.stat().st_mode & 0o777 == 0o750
