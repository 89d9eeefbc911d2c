"""JSON lines, row by row or column by column, byte for byte the same.

A row is what `json.dumps(row, ensure_ascii=False, allow_nan=False)` writes, plus a newline. A
scoring run writes millions of rows whose columns each hold one plain type, so `encode_columns`
encodes a column of strings, integers or floats in one pass of the standard library's own C
encoders (the same functions `json.dumps` calls) and fills a row template once per row; any
other column goes value by value through `json.dumps`. Either way the bytes are those of
`encode_rows` (tested on adversarial values). A float64 array goes through orjson where it is
installed (20x `float.__repr__` a value): it writes the same shortest digits as `repr`, and the
same text wherever `repr` writes no exponent (1e-4 <= |x| < 1e16, and 0); the others are
written by `repr`.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain, repeat
from types import ModuleType
from typing import Any

import numpy as np

from json.encoder import encode_basestring  # the C encoder json.dumps uses, where present

orjson: ModuleType | None
try:
    import orjson
except ImportError:  # optional: the standard library writes the same bytes, slower
    orjson = None

Column = Sequence[Any] | np.ndarray  # the values of one field, row by row
_NULL, _TRUE, _FALSE = "null", "true", "false"
# Where float.__repr__ writes no exponent (and so where orjson writes the same text).
_POSITIONAL = (1e-4, 1e16)
_NON_FINITE = frozenset({"nan", "inf", "-inf"})  # what float.__repr__ writes for them
float_repr = float.__repr__  # what json.dumps writes for a finite float


class UnwritableRow(ValueError):
    """A value JSON cannot hold (NaN, infinity, an unknown object, an unpaired surrogate)."""

    def __init__(self, row: int, reason: str) -> None:
        super().__init__(f"result row {row} cannot be written: {reason}")
        self.row = row


def plain_json(value: Any) -> Any:
    """numpy scalars and arrays, torch tensors: anything with `tolist` becomes plain JSON."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, default=plain_json)


def encode_rows(rows: Iterable[Mapping[str, Any]], first_row: int = 0) -> bytes:
    """Each row as one JSON line; rows are numbered from `first_row` in errors."""
    lines = []
    for offset, row in enumerate(rows):
        try:
            lines.append((_dumps(row) + "\n").encode("utf-8"))
        except (TypeError, ValueError) as error:  # UnicodeEncodeError is a ValueError
            raise UnwritableRow(first_row + offset, str(error)) from None
    return b"".join(lines)


def encode_columns(columns: Mapping[str, Column], first_row: int = 0) -> bytes:
    """The rows {name: column[i] for each column}, i = 0..n-1, as `encode_rows` writes them.
    A column may also be a `range`, or a float64 numpy array whose NaN stands for None."""
    if not columns:
        raise ValueError("encode_columns needs at least one column")
    sizes = {len(values) for values in columns.values()}
    if len(sizes) != 1:
        raise ValueError(f"columns of different lengths: {sorted(sizes)}")
    encoded = [_encode_column(values, first_row) for values in columns.values()]
    # Every row is the same run of parts: '{"a": ', value, ', "b": ', value, ..., '}\n'.
    keys = [encode_basestring(name) for name in columns]
    prefixes = ["{" + keys[0] + ": "] + [f", {key}: " for key in keys[1:]]
    parts = chain.from_iterable(zip(*(item for pair in zip(map(repeat, prefixes), encoded) for item in pair),
                                    repeat("}\n")))
    text = "".join(parts)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # an unpaired surrogate: find its row (JSON escapes every newline)
        for row, line in enumerate(text.split("\n")):
            try:
                line.encode("utf-8")
            except UnicodeEncodeError as error:
                raise UnwritableRow(first_row + row, str(error)) from None
        raise


def _encode_column(values: Column, first_row: int) -> list[str]:
    """The JSON text of every value of one column."""
    if isinstance(values, range):
        return list(map(int.__repr__, values))
    if isinstance(values, np.ndarray) and values.dtype == np.float64 and values.ndim == 1:
        return _encode_float_array(values, first_row)
    kinds = set(map(type, values))
    if kinds <= {str}:
        return list(map(encode_basestring, values))
    if kinds <= {bool}:
        return [_TRUE if value else _FALSE for value in values]
    if kinds <= {int}:
        return list(map(int.__repr__, values))
    if kinds <= {float, type(None)}:
        texts = [_NULL if value is None else float_repr(value) for value in values]
        if not _NON_FINITE.isdisjoint(texts):
            row = next(row for row, text in enumerate(texts) if text in _NON_FINITE)
            raise _out_of_range(first_row + row, values[row])
        return texts
    texts = []
    for row, value in enumerate(values):
        try:
            texts.append(_dumps(value))
        except (TypeError, ValueError) as error:
            raise UnwritableRow(first_row + row, str(error)) from None
    return texts


def _encode_float_array(values: np.ndarray, first_row: int) -> list[str]:
    """A float64 array: NaN is null (JSON has no NaN: it is how an array says "undefined"),
    infinity is refused."""
    infinite = np.flatnonzero(np.isinf(values))
    if infinite.size:
        row = int(infinite[0])
        raise _out_of_range(first_row + row, values[row])
    if orjson is None or not values.size:
        texts = list(map(float_repr, values.tolist()))
        for row in np.flatnonzero(np.isnan(values)).tolist():
            texts[row] = _NULL
        return texts
    # orjson writes NaN as null; a float's text holds no comma.
    texts = orjson.dumps(np.ascontiguousarray(values), option=orjson.OPT_SERIALIZE_NUMPY)[1:-1].decode().split(",")
    with np.errstate(invalid="ignore"):
        magnitude = np.abs(values)
        exponent = ((magnitude < _POSITIONAL[0]) & (magnitude > 0)) | (magnitude >= _POSITIONAL[1])
    for row in np.flatnonzero(exponent).tolist():
        texts[row] = float_repr(float(values[row]))
    return texts


def _out_of_range(row: int, value: float) -> UnwritableRow:
    return UnwritableRow(row, f"Out of range float values are not JSON compliant: {value!r}")
