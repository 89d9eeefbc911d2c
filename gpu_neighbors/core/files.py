"""The file system steps every writer shares: a new file made without following a link, a rename
made durable, two folders swapped in one step, and an OS error that names its file.

Both writers build on them: `data/output.py` (every command's outputs) and `core/saved.py` (a
saved scorer's folder, which sits below the data layer).
"""
from __future__ import annotations

import ctypes
import errno
import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_AT_FDCWD = -100  # Linux's "relative to the working directory" for the *at calls
_RENAME_EXCHANGE = 2  # Linux's renameat2 flag: swap the two names in one step


def create_new(path: Path) -> IO[bytes]:
    """`path` opened for writing as a new file (`NamedWriter`). A stale file of that name is
    removed first (removing a symbolic link removes the link, never its target); the open then
    neither follows a link nor takes over a file made meanwhile by someone else."""
    path.unlink(missing_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC
    return NamedWriter(io.FileIO(os.open(path, flags, 0o666), "wb"), path)


class NamedWriter(io.BufferedWriter):
    """A buffered file whose OS errors name it: a full disk met at a write, a flush or the
    close says which file (a write on its own names none)."""

    def __init__(self, raw: io.FileIO, path: Path) -> None:
        super().__init__(raw)
        self.path = path

    def write(self, data: Any) -> int:
        with naming(self.path):
            return super().write(data)

    def flush(self) -> None:
        with naming(self.path):
            super().flush()

    def close(self) -> None:
        with naming(self.path):
            super().close()


def fsync_directory(directory: Path) -> None:
    """Makes a rename durable; POSIX only (Windows cannot open a directory)."""
    if os.name != "posix":
        return
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        with naming(directory):
            os.fsync(descriptor)
    finally:
        os.close(descriptor)


@contextmanager
def naming(path: Path) -> Iterator[None]:
    """An OS error raised inside that names no file (a write, flush or fsync that met a full
    disk) raised again naming `path`, the file being written: the one-line error says where."""
    try:
        yield
    except OSError as error:
        if error.filename is not None or error.errno is None:
            raise
        raise OSError(error.errno, error.strerror, str(path)) from None


def exchange(first: Path, second: Path) -> bool:
    """Swap the two existing paths in one step (Linux's renameat2 with RENAME_EXCHANGE): at no
    moment is either name missing. False where this system or file system cannot (nothing
    changed then); any other refusal raises, naming `second`."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # not Linux, or a C library without it
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    number = ctypes.get_errno()
    if number in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):  # no such call, or not on this file system
        return False
    raise OSError(number, os.strerror(number), str(second))
