"""A resumable result writer: JSONL rows that survive a kill at any moment."""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import numpy as np

from gpu_neighbors.data.errors import STANDARD_STREAM, InputError, PathLike, preview
from gpu_neighbors.data.formats import COUNT_CHUNK_BYTES, import_pyarrow
from gpu_neighbors.core.files import create_new, naming
from gpu_neighbors.data.output import SafeOutput, refuse_other_format_name, sidecar
from gpu_neighbors.data.jsonlines import Column, UnwritableRow, encode_columns, encode_rows, plain_json

_MISSING = object()


class ResultWriter:
    """JSONL results that survive a kill at any moment, resume byte-identically, and never
    damage a finished output.

    Rows go to `path + ".partial"`, one JSON object per line. After each `write_many` the data
    is flushed and fsynced, and only then is the progress (rows, bytes, the caller's
    `checkpoint`) recorded in the sidecar `path + ".meta.json"`, replaced atomically (temp file,
    fsync, rename). So the sidecar never claims more than is safely on disk; anything after its
    byte count (a torn line, rows written just before a kill) is cut off on resume and
    recomputed. A file shorter than the record (data lost outside our control) resumes after
    its last complete line. Only a complete run renames the partial file to `path`: a run that
    fails or is killed leaves an earlier finished output as it was, and replacing a finished
    output takes `overwrite=True`. The sidecar also holds the run's `header` (its settings):
    resuming under other settings is refused, because mixing rows from two configurations in
    one file would be silently wrong. An exclusive lock on `path + ".lock"` makes a second run
    on the same output fail at once. `-` writes to standard output: no resume, no fsync, no
    sidecar. The files are handled by `output.SafeOutput`: no output or sidecar may be one of
    `inputs` ({flag: path}); `companions` ({flag: path}, e.g. the rejects file) are written to
    partial files and moved into place with the output, so a failed `overwrite` run keeps them.
    """

    resumable = True  # a failed run keeps its partial file and its progress record for --resume

    def __init__(self, path: PathLike, resume: bool = False,
                 header: dict[str, Any] | None = None, overwrite: bool = False,
                 inputs: Mapping[str, PathLike | None] | None = None,
                 companions: Mapping[str, PathLike | None] | None = None) -> None:
        self.header = _json_normalised(header)
        self.previously_complete = False
        self.complete = False
        self.checkpoint: dict[str, Any] = {}
        self._done = self._bytes = 0
        self._closed = False
        self.to_stdout = str(path) == STANDARD_STREAM
        self.path = Path(path)
        self.partial_path = sidecar(path, ".partial")
        self.meta_path = sidecar(path, ".meta.json")
        self.lock_path = sidecar(path, ".lock")
        if self.to_stdout and resume:
            raise InputError("cannot resume a run written to standard output", path=path)
        # Companions (a rejects file) are written beside the output and committed with it.
        self._output = SafeOutput({"--output": path, **(companions or {})}, inputs=inputs, overwrite=overwrite,
                                  resume=resume, keep_partial=self.resumable, standard_output=True)
        try:
            for companion in self._output.paths:
                if companion != self.path:
                    self._output.create_path(companion)
            if self.to_stdout:
                self._file: IO[bytes] = sys.stdout.buffer
                return
            self._file = self._output.resume() if resume else self._output.create()
            if resume:
                self._done, self._bytes = self._recover()
            # The sidecar is written before rows are appended: a kill in between leaves a
            # record that still describes what is on disk.
            if not self.previously_complete:
                self._save_meta()
        except BaseException:
            self._output.discard()
            self._output.release()
            raise

    def companion_partial(self, path: PathLike) -> Path:
        """Where a companion output (e.g. the rejects file) is written until the run completes."""
        return self._output.partial(path)

    @property
    def done(self) -> int:
        """Rows safely written: on resume, the candidate index to continue from."""
        return self._done

    def write_many(self, rows: Iterable[dict[str, Any]],
                   checkpoint: dict[str, Any] | None = None) -> None:
        """Appends rows as one durable chunk, with `checkpoint` (plain JSON: e.g. a digest of
        the inputs consumed so far) recorded beside them; a row that cannot be written (NaN, an
        object JSON does not know) raises ValueError before anything of the chunk is written."""
        self._append(lambda first: encode_rows(rows, first), checkpoint)

    def write_columns(self, columns: Mapping[str, Column],
                      checkpoint: dict[str, Any] | None = None) -> None:
        """`write_many` of the rows {name: column[i]}, the same bytes, encoded column by column."""
        self._append(lambda first: encode_columns(columns, first), checkpoint)

    def _append(self, encode: Callable[[int], bytes], checkpoint: dict[str, Any] | None) -> None:
        if self._closed:
            raise ValueError(f"{self.path}: the writer is closed")
        try:
            data = encode(self._done)
        except UnwritableRow as error:
            raise ValueError(f"{self.path}: {error} (write None for an undefined value)") from None
        if not data:
            return
        if self.previously_complete:  # its rows are all in the output: more would be dropped
            raise InputError(f"cannot resume: the run is finished with {self._done:,} rows, but "
                             f"the input now has more; pass --overwrite to score it again",
                             path=self.path)
        with self._naming():
            self._file.write(data)
            self._file.flush()
        self._done += data.count(b"\n")  # JSON escapes every newline inside a value
        self._bytes += len(data)
        if checkpoint is not None:
            self.checkpoint = _json_normalised(checkpoint)
        if not self.to_stdout:
            with self._naming():
                os.fsync(self._file.fileno())
            self._save_meta()

    def _naming(self) -> AbstractContextManager[None]:
        """An OS error of the partial file (a full disk) names it; standard output's are its own."""
        return nullcontext() if self.to_stdout else naming(self.partial_path)

    def close(self, complete: bool = True) -> None:
        """Closes the output; `complete` moves the partial file into place and marks the run
        finished in the sidecar."""
        if self._closed:
            return
        self._closed = True
        if self.to_stdout:
            self._file.flush()
        try:
            if complete and not self.previously_complete:
                self._output.commit()  # companions, then the output: each fsynced and renamed
                self.complete = True
                if not self.to_stdout:
                    self._save_meta()
            else:
                # A finished run resumed has nothing new to move into place; a run that wrote no
                # row leaves nothing to continue, so no record either: it would only refuse the
                # same command, corrected, as if there were rows to lose.
                unfinished = not (self.previously_complete or self.to_stdout)
                self._output.keep_partial = self.resumable and unfinished and self._done > 0
                self._output.discard()
                if unfinished and self._done == 0:
                    self.meta_path.unlink(missing_ok=True)
            self.complete = complete
        finally:
            self._output.release()

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close(complete=exc_type is None)

    def _recover(self) -> tuple[int, int]:
        """(rows, bytes) safely on disk from an earlier run; trims the partial output to them."""
        meta = self._load_meta()
        target = self.path if meta is not None and meta["complete"] else self.partial_path
        size = target.stat().st_size if target.exists() else 0
        if meta is None:
            if size or self.path.exists():
                raise InputError(f"cannot resume: {self.meta_path.name} is missing, so the "
                                 f"settings of the earlier run are unknown; pass --overwrite "
                                 f"(not --resume) to start over", path=self.path)
            return 0, 0
        if meta["header"] != self.header:
            raise InputError(f"cannot resume: the earlier run used other settings "
                             f"({_differences(meta['header'], self.header)}); pass --overwrite "
                             f"(not --resume) to start over with these, dropping its {meta['rows']:,} "
                             f"rows", path=self.path)
        self.previously_complete = meta["complete"] and size == meta["bytes"]
        self.checkpoint = meta.get("checkpoint", {})
        if self.previously_complete:
            return meta["rows"], meta["bytes"]
        if meta["complete"]:
            raise InputError("cannot resume: the finished output no longer matches its progress "
                             "record; pass --overwrite to score again", path=self.path)
        if size < meta["bytes"]:
            self.checkpoint = {}  # it described rows that are gone
        # The rows are the complete lines within what the record vouches for, counted: its "rows"
        # figure is checked against nothing where it has no checkpoint.
        rows, keep = _complete_lines(self.partial_path, min(size, meta["bytes"])) if size else (0, 0)
        if size > keep:
            os.ftruncate(self._file.fileno(), keep)
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
                 and all(type(meta[key]) is int and meta[key] >= 0 for key in ("rows", "bytes"))
                 and type(meta["complete"]) is bool and isinstance(meta.get("checkpoint", {}), dict))
        if not valid:
            raise InputError("not a progress record of gpu-neighbors", path=self.meta_path)
        return meta

    def _save_meta(self) -> None:
        if not self.resumable:  # a record for --resume, which this output cannot take
            return
        payload = {"header": self.header, "rows": self._done, "bytes": self._bytes,
                   "complete": self.complete, "checkpoint": self.checkpoint}
        temporary = self.meta_path.with_name(self.meta_path.name + ".tmp")
        try:
            with create_new(temporary) as file, naming(temporary):
                file.write((json.dumps(payload, ensure_ascii=False, indent=2) + "\n").encode("utf-8"))
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.meta_path)
        except BaseException:  # a full disk: the record as it was, no half-written one beside it
            temporary.unlink(missing_ok=True)
            raise


class ParquetResultWriter(ResultWriter):
    """The rows as a Parquet file, one row group per `write_columns`, with the locking,
    partial file and overwrite rules of `ResultWriter`. No resume: a Parquet file is readable
    only once its footer is written, so a killed run leaves nothing to continue from (write
    JSON Lines for runs that must survive a kill), and a failed run removes its partial files.
    `types` fixes a column's Arrow type (e.g. "double" for a column whose first batch holds
    only nulls); other columns are inferred."""

    resumable = False

    def __init__(self, path: PathLike, resume: bool = False, header: dict[str, Any] | None = None,
                 overwrite: bool = False, inputs: Mapping[str, PathLike | None] | None = None,
                 companions: Mapping[str, PathLike | None] | None = None,
                 types: Mapping[str, str] | None = None) -> None:
        if resume:
            raise InputError("cannot resume a Parquet output (a killed run leaves no readable "
                             "file); write JSON Lines (.jsonl) to be able to resume", path=path)
        if str(path) == STANDARD_STREAM:
            raise InputError("Parquet cannot be written to standard output", path=path)
        self._arrow = import_pyarrow(path, "writing Parquet")
        self._types = dict(types or {})
        self._parquet: Any = None
        super().__init__(path, header=header, overwrite=overwrite, inputs=inputs, companions=companions)

    def write_many(self, rows: Iterable[dict[str, Any]],
                   checkpoint: dict[str, Any] | None = None) -> None:
        rows = list(rows)
        if rows:
            self.write_columns({name: [row.get(name) for row in rows] for name in rows[0]}, checkpoint)

    def write_columns(self, columns: Mapping[str, Column],
                      checkpoint: dict[str, Any] | None = None) -> None:
        if self._closed:
            raise ValueError(f"{self.path}: the writer is closed")
        pa = self._arrow
        try:
            # A float array's NaN is "undefined", as in JSON Lines: null, not NaN.
            table = pa.table({name: pa.array(values, type=self._types.get(name),
                                             from_pandas=isinstance(values, np.ndarray))
                              for name, values in columns.items()})
        except (pa.ArrowException, TypeError, ValueError) as error:
            raise ValueError(f"{self.path}: result rows from {self._done} cannot be written: {error}") from None
        with self._naming():
            if self._parquet is None:
                self._parquet = pa.parquet.ParquetWriter(self._file, table.schema)
            else:
                table = table.cast(self._parquet.schema)
            self._parquet.write_table(table)
        self._done += table.num_rows

    def close(self, complete: bool = True) -> None:
        if self._parquet is not None and not self._closed:
            try:
                with self._naming():
                    self._parquet.close()  # writes the footer; the file stays open
                    self._file.flush()
                    os.fsync(self._file.fileno())  # on disk before the rename makes it the output
            except BaseException:  # a full disk: the partial files removed, the locks released
                super().close(complete=False)
                if complete:  # else the run's own error is the one to report
                    raise
        super().close(complete)


def open_results(path: PathLike, resume: bool = False, header: dict[str, Any] | None = None,
                 overwrite: bool = False, types: Mapping[str, str] | None = None,
                 inputs: Mapping[str, PathLike | None] | None = None,
                 companions: Mapping[str, PathLike | None] | None = None) -> ResultWriter:
    """The writer for `path`: Parquet for a `.parquet` name, else JSON Lines (never compressed:
    a compressed name is refused rather than holding plain text: `output.check_outputs`; so is
    the name of another format, `output.refuse_other_format_name`)."""
    refuse_other_format_name(path, "the output", parquet=True)
    if str(path).lower().endswith(".parquet"):
        return ParquetResultWriter(path, resume=resume, header=header, overwrite=overwrite, types=types,
                                   inputs=inputs, companions=companions)
    return ResultWriter(path, resume=resume, header=header, overwrite=overwrite, inputs=inputs,
                        companions=companions)


def _json_normalised(header: dict[str, Any] | None) -> Any:
    """The header as it reads back from JSON, so a stored one compares equal to a fresh one."""
    try:
        return json.loads(json.dumps(header, ensure_ascii=False, allow_nan=False,
                                     default=plain_json))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the run header must be plain JSON without NaN: {exc}") from None


def _differences(stored: Any, current: Any) -> str:
    """Each setting that differs, in full: cut short, two long values could read the same."""
    def shown(settings: dict[str, Any], key: str) -> str:
        return json.dumps(settings[key], ensure_ascii=False) if key in settings else "(absent)"

    if not (isinstance(stored, dict) and isinstance(current, dict)):
        return f"stored {preview(stored)}, now {preview(current)}"
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
