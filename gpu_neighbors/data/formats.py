"""File formats and raw records: which format a path holds, its physical lines, and its records.

Formats are chosen by extension, after a `.gz` one: `.jsonl` `.ndjson` `.json` (JSON Lines),
`.csv`, `.tsv` (the csv module with a tab delimiter, so quoted fields work as `csv.writer`
writes them), `.parquet` (candidates only, needs pyarrow), anything else is plain text with one
candidate per line. Gzip is recognised by its magic bytes, so a misnamed file still reads.
Line numbers are physical (1-based) lines of the file, also for CSV records that span lines.

`-` is standard input. A pipe, FIFO or `-` is opened once and read once: nothing peeks at it
ahead of the reader (its format is `file_format`, or sniffed from the buffered first bytes).
TSV is read as TSV: a tab separates fields, a quote is an ordinary character (`quoting="csv"`
opts in to CSV quote rules); CSV follows RFC 4180.
"""
from __future__ import annotations

import codecs
import csv
import gzip
import io
import json
import os
import stat
import sys
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, NamedTuple, cast

from gpu_neighbors.data.errors import STANDARD_STREAM, InputError, PathLike, preview

FORMATS = ("jsonl", "csv", "tsv", "text", "parquet")
_FORMAT_BY_SUFFIX = {
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
    ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet",
}
_DELIMITERS = {"csv": ",", "tsv": "\t"}
_GZIP_MAGIC = b"\x1f\x8b"
JSON_WHITESPACE = " \t\r\n"
# Deeper JSON is a bad record: Python 3.11's parser raises RecursionError near 1,000 levels, 3.12's
# reads 5,000 and more, and such a record breaks whatever walks it later (its rejects line, say).
MAX_JSON_NESTING = 500
BLOCK_LINES = 4096  # lines handled per step by the readers' inner loops
COUNT_CHUNK_BYTES = 1 << 20
_CSV_FIELD_LIMIT = 2**31 - 1  # fits a C long everywhere; the default 128 KiB breaks long texts
QUOTINGS = ("none", "csv")  # quote rules of TSV files: none (the default) or CSV's
_SNIFF_BYTES = 4096


class Record(NamedTuple):
    """One record of a line-based file: its fields, or the error that made it unusable (then
    `fields` is empty)."""

    line: int
    fields: dict[str, Any]
    raw: str
    error: InputError | None


def detect_format(path: PathLike) -> str:
    """Format from the extension, looking through one `.gz`; unknown extensions are text."""
    name = Path(path).name.lower().removesuffix(".gz")
    return _FORMAT_BY_SUFFIX.get(Path(name).suffix, "text")


def resolve_format(path: PathLike, file_format: str | None, allowed: Sequence[str]) -> str | None:
    """The format to read `path` as; None means: sniff it from the first bytes (a pipe or `-`
    with no format given and no telling extension)."""
    fmt = detect_format(path) if file_format is None else file_format
    if file_format is None and fmt == "text" and not is_regular(path):
        return None
    how = "" if file_format else f" (from its extension {Path(path).suffix or '(none)'!r})"
    return _allowed(fmt, how, path, allowed)


def _allowed(fmt: str, how: str, path: PathLike, allowed: Sequence[str]) -> str:
    if fmt not in allowed:
        raise InputError(f"format {fmt!r}{how} is not supported here; use one of "
                         f"{', '.join(allowed)}", path=path)
    return fmt


def sniff_allowed(stream: IO[bytes], path: PathLike, allowed: Sequence[str]) -> str:
    """`sniff_format` of a stream `resolve_format` left to sniff, refused the same way when
    its format is not one of `allowed` (plain text from a pipe where fields are needed)."""
    return _allowed(sniff_format(stream), " (from its first bytes: no JSON object)", path, allowed)


def sniff_format(stream: IO[bytes]) -> str:
    """JSON Lines when the first non-blank byte opens an object, else plain text: all that a
    prefix tells without reading on (CSV or TSV from a pipe needs an explicit format)."""
    peek = getattr(stream, "peek", None)
    prefix = peek(_SNIFF_BYTES) if peek is not None else b""
    if prefix.startswith(codecs.BOM_UTF8):
        prefix = prefix[len(codecs.BOM_UTF8):]
    return "jsonl" if prefix.lstrip().startswith(b"{") else "text"


def is_regular(path: PathLike) -> bool:
    """A regular file (after symlinks) can be opened again; `-`, pipes and devices cannot."""
    return str(path) != STANDARD_STREAM and Path(path).is_file()


def check_readable(path: PathLike) -> None:
    """Fails the clear way for a missing, unreadable or directory input, without opening (and
    so consuming) a pipe."""
    if str(path) == STANDARD_STREAM:
        return
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError("no such file", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror or exc}", path=path) from None
    if stat.S_ISDIR(mode):
        raise InputError("is a directory, not a file", path=path)
    if stat.S_ISREG(mode) and not os.access(path, os.R_OK):
        raise InputError("cannot open: Permission denied", path=path)


@contextmanager
def open_input(path: PathLike) -> Iterator[IO[bytes]]:
    """The bytes of `path` (or standard input for `-`), gunzipped when they start with gzip's
    magic bytes; the check peeks into the stream's buffer, so a pipe loses nothing."""
    check_readable(path)
    if str(path) == STANDARD_STREAM:
        buffered = cast(io.BufferedReader, sys.stdin.buffer)
    else:
        try:
            buffered = open(path, "rb")
        except OSError as exc:
            raise InputError(f"cannot open: {exc.strerror or exc}", path=path) from None
    try:
        if buffered.peek(2)[:2] == _GZIP_MAGIC:
            with gzip.GzipFile(fileobj=buffered) as unzipped:
                yield cast(IO[bytes], unzipped)
        else:
            yield buffered
    finally:
        if buffered is not sys.stdin.buffer:
            buffered.close()


class Overlong(bytes):
    """The start of a line longer than a reader's limit: the rest was skipped unread, so a
    single huge line costs no more memory than the limit (`decode` refuses it)."""

    limit: int


OVERLONG_KEPT = 200  # bytes of an overlong line kept, to show where it was


def line_bytes_limit(max_chars: int) -> int:
    """Bytes a line may take to hold a text of `max_chars` characters: JSON may spell one
    character in 12 bytes (an escaped surrogate pair), and a record has other fields too."""
    return 12 * max_chars + (1 << 20)


def physical_lines(stream: IO[bytes], path: PathLike,
                   max_line_bytes: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(1-based line, raw bytes with their newline); damaged gzip data becomes an InputError."""
    for first, raws in physical_blocks(stream, path, max_line_bytes=max_line_bytes):
        yield from enumerate(raws, first)


def _bounded_lines(stream: IO[bytes], limit: int) -> Iterator[bytes]:
    """The lines of `stream`, each longer than `limit` bytes as an `Overlong` of its start."""
    readline = stream.readline
    while raw := readline(limit):
        if len(raw) == limit and not raw.endswith(b"\n"):
            while (rest := readline(limit)) and not rest.endswith(b"\n"):
                pass
            raw = Overlong(raw[:OVERLONG_KEPT])
            raw.limit = limit
        yield raw


def physical_blocks(stream: IO[bytes], path: PathLike, block_lines: int = BLOCK_LINES,
                    max_line_bytes: int | None = None) -> Iterator[tuple[int, list[bytes]]]:
    """The lines in blocks of `block_lines`: (1-based number of the first line, raw lines with
    their newlines). Damaged gzip data becomes an InputError naming the first line it took,
    after the lines before it. With `max_line_bytes`, a longer line is read no further (see
    `Overlong`)."""
    first, block = 1, list[bytes]()
    append = block.append
    error: InputError | None = None
    try:
        for raw in stream if max_line_bytes is None else _bounded_lines(stream, max_line_bytes):
            append(raw)
            if len(block) == block_lines:
                yield first, block
                first += block_lines
                block = []
                append = block.append
    except (OSError, EOFError, zlib.error) as exc:
        error = InputError(f"cannot read: {exc}", path=path, line=first + len(block))
    if block:
        yield first, block
    if error is not None:
        raise error


def decode(raw: bytes, line: int, path: PathLike) -> str | InputError:
    """Strict UTF-8 per line, so the error can say which line; a BOM on line 1 is dropped."""
    if isinstance(raw, Overlong):
        return InputError(f"line longer than {raw.limit:,} bytes, more than --max-chars allows; "
                          f"not read further", path=path, line=line)
    if line == 1 and raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return InputError(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column "
                          f"{exc.start + 1})", path=path, line=line)


def strip_newline(raw: bytes) -> bytes:
    if raw.endswith(b"\n"):
        raw = raw[:-1]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
    return raw


def _jsonl_records(stream: IO[bytes], path: PathLike, max_line_bytes: int | None) -> Iterator[Record]:
    """One JSON object per line; whitespace-only lines are not records and are skipped."""
    for line, raw in physical_lines(stream, path, max_line_bytes):
        record = jsonl_record(line, raw, path)
        if record is not None:
            yield record


def many_brackets(text: str | bytes) -> bool:
    """More opening brackets than MAX_JSON_NESTING (a count in C): only such a line can nest
    too deeply, and only its depth is measured."""
    if isinstance(text, bytes):
        return text.count(b"[") + text.count(b"{") > MAX_JSON_NESTING
    return text.count("[") + text.count("{") > MAX_JSON_NESTING


def nesting_depth(text: str) -> int:
    """How deep JSON's arrays and objects nest in `text` (brackets inside strings not counted);
    read only for the rare line with more brackets than MAX_JSON_NESTING."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def delimited_hint(text: str) -> str:
    """Where a line that is not JSON reads as CSV or TSV (fields split by commas or tabs, no
    object): the flag that reads the file so."""
    if text.lstrip().startswith(("{", "[")):
        return ""
    for separator, fmt in (("\t", "tsv"), (",", "csv")):
        if separator in text:
            return f"; the line reads as {fmt.upper()}: give --format {fmt} to read the file so"
    return ""


def jsonl_record(line: int, raw: bytes, path: PathLike) -> Record | None:
    """The record on one line of a JSON Lines file (None for a whitespace-only line)."""
    text = decode(raw, line, path)
    if isinstance(text, InputError):
        return Record(line, {}, raw.decode("utf-8", "replace").rstrip("\r\n"), text)
    if not text.strip(JSON_WHITESPACE):
        return None
    shown = text.rstrip("\r\n")
    if many_brackets(text) and nesting_depth(text) > MAX_JSON_NESTING:
        return Record(line, {}, shown, InputError("JSON nested too deeply to read", path=path, line=line))
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        error = InputError(f"invalid JSON: {exc.msg} (column {exc.colno}); JSON Lines needs "
                           f"one object per line{delimited_hint(shown)}", path=path, line=line)
        return Record(line, {}, shown, error)
    except RecursionError:
        return Record(line, {}, shown, InputError("JSON nested too deeply to read", path=path, line=line))
    except ValueError as exc:  # an integer of more digits than Python converts
        return Record(line, {}, shown, InputError(f"unreadable JSON number: {exc}", path=path, line=line))
    if not isinstance(value, dict):
        error = InputError(f"expected a JSON object, got {type(value).__name__} "
                           f"{preview(value)}", path=path, line=line)
        return Record(line, {}, shown, error)
    return Record(line, value, shown, None)


def _delimited_records(stream: IO[bytes], path: PathLike, fmt: str, required: Sequence[str],
                       quoting: str, max_line_bytes: int | None = None) -> Iterator[Record]:
    """CSV/TSV rows as dicts keyed by the header row; `line` is where a record starts.

    The file is decoded line by line ahead of the csv module, so bad bytes are blamed on their
    own line and only the record that holds them is lost.
    """
    csv.field_size_limit(_CSV_FIELD_LIMIT)
    undecodable: dict[int, InputError] = {}
    consumed: list[str] = []

    def decoded_lines() -> Iterator[str]:
        for line, raw in physical_lines(stream, path, max_line_bytes):
            text = decode(raw, line, path)
            if isinstance(text, InputError):
                undecodable[line] = text
                text = raw.decode("utf-8", "replace")
            consumed.append(text)
            yield text

    reader = csv.reader(decoded_lines(), **_dialect(fmt, quoting))
    header: list[str] | None = None
    end = 0
    while True:
        try:
            row: list[str] = next(reader)
            error = None
        except StopIteration:
            return
        except csv.Error as exc:
            row, error = [""], f"malformed {fmt.upper()}: {exc}"
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
            yield Record(problem.line or start, {}, raw, problem)
        else:
            yield Record(start, dict(zip(header, row)), raw, None)


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


def _dialect(fmt: str, quoting: str) -> dict[str, Any]:
    """csv.reader settings: RFC 4180 for CSV; for TSV no quote processing unless asked for."""
    if quoting not in QUOTINGS:
        raise ValueError(f"quoting must be one of {', '.join(QUOTINGS)}, not {quoting!r}")
    if fmt == "tsv" and quoting == "none":
        return {"delimiter": "\t", "quoting": csv.QUOTE_NONE, "strict": True}
    return {"delimiter": _DELIMITERS[fmt], "strict": True}


def records(stream: IO[bytes], path: PathLike, fmt: str, required: Sequence[str],
            quoting: str = "none", max_chars: int | None = None) -> Iterator[Record]:
    """The records of a JSONL, CSV or TSV stream; with `max_chars`, a line too long to hold a
    text of that length is a bad record, read no further."""
    limit = None if max_chars is None else line_bytes_limit(max_chars)
    if fmt == "jsonl":
        return _jsonl_records(stream, path, limit)
    return _delimited_records(stream, path, fmt, required, quoting, limit)


def import_pyarrow(path: PathLike, purpose: str = "reading Parquet"):
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise InputError(f"{purpose} needs pyarrow: pip install 'gpu-neighbors[parquet]'",
                         path=path) from None
    return pyarrow


def count_records(path: PathLike, *, file_format: str | None = None,
                  quoting: str = "none") -> int | None:
    """Record count for a progress bar total, or None when it would cost a decompression
    (gzip), a second read of a pipe, or a missing optional package. Counts records, bad ones
    included."""
    fmt = resolve_format(path, file_format, FORMATS)
    if fmt is None or not is_regular(path):
        return None
    if fmt == "parquet":
        try:
            pa = import_pyarrow(path)
            return pa.parquet.ParquetFile(path).metadata.num_rows
        except InputError:
            return None
        except (pa.ArrowException, OSError) as exc:
            raise InputError(f"not a readable Parquet file: {exc}", path=path) from None
    with open(path, "rb") as file:
        if file.read(2) == _GZIP_MAGIC:
            return None
        file.seek(0)
        if fmt == "text":
            return _count_lines(file)
        if fmt == "jsonl":
            return sum(1 for raw in file if raw.strip(JSON_WHITESPACE.encode()))
        text = (raw.decode("utf-8", "replace") for raw in file)
        csv.field_size_limit(_CSV_FIELD_LIMIT)
        try:
            rows = sum(1 for row in csv.reader(text, **_dialect(fmt, quoting)) if row)
        except csv.Error:
            return None
        return max(rows - 1, 0)


def _count_lines(file) -> int:
    """Newlines, plus one for a last line without one: the records of a plain-text file."""
    count, last = 0, b"\n"
    while chunk := file.read(COUNT_CHUNK_BYTES):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (last != b"\n")
