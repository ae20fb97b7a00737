"""The rules a Delta table puts on its rows: CHECK constraints and column invariants.

Delta keeps a CHECK constraint as table property ``delta.constraints.<name>`` (a SQL boolean
expression) and a legacy invariant as field metadata ``delta.invariants`` (a JSON object whose
``expression.expression`` is one). A writer must refuse any row for which the expression is
false *or NULL* (Delta's rule, stricter than SQL's, where NULL passes a CHECK). NOT NULL is the
schema's ``nullable: false`` and is enforced where data is cast to the schema.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .actions import Metadata

CHECK = "check"
INVARIANT = "invariant"
_PREFIX = "delta.constraints."


@dataclass(frozen=True)
class Constraint:
    """One rule: a CHECK (``name`` as the table property names it, lower case as Delta stores
    it) or a column invariant (``name`` is the column's path)."""

    name: str
    expression: str
    kind: str = CHECK

    @property
    def label(self) -> str:
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
    ``properties``), CHECKs first, in name order."""
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
    return tuple(out)
