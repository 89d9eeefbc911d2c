"""Streaming readers: a scored training set, and candidates in constant memory.

A scoring run reads millions of lines, so readers stream and turn bad input into `InputError`
naming file, line and field instead of a traceback from deep inside a parser.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Iterator, Sequence
from itertools import chain, islice
from pathlib import Path
from dataclasses import dataclass, field as dataclass_field
from typing import IO, Any, TypeVar

import numpy as np

from gpu_neighbors.core.files import create_new
from gpu_neighbors.core.inputs import SURROGATE
from gpu_neighbors.data.errors import InputError, PathLike, preview
from gpu_neighbors.data.jsonlines import orjson
from gpu_neighbors.data.formats import (
    BLOCK_LINES,
    FORMATS,
    Record,
    check_readable,
    decode,
    import_pyarrow,
    many_brackets,
    is_regular,
    jsonl_record,
    open_input,
    line_bytes_limit,
    physical_blocks,
    physical_lines,
    records,
    resolve_format,
    sniff_format,
    strip_newline,
)

T = TypeVar("T")
_PARQUET_BATCH_ROWS = 65_536
_MISSING = object()
DEFAULT_MAX_CHARS = 100_000  # longer texts are refused: one 50 MB line would take GBs to score
SCORED_FORMATS = ("jsonl", "csv", "tsv")  # what a scored file may be
MAX_NAMES_SHOWN = 12  # of a record's fields, in a message about one it lacks


@dataclass(frozen=True)
class ScoredData:
    """A scored training set; `lines` trace each record back to its physical line."""

    texts: list[str]
    scores: np.ndarray
    lines: list[int]
    extra: list[dict[str, Any]]

    def __len__(self) -> int:
        return len(self.texts)

    def digest(self) -> str:
        """SHA-256 of the texts and scores in order: what a model fitted on this data saw, so a
        resumed run can tell whether its training data changed."""
        digest = hashlib.sha256()
        for text, score in zip(self.texts, self.scores.tolist()):
            digest.update(json.dumps([text, score], ensure_ascii=False).encode("utf-8"))
            digest.update(b"\n")
        return digest.hexdigest()


@dataclass(slots=True)
class Candidate:
    """`index` counts accepted candidates only (0-based), so it lines up with output rows and
    with `ResultWriter.done` on resume; `line` (1-based) points back into the file. (Not
    frozen: a run makes millions, and a frozen dataclass takes three times as long to make.)"""

    index: int
    line: int
    text: str


@dataclass(frozen=True)
class CandidateBatch:
    """Consecutive accepted candidates as columns: indices start, start + 1, ..., their
    physical lines and texts (a scoring run handles millions, a batch at a time), and the
    label fields the stream was asked to keep (`keep_fields`), one list of strings each, and the
    fields it was asked to carry (`carry_fields`), one list of their values each (None where a
    record has none)."""

    start: int
    lines: list[int]
    texts: list[str]
    labels: dict[str, list[Any]] = dataclass_field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.texts)

    def __iter__(self) -> Iterator[Candidate]:
        return map(Candidate, self.indices, self.lines, self.texts)

    @property
    def indices(self) -> range:
        return range(self.start, self.start + len(self.texts))

    def without_first(self, count: int) -> CandidateBatch:
        """The batch less its first `count` candidates."""
        count = min(max(count, 0), len(self))
        return CandidateBatch(self.start + count, self.lines[count:], self.texts[count:],
                              {name: values[count:] for name, values in self.labels.items()})


def missing_field(fields: dict[str, Any], flag: str) -> str:
    """Why a field is missing, with the fields the record has and the flag that names another."""
    names = list(fields)
    shown = ", ".join(map(repr, names[:MAX_NAMES_SHOWN])) + (", ..." if len(names) > MAX_NAMES_SHOWN else "")
    return f"missing (the record has {shown or 'no fields'}; {flag} names another field)"


def _text_field(record: Record, field: str, path: PathLike, max_chars: int) -> str | InputError:
    value = record.fields.get(field, _MISSING)
    if value is _MISSING:
        return InputError(missing_field(record.fields, "--text-field"), path=path, line=record.line, field=field)
    if not isinstance(value, str):
        return InputError(f"{preview(value)} is not a string", path=path, line=record.line,
                          field=field)
    return _checked_text(value, path, record.line, field, max_chars)


def _checked_text(text: str, path: PathLike, line: int, field: str | None,
                  max_chars: int) -> str | InputError:
    """Rejects texts over `max_chars` characters, and lone surrogates (from JSON "\\ud800"
    escapes): they cannot be written as UTF-8."""
    if len(text) > max_chars:
        return InputError(f"is {len(text):,} characters long, more than the limit of "
                          f"{max_chars:,} (--max-chars)", path=path, line=line, field=field)
    found = SURROGATE.search(text)
    if found:
        return InputError(f"contains an unpaired surrogate U+{ord(found.group()):04X}, which is "
                          f"not valid Unicode", path=path, line=line, field=field)
    return text


def _label_field(fields: dict[str, Any], field: str, path: PathLike, line: int) -> str | InputError:
    """A label (a system's name, an input's id) as a string: JSON numbers by their JSON text,
    so a CSV and a JSON Lines file of the same data give the same labels; anything else, or an
    empty string, is refused."""
    value = fields.get(field, _MISSING)
    if value is _MISSING or value is None:
        return InputError("missing" if value is _MISSING else "null: every candidate needs a value here",
                          path=path, line=line, field=field)
    if isinstance(value, str):
        return value if value else InputError("empty", path=path, line=line, field=field)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return json.dumps(value)
    return InputError(f"{preview(value)} is not a string or a number", path=path, line=line, field=field)


def _labelled(text: str | InputError, fields: dict[str, Any], keep: tuple[str, ...], path: PathLike,
              line: int, carry: tuple[str, ...] = ()) -> tuple[str | InputError, tuple[Any, ...]]:
    """The text, or the first error among it and the kept label fields, with the labels and
    then the carried fields' values (None where missing: a carried field is never an error)."""
    labels = []
    for name in keep:
        label = _label_field(fields, name, path, line)
        if isinstance(label, InputError):
            return (text if isinstance(text, InputError) else label), ()
        labels.append(label)
    return text, (*labels, *(fields.get(name) for name in carry))


def _score_field(record: Record, field: str, path: PathLike, *,
                 parse_strings: bool) -> float | InputError:
    """JSON scores must be JSON numbers; CSV/TSV fields are all text, so those are parsed."""
    value = record.fields.get(field, _MISSING)

    def bad(reason: str) -> InputError:
        return InputError(reason, path=path, line=record.line, field=field)

    if value is _MISSING:
        return bad(missing_field(record.fields, "--score-field"))
    if isinstance(value, str) and parse_strings:
        try:
            score = float(value)
        except ValueError:
            return bad(f"{preview(value)} is not a number")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            score = float(value)
        except OverflowError:  # an integer beyond the float range
            return bad(f"{preview(value)} is not a finite number")
    else:
        return bad(f"{preview(value)} is not a number")
    if not math.isfinite(score):
        return bad(f"{preview(value)} is not a finite number")
    return score


def read_scored(path: PathLike, *, text_field: str = "text", score_field: str = "score",
                keep_fields: Sequence[str] = (), file_format: str | None = None,
                quoting: str = "none", max_chars: int = DEFAULT_MAX_CHARS) -> ScoredData:
    """Reads a whole scored training set (JSONL, CSV or TSV, each maybe gzipped; `-` or a pipe
    is read once, as JSONL unless `file_format` says otherwise).

    Any bad record stops the read: a silently shrunken training set changes every estimate.
    Scores are not range-checked; the scorer decides what range it accepts. `keep_fields` are
    copied into `extra` when a record has them (CSV/TSV values stay strings).
    """
    fmt = resolve_format(path, file_format, SCORED_FORMATS)
    keep = (keep_fields,) if isinstance(keep_fields, str) else tuple(keep_fields)
    texts: list[str] = []
    scores: list[float] = []
    lines: list[int] = []
    extra: list[dict[str, Any]] = []
    with open_input(path) as stream:
        fmt = fmt or "jsonl"
        for record in records(stream, path, fmt, (text_field, score_field), quoting, max_chars):
            if record.error is not None:
                raise record.error
            text = _text_field(record, text_field, path, max_chars)
            score = _score_field(record, score_field, path, parse_strings=fmt != "jsonl")
            if isinstance(text, InputError):
                raise text
            if isinstance(score, InputError):
                raise score
            texts.append(text)
            scores.append(score)
            lines.append(record.line)
            extra.append({name: record.fields[name] for name in keep if name in record.fields})
    if not texts:
        raise InputError("empty training set (no records)", path=path)
    return ScoredData(texts, np.asarray(scores, dtype=np.float64), lines, extra)


class CandidateStream:
    """The candidates of one file, read lazily in constant memory.

    Each pass rereads the file from the start (a resumed run skips `index < done`), and
    rewrites `rejects`. `rejected` counts the records the latest pass skipped. A pipe or `-`
    allows one pass.
    """

    def __init__(self, path: PathLike, *, text_field: str = "text", skip_bad: bool = False,
                 rejects: PathLike | None = None, file_format: str | None = None,
                 quoting: str = "none", max_chars: int = DEFAULT_MAX_CHARS,
                 keep_fields: Sequence[str] = (), carry_fields: Sequence[str] = ()) -> None:
        if rejects is not None and not skip_bad:
            raise ValueError("a rejects file is only written with skip_bad=True")
        self.path = path
        self.format = resolve_format(path, file_format, FORMATS)
        if self.format == "parquet" and not is_regular(path):
            raise InputError("Parquet needs a file it can seek in, not a pipe", path=path)
        self.keep_fields, self.carry_fields = tuple(keep_fields), tuple(carry_fields)
        if (self.keep_fields or self.carry_fields) and self.format == "text":
            raise InputError(f"plain text has no fields, so no "
                             f"{', '.join(map(repr, self.keep_fields + self.carry_fields))}: "
                             "use JSON Lines, CSV, TSV or Parquet", path=path)
        self.text_field = text_field
        self.skip_bad = skip_bad
        self.rejects = rejects
        self.quoting = quoting
        self.max_chars = max_chars
        self.rejected = 0
        self._passes = 0
        check_readable(path)  # a missing or unreadable file fails here, not at the first read

    def __iter__(self) -> Iterator[Candidate]:
        return chain.from_iterable(self.batches(BLOCK_LINES))

    def batches(self, size: int) -> Iterator[CandidateBatch]:
        """The candidates in batches of `size` (the last one shorter), as a scoring run takes
        them; the per-line work runs in one loop per block of lines. Before a bad record
        stops the pass, the good ones before it come out as a shorter batch. A missing or bad
        kept label field makes the record bad, as a bad text does."""
        if self._passes and not is_regular(self.path):
            raise InputError("is a pipe or standard input: it can be read only once; save it "
                             "to a file to read it again", path=self.path)
        self._passes += 1
        self.rejected = 0
        log = None if self.rejects is None else io.TextIOWrapper(create_new(Path(self.rejects)), encoding="utf-8")
        keep = self.keep_fields + self.carry_fields
        try:
            start, lines, texts, labels = 0, list[int](), list[str](), [list[Any]() for _ in keep]
            blocks = self._blocks()
            while True:
                try:
                    block = next(blocks)
                except StopIteration:
                    break
                except InputError:  # unreadable from here on (damaged gzip): the rows before it first
                    if texts:
                        yield CandidateBatch(start, lines, texts, dict(zip(keep, labels)))
                    raise
                for line, text, raw, values in block:
                    if isinstance(text, InputError):
                        if not self.skip_bad:
                            if texts:
                                yield CandidateBatch(start, lines, texts, dict(zip(keep, labels)))
                            raise text
                        self._reject(text, raw, log)
                        continue
                    lines.append(line)
                    texts.append(text)
                    if keep:
                        for column, value in zip(labels, values):
                            column.append(value)
                    if len(texts) == size:
                        yield CandidateBatch(start, lines, texts, dict(zip(keep, labels)))
                        start, lines, texts, labels = start + size, [], [], [[] for _ in keep]
            if texts:
                yield CandidateBatch(start, lines, texts, dict(zip(keep, labels)))
        finally:
            if log is not None:
                log.close()

    def _reject(self, error: InputError, raw: Any, log: IO[str] | None) -> None:
        self.rejected += 1
        if log is not None:
            entry = {"line": error.line, "reason": error.detail, "raw": raw}
            log.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def _blocks(self) -> Iterator[list[tuple[int, str | InputError, Any, tuple[Any, ...]]]]:
        """Blocks of (line, text or the error that rejects it, the raw record for a rejects
        file, the kept labels and carried values)."""
        keep, carry, path = self.keep_fields, self.carry_fields, self.path
        if self.format == "parquet":
            yield from _in_blocks(_parquet_texts(path, self.text_field, self.max_chars, keep, carry))
            return
        with open_input(path) as stream:
            fmt = self.format or sniff_format(stream)
            if fmt == "text":
                if keep or carry:  # a pipe sniffed as plain text
                    raise InputError(f"plain text has no fields, so no {', '.join(map(repr, keep + carry))}",
                                     path=path)
                no_labels: tuple[str, ...] = ()
                yield from _in_blocks((line, text, raw, no_labels) for line, text, raw
                                      in _text_lines(stream, path, self.max_chars))
            elif fmt == "jsonl":
                yield from _jsonl_blocks(stream, path, self.text_field, self.max_chars, keep, carry)
            else:
                records_ = records(stream, path, fmt, (self.text_field, *keep), self.quoting, self.max_chars)
                yield from _in_blocks(
                    _candidate_record(record, self.text_field, path, self.max_chars, keep, carry)
                    for record in records_
                )


def _candidate_record(record: Record, field: str, path: PathLike, max_chars: int, keep: tuple[str, ...],
                      carry: tuple[str, ...] = ()) -> tuple[int, str | InputError, Any, tuple[Any, ...]]:
    """A parsed record as a candidate stream's item: (line, text or error, raw, labels)."""
    text, labels = _labelled(record.error or _text_field(record, field, path, max_chars), record.fields,
                             keep, path, record.line, carry)
    return record.line, text, record.raw, labels


def _in_blocks(items: Iterator[T]) -> Iterator[list[T]]:
    while block := list(islice(items, BLOCK_LINES)):
        yield block


def iter_candidates(path: PathLike, *, text_field: str = "text", skip_bad: bool = False,
                    rejects: PathLike | None = None, file_format: str | None = None,
                    quoting: str = "none", max_chars: int = DEFAULT_MAX_CHARS,
                    keep_fields: Sequence[str] = (), carry_fields: Sequence[str] = ()) -> CandidateStream:
    """Streams candidates; bad records raise InputError, or with `skip_bad` are skipped,
    counted in `.rejected` and logged to `rejects` as JSONL {"line", "reason", "raw"}.
    Plain text keeps empty lines as empty candidates (they score as undefined). Each of
    `keep_fields` (e.g. the system that made a text) is read as a label into the batches, and
    each of `carry_fields` (an id) as it is, None where a record lacks it."""
    return CandidateStream(path, text_field=text_field, skip_bad=skip_bad, rejects=rejects,
                           file_format=file_format, quoting=quoting, max_chars=max_chars,
                           keep_fields=keep_fields, carry_fields=carry_fields)


def _jsonl_blocks(stream: IO[bytes], path: PathLike, field: str, max_chars: int, keep: tuple[str, ...] = (),
                  carry: tuple[str, ...] = ()) -> Iterator[list[tuple[int, str | InputError, Any, tuple[Any, ...]]]]:
    """The text field (and the `keep` labels) of each JSON Lines record, block by block. A line
    that is a JSON object with a string `field` within the limits is taken in one step; any
    other line, or one whose labels are bad, goes through the full record checks, which name
    what is wrong (so both ways accept and refuse the same lines). Without labels, orjson parses
    where installed (3x `json.loads`): every line it accepts, `json.loads` reads as the same
    text, and what it refuses (lone surrogates, NaN, bad UTF-8) takes the full checks; labels
    keep `json.loads`, which reads a big integer as an int where orjson makes it a float (and so
    do carried fields)."""
    loads = json.loads if keep or carry or orjson is None else orjson.loads
    for first, raws in physical_blocks(stream, path, max_line_bytes=line_bytes_limit(max_chars)):
        block: list[tuple[int, str | InputError, Any, tuple[Any, ...]]] = []
        for line, raw in enumerate(raws, first):
            value: Any = None
            try:
                if type(raw) is bytes and not many_brackets(raw):  # not Overlong, nor perhaps too deep
                    value = loads(raw) if loads is not json.loads else loads(raw.decode("utf-8"))
                    text = value[field]
                else:
                    text = None
            except (ValueError, LookupError, TypeError, RecursionError):  # bad bytes or JSON, no field, no object
                text = None
            if type(text) is str and len(text) <= max_chars and (text.isascii() or not SURROGATE.search(text)):
                if not keep and not carry:
                    block.append((line, text, None, ()))
                    continue
                checked, labels = _labelled(text, value, keep, path, line, carry)
                if not isinstance(checked, InputError):
                    block.append((line, checked, None, labels))
                    continue
            record = jsonl_record(line, raw, path)
            if record is not None:
                block.append(_candidate_record(record, field, path, max_chars, keep, carry))
        yield block


def _text_lines(stream: IO[bytes], path: PathLike,
                max_chars: int) -> Iterator[tuple[int, str | InputError, str]]:
    for line, raw in physical_lines(stream, path, line_bytes_limit(max_chars)):
        body = strip_newline(raw)
        text = decode(body, line, path)
        if isinstance(text, str) and "\r" in text and not raw.endswith(b"\n"):
            # a file with carriage returns but no line feed: old Mac line ends, many texts read as
            # one (a carriage return inside a line that a line feed ends is kept as text)
            yield line, InputError("holds a carriage return that ends no line (old Mac line ends?): a "
                                   "plain-text file holds one text per line, each ended by \\n or \\r\\n; "
                                   "convert it first (tr '\\r' '\\n')", path=path, line=line), text
        elif isinstance(text, str):
            yield line, _checked_text(text, path, line, None, max_chars), text
        else:
            yield line, text, body.decode("utf-8", "replace")


def _is_string_type(pa, data_type) -> bool:
    if pa.types.is_dictionary(data_type):
        return _is_string_type(pa, data_type.value_type)
    is_view = getattr(pa.types, "is_string_view", lambda _: False)
    return pa.types.is_string(data_type) or pa.types.is_large_string(data_type) or is_view(data_type)


def _parquet_texts(path: PathLike, field: str, max_chars: int, keep: tuple[str, ...] = (),
                   carry: tuple[str, ...] = ()) -> Iterator[tuple[int, str | InputError, Any, tuple[Any, ...]]]:
    """Rows of the text column (and the `keep` label columns, then the `carry` columns, None
    where the file has no such column) in record batches; `line` is the 1-based row number."""
    pa = import_pyarrow(path)
    try:
        parquet = pa.parquet.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"not a readable Parquet file: {exc}", path=path) from None
    schema = parquet.schema_arrow
    for name in (field, *keep):
        if name not in schema.names:
            flag = "; --text-field names another" if name == field else ""
            raise InputError(f"no such column (the file has {', '.join(map(repr, schema.names))}{flag})",
                             path=path, field=name)
    data_type = schema.field(field).type
    if not _is_string_type(pa, data_type):
        raise InputError(f"column type is {data_type}, not a string type", path=path, field=field)
    row = 0
    present = [name for name in carry if name in schema.names]
    columns = list(dict.fromkeys([field, *keep, *present]))
    try:
        for batch in parquet.iter_batches(batch_size=_PARQUET_BATCH_ROWS, columns=columns):
            kept = {name: batch.column(columns.index(name)).to_pylist() for name in (*keep, *present)}
            for position, value in enumerate(batch.column(0).to_pylist()):
                row += 1
                if value is None:
                    text: str | InputError = InputError("missing (null)", path=path, line=row, field=field)
                else:
                    text = _checked_text(value, path, row, field, max_chars)
                fields = {name: values[position] for name, values in kept.items()}
                checked, labels = _labelled(text, fields, keep, path, row, carry)
                yield row, checked, value, labels
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"cannot read: {exc}", path=path, line=row + 1) from None
