"""One transaction's work on one table: its operations, its view, its footprints.

The view is the snapshot the operations ran against plus the transaction's own
changes, kept as an overlay (files added, base files removed), so a transaction
over a table of a million files pays for the files it touches, not for the table.
An operation records what it read, removed and added, so that a
concurrent commit can be checked against it (``Footprint``), so that it can be
undone (drop what it added, restore what it removed) and, when it is
declarative, redone on a newer snapshot.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

from ..delta.actions import AddFile, Commit, RemoveFile
from ..delta.files import FileSet
from ..delta.log import DeltaLog
from ..delta.snapshot import Snapshot
from ..engines.api import Engine, TableContext
from ..markers.marker import MarkerHandle
from ..scan.conflicts import Footprint
from ..scan.expressions import check_update
from ..scan.ordering import Ordering
from ..scan.pruning import parse_predicate, prune, prune_files
from . import evolution, overwrite, read_results
from . import optimize as compaction


@dataclass
class Op:
    seq: int
    kind: str  # "read" | "insert" | "update" | "delete" | "merge" | "overwrite" | "optimize" | "add_columns"
    table: str
    where: str | None = None
    assignments: dict[str, str] | None = None
    columns: list[str] | None = None
    # optimize: {"target_file_size": ...}; add_columns, insert with schema_mode="merge":
    # {"add_fields": [Delta StructField JSON]} once run (and {"schema_mode": "merge"} for insert)
    options: dict[str, Any] | None = None
    inserted: list[AddFile] = field(default_factory=list)  # insert, overwrite: the files holding the new rows
    added: list[AddFile] = field(default_factory=list)
    removed: list[AddFile] = field(default_factory=list)
    read_files: set[str] = field(default_factory=set)
    rows: int = 0
    logical: bool = False  # its sublog entry is logical (redo re-executes it)
    redoable: bool = True  # False for an operation resumed from a physical sublog entry
    merge: Any = None  # merge: the statement (lakevilla.statements.merge.MergeSpec); where is its pruning predicate
    order: Ordering | None = None  # read: ORDER BY ... LIMIT (its footprint is still ``where``)
    # read: the rows it returned when they can be compared (read_results.py); a redo of the read
    # must return the same rows, else the transaction aborts
    returned: Any = field(default=None, repr=False, compare=False)

    @property
    def is_write(self) -> bool:
        return self.kind != "read"

    def footprint(self) -> Footprint:
        if self.kind == "insert":
            return Footprint(blind=True)
        if self.kind == "add_columns":  # reads nothing: only a concurrent metadata change conflicts
            return Footprint()
        if self.kind == "optimize":  # its files, nothing else: it changes no row
            return Footprint(read_files={a.path for a in self.removed}, removed_files={a.path for a in self.removed})
        pred = parse_predicate(self.where)
        return Footprint(
            read_files=set(self.read_files),
            removed_files={a.path for a in self.removed},
            predicate=self.where if pred.node is not None else None,
            full_scan=self.where is None or pred.node is None,
        )


class TableWork:
    def __init__(self, name: str, log: DeltaLog, snapshot: Snapshot, ctx: TableContext) -> None:
        self.name = name
        self.log = log
        self.ctx = ctx
        self.read_version = snapshot.version
        self.base = snapshot
        self.added: dict[str, AddFile] = {}  # files our ops added that the view still holds
        self.removed: dict[str, AddFile] = {}  # base files our ops removed
        self.ops: list[Op] = []
        self.validated_upto = snapshot.version
        self.doom_checked = snapshot.version  # commits up to here cannot doom us (checked while waiting)
        self.markers_read_at = float("-inf")  # when a wait last re-read every running predecessor
        self.marker: MarkerHandle | None = None
        self.old_markers: list[MarkerHandle] = []
        self.logical = False
        self.garbage: set[str] = set()  # our files that no version will ever reference
        # versions our snapshot read as empty in-place markers: if one is filled later, its
        # actions were never in our snapshot, so validation must look at it again
        self.recheck: set[int] = log.unstable_versions(snapshot.version)
        # a table this transaction creates: version 0 (protocol, metadata, our adds) is written
        # only when the transaction commits; until then the view starts empty (version -1)
        self.creating: Commit | None = None
        self.reservation_etag: str | None = None
        self.metadata = None  # the table's new metadata when our ops added columns (evolution.py)
        self._schema = None

    # -- view ----------------------------------------------------------------
    @property
    def written(self) -> bool:
        return self.creating is not None or any(op.is_write for op in self.ops)

    @property
    def schema(self):
        return self._schema if self.metadata is not None else self.base.schema

    def set_metadata(self, metadata) -> None:
        """The view's schema changes (columns added): later operations read and write with it."""
        from ..delta.schema import schema_from_json

        self.metadata = metadata
        self._schema = schema_from_json(metadata.schema_string)
        self.ctx = dataclasses.replace(self.ctx, schema=self._schema)

    @property
    def files(self) -> FileSet:
        """The view as a mapping path -> AddFile (materialises on iteration: prefer ``candidates``)."""
        base = self.base.files
        return FileSet(base.base, base.hidden | set(self.removed) | set(self.added),
                       {**{p: a for p, a in base.extra.items() if p not in self.removed}, **self.added})

    def candidates(self, where: str | None) -> list[AddFile]:
        pred = parse_predicate(where)
        out = [a for a in prune_files(self.base.files, pred, self.schema, self.base.partition_columns)
               if a.path not in self.removed]
        if self.added:
            out += prune(pred, list(self.added.values()), self.schema, self.base.partition_columns)
        return out

    def _remove(self, a: AddFile) -> None:
        if self.added.pop(a.path, None) is None:
            self.removed[a.path] = a

    def _apply(self, op: Op) -> None:
        if op.options and op.options.get("add_fields"):
            evolution.apply(self, op.options["add_fields"])
        for a in op.removed:
            self._remove(a)
        for a in op.added:
            self.added[a.path] = a

    def adopt(self, op: Op) -> None:
        """Take in an operation executed before (resumed from its sublog): its files join the view."""
        self._apply(op)
        self.ops.append(op)

    # -- execution -------------------------------------------------------------
    def run(self, engine: Engine, op: Op, data: Any = None, redo: bool = False) -> Any:
        """Execute ``op`` against the current view and record its effects.

        Its expressions are checked by the grammar first, on every path that gets here (a
        new operation, a redo, an operation resumed from a possibly tampered sublog). A failed
        operation leaves the view as it was (its schema too)."""
        saved = (self.metadata, self._schema, self.ctx)
        try:
            return self._run(engine, op, data, redo)
        except BaseException:
            self.metadata, self._schema, self.ctx = saved
            raise

    def _run(self, engine: Engine, op: Op, data: Any, redo: bool = False) -> Any:
        if op.kind == "add_columns" or (op.kind == "insert" and (op.options or {}).get("schema_mode") == "merge"
                                         and data is not None):
            fields = op.options.pop("fields", None) if op.kind == "add_columns" else evolution.data_fields(data)
            if fields is not None:  # a redo keeps the fields its first run planned
                op.options["add_fields"] = evolution.plan(self.name, self.schema, fields,
                                                          strict=op.kind == "add_columns")
        if op.options and op.options.get("add_fields"):
            evolution.apply(self, op.options["add_fields"])
        check_update(self.schema, self.name, op.where,
                     (op.assignments or {}) if op.kind == "update" else None)
        result = None
        if op.kind == "read":
            cands = self.candidates(op.where)
            op.read_files = {a.path for a in cands}
            result = engine.scan(self.ctx, cands, op.where, op.columns, op.order)
            op.rows = engine.num_rows(result)
            if not redo:
                op.returned = read_results.keep(result)
            elif op.returned is None or not read_results.same_rows(op.returned, result):
                raise read_results.ReadChanged(f"{self.name}: the read of operation {op.seq} returns other rows now")
        elif op.kind == "insert":
            if data is not None:
                op.inserted = engine.write(self.ctx, data)
            op.added = list(op.inserted)
            op.rows = sum(a.num_records or 0 for a in op.added)
        elif op.kind == "merge":
            result = self._run_merge(engine, op)
        elif op.kind in ("update", "delete"):
            cands = self.candidates(op.where)
            op.read_files = {a.path for a in cands}
            rr = engine.rewrite(self.ctx, cands, op.where, op.assignments if op.kind == "update" else None)
            op.removed, op.added, op.rows = rr.removed, rr.added, rr.rows
        elif op.kind == "overwrite":
            overwrite.run(self, engine, op, data)
        elif op.kind == "optimize":
            compaction.run(self, engine, op)
        elif op.kind == "add_columns":
            pass  # applied above
        self._apply(op)
        return result

    def _run_merge(self, engine: Engine, op: Op) -> dict[str, int]:
        """The merge reads the files that can hold a match (``op.where``, from the source's keys)."""
        from . import merge as M

        source = op.merge.source_table(self.ctx.store)
        cm = M.check(op.merge, self.name, self.schema, source.schema)
        cands = self.candidates(op.where)
        op.read_files = {a.path for a in cands}
        rr, op.merge.metrics = engine.merge(self.ctx, cands, cm, op.merge, source)
        op.removed, op.added, op.rows = rr.removed, rr.added, rr.rows
        return dict(op.merge.metrics)

    def footprints(self) -> list[Footprint]:
        return [op.footprint() for op in self.ops]

    # -- undo / redo -------------------------------------------------------------
    def undo_from(self, k: int) -> list[Op]:
        """Roll the view back to before ``ops[k]``; returns the undone ops (newest last).

        Files the undone ops wrote become garbage; files they removed come back.
        """
        undone = self.ops[k:]
        for op in reversed(undone):
            kept = {a.path for a in op.inserted}  # new rows are redone from the same files
            for a in op.added:
                self.added.pop(a.path, None)
                if a.path not in kept:
                    self.garbage.add(a.path)
            for a in op.removed:
                if self.removed.pop(a.path, None) is None:
                    self.added[a.path] = a  # a file an earlier op of ours wrote comes back
        return undone

    def rebase(self, snapshot: Snapshot, kept: int) -> None:
        """Move onto ``snapshot`` keeping the effects of ``ops[:kept]`` (checked compatible)."""
        self.base = snapshot
        self.recheck = self.log.unstable_versions(snapshot.version)
        self.added, self.removed = {}, {}
        self.metadata, self._schema = None, None
        self.ctx = dataclasses.replace(self.ctx, schema=snapshot.schema,
                                       partition_columns=tuple(snapshot.partition_columns))
        for op in self.ops[:kept]:
            self._apply(op)

    def read_would_change(self, engine: Engine, k: int, snapshot: Snapshot) -> bool | None:
        """Whether read ``ops[k]``, run on ``snapshot``, would return other rows than it returned.
        Only for a kept read before our first write to the table (it saw the snapshot alone, so
        the answer needs no redo); None when that cannot be told (not such a read)."""
        op = self.ops[k]
        if op.kind != "read" or op.returned is None or any(o.is_write for o in self.ops[:k]):
            return None
        if snapshot.schema != self.schema:
            return True
        pred = parse_predicate(op.where)
        cands = prune_files(snapshot.files, pred, snapshot.schema, snapshot.partition_columns)
        return not read_results.same_rows(op.returned, engine.scan(self.ctx, cands, op.where, op.columns, op.order))

    def redo(self, engine: Engine, k: int, snapshot: Snapshot) -> list[Op]:
        """Undo ``ops[k:]``, move onto ``snapshot``, re-execute them in order."""
        undone = self.undo_from(k)
        self.rebase(snapshot, k)
        for op in undone:
            op.added, op.removed, op.read_files = [], [], set()
            self.run(engine, op, redo=True)  # a read must return what it returned: ReadChanged if not
        return undone

    # -- the commit --------------------------------------------------------------
    def net_actions(self, now_ms: int | None = None) -> tuple[list[AddFile], list[RemoveFile]]:
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        compacted = {a.path for op in self.ops if op.kind == "optimize" for a in op.removed}
        return list(self.added.values()), [a.remove(now_ms, data_change=a.path not in compacted)
                                           for a in self.removed.values()]

    def intermediate_files(self) -> set[str]:
        """Files our ops wrote that the final commit does not add."""
        final = set(self.added)
        written = {a.path for op in self.ops for a in op.added}
        return (written - final) | self.garbage

    def build_commit(self, commit_info: dict) -> Commit:
        adds, removes = self.net_actions()
        ops = [op.kind for op in self.ops if op.is_write]
        commit_info = dict(commit_info)
        commit_info.setdefault("operation", _operation_name(ops))
        commit_info.setdefault("isBlindAppend", all(k == "insert" for k in ops))
        if self.creating is not None:
            c = self.creating
            info = {**c.commit_info, **{k: v for k, v in commit_info.items() if k in ("timestamp", "lakevilla")}}
            if adds:
                info["operation"] = "CREATE TABLE AS SELECT"
                info["operationMetrics"] = {"numFiles": str(len(adds)),
                                            "numOutputRows": str(sum(a.num_records or 0 for a in adds))}
            return Commit(adds=adds, commit_info=info, protocol=c.protocol, metadata=self.metadata or c.metadata)
        commit_info.setdefault("readVersion", self.read_version)
        return Commit(adds=adds, removes=removes, commit_info=commit_info, metadata=self.metadata)


def _operation_name(kinds: list[str]) -> str:
    if not kinds:
        return "WRITE"
    if all(k == "insert" for k in kinds):
        return "WRITE"
    if len(set(kinds)) == 1:
        return {"overwrite": "WRITE", "add_columns": "ADD COLUMNS"}.get(kinds[0], kinds[0].upper())
    return "MERGE"
