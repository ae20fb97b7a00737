"""UPDATE and DELETE: rewrite the files that hold matching rows.

Both are declarative: under R a conflicting one is redone on the newer snapshot. Their
footprint is the files they read and their predicate; a file without a matching row is left
alone (the engine's ``rewrite``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..delta.actions import AddFile
from ..engines.identity import refuse_updates
from ..scan.conflicts import Change
from .base import Statement

if TYPE_CHECKING:
    from ..engines.api import Engine
    from ..store import ObjectStore
    from .view import TableWork


@dataclass(eq=False, kw_only=True)
class _Rewrite(Statement):
    claims_with_entry: ClassVar[bool] = True
    logs_changes: ClassVar[bool] = True

    def execute(self, tw: TableWork, engine: Engine, data: Any, redo: bool) -> Any:
        cands = tw.candidates(self.where)
        self.read_files = {a.path for a in cands}
        rr = engine.rewrite(tw.ctx, cands, self.where, self.assignments_to_check())
        self.removed, self.added, self.rows = rr.removed, rr.added, rr.rows
        self.cdc = rr.cdc
        return None


@dataclass(eq=False, kw_only=True)
class Update(_Rewrite):
    kind: ClassVar[str] = "update"
    operation: ClassVar[str] = "UPDATE"
    keeps_rows: ClassVar[bool] = True

    # column -> SQL expression over the row
    assignments: dict[str, str] = field(default_factory=dict)

    def check_input(self, tw: TableWork, engine: Engine, store: ObjectStore) -> None:
        engine.validate_set(tw.ctx, self.assignments, self.where)
        refuse_updates(tw.ctx, list(self.assignments), "update")

    def assignments_to_check(self) -> dict[str, str] | None:
        return self.assignments

    def change(self) -> Change | None:
        return Change(self.where, tuple(sorted({c.lower() for c in self.assignments}))
                      if self.assignments else None)  # resumed without its SET: any column

    def encode_more(self) -> dict[str, Any]:
        return {"set": self.assignments}

    @classmethod
    def decode_more(cls, statement: dict[str, Any], added: list[AddFile]) -> dict[str, Any]:
        return {"assignments": statement.get("set") or {}}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "set": self.assignments}


@dataclass(eq=False, kw_only=True)
class Delete(_Rewrite):
    kind: ClassVar[str] = "delete"
    operation: ClassVar[str] = "DELETE"

    def change(self) -> Change | None:
        return Change(self.where)

    def check_input(self, tw: TableWork, engine: Engine, store: ObjectStore) -> None:
        if self.where is not None:
            engine.validate_where(tw.ctx, self.where)
