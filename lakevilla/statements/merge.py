"""MERGE: the statement and the public builder.

A merge is declarative (target, source, ``on``, ordered clauses), so under R it is redone on a
newer snapshot instead of aborted. What it reads is the candidate target files; which files
those are comes from the source's join-key values (partition values, min/max of the keys),
written as an ordinary ``where`` over the target (``merge_plan.prune_predicate``). That
predicate is also the merge's precision lock: a concurrent commit adding a file that could
hold one of the keys is a conflict, so a not-matched insert cannot miss a row another writer
inserted meanwhile.

The source stays where the engine keeps its rows (``Engine.merge_source``: a pyarrow table, a
Spark DataFrame); the statement sees its schema and its key bounds only. It is fixed before the
merge runs (``prepare``: staged as Parquet under ``_lakevilla/txns/<txn>/`` when the
transaction keeps sublogs and the engine stages there), or staged after, when a logical sublog
entry must name it; a redo or a resumed transaction joins from the staged files.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..delta.constraints import generated_columns
from ..engines.identity import refuse_updates
from ..engines.merge_plan import (
    MergeClause,
    MergePlan,
    MergeResult,
    MergeSpec,
    bounded_keys,
    plan,
    prune_predicate,
)
from ..errors import DuplicateMatchError, InvalidArgumentError
from ..names import staged_prefix
from .identity import Marks

if TYPE_CHECKING:
    from ..delta.actions import AddFile
    from ..engines.api import Engine, MergeSource, TableContext
    from ..store import ObjectStore
    from .view import TableWork

__all__ = ["DuplicateMatchError", "Merge", "MergeBuilder", "MergeClause", "MergeResult",
           "MergeSpec"]


# -- the public builder ------------------------------------------------------------------------

class MergeBuilder:
    """``txn.merge(table, source, on=...)``: add clauses in order, then ``execute()``.

    Clauses of one kind (matched / not matched) are tried in the order given; the first whose
    predicate holds applies to a row. Names follow delta-rs' ``TableMerger``."""

    def __init__(self, execute: Callable[[list[MergeClause]], MergeResult]) -> None:
        self._execute = execute  # runs the statement in its transaction
        self._clauses: list[MergeClause] = []
        self._done = False

    def _add(self, c: MergeClause) -> MergeBuilder:
        if self._done:
            raise InvalidArgumentError("this merge has already been executed")
        self._clauses.append(c)
        return self

    def when_matched_update(self, updates: dict[str, str],
                            predicate: str | None = None) -> MergeBuilder:
        """Matched rows (``predicate`` true, if given) take ``updates`` (column -> SQL
        over target and source)."""
        return self._add(MergeClause("update", predicate,
                                     dict(updates) if isinstance(updates, dict) else updates))

    def when_matched_update_all(self, predicate: str | None = None) -> MergeBuilder:
        """Matched rows take every column from the source row."""
        return self._add(MergeClause("update", predicate, None, all_columns=True))

    def when_matched_delete(self, predicate: str | None = None) -> MergeBuilder:
        """Matched rows (``predicate`` true, if given) are deleted."""
        return self._add(MergeClause("delete", predicate))

    def when_not_matched_insert(self, values: dict[str, str],
                                predicate: str | None = None) -> MergeBuilder:
        """Source rows that match nothing are inserted with ``values`` (column ->
        SQL over the source)."""
        return self._add(MergeClause("insert", predicate,
                                     dict(values) if isinstance(values, dict) else values))

    def when_not_matched_insert_all(self, predicate: str | None = None) -> MergeBuilder:
        """Source rows that match nothing are inserted with every column from the source."""
        return self._add(MergeClause("insert", predicate, None, all_columns=True))

    def execute(self) -> MergeResult:
        """Run the merge inside the transaction; what it did (rows updated, deleted, inserted,
        files added and removed; also readable by delta-rs' metric names, as a mapping)."""
        if self._done:
            raise InvalidArgumentError("this merge has already been executed")
        self._done = True
        return self._execute(list(self._clauses))


# -- the statement -----------------------------------------------------------------------------

def _computed(tw: TableWork) -> frozenset[str]:
    """Columns an insert clause may leave out: generated and identity columns."""
    return frozenset(generated_columns(tw.ctx.constraints)) | {c.name for c in tw.ctx.identity}


@dataclass(eq=False, kw_only=True)
class Merge(Marks):
    """The statement; ``where`` is its pruning predicate over the target (``prune_predicate``),
    derived from the source's keys when it runs: its read, and its precision lock."""

    kind: ClassVar[str] = "merge"
    operation: ClassVar[str] = "MERGE"
    logs_changes: ClassVar[bool] = True

    spec: MergeSpec
    # runtime only: the source rows (None when resumed: read from the staged files), what the
    # last run did, and the plan of the last target and source schemas
    source: MergeSource | None = field(default=None, repr=False)
    outcome: MergeResult = field(default_factory=MergeResult, repr=False)
    _planned: tuple[Any, MergePlan] | None = field(default=None, repr=False)
    _bounds: tuple[Any, str | None] | None = field(default=None, repr=False)
    _ctx: TableContext | None = field(default=None, repr=False)

    def _source(self, tw: TableWork, engine: Engine) -> MergeSource:
        if self.source is None:
            if not self.spec.source_files:
                raise InvalidArgumentError("this merge's source was not staged: it "
                                           "cannot be re-executed")
            self.source = engine.staged_merge_source(tw.ctx, self.spec.source_files)
        return self.source

    def _plan(self, tw: TableWork, source: MergeSource) -> MergePlan:
        """Checked once per target and source schema (a redo on a newer snapshot may meet a
        table whose columns changed)."""
        key = (tw.schema, source.schema, tw.ctx.constraints, tw.ctx.identity)
        if self._planned is None or self._planned[0] != key:
            self._planned = (key, plan(self.spec, tw.name, tw.schema, source.schema,
                                       _computed(tw)))
        return self._planned[1]

    def check_input(self, tw: TableWork, engine: Engine, store: ObjectStore) -> None:
        """Schemas and expressions only: no row of the source is read yet."""
        p = self._plan(tw, self._source(tw, engine))
        refuse_updates(tw.ctx, [col for i in p.ids(True) if p.clauses[i].kind == "update"
                                for col in (p.values[i] or {})], "merge")

    def prepare(self, tw: TableWork, engine: Engine, stage_at: str | None) -> list[str]:
        source = self._source(tw, engine)
        before = source.staged
        self.source = source.materialized(tw.ctx, stage_at)
        self._note_staged()
        return [k for k in self.source.staged if k not in before]

    def _note_staged(self) -> None:
        if self.source is not None and self.source.staged != self.spec.source_files:
            self.spec = dataclasses.replace(self.spec, source_files=self.source.staged)

    def _where(self, tw: TableWork, source: MergeSource, p: MergePlan) -> str | None:
        """The pruning predicate, from the source's key bounds (computed once per source)."""
        parts = tuple(tw.base.partition_columns)
        if self._bounds is None or self._bounds[0] != (id(source), p.keys, parts):
            keys = bounded_keys(p, parts)
            where = prune_predicate(keys, source.key_bounds(keys)) if keys else None
            self._bounds = ((id(source), p.keys, parts), where)
        return self._bounds[1]

    def execute(self, tw: TableWork, engine: Engine, data: Any, redo: bool) -> Any:
        """It reads the files that can hold a match (``where``, from the source's keys)."""
        source = self._source(tw, engine)
        p = self._plan(tw, source)
        self._ctx = tw.ctx
        self.where = self._where(tw, source, p)
        cands = tw.candidates(self.where)
        self.read_files = {a.path for a in cands}
        rr, self.outcome = engine.merge(tw.ctx, cands, p, source)
        self.removed, self.added, self.rows = rr.removed, rr.added, rr.rows
        self.cdc = rr.cdc
        self.marks = rr.marks  # the view takes them with the statement's effects (change_view)
        return self.outcome

    def stage(self, store: ObjectStore, txn_id: str) -> list[str]:
        if not self.logical or self.source is None or self.source.staged or self._ctx is None:
            return []
        self.source = self.source.stage(self._ctx, staged_prefix(txn_id, self.seq))
        self._note_staged()
        return list(self.source.staged)

    def staged_keys(self) -> list[str]:
        return list(self.spec.source_files)

    def encode(self, logical: bool) -> dict[str, Any] | None:
        st = super().encode(logical)
        if st is not None:
            spec = self._planned[1].spec if self._planned is not None else self.spec
            # on, clauses, aliases, the staged source
            st["merge"] = dataclasses.replace(spec, source_files=self.spec.source_files).to_json()
        return st

    @classmethod
    def decode_more(cls, statement: dict[str, Any], added: list[AddFile]) -> dict[str, Any]:
        if not statement.get("merge"):
            return {"spec": MergeSpec(on="", clauses=())}  # physical: never redone
        return {"spec": MergeSpec.from_json(statement["merge"])}

    def result(self, out: Any) -> Any:
        return out
