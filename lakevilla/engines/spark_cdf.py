"""Change data feed on the Spark engine: a statement's change rows are Spark frames, written
by the executors as ``_change_data/`` files (the change type beside the table's columns,
partitioned as the data is), so the driver sees the files, never the rows. The rows are the
embedded engine's (``change_data.py``): an update's images less the rows it left as they were,
a delete's rows, a merge's deletes, images and inserts, an insert's or overwrite's whole files
when a commit needs them; a statement that rewrote files yet changed no row writes one empty
file to say so.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from functools import reduce
from urllib.parse import quote

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..delta.actions import AddFile, CdcFile
from . import change_data, spark_mapped
from .api import RewriteResult, TableContext, data_file_key
from .change_data import CHANGE_DIR, CHANGE_TYPE
from .spark_names import CLAUSE_COL
from .spark_read import SparkAccess, frame
from .spark_types import col, partition_values, spark_schema
from .spark_write import write_folder

Frames = list[tuple[DataFrame, str]]  # rows in table columns, and their change type


def comparable(t: T.DataType) -> bool:
    """Spark's set operations (EXCEPT ALL) refuse maps, at any depth."""
    if isinstance(t, T.MapType):
        return False
    if isinstance(t, T.StructType):
        return all(comparable(f.dataType) for f in t.fields)
    if isinstance(t, T.ArrayType):
        return comparable(t.elementType)
    return True


def _netted(ctx: TableContext, frames: Frames) -> Frames:
    """An UPDATE's images less the rows it left as they were (as ``change_data.net_updates``):
    the preimages EXCEPT ALL the postimages, and the reverse."""
    names = [col(n) for n in ctx.schema.names]
    pre = [df.select(*names) for df, kind in frames if kind == change_data.PREIMAGE]
    post = [df.select(*names) for df, kind in frames if kind == change_data.POSTIMAGE]
    if not pre or not post or not all(comparable(f.dataType)
                                      for f in spark_schema(ctx.schema).fields):
        return frames
    a, b = reduce(DataFrame.unionAll, pre), reduce(DataFrame.unionAll, post)
    return [(a.exceptAll(b), change_data.PREIMAGE), (b.exceptAll(a), change_data.POSTIMAGE)]


def write(sa: SparkAccess, ctx: TableContext, frames: Frames, rewrote: bool) -> list[CdcFile]:
    """``frames`` as ``_change_data/`` files written by Spark (nothing committed). ``rewrote``:
    the statement rewrote files or marked rows, so at least one file (empty when no row
    changed) says which rows changed: without one, a reader would take the rewritten files'
    rows for deletes and inserts."""
    cdc: list[CdcFile] = []
    if frames:
        rows = reduce(DataFrame.unionByName, [
            df.select(*[col(n) for n in ctx.schema.names], F.lit(kind).alias(CHANGE_TYPE))
            for df, kind in frames])
        wctx, rows = spark_mapped.physical(ctx, rows, keep=(CHANGE_TYPE,))
        folder = f"{CHANGE_DIR}/lv-{uuid.uuid4()}"
        prefix = data_file_key(ctx.name, folder, ctx.lake_uri) + "/"
        types = {f.name: f.dataType for f in spark_schema(wctx.schema).fields}
        for w in write_folder(sa, wctx, rows, prefix, wctx.partition_columns):
            if w.rows == 0:
                ctx.store.delete(prefix + w.rel)
                continue
            cdc.append(CdcFile(path=quote(f"{folder}/{w.rel}", safe="/="), size=w.size,
                               partition_values=partition_values(w.rel, wctx, types)))
    if not cdc and rewrote:  # one empty file, written here: it holds no row
        cdc = change_data.write(_embedded(), ctx, [], rewrote=True)
    return cdc


def logged(sa: SparkAccess, ctx: TableContext, res: RewriteResult, frames: Frames,
           update: bool) -> RewriteResult:
    """``res`` with ``frames`` written as its change data files (an UPDATE's netted first)."""
    if not ctx.write_cdf:
        return res
    res.cdc = write(sa, ctx, _netted(ctx, frames) if update else frames,
                    rewrote=bool(res.removed or res.added))
    return res


def rewritten(sa: SparkAccess, ctx: TableContext, res: RewriteResult, hit: DataFrame,
              post: DataFrame | None) -> RewriteResult:
    """A DELETE's (``post`` None) or an UPDATE's change rows: the matched rows ``hit`` as they
    were, and ``post``, as the update made them."""
    frames = [(hit, change_data.PREIMAGE if post is not None else change_data.DELETE)]
    frames += [(post, change_data.POSTIMAGE)] if post is not None else []
    return logged(sa, ctx, res, frames, update=post is not None)


def merged(sa: SparkAccess, ctx: TableContext, res: RewriteResult, changed: DataFrame | None,
           deletes: list[int], tcols: list[str], inserted: DataFrame | None,
           made: Callable[[DataFrame], DataFrame]) -> RewriteResult:
    """A MERGE's change rows. ``changed``: each target row a clause applied to, its columns
    ``tcols`` as they were, ``tcols`` + ``n`` as its clause made them, the clause in
    ``CLAUSE_COL`` (one of ``deletes``: a delete); ``inserted``: the inserted rows (table
    columns and ``CLAUSE_COL``); ``made`` computes a clause's generated columns."""
    frames: Frames = []
    names = ctx.schema.names
    if changed is not None:
        gone = F.col(CLAUSE_COL).isin(deletes)
        old = [F.col(c).alias(n) for c, n in zip(tcols, names, strict=True)]
        new = [F.col(c + "n").alias(n) for c, n in zip(tcols, names, strict=True)]
        frames += [(changed.filter(gone).select(*old), change_data.DELETE),
                   (changed.filter(~gone).select(*old), change_data.PREIMAGE),
                   (made(changed.filter(~gone).select(*new, CLAUSE_COL)),
                    change_data.POSTIMAGE)]
    if inserted is not None:
        frames.append((made(inserted), change_data.INSERT))
    return logged(sa, ctx, res, frames, update=False)


def of_files(sa: SparkAccess, ctx: TableContext, removed: list[AddFile],
             added: list[AddFile]) -> list[CdcFile]:
    """The live rows of ``removed`` as deletes and of ``added`` as inserts, written by Spark."""
    frames: Frames = []
    if removed:
        frames.append((frame(sa, ctx, removed), change_data.DELETE))
    if added:
        frames.append((frame(sa, ctx, added), change_data.INSERT))
    return write(sa, ctx, frames, rewrote=False)


def drop(ctx: TableContext, cdc: list[CdcFile]) -> None:
    """Best effort: change files of a statement that is failing."""
    for c in cdc:
        with contextlib.suppress(Exception):
            ctx.store.delete(data_file_key(ctx.name, c.path, ctx.lake_uri))


def _embedded() -> change_data.Writer:
    from .embedded import EmbeddedEngine  # reads and splits rows; holds no state

    return EmbeddedEngine()
