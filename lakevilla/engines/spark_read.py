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
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..delta import column_mapping
from ..delta.actions import AddFile
from ..errors import StorageError
from . import spark_mapped
from .api import TableContext, data_file_key
from .spark_names import FILE_COL, RID_COL, ROW_BITS
from .spark_paths import SparkPaths
from .spark_tasks import LiveRows
from .spark_types import (
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


def _places(sa: SparkAccess, ctx: TableContext, df: DataFrame,
            place: dict[str, int]) -> Column:
    """Each row's file as its place in the statement's list of files (``place``: by store key),
    looked up by Spark's name for the file: a map of O(files) literals, no join."""
    pairs: list[Column] = []
    for name in df.inputFiles():
        at = place.get(sa.paths.key_of(ctx, name))
        if at is None:
            raise StorageError(f"Spark reads {name!r}, which is not a data file of {ctx.name!r}")
        pairs += [F.lit(name), F.lit(at)]
    return F.element_at(F.create_map(*pairs), F.input_file_name()).cast("long")


def live(sa: SparkAccess, ctx: TableContext, df: DataFrame, files: list[AddFile],
         place: dict[str, int], with_file: bool) -> DataFrame:
    """``df`` (a scan of ``files``) with each row's id (``RID_COL``: its file's place, by store
    key in ``place``, and its index in the file), without the rows the files' deletion vectors
    delete. ``with_file``: with Spark's name for the row's file too (``FILE_COL``), taken in the
    scan: above the filter's Python UDF it would not be reliable."""
    rid = F.shiftleft(_places(sa, ctx, df, place), ROW_BITS) + F.col("_metadata.row_index")
    df = df.select("*", rid.alias(RID_COL),
                   *([F.input_file_name().alias(FILE_COL)] if with_file else []))
    marked = {place[data_file_key(ctx.name, a.path, ctx.lake_uri)]:
              (json.dumps(a.deletion_vector.to_json()), a.path)
              for a in files if a.deletion_vector is not None}
    if not marked:
        return df
    task = LiveRows(ctx.store.address(), ctx.name, ctx.lake_uri, marked)

    def live_row(rids: pa.Array) -> pa.Array:  # a scalar Arrow UDF
        return task(rids)

    udf = F.arrow_udf(live_row, T.BooleanType())  # type: ignore[call-overload]  # by its hints
    return df.filter(udf(F.col(RID_COL)))


def _scan(sa: SparkAccess, ctx: TableContext, files: list[AddFile], indexed: bool,
          with_file: bool) -> tuple[DataFrame, list[AddFile]]:
    """The data columns of ``files`` (logically named), with ``RID_COL`` when ``indexed`` or a
    file has a DV, and ``FILE_COL`` when ``with_file``; the files with logical partition
    keys."""
    deleted = any(a.deletion_vector is not None for a in files)
    place = {data_file_key(ctx.name, a.path, ctx.lake_uri): i for i, a in enumerate(files)}

    def keep(d: DataFrame, fs: list[AddFile]) -> DataFrame:
        if deleted or indexed:
            return live(sa, ctx, d, fs, place, with_file)
        return d.withColumn(FILE_COL, F.input_file_name()) if with_file else d

    if column_mapping.mode_of(ctx.schema) != "none":  # physical names on disk
        return spark_mapped.read(sa.spark, ctx, files, sa.paths.file_uri, read_footer, keep,
                                 always=True)
    df = sa.spark.read.schema(data_schema(ctx)).parquet(*[sa.paths.file_uri(ctx, a)
                                                         for a in files])
    return keep(df, files), files


def frame(sa: SparkAccess, ctx: TableContext, files: list[AddFile],
          indexed: bool = False) -> DataFrame:
    """All rows of ``files`` in table schema, from one scan. ``indexed`` adds each row's id
    (``RID_COL``: the place of its file in ``files``, and its index in the file)."""
    schema = spark_schema(ctx.schema)
    extra = [T.StructField(RID_COL, T.LongType())] if indexed else []
    if not files:
        return empty(sa, ctx, *extra)
    groups = {tuple(a.partition_values.get(c) for c in ctx.partition_columns)
              for a in (column_mapping.logical_partitions(ctx.schema, ctx.partition_columns, f)
                        for f in files)}
    df, files = _scan(sa, ctx, files, indexed, with_file=len(groups) > 1)
    if len(groups) == 1:
        pv = dict(zip(ctx.partition_columns, groups.pop(), strict=True))
        where = f"table {ctx.name!r}: file {files[0].path!r}"
        df = df.select("*", *[partition_literal(pv[f.name], f, ctx.schema.field(f.name).type,
                                                f"{where} column {f.name!r}").alias(f.name)
                              for f in schema.fields if f.name in pv])
    else:  # by the file's name (taken in the scan)
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
