"""The Spark engine's read of a column-mapped table (``delta.column_mapping``).

Spark reads the Parquet files by their physical names and each column is selected under its
logical name; nested types are cast to their logical type, which Spark does by position for
structs, so nested fields are renamed too. In ``name`` mode one read covers every file; in
``id`` mode each file's footer says which of its columns carries each field id, and files that
resolve alike are read together (usually all of them: writers use the physical names).
Partition values and the rest are the engine's usual business (``SparkEngine._frame``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import reduce

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..delta import column_mapping as cm
from ..delta.actions import AddFile
from ..delta.schema import schema_to_json
from .api import TableContext


def _struct(schema: pa.Schema) -> T.StructType:
    return T.StructType.fromJson(json.loads(schema_to_json(schema)))


def _nested(t: T.DataType) -> bool:
    return isinstance(t, T.StructType | T.ArrayType | T.MapType)


def data_frame(spark: SparkSession, ctx: TableContext, files: list[AddFile],
               uri: Callable[[AddFile], str],
               footer: Callable[[AddFile], pq.FileMetaData]) -> DataFrame:
    """The data columns (not the partition columns) of ``files``, logically named."""
    data = [f.name for f in ctx.schema if f.name not in ctx.partition_columns]
    logical = _struct(pa.schema([cm.plain(ctx.schema.field(c)) for c in data]))
    groups: dict[pa.Schema, list[AddFile]] = {}
    for a in files:
        file = footer(a).schema.to_arrow_schema() if cm.mode_of(ctx.schema) == "id" else None
        groups.setdefault(cm.file_schema(ctx.schema, data, file), []).append(a)
    frames = []
    for read, group in groups.items():
        df = spark.read.schema(_struct(read)).parquet(*[uri(a) for a in group])
        cols = []
        for name, f in zip(read.names, logical.fields, strict=True):
            c = F.col("`" + name.replace("`", "``") + "`")
            cols.append((c.cast(f.dataType) if _nested(f.dataType) else c).alias(f.name))
        frames.append(df.select(*cols))
    return reduce(lambda a, b: a.union(b), frames)
