"""RENAME COLUMN: a column-mapped table's column gets a new display name, metadata only.

As in Delta, only a table with column mapping can rename (its files name the column by its
physical name, which stays); elsewhere it is refused, naming the property to set. A column that a
CHECK constraint, an invariant or a generated column's expression reads is refused too: the
expression names it. The metaData action conflicts with every concurrent writer of the table,
as any metadata change (``set_properties``); a redo renames again on the newer base.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..delta import column_mapping, mapping_changes
from ..delta.constraints import CHECK, GENERATED, Constraint
from ..errors import InvalidArgumentError, InvalidExpressionError, SchemaEvolutionError
from ..scan import expressions as E
from ..scan.conflicts import Footprint
from .base import Statement

if TYPE_CHECKING:
    from ..engines.api import Engine
    from ..store import ObjectStore
    from .view import TableWork


def _reads(rule: Constraint, schema: Any) -> set[str]:
    """The columns (lower case) ``rule``'s expression reads; by the grammar, else (an expression
    it does not read) every word of the text that names a column, to be safe."""
    what = f"{rule.label}"
    try:
        if rule.kind == GENERATED:
            field = schema.field(rule.name) if rule.name in schema.names else None
            if field is None:
                raise InvalidExpressionError(what)
            cols = E.check_value(rule.expression, schema, field.type, what).columns()
        else:
            cols = E.check_where(rule.expression, schema, what).columns()
        return {c.lower() for c in cols}
    except InvalidExpressionError:
        words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", rule.expression)}
        return {n.lower() for n in schema.names} & words


def refuse_if_used(tw: TableWork, columns: list[str], what: str, own_rules_go: bool) -> None:
    """``SchemaEvolutionError`` when a rule of the table reads one of ``columns``. A column's own
    invariant or generation expression goes with it when ``own_rules_go`` (a drop)."""
    wanted = {c.lower() for c in columns}
    for rule in tw.ctx.constraints:
        own = rule.kind != CHECK and rule.name.lower() in wanted
        if own and own_rules_go:
            continue
        used = _reads(rule, tw.schema) & wanted
        if own:
            used.add(rule.name.lower())
        if used:
            raise SchemaEvolutionError(
                f"{what} on {tw.name!r}: column(s) {sorted(used)} are read by the "
                f"{rule.label} ({rule.expression!r}); drop or change that first")


def checked_name(table: str, name: Any, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"{what} on {table!r}: a column name must be a non-empty "
                                   f"string, not {name!r}")
    return name


@dataclass(eq=False, kw_only=True)
class RenameColumn(Statement):
    kind: ClassVar[str] = "rename_column"
    operation: ClassVar[str] = "RENAME COLUMN"
    append_only_ok: ClassVar[bool] = True

    old: str = ""
    new: str = ""

    def change_view(self, tw: TableWork) -> None:
        super().change_view(tw)
        current = tw.metadata or tw.base.metadata
        names = {f.name.lower() for f in tw.schema}
        if self.old.lower() not in names and self.new in tw.schema.names:
            return  # applied already (a run applies its change twice)
        tw.set_metadata(mapping_changes.renamed(tw.name, current, self.old, self.new))

    def check_input(self, tw: TableWork, engine: Engine, store: ObjectStore) -> None:
        checked_name(tw.name, self.old, "rename_column")
        checked_name(tw.name, self.new, "rename_column")
        mapping_changes.require_mapping(tw.name, column_mapping.mode_of(tw.schema),
                                        "renaming a column")
        if self.old.lower() not in {f.name.lower() for f in tw.schema}:
            raise SchemaEvolutionError(f"rename_column on {tw.name!r}: no column {self.old!r}")
        refuse_if_used(tw, [self.old], "rename_column", own_rules_go=False)

    def execute(self, tw: TableWork, engine: Engine, data: Any, redo: bool) -> Any:
        return None  # metadata only: the files keep the physical name

    def footprint(self) -> Footprint:
        return Footprint()

    def options(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new, **super().options()}

    @classmethod
    def decode_more(cls, statement: dict[str, Any], added: list[Any]) -> dict[str, Any]:
        opts = statement.get("options") or {}
        return {"old": str(opts.get("old") or ""), "new": str(opts.get("new") or "")}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "old": self.old, "new": self.new}

    def result(self, out: Any) -> Any:
        return None
