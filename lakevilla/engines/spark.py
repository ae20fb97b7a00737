"""The Spark engine: Spark reads and writes the Parquet files, lakevilla writes the Delta log.

No Delta jars are involved: ``scan`` reads exactly the files the transaction layer
picked, in one scan (partition values come from the add actions), ``write`` has Spark
write plain Parquet under a fresh ``<table>/lv-<uuid>/`` folder and turns the files
into add actions (size from a LIST, statistics from the Parquet footers, read by
ranged GETs without touching the data), ``rewrite`` finds the files holding matching
rows with one job and rewrites only those. Nothing here assumes local mode; the lake
must be reachable by Spark's Hadoop file systems (``s3://`` lakes are addressed as
``s3a://``).

Classic and Spark Connect sessions work alike: the engine only builds DataFrames and
never touches the driver's JVM. The files Spark wrote are listed, measured and tidied
through lakevilla's own object store (the one the lake is opened with), so those
requests are counted and can fail under fault injection like every other.

Expressions (``where``, ``set``) are checked by the grammar both engines share and
built as Spark columns from the checked tree (``spark_expr``), never parsed by
Spark, so they mean what they mean in the embedded engine. Use a UTC session
(``spark.sql.session.timeZone``), as the embedded engine computes in UTC.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..delta import column_mapping, deletion_vectors
from ..delta.actions import AddFile, CdcFile
from ..delta.constraints import generated_columns
from ..delta.schema import schema_to_json
from ..delta.stats import stats_from_parquet
from ..errors import (
    CorruptLogError,
    InvalidArgumentError,
    InvalidExpressionError,
    LakeVillaError,
    SchemaMismatchError,
    StorageError,
)
from ..parallel import pmap
from ..scan import expressions as E
from ..scan.ordering import Ordering
from ..scan.pruning import coerce
from . import (
    generated,
    identity,
    spark_cdf,
    spark_dv,
    spark_expr,
    spark_mapped,
    spark_merge_clauses,
)
from .api import (
    HIVE_NULL,
    RewriteResult,
    TableContext,
    data_file_key,
    partition_value_string,
)
from .embedded import as_stream, conformed, stream_chunks, to_arrow_table
from .rules import checked_rules, generation, violation

FILE_COL = "__lv_file"
DV_ROW = "__lv_dv_row"  # a row's index in its file, matched against deletion vectors
_CHECK_TAG = "lakevilla-check"  # marks the errors our own runtime checks raise inside Spark jobs
_CHECK_RE = re.compile(re.escape(_CHECK_TAG) + r"\[(schema|expr)\]: (.*?)(?: SQLSTATE: \w+)?$")
_GLOB_CHARS = re.compile(r"([\\{}\[\]*?])")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_UTC_NAMES = {"UTC", "ETC/UTC", "Z", "+00:00", "GMT", "ETC/GMT", "UTC+00:00"}
_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_INT_RANK = {T.ByteType: 1, T.ShortType: 2, T.IntegerType: 3, T.LongType: 4}
_SCHEME_MAP = {"s3": "s3a"}
# storage, not expressions
_IO_CONDITIONS = {"PATH_NOT_FOUND", "FAILED_READ_FILE", "TASK_WRITE_FAILED"}


# -- schemas and columns -------------------------------------------------------------

def spark_schema(schema: pa.Schema) -> T.StructType:
    """The Spark type of a table: Delta's schemaString is Spark's own schema JSON."""
    return T.StructType.fromJson(json.loads(schema_to_json(schema)))


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _col(name: str) -> Column:
    return F.col(_ident(name))


def _ref(ref: E.ColumnRef) -> Column:
    """A checked expression's column reference in a frame in table schema."""
    c = _col(ref.column)
    for f in ref.fields:
        c = c.getField(f)
    return c


def _data_schema(ctx: TableContext) -> T.StructType:
    return T.StructType([f for f in spark_schema(ctx.schema).fields
                         if f.name not in ctx.partition_columns])


def _is_numeric(t: T.DataType) -> bool:
    return isinstance(t, T.NumericType)


def _fail(kind: str, message: str, t: T.DataType) -> Column:
    """Fails the Spark job with ``message``; ``_spark_errors`` turns it into our error class."""
    return F.raise_error(F.lit(f"{_CHECK_TAG}[{kind}]: {message}")).cast(t)


def _cast_kind(src: T.DataType, dst: T.DataType) -> str | None:
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


def _converted(c: Column, src: T.DataType, dst: T.DataType, kind: str, what: str) -> Column:
    """``c`` as ``dst``; values that would change fail the job with a clear message."""
    how = _cast_kind(src, dst)
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
    return F.when(exact, out).otherwise(_fail(kind, msg, dst))


def _not_null(c: Column, field: T.StructField, kind: str, what: str) -> Column:
    if field.nullable:
        return c
    msg = f"{what}: NULL in non-nullable column {field.name!r}"
    return F.when(c.isNull(), _fail(kind, msg, field.dataType)).otherwise(c)


# -- partition values ----------------------------------------------------------------

def _partition_text(raw: str | None, t: T.DataType, arrow_type: pa.DataType,
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


def _typed_partition(c: Column, t: T.DataType) -> Column:
    if isinstance(t, T.TimestampType):
        return F.timestamp_micros(c.cast("long"))
    return c.cast(t)


def _partition_literal(raw: str | None, field: T.StructField, arrow_type: pa.DataType,
                       where: str = "") -> Column:
    return _typed_partition(F.lit(_partition_text(raw, field.dataType, arrow_type, where)),
                            field.dataType)


def _partition_dir_value(c: Column, t: T.DataType) -> Column:
    """What we partition the written files by: text we can turn back into the exact
    Delta partition string (Spark's own text for timestamps depends on the session zone)."""
    if isinstance(t, T.TimestampType):
        return F.unix_micros(c).cast("string")
    return c.cast("string")


def _delta_partition_string(text: str, t: T.DataType) -> str | None:
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


def _partition_values(rel: str, ctx: TableContext,
                      types: dict[str, T.DataType]) -> dict[str, str | None]:
    segments = rel.split("/")[: len(ctx.partition_columns)]
    out: dict[str, str | None] = {}
    for name, seg in zip(ctx.partition_columns, segments, strict=True):
        _, _, text = seg.partition("=")
        out[name] = _delta_partition_string(unquote(text), types[name])  # Spark escapes as %XX
    return out


# -- statistics ----------------------------------------------------------------------

FOOTER_GUESS = 64 * 1024  # one ranged GET holds the footer of all but very wide files


def _read_footer(store: Any, key: str, size: int) -> pq.FileMetaData:
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


# -- errors --------------------------------------------------------------------------

def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__


def _condition(e: BaseException) -> tuple[str | None, str | None]:
    cond = getattr(e, "getCondition", None) or getattr(e, "getErrorClass", None)
    state = getattr(e, "getSqlState", None)
    try:
        return (cond() if cond else None), (state() if state else None)
    except Exception:  # noqa: BLE001 - a Py4J error without a Spark condition
        return None, None


def _is_spark_error(e: BaseException) -> bool:
    mod = type(e).__module__
    return mod.startswith(("pyspark", "py4j"))


def _own_check(e: BaseException) -> LakeVillaError | None:
    for line in str(e).splitlines():
        m = _CHECK_RE.search(line)
        if m is not None:
            cls = SchemaMismatchError if m.group(1) == "schema" else InvalidExpressionError
            return cls(m.group(2).strip())
    return None


@contextmanager
def _spark_errors(what: str, data_error: type[LakeVillaError] | None) -> Iterator[None]:
    """Spark's exceptions as lakevilla errors: our own checks, data errors (SQLSTATE 22,
    e.g. a division by zero in a ``set``) when ``data_error`` is given, and analysis
    errors; anything else (I/O, a lost executor, the user's own DataFrame) passes unchanged."""
    try:
        yield
    except LakeVillaError:
        raise
    except Exception as e:
        if not _is_spark_error(e):
            raise
        own = _own_check(e)
        if own is not None:
            raise own from None
        cond, state = _condition(e)
        if cond and cond.split(".")[0] in _IO_CONDITIONS:
            raise StorageError(f"{what}: {_first_line(e)}") from e
        if data_error is not None and state and state.startswith("22"):
            raise data_error(f"{what}: {_first_line(e)}") from None
        if type(e).__name__ in ("AnalysisException", "ParseException"):
            raise InvalidExpressionError(f"{what}: {_first_line(e)}") from None
        raise


def _check_rules(ctx: TableContext, df: DataFrame) -> None:
    """``ConstraintViolationError`` for the first row of ``df`` that breaks a rule of the table."""
    rules = checked_rules(ctx) if ctx.constraints else []
    with _spark_errors(f"the rules of {ctx.name!r}", None):
        broken = spark_expr.first_broken(df, [c for _, c in rules], _ref) if rules else None
    if broken is not None:
        raise violation(ctx, *rules[broken[0]], broken[1])


# -- generated columns (as ``generated.py`` on the embedded engine) -------------------

def _generated(ctx: TableContext, df: DataFrame, columns: list[str],
               rows: Column | None = None) -> DataFrame:
    """``df`` (table columns first) with ``columns`` computed from each row by their generation
    expression (only where ``rows`` holds, when given), converted as a ``set`` is."""
    if not columns:
        return df
    gen = generation(ctx)  # refuses an expression outside the grammar, by name
    fields = {f.name: f for f in spark_schema(ctx.schema).fields}
    new: dict[str, Column] = {}
    for c in columns:
        v = spark_expr.assigned(gen[c], ctx.schema.field(c).type, _ref)
        v = v if rows is None else F.when(rows, v).otherwise(_col(c))
        new[c] = _not_null(v, fields[c], "schema",
                           f"generated column {c!r} of {ctx.name!r} ({gen[c].text})")
    return df.select(*[new[n].alias(n) if n in new else _col(n) for n in df.columns])


def _updated(ctx: TableContext, df: DataFrame, match: Column,
             assignments: dict[str, E.Checked]) -> DataFrame:
    """SET on the matching rows only (CASE WHEN evaluates its branch for those rows alone),
    each value converted to its column's type by the assignment cast, as in the embedded
    engine; then the generated columns it does not set, recomputed from the new row (Delta)."""
    fields = {f.name: f for f in spark_schema(ctx.schema).fields}
    hit = F.col("__lv_hit")
    df = df.select("*", match.alias("__lv_hit"))  # the match of the row before the update
    new: dict[str, Column] = {}
    for name, value in assignments.items():
        what = f"set {name}={value.text!r}"
        v = spark_expr.assigned(value, ctx.schema.field(name).type, _ref)
        new[name] = F.when(hit, _not_null(v, fields[name], "schema", what)).otherwise(_col(name))
    df = df.select(*[new.get(f, _col(f)).alias(f) for f in fields], hit)
    regen = [c for c in sorted(generated_columns(ctx.constraints)) if c not in assignments]
    return _generated(ctx, df, regen, hit).drop("__lv_hit")


def _merged(ctx: TableContext, df: DataFrame, values: list[dict[str, E.Checked] | None]
            ) -> DataFrame:
    """A merge's new rows (``__lv_clause``: the clause that made each, NULL for a row it
    keeps) with each generated column its clause does not assign computed from the new row."""
    clause = F.col("__lv_clause")
    for col in sorted(generated_columns(ctx.constraints)):
        giving = [i for i, v in enumerate(values) if v and col in v]
        rows = clause.isNotNull() & (~clause.isin(giving) if giving else F.lit(True))
        df = _generated(ctx, df, [col], rows)
    return df.drop("__lv_clause")


def _numbered(spark: Any, ctx: TableContext, ins: DataFrame,
              values: list[dict[str, E.Checked] | None]) -> tuple[DataFrame, dict[str, int]]:
    """A merge's inserted rows with the identity columns their clause leaves out numbered, in
    Arrow as the embedded engine numbers them (``identity.by_clause``); the marks they leave."""
    got = ins.toArrow()
    clause = got.column("__lv_clause").to_numpy()
    table, marks = identity.by_clause(ctx, got.drop_columns(["__lv_clause"]), clause, values)
    out = table.append_column("__lv_clause", got.column("__lv_clause"))
    return spark.createDataFrame(out, schema=ins.schema), marks


# -- the engine ----------------------------------------------------------------------

def is_connect_session(spark: Any) -> bool:
    """A Spark Connect client session (no JVM on this side)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _use_connect_functions() -> None:
    """``pyspark.sql.functions`` builds classic or Connect columns by a process-wide flag
    that ``SparkSession.builder.remote(...)`` sets; a Connect session built another way
    (a vendor's builder) may have left it unset."""
    from pyspark.sql.utils import is_remote

    if not is_remote():
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"


class SparkEngine:
    """``lv.Lake(uri, engine=lv.SparkEngine(spark))``: reads give DataFrames, inserts take them."""

    name = "spark"

    def __init__(self, spark: SparkSession, *, scheme_map: dict[str, str] | None = None) -> None:
        self.spark = spark
        self.connect = is_connect_session(spark)
        if self.connect:
            _use_connect_functions()
        self.scheme_map = dict(_SCHEME_MAP if scheme_map is None else scheme_map)
        # INT96 timestamps carry no statistics; micros do (and every Delta reader reads them)
        spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")

    def attach(self, lake: Any) -> None:
        scheme = urlsplit(lake.root_uri).scheme
        if scheme not in ("file", "hdfs", "s3a", "gs", "abfs", "abfss", *self.scheme_map):
            raise InvalidArgumentError(f"the Spark engine cannot reach {lake.root_uri!r}: Spark "
                                       "needs a Hadoop file system URI (file://, s3:// via "
                                       "s3a, hdfs://, ...)")
        tz = (self.spark.conf.get("spark.sql.session.timeZone") or "").upper()
        if tz not in _UTC_NAMES:
            warnings.warn(f"Spark session time zone is {tz!r}: lakevilla prunes files reading "
                          "timestamp literals as UTC; set spark.sql.session.timeZone=UTC for "
                          "identical semantics", stacklevel=3)

    def num_rows(self, result: Any) -> int:
        """Rows of an arrow result; -1 for a DataFrame (counting it would run a job)."""
        if isinstance(result, DataFrame):
            return -1
        return int(getattr(result, "num_rows", -1))

    # -- paths ---------------------------------------------------------------------
    def _spark_uri(self, uri: str) -> str:
        scheme, sep, rest = uri.partition("://")
        return f"{self.scheme_map.get(scheme, scheme)}{sep}{rest}" if sep else uri

    def _file_uri(self, ctx: TableContext, add: AddFile) -> str:
        """The file's location as Spark reads it: literal (not URI-encoded) text, globs escaped."""
        path = unquote(add.path) if "://" in add.path else f"{ctx.location_uri}/{unquote(add.path)}"
        return _GLOB_CHARS.sub(r"\\\1", self._spark_uri(path))

    def _root_path(self, ctx: TableContext) -> str:
        return re.sub("/+", "/", urlsplit(ctx.lake_uri).path).rstrip("/")

    def _key_of(self, ctx: TableContext, spark_file_path: str) -> str:
        """The store key of a file as Spark names it (``input_file_name()``,
        ``inputFiles()``: URI-encoded)."""
        path = re.sub("/+", "/", unquote(urlsplit(spark_file_path).path))
        root = self._root_path(ctx) + "/"
        return path[len(root):] if path.startswith(root) else path

    # -- validation (the grammar both engines share) ----------------------------------
    def validate_where(self, ctx: TableContext, where: str) -> None:
        E.check_where(where, ctx.schema, f"where={where!r} on {ctx.name!r}")

    def validate_set(self, ctx: TableContext, assignments: dict[str, str],
                     where: str | None) -> None:
        E.check_update(ctx.schema, ctx.name, where, assignments)

    # -- reading ---------------------------------------------------------------------
    def _frame(self, ctx: TableContext, files: list[AddFile], with_file: bool = False) -> DataFrame:
        """All rows of ``files`` in table schema, from one scan. Partition values come from
        the add actions: literals when the files share them, else a broadcast join on the file
        name. ``with_file`` adds Spark's name for each row's file (``FILE_COL``)."""
        schema = spark_schema(ctx.schema)
        if not files:
            fields = list(schema.fields) + (
                [T.StructField(FILE_COL, T.StringType())] if with_file else [])
            return self.spark.createDataFrame([], T.StructType(fields))
        deleted = any(a.deletion_vector is not None for a in files)

        def live(d: DataFrame, fs: list[AddFile]) -> DataFrame:  # keeps FILE_COL
            return _live(self.spark, ctx, d, fs, lambda name: self._key_of(ctx, name))

        if column_mapping.mode_of(ctx.schema) != "none":  # physical names on disk
            df, files = spark_mapped.read(self.spark, ctx, files, self._file_uri, _read_footer,
                                          live)
        else:
            df = self.spark.read.schema(_data_schema(ctx)).parquet(*[self._file_uri(ctx, a)
                                                                     for a in files])
            df = live(df, files) if deleted else df
        groups = {tuple(a.partition_values.get(c) for c in ctx.partition_columns) for a in files}
        if (with_file or len(groups) > 1) and not deleted:
            df = df.withColumn(FILE_COL, F.input_file_name())  # the same text as df.inputFiles()
        if len(groups) == 1:
            pv = dict(zip(ctx.partition_columns, groups.pop(), strict=True))
            where = f"table {ctx.name!r}: file {files[0].path!r}"
            df = df.select("*", *[_partition_literal(pv[f.name], f, ctx.schema.field(f.name).type,
                                                     f"{where} column {f.name!r}").alias(f.name)
                                  for f in schema.fields if f.name in pv])
        else:
            df = df.join(F.broadcast(self._partition_map(ctx, df, files)), FILE_COL)
        return df.select(*[_col(f.name) for f in schema.fields], *([FILE_COL] if with_file else []))

    def _partition_map(self, ctx: TableContext, df: DataFrame, files: list[AddFile]) -> DataFrame:
        """(Spark's file name, typed partition values) for every file ``df`` reads."""
        by_key = {data_file_key(ctx.name, a.path, ctx.lake_uri): a for a in files}
        types = {f.name: f.dataType for f in spark_schema(ctx.schema).fields}
        rows = []
        for name in df.inputFiles():
            add = by_key.get(self._key_of(ctx, name))
            if add is None:
                raise StorageError(f"Spark reads {name!r}, which is not a data "
                                   f"file of {ctx.name!r}")
            rows.append((name,
                         *[_partition_text(add.partition_values.get(c), types[c],
                                           ctx.schema.field(c).type,
                                           f"table {ctx.name!r}: file {add.path!r} column {c!r}")
                           for c in ctx.partition_columns]))
        fields = [T.StructField(FILE_COL, T.StringType())] + [T.StructField(c, T.StringType())
                                                              for c in ctx.partition_columns]
        m = self.spark.createDataFrame(rows, T.StructType(fields))
        return m.select(FILE_COL,
                        *[_typed_partition(_col(c), types[c]).alias(c)
                          for c in ctx.partition_columns])

    def scan(self, ctx: TableContext, files: list[AddFile], where: str | None,
             columns: list[str] | None, order: Ordering | None = None) -> DataFrame:
        if columns is not None:
            unknown = [c for c in columns if c not in ctx.schema.names]
            if unknown:
                raise InvalidExpressionError(f"{ctx.name!r} has no column(s) {unknown}")
        if order is not None:
            order.check(ctx.schema.names, ctx.name)
            out = list(columns) if columns is not None else list(ctx.schema.names)
            df = self.scan(ctx, files, where, None)
            df = df.orderBy(*[_col(c).desc_nulls_last() if d else _col(c).asc_nulls_last()
                              for c, d in order.tie_breaks(out)])
            if order.limit is not None:
                df = df.limit(order.limit)
            return df.select(*[_col(c) for c in out])
        checked = (E.check_where(where, ctx.schema, f"where={where!r} on {ctx.name!r}")
                   if where is not None else None)
        df = self._frame(ctx, files)
        with _spark_errors(f"where={where!r} on {ctx.name!r}", InvalidExpressionError):
            if checked is not None:
                df = df.filter(spark_expr.condition(checked, _ref))
            if columns is not None:
                df = df.select(*[_col(c) for c in columns])
        return df

    # -- writing ---------------------------------------------------------------------
    def _conform(self, ctx: TableContext, df: DataFrame, what: str) -> DataFrame:
        """``df`` in the table schema (column order, names, types), mirroring embedded.conform."""
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
                if not f.nullable and f.name not in generated_columns(ctx.constraints):
                    raise SchemaMismatchError(f"{what}: missing non-nullable column {f.name!r}")
                cols.append(F.lit(None).cast(f.dataType).alias(f.name))
                continue
            st = src_types[src]
            if _cast_kind(st, f.dataType) is None:
                raise SchemaMismatchError(f"{what}: column {f.name!r} has "
                                          f"type {st.simpleString()}, the table "
                                          f"has {f.dataType.simpleString()}")
            c = _converted(_col(src), st, f.dataType, "schema", f"{what}: column {f.name!r}")
            cols.append(_not_null(c, f, "schema", what).alias(f.name))
        return df.select(*cols)

    def _to_frame(self, ctx: TableContext, data: Any) -> DataFrame | None:
        """A DataFrame in the table schema; None when non-Spark input has no rows."""
        what = f"insert into {ctx.name!r}"
        if isinstance(data, DataFrame) and identity.absent(ctx, data.columns):
            data = data.toArrow()  # identity values are numbered in Arrow, as the embedded engine
        if isinstance(data, DataFrame):
            return _generated(ctx, self._conform(ctx, data, what),
                              generated.missing(ctx, data.columns))
        # the embedded engine's exact rules
        table = conformed(ctx, to_arrow_table(data))
        if table.num_rows == 0:
            return None
        return self.spark.createDataFrame(table, schema=spark_schema(ctx.schema))

    def write(self, ctx: TableContext, data: Any) -> list[AddFile]:
        stream = as_stream(data)
        if stream is not None:
            return self._write_stream(ctx, stream)
        df = self._to_frame(ctx, data)
        if df is None:
            return []
        with _spark_errors(f"insert into {ctx.name!r}", None):
            return self._write_frame(ctx, df)

    def _write_stream(self, ctx: TableContext, reader: pa.RecordBatchReader) -> list[AddFile]:
        """A record batch stream, one file's worth at a time (the embedded engine's pieces), each
        written by Spark: this process never holds the whole stream. A failure deletes what
        the earlier pieces wrote."""
        written: list[AddFile] = []
        try:
            absent = generated.missing(ctx, reader.schema.names)
            numbering = identity.Numbering(identity.absent(ctx, reader.schema.names))
            computed = [*absent, *(c.name for c in numbering.columns)]
            for table in stream_chunks(ctx.name, reader, ctx.schema, computed):
                # as the embedded engine does
                table = generated.fill(ctx, numbering.fill(ctx.schema, table), absent)
                df = self.spark.createDataFrame(table, schema=spark_schema(ctx.schema))
                with _spark_errors(f"insert into {ctx.name!r}", None):
                    written.extend(self._write_frame(ctx, df))
        except BaseException:
            for a in written:
                try:
                    ctx.store.delete(data_file_key(ctx.name, a.path, ctx.lake_uri))
                except Exception:  # noqa: BLE001 - abandoned-file clean-up catches what is left
                    pass
            raise
        return written

    def check_rows(self, ctx: TableContext, files: list[AddFile]) -> None:
        _check_rules(ctx, self._frame(ctx, files))

    def _write_frame(self, ctx: TableContext, df: DataFrame) -> list[AddFile]:
        """Spark writes ``df`` (table schema) under a fresh folder; we describe each file."""
        _check_rules(ctx, df)
        ctx, df = spark_mapped.physical(ctx, df)  # a mapped table's names and ids on disk
        folder = f"lv-{uuid.uuid4()}"
        target = self._spark_uri(f"{ctx.location_uri}/{folder}")
        prefix = data_file_key(ctx.name, folder, ctx.lake_uri) + "/"
        types = {f.name: f.dataType for f in spark_schema(ctx.schema).fields}
        out = df
        for p in ctx.partition_columns:
            out = out.withColumn(p, _partition_dir_value(_col(p), types[p]))
        writer = (out.write.mode("error").option("compression", "snappy")
                  .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false"))
        if ctx.partition_columns:
            writer = writer.partitionBy(*ctx.partition_columns)
        try:
            writer.parquet(target)
            files = self._data_files(ctx, prefix)
            footers = self._map(lambda f: _read_footer(ctx.store, prefix + f[0], f[1]), files)
            adds = []
            for (rel, size, mtime), meta in zip(files, footers, strict=True):
                if meta.num_rows == 0:  # Spark writes one empty file for an empty input
                    ctx.store.delete(prefix + rel)
                    continue
                adds.append(AddFile(path=quote(f"{folder}/{rel}", safe="/="), size=size,
                                    partition_values=_partition_values(rel, ctx, types),
                                    modification_time=mtime, data_change=True,
                                    stats=stats_from_parquet(meta, ctx.partition_columns)))
            return adds
        except Exception:
            self._delete_all(ctx, prefix)
            raise

    def _data_files(self, ctx: TableContext, prefix: str) -> list[tuple[str, int, int]]:
        """(path under ``prefix``, size, mtime in ms) of the Parquet files Spark wrote; its side
        files (checksums, markers) are deleted so an abort that removes the data leaves nothing."""
        out = []
        for meta in list(ctx.store.list(prefix)):
            rel = meta.key[len(prefix):]
            if rel.rsplit("/", 1)[-1].startswith(("_", ".")) or not rel.endswith(".parquet"):
                ctx.store.delete(meta.key)
                continue
            mtime = int((meta.last_modified or 0) * 1000)
            out.append((rel, int(meta.size), mtime))
        return sorted(out)

    _map = staticmethod(pmap)  # footer reads in parallel: on object stores each one is a round trip

    @staticmethod
    def _delete_all(ctx: TableContext, prefix: str) -> None:
        """Best effort: the caller is already failing."""
        try:
            for meta in list(ctx.store.list(prefix)):
                ctx.store.delete(meta.key)
        except Exception:  # noqa: BLE001 - abandoned-file clean-up catches what is left
            pass

    # -- updates and deletes -----------------------------------------------------------
    def _hits(self, ctx: TableContext, files: list[AddFile], match: Column) -> dict[str, int]:
        """Matching rows per store key: one job over the candidate files."""
        rows = (self._frame(ctx, files, with_file=True).filter(match).groupBy(FILE_COL).count()
                .collect())
        return {self._key_of(ctx, r[FILE_COL]): int(r["count"]) for r in rows}

    writes_change_data = True  # change data feed tables (``spark_cdf.py``)

    def change_data(self, ctx: TableContext, removed: list[AddFile],
                    added: list[AddFile]) -> list[CdcFile]:
        return spark_cdf.of_files(ctx, removed, added)

    def rewrite(self, ctx: TableContext, files: list[AddFile], where: str | None,
                assignments: dict[str, str] | None) -> RewriteResult:
        if not files:
            return RewriteResult()
        op = "update" if assignments is not None else "delete"
        # every path runs the grammar
        checked, sets = E.check_update(ctx.schema, ctx.name, where, assignments)
        with _spark_errors(f"{op} on {ctx.name!r} where={where!r}", InvalidExpressionError):
            match = (F.coalesce(spark_expr.condition(checked, _ref), F.lit(False))
                     if checked is not None else F.lit(True))
            if ctx.write_dvs:  # Spark finds the rows, lakevilla marks them (spark_dv.py)
                live = _indexed(self, ctx, files)
                marked = spark_dv.marks(ctx, files, live, FILE_COL, "__lv_ri", match,
                                        lambda n: self._key_of(ctx, n))
                return spark_dv.rewrite(ctx, marked, lambda: [] if sets is None else (
                    self._write_frame(ctx, _updated(ctx, live.filter(match).drop(
                        FILE_COL, "__lv_ri"), F.lit(True), sets))))
            hits = self._hits(ctx, files, match)
            touched = [a for a in files if data_file_key(ctx.name, a.path, ctx.lake_uri) in hits]
            if not touched:
                return RewriteResult()
            src = self._frame(ctx, touched)
            new = src.filter(~match) if sets is None else _updated(ctx, src, match, sets)
            added = self._write_frame(ctx, new)
            res = RewriteResult(removed=touched, added=added, rows=sum(hits.values()))
            if not ctx.write_cdf:
                return res
            hit = src.filter(match)  # the change rows: as they were, and as an update made them
            return spark_cdf.rewritten(ctx, res, hit, None if sets is None
                                       else _updated(ctx, hit, F.lit(True), sets))

    # -- MERGE -------------------------------------------------------------------------
    def merge(self, ctx: TableContext, files: list[AddFile], cm: Any, spec: Any,
              source: pa.Table) -> tuple[RewriteResult, dict[str, int]]:
        """The embedded engine's merge as Spark jobs: target rows are named by (file, row index
        in the file), so duplicate matches and the rows to rewrite are found without a row id
        that Spark could recompute differently; only files where a clause applied are rewritten."""
        from ..data.schemas import check_merge_source
        from ..statements import merge as M

        check_merge_source(ctx.name, spec, source.schema, ctx.schema)
        what = f"merge into {ctx.name!r}"
        tfields = spark_schema(ctx.schema).fields
        mc = spark_merge_clauses.MergeClauses(ctx, cm, spec, source, tfields, what, _not_null)
        tcols, src_arrow, ref = mc.tcols, mc.src_arrow, mc.ref
        clause_of, values = mc.clause_of, mc.values
        matched = [i for i, c in enumerate(spec.clauses) if c.matched]
        inserts = [i for i, c in enumerate(spec.clauses) if not c.matched]
        with _spark_errors(what, InvalidExpressionError):
            sdf = self.spark.createDataFrame(src_arrow) if source.num_rows else None
            if sdf is None:
                return RewriteResult(), M.metrics(0, 0, 0, 0, 0, 0)
            tdf = _indexed(self, ctx, files)
            t2 = tdf.select(*[_col(f.name).alias(tcols[k]) for k, f in enumerate(tfields)],
                            FILE_COL, "__lv_ri")
            on = spark_expr.condition(cm.on, ref)
            res = RewriteResult()
            updated = deleted = inserted = 0
            parts: list[DataFrame] = []
            changed = ins = None  # the target rows a clause applied to, the inserted rows
            dels: list[int] = []
            marked: list = []  # on a table that asks for DVs (spark_dv.py)
            if matched and files:
                m = t2.join(sdf, on, "inner").select(FILE_COL, "__lv_ri",
                                                     clause_of(matched).alias("__lv_clause"),
                                                     *values(matched, lambda k, f: F.col(tcols[k])))
                only_delete = [spec.clauses[i] for i in matched] == [M.MergeClause("delete")]
                if not only_delete:
                    dup = (m.groupBy(FILE_COL, "__lv_ri").count().filter(F.col("count") > 1)
                           .limit(1).collect())
                    if dup:
                        raise M.DuplicateMatchError(
                            f"{what}: a target row is matched by {dup[0]['count']} source rows; a "
                            "merge that updates or deletes needs at most one source row per target "
                            "row: deduplicate the source")
                applied = m.filter(F.col("__lv_clause") >= 0).dropDuplicates([FILE_COL, "__lv_ri"])
                dels = [i for i in matched if spec.clauses[i].kind == "delete"]
                counts = (applied.groupBy(F.col("__lv_clause").isin(dels).alias("d"), FILE_COL)
                          .count().collect())
                touched_keys = {self._key_of(ctx, r[FILE_COL]) for r in counts}
                deleted = sum(int(r["count"]) for r in counts if r["d"])
                updated = sum(int(r["count"]) for r in counts if not r["d"])
                touched = [a for a in files
                           if data_file_key(ctx.name, a.path, ctx.lake_uri) in touched_keys]
                names = [r[FILE_COL] for r in counts]
                a = applied.select(FILE_COL, "__lv_ri", "__lv_clause",
                                   *[F.col(c).alias(c + "n") for c in tcols])
                if touched:  # each row a clause applied to, before and after (lazy: the feed's)
                    changed = t2.filter(F.col(FILE_COL).isin(names)).join(a, [FILE_COL, "__lv_ri"])
                if touched and ctx.write_dvs:  # the updated rows alone are written
                    marked = spark_dv.merge_marks(ctx, touched, t2, applied, FILE_COL,
                                                  lambda n: self._key_of(ctx, n))
                    parts.append(applied.filter(~F.col("__lv_clause").isin(dels)).select(
                        *[F.col(c).alias(f.name) for c, f in zip(tcols, tfields, strict=True)],
                        "__lv_clause"))
                elif touched:
                    kept = t2.filter(F.col(FILE_COL).isin(names)) \
                        .join(a, [FILE_COL, "__lv_ri"], "left") \
                        .filter(F.col("__lv_clause").isNull() | ~F.col("__lv_clause").isin(dels))
                    parts.append(kept.select(*[F.when(F.col("__lv_clause").isNull(), F.col(c))
                                               .otherwise(F.col(c + "n")).alias(f.name)
                                               for c, f in zip(tcols, tfields, strict=True)],
                                             "__lv_clause"))
                    res.removed = touched
            if inserts:
                nm = sdf.join(t2, on, "left_anti") if files else sdf
                ins = nm.select(clause_of(inserts).alias("__lv_clause"),
                                *values(inserts, lambda k, f: F.lit(None).cast(f.dataType)))
                ins = ins.filter(F.col("__lv_clause") >= 0).select(
                    *[F.col(c).alias(f.name) for c, f in zip(tcols, tfields, strict=True)],
                    "__lv_clause").cache()
                inserted = ins.count()
                if inserted and ctx.identity:
                    ins, res.marks = _numbered(self.spark, ctx, ins, cm.values)
                if inserted:
                    parts.append(ins)
            def write() -> list[AddFile]:
                if not parts:
                    return []
                out = parts[0]
                for p in parts[1:]:
                    out = out.unionByName(p)
                return self._write_frame(ctx, _merged(ctx, out, cm.values))
            if marked:
                numbered = res.marks  # the identity marks of the inserted rows stay
                res = spark_dv.rewrite(ctx, marked, write)
                res.marks = numbered
            else:
                res.added = write()
            res = spark_cdf.merged(ctx, res, changed, dels, tcols, ins if inserted else None,
                                   lambda df: _merged(ctx, df, cm.values))
        res.rows = updated + deleted + inserted
        return res, M.metrics(source.num_rows, updated, deleted, inserted, len(res.added),
                              len(res.removed))



def _indexed(eng: SparkEngine, ctx: TableContext, files: list[AddFile]) -> DataFrame:
    """``_frame`` with each row's file and its position in the file (``__lv_ri``)."""
    if not files:
        fields = list(spark_schema(ctx.schema).fields) + [
            T.StructField(FILE_COL, T.StringType()), T.StructField("__lv_ri", T.LongType())]
        return eng.spark.createDataFrame([], T.StructType(fields))

    def tag(df: DataFrame, fs: list[AddFile]) -> DataFrame:
        """A scan of ``fs`` with each row's file and index, the rows DVs delete dropped."""
        gone = (_deleted(eng.spark, ctx, df, fs, lambda n: eng._key_of(ctx, n))
                if any(a.deletion_vector is not None for a in fs) else None)
        df = df.select("*", F.col("_metadata.row_index").alias(DV_ROW),
                       F.input_file_name().alias(FILE_COL))
        if gone is not None:  # rows a deletion vector deletes are not there to match
            df = df.join(F.broadcast(gone), [FILE_COL, DV_ROW], "left_anti")
        return df

    if column_mapping.mode_of(ctx.schema) != "none":  # each file's columns, renamed after
        df, files = spark_mapped.read(eng.spark, ctx, files, eng._file_uri, _read_footer, tag,
                                      always=True)
    else:
        df = tag(eng.spark.read.schema(_data_schema(ctx)).parquet(*[eng._file_uri(ctx, a)
                                                                    for a in files]), files)
    df = df.withColumnRenamed(DV_ROW, "__lv_ri")
    df = (df.join(F.broadcast(eng._partition_map(ctx, df, files)), FILE_COL)
          if ctx.partition_columns else df)
    return df.select(*[_col(f.name) for f in spark_schema(ctx.schema).fields], FILE_COL,
                     "__lv_ri")


def _deleted(spark: SparkSession, ctx: TableContext, df: DataFrame, files: list[AddFile],
             key_of: Callable[[str], str]) -> DataFrame:
    """(``FILE_COL``, ``DV_ROW``) of the rows the deletion vectors of ``files`` delete, each file
    named as Spark names it in ``df`` (a scan of ``files``). ``key_of``: the store key of a file
    as Spark names it."""
    by_key = {data_file_key(ctx.name, a.path, ctx.lake_uri): a for a in files}
    names, rows = [], []
    for name in df.inputFiles():
        add = by_key.get(key_of(name))
        if add is None or add.deletion_vector is None:
            continue
        gone = deletion_vectors.deleted_rows(ctx.store, ctx.name, ctx.lake_uri,
                                             add.deletion_vector, add.path)
        names.append(np.full(len(gone), name, dtype=object))
        rows.append(gone)
    deleted = pa.table({FILE_COL: pa.array(np.concatenate(names) if names else [], pa.string()),
                        DV_ROW: pa.array(np.concatenate(rows) if rows else [], pa.int64())})
    return spark.createDataFrame(
        deleted, schema=T.StructType([T.StructField(FILE_COL, T.StringType()),
                                      T.StructField(DV_ROW, T.LongType())]))


def _live(spark: SparkSession, ctx: TableContext, df: DataFrame, files: list[AddFile],
          key_of: Callable[[str], str]) -> DataFrame:
    """``df`` (a scan of ``files``) without the rows their deletion vectors delete: an anti
    join, on (file, ``_metadata.row_index``), with the deleted rows, broadcast."""
    gone_df = _deleted(spark, ctx, df, files, key_of)
    df = df.select("*", F.col("_metadata.row_index").alias(DV_ROW),
                   F.input_file_name().alias(FILE_COL))
    # the file name is kept: input_file_name() above a join is not reliable
    return df.join(F.broadcast(gone_df), [FILE_COL, DV_ROW], "left_anti").drop(DV_ROW)


@contextmanager
def _jvm_launch_without_preexec_fn() -> Iterator[None]:
    """pyspark starts its JVM with ``Popen(preexec_fn=...)``, which forces a full fork()
    that runs every library's at-fork handlers and Python code in the child. In a busy
    process (delta-rs' tokio runtime, arrow, thread pools all live) that child can
    segfault before exec. ``start_new_session`` keeps Ctrl-C away from the JVM just as
    well and lets CPython spawn with vfork, which runs no handlers."""
    from pyspark import java_gateway

    real = java_gateway.Popen

    def popen(cmd: Any, **kwargs: Any) -> Any:
        kwargs.pop("preexec_fn", None)
        return real(cmd, start_new_session=True, **kwargs)

    # pyspark's name for subprocess.Popen, a class to mypy: a function stands in for it here
    java_gateway.Popen = popen  # type: ignore[misc, assignment]
    try:
        yield
    finally:
        java_gateway.Popen = real  # type: ignore[misc]


def local_session(app_name: str = "lakevilla", cores: int | str = "*",
                  extra: dict[str, str] | None = None) -> SparkSession:
    """A local-mode SparkSession for demos and tests (production passes its own session).

    UTC session time zone (so timestamp literals mean what the statistics mean), no console
    progress bar, no UI, quiet logs, bound to 127.0.0.1.
    """
    import os

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (SparkSession.builder.master(f"local[{cores}]").appName(app_name)
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    for k, v in (extra or {}).items():
        builder = builder.config(k, v)
    with _jvm_launch_without_preexec_fn():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
