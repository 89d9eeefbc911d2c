"""A resumable result writer: JSONL rows that survive a kill at any moment."""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpu_neighbors.data.errors import InputError, PathLike, preview
from gpu_neighbors.data.formats import COUNT_CHUNK_BYTES

_MISSING = object()


class ResultWriter:
    """JSONL results that survive a kill at any moment and resume byte-identically.

    Rows go straight to `path`, one JSON object per line. After each `write_many` the data is
    flushed and fsynced, and only then is the progress (rows, bytes) recorded in the sidecar
    `path + ".meta.json"`, replaced atomically (temp file, fsync, rename). So the sidecar never
    claims more than is safely on disk; anything after its byte count (a torn line, rows written
    just before a kill) is cut off on resume and recomputed. A file shorter than the record
    (data lost outside our control) resumes after its last complete line. The sidecar also
    holds the run's `header` (its settings): resuming under other settings is refused, because
    mixing rows from two configurations in one file would be silently wrong.
    """

    def __init__(self, path: PathLike, resume: bool = False,
                 header: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.meta_path = Path(f"{path}.meta.json")
        self.header = _json_normalised(header)
        self.previously_complete = False
        self.complete = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._done, self._bytes = self._recover() if resume else (0, 0)
        # The sidecar is written before the output is truncated or appended to: a kill in
        # between leaves a record that still describes what is on disk.
        self._save_meta()
        self._file = open(self.path, "ab" if resume else "wb")
        self._closed = False

    @property
    def done(self) -> int:
        """Rows safely written: on resume, the candidate index to continue from."""
        return self._done

    def write_many(self, rows: Iterable[dict[str, Any]]) -> None:
        """Appends rows as one durable chunk; a row that cannot be written (NaN, an object
        JSON does not know) raises ValueError before anything of the chunk is written."""
        if self._closed:
            raise ValueError(f"{self.path}: the writer is closed")
        lines = [self._encode(row, self._done + offset) for offset, row in enumerate(rows)]
        if not lines:
            return
        data = b"".join(lines)
        self._file.write(data)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._done += len(lines)
        self._bytes += len(data)
        self._save_meta()

    def close(self, complete: bool = True) -> None:
        """Closes the output; `complete` marks the run finished in the sidecar."""
        if self._closed:
            return
        self._closed = True
        self._file.close()
        self.complete = complete
        self._save_meta()
        _fsync_directory(self.path.parent)

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        self.close(complete=exc_type is None)

    def _encode(self, row: dict[str, Any], index: int) -> bytes:
        try:
            text = json.dumps(row, ensure_ascii=False, allow_nan=False, default=_plain_json)
            return (text + "\n").encode("utf-8")
        except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
            raise ValueError(f"{self.path}: result row {index} cannot be written: {exc} "
                             f"(write None for an undefined value)") from None

    def _recover(self) -> tuple[int, int]:
        """(rows, bytes) safely on disk from an earlier run; trims the output to them."""
        meta = self._load_meta()
        size = self.path.stat().st_size if self.path.exists() else 0
        if meta is None:
            if size:
                raise InputError(f"cannot resume: {self.meta_path.name} is missing, so the "
                                 f"settings of the earlier run are unknown; run without resume "
                                 f"to start over", path=self.path)
            return 0, 0
        if meta["header"] != self.header:
            raise InputError(f"cannot resume: the earlier run used other settings "
                             f"({_differences(meta['header'], self.header)}); run without "
                             f"resume to start over", path=self.path)
        self.previously_complete = meta["complete"]
        if size >= meta["bytes"]:
            rows, keep = meta["rows"], meta["bytes"]
        else:
            rows, keep = _complete_lines(self.path, size) if size else (0, 0)
        if size > keep:
            os.truncate(self.path, keep)
        return rows, keep

    def _load_meta(self) -> dict[str, Any] | None:
        try:
            meta = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read the progress record: {exc}",
                             path=self.meta_path) from None
        valid = (isinstance(meta, dict) and {"header", "rows", "bytes", "complete"} <= meta.keys()
                 and all(type(meta[key]) is int and meta[key] >= 0 for key in ("rows", "bytes")))
        if not valid:
            raise InputError("not a progress record of gpu-neighbors", path=self.meta_path)
        return meta

    def _save_meta(self) -> None:
        payload = {"header": self.header, "rows": self._done, "bytes": self._bytes,
                   "complete": self.complete}
        temporary = self.meta_path.with_name(self.meta_path.name + ".tmp")
        with open(temporary, "w", encoding="utf-8") as file:
            json.dump(payload, file, ensure_ascii=False, indent=2)
            file.write("\n")
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.meta_path)


def _plain_json(value: Any) -> Any:
    """numpy scalars and arrays, torch tensors: anything with `tolist` becomes plain JSON."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _json_normalised(header: dict[str, Any] | None) -> Any:
    """The header as it reads back from JSON, so a stored one compares equal to a fresh one."""
    try:
        return json.loads(json.dumps(header, ensure_ascii=False, allow_nan=False,
                                     default=_plain_json))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the run header must be plain JSON without NaN: {exc}") from None


def _differences(stored: Any, current: Any) -> str:
    if not (isinstance(stored, dict) and isinstance(current, dict)):
        return f"stored {preview(stored)}, now {preview(current)}"
    def shown(settings: dict[str, Any], key: str) -> str:
        return preview(settings[key]) if key in settings else "(absent)"

    changed = [key for key in {**stored, **current}
               if stored.get(key, _MISSING) != current.get(key, _MISSING)]
    return "; ".join(f"{key}: {shown(stored, key)} before, {shown(current, key)} now"
                     for key in changed)


def _complete_lines(path: Path, size: int) -> tuple[int, int]:
    """(number of newline-terminated lines, byte length they span) in the first `size` bytes."""
    lines = keep = position = 0
    with open(path, "rb") as file:
        while position < size:
            chunk = file.read(min(COUNT_CHUNK_BYTES, size - position))
            if not chunk:
                break
            newlines = chunk.count(b"\n")
            if newlines:
                lines += newlines
                keep = position + chunk.rindex(b"\n") + 1
            position += len(chunk)
    return lines, keep


def _fsync_directory(directory: Path) -> None:
    """Makes a rename durable; POSIX only (Windows cannot open a directory)."""
    if os.name != "posix":
        return
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
