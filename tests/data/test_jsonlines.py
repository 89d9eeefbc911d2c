"""Column-wise JSON lines are byte for byte the row-wise ones (which are json.dumps's)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_neighbors.data import jsonlines
from gpu_neighbors.data.jsonlines import UnwritableRow, encode_columns, encode_rows

AWKWARD_STRINGS = ["", "plain", 'quote " and \\ backslash', "%s %d %% percent", "tab\tnew\nline\r",
                   "\x00\x1f\x7f controls", "\u2028\u2029 separators", "ü 東京 🙂", "\ufeffbom"]


def rows_of(columns):
    size = len(next(iter(columns.values())))
    return [{name: values[i] for name, values in columns.items()} for i in range(size)]


def assert_same_bytes(columns):
    expected = b"".join((json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n").encode()
                        for row in rows_of(columns))
    assert encode_rows(rows_of(columns)) == expected
    assert encode_columns(columns) == expected


def test_result_columns_encode_as_json_dumps_rows():
    size = len(AWKWARD_STRINGS)
    assert_same_bytes({
        "index": list(range(size - 3, 2 * size - 3)),
        "text": AWKWARD_STRINGS,
        "score": [0.1, None, -0.0, 1e-320, 1e300, 2 / 3, 1.0, None, 5e-324],
        "num_neighbors": [0, -1, 2**70, 3, 4, 5, 6, 7, 8],
        "estimator": ["threshold"] * size,
        "mixed": [True, None, 1, 1.5, "s", [1, "a"], {"k": None}, False, []],
        'key "with" %s, ü': ["x"] * size,
    })


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(),
                    st.floats(allow_nan=False, allow_infinity=False))
plain_columns = st.one_of(st.lists(st.text(), min_size=3, max_size=3),
                          st.lists(st.booleans(), min_size=3, max_size=3),
                          st.lists(st.integers(), min_size=3, max_size=3),
                          st.lists(st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)),
                                   min_size=3, max_size=3),
                          st.lists(st.one_of(scalars, st.lists(scalars, max_size=2)), min_size=3, max_size=3))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=4), plain_columns, min_size=1, max_size=4))
def test_any_columns_encode_as_json_dumps_rows(columns):
    assert_same_bytes(columns)


@pytest.mark.parametrize("column, row", [([0.5, float("nan")], 8), ([float("inf"), 0.5], 7),
                                         (["a", "\ud800"], 8), ([object(), 1], 7)])
def test_an_unwritable_value_names_its_row(column, row):
    for encode in (lambda: encode_columns({"v": column}, first_row=7),
                   lambda: encode_rows(rows_of({"v": column}), first_row=7)):
        with pytest.raises(UnwritableRow, match=f"result row {row} cannot be written"):
            encode()


def test_numpy_values_become_plain_json():
    columns = {"a": [np.float64(0.5)], "b": [np.int64(3)], "c": [np.array([1, 2])]}
    assert encode_columns(columns) == encode_rows(rows_of(columns)) == b'{"a": 0.5, "b": 3, "c": [1, 2]}\n'


def test_ranges_and_float_arrays_are_columns_whose_nan_is_null():
    values = np.array([0.5, np.nan, -0.0, 1e-320, 2 / 3, np.nan])
    as_lists = {"index": list(range(7, 13)), "score": [None if np.isnan(v) else float(v) for v in values]}
    assert encode_columns({"index": range(7, 13), "score": values}) == encode_columns(as_lists)
    with pytest.raises(UnwritableRow, match="result row 4 cannot be written"):
        encode_columns({"score": np.array([0.0, np.inf])}, first_row=3)


# Around where float.__repr__ switches to an exponent (|x| < 1e-4 or >= 1e16), subnormals, signed
# zero, and plain values.
AWKWARD_FLOATS = [1e-4, float(np.nextafter(1e-4, 0)), float(np.nextafter(1e-4, 1)), 1e16, float(np.nextafter(1e16, 0)),
                  9999999999999998.0, 1e15, 5e-324, 1e-320, 2.2250738585072014e-308, -0.0, 0.0, 1e-5, -1e-5, 1e22,
                  -1.5e300, 1.7976931348623157e308, 0.1, 0.30000000000000004, 2 / 3, 1.0, -123.0, 100.0, 1234567.125]


def float_column_bytes(values: np.ndarray) -> bytes:
    return b"".join((json.dumps({"v": None if np.isnan(value) else value}) + "\n").encode()
                    for value in values.tolist())


@pytest.mark.parametrize("with_orjson", [True, False])
def test_float_arrays_encode_as_json_dumps_with_and_without_orjson(monkeypatch, with_orjson):
    """orjson (where installed) writes a float array, repr the values where its text differs:
    the bytes are json.dumps's either way, around both ends of repr's positional range too."""
    if with_orjson:
        pytest.importorskip("orjson")
    else:
        monkeypatch.setattr(jsonlines, "orjson", None)
    rng = np.random.default_rng(0)
    values = np.concatenate([AWKWARD_FLOATS, np.negative(AWKWARD_FLOATS), [np.nan] * 3,
                             rng.random(2000) * 10.0 ** rng.integers(-12, 24, 2000),
                             rng.integers(0, 2**63, 2000).view(np.float64)])
    values = values[~np.isinf(values)]
    assert encode_columns({"v": values}) == float_column_bytes(values)
    assert encode_columns({"v": values[::-3]}) == float_column_bytes(values[::-3])  # not contiguous
    assert encode_columns({"v": np.zeros(0)}) == b""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_infinity=False), min_size=1, max_size=20))
def test_any_float_array_encodes_as_json_dumps(values):
    array = np.array(values, dtype=np.float64)
    assert encode_columns({"v": array}) == float_column_bytes(array)


def test_columns_must_line_up():
    with pytest.raises(ValueError, match="different lengths"):
        encode_columns({"a": [1], "b": [1, 2]})
    with pytest.raises(ValueError, match="at least one column"):
        encode_columns({})
