"""The one way every command writes a file: nothing lost, nothing overwritten, nothing cut.

`SafeOutput` holds the outputs of one run (e.g. a results file and its rejects file, or a
report page and its images). Opening it:

- refuses an output, or any of its sidecars (`.partial`, `.lock`, `.meta.json`,
  `.meta.json.tmp`), that is or resolves to an input (symlinks, `./`, hard links), and a
  sidecar that is a symbolic link (a planted link would redirect our writes into its target);
- takes an exclusive lock beside each output, so a second run on the same output fails at once;
- refuses to replace any finished output (the main one, a rejects file, a report's images)
  unless `overwrite` (or `resume`) is given, and, for a resumable output, to start over from
  an unfinished run's partial file and progress record unasked.

Each output is written to `NAME.partial`, created exclusively without following links
(O_CREAT|O_EXCL|O_NOFOLLOW). `commit` fsyncs every partial file and renames it into place,
the main output last: a file at an output's own name is therefore always a finished one, and
a run that fails, is killed or meets a full disk leaves the earlier outputs (all of them) as
they were. A resumable writer (`writer.ResultWriter`) keeps its partial file and its progress
record (`NAME.meta.json`, which from the start of a run describes that run, so that it can be
resumed) for the next run; every other command removes its partial files. Every OS error names
the file it met (`core.files`: a full disk's write names none of its own). An output written by
another writer (a saved scorer's folder, `core/saved.py`) takes the same lock (`locked`).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

from gpu_neighbors.core.files import CLOEXEC, NOFOLLOW, create_new, fsync_directory, naming
from gpu_neighbors.data.errors import STANDARD_STREAM, InputError, PathLike
from gpu_neighbors.data.formats import detect_format
from gpu_neighbors.data.paths import check_distinct

SIDECARS = (".partial", ".lock", ".meta.json", ".meta.json.tmp")


def sidecar(path: PathLike, suffix: str) -> Path:
    """`path` with a sidecar suffix (one of SIDECARS) appended to its name."""
    return Path(f"{path}{suffix}")


def open_existing(path: Path) -> IO[bytes]:
    """`path` opened to read and append without following a link (a resumed partial file)."""
    return os.fdopen(os.open(path, os.O_RDWR | os.O_APPEND | NOFOLLOW | CLOEXEC), "r+b")


@contextlib.contextmanager
def locked(path: PathLike) -> Iterator[None]:
    """The lock `SafeOutput` takes beside each output, held around the block, for an output
    written by another writer (a saved scorer's folder, `core/saved.py`): a second run on it
    fails at once."""
    output = Path(path)  # "folder/" locks folder.lock beside it, not .lock inside it
    handle = _lock_beside(output)
    try:
        yield
    finally:
        _unlock(output, handle)


class SafeOutput:
    """The outputs of one run, written safely (see the module docstring).

    `outputs` maps the name a user knows each output by (its flag) to its path, the main
    output first; None and `-` (standard output) are left out. `inputs` likewise names every
    file the run reads. Use as a context manager: leaving it normally commits, an exception
    discards (or, with `keep_partial`, keeps the partial files for a resume). Typical use:

        with SafeOutput({"--output": out}, inputs={"--data": data}, overwrite=args.overwrite) as files:
            with files.create() as handle:
                handle.write(...)
    """

    def __init__(self, outputs: Mapping[str, PathLike | None], *,
                 inputs: Mapping[str, PathLike | None] | None = None, overwrite: bool = False,
                 resume: bool = False, keep_partial: bool = False, standard_output: bool = False) -> None:
        self.paths = [Path(path) for path in outputs.values()
                      if path is not None and str(path) != STANDARD_STREAM]
        self.keep_partial = keep_partial
        self._created: dict[Path, IO[bytes] | None] = {}
        self._locks: list[tuple[Path, IO[bytes]]] = []
        self.committed = False
        # whether it exists: under the lock, below
        check_outputs(outputs, inputs, overwrite=True, standard_output=standard_output)
        try:
            for path in self.paths:
                self._locks.append((path, _lock_beside(path)))
            if not (overwrite or resume):  # checked again now that the run holds the lock
                _check_new(outputs, keep_partial)
        except BaseException:
            self.release()
            raise

    @property
    def main(self) -> Path:
        return self.paths[0]

    def partial(self, path: PathLike | None = None) -> Path:
        """The partial file that becomes `path` (default: the main output) on commit."""
        return sidecar(self.main if path is None else path, ".partial")

    def create(self, path: PathLike | None = None) -> IO[bytes]:
        """A new, empty partial file for `path` (default: the main output), opened to write;
        `commit` fsyncs, closes and renames it."""
        target = self._known(path)
        handle = create_new(self.partial(target))
        self._created[target] = handle
        return handle

    def create_path(self, path: PathLike | None = None) -> Path:
        """`create`, closed at once: the partial file's path, for writers that take a path
        (matplotlib, numpy). It exists already, so they reopen our file, never a link."""
        target = self._known(path)
        create_new(self.partial(target)).close()
        self._created[target] = None
        return self.partial(target)

    def resume(self, path: PathLike | None = None) -> IO[bytes]:
        """The existing partial file of `path`, opened to read and append, or a new one."""
        target = self._known(path)
        try:
            handle = open_existing(self.partial(target))
        except FileNotFoundError:
            handle = create_new(self.partial(target))
        self._created[target] = handle
        return handle

    def commit(self) -> None:
        """Every partial file made durable and renamed into place, the main output last; an
        error (a full disk) names the partial file it met."""
        order = sorted(self._created, key=lambda path: path == self.main)
        for target in order:
            handle = self._created[target]
            with naming(self.partial(target)):
                if handle is None:
                    handle = open(self.partial(target), "rb")  # noqa: SIM115 - closed below
                elif not handle.closed:
                    handle.flush()
                os.fsync(handle.fileno())
                handle.close()
        for target in order:
            os.replace(self.partial(target), target)
        for directory in {target.parent for target in order}:
            fsync_directory(directory)
        self.committed = True

    def discard(self) -> None:
        """Closes the partial files and, unless `keep_partial`, removes them."""
        for target, handle in self._created.items():
            if handle is not None:
                with contextlib.suppress(OSError):  # its buffered rest may not fit either: unwanted
                    handle.close()
            if not self.keep_partial:
                self.partial(target).unlink(missing_ok=True)

    def release(self) -> None:
        """Releases the locks (removing the lock files)."""
        while self._locks:
            _unlock(*self._locks.pop())

    def __enter__(self) -> SafeOutput:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        try:
            if exc_type is None:
                self.commit()
        finally:
            try:
                if not self.committed:
                    self.discard()
            finally:
                self.release()

    def _known(self, path: PathLike | None) -> Path:
        target = self.main if path is None else Path(path)
        if target not in self.paths:
            raise ValueError(f"{target} is not one of this run's outputs")
        return target


def check_outputs(outputs: Mapping[str, PathLike | None], inputs: Mapping[str, PathLike | None] | None,
                  *, overwrite: bool = False, resumable: bool = False, standard_output: bool = False) -> None:
    """The checks `SafeOutput` makes before writing, for a command to make before a long read:
    each output a regular file or new and not named as a compressed file, no output or sidecar
    an input or a symbolic link sidecar, and (unless `overwrite`) every output new. `-`
    (standard output) is refused unless `standard_output` and for the main output only: the
    writers that take it (`writer.ResultWriter`) write it themselves; any other would be dropped."""
    for index, (name, path) in enumerate(outputs.items()):
        if str(path) == STANDARD_STREAM and not (standard_output and index == 0):
            raise InputError(f"{name} is written to a file, not to standard output: give a file path",
                             path=path)
    named = {name: path for name, path in outputs.items() if path is not None and str(path) != STANDARD_STREAM}
    for name, path in list(named.items()):
        refuse_compressed_name(path)
        check_regular(Path(path))
        check_folder_possible(Path(path))
        for suffix in SIDECARS:
            side = sidecar(path, suffix)
            if side.is_symlink():
                raise InputError(f"{side.name} beside {name} is a symbolic link: gpu-neighbors "
                                 f"never writes through a link; remove it", path=side)
            named[f"{name}'s {suffix} file"] = side
    check_distinct(inputs or {}, named)
    if not overwrite:
        _check_new(outputs, resumable)


def _check_new(outputs: Mapping[str, PathLike | None], resumable: bool) -> None:
    for index, (name, path) in enumerate(outputs.items()):
        if path is None or str(path) == STANDARD_STREAM:
            continue
        if not Path(path).exists():
            if index == 0 and resumable and sidecar(path, ".partial").exists() \
                    and sidecar(path, ".meta.json").exists():  # a plain run would drop its rows unasked
                raise InputError("an unfinished run's rows are beside it (its .partial file); pass --resume "
                                 "to continue that run, or --overwrite to start over", path=path)
            continue
        if index == 0:
            unfinished = resumable and sidecar(path, ".partial").exists()
            resume = (", or --resume to continue the unfinished run beside it (its .partial file)" if unfinished
                      else ", or --resume to continue the run that wrote it" if resumable else "")
            raise InputError(f"exists already; pass --overwrite to replace it{resume}", path=path)
        raise InputError(f"exists already ({name}); pass --overwrite to replace it, or choose another name",
                         path=path)


COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zip")


def refuse_compressed_name(path: PathLike) -> None:
    """Outputs are written uncompressed: a name promising compression would hold plain text."""
    if str(path).lower().endswith(COMPRESSED_SUFFIXES):
        raise InputError("is a compressed file's name, but results are written uncompressed; give a "
                         "name without the compression suffix (and compress the finished file if you "
                         "like)", path=path)


def refuse_other_format_name(path: PathLike | None, name: str, parquet: bool = False) -> None:
    """A JSON Lines output (`parquet`: or Parquet, for a `.parquet` name) must not bear the
    name of another format the readers know: results in `o.csv` were JSON Lines, and read back
    (`--candidates o.csv`) they were misread as CSV."""
    if path is None or str(path) == STANDARD_STREAM:
        return
    named = detect_format(path)
    if named in ("jsonl", "text") or (parquet and named == "parquet"):
        return
    also = ", or Parquet for a .parquet name" if parquet else ""
    raise InputError(f"{name} is written as JSON Lines{also}, but this is a {named} file's name: give a "
                     f".jsonl name", path=path)


def check_regular(path: Path) -> None:
    """An output must be a regular file (or not exist yet): a directory, device or FIFO has no
    place for the partial file and the progress record beside it."""
    if path.exists() and not path.is_file():
        raise InputError("is not a regular file; give a file path, or - for standard output",
                         path=path)


def check_folder_possible(path: Path) -> None:
    """An output's folder must exist or be possible to make: a file where one of its folders
    should be is refused (checked before the work too, not only when the lock is taken after it)."""
    parent = next((folder for folder in path.parents if folder.exists()), None)
    if parent is not None and not parent.is_dir():
        raise InputError(f"cannot create its folder: {parent} is a file", path=path)


def _lock_beside(output: Path) -> IO[bytes]:
    """`output`'s folder made if missing, and the lock beside `output` taken."""
    check_folder_possible(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    return _exclusive_lock(sidecar(output, ".lock"), output)


def _unlock(output: Path, handle: IO[bytes]) -> None:
    sidecar(output, ".lock").unlink(missing_ok=True)
    handle.close()  # closing the descriptor releases the flock


def _exclusive_lock(lock_path: Path, output: Path) -> IO[bytes]:
    """Holds an exclusive flock on `lock_path` for the life of the run, or fails at once."""
    flags = os.O_WRONLY | os.O_CREAT | NOFOLLOW | CLOEXEC
    handle = os.fdopen(os.open(lock_path, flags, 0o666), "wb")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise InputError(f"another gpu-neighbors run is writing this output (it holds "
                         f"{lock_path.name}); wait for it to finish or choose another output",
                         path=output) from None
    return handle
