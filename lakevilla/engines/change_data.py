"""Change data feed files (``delta.enableChangeDataFeed``): the change rows of a statement.

A commit that changes rows of such a table logs them so that a reader of the feed gets each
row's change: a ``cdc`` action per ``_change_data/`` Parquet file holding the rows and their
``_change_type`` (``insert``, ``delete``, ``update_preimage``, ``update_postimage``), partition
columns in the action as in an add. A reader takes a commit's changes from its cdc files when
it has any, and otherwise derives them from its adds (inserts) and removes (deletes): so an
insert, or an overwrite that removes whole files, writes none, while an update, a delete or a
merge always does (its removes name files that still hold unchanged rows). The files are
written beside the statement's data files, before its sublog entry, and are data files for the
protocol: undone, redone and swept like them.
"""

from __future__ import annotations

import io
from typing import Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from ..delta import column_mapping
from ..delta.actions import AddFile, CdcFile
from ..scan import duck
from ..scan.expressions import quote_ident
from .api import RewriteResult, TableContext, data_file_key, new_data_file_path

CHANGE_TYPE = "_change_type"
CHANGE_DIR = "_change_data"
INSERT, DELETE = "insert", "delete"
PREIMAGE, POSTIMAGE = "update_preimage", "update_postimage"

Changes = list[tuple[pa.Table, str]]  # rows of the table's schema, and their change type


class Writer(Protocol):
    """What this needs of the embedded engine."""

    def read_file(self, ctx: TableContext, add: AddFile, columns: list[str] | None) -> pa.Table: ...

    def split_by_partition(self, ctx: TableContext,
                           table: pa.Table) -> list[tuple[pa.Table, dict[str, str | None]]]: ...


def matched(ctx: TableContext, selected: list[tuple[AddFile, pa.Table, pa.Array, int]],
            update: bool) -> Changes:
    """The rows a DELETE or UPDATE matched (``selected``: each file, its rows, the match), as
    they were: deletes, or the updates' preimages (none when the table keeps no feed)."""
    if not ctx.write_cdf:
        return []
    kind = PREIMAGE if update else DELETE
    return [(table.filter(mask), kind) for _add, table, mask, _hits in selected]


def net_updates(ctx: TableContext, changes: Changes) -> Changes:
    """An UPDATE's images less the rows it left as they were: the preimages EXCEPT ALL the
    postimages, and the reverse (a row set to its own value is no change). delta-rs logs an
    update so, and a reader of the feed should get the same rows from either writer."""
    pre = [t for t, kind in changes if kind == PREIMAGE and t.num_rows]
    post = [t for t, kind in changes if kind == POSTIMAGE and t.num_rows]
    if not pre:
        return changes
    schema = pa.schema([ctx.schema.field(n) for n in ctx.schema.names])
    cols = ", ".join(quote_ident(n) for n in schema.names)
    tables = {"__lv_pre": pa.concat_tables([t.select(schema.names) for t in pre]),
              "__lv_post": pa.concat_tables([t.select(schema.names) for t in post])}

    def minus(a: str, b: str) -> pa.Table:
        return duck.query(f"SELECT {cols} FROM {a} EXCEPT ALL SELECT {cols} FROM {b}",
                          tables).cast(schema)
    try:
        return [(minus("__lv_pre", "__lv_post"), PREIMAGE),
                (minus("__lv_post", "__lv_pre"), POSTIMAGE)]
    except Exception:  # noqa: BLE001 - a type DuckDB cannot compare: every image, un-netted
        return changes


def write(engine: Writer, ctx: TableContext, changes: Changes,
          rewrote: bool = False) -> list[CdcFile]:
    """``changes`` as ``_change_data/`` files, one per partition (nothing committed). If a write
    fails, the files already written go too. ``rewrote``: the statement rewrote files (or
    marked rows) yet changed no row, so one empty file says so (without a cdc file, a reader
    would take the rewritten files' rows for deletes and inserts)."""
    typed = pa.field(CHANGE_TYPE, pa.string(), nullable=False)
    parts = [t.select(ctx.schema.names).append_column(typed, pa.array([kind] * t.num_rows,
                                                                      pa.string()))
             for t, kind in changes if t.num_rows]
    if not parts and not rewrote:
        return []
    pieces = (engine.split_by_partition(ctx, pa.concat_tables(parts)) if parts else
              [(ctx.schema.empty_table().append_column(typed, pa.array([], pa.string())),
                dict.fromkeys(ctx.partition_columns))])
    written: list[CdcFile] = []
    try:
        for piece, values in pieces:
            # named as data files are (physically on a column-mapped table), the type beside
            rows, cols, values = column_mapping.as_written(
                ctx, piece.drop_columns([CHANGE_TYPE]), values)
            body = (rows.drop_columns(cols) if cols else rows).append_column(
                typed, piece.column(CHANGE_TYPE))
            buf = io.BytesIO()
            pq.write_table(body, buf, compression="snappy")
            data = buf.getvalue()
            path = f"{CHANGE_DIR}/{new_data_file_path(values, cols)}"
            ctx.store.put(data_file_key(ctx.name, path, ctx.lake_uri), data)
            written.append(CdcFile(path=path, size=len(data), partition_values=dict(values)))
    except BaseException:
        for c in written:  # best effort: the abandoned-file sweep catches what is left
            try:
                ctx.store.delete(data_file_key(ctx.name, c.path, ctx.lake_uri))
            except Exception:  # noqa: BLE001
                pass
        raise
    return written


def logged(engine: Writer, ctx: TableContext, res: RewriteResult,
           update: bool) -> RewriteResult:
    """``res`` with the change rows it gathered written as files (an UPDATE's netted first)."""
    if not ctx.write_cdf:
        return res
    changes = net_updates(ctx, res.changes) if update else res.changes
    res.cdc, res.changes = write(engine, ctx, changes, rewrote=bool(res.removed or res.added)), []
    return res


def of_files(engine: Writer, ctx: TableContext, removed: list[AddFile],
             added: list[AddFile]) -> list[CdcFile]:
    """The live rows of ``removed`` as deletes and of ``added`` as inserts, written as files."""
    changes = [(engine.read_file(ctx, a, None), DELETE) for a in removed]
    changes += [(engine.read_file(ctx, a, None), INSERT) for a in added]
    return write(engine, ctx, changes)
