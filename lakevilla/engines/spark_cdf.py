"""Change data feed on the Spark engine: the change rows of an UPDATE, DELETE or MERGE are
computed as Spark frames, collected (a statement's changed rows, not its files' rows) and
written as the embedded engine writes them (``change_data.py``), so both engines log the same
rows the same way. A catch-up of earlier statements' rows reads their files as the embedded
engine does."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from ..delta.actions import AddFile, CdcFile
from . import change_data
from .api import RewriteResult, TableContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def _arrow(ctx: TableContext, df: DataFrame) -> pa.Table:
    """``df`` (table columns) collected, in the table's Arrow types."""
    schema = pa.schema([ctx.schema.field(n) for n in ctx.schema.names])
    t = df.select(*schema.names).toArrow()
    return pa.table([t.column(n).cast(schema.field(n).type) for n in schema.names], schema=schema)


def logged(ctx: TableContext, res: RewriteResult, frames: list[tuple[DataFrame, str]],
           update: bool) -> RewriteResult:
    """``res`` with ``frames`` (rows and their change type) written as change data files."""
    if not ctx.write_cdf:
        return res
    res.changes = [(_arrow(ctx, df), kind) for df, kind in frames]
    return change_data.logged(_embedded(), ctx, res, update)


def rewritten(ctx: TableContext, res: RewriteResult, hit: DataFrame,
              post: DataFrame | None) -> RewriteResult:
    """A DELETE's (``post`` None) or an UPDATE's change rows: the matched rows ``hit`` as they
    were, and ``post``, as the update made them."""
    frames = [(hit, change_data.PREIMAGE if post is not None else change_data.DELETE)]
    frames += [(post, change_data.POSTIMAGE)] if post is not None else []
    return logged(ctx, res, frames, update=post is not None)


def merged(ctx: TableContext, res: RewriteResult, changed: DataFrame | None, deletes: list[int],
           tcols: list[str], inserted: DataFrame | None,
           made: Callable[[DataFrame], DataFrame]) -> RewriteResult:
    """A MERGE's change rows. ``changed``: each target row a clause applied to, its columns
    ``tcols`` as they were, ``tcols`` + ``n`` as its clause made them, the clause in
    ``__lv_clause`` (one of ``deletes``: a delete); ``inserted``: the inserted rows (table
    columns and ``__lv_clause``); ``made`` computes a clause's generated columns."""
    from pyspark.sql import functions as F

    frames: list[tuple[DataFrame, str]] = []
    names = ctx.schema.names
    if changed is not None:
        gone = F.col("__lv_clause").isin(deletes)
        old = [F.col(c).alias(n) for c, n in zip(tcols, names, strict=True)]
        new = [F.col(c + "n").alias(n) for c, n in zip(tcols, names, strict=True)]
        frames += [(changed.filter(gone).select(*old), change_data.DELETE),
                   (changed.filter(~gone).select(*old), change_data.PREIMAGE),
                   (made(changed.filter(~gone).select(*new, "__lv_clause")),
                    change_data.POSTIMAGE)]
    if inserted is not None:
        frames.append((made(inserted), change_data.INSERT))
    return logged(ctx, res, frames, update=False)


def of_files(ctx: TableContext, removed: list[AddFile], added: list[AddFile]) -> list[CdcFile]:
    return change_data.of_files(_embedded(), ctx, removed, added)


def _embedded() -> change_data.Writer:
    from .embedded import EmbeddedEngine  # reads and splits rows; holds no state

    return EmbeddedEngine()
