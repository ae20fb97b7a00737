"""The Spark engine's reads: exactly the files the transaction layer picked, in one scan.

Partition values come from the add actions (literals when the files share them, else a
broadcast join on the file name: O(files)); rows a deletion vector deletes are dropped on the
executors (``spark_tasks.KeepLive``), which read the DVs themselves. A statement that changes
rows reads them ``indexed``: each with its file and its index in the file, as Delta's DVs name
rows, so that the rows to rewrite or mark are found without a row id Spark could recompute
differently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..delta import column_mapping
from ..delta.actions import AddFile
from ..errors import StorageError
from . import spark_mapped
from .api import TableContext, data_file_key
from .spark_paths import SparkPaths
from .spark_tasks import LiveRows
from .spark_types import (
    FILE_COL,
    ROW_COL,
    col,
    data_schema,
    partition_literal,
    partition_text,
    read_footer,
    spark_schema,
    typed_partition,
)


@dataclass(frozen=True)
class SparkAccess:
    """The session and the paths every part of the engine reads and writes through."""

    spark: SparkSession
    paths: SparkPaths


def empty(sa: SparkAccess, ctx: TableContext, *extra: T.StructField) -> DataFrame:
    return sa.spark.createDataFrame([], T.StructType([*spark_schema(ctx.schema).fields, *extra]))


def live(sa: SparkAccess, ctx: TableContext, df: DataFrame, files: list[AddFile]) -> DataFrame:
    """``df`` (a scan of ``files``) with each row's file (``FILE_COL``) and index in the file
    (``ROW_COL``), without the rows the files' deletion vectors delete."""
    df = df.select("*", F.col("_metadata.row_index").alias(ROW_COL),
                   F.input_file_name().alias(FILE_COL))
    marked = {data_file_key(ctx.name, a.path, ctx.lake_uri):
              (json.dumps(a.deletion_vector.to_json()), a.path)
              for a in files if a.deletion_vector is not None}
    if not marked:
        return df
    task = LiveRows(ctx.store.address(), ctx.name, ctx.lake_uri, marked)

    def live_row(names: pa.Array, rows: pa.Array) -> pa.Array:  # a scalar Arrow UDF
        return task(names, rows)

    udf = F.arrow_udf(live_row, T.BooleanType())  # type: ignore[call-overload]  # by its hints
    return df.filter(udf(F.col(FILE_COL), F.col(ROW_COL)))


def _scan(sa: SparkAccess, ctx: TableContext, files: list[AddFile], indexed: bool
          ) -> tuple[DataFrame, list[AddFile], bool]:
    """The data columns of ``files`` (logically named), with ``FILE_COL`` and ``ROW_COL`` when
    ``indexed`` or a file has a DV; the files with logical partition keys; whether the frame has
    ``FILE_COL``."""
    deleted = any(a.deletion_vector is not None for a in files)

    def keep(d: DataFrame, fs: list[AddFile]) -> DataFrame:
        return live(sa, ctx, d, fs)

    if column_mapping.mode_of(ctx.schema) != "none":  # physical names on disk
        df, files = spark_mapped.read(sa.spark, ctx, files, sa.paths.file_uri, read_footer, keep,
                                      always=indexed)
    else:
        df = sa.spark.read.schema(data_schema(ctx)).parquet(*[sa.paths.file_uri(ctx, a)
                                                             for a in files])
        df = keep(df, files) if (deleted or indexed) else df
    return df, files, deleted or indexed


def frame(sa: SparkAccess, ctx: TableContext, files: list[AddFile],
          with_file: bool = False, indexed: bool = False) -> DataFrame:
    """All rows of ``files`` in table schema, from one scan. ``with_file`` adds Spark's name for
    each row's file (``FILE_COL``); ``indexed`` that and each row's index in it (``ROW_COL``)."""
    schema = spark_schema(ctx.schema)
    extra = ([T.StructField(FILE_COL, T.StringType())] if with_file or indexed else []) + (
        [T.StructField(ROW_COL, T.LongType())] if indexed else [])
    if not files:
        return empty(sa, ctx, *extra)
    df, files, has_file = _scan(sa, ctx, files, indexed)
    groups = {tuple(a.partition_values.get(c) for c in ctx.partition_columns) for a in files}
    if (with_file or len(groups) > 1) and not has_file:
        df = df.withColumn(FILE_COL, F.input_file_name())  # the same text as df.inputFiles()
    if len(groups) == 1:
        pv = dict(zip(ctx.partition_columns, groups.pop(), strict=True))
        where = f"table {ctx.name!r}: file {files[0].path!r}"
        df = df.select("*", *[partition_literal(pv[f.name], f, ctx.schema.field(f.name).type,
                                                f"{where} column {f.name!r}").alias(f.name)
                              for f in schema.fields if f.name in pv])
    else:
        df = df.join(F.broadcast(partition_map(sa, ctx, df, files)), FILE_COL)
    return df.select(*[col(f.name) for f in schema.fields], *[f.name for f in extra])


def partition_map(sa: SparkAccess, ctx: TableContext, df: DataFrame,
                  files: list[AddFile]) -> DataFrame:
    """(Spark's file name, typed partition values) for every file ``df`` reads: O(files)."""
    by_key = {data_file_key(ctx.name, a.path, ctx.lake_uri): a for a in files}
    types = {f.name: f.dataType for f in spark_schema(ctx.schema).fields}
    rows = []
    for name in df.inputFiles():
        add = by_key.get(sa.paths.key_of(ctx, name))
        if add is None:
            raise StorageError(f"Spark reads {name!r}, which is not a data "
                               f"file of {ctx.name!r}")
        rows.append((name,
                     *[partition_text(add.partition_values.get(c), types[c],
                                      ctx.schema.field(c).type,
                                      f"table {ctx.name!r}: file {add.path!r} column {c!r}")
                       for c in ctx.partition_columns]))
    fields = [T.StructField(FILE_COL, T.StringType())] + [T.StructField(c, T.StringType())
                                                          for c in ctx.partition_columns]
    m = sa.spark.createDataFrame(rows, T.StructType(fields))
    return m.select(FILE_COL, *[typed_partition(col(c), types[c]).alias(c)
                                for c in ctx.partition_columns])
