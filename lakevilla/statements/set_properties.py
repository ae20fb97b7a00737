"""SET / UNSET TBLPROPERTIES: table properties changed by a metaData action in the commit.

A property may need a newer protocol (a CHECK constraint: writer version 3), which the same
commit carries. A new CHECK constraint must hold for the rows already there, as Delta's
``ADD CONSTRAINT`` demands: they are read and checked, which makes the statement a full-table
read (a concurrent writer adding rows conflicts with it, and a redo checks again). Like every
metadata change it also conflicts with every concurrent writer of the table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..delta.constraints import CHECK
from ..errors import InvalidArgumentError
from ..scan.conflicts import Footprint
from .base import Statement

if TYPE_CHECKING:
    from ..engines.api import Engine
    from ..store import ObjectStore
    from .view import TableWork


def checked_properties(table: str, properties: Any) -> dict[str, str | None]:
    """``properties`` as a dict of str -> str (None: unset), or ``InvalidArgumentError``."""
    if not isinstance(properties, dict) or not properties:
        raise InvalidArgumentError(f"set_properties on {table!r}: give a non-empty dict of "
                                   "property name -> value (None to unset)")
    bad = {k: v for k, v in properties.items()
           if not isinstance(k, str) or not k or not (v is None or isinstance(v, str))}
    if bad:
        raise InvalidArgumentError(f"set_properties on {table!r}: names and values must be "
                                   f"strings (None to unset a property): {bad!r}")
    return dict(properties)


@dataclass(eq=False, kw_only=True)
class SetProperties(Statement):
    kind: ClassVar[str] = "set_properties"
    operation: ClassVar[str] = "SET TBLPROPERTIES"
    append_only_ok: ClassVar[bool] = True

    properties: dict[str, str | None] = field(default_factory=dict)

    def change_view(self, tw: TableWork) -> None:
        super().change_view(tw)
        tw.set_properties(self.properties)

    def check_input(self, tw: TableWork, engine: Engine, store: ObjectStore) -> None:
        checked_properties(tw.name, self.properties)

    def execute(self, tw: TableWork, engine: Engine, data: Any, redo: bool) -> Any:
        before = set(tw.base.metadata.configuration.items())
        new = tuple(r for r in tw.ctx.constraints
                    if (f"delta.constraints.{r.name}", r.expression) not in before
                    and r.kind == CHECK)
        if new:  # the rows already there must keep the new rules
            files = tw.candidates(None)
            self.read_files = {a.path for a in files}
            engine.check_rows(dataclasses.replace(tw.ctx, constraints=new), files)
        return None

    def footprint(self) -> Footprint:
        if self.read_files:
            return Footprint(read_files=set(self.read_files), full_scan=True)
        return Footprint()

    def options(self) -> dict[str, Any]:
        return {"properties": dict(self.properties), **super().options()}

    @classmethod
    def decode_more(cls, statement: dict[str, Any], added: list[Any]) -> dict[str, Any]:
        return {"properties": dict((statement.get("options") or {}).get("properties") or {})}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "properties": dict(self.properties)}

    def result(self, out: Any) -> Any:
        return None
