"""Generated columns on the embedded engine: computed in DuckDB over the rows about to be written.

Delta makes a writer compute a generated column when the data does not give it (an insert
without the column, a merge clause that leaves it out, an update that sets what it reads but
not it); a value the data does give is only checked (``rules.py``, with the other rules, where
every write is checked). The value is the expression under the assignment cast to the column's
type, as a ``set`` is computed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..delta.constraints import generated_columns
from ..errors import InvalidExpressionError, SchemaMismatchError
from ..scan import expressions as E
from .api import TableContext
from .duck_sql import assignment_cast, first_line, query_one
from .rules import generation


def missing(ctx: TableContext, given: Iterable[str]) -> list[str]:
    """The generated columns the data does not give (names matched as ``conform`` matches)."""
    have = {n.lower() for n in given}
    return [n for n in sorted(generated_columns(ctx.constraints)) if n.lower() not in have]


def fill(ctx: TableContext, table: pa.Table, columns: Iterable[str],
         rows: pa.Array | None = None) -> pa.Table:
    """``table`` (in table schema) with ``columns`` computed from each row (only in the rows
    ``rows`` selects, when given), in one DuckDB query."""
    cols = list(columns)
    if not cols or not table.num_rows:
        return table
    gen = generation(ctx)  # refuses an expression outside the grammar, by name
    fields = [ctx.schema.field(c) for c in cols]
    select = ", ".join(f"{assignment_cast(gen[c].sql, f)} AS __v{i}"
                       for i, (c, f) in enumerate(zip(cols, fields, strict=True)))
    try:
        out = query_one(table, select)
    except Exception as e:  # noqa: BLE001 - overflow, division by zero, in the table's expression
        raise InvalidExpressionError(f"generated column(s) {cols} of {ctx.name!r}: "
                                     f"{first_line(e)}") from None
    for i, (c, f) in enumerate(zip(cols, fields, strict=True)):
        v = out.column(f"__v{i}").combine_chunks()
        if not v.type.equals(f.type):
            v = pc.cast(v, f.type)
        if rows is not None:
            v = pc.if_else(rows, v, table.column(c).combine_chunks())
        if not f.nullable and v.null_count:
            raise SchemaMismatchError(f"generated column {c!r} of {ctx.name!r} is NULL "
                                      f"({gen[c].text}) for a row; the column is non-nullable")
        table = table.set_column(table.schema.get_field_index(c), f, v)
    return table


def by_clause(ctx: TableContext, table: pa.Table, clause: np.ndarray,
              values: Sequence[dict[str, E.Checked] | None]) -> pa.Table:
    """A merge's new rows, each made by clause ``clause[row]`` (``values``: each clause's
    assignments): a generated column its clause does not assign is computed."""
    for col in sorted(generated_columns(ctx.constraints)):
        giving = [i for i, v in enumerate(values) if v and col in v]
        rows = ~np.isin(clause, giving)
        if rows.any():
            table = fill(ctx, table, [col], pa.array(rows))
    return table


def reassigned(ctx: TableContext, matched: pa.Table,
               values: dict[str, pa.Array]) -> dict[str, pa.Array]:
    """An update's new values for the matched rows (``values``: the columns it sets) with the
    generated columns it does not set recomputed from the new row, as Delta does."""
    cols = [c for c in sorted(generated_columns(ctx.constraints)) if c not in values]
    if not cols:
        return values
    new = matched
    for name, v in values.items():
        new = new.set_column(new.schema.get_field_index(name), ctx.schema.field(name), v)
    new = fill(ctx, new, cols)
    return {**values, **{c: new.column(c).combine_chunks() for c in cols}}
