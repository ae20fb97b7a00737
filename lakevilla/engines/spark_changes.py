"""``lake.changes`` on the Spark engine: the change rows of a table's commits as one DataFrame,
by the embedded engine's rules (``change_rows.py``), computed by Spark.

A commit's ``cdc`` files are read as Parquet (physical names renamed on a column-mapped table,
partition values from the actions); the other commits' removed and added files are read as
live rows and compared by ``exceptAll``. Each commit's rows are stamped with literal columns,
so the driver holds the plan and the file lists only.
"""

from __future__ import annotations

import datetime as dt
from functools import reduce

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..delta import column_mapping
from ..delta.actions import AddFile, CdcFile
from . import spark_mapped
from .api import CHANGE_META, CommitFiles, TableContext
from .spark_cdf import comparable
from .spark_names import FILE_COL
from .spark_read import SparkAccess, frame, partition_map
from .spark_types import col, partition_literal, spark_schema

CHANGE_TYPE, VERSION, TIMESTAMP, TXN = (n for n, _ in CHANGE_META)


def _stamp(c: CommitFiles) -> list:
    when = dt.datetime.fromtimestamp(int(c.time * 1000) / 1000, dt.UTC)
    return [F.lit(c.version).cast("long").alias(VERSION),
            F.lit(when).cast("timestamp").alias(TIMESTAMP),
            F.lit(c.txn).cast("string").alias(TXN)]


def _cdc_frame(sa: SparkAccess, ctx: TableContext, cdc: tuple[CdcFile, ...]) -> DataFrame:
    """The rows of ``cdc`` files: the table's columns (partition values from the actions) and
    ``_change_type``."""
    files = [AddFile(path=c.path, size=int(c.size or 0),
                     partition_values=dict(c.partition_values or {})) for c in cdc]
    data = [f for f in ctx.schema if f.name not in ctx.partition_columns]
    physical = (column_mapping.physical_schema(pa.schema(data))
                if column_mapping.mode_of(ctx.schema) != "none" else pa.schema(data))
    read = T.StructType([*spark_mapped.struct_of(physical).fields,
                         T.StructField(CHANGE_TYPE, T.StringType())])
    df = sa.spark.read.schema(read).parquet(*[sa.paths.file_uri(ctx, a) for a in files])
    logical = spark_mapped.struct_of(pa.schema([column_mapping.plain(f) for f in data]))
    cols = [(col(p.name).cast(f.dataType) if spark_mapped.nested(f.dataType) else col(p.name))
            .alias(f.name) for p, f in zip(physical, logical.fields, strict=True)]
    if column_mapping.mode_of(ctx.schema) != "none":
        files = [column_mapping.logical_partitions(ctx.schema, ctx.partition_columns, a)
                 for a in files]
    schema = spark_schema(ctx.schema)
    groups = {tuple(a.partition_values.get(c) for c in ctx.partition_columns) for a in files}
    if len(groups) == 1:
        pv = dict(zip(ctx.partition_columns, groups.pop(), strict=True))
        parts = [partition_literal(pv[f.name], f, ctx.schema.field(f.name).type,
                                   f"table {ctx.name!r}: change file column {f.name!r}")
                 .alias(f.name) for f in schema.fields if f.name in pv]
        df = df.select(*cols, *parts, CHANGE_TYPE)
    else:
        df = df.select(*cols, CHANGE_TYPE, F.input_file_name().alias(FILE_COL))
        df = df.join(F.broadcast(partition_map(sa, ctx, df, files)), FILE_COL)
    return df.select(*[col(n) for n in ctx.schema.names], CHANGE_TYPE)


def _union(frames: list[DataFrame]) -> DataFrame | None:
    return reduce(DataFrame.unionByName, frames) if frames else None


def change_rows(sa: SparkAccess, ctx: TableContext, commits: list[CommitFiles]) -> DataFrame:
    names = [col(n) for n in ctx.schema.names]
    typed, before, after = [], [], []
    for c in commits:
        stamp = _stamp(c)
        if c.cdc:
            typed.append(_cdc_frame(sa, ctx, c.cdc).select(*names, CHANGE_TYPE, *stamp))
            continue
        if c.removed:
            before.append(frame(sa, ctx, list(c.removed)).select(*names, *stamp))
        if c.added:
            after.append(frame(sa, ctx, list(c.added)).select(*names, *stamp))
    o, n = _union(before), _union(after)
    if o is not None and n is not None and comparable(spark_schema(ctx.schema)):
        o, n = o.exceptAll(n), n.exceptAll(o)  # a row removed and added again: no change
    out = [*typed, *([o.withColumn(CHANGE_TYPE, F.lit("delete"))] if o is not None else []),
           *([n.withColumn(CHANGE_TYPE, F.lit("insert"))] if n is not None else [])]
    schema = T.StructType([*spark_schema(ctx.schema).fields,
                           *spark_mapped.struct_of(pa.schema(CHANGE_META)).fields])
    if not out:
        return sa.spark.createDataFrame([], schema)
    got = reduce(DataFrame.unionByName, [df.select(*names, CHANGE_TYPE, VERSION, TIMESTAMP, TXN)
                                         for df in out])
    return got.orderBy(VERSION)
