"""INSERT: append rows. A blind append: it reads nothing, so nothing can conflict with it.

Its rows are written once, as the table's own data files; a redo on a newer snapshot keeps
those files (``kept_files``), so the rows never have to be held anywhere else, and its sublog
entry is always physical (it names the files). ``schema_mode="merge"`` adds the data's new
columns (nullable) in the same commit, as Delta's mergeSchema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..delta.actions import AddFile
from ..scan.conflicts import Change, Footprint
from . import evolution
from .identity import NewRows

if TYPE_CHECKING:
    from ..engines.api import Engine
    from .view import TableWork


@dataclass(eq=False, kw_only=True)
class Insert(NewRows):
    kind: ClassVar[str] = "insert"
    operation: ClassVar[str] = "WRITE"
    blind: ClassVar[bool] = True
    append_only_ok: ClassVar[bool] = True
    claims_with_entry: ClassVar[bool] = True
    can_be_logical: ClassVar[bool] = False

    schema_mode: str | None = None  # "merge": add the data's new columns
    inserted: list[AddFile] = field(default_factory=list)  # the files holding the new rows

    def plan_columns(self, tw: TableWork, data: Any) -> None:
        # a redo keeps the fields planned first
        if self.schema_mode == "merge" and data is not None:
            self.add_fields = evolution.plan(tw.name, tw.schema, evolution.data_fields(data),
                                             strict=False, metadata=tw.metadata or tw.base.metadata)

    def execute(self, tw: TableWork, engine: Engine, data: Any, redo: bool) -> Any:
        if data is not None:
            self.inserted = self.write_rows(tw, engine, data)
            self.rules_checked = tw.ctx.constraints
        elif self.numbered:  # a redo numbers its rows again, above the marks it now sees
            self.inserted = self.renumber(tw, engine, self.inserted)
            self.rules_checked = tw.ctx.constraints
        else:
            self.recheck_kept(tw, engine, self.inserted)
        self.added = list(self.inserted)
        self.rows = sum(a.num_records or 0 for a in self.added)
        return None

    @property
    def new_files(self) -> list[AddFile]:
        return self.inserted

    def footprint(self) -> Footprint:
        return Footprint(blind=True)

    def change(self) -> Change | None:
        return None  # new rows only

    def options(self) -> dict[str, Any]:
        return {**({"schema_mode": self.schema_mode} if self.schema_mode else {}),
                **super().options()}

    @classmethod
    def decode_more(cls, statement: dict[str, Any], added: list[AddFile]) -> dict[str, Any]:
        return {"inserted": list(added),
                "schema_mode": (statement.get("options") or {}).get("schema_mode")}
