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


def generation(ctx: TableContext) -> dict[str, E.Checked]:
    """Each generated column's expression, checked as a value of its column: what a writer
    computes when the data does not give the column. Refused (the table is then unwritable)
    when outside the grammar, reading a generated column or the clock (Delta allows neither)."""
    rules = [r for r in ctx.constraints if r.kind == GENERATED]
    names = {r.name for r in rules}
    out: dict[str, E.Checked] = {}
    for rule in rules:
        field = E._field(ctx.schema, rule.name)
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
        out[field.name] = chk
    return out


def _check_text(ctx: TableContext, rule: Constraint) -> str:
    if rule.kind != GENERATED:
        return rule.expression
    field = E._field(ctx.schema, rule.name)
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
