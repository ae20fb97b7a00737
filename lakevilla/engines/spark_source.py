"""A MERGE source on the Spark engine: a DataFrame, never collected.

A DataFrame is a recipe, not rows: computed twice it may give other rows (a source read while
it changes, ``rand()``, an unordered ``limit``). So before the merge runs it is fixed once:
staged as Parquet by the executors under the transaction's folder when the transaction keeps
sublogs (a redo, or a client resuming it elsewhere, joins from those files, which the sublog
entry names), else checkpointed on the executors for the statement. Its key bounds are one
aggregate job whose answer is a few values per key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..data.schemas import given_schema
from ..errors import InvalidArgumentError
from .api import TableContext
from .merge_plan import IN_LIST_LIMIT, BoundedKey, KeyBound, check_source_schema
from .spark_errors import spark_errors
from .spark_read import SparkAccess
from .spark_types import col
from .spark_write import write_folder


@dataclass(frozen=True, eq=False)
class SparkSource:
    sa: SparkAccess
    df: DataFrame
    staged: tuple[str, ...] = ()
    fixed: bool = False  # staged or checkpointed: every use sees the same rows
    schema: pa.Schema = field(default=None)
    _rows: list[int] = field(default_factory=list, repr=False)  # its row count, once known

    def __post_init__(self) -> None:
        if self.schema is None:
            object.__setattr__(self, "schema", given_schema(self.df))
            check_source_schema(self.schema)

    def num_rows(self) -> int:
        """Counted by a job, unless the key bounds' job counted them already."""
        if not self._rows:
            with spark_errors("merge source", None):
                self._rows.append(int(self.df.count()))
        return self._rows[0]

    def key_bounds(self, keys: list[BoundedKey]) -> dict[str, KeyBound]:
        """One aggregate job, which counts the rows too (``num_rows``)."""
        aggs = [F.count(F.lit(1)).alias("rows")]
        for i, k in enumerate(keys):
            c = col(k.source)
            aggs += [F.min(c).alias(f"lo{i}"), F.max(c).alias(f"hi{i}"),
                     F.count(c).alias(f"n{i}")]
            if k.listed:  # a few more than the limit tell that there are too many
                aggs.append(F.slice(F.collect_set(c), 1, IN_LIST_LIMIT + 1).alias(f"v{i}"))
        with spark_errors("merge source", None):
            row = self.df.agg(*aggs).collect()[0]
        self._rows[:] = [int(row["rows"])]
        out = {}
        for i, k in enumerate(keys):
            if not row[f"n{i}"]:
                out[k.source] = KeyBound(all_null=True)
                continue
            values = row[f"v{i}"] if k.listed else None
            out[k.source] = KeyBound(False, row[f"lo{i}"], row[f"hi{i}"],
                                     tuple(values) if values is not None
                                     and len(values) <= IN_LIST_LIMIT else None)
        return out

    def materialized(self, ctx: TableContext, stage_at: str | None) -> SparkSource:
        if self.fixed:
            return self
        if stage_at is not None:
            return self.stage(ctx, stage_at)
        with spark_errors("merge source", None):  # held by the executors, for this statement
            return SparkSource(self.sa, self.df.localCheckpoint(eager=True), fixed=True,
                               schema=self.schema)

    def stage(self, ctx: TableContext, at: str) -> SparkSource:
        if self.staged:
            return self
        prefix = at.rstrip("/") + "/"
        with spark_errors("merge source", None):
            written = write_folder(self.sa, ctx, self.df, prefix)
        keys = tuple(prefix + w.rel for w in written)
        return SparkSource(self.sa, read_staged(self.sa, ctx, keys, self.df.schema), keys, True,
                           self.schema)


def read_staged(sa: SparkAccess, ctx: TableContext, keys: tuple[str, ...],
                schema: Any = None) -> DataFrame:
    """The staged source's files as one DataFrame (``schema``: as it was staged, when known)."""
    if not keys:
        raise InvalidArgumentError("this merge's source was not staged: it cannot be re-executed")
    reader = sa.spark.read if schema is None else sa.spark.read.schema(schema)
    return reader.parquet(*[sa.paths.glob_escaped(sa.paths.key_uri(ctx, k)) for k in keys])
