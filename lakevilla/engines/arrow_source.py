"""A MERGE source held in this process as a pyarrow table (the embedded engine's, and any
driver-side data a user hands the Spark engine before it becomes a DataFrame).

Its rows are fixed once taken, so it is staged only when a logical sublog entry must name it:
one Parquet file, written by this process through the store.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..data.schemas import to_arrow_table
from ..errors import InvalidArgumentError, SchemaMismatchError
from ..store import ObjectStore
from .api import TableContext
from .merge_plan import IN_LIST_LIMIT, BoundedKey, KeyBound, check_source_schema


def source_table(data: Any) -> pa.Table:
    """Any shape ``data.schemas.to_arrow_table`` takes, as the source's table (a stream is read
    whole: the source is joined, and maybe staged, as one)."""
    if isinstance(data, list) and not data:
        raise SchemaMismatchError("merge source is an empty list: its columns are unknown; pass a "
                                  "pyarrow.Table or a DataFrame with the columns")
    t = to_arrow_table(data)
    check_source_schema(t.schema)
    return t


@dataclass(frozen=True)
class ArrowSource:
    table: pa.Table
    staged: tuple[str, ...] = field(default=())

    @property
    def schema(self) -> pa.Schema:
        return self.table.schema

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    def key_bounds(self, keys: list[BoundedKey]) -> dict[str, KeyBound]:
        out = {}
        for k in keys:
            col = self.table.column(k.source)
            if col.null_count == len(col):
                out[k.source] = KeyBound(all_null=True)
                continue
            values = None
            if k.listed:
                distinct = pc.unique(col.drop_null()).to_pylist()
                values = tuple(distinct) if len(distinct) <= IN_LIST_LIMIT else None
            mm = pc.min_max(col)
            out[k.source] = KeyBound(False, mm["min"].as_py(), mm["max"].as_py(), values)
        return out

    def materialized(self, ctx: TableContext, stage_at: str | None) -> ArrowSource:
        return self  # fixed already; staged only if a logical entry needs it

    def stage(self, ctx: TableContext, at: str) -> ArrowSource:
        if self.staged:
            return self
        buf = io.BytesIO()
        pq.write_table(self.table, buf, compression="snappy")
        key = f"{at}.parquet"
        ctx.store.put(key, buf.getvalue())
        return ArrowSource(self.table, (key,))


def staged(store: ObjectStore, keys: tuple[str, ...]) -> ArrowSource:
    """A source staged before, read back whole (by any engine's client: Spark stages several
    files, the embedded engine one)."""
    parts = [pq.read_table(io.BytesIO(store.get(k).data)) for k in keys]
    if not parts:
        raise InvalidArgumentError("this merge's source was not staged: it cannot be re-executed")
    table = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
    return ArrowSource(table, tuple(keys))
