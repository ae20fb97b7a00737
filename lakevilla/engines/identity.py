"""Identity columns on the way into data files: which ones a write generates, and their values.

Delta makes a writer generate an identity column the data does not give: ``start``, then one
``step`` past the table's high-water mark, in the order the rows come. A value the data gives
is refused unless the column allows explicit inserts. The statement then advances the mark
(``statements/identity.py``) from the same context, so the values and the mark agree. Both
engines generate here (Spark's DataFrames go through Arrow for it, as its Arrow input does).
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

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
