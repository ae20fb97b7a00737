"""``lake.changes`` on the embedded engine: the change rows of a table's commits as one pyarrow
Table.

A commit that has ``cdc`` actions is represented by those files alone (their ``_change_type``
column says insert, delete, update_preimage or update_postimage). Any other commit is derived
from its data-changing file actions: the live rows of the files it removed that its added files
do not hold (as a multiset) are deletes, the added files' rows the removed ones did not hold
are inserts (deletion vectors respected on both). So an update shows as a delete of the old
row and an insert of the new one, and rows a rewrite carried over unchanged do not show.
"""

from __future__ import annotations

from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from ..delta import column_mapping
from ..delta.actions import AddFile, CdcFile
from ..delta.values import typed_array
from ..scan import duck
from .api import CHANGE_META, CommitFiles, TableContext, data_file_key

CHANGE_TYPE = CHANGE_META[0][0]


class Scanner(Protocol):
    def scan(self, ctx: TableContext, files: list[AddFile], where: str | None,
             columns: list[str] | None) -> Any: ...


def _logical(ctx: TableContext, t: pa.Table, pv: dict[str, Any]
             ) -> tuple[pa.Table, dict[str, Any]]:
    """A column-mapped table's cdc file (``t``, read as written) under logical names, and its
    partition values keyed by logical name."""
    schema = ctx.schema
    data = [f.name for f in schema if f.name not in ctx.partition_columns]
    read = column_mapping.file_schema(schema, data, t.schema)
    cols = [t.column(n).cast(f.type) if n in t.column_names else pa.nulls(t.num_rows, f.type)
            for n, f in zip(read.names, read, strict=True)]
    rows = column_mapping.relabel(pa.Table.from_arrays(cols, schema=read),
                                  pa.schema([schema.field(c) for c in data]))
    rows = rows.append_column(CHANGE_TYPE, t.column(CHANGE_TYPE))
    return rows, {c: pv.get(column_mapping.physical_key(schema, c)) for c in
                  ctx.partition_columns}


class _Reader:
    """The rows of one table's files, each logical file read once."""

    def __init__(self, engine: Scanner, ctx: TableContext) -> None:
        self.engine, self.ctx = engine, ctx
        self.seen: dict[tuple[str, str | None], pa.Table] = {}

    def rows(self, files: tuple[AddFile, ...]) -> pa.Table:
        """The live rows of ``files``. A file added by one commit and removed by a later one
        in the range is read once (kept by path and deletion vector: a logical file)."""
        parts = []
        for f in files:
            key = (f.path, f.dv_id)
            if key not in self.seen:
                self.seen[key] = self.engine.scan(self.ctx, [f], None, None)
            parts.append(self.seen[key])
        return pa.concat_tables(parts, promote_options="permissive")

    def cdc(self, action: CdcFile) -> pa.Table:
        ctx = self.ctx
        key = data_file_key(ctx.name, action.path, ctx.lake_uri)
        t = pq.read_table(pa.BufferReader(ctx.store.get(key).data))
        pv = dict(action.partition_values or {})
        if column_mapping.mode_of(ctx.schema) != "none":  # physical names in the file
            t, pv = _logical(ctx, t, pv)
        for f in ctx.schema:
            if f.name not in t.column_names and f.name in pv:
                t = t.append_column(f.name, typed_array([pv[f.name]] * t.num_rows, f.type)
                                    if pv[f.name] is not None
                                    else pa.nulls(t.num_rows, f.type))
        return t


def _typed(t: pa.Table, kind: str) -> pa.Table:
    return t.append_column(CHANGE_TYPE, pa.array([kind] * t.num_rows, pa.string()))


def _stamp(t: pa.Table, c: CommitFiles) -> pa.Table:
    n = t.num_rows
    t = t.append_column(CHANGE_META[1][0], pa.array([c.version] * n, pa.int64()))
    t = t.append_column(CHANGE_META[2][0], pa.array([int(c.time * 1000)] * n,
                                                    pa.timestamp("ms", tz="UTC")))
    return t.append_column(CHANGE_META[3][0], pa.array([c.txn] * n, pa.string()))


def _conformed(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """``parts`` as one table of ``schema``: older files may lack columns added since (null
    there, as a read of them shows)."""
    if not parts:
        return schema.empty_table()
    got = pa.concat_tables([t.select([n for n in schema.names if n in t.column_names])
                            for t in parts], promote_options="permissive")
    for f in schema:
        if f.name not in got.column_names:
            got = got.append_column(f, pa.nulls(got.num_rows, f.type))
    return got.select(schema.names).cast(schema)


def change_rows(engine: Scanner, ctx: TableContext, commits: list[CommitFiles]) -> pa.Table:
    """Removed and added rows of every commit are compared at once: one multiset difference
    each way over (row, commit), so a row a commit removed and added again unchanged cancels
    out within that commit only."""
    reader = _Reader(engine, ctx)
    schema = pa.schema([*ctx.schema, *CHANGE_META])
    plain = pa.schema([f for f in schema if f.name != CHANGE_TYPE])
    typed, before, after = [], [], []
    for c in commits:
        if c.cdc:
            typed += [_stamp(reader.cdc(a), c) for a in c.cdc]
            continue
        before += [_stamp(reader.rows(c.removed), c)] if c.removed else []
        after += [_stamp(reader.rows(c.added), c)] if c.added else []
    o, n = _conformed(before, plain), _conformed(after, plain)
    pair = {"o": o, "n": n}
    gone = duck.query("SELECT * FROM o EXCEPT ALL SELECT * FROM n", pair) if n.num_rows else o
    came = duck.query("SELECT * FROM n EXCEPT ALL SELECT * FROM o", pair) if o.num_rows else n
    out = [*typed, _typed(gone.cast(plain), "delete"), _typed(came.cast(plain), "insert")]
    return _conformed(out, schema).sort_by([("_commit_version", "ascending")])
