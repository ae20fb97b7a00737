"""ADD COLUMNS: new nullable columns, as a metaData action in the table's commit.

It reads nothing, so only a concurrent change of the table's metadata conflicts with it (and,
by Delta's rule, it with every concurrent writer: its metaData action changes the schema).
The columns are planned once, at its first run (``evolution.plan``); a redo and a resumed
run apply the same ``add_fields`` to the newer base.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from ..scan.conflicts import Footprint
from . import evolution
from .base import Statement

if TYPE_CHECKING:
    from ..engines.api import Engine
    from .view import TableWork


@dataclass(eq=False, kw_only=True)
class AddColumns(Statement):
    kind: ClassVar[str] = "add_columns"
    operation: ClassVar[str] = "ADD COLUMNS"
    append_only_ok: ClassVar[bool] = True

    # requested; planned at the first run
    fields: list[pa.Field] | None = field(default=None, repr=False)

    def plan_columns(self, tw: TableWork, data: Any) -> None:
        if self.fields is not None:
            self.add_fields = evolution.plan(tw.name, tw.schema, self.fields, strict=True,
                                             metadata=tw.metadata or tw.base.metadata)
            self.fields = None  # a redo keeps the fields its first run planned

    def execute(self, tw: TableWork, engine: Engine, data: Any, redo: bool) -> Any:
        return None  # the columns were applied to the view before

    def footprint(self) -> Footprint:
        return Footprint()

    def result(self, out: Any) -> Any:
        return None
