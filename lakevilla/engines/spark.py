"""The Spark engine: Spark reads and writes the Parquet files, lakevilla writes the Delta log.

No Delta jars are involved. ``scan`` reads exactly the files the transaction layer picked
(``spark_read``); ``write`` has Spark write plain Parquet under a fresh folder and describes
each file from its footer (``spark_write``); ``rewrite`` finds the files holding matching rows
with one job and rewrites or marks only those (``spark_dv``); ``merge`` joins a source that
stays a DataFrame (``spark_merge``). Rows stay on the executors: the driver handles plans,
file lists, statistics and deletion-vector descriptors. Nothing here assumes local mode; the
lake must be reachable by Spark's Hadoop file systems (``s3://`` lakes are addressed as
``s3a://``), and by lakevilla's store from the executors (deletion vectors).

Classic and Spark Connect sessions work alike: the engine only builds DataFrames and never
touches the driver's JVM. Expressions (``where``, ``set``) are checked by the grammar both
engines share and built as Spark columns from the checked tree (``spark_expr``), never parsed
by Spark, so they mean what they mean in the embedded engine. Use a UTC session
(``spark.sql.session.timeZone``), as the embedded engine computes in UTC.
"""

from __future__ import annotations

import os
import warnings
from typing import Any
from urllib.parse import urlsplit

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..delta.actions import AddFile, CdcFile
from ..errors import InvalidArgumentError, InvalidExpressionError
from ..scan import expressions as E
from ..scan.ordering import Ordering
from . import spark_cdf, spark_changes, spark_dv, spark_expr, spark_merge, spark_write
from .api import CommitFiles, RewriteResult, TableContext
from .arrow_source import source_table
from .merge_plan import MergePlan, MergeResult
from .spark_errors import spark_errors
from .spark_names import RID_COL, ROW_BITS
from .spark_paths import SCHEME_MAP, SparkPaths
from .spark_read import SparkAccess, frame
from .spark_rows import check_rules, updated
from .spark_source import SparkSource, read_staged
from .spark_types import col, ref, spark_schema

__all__ = ["SparkEngine", "is_connect_session", "spark_schema"]

_UTC_NAMES = {"UTC", "ETC/UTC", "Z", "+00:00", "GMT", "ETC/GMT", "UTC+00:00"}


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
    """``lv.Lake(uri, engine=lv.SparkEngine(spark))``: reads give DataFrames, inserts and merges
    take them."""

    name = "spark"
    writes_change_data = True  # change data feed tables (``spark_cdf.py``)

    def __init__(self, spark: SparkSession, *, scheme_map: dict[str, str] | None = None) -> None:
        self.spark = spark
        self.connect = is_connect_session(spark)
        if self.connect:
            _use_connect_functions()
        self.paths = SparkPaths(dict(SCHEME_MAP if scheme_map is None else scheme_map))
        self.sa = SparkAccess(spark, self.paths)
        # INT96 timestamps carry no statistics; micros do (and every Delta reader reads them)
        spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")

    def attach(self, lake: Any) -> None:
        scheme = urlsplit(lake.root_uri).scheme
        if scheme in ("az", "azure") and scheme not in self.paths.scheme_map:
            # ABFS names the account in the URI; az:// leaves it to the options
            raise InvalidArgumentError(
                f"the Spark engine reaches Azure through ABFS, which needs the account in the "
                f"URI: open the lake as abfss://<container>@<account>.dfs.core.windows.net/"
                f"<prefix> (lakevilla takes that URI too) instead of {lake.root_uri!r}")
        if scheme not in ("file", "hdfs", "s3a", "gs", "abfs", "abfss", *self.paths.scheme_map):
            raise InvalidArgumentError(f"the Spark engine cannot reach {lake.root_uri!r}: Spark "
                                       "needs a Hadoop file system URI (file://, s3:// via "
                                       "s3a, abfss://, gs://, hdfs://, ...)")
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

    # -- validation (the grammar both engines share) ----------------------------------
    def validate_where(self, ctx: TableContext, where: str) -> None:
        E.check_where(where, ctx.schema, f"where={where!r} on {ctx.name!r}")

    def validate_set(self, ctx: TableContext, assignments: dict[str, str],
                     where: str | None) -> None:
        E.check_update(ctx.schema, ctx.name, where, assignments)

    # -- reading ---------------------------------------------------------------------
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
            df = df.orderBy(*[col(c).desc_nulls_last() if d else col(c).asc_nulls_last()
                              for c, d in order.tie_breaks(out)])
            if order.limit is not None:
                df = df.limit(order.limit)
            return df.select(*[col(c) for c in out])
        checked = (E.check_where(where, ctx.schema, f"where={where!r} on {ctx.name!r}")
                   if where is not None else None)
        df = frame(self.sa, ctx, files)
        with spark_errors(f"where={where!r} on {ctx.name!r}", InvalidExpressionError):
            if checked is not None:
                df = df.filter(spark_expr.condition(checked, ref))
            if columns is not None:
                df = df.select(*[col(c) for c in columns])
        return df

    # -- writing ---------------------------------------------------------------------
    def write(self, ctx: TableContext, data: Any) -> list[AddFile]:
        return spark_write.write(self.sa, ctx, data)

    def check_rows(self, ctx: TableContext, files: list[AddFile]) -> None:
        check_rules(ctx, frame(self.sa, ctx, files))

    def change_rows(self, ctx: TableContext, commits: list[CommitFiles]) -> DataFrame:
        return spark_changes.change_rows(self.sa, ctx, commits)

    def change_data(self, ctx: TableContext, removed: list[AddFile],
                    added: list[AddFile]) -> list[CdcFile]:
        with spark_errors(f"the change data of {ctx.name!r}", None):
            return spark_cdf.of_files(self.sa, ctx, removed, added)

    # -- updates and deletes -----------------------------------------------------------
    def rewrite(self, ctx: TableContext, files: list[AddFile], where: str | None,
                assignments: dict[str, str] | None) -> RewriteResult:
        if not files:
            return RewriteResult()
        op = "update" if assignments is not None else "delete"
        # every path runs the grammar
        checked, sets = E.check_update(ctx.schema, ctx.name, where, assignments)
        with spark_errors(f"{op} on {ctx.name!r} where={where!r}", InvalidExpressionError):
            match = (F.coalesce(spark_expr.condition(checked, ref), F.lit(False))
                     if checked is not None else F.lit(True))
            if ctx.write_dvs:  # Spark finds the rows, the executors mark them (spark_dv.py)
                rows = frame(self.sa, ctx, files, indexed=True).filter(match)
                hit = rows.drop(RID_COL)
                post = None if sets is None else updated(ctx, hit, F.lit(True), sets)
                res = spark_dv.mark(ctx, files, rows, lambda: [] if post is None else (
                    spark_write.write_frame(self.sa, ctx, post)))
                return spark_cdf.rewritten(self.sa, ctx, res, hit, post)
            place = F.shiftright(F.col(RID_COL), ROW_BITS).alias("place")
            got = (frame(self.sa, ctx, files, indexed=True).filter(match)
                   .groupBy(place).count().collect())  # matching rows per file: O(files)
            hits = {int(r["place"]): int(r["count"]) for r in got}
            touched = [a for i, a in enumerate(files) if i in hits]
            if not touched:
                return RewriteResult()
            src = frame(self.sa, ctx, touched)
            new = src.filter(~match) if sets is None else updated(ctx, src, match, sets)
            res = RewriteResult(removed=touched, added=spark_write.write_frame(self.sa, ctx, new),
                                rows=sum(hits.values()))
            hit = src.filter(match)  # the change rows: as they were, and as an update made them
            return spark_cdf.rewritten(self.sa, ctx, res, hit, None if sets is None
                                       else updated(ctx, hit, F.lit(True), sets))

    # -- MERGE -------------------------------------------------------------------------
    def merge_source(self, data: Any) -> SparkSource:
        """A DataFrame stays one; rows in this process (pyarrow, pandas, ...) become one."""
        if isinstance(data, DataFrame):
            return SparkSource(self.sa, data)
        table = source_table(data)
        return SparkSource(self.sa, self.spark.createDataFrame(table), schema=table.schema)

    def staged_merge_source(self, ctx: TableContext, keys: tuple[str, ...]) -> SparkSource:
        df = read_staged(self.sa, ctx, keys)
        return SparkSource(self.sa, df, tuple(keys), fixed=True)

    def merge(self, ctx: TableContext, files: list[AddFile], plan: MergePlan,
              source: Any) -> tuple[RewriteResult, MergeResult]:
        if not isinstance(source, SparkSource):
            raise InvalidArgumentError(f"the Spark engine merges from a DataFrame, not from a "
                                       f"{type(source).__name__}")
        return spark_merge.merge(self.sa, ctx, files, plan, source)
