"""MERGE on the Spark engine: the embedded engine's merge as two Spark passes over a source that
stays a DataFrame.

Target rows are named by (file, row index in the file), so duplicate matches and the rows to
rewrite or mark are found without a row id that Spark could recompute differently.

1. **Which files.** The candidate files' join columns meet the source (an inner join); one
   aggregate gives, per file with a match, the rows each kind of clause changed and the most
   source rows any one of its rows matched (a duplicate match is an error where a clause
   updates or deletes). O(files) to the driver.
2. **The rows.** Only the files with a match meet the source again, whole, in one outer join
   (full when rows may be inserted): every row of a file a clause changed comes out as it stays
   (kept, updated, or gone), every unmatched source row as its insert clause makes it. On a
   table with deletion vectors only updated and inserted rows are written, and the changed
   rows are marked. Where several things read the joined rows (marking, the change feed,
   identity numbering), they are persisted on the executors for the statement.

Every join of rows is a shuffle join: a broadcast would carry rows through the driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..delta.actions import AddFile
from ..errors import DuplicateMatchError, InvalidExpressionError, SchemaMismatchError
from . import spark_cdf, spark_dv, spark_expr
from .api import RewriteResult, TableContext
from .merge_plan import MergePlan, MergeResult
from .spark_errors import spark_errors
from .spark_merge_clauses import MergeClauses
from .spark_names import CLAUSE_COL, RID_COL, ROW_BITS
from .spark_read import SparkAccess, frame
from .spark_rows import merged, numbered
from .spark_source import SparkSource
from .spark_types import col, spark_schema
from .spark_write import delete_files, write_frame

ROWS = "shuffle_hash"  # the join hint for a side that holds rows: never broadcast
SRC = "__lv_src"  # set on every source row, so an outer join tells which side a row came from
KIND = "__lv_kind"  # what became of a joined row (the constants below)
KEPT, UPDATED, DELETED, INSERTED = 0, 1, 2, 3


def _place() -> Column:
    """A row's file, as its place in the statement's files (from its row id)."""
    return F.shiftright(F.col(RID_COL), ROW_BITS)


@dataclass(frozen=True)
class Found:
    """Phase 1, per file with a match (by its place in the statement's files)."""

    updated: int
    deleted: int
    most: int  # the most source rows one of its rows matched


def merge(sa: SparkAccess, ctx: TableContext, files: list[AddFile], plan: MergePlan,
          source: SparkSource) -> tuple[RewriteResult, MergeResult]:
    what = f"merge into {ctx.name!r}"
    tfields = spark_schema(ctx.schema).fields
    mc = MergeClauses(ctx, plan, source.schema, tfields, what)
    with spark_errors(what, InvalidExpressionError):
        total = source.num_rows()
        if not total:
            return RewriteResult(), MergeResult()
        sdf = mc.source_frame(source.df).withColumn(SRC, F.lit(True))
        t2 = frame(sa, ctx, files, indexed=True).select(
            *[col(f.name).alias(mc.tcols[k]) for k, f in enumerate(tfields)], RID_COL)
        on = spark_expr.condition(plan.on, mc.ref)
        found = _found(t2, sdf, on, mc, plan) if files and plan.ids(True) else {}
        worst = max((f.most for f in found.values()), default=0)
        if worst > 1 and not plan.only_deletes:
            raise DuplicateMatchError(
                f"{what}: a target row is matched by {worst} source rows; a merge that updates "
                "or deletes needs at most one source row per target row: deduplicate the source")
        changed = sorted(p for p, f in found.items() if f.updated or f.deleted)
        touched = [files[p] for p in changed]
        updated = sum(f.updated for f in found.values())
        deleted = sum(f.deleted for f in found.values())
        if not touched and not plan.ids(False):
            return RewriteResult(), MergeResult(total)
        rows = _joined(t2, sdf, on, mc, plan,
                       sorted(found) if plan.ids(True) or not files else None, changed,
                       keep=not ctx.write_dvs)
        res, inserted = _apply(sa, ctx, plan, mc, rows, files, touched, updated, deleted)
    res.rows = updated + deleted + inserted
    return res, MergeResult(total, updated, deleted, inserted, len(res.added), len(res.removed))


def _found(t2: DataFrame, sdf: DataFrame, on: Column, mc: MergeClauses,
           plan: MergePlan) -> dict[int, Found]:
    """Phase 1: one job over the join columns (Spark prunes the rest)."""
    clause = F.col(CLAUSE_COL)
    dels = plan.deleting()
    pairs = t2.join(sdf.hint(ROWS), on, "inner").select(
        RID_COL, mc.clause_of(plan.ids(True)).alias(CLAUSE_COL))
    per_row = pairs.groupBy(RID_COL).agg(F.count(F.lit(1)).alias("n"),
                                         F.max(clause).alias(CLAUSE_COL))
    applied = clause >= 0
    per_file = per_row.groupBy(_place().alias("place")).agg(
        F.sum((applied & ~clause.isin(dels)).cast("long")).alias("updated"),
        F.sum((applied & clause.isin(dels)).cast("long")).alias("deleted"),
        F.max("n").alias("most"))
    return {int(r["place"]): Found(int(r["updated"]), int(r["deleted"]), int(r["most"]))
            for r in per_file.collect()}


def _joined(t2: DataFrame, sdf: DataFrame, on: Column, mc: MergeClauses, plan: MergePlan,
            matched_files: list[int] | None, changed_files: list[int], keep: bool) -> DataFrame:
    """Phase 2's rows: each row of a file a clause changed and each source row a clause
    inserts, with what became of it (``KIND``), its values before (``__lv_t<k>``) and after
    (``__lv_t<k>n``), its clause, file and row index. ``matched_files``: the files holding a
    match (phase 1); None when the merge has no clause for matches (no phase 1: the source
    meets every candidate file in an anti join). ``keep``: the rows a changed file keeps come
    out too (its files are rewritten; with deletion vectors they stay where they are)."""
    matched, inserts, dels = plan.ids(True), plan.ids(False), plan.deleting()
    if matched_files:
        mine = t2.filter(_place().isin(matched_files))
        j = mine.join(sdf.hint(ROWS), on, "full_outer" if inserts else "left_outer")
    else:  # no clause for matches: the source rows that match nothing, in one anti join
        unmatched = sdf.join(t2.hint(ROWS), on, "left_anti") if matched_files is None else sdf
        j = unmatched.select("*", *[F.lit(None).cast(f.dataType).alias(mc.tcols[k])
                                    for k, f in enumerate(mc.tfields)],
                             F.lit(None).cast("long").alias(RID_COL))
    is_t, is_s = F.col(RID_COL).isNotNull(), F.col(SRC).isNotNull()
    mclause = F.when(is_t & is_s, mc.clause_of(matched)) if matched else F.lit(None)
    iclause = F.when(~is_t & is_s, mc.clause_of(inserts)) if inserts else F.lit(None)
    upd = mc.values(matched, lambda k, f: F.col(mc.tcols[k]), named=False) if matched else []
    ins = (mc.values(inserts, lambda k, f: F.lit(None).cast(f.dataType), named=False)
           if inserts else [])
    j = j.select("*", mclause.cast("int").alias("__lv_m"), iclause.cast("int").alias("__lv_i"))
    m, i = F.col("__lv_m"), F.col("__lv_i")
    kind = (F.when(i >= 0, F.lit(INSERTED))
            .when((m >= 0) & m.isin(dels), F.lit(DELETED))
            .when(m >= 0, F.lit(UPDATED))
            .when(is_t & _place().isin(changed_files if keep else []), F.lit(KEPT)))
    new = []
    for k in range(len(mc.tfields)):
        v = F.col(mc.tcols[k])
        if ins:
            v = F.when(i >= 0, ins[k]).otherwise(v)
        if upd:
            v = F.when(m >= 0, upd[k]).otherwise(v)
        new.append(v.alias(mc.tcols[k] + "n"))
    return (j.select(*mc.tcols, *new, RID_COL, kind.alias(KIND),
                     F.coalesce(F.when(m >= 0, m), F.when(i >= 0, i)).alias(CLAUSE_COL))
            .filter(F.col(KIND).isNotNull()))


def _apply(sa: SparkAccess, ctx: TableContext, plan: MergePlan, mc: MergeClauses,
           rows: DataFrame, files: list[AddFile], touched: list[AddFile], updated: int,
           deleted: int) -> tuple[RewriteResult, int]:
    """Write the new rows (and mark the changed ones, on a table with deletion vectors) and the
    change feed; the result and how many rows were inserted."""
    kind = F.col(KIND)
    names = [f.name for f in mc.tfields]
    after = [F.col(c + "n").alias(n) for c, n in zip(mc.tcols, names, strict=True)]
    extra = ctx.write_dvs or ctx.write_cdf or bool(ctx.identity)
    held = rows.persist() if extra else rows  # read by several jobs: joined once
    try:
        stay = held.filter(kind.isin([UPDATED] if ctx.write_dvs else [KEPT, UPDATED])).select(
            *after, F.when(kind == UPDATED, F.col(CLAUSE_COL)).alias(CLAUSE_COL))
        ins, marks = _numbered(ctx, held.filter(kind == INSERTED).select(*after, CLAUSE_COL),
                               plan)

        def write() -> list[AddFile]:
            return write_frame(sa, ctx, merged(ctx, stay.unionByName(ins), plan.values))

        if ctx.write_dvs and touched:
            res = spark_dv.mark(ctx, touched, held.filter(kind.isin([UPDATED, DELETED])), write,
                                places=files)
        else:
            res = RewriteResult(removed=[] if ctx.write_dvs else touched, added=write())
        res.marks = marks
        written = sum(a.num_records or 0 for a in res.added if a.deletion_vector is None)
        inserted = _inserted(ctx, held, touched, written, updated, deleted)
        try:
            res = spark_cdf.merged(sa, ctx, res, held.filter(kind.isin([UPDATED, DELETED])),
                                   plan.deleting(), mc.tcols, ins if inserted else None,
                                   lambda df: merged(ctx, df, plan.values))
        except BaseException:
            delete_files(ctx, [a for a in res.added if a.deletion_vector is None])
            raise
        return res, inserted
    finally:
        if held is not rows:
            held.unpersist()


def _inserted(ctx: TableContext, rows: DataFrame, touched: list[AddFile], written: int,
              updated: int, deleted: int) -> int:
    """The rows inserted: the rows written less those carried over (updated; and, rewriting,
    the rest of the changed files' rows), when the statistics of those files say how many they
    held; else counted by a job."""
    if ctx.write_dvs:
        return written - updated
    if all(a.num_records is not None for a in touched):
        held = sum(int(a.num_records or 0) - (a.deletion_vector.cardinality
                                              if a.deletion_vector is not None else 0)
                   for a in touched)
        return written - (held - deleted)
    return int(rows.filter(F.col(KIND) == INSERTED).count())


def _numbered(ctx: TableContext, new: DataFrame, plan: MergePlan
              ) -> tuple[DataFrame, dict[str, int]]:
    """The inserted rows with the identity columns their clause leaves out numbered on the
    executors (``spark_rows.numbered``), and the marks they leave."""
    if not ctx.identity:
        return new, {}
    inserts = plan.ids(False)
    columns: list[tuple[Any, Column | None]] = []
    for c in ctx.identity:
        giving = [i for i, v in enumerate(plan.values) if v and c.name in v]
        if giving and not c.allow_explicit_insert:
            raise SchemaMismatchError(
                f"merge into {ctx.name!r}: an insert clause gives identity column {c.name!r} "
                "(GENERATED ALWAYS): leave it out, its values are generated")
        columns.append((c, F.coalesce(F.col(CLAUSE_COL).isin(
            [i for i in inserts if i not in giving]), F.lit(False))))
    new, n = numbered(ctx, new, columns)
    return new, {c.name: m for c, _ in columns if n and (m := c.mark_after(n)) is not None}
