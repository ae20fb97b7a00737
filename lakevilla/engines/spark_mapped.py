"""The Spark engine's read of a column-mapped table (``delta.column_mapping``).

Spark reads the Parquet files by their physical names and each column is selected under its
logical name; nested types are cast to their logical type, which Spark does by position for
structs, so nested fields are renamed too. In ``name`` mode one read covers every file; in
``id`` mode each file's footer says which of its columns carries each field id, and files that
resolve alike are read together (usually all of them: writers use the physical names).
Partition values and the rest are the engine's usual business (``SparkEngine._frame``).
"""

from __future__ import annotations

import dataclasses
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


def struct_of(schema: pa.Schema) -> T.StructType:
    return T.StructType.fromJson(json.loads(schema_to_json(schema)))


def nested(t: T.DataType) -> bool:
    return isinstance(t, T.StructType | T.ArrayType | T.MapType)


def read(spark: SparkSession, ctx: TableContext, files: list[AddFile],
         uri: Callable[[TableContext, AddFile], str],
         footer: Callable[[ObjectStore, str, int], pq.FileMetaData],
         live: Callable[[DataFrame, list[AddFile]], DataFrame], always: bool = False,
         ) -> tuple[DataFrame, list[AddFile]]:
    """The data columns (not the partition columns) of ``files``, logically named, and the files
    with their partition values keyed by logical name (the engine adds those columns). ``live``
    drops the rows deletion vectors delete from a scan (the columns it adds are kept):
    applied to each read before its columns are renamed, where Spark still knows each row's
    file and index (``always``: to every read, not only where a file has a deletion vector)."""
    data = [f.name for f in ctx.schema if f.name not in ctx.partition_columns]
    logical = struct_of(pa.schema([cm.plain(ctx.schema.field(c)) for c in data]))
    by_id = cm.mode_of(ctx.schema) == "id"
    groups: dict[pa.Schema, list[AddFile]] = {}
    for a in files:
        file = (footer(ctx.store, data_file_key(ctx.name, a.path, ctx.lake_uri), a.size)
                .schema.to_arrow_schema() if by_id else None)
        groups.setdefault(cm.file_schema(ctx.schema, data, file), []).append(a)
    frames = []
    deleted = any(a.deletion_vector is not None for a in files)
    for read_schema, group in groups.items():
        df = spark.read.schema(struct_of(read_schema)).parquet(*[uri(ctx, a) for a in group])
        if deleted or always:
            df = live(df, group)
        cols = []
        for name, f in zip(read_schema.names, logical.fields, strict=True):
            c = F.col("`" + name.replace("`", "``") + "`")
            cols.append((c.cast(f.dataType) if nested(f.dataType) else c).alias(f.name))
        added = [c for c in df.columns if c not in read_schema.names]  # what ``live`` added
        frames.append(df.select(*cols, *added))
    return (reduce(lambda a, b: a.union(b), frames),
            [cm.logical_partitions(ctx.schema, ctx.partition_columns, a) for a in files])


# -- writing -----------------------------------------------------------------------------------

_SPARK_ID = "parquet.field.id"  # the field metadata Spark writes as a Parquet field id


def _with_ids(t: dict | str, arrow: pa.DataType) -> dict | str:
    """Spark's JSON of a physical type (``t``), each struct field given its Parquet field id
    from ``arrow`` (``column_mapping.physical_schema``'s type of the same shape)."""
    if not isinstance(t, dict):
        return t
    if t.get("type") == "struct":
        return {**t, "fields": [_field_with_id(f, arrow.field(i))
                                for i, f in enumerate(t["fields"])]}
    if t.get("type") == "array":
        return {**t, "elementType": _with_ids(t["elementType"], arrow.value_type)}
    if t.get("type") == "map":
        return {**t, "keyType": _with_ids(t["keyType"], arrow.key_type),
                "valueType": _with_ids(t["valueType"], arrow.item_type)}
    return t


def _field_with_id(f: dict, arrow: pa.Field) -> dict:
    fid = (arrow.metadata or {}).get(cm.PARQUET_ID_KEY)
    meta = {_SPARK_ID: int(fid)} if fid is not None else {}
    return {**f, "metadata": meta, "type": _with_ids(f["type"], arrow.type)}


def physical(ctx: TableContext, df: DataFrame,
             keep: tuple[str, ...] = ()) -> tuple[TableContext, DataFrame]:
    """``df`` (the table's logical columns) as its data files hold it, for Spark to write: each
    column under its physical name with its field id, nested types cast by position to their
    physical names and ids; and a context naming the partition columns physically, so that the
    files' folders, ``partitionValues`` and statistics are keyed as the log keys them. A table
    without column mapping keeps both as they are. ``keep``: columns not of the table (a change
    type), passed as they are."""
    if cm.mode_of(ctx.schema) == "none":
        return ctx, df
    names = [n for n in df.columns if n not in keep]
    phys = cm.physical_schema(pa.schema([ctx.schema.field(n) for n in names]))
    spark_json = json.loads(schema_to_json(phys))["fields"]
    cols = []
    for name, f, j in zip(names, phys, spark_json, strict=True):
        typed = _field_with_id(j, f)
        dtype = T.StructField.fromJson(typed).dataType
        c = F.col("`" + name.replace("`", "``") + "`")
        cols.append((c.cast(dtype) if nested(dtype) else c).alias(f.name,
                                                                   metadata=typed["metadata"]))
    wctx = dataclasses.replace(
        ctx, schema=pa.schema([cm.plain(f) for f in cm.physical_schema(ctx.schema)]),
        partition_columns=tuple(cm.physical_key(ctx.schema, p) for p in ctx.partition_columns),
        constraints=())
    return wctx, df.select(*cols, *keep)
