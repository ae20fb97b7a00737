"""New rows as Spark columns: what a SET makes of a row, the generated columns Delta recomputes,
identity values numbered on the executors, and the table's rules checked before a write.

All of it runs in Spark jobs; the driver sees a count per partition (numbering) and at most one
row (the first that breaks a rule, for the error message).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..delta.constraints import generated_columns
from ..delta.identity import IdentityColumn
from ..scan import expressions as E
from . import spark_expr
from .api import TableContext
from .rules import checked_rules, generation, violation
from .spark_errors import fail, spark_errors
from .spark_names import CLAUSE_COL
from .spark_types import col, not_null, ref, spark_schema

HIT = "__lv_hit"
_POS_BITS = 33  # monotonically_increasing_id(): partition index << 33 | row number in it


def check_rules(ctx: TableContext, df: DataFrame) -> None:
    """``ConstraintViolationError`` for the first row of ``df`` that breaks a rule of the table."""
    rules = checked_rules(ctx) if ctx.constraints else []
    with spark_errors(f"the rules of {ctx.name!r}", None):
        broken = spark_expr.first_broken(df, [c for _, c in rules], ref) if rules else None
    if broken is not None:
        raise violation(ctx, *rules[broken[0]], broken[1])


def generated(ctx: TableContext, df: DataFrame, columns: list[str],
              rows: Column | None = None) -> DataFrame:
    """``df`` (table columns first) with ``columns`` computed from each row by their generation
    expression (only where ``rows`` holds, when given), converted as a ``set`` is."""
    if not columns:
        return df
    gen = generation(ctx)  # refuses an expression outside the grammar, by name
    fields = {f.name: f for f in spark_schema(ctx.schema).fields}
    new: dict[str, Column] = {}
    for c in columns:
        v = spark_expr.assigned(gen[c], ctx.schema.field(c).type, ref)
        v = v if rows is None else F.when(rows, v).otherwise(col(c))
        new[c] = not_null(v, fields[c], "schema",
                          f"generated column {c!r} of {ctx.name!r} ({gen[c].text})")
    return df.select(*[new[n].alias(n) if n in new else col(n) for n in df.columns])


def updated(ctx: TableContext, df: DataFrame, match: Column,
            assignments: Mapping[str, E.Checked]) -> DataFrame:
    """SET on the matching rows only (CASE WHEN evaluates its branch for those rows alone),
    each value converted to its column's type by the assignment cast, as in the embedded
    engine; then the generated columns it does not set, recomputed from the new row (Delta)."""
    fields = {f.name: f for f in spark_schema(ctx.schema).fields}
    hit = F.col(HIT)
    df = df.select("*", match.alias(HIT))  # the match of the row before the update
    new: dict[str, Column] = {}
    for name, value in assignments.items():
        what = f"set {name}={value.text!r}"
        v = spark_expr.assigned(value, ctx.schema.field(name).type, ref)
        new[name] = F.when(hit, not_null(v, fields[name], "schema", what)).otherwise(col(name))
    df = df.select(*[new.get(f, col(f)).alias(f) for f in fields], hit)
    regen = [c for c in sorted(generated_columns(ctx.constraints)) if c not in assignments]
    return generated(ctx, df, regen, hit).drop(HIT)


def merged(ctx: TableContext, df: DataFrame, values: tuple[dict[str, E.Checked] | None, ...]
           ) -> DataFrame:
    """A merge's new rows (``CLAUSE_COL``: the clause that made each, NULL for a row it keeps)
    with each generated column its clause does not assign computed from the new row."""
    clause = F.col(CLAUSE_COL)
    for c in sorted(generated_columns(ctx.constraints)):
        giving = [i for i, v in enumerate(values) if v and c in v]
        rows = clause.isNotNull() & (~clause.isin(giving) if giving else F.lit(True))
        df = generated(ctx, df, [c], rows)
    return df.drop(CLAUSE_COL)


# -- identity columns ----------------------------------------------------------------------

def numbered(ctx: TableContext, df: DataFrame,
             columns: list[tuple[IdentityColumn, Column | None]]) -> tuple[DataFrame, int]:
    """``df`` with each identity column of ``columns`` numbered where its condition holds
    (every row without one), and how many rows ``df`` has (the marks follow from it).

    The rows are first fixed on the executors (``localCheckpoint``): a DataFrame computed twice
    may be partitioned differently (adaptive execution sizes partitions by the bytes a plan
    shuffles), and numbering needs the partitions it counted. One job counts each partition's
    rows (O(partitions) to the driver); each row then takes its partition's offset plus its
    place in the partition (``monotonically_increasing_id``'s low bits): ``first``, then one
    ``step`` per row, with no gap where every row is numbered; the numbered rows are fixed
    too, since under a union the partitions are numbered anew. A partition found holding more
    rows than were counted fails the job rather than give two rows one value."""
    pid = F.spark_partition_id()
    with spark_errors(f"insert into {ctx.name!r}", None):
        fixed = df.localCheckpoint(eager=True)
        counts = {int(r["p"]): int(r["n"]) for r in
                  fixed.groupBy(pid.alias("p")).agg(F.count(F.lit(1)).alias("n")).collect()}
    total = sum(counts.values())
    if not total:
        return fixed, 0
    top = max(counts) + 1
    offsets, at = [], 0
    for p in range(top):
        offsets.append(at)
        at += counts.get(p, 0)
    pos = F.monotonically_increasing_id().bitwiseAND(F.lit((1 << _POS_BITS) - 1))
    index = pid + F.lit(1)
    offset = F.try_element_at(F.array(*[F.lit(o) for o in offsets]), index)
    allowed = F.try_element_at(F.array(*[F.lit(counts.get(p, 0)) for p in range(top)]), index)
    out = fixed
    for column, needs in columns:
        dtype = spark_schema(ctx.schema)[column.name].dataType
        value = F.lit(column.first()) + F.lit(column.step) * (offset.cast("long") + pos)
        msg = (f"insert into {ctx.name!r}: the rows to number in identity column "
               f"{column.name!r} are not the rows that were counted")
        value = F.when(pos < allowed, value.cast(dtype)).otherwise(fail("input", msg, dtype))
        out = out.withColumn(column.name, value if needs is None
                             else F.when(needs, value).otherwise(col(column.name)))
    with spark_errors(f"insert into {ctx.name!r}", None):  # numbers fixed: a union renumbers
        return out.localCheckpoint(eager=True), total
