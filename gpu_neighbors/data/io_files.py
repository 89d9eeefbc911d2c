"""Streaming readers and a resumable result writer.

A scoring run reads millions of lines, so readers stream and turn bad input into `InputError`
naming file, line and field instead of a traceback from deep inside a parser. Line numbers are
physical (1-based) lines of the file, also for CSV records that span several lines.

Formats are chosen by extension, after a `.gz` one: `.jsonl` `.ndjson` `.json` (JSON Lines),
`.csv`, `.tsv` (the csv module with a tab delimiter, so quoted fields work as `csv.writer`
writes them), `.parquet` (candidates only, needs pyarrow), anything else is plain text with one
candidate per line. Gzip is recognised by its magic bytes, so a misnamed file still reads.
"""
from __future__ import annotations

import codecs
import csv
import gzip
import json
import math
import os
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

PathLike = str | os.PathLike

FORMATS = ("jsonl", "csv", "tsv", "text", "parquet")
_FORMAT_BY_SUFFIX = {
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
    ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet",
}
_DELIMITERS = {"csv": ",", "tsv": "\t"}
_GZIP_MAGIC = b"\x1f\x8b"
_JSON_WHITESPACE = " \t\r\n"
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_PARQUET_BATCH_ROWS = 65_536
_COUNT_CHUNK_BYTES = 1 << 20
_CSV_FIELD_LIMIT = 2**31 - 1  # fits a C long everywhere; the default 128 KiB breaks long texts
_MISSING = object()


class InputError(ValueError):
    """Bad input; str() names file, line and field, e.g.
    "train.jsonl:17: field 'score': "abc" is not a number"."""

    def __init__(self, reason: str, *, path: PathLike | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.reason, self.path, self.line, self.field = reason, path, line, field
        super().__init__(self._message())

    @property
    def detail(self) -> str:
        """The message without file and line: what a rejects file records as the reason."""
        return self.reason if self.field is None else f"field '{self.field}': {self.reason}"

    def _message(self) -> str:
        where = "" if self.path is None else str(self.path)
        if self.line is not None:
            where = f"{where}:{self.line}"
        return f"{where}: {self.detail}" if where else self.detail


@dataclass(frozen=True)
class ScoredData:
    """A scored training set; `lines` trace each record back to its physical line."""

    texts: list[str]
    scores: np.ndarray
    lines: list[int]
    extra: list[dict[str, Any]]

    def __len__(self) -> int:
        return len(self.texts)


class Candidate(NamedTuple):
    """`index` counts accepted candidates only (0-based), so it lines up with output rows and
    with `ResultWriter.done` on resume; `line` (1-based) points back into the file."""

    index: int
    line: int
    text: str


class _Record(NamedTuple):
    """One record of a line-based file: its fields, or the error that made it unusable."""

    line: int
    fields: dict[str, Any] | None
    raw: str
    error: InputError | None


# ---------------------------------------------------------------- formats and raw lines

def detect_format(path: PathLike) -> str:
    """Format from the extension, looking through one `.gz`; unknown extensions are text."""
    name = Path(path).name.lower().removesuffix(".gz")
    return _FORMAT_BY_SUFFIX.get(Path(name).suffix, "text")


def _resolve_format(path: PathLike, file_format: str | None, allowed: Sequence[str]) -> str:
    fmt = detect_format(path) if file_format is None else file_format
    if fmt not in allowed:
        how = "" if file_format else f" (from its extension {Path(path).suffix or '(none)'!r})"
        raise InputError(f"format {fmt!r}{how} is not supported here; use one of "
                         f"{', '.join(allowed)}", path=path)
    return fmt


def _is_gzip(path: PathLike) -> bool:
    """Also checks that the file can be opened, so every reader fails the same clear way."""
    try:
        with open(path, "rb") as file:
            return file.read(2) == _GZIP_MAGIC
    except FileNotFoundError:
        raise InputError("no such file", path=path) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a file", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror or exc}", path=path) from None


def _physical_lines(path: PathLike) -> Iterator[tuple[int, bytes]]:
    """(1-based line, raw bytes with their newline); damaged gzip data becomes an InputError."""
    opener = gzip.open if _is_gzip(path) else open
    line = 0
    with opener(path, "rb") as file:
        try:
            for line, raw in enumerate(file, 1):
                yield line, raw
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"cannot read: {exc}", path=path, line=line + 1) from None


def _decode(raw: bytes, line: int, path: PathLike) -> str | InputError:
    """Strict UTF-8 per line, so the error can say which line; a BOM on line 1 is dropped."""
    if line == 1 and raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return InputError(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column "
                          f"{exc.start + 1})", path=path, line=line)


def _strip_newline(raw: bytes) -> bytes:
    if raw.endswith(b"\n"):
        raw = raw[:-1]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
    return raw


def _preview(value: Any) -> str:
    """A value as the file spells it, cut short so one bad field cannot flood a message."""
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------- records

def _jsonl_records(path: PathLike) -> Iterator[_Record]:
    """One JSON object per line; whitespace-only lines are not records and are skipped."""
    for line, raw in _physical_lines(path):
        text = _decode(raw, line, path)
        if isinstance(text, InputError):
            yield _Record(line, None, raw.decode("utf-8", "replace").rstrip("\r\n"), text)
            continue
        if not text.strip(_JSON_WHITESPACE):
            continue
        shown = text.rstrip("\r\n")
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            error = InputError(f"invalid JSON: {exc.msg} (column {exc.colno}); JSON Lines needs "
                               f"one object per line", path=path, line=line)
            yield _Record(line, None, shown, error)
            continue
        if not isinstance(value, dict):
            error = InputError(f"expected a JSON object, got {type(value).__name__} "
                               f"{_preview(value)}", path=path, line=line)
            yield _Record(line, None, shown, error)
            continue
        yield _Record(line, value, shown, None)


def _delimited_records(path: PathLike, fmt: str, required: Sequence[str]) -> Iterator[_Record]:
    """CSV/TSV rows as dicts keyed by the header row; `line` is where a record starts.

    The file is decoded line by line ahead of the csv module, so bad bytes are blamed on their
    own line and only the record that holds them is lost.
    """
    csv.field_size_limit(_CSV_FIELD_LIMIT)
    undecodable: dict[int, InputError] = {}
    consumed: list[str] = []

    def decoded_lines() -> Iterator[str]:
        for line, raw in _physical_lines(path):
            text = _decode(raw, line, path)
            if isinstance(text, InputError):
                undecodable[line] = text
                text = raw.decode("utf-8", "replace")
            consumed.append(text)
            yield text

    reader = csv.reader(decoded_lines(), delimiter=_DELIMITERS[fmt], strict=True)
    header: list[str] | None = None
    end = 0
    while True:
        try:
            row: list[str] | None = next(reader)
            error = None
        except StopIteration:
            return
        except csv.Error as exc:
            row, error = None, f"malformed {fmt.upper()}: {exc}"
        start, end = end + 1, reader.line_num
        raw = "".join(consumed).rstrip("\r\n")
        consumed.clear()
        if row == []:
            continue
        if undecodable:  # the reader never reads ahead: these lines are all in this record
            problem = undecodable[min(undecodable)]
            undecodable.clear()
        elif error is not None:
            problem = InputError(error, path=path, line=start)
        elif header is not None and len(row) != len(header):
            problem = InputError(f"{len(row)} fields, but the header has {len(header)}",
                                 path=path, line=start)
        else:
            problem = None
        if header is None:
            if problem is not None:
                raise InputError(f"header row: {problem.reason}", path=path, line=problem.line)
            header = _checked_header(row, required, path, start)
        elif problem is not None:
            yield _Record(problem.line or start, None, raw, problem)
        else:
            yield _Record(start, dict(zip(header, row)), raw, None)


def _checked_header(row: list[str], required: Sequence[str], path: PathLike,
                    line: int) -> list[str]:
    seen: set[str] = set()
    for name in row:
        if name in seen:
            raise InputError(f"duplicate column {name!r} in the header row", path=path, line=line)
        seen.add(name)
    for name in required:
        if name not in seen:
            raise InputError(f"no such column (the header has {', '.join(map(repr, row))})",
                             path=path, line=line, field=name)
    return row


def _records(path: PathLike, fmt: str, required: Sequence[str]) -> Iterator[_Record]:
    return _jsonl_records(path) if fmt == "jsonl" else _delimited_records(path, fmt, required)


def _text_field(record: _Record, field: str, path: PathLike) -> str | InputError:
    value = record.fields.get(field, _MISSING)
    if value is _MISSING:
        return InputError("missing", path=path, line=record.line, field=field)
    if not isinstance(value, str):
        return InputError(f"{_preview(value)} is not a string", path=path, line=record.line,
                          field=field)
    return _checked_text(value, path, record.line, field)


def _checked_text(text: str, path: PathLike, line: int, field: str | None) -> str | InputError:
    """Rejects lone surrogates (from JSON "\\ud800" escapes): they cannot be written as UTF-8."""
    found = _SURROGATE.search(text)
    if found:
        return InputError(f"contains an unpaired surrogate U+{ord(found.group()):04X}, which is "
                          f"not valid Unicode", path=path, line=line, field=field)
    return text


def _score_field(record: _Record, field: str, path: PathLike, *,
                 parse_strings: bool) -> float | InputError:
    """JSON scores must be JSON numbers; CSV/TSV fields are all text, so those are parsed."""
    value = record.fields.get(field, _MISSING)
    where = {"path": path, "line": record.line, "field": field}
    if value is _MISSING:
        return InputError("missing", **where)
    if isinstance(value, str) and parse_strings:
        try:
            score = float(value)
        except ValueError:
            return InputError(f"{_preview(value)} is not a number", **where)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            score = float(value)
        except OverflowError:  # an integer beyond the float range
            return InputError(f"{_preview(value)} is not a finite number", **where)
    else:
        return InputError(f"{_preview(value)} is not a number", **where)
    if not math.isfinite(score):
        return InputError(f"{_preview(value)} is not a finite number", **where)
    return score


# ---------------------------------------------------------------- training sets

def read_scored(path: PathLike, *, text_field: str = "text", score_field: str = "score",
                keep_fields: Sequence[str] = (), file_format: str | None = None) -> ScoredData:
    """Reads a whole scored training set (JSONL, CSV or TSV, each maybe gzipped).

    Any bad record stops the read: a silently shrunken training set changes every estimate.
    Scores are not range-checked; the scorer decides what range it accepts. `keep_fields` are
    copied into `extra` when a record has them (CSV/TSV values stay strings).
    """
    fmt = _resolve_format(path, file_format, ("jsonl", "csv", "tsv"))
    keep = (keep_fields,) if isinstance(keep_fields, str) else tuple(keep_fields)
    texts: list[str] = []
    scores: list[float] = []
    lines: list[int] = []
    extra: list[dict[str, Any]] = []
    for record in _records(path, fmt, (text_field, score_field)):
        if record.error is not None:
            raise record.error
        text = _text_field(record, text_field, path)
        score = _score_field(record, score_field, path, parse_strings=fmt != "jsonl")
        for value in (text, score):
            if isinstance(value, InputError):
                raise value
        texts.append(text)
        scores.append(score)
        lines.append(record.line)
        extra.append({name: record.fields[name] for name in keep if name in record.fields})
    if not texts:
        raise InputError("empty training set (no records)", path=path)
    return ScoredData(texts, np.asarray(scores, dtype=np.float64), lines, extra)


# ---------------------------------------------------------------- candidates

class CandidateStream:
    """The candidates of one file, read lazily in constant memory.

    Each pass rereads the file from the start (a resumed run skips `index < done`), and
    rewrites `rejects`. `rejected` counts the records the latest pass skipped.
    """

    def __init__(self, path: PathLike, *, text_field: str = "text", skip_bad: bool = False,
                 rejects: PathLike | None = None, file_format: str | None = None) -> None:
        if rejects is not None and not skip_bad:
            raise ValueError("a rejects file is only written with skip_bad=True")
        self.path = path
        self.format = _resolve_format(path, file_format, FORMATS)
        self.text_field = text_field
        self.skip_bad = skip_bad
        self.rejects = rejects
        self.rejected = 0
        _is_gzip(path)  # a missing or unreadable file fails here, not at the first read

    def __iter__(self) -> Iterator[Candidate]:
        self.rejected = 0
        log = None if self.rejects is None else open(self.rejects, "w", encoding="utf-8")
        try:
            index = 0
            for line, text, raw in self._texts():
                if isinstance(text, InputError):
                    if not self.skip_bad:
                        raise text
                    self.rejected += 1
                    if log is not None:
                        entry = {"line": text.line, "reason": text.detail, "raw": raw}
                        log.write(json.dumps(entry, ensure_ascii=False) + "\n")
                    continue
                yield Candidate(index, line, text)
                index += 1
        finally:
            if log is not None:
                log.close()

    def _texts(self) -> Iterator[tuple[int, str | InputError, Any]]:
        """(line, text or the error that rejects it, the raw record for a rejects file)."""
        if self.format == "text":
            yield from _text_lines(self.path)
        elif self.format == "parquet":
            yield from _parquet_texts(self.path, self.text_field)
        else:
            for record in _records(self.path, self.format, (self.text_field,)):
                text = record.error or _text_field(record, self.text_field, self.path)
                yield record.line, text, record.raw


def iter_candidates(path: PathLike, *, text_field: str = "text", skip_bad: bool = False,
                    rejects: PathLike | None = None,
                    file_format: str | None = None) -> CandidateStream:
    """Streams candidates; bad records raise InputError, or with `skip_bad` are skipped,
    counted in `.rejected` and logged to `rejects` as JSONL {"line", "reason", "raw"}.
    Plain text keeps empty lines as empty candidates (they score as undefined)."""
    return CandidateStream(path, text_field=text_field, skip_bad=skip_bad, rejects=rejects,
                           file_format=file_format)


def _text_lines(path: PathLike) -> Iterator[tuple[int, str | InputError, str]]:
    for line, raw in _physical_lines(path):
        body = _strip_newline(raw)
        text = _decode(body, line, path)
        yield line, text, text if isinstance(text, str) else body.decode("utf-8", "replace")


def _import_pyarrow(path: PathLike):
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise InputError("reading Parquet needs pyarrow: pip install 'gpu-neighbors[parquet]'",
                         path=path) from None
    return pyarrow


def _is_string_type(pa, data_type) -> bool:
    if pa.types.is_dictionary(data_type):
        return _is_string_type(pa, data_type.value_type)
    is_view = getattr(pa.types, "is_string_view", lambda _: False)
    return pa.types.is_string(data_type) or pa.types.is_large_string(data_type) or is_view(data_type)


def _parquet_texts(path: PathLike, field: str) -> Iterator[tuple[int, str | InputError, Any]]:
    """Rows of one column in record batches; `line` is the 1-based row number."""
    pa = _import_pyarrow(path)
    try:
        parquet = pa.parquet.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"not a readable Parquet file: {exc}", path=path) from None
    schema = parquet.schema_arrow
    if field not in schema.names:
        raise InputError(f"no such column (the file has {', '.join(map(repr, schema.names))})",
                         path=path, field=field)
    data_type = schema.field(field).type
    if not _is_string_type(pa, data_type):
        raise InputError(f"column type is {data_type}, not a string type", path=path, field=field)
    row = 0
    try:
        for batch in parquet.iter_batches(batch_size=_PARQUET_BATCH_ROWS, columns=[field]):
            for value in batch.column(0).to_pylist():
                row += 1
                if value is None:
                    yield row, InputError("missing (null)", path=path, line=row, field=field), None
                else:
                    yield row, _checked_text(value, path, row, field), value
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"cannot read: {exc}", path=path, line=row + 1) from None


def count_records(path: PathLike, *, file_format: str | None = None) -> int | None:
    """Record count for a progress bar total, or None when it would cost a decompression
    (gzip) or a missing optional package. Counts records, bad ones included."""
    fmt = _resolve_format(path, file_format, FORMATS)
    if fmt == "parquet":
        try:
            pa = _import_pyarrow(path)
            return pa.parquet.ParquetFile(path).metadata.num_rows
        except InputError:
            return None
        except (pa.ArrowException, OSError) as exc:
            raise InputError(f"not a readable Parquet file: {exc}", path=path) from None
    if _is_gzip(path):
        return None
    with open(path, "rb") as file:
        if fmt == "text":
            return _count_lines(file)
        if fmt == "jsonl":
            return sum(1 for raw in file if raw.strip(_JSON_WHITESPACE.encode()))
        text = (raw.decode("utf-8", "replace") for raw in file)
        csv.field_size_limit(_CSV_FIELD_LIMIT)
        try:
            rows = sum(1 for row in csv.reader(text, delimiter=_DELIMITERS[fmt]) if row)
        except csv.Error:
            return None
        return max(rows - 1, 0)


def _count_lines(file) -> int:
    """Newlines, plus one for a last line without one: the records of a plain-text file."""
    count, last = 0, b"\n"
    while chunk := file.read(_COUNT_CHUNK_BYTES):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (last != b"\n")


# ---------------------------------------------------------------- results

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
        return f"stored {_preview(stored)}, now {_preview(current)}"
    def shown(settings: dict[str, Any], key: str) -> str:
        return _preview(settings[key]) if key in settings else "(absent)"

    changed = [key for key in {**stored, **current}
               if stored.get(key, _MISSING) != current.get(key, _MISSING)]
    return "; ".join(f"{key}: {shown(stored, key)} before, {shown(current, key)} now"
                     for key in changed)


def _complete_lines(path: Path, size: int) -> tuple[int, int]:
    """(number of newline-terminated lines, byte length they span) in the first `size` bytes."""
    lines = keep = position = 0
    with open(path, "rb") as file:
        while position < size:
            chunk = file.read(min(_COUNT_CHUNK_BYTES, size - position))
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
