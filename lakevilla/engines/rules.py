"""A table's row rules (CHECK constraints, invariants, generated columns) as expressions of the
shared grammar.

Both engines evaluate them with the grammar they use for ``where``, so a rule means the same on
either; a rule outside the grammar makes the table unwritable (refused by name), never
unchecked. A generated column is checked as ``col IS NOT DISTINCT FROM CAST((expr) AS type)``
(Delta's ``col <=> expr``, with the cast a writer computes the value with).
"""

from __future__ import annotations

from typing import Any

from ..delta.constraints import CHECK, GENERATED, INVARIANT, Constraint
from ..errors import ConstraintViolationError, InvalidExpressionError, UnsupportedTableFeatureError
from ..scan import expressions as E
from .api import TableContext

_FEATURE = {CHECK: "checkConstraints", INVARIANT: "invariants", GENERATED: "generatedColumns"}


def _refused(ctx: TableContext, rule: Constraint, why: str) -> UnsupportedTableFeatureError:
    return UnsupportedTableFeatureError(
        ctx.name, _FEATURE[rule.kind], f"{rule.label} = {rule.expression!r} {why}")


# Functions of the grammar whose meaning in Spark SQL (the dialect Delta keeps generation
# expressions in) is not DuckDB's, which both engines compute: a value computed by one would
# differ from the one Delta computes, so such an expression refuses the table.
_SPARK_MEANS_OTHERWISE = {
    "concat": "Spark's concat is NULL when an argument is NULL, the grammar's skips NULLs",
    "dayofweek": "Spark counts the days of the week from 1 (Sunday), the grammar from 0",
}
_TRUNCATES = "Spark truncates a fraction cast to an integer, the grammar rounds it"


def _rounds(src: str, dst: str) -> bool:
    return E.family(src) in ("float", "decimal") and E.family(dst) == "int"


def _dialect_gap(chk: E.Checked) -> str | None:
    """Why ``chk`` would compute another value than Spark SQL does, if it would."""
    for n in E.walk(chk.node):
        if n.get("class") == "CAST" and _rounds(chk.types.get(id(n["child"]), ""),
                                                chk.types.get(id(n), "")):
            return _TRUNCATES
        if n.get("class") != "FUNCTION":
            continue
        name = E.FUNCTIONS.get(n["function_name"].lower(), ("",))[0]
        args = E.children(n)
        if name in _SPARK_MEANS_OTHERWISE:
            return _SPARK_MEANS_OTHERWISE[name]
        if (name == "date_part" and E.is_string_literal(args[0])
                and args[0]["literal"]["text"].lower() in ("dow", "dayofweek")):
            return _SPARK_MEANS_OTHERWISE["dayofweek"]
        start = args[1] if name == "substring" else None
        if start is not None and not (start.get("class") == "CONSTANT"
                                      and start["literal"]["kind"] == "INTEGER"
                                      and int(start["literal"]["text"]) >= 1):
            return "a substring starting below 1 (or at a computed position) differs in Spark"
    return None


def generation(ctx: TableContext) -> dict[str, E.Checked]:
    """Each generated column's expression, checked as a value of its column: what a writer
    computes when the data does not give the column. Refused (the table is then unwritable)
    when outside the grammar, reading a generated column or the clock (Delta allows neither), or
    meaning something else in Spark SQL (``_SPARK_MEANS_OTHERWISE``)."""
    rules = [r for r in ctx.constraints if r.kind == GENERATED]
    names = {r.name for r in rules}
    out: dict[str, E.Checked] = {}
    for rule in rules:
        field = E.find_field(ctx.schema, rule.name)
        if field is None:
            raise _refused(ctx, rule, "names no top-level column of the table (Delta "
                           "generates top-level columns only)")
        try:
            chk = E.check_value(rule.expression, ctx.schema, field.type,
                                f"{rule.label} of {ctx.name!r}")
        except InvalidExpressionError as e:
            raise _refused(ctx, rule, f"is outside the expressions lakevilla evaluates: {e}"
                           ) from e
        if chk.volatile or chk.columns() & names:
            raise _refused(ctx, rule, "reads the clock or a generated column")
        gap = (_TRUNCATES if _rounds(chk.type, E.duckdb_type(field.type))
               else _dialect_gap(chk))
        if gap is not None:
            raise _refused(ctx, rule, f"is Spark SQL that lakevilla would compute otherwise: {gap}")
        out[field.name] = chk
    return out


def _check_text(ctx: TableContext, rule: Constraint) -> str:
    if rule.kind != GENERATED:
        return rule.expression
    field = E.find_field(ctx.schema, rule.name)
    assert field is not None  # ``generation`` refused a column the table does not have
    return (f"{E.quote_ident(field.name)} IS NOT DISTINCT FROM "
            f"CAST(({rule.expression}) AS {E.duckdb_type(field.type)})")


def checked_rules(ctx: TableContext) -> list[tuple[Constraint, E.Checked]]:
    if any(r.kind == GENERATED for r in ctx.constraints):
        generation(ctx)  # refuses an expression outside the grammar by its own text
    out = []
    for rule in ctx.constraints:
        try:
            out.append((rule, E.check_where(_check_text(ctx, rule), ctx.schema,
                                            f"{rule.label} of {ctx.name!r}")))
        except InvalidExpressionError as e:
            raise _refused(ctx, rule, f"is outside the expressions lakevilla evaluates: {e}"
                           ) from e
    return out


def violation(ctx: TableContext, rule: Constraint, checked: E.Checked,
              row: dict[str, Any]) -> ConstraintViolationError:
    """The error for ``row`` (its values of the columns the rule reads)."""
    cols = checked.columns()
    shown = {k: v for k, v in row.items() if k in cols} or row
    return ConstraintViolationError(ctx.name, rule.label, rule.expression, shown)
