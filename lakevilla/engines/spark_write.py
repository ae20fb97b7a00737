"""The Spark engine's writes: Spark writes plain Parquet under a fresh folder, lakevilla
describes each file for the log.

Rows go from the executors to the files; the driver lists what was written through the lake's
store and reads each file's footer by a ranged GET (size, row count, statistics: O(files)).
Inserted data is brought to the table's schema by the same rules as the embedded engine's
(``conform``: no lossy cast, no NULL where none may be, each checked row by row in the job),
identity values are numbered on the executors (``spark_rows.numbered``) and generated columns
computed there. A failure deletes whatever the write left.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..data.schemas import as_stream, to_arrow_table
from ..delta.actions import AddFile
from ..delta.constraints import generated_columns
from ..delta.stats import stats_from_parquet
from ..errors import SchemaMismatchError
from ..parallel import pmap
from . import generated as arrow_generated
from . import identity, spark_mapped
from .api import TableContext, data_file_key
from .embedded import conformed, stream_chunks
from .spark_errors import spark_errors
from .spark_read import SparkAccess
from .spark_rows import check_rules, generated, numbered
from .spark_types import (
    cast_kind,
    col,
    converted,
    not_null,
    partition_dir_value,
    partition_values,
    read_footer,
    spark_schema,
)


@dataclass(frozen=True)
class Written:
    """A file Spark wrote: its path under the folder, size, time (ms) and footer."""

    rel: str
    size: int
    mtime: int
    rows: int
    footer: Any


def write_folder(sa: SparkAccess, ctx: TableContext, df: DataFrame, prefix: str,
                 partition_by: tuple[str, ...] = ()) -> list[Written]:
    """Spark writes ``df`` as Parquet under the store key ``prefix`` (a folder no one else
    names), partitioned by ``partition_by`` (folder values as ``partition_dir_value`` makes
    them); the files it wrote, each described from a listing and its footer. Spark's side
    files are deleted; on failure everything under the folder is."""
    types = {f.name: f.dataType for f in df.schema.fields}
    out = df
    for p in partition_by:
        out = out.withColumn(p, partition_dir_value(col(p), types[p]))
    writer = (out.write.mode("error").option("compression", "snappy")
              .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false"))
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    try:
        writer.parquet(sa.paths.key_uri(ctx, prefix.rstrip("/")))
        listed = _listed(ctx, prefix)
        footers = pmap(lambda f: read_footer(ctx.store, prefix + f[0], f[1]), listed)
        return [Written(rel, size, mtime, meta.num_rows, meta)
                for (rel, size, mtime), meta in zip(listed, footers, strict=True)]
    except BaseException:
        delete_all(ctx, prefix)
        raise


def _listed(ctx: TableContext, prefix: str) -> list[tuple[str, int, int]]:
    """(path under ``prefix``, size, mtime in ms) of the Parquet files Spark wrote; its side
    files (checksums, markers) are deleted so an abort that removes the data leaves nothing."""
    out = []
    for meta in list(ctx.store.list(prefix)):
        rel = meta.key[len(prefix):]
        if rel.rsplit("/", 1)[-1].startswith(("_", ".")) or not rel.endswith(".parquet"):
            ctx.store.delete(meta.key)
            continue
        out.append((rel, int(meta.size), int((meta.last_modified or 0) * 1000)))
    return sorted(out)


def delete_all(ctx: TableContext, prefix: str) -> None:
    """Best effort: the caller is already failing; the abandoned-file sweep catches the rest."""
    with contextlib.suppress(Exception):
        for meta in list(ctx.store.list(prefix)):
            ctx.store.delete(meta.key)


def delete_files(ctx: TableContext, adds: list[AddFile]) -> None:
    for a in adds:
        with contextlib.suppress(Exception):
            ctx.store.delete(data_file_key(ctx.name, a.path, ctx.lake_uri))


def write_frame(sa: SparkAccess, ctx: TableContext, df: DataFrame) -> list[AddFile]:
    """``df`` (table schema) as new data files of the table: the rules checked first."""
    check_rules(ctx, df)
    ctx, df = spark_mapped.physical(ctx, df)  # a mapped table's names and ids on disk
    folder = f"lv-{uuid.uuid4()}"
    prefix = data_file_key(ctx.name, folder, ctx.lake_uri) + "/"
    types = {f.name: f.dataType for f in spark_schema(ctx.schema).fields}
    adds = []
    for w in write_folder(sa, ctx, df, prefix, ctx.partition_columns):
        if w.rows == 0:  # Spark writes one empty file for an empty input
            ctx.store.delete(prefix + w.rel)
            continue
        adds.append(AddFile(path=quote(f"{folder}/{w.rel}", safe="/="), size=w.size,
                            partition_values=partition_values(w.rel, ctx, types),
                            modification_time=w.mtime, data_change=True,
                            stats=stats_from_parquet(w.footer, ctx.partition_columns)))
    return adds


# -- inserted data -----------------------------------------------------------------------

def conform(ctx: TableContext, df: DataFrame, what: str, computed: frozenset[str]) -> DataFrame:
    """``df`` in the table schema (column order, names, types), mirroring embedded.conform;
    ``computed`` columns (generated, identity) may be missing: NULL until computed."""
    by_lower = {n.lower(): n for n in df.columns}
    if len(by_lower) != len(df.columns):
        raise SchemaMismatchError(f"{what}: duplicate column names {df.columns}")
    schema = spark_schema(ctx.schema)
    wanted = {f.name.lower() for f in schema.fields}
    extra = [n for n in df.columns if n.lower() not in wanted]
    if extra:
        raise SchemaMismatchError(f"{what}: column(s) {extra} are not in the table schema "
                                  f"({', '.join(f.name for f in schema.fields)})")
    src_types = {f.name: f.dataType for f in df.schema.fields}
    cols = []
    for f in schema.fields:
        src = by_lower.get(f.name.lower())
        if src is None:
            if not f.nullable and f.name not in computed:
                raise SchemaMismatchError(f"{what}: missing non-nullable column {f.name!r}")
            cols.append(F.lit(None).cast(f.dataType).alias(f.name))
            continue
        st = src_types[src]
        if cast_kind(st, f.dataType) is None:
            raise SchemaMismatchError(f"{what}: column {f.name!r} has "
                                      f"type {st.simpleString()}, the table "
                                      f"has {f.dataType.simpleString()}")
        c = converted(col(src), st, f.dataType, "schema", f"{what}: column {f.name!r}")
        cols.append(not_null(c, f, "schema", what).alias(f.name))
    return df.select(*cols)


def _from_frame(ctx: TableContext, df: DataFrame) -> DataFrame:
    """A user's DataFrame in the table schema, identity numbered and generated columns
    computed on the executors (the embedded engine's order: identity, then generated)."""
    ids = identity.absent(ctx, df.columns)
    gen = arrow_generated.missing(ctx, df.columns)
    computed = frozenset([*generated_columns(ctx.constraints), *(c.name for c in ids)])
    out = conform(ctx, df, f"insert into {ctx.name!r}", computed)
    if ids:
        out, _ = numbered(ctx, out, [(c, None) for c in ids])
    return generated(ctx, out, gen)


def to_frame(sa: SparkAccess, ctx: TableContext, data: Any) -> DataFrame | None:
    """A DataFrame in the table schema; None when non-Spark input has no rows."""
    if isinstance(data, DataFrame):
        return _from_frame(ctx, data)
    table = conformed(ctx, to_arrow_table(data))  # the embedded engine's exact rules
    if table.num_rows == 0:
        return None
    return sa.spark.createDataFrame(table, schema=spark_schema(ctx.schema))


def write(sa: SparkAccess, ctx: TableContext, data: Any) -> list[AddFile]:
    stream = as_stream(data)
    if stream is not None:
        return _write_stream(sa, ctx, stream)
    with spark_errors(f"insert into {ctx.name!r}", None):
        df = to_frame(sa, ctx, data)
        return write_frame(sa, ctx, df) if df is not None else []


def _write_stream(sa: SparkAccess, ctx: TableContext,
                  reader: pa.RecordBatchReader) -> list[AddFile]:
    """A record batch stream, one file's worth at a time (the embedded engine's pieces), each
    written by Spark: this process never holds the whole stream. A failure deletes what
    the earlier pieces wrote."""
    written: list[AddFile] = []
    try:
        absent = arrow_generated.missing(ctx, reader.schema.names)
        numbering = identity.Numbering(identity.absent(ctx, reader.schema.names))
        computed = [*absent, *(c.name for c in numbering.columns)]
        for table in stream_chunks(ctx.name, reader, ctx.schema, computed):
            # as the embedded engine does
            table = arrow_generated.fill(ctx, numbering.fill(ctx.schema, table), absent)
            df = sa.spark.createDataFrame(table, schema=spark_schema(ctx.schema))
            with spark_errors(f"insert into {ctx.name!r}", None):
                written.extend(write_frame(sa, ctx, df))
    except BaseException:
        delete_files(ctx, written)
        raise
    return written
