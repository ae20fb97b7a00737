"""Small SQL helpers the embedded engine's statements share (DuckDB over Arrow tables)."""

from __future__ import annotations

import pyarrow as pa

from ..scan import duck
from ..scan import expressions as E


def query_one(table: pa.Table, select: str) -> pa.Table:
    """``SELECT <select>`` over one Arrow table."""
    return duck.query(f"SELECT {select} FROM __lv_rel0", {"__lv_rel0": table})


def assignment_cast(sql: str | None, field: pa.Field) -> str:
    """SQL's assignment cast of a value (NULL for None) to a column's type: every path that
    writes a computed value into a column (SET, MERGE's update and insert) converts alike."""
    return f"CAST({'NULL' if sql is None else f'({sql})'} AS {E.duckdb_type(field.type)})"


def first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__
