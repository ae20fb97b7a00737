"""The rules a Delta table puts on its rows: CHECK constraints and column invariants.

Delta keeps a CHECK constraint as table property ``delta.constraints.<name>`` (a SQL boolean
expression) and a legacy invariant as field metadata ``delta.invariants`` (a JSON object whose
``expression.expression`` is one). A writer must refuse any row for which the expression is
false *or NULL* (Delta's rule, stricter than SQL's, where NULL passes a CHECK). NOT NULL is the
schema's ``nullable: false`` and is enforced where data is cast to the schema.

A generated column (field metadata ``delta.generationExpression``) is a rule too: Delta lets a
writer take the value from the data only when it equals the expression, NULL-safe
(``col <=> expr``), and makes it compute the value when the data does not give it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .actions import Metadata

CHECK = "check"
INVARIANT = "invariant"
GENERATED = "generated"
GENERATION_KEY = "delta.generationExpression"
_PREFIX = "delta.constraints."


@dataclass(frozen=True)
class Constraint:
    """One rule: a CHECK (``name`` as the table property names it, lower case as Delta stores
    it), a column invariant (``name`` is the column's path) or a generated column (``name``:
    the top-level column, ``expression``: its generation expression)."""

    name: str
    expression: str
    kind: str = CHECK

    @property
    def label(self) -> str:
        if self.kind == GENERATED:
            return f"generation expression of column {self.name!r}"
        return (f"CHECK constraint {self.name!r}" if self.kind == CHECK
                else f"invariant of column {self.name!r}")


def _invariants(fields: list[dict[str, Any]], prefix: str) -> list[Constraint]:
    out: list[Constraint] = []
    for f in fields:
        path = prefix + f["name"]
        raw = (f.get("metadata") or {}).get("delta.invariants")
        if raw is not None:
            try:
                expr = json.loads(raw)["expression"]["expression"]
            except (ValueError, KeyError, TypeError):
                expr = str(raw)  # unreadable: the engine refuses it by name, with its text
            out.append(Constraint(path, str(expr), INVARIANT))
        t = f.get("type")
        if isinstance(t, dict) and t.get("type") == "struct":
            out.extend(_invariants(t.get("fields") or [], path + "."))
    return out


def constraints_of(metadata: Metadata | None, properties: dict[str, str] | None = None
                   ) -> tuple[Constraint, ...]:
    """Every rule of a table with ``metadata`` (or of one about to be created with
    ``properties``), CHECKs first, in name order, then invariants, then generated columns."""
    config = dict(metadata.configuration) if metadata is not None else {}
    config.update(properties or {})
    checks = sorted((k[len(_PREFIX):], v) for k, v in config.items()
                    if k.lower().startswith(_PREFIX))
    out = [Constraint(name, expr) for name, expr in checks]
    if metadata is not None:
        try:
            fields = json.loads(metadata.schema_string).get("fields") or []
        except ValueError:
            fields = []
        out.extend(_invariants(fields, ""))
        out.extend(_generated(fields, ""))
    return tuple(out)


def _generated(fields: list[dict[str, Any]], prefix: str) -> list[Constraint]:
    """Generated columns, at any depth: Delta generates top-level columns only, so a nested one
    (named by its path) names no column and the engines refuse the table by it, never skip it."""
    out: list[Constraint] = []
    for f in fields:
        path = prefix + f["name"]
        expr = (f.get("metadata") or {}).get(GENERATION_KEY)
        if expr is not None:
            out.append(Constraint(path, str(expr), GENERATED))
        t = f.get("type")
        if isinstance(t, dict) and t.get("type") == "struct":
            out.extend(_generated(t.get("fields") or [], path + "."))
    return out


def generated_columns(rules: tuple[Constraint, ...]) -> frozenset[str]:
    """The generated columns among ``rules``: a writer computes them when the data lacks them."""
    return frozenset(r.name for r in rules if r.kind == GENERATED)
