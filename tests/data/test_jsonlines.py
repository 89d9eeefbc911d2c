"""Column-wise JSON lines are byte for byte the row-wise ones (which are json.dumps's)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_columns_must_line_up():
    with pytest.raises(ValueError, match="different lengths"):
        encode_columns({"a": [1], "b": [1, 2]})
    with pytest.raises(ValueError, match="at least one column"):
        encode_columns({})
