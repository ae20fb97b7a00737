"""A table's row rules (CHECK constraints, invariants) as expressions of the shared grammar.

Both engines evaluate them with the grammar they use for ``where``, so a rule means the same on
either; a rule outside the grammar makes the table unwritable (refused by name), never
unchecked.
"""

from __future__ import annotations

from typing import Any

from ..delta.constraints import CHECK, Constraint
from ..errors import ConstraintViolationError, InvalidExpressionError, UnsupportedTableFeatureError
from ..scan import expressions as E
from .api import TableContext


def checked_rules(ctx: TableContext) -> list[tuple[Constraint, E.Checked]]:
    out = []
    for rule in ctx.constraints:
        try:
            out.append((rule, E.check_where(rule.expression, ctx.schema,
                                            f"{rule.label} of {ctx.name!r}")))
        except InvalidExpressionError as e:
            feature = "checkConstraints" if rule.kind == CHECK else "invariants"
            raise UnsupportedTableFeatureError(
                ctx.name, feature, f"{rule.label} = {rule.expression!r} is outside the "
                f"expressions lakevilla evaluates: {e}") from e
    return out


def violation(ctx: TableContext, rule: Constraint, checked: E.Checked,
              row: dict[str, Any]) -> ConstraintViolationError:
    """The error for ``row`` (its values of the columns the rule reads)."""
    cols = checked.columns()
    shown = {k: v for k, v in row.items() if k in cols} or row
    return ConstraintViolationError(ctx.name, rule.label, rule.expression, shown)
