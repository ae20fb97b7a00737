"""DROP COLUMNS: columns leave a column-mapped table's schema, metadata only.

As in Delta, only a table with column mapping can drop a column (its files keep the data, which
no reader resolves any more, and a later column never reuses the physical name or id); elsewhere
it is refused, naming the property to set. A partition column is refused (Delta does not drop
one), so is the last column and a column another rule's expression reads (a CHECK constraint, a
generated column); a column's own invariant or generation expression goes with it. Its metaData
action conflicts with every concurrent writer of the table, as any metadata change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..delta import column_mapping, mapping_changes
from ..errors import InvalidArgumentError, SchemaEvolutionError
from ..scan.conflicts import Footprint
from .base import Statement
from .rename_column import checked_name, refuse_if_used

if TYPE_CHECKING:
    from ..engines.api import Engine
    from ..store import ObjectStore
    from .view import TableWork


def checked_names(table: str, names: Any) -> list[str]:
    """``names`` (one name or a list of them) as a non-empty list without repeats."""
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list | tuple) or not names:
        raise InvalidArgumentError(f"drop_columns on {table!r}: give a column name or a "
                                   "non-empty list of them")
    out = [checked_name(table, n, "drop_columns") for n in names]
    if len({n.lower() for n in out}) != len(out):
        raise InvalidArgumentError(f"drop_columns on {table!r}: a column is named twice {out}")
    return out


@dataclass(eq=False, kw_only=True)
class DropColumns(Statement):
    kind: ClassVar[str] = "drop_columns"
    operation: ClassVar[str] = "DROP COLUMNS"
    append_only_ok: ClassVar[bool] = True

    names: list[str] = field(default_factory=list)

    def change_view(self, tw: TableWork) -> None:
        super().change_view(tw)
        have = {f.name.lower() for f in tw.schema}
        left = [n for n in self.names if n.lower() in have]  # a run applies it twice
        if left:
            current = tw.metadata or tw.base.metadata
            tw.set_metadata(mapping_changes.dropped(tw.name, current, left))

    def check_input(self, tw: TableWork, engine: Engine, store: ObjectStore) -> None:
        checked_names(tw.name, self.names)
        mapping_changes.require_mapping(tw.name, column_mapping.mode_of(tw.schema),
                                        "dropping a column")
        have = {f.name.lower() for f in tw.schema}
        missing = [n for n in self.names if n.lower() not in have]
        if missing:
            raise SchemaEvolutionError(f"drop_columns on {tw.name!r}: no column(s) {missing}")
        mapping_changes.dropped(tw.name, tw.metadata or tw.base.metadata, self.names)
        refuse_if_used(tw, self.names, "drop_columns", own_rules_go=True)

    def execute(self, tw: TableWork, engine: Engine, data: Any, redo: bool) -> Any:
        return None  # metadata only: the files keep the column, unread

    def footprint(self) -> Footprint:
        return Footprint()

    def options(self) -> dict[str, Any]:
        return {"names": list(self.names), **super().options()}

    @classmethod
    def decode_more(cls, statement: dict[str, Any], added: list[Any]) -> dict[str, Any]:
        return {"names": [str(n) for n in (statement.get("options") or {}).get("names") or []]}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "names": list(self.names)}

    def result(self, out: Any) -> Any:
        return None
