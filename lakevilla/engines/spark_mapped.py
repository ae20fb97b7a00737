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
from ..store import ObjectStore
from .api import TableContext, data_file_key


def _struct(schema: pa.Schema) -> T.StructType:
    return T.StructType.fromJson(json.loads(schema_to_json(schema)))


def _nested(t: T.DataType) -> bool:
    return isinstance(t, T.StructType | T.ArrayType | T.MapType)


def read(spark: SparkSession, ctx: TableContext, files: list[AddFile],
         uri: Callable[[TableContext, AddFile], str],
         footer: Callable[[ObjectStore, str, int], pq.FileMetaData],
         live: Callable[[DataFrame, list[AddFile]], DataFrame],
         ) -> tuple[DataFrame, list[AddFile]]:
    """The data columns (not the partition columns) of ``files``, logically named, and the files
    with their partition values keyed by logical name (the engine adds those columns). ``live``
    drops the rows deletion vectors delete from a scan (the columns it adds are kept):
    applied to each read before its columns are renamed, where Spark still knows each row's
    file and index."""
    data = [f.name for f in ctx.schema if f.name not in ctx.partition_columns]
    logical = _struct(pa.schema([cm.plain(ctx.schema.field(c)) for c in data]))
    by_id = cm.mode_of(ctx.schema) == "id"
    groups: dict[pa.Schema, list[AddFile]] = {}
    for a in files:
        file = (footer(ctx.store, data_file_key(ctx.name, a.path, ctx.lake_uri), a.size)
                .schema.to_arrow_schema() if by_id else None)
        groups.setdefault(cm.file_schema(ctx.schema, data, file), []).append(a)
    frames = []
    deleted = any(a.deletion_vector is not None for a in files)
    for read_schema, group in groups.items():
        df = spark.read.schema(_struct(read_schema)).parquet(*[uri(ctx, a) for a in group])
        if deleted:
            df = live(df, group)
        cols = []
        for name, f in zip(read_schema.names, logical.fields, strict=True):
            c = F.col("`" + name.replace("`", "``") + "`")
            cols.append((c.cast(f.dataType) if _nested(f.dataType) else c).alias(f.name))
        added = [c for c in df.columns if c not in read_schema.names]  # what ``live`` added
        frames.append(df.select(*cols, *added))
    return (reduce(lambda a, b: a.union(b), frames),
            [cm.logical_partitions(ctx.schema, ctx.partition_columns, a) for a in files])
