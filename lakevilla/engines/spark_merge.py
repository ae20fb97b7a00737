"""MERGE on the Spark engine: the embedded engine's merge as Spark jobs over a source that stays
a DataFrame.

Target rows are named by (file, row index in the file), so duplicate matches and the rows to
rewrite or mark are found without a row id that Spark could recompute differently; only files
where a clause applied are rewritten (or, on a table with deletion vectors, marked). What comes
back to the driver: whether some target row matched twice (one row at most), the rows each
clause changed per file (O(files)), the count of inserted rows, the per-partition counts that
number identity values, and the files written. Every join of rows is a shuffle join: a
broadcast would carry rows through the driver.
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..errors import DuplicateMatchError, InvalidExpressionError, SchemaMismatchError
from . import spark_cdf, spark_dv, spark_expr
from .api import RewriteResult, TableContext, data_file_key
from .merge_plan import MergePlan, MergeResult
from .spark_errors import spark_errors
from .spark_merge_clauses import MergeClauses
from .spark_read import SparkAccess, frame
from .spark_rows import merged, numbered
from .spark_source import SparkSource
from .spark_types import CLAUSE_COL, FILE_COL, ROW_COL, col, spark_schema
from .spark_write import delete_files, write_frame

ROWS = "shuffle_hash"  # the join hint for a side that holds rows: never broadcast


def merge(sa: SparkAccess, ctx: TableContext, files: list, plan: MergePlan,
          source: SparkSource) -> tuple[RewriteResult, MergeResult]:
    what = f"merge into {ctx.name!r}"
    tfields = spark_schema(ctx.schema).fields
    mc = MergeClauses(ctx, plan, source.schema, tfields, what)
    tcols = mc.tcols
    matched, inserts, dels = plan.ids(True), plan.ids(False), plan.deleting()
    with spark_errors(what, InvalidExpressionError):
        total = source.num_rows()
        if not total:
            return RewriteResult(), MergeResult()
        sdf = mc.source_frame(source.df)
        t2 = frame(sa, ctx, files, indexed=True).select(
            *[col(f.name).alias(tcols[k]) for k, f in enumerate(tfields)], FILE_COL, ROW_COL)
        on = spark_expr.condition(plan.on, mc.ref)
        res = RewriteResult()
        updated = deleted = inserted = 0
        parts: list[DataFrame] = []
        changed = ins = hits = None  # the rows a clause applied to, inserted, to mark
        touched: list = []
        if matched and files:
            m = t2.join(sdf.hint(ROWS), on, "inner").select(
                FILE_COL, ROW_COL, mc.clause_of(matched).alias(CLAUSE_COL),
                *mc.values(matched, lambda k, f: F.col(tcols[k])))
            if not plan.only_deletes:
                dup = (m.groupBy(FILE_COL, ROW_COL).count().filter(F.col("count") > 1)
                       .limit(1).collect())
                if dup:
                    raise DuplicateMatchError(
                        f"{what}: a target row is matched by {dup[0]['count']} source rows; a "
                        "merge that updates or deletes needs at most one source row per target "
                        "row: deduplicate the source")
            applied = m.filter(F.col(CLAUSE_COL) >= 0).dropDuplicates([FILE_COL, ROW_COL])
            counts = (applied.groupBy(F.col(CLAUSE_COL).isin(dels).alias("d"), FILE_COL)
                      .count().collect())
            touched_keys = {sa.paths.key_of(ctx, r[FILE_COL]) for r in counts}
            deleted = sum(int(r["count"]) for r in counts if r["d"])
            updated = sum(int(r["count"]) for r in counts if not r["d"])
            touched = [a for a in files
                       if data_file_key(ctx.name, a.path, ctx.lake_uri) in touched_keys]
            names = sorted({r[FILE_COL] for r in counts})
            a = applied.select(FILE_COL, ROW_COL, CLAUSE_COL,
                               *[F.col(c).alias(c + "n") for c in tcols])
            mine = t2.filter(F.col(FILE_COL).isin(names))
            if touched:  # each row a clause applied to, before and after (lazy: the feed's)
                changed = mine.join(a.hint(ROWS), [FILE_COL, ROW_COL])
            if touched and ctx.write_dvs:  # the applied rows are marked; updated ones written
                hits = applied.select(FILE_COL, ROW_COL)
                parts.append(applied.filter(~F.col(CLAUSE_COL).isin(dels)).select(
                    *[F.col(c).alias(f.name) for c, f in zip(tcols, tfields, strict=True)],
                    CLAUSE_COL))
            elif touched:
                kept = (mine.join(a.hint(ROWS), [FILE_COL, ROW_COL], "left")
                        .filter(F.col(CLAUSE_COL).isNull() | ~F.col(CLAUSE_COL).isin(dels)))
                parts.append(kept.select(*[F.when(F.col(CLAUSE_COL).isNull(), F.col(c))
                                           .otherwise(F.col(c + "n")).alias(f.name)
                                           for c, f in zip(tcols, tfields, strict=True)],
                                         CLAUSE_COL))
                res.removed = touched
        if inserts:
            nm = sdf.join(t2.hint(ROWS), on, "left_anti") if files else sdf
            ins = nm.select(mc.clause_of(inserts).alias(CLAUSE_COL),
                            *mc.values(inserts, lambda k, f: F.lit(None).cast(f.dataType)))
            ins = ins.filter(F.col(CLAUSE_COL) >= 0).select(
                *[F.col(c).alias(f.name) for c, f in zip(tcols, tfields, strict=True)],
                CLAUSE_COL)
            ins, inserted, res.marks = _numbered(ctx, ins, plan)
            if inserted:
                parts.append(ins)

        def write() -> list:
            if not parts:
                return []
            return write_frame(sa, ctx, merged(ctx, reduce(DataFrame.unionByName, parts),
                                               plan.values))
        if hits is not None:
            numbered_marks = res.marks  # the identity marks of the inserted rows stay
            res = spark_dv.mark(ctx, touched, hits, write)
            res.marks = numbered_marks
        else:
            res.added = write()
        try:
            res = spark_cdf.merged(sa, ctx, res, changed, dels, tcols,
                                   ins if inserted else None,
                                   lambda df: merged(ctx, df, plan.values))
        except BaseException:
            delete_files(ctx, [x for x in res.added if x.deletion_vector is None])
            raise
    res.rows = updated + deleted + inserted
    return res, MergeResult(total, updated, deleted, inserted, len(res.added), len(res.removed))


def _numbered(ctx: TableContext, ins: DataFrame, plan: MergePlan
              ) -> tuple[DataFrame, int, dict[str, int]]:
    """A merge's inserted rows with the identity columns their clause leaves out numbered on
    the executors (``spark_rows.numbered``); how many rows, and the marks they leave."""
    if not ctx.identity:
        return ins, ins.count(), {}
    columns = []
    for c in ctx.identity:
        giving = [i for i, v in enumerate(plan.values) if v and c.name in v]
        if giving and not c.allow_explicit_insert:
            raise SchemaMismatchError(
                f"merge into {ctx.name!r}: an insert clause gives identity column {c.name!r} "
                "(GENERATED ALWAYS): leave it out, its values are generated")
        columns.append((c, ~F.col(CLAUSE_COL).isin(giving) if giving else None))
    ins, n = numbered(ctx, ins, columns)
    marks = {c.name: m for c, _ in columns if n and (m := c.mark_after(n)) is not None}
    return ins, n, marks
