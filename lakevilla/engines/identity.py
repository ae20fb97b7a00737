"""Identity columns on the way into data files: which ones a write generates, and their values.

Delta makes a writer generate an identity column the data does not give: ``start``, then one
``step`` past the table's high-water mark, in the order the rows come. A value the data gives
is refused unless the column allows explicit inserts. The statement then advances the mark
(``statements/identity.py``) from the same context, so the values and the mark agree. Both
engines generate here (Spark's DataFrames go through Arrow for it, as its Arrow input does).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..delta.identity import IdentityColumn
from ..errors import SchemaMismatchError
from .api import TableContext


def absent(ctx: TableContext, given: Iterable[str]) -> list[IdentityColumn]:
    """The identity columns the data does not give (names matched as ``conform`` matches); a
    given one that may not be given is refused before anything is written."""
    have = {n.lower() for n in given}
    out = []
    for col in ctx.identity:
        if col.name.lower() not in have:
            out.append(col)
        elif not col.allow_explicit_insert:
            raise SchemaMismatchError(
                f"insert into {ctx.name!r}: {col.name!r} is an identity column "
                "(GENERATED ALWAYS): its values are generated, the data may not give them")
    return out


class Numbering:
    """The values of one write, across the pieces it is written in (a stream's chunks)."""

    def __init__(self, columns: list[IdentityColumn]) -> None:
        self.columns = columns
        self.done = 0  # rows numbered so far

    def fill(self, schema: pa.Schema, table: pa.Table) -> pa.Table:
        """``table`` (in table schema) with the columns numbered, continuing the write."""
        n = table.num_rows
        for col in self.columns:
            first = col.first() + self.done * col.step
            values = pa.array(range(first, first + n * col.step, col.step), pa.int64())
            i = table.schema.get_field_index(col.name)
            table = table.set_column(i, schema.field(col.name), values)
        self.done += n
        return table


def refuse_updates(ctx: TableContext, assigned: Iterable[str], what: str) -> None:
    """Delta never updates an identity column's values."""
    names = {c.name.lower() for c in ctx.identity}
    hit = [n for n in assigned if n.lower() in names]
    if hit:
        raise SchemaMismatchError(f"{what} on {ctx.name!r} sets identity column(s) {hit}: their "
                                  "values are generated once, when a row is inserted")


def by_clause(ctx: TableContext, table: pa.Table, clause: np.ndarray,
              values: Sequence[dict[str, Any] | None]) -> tuple[pa.Table, dict[str, int]]:
    """A merge's new rows (``clause[row]`` made each, ``values``: each clause's assignments)
    with the identity columns their clause does not give numbered in row order; the marks."""
    marks: dict[str, int] = {}
    for col in ctx.identity:
        giving = [i for i, v in enumerate(values) if v and col.name in v]
        if giving and not col.allow_explicit_insert:
            raise SchemaMismatchError(
                f"merge into {ctx.name!r}: an insert clause gives identity column {col.name!r} "
                "(GENERATED ALWAYS): leave it out, its values are generated")
        rows = ~np.isin(clause, giving)
        n = int(rows.sum())
        if not n:
            continue
        numbers = np.zeros(table.num_rows, dtype=np.int64)
        numbers[rows] = col.first() + np.arange(n, dtype=np.int64) * col.step
        i = table.schema.get_field_index(col.name)
        v = pc.if_else(pa.array(rows), pa.array(numbers), table.column(i).combine_chunks())
        table = table.set_column(i, ctx.schema.field(col.name), v)
        mark = col.mark_after(n)
        if mark is not None:
            marks[col.name] = mark
    return table, marks
