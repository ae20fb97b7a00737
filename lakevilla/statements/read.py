"""READ: the rows of a table that a predicate selects, as the transaction sees it.

Its footprint is the files it read and its predicate. When the rows it returned are small
enough to keep (``read_results.py``), a redo must return the same rows again; otherwise a
conflict with it aborts the transaction (the client already computed with the rows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from ..scan import expressions as E
from ..scan.conflicts import Footprint
from ..scan.ordering import Ordering
from ..scan.pruning import parse_predicate, prune_files
from . import read_results
from .base import Statement

if TYPE_CHECKING:
    from ..delta.snapshot import Snapshot
    from ..engines.api import Engine
    from ..store import ObjectStore
    from .view import TableWork


@dataclass(eq=False, kw_only=True)
class Read(Statement):
    kind: ClassVar[str] = "read"
    operation: ClassVar[str] = "READ"
    is_write: ClassVar[bool] = False

    columns: list[str] | None = None
    order: Ordering | None = None  # ORDER BY ... LIMIT (its footprint is still ``where``)
    # the rows it returned when they can be compared (read_results.py); a redo of the read
    # must return the same rows, else the transaction aborts
    returned: Any = field(default=None, repr=False)

    def check_input(self, tw: TableWork, engine: Engine, store: ObjectStore) -> None:
        if self.where is not None:
            engine.validate_where(tw.ctx, self.where)
        if self.order is not None:
            self.order.check(tw.schema.names, tw.name)

    def execute(self, tw: TableWork, engine: Engine, data: Any, redo: bool) -> Any:
        cands = tw.candidates(self.where)
        self.read_files = {a.path for a in cands}
        result = engine.scan(tw.ctx, cands, self.where, self.columns, self.order)
        self.rows = engine.num_rows(result)
        if not redo:
            self.returned = read_results.keep(result)
        elif self.returned is None or not read_results.same_rows(self.returned, result):
            raise read_results.ReadChanged(f"{tw.name}: the read of operation {self.seq} "
                                           "returns other rows now")
        return result

    def footprint(self) -> Footprint:
        """With the columns its rows depend on, when it names what it returns: a commit that
        only updated other columns leaves its rows as they were."""
        fp = super().footprint()
        fp.columns = self.depends_on
        return fp

    @cached_property
    def depends_on(self) -> frozenset[str] | None:
        """Every column (lower case) its rows depend on: returned, filtered or ordered by; None
        for all of them. Fixed by the statement, so worked out once (footprints are asked for in
        every wait round)."""
        pred = parse_predicate(self.where)
        if self.columns is None or (self.where is not None and pred.node is None):
            return None
        names = set(self.columns)
        if self.order is not None:
            names |= {k for k, _ in self.order.keys}
        if pred.node is not None:
            names |= {n for node in E.walk(pred.node) if node.get("class") == "COLUMN_REF"
                      for n in node["column_names"]}
        # a dotted name stands for its top-level column too (updates set top-level columns)
        return frozenset(x.lower() for n in names for x in (n, n.split(".")[0]))

    @property
    def comparable(self) -> bool:
        return self.returned is not None

    @property
    def consumed(self) -> bool:
        return self.returned is None

    def would_change(self, tw: TableWork, engine: Engine, snapshot: Snapshot) -> bool | None:
        """Run on ``snapshot`` alone: only for a kept read that saw no write of ours (else a
        redo is needed to tell)."""
        k = tw.ops.index(self)
        if self.returned is None or any(o.is_write for o in tw.ops[:k]):
            return None
        if snapshot.schema != tw.schema:
            return True
        cands = prune_files(snapshot.files, parse_predicate(self.where), snapshot.schema,
                            snapshot.partition_columns)
        again = engine.scan(tw.ctx, cands, self.where, self.columns, self.order)
        return not read_results.same_rows(self.returned, again)

    def result(self, out: Any) -> Any:
        return out
