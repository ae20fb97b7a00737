"""Spark's side of lakevilla's types: the table schema as Spark types, the casts a write may
make (every one value-checked where it could lose data), and partition values between Delta's
text, Spark's columns and the folders Spark writes. Used by every part of the Spark engine.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..delta.schema import schema_to_json
from ..errors import CorruptLogError, StorageError
from ..scan import expressions as E
from ..scan.pruning import coerce
from .api import HIVE_NULL, TableContext, partition_value_string
from .spark_errors import fail

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_INT_RANK = {T.ByteType: 1, T.ShortType: 2, T.IntegerType: 3, T.LongType: 4}


# -- schemas and columns -------------------------------------------------------------

def spark_schema(schema: pa.Schema) -> T.StructType:
    """The Spark type of a table: Delta's schemaString is Spark's own schema JSON."""
    return T.StructType.fromJson(json.loads(schema_to_json(schema)))


def ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def col(name: str) -> Column:
    return F.col(ident(name))


def ref(r: E.ColumnRef) -> Column:
    """A checked expression's column reference in a frame in table schema."""
    c = col(r.column)
    for f in r.fields:
        c = c.getField(f)
    return c


def data_schema(ctx: TableContext) -> T.StructType:
    return T.StructType([f for f in spark_schema(ctx.schema).fields
                         if f.name not in ctx.partition_columns])


def _is_numeric(t: T.DataType) -> bool:
    return isinstance(t, T.NumericType)


def cast_kind(src: T.DataType, dst: T.DataType) -> str | None:
    """How a ``src`` value becomes a ``dst`` value: "same", "cast" (never loses data),
    "checked" (must round-trip), "date_ts" (midnight UTC, as pyarrow casts) or None."""
    if src == dst or src.simpleString() == dst.simpleString():
        return "same"
    if isinstance(src, T.NullType):
        return "cast"
    if isinstance(src, _INTEGRAL) and isinstance(dst, _INTEGRAL):
        return "cast" if _INT_RANK[type(src)] <= _INT_RANK[type(dst)] else "checked"
    if isinstance(src, T.FloatType) and isinstance(dst, T.DoubleType):
        return "cast"
    if isinstance(src, T.DoubleType) and isinstance(dst, T.FloatType):
        return "cast"  # float precision is rounded, as pyarrow's safe cast does
    if isinstance(src, T.ByteType | T.ShortType | T.IntegerType) and isinstance(dst, T.DoubleType):
        return "cast"
    if _is_numeric(src) and _is_numeric(dst):
        return "checked"
    if isinstance(src, T.DateType) and isinstance(dst, T.TimestampType):
        return "date_ts"
    if isinstance(src, T.DateType) and isinstance(dst, T.TimestampNTZType):
        return "cast"
    return None


def converted(c: Column, src: T.DataType, dst: T.DataType, kind: str, what: str) -> Column:
    """``c`` as ``dst``; values that would change fail the job with a clear message."""
    how = cast_kind(src, dst)
    if how == "same":
        return c if src == dst else c.cast(dst)
    if how == "cast":
        return c.cast(dst)
    if how == "date_ts":
        return F.timestamp_micros(F.unix_date(c).cast("long") * F.lit(86_400_000_000))
    assert how == "checked"
    out = c.try_cast(dst)
    exact = c.isNull() | (out.isNotNull() & out.cast(src).eqNullSafe(c))
    msg = f"{what}: a {src.simpleString()} value does not fit {dst.simpleString()} exactly"
    return F.when(exact, out).otherwise(fail(kind, msg, dst))


def not_null(c: Column, field: T.StructField, kind: str, what: str) -> Column:
    if field.nullable:
        return c
    msg = f"{what}: NULL in non-nullable column {field.name!r}"
    return F.when(c.isNull(), fail(kind, msg, field.dataType)).otherwise(c)


# -- partition values ----------------------------------------------------------------

def partition_text(raw: str | None, t: T.DataType, arrow_type: pa.DataType,
                    where: str = "") -> str | None:
    """A Delta partition string in the form ``_typed_partition`` reads without a time zone.
    Values are parsed by the embedded engine's rules first, so a value that is not of the
    column's type is an error naming it (Spark's cast would read it as null)."""
    if raw is None or raw == "":  # Delta reads an empty partition value as null
        return None
    try:
        v = coerce(raw, arrow_type)
        pa.scalar(v, arrow_type)
    except (TypeError, ValueError, ArithmeticError, OverflowError, pa.ArrowException) as e:
        raise CorruptLogError(f"{where or 'a data file'} has partition value {raw!r}, which cannot "
                              f"be read as {arrow_type} ({e})") from None
    if isinstance(t, T.TimestampType):
        return str((v - _EPOCH) // dt.timedelta(microseconds=1))
    if isinstance(t, T.TimestampNTZType):
        return v.isoformat(sep=" ")
    if isinstance(t, T.FloatType | T.DoubleType):
        return ("NaN" if math.isnan(v) else repr(v) if math.isfinite(v)
                else "Infinity" if v > 0 else "-Infinity")
    return raw


def typed_partition(c: Column, t: T.DataType) -> Column:
    if isinstance(t, T.TimestampType):
        return F.timestamp_micros(c.cast("long"))
    return c.cast(t)


def partition_literal(raw: str | None, field: T.StructField, arrow_type: pa.DataType,
                       where: str = "") -> Column:
    return typed_partition(F.lit(partition_text(raw, field.dataType, arrow_type, where)),
                            field.dataType)


def partition_dir_value(c: Column, t: T.DataType) -> Column:
    """What we partition the written files by: text we can turn back into the exact
    Delta partition string (Spark's own text for timestamps depends on the session zone)."""
    if isinstance(t, T.TimestampType):
        return F.unix_micros(c).cast("string")
    return c.cast("string")


def delta_partition_string(text: str, t: T.DataType) -> str | None:
    """The Delta ``partitionValues`` string for a directory value written by
    ``_partition_dir_value``."""
    if text == HIVE_NULL:
        return None
    if isinstance(t, T.TimestampType):
        return partition_value_string(_EPOCH + dt.timedelta(microseconds=int(text)))
    if isinstance(t, T.TimestampNTZType):
        return partition_value_string(dt.datetime.fromisoformat(text))
    if isinstance(t, T.FloatType | T.DoubleType):
        return partition_value_string(float(text))
    return text


def partition_values(rel: str, ctx: TableContext,
                      types: dict[str, T.DataType]) -> dict[str, str | None]:
    segments = rel.split("/")[: len(ctx.partition_columns)]
    out: dict[str, str | None] = {}
    for name, seg in zip(ctx.partition_columns, segments, strict=True):
        _, _, text = seg.partition("=")
        out[name] = delta_partition_string(unquote(text), types[name])  # Spark escapes as %XX
    return out


# -- statistics ----------------------------------------------------------------------

FOOTER_GUESS = 64 * 1024  # one ranged GET holds the footer of all but very wide files


def read_footer(store: Any, key: str, size: int) -> pq.FileMetaData:
    """A data file's Parquet footer (statistics come from it, as Delta's own writers take
    them), by one suffix-range GET, a second only for a footer longer than the guess."""
    tail = store.get_range(key, -min(size, FOOTER_GUESS))
    if len(tail) < 12 or tail[-4:] != b"PAR1":
        raise StorageError(f"{key} is not a plain Parquet file (no PAR1 footer)")
    n = int.from_bytes(tail[-8:-4], "little")
    if n + 8 > len(tail):
        tail = store.get_range(key, -(n + 8))
    footer = tail[len(tail) - 8 - n:len(tail) - 8]
    return pq.read_metadata(pa.BufferReader(b"PAR1" + footer + tail[-8:]))


