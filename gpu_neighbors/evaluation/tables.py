"""Results as markdown tables or JSON, for the command line and the report.

Protocol results are flat dicts (`as_dict()`); NaN marks undefined numbers, which JSON cannot
hold, so they become null there and an em dash in tables.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any


def plain(value: Any) -> Any:
    """JSON-ready copy: NaN/inf -> None, numpy scalars and arrays -> Python values."""
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if hasattr(value, "tolist"):
        return plain(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_json(value: Any) -> str:
    return json.dumps(plain(value))


def cell(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if abs(value) >= 10 ** -digits or value == 0 else f"{value:.2e}"
    return str(value)


def fixed(value: float, digits: int = 3) -> str:
    """A figure in prose or a composite cell ("0.12 to 0.34"): `digits` decimals, or the tables'
    em dash where it is undefined (NaN), never "nan"."""
    return "—" if not math.isfinite(value) else f"{value:.{digits}f}"


def markdown_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, digits: int = 4
) -> str:
    """A GitHub markdown table of `rows` (columns default to the first row's keys)."""
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())
    return "\n".join([markdown_head(columns), *(markdown_row(row, columns, digits) for row in rows)])


def markdown_head(columns: Sequence[str]) -> str:
    """A markdown table's first two lines: its column names and the rule under them."""
    return "| " + " | ".join(columns) + " |\n|" + "|".join("---" for _ in columns) + "|"


def markdown_row(row: Mapping[str, Any], columns: Sequence[str], digits: int = 4) -> str:
    """One line of a markdown table (a missing column is an em dash), printable on its own."""
    return "| " + " | ".join(cell(row.get(column), digits) for column in columns) + " |"
