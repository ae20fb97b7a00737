"""One transaction's work on one table: its statements, its view, its footprints.

The view is the snapshot the operations ran against plus the transaction's own
changes, kept as an overlay (files added, base files removed), so a transaction
over a table of a million files pays for the files it touches, not for the table.
Each statement (``base.Statement``, seen here as ``Recorded``) records what it read, removed and
added, so that a concurrent commit can be checked against it (``Footprint``), so that it can be
undone (drop what it added, restore what it removed) and, when it is
declarative, redone on a newer snapshot.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, ClassVar, Protocol

from ..delta import column_mapping, mapping_changes, row_tracking
from ..delta.actions import AddFile, CdcFile, Commit, Metadata, RemoveFile
from ..delta.actions import Protocol as DeltaProtocol
from ..delta.constraints import generated_columns
from ..delta.features import check_writable, upgraded
from ..delta.files import FileSet
from ..delta.identity import with_marks
from ..delta.log import DeltaLog
from ..delta.snapshot import Snapshot
from ..engines.api import Engine, TableContext
from ..errors import UnsupportedTableFeatureError
from ..markers.marker import MarkerHandle
from ..scan.conflicts import Change, Footprint
from ..scan.pruning import parse_predicate, prune, prune_files
from ..vocab import InfoKind
from . import evolution

# Characters of ``where`` text a marker's ``changes`` may carry: every follower reads the marker
CHANGES_MAX_CHARS = 1024


class Recorded(Protocol):
    """What the view, validation and the conflict policies need of a statement
    (``base.Statement``, which cannot be imported here: it imports the view): what it is, its
    effects, how to run and redo it, and how it is reported."""

    kind: ClassVar[str]  # its name in sublog entries and statistics
    operation: ClassVar[str]  # Delta's commitInfo operation name
    is_write: ClassVar[bool]
    blind: ClassVar[bool]  # an append that reads nothing
    compacts: ClassVar[bool]  # its removes change no row
    keeps_rows: ClassVar[bool]  # its removed rows come back changed in its SET columns alone
    logs_changes: ClassVar[bool]  # the engine logs its change rows (none: no row changed)
    seq: int
    where: str | None
    added: list[AddFile]
    removed: list[AddFile]
    cdc: list[CdcFile]  # its change data files
    logical: bool  # its sublog entry is logical (a redo sets it)
    redoable: bool  # False when resumed from a physical sublog entry

    @property
    def kept_files(self) -> set[str]: ...

    @property
    def comparable(self) -> bool: ...

    @property
    def consumed(self) -> bool: ...

    def run(self, tw: TableWork, engine: Engine, data: Any = None, redo: bool = False) -> Any: ...

    def change_view(self, tw: TableWork) -> None: ...

    def reset_for_redo(self) -> None: ...

    def footprint(self) -> Footprint: ...

    def change(self) -> Change | None: ...

    def assignments_to_check(self) -> dict[str, str] | None: ...

    def would_change(self, tw: TableWork, engine: Engine, snapshot: Any) -> bool | None: ...

    def describe(self) -> dict[str, Any]: ...


def operation_name(statements: list[Recorded]) -> str:
    """Delta's commitInfo operation for a commit made of ``statements`` (writes only)."""
    if not statements or all(s.blind for s in statements):
        return "WRITE"
    if len({type(s) for s in statements}) == 1:
        return statements[0].operation
    return "MERGE"


class TableWork:
    def __init__(self, name: str, log: DeltaLog, snapshot: Snapshot, ctx: TableContext) -> None:
        self.name = name
        self.log = log
        self.ctx = ctx
        self.read_version = snapshot.version
        self.base = snapshot
        self.added: dict[str, AddFile] = {}  # files our ops added that the view still holds
        self.removed: dict[str, AddFile] = {}  # base files our ops removed
        self.ops: list[Recorded] = []
        self.validated_upto = snapshot.version
        # commits up to here cannot doom us (checked while waiting)
        self.doom_checked = snapshot.version
        # when a wait last re-read its running predecessors' markers up to the lowest it must
        # wait for (a full read), and how many full reads it made (every WHOLE_READ_EVERY-th,
        # the first included, re-reads every one)
        self.markers_read_at, self.full_reads = float("-inf"), 0
        # without a marker of our own: the newest version whose markers the last wait round
        # looked at; a commit goes above it only once every marker up to it was waited for
        self.waited_upto = -1
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
        # the table's new metadata when our ops changed it (columns, properties), and the
        # upgraded protocol when a property needs one
        self.metadata = None
        self.protocol: DeltaProtocol | None = None
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
        protocol = self.protocol or self.base.protocol
        self.metadata = metadata
        self._schema = column_mapping.logical_schema(self.name, protocol, metadata)
        self.ctx = self.ctx.following(protocol, metadata, self._schema,
                                      tuple(metadata.partition_columns))

    @property
    def files(self) -> FileSet:
        """The view as a mapping path -> AddFile (materialises on iteration:
        prefer ``candidates``)."""
        base = self.base.files
        return FileSet(base.base, base.hidden | set(self.removed) | set(self.added),
                       {**{p: a for p, a in base.extra.items() if p not in self.removed},
                        **self.added})

    def candidates(self, where: str | None) -> list[AddFile]:
        pred = parse_predicate(where)
        parts = list(self.ctx.partition_columns)  # the view's names (a rename changes them)
        out = [a for a in prune_files(self.base.files, pred, self.schema, parts)
               if a.path not in self.removed]
        if self.added:
            out += prune(pred, list(self.added.values()), self.schema, parts)
        return out

    def _remove(self, a: AddFile) -> None:
        if self.added.pop(a.path, None) is None:
            self.removed[a.path] = a

    def add_columns(self, add: list[dict[str, Any]]) -> None:
        """Make the view's schema include ``add`` (idempotent: a redo or a
        resume applies it again)."""
        current = self.metadata or self.base.metadata
        md = evolution.evolve(self.name, current, self.protocol or self.base.protocol, add)
        if md is not current:
            self.set_metadata(md)

    def advance_identity(self, marks: dict[str, int]) -> None:
        """The identity columns' high-water marks become ``marks`` (a statement numbered rows)."""
        current = self.metadata or self.base.metadata
        md = with_marks(current, marks)
        if md is not current:
            self.set_metadata(md)

    def set_properties(self, properties: dict[str, str | None]) -> None:
        """Make the view's table properties include ``properties`` (None unsets one), with the
        protocol upgrade a property needs; refused when the result is a table we cannot write
        (a property enabling a feature we do not write). Idempotent, as ``add_columns``."""
        current = self.metadata or self.base.metadata
        config = dict(current.configuration)
        for k, v in properties.items():
            if v is None:
                config.pop(k, None)
            else:
                config[k] = v
        config = row_tracking.with_column_names(config)  # enabling names its columns
        if config == current.configuration:
            return
        md = dataclasses.replace(current, configuration=config)
        protocol = upgraded(self.protocol or self.base.protocol, config)
        md = self._mapping_enabled(current, md)
        check_writable(self.name, protocol, md)
        if protocol != self.base.protocol:
            self.protocol = protocol
        self.set_metadata(md)

    def _mapping_enabled(self, before: Metadata, after: Metadata) -> Metadata:
        """``after``, its columns mapped when its properties switch column mapping on. Delta
        allows ``none`` -> ``name`` on an existing table (its files keep their names, which
        become the physical names); ``id`` only at creation, and never another change."""
        was = column_mapping.mode(self.name, self.protocol or self.base.protocol, before)
        now = mapping_changes.requested_mode(after.configuration)
        if now == was:
            return after
        if (was, now) == ("none", "name"):
            return mapping_changes.mapped(after, keep_names=True)
        raise UnsupportedTableFeatureError(
            self.name, "columnMapping",
            f"{column_mapping.MODE_KEY} cannot change from {was!r} to {now!r} on an existing "
            "table ('none' to 'name' only; 'id' is set when the table is created)")

    def apply(self, op: Recorded) -> None:
        """``op``'s effects join the view (its columns, the files it removed and added)."""
        op.change_view(self)
        for a in op.removed:
            self._remove(a)
        for a in op.added:
            self.added[a.path] = a

    def adopt(self, op: Recorded) -> None:
        """Take in a statement executed before (resumed from its sublog): its
        files join the view."""
        self.apply(op)
        self.ops.append(op)

    # -- execution -------------------------------------------------------------
    def run(self, engine: Engine, op: Recorded, data: Any = None, redo: bool = False) -> Any:
        """Execute ``op`` against the current view and record its effects. A failed
        statement leaves the view as it was (its schema too)."""
        saved = (self.metadata, self.protocol, self._schema, self.ctx)
        try:
            out = op.run(self, engine, data, redo)
            self._cover_changes(engine, op)
            return out
        except BaseException:
            self.metadata, self.protocol, self._schema, self.ctx = saved
            raise

    def _cover_changes(self, engine: Engine, op: Recorded) -> None:
        """Change data feed: a reader takes a commit's changes from its cdc files when it has
        any, else from its adds and removes (a remove with a deletion vector says nothing of
        which rows went). So once the commit needs cdc files, every change of ours must be in
        one: ``op``'s own, and those of earlier statements that wrote none (inserts,
        overwrites), written now. Kept true across undo: the earlier ops are covered by the
        first op with files, or none has any."""
        if not (self.ctx.write_cdf and op.is_write) or op.compacts:
            return
        if not op.cdc:
            if op.logs_changes:
                return  # no row changed
            dv = any(a.deletion_vector is not None for a in [*op.added, *op.removed])
            if not ((op.added or op.removed) and (dv or self._earlier_cdc(op))):
                return
            op.cdc = engine.change_data(self.ctx, op.removed, op.added)
        self._cover_earlier(engine, op)

    def _earlier(self, op: Recorded) -> list[Recorded]:
        return self.ops[:self.ops.index(op)] if op in self.ops else list(self.ops)

    def _earlier_cdc(self, op: Recorded) -> bool:
        return any(o.cdc for o in self._earlier(op))

    def _cover_earlier(self, engine: Engine, op: Recorded) -> None:
        earlier = self._earlier(op)
        if any(o.cdc for o in earlier):
            return  # covered already (by the first op with files)
        bare = [o for o in earlier if o.is_write and not (o.compacts or o.logs_changes)
                and (o.added or o.removed)]
        for o in bare:  # attached to ``op``: its sublog entry names them, its undo drops them
            op.cdc = [*op.cdc, *engine.change_data(self.ctx, o.removed, o.added)]

    def footprints(self) -> list[Footprint]:
        return [op.footprint() for op in self.ops]

    # -- undo / redo -------------------------------------------------------------
    def undo_from(self, k: int) -> list[Recorded]:
        """Roll the view back to before ``ops[k]``; returns the undone ops (newest last).

        Files the undone ops wrote become garbage; files they removed come back.
        """
        undone = self.ops[k:]
        for op in reversed(undone):
            kept = op.kept_files  # new rows are redone from the same files
            for a in op.added:
                self.added.pop(a.path, None)
                self.garbage.update(p for p in a.written_files if p not in kept)
            self.garbage.update(c.path for c in op.cdc)  # a redo writes its change rows anew
            for a in op.removed:
                if self.removed.pop(a.path, None) is None:
                    self.added[a.path] = a  # a file an earlier op of ours wrote comes back
        return undone

    def rebase(self, snapshot: Snapshot, kept: int) -> None:
        """Move onto ``snapshot`` keeping the effects of ``ops[:kept]`` (checked compatible)."""
        self.base = snapshot
        self.recheck = self.log.unstable_versions(snapshot.version)
        self.added, self.removed = {}, {}
        self.metadata, self.protocol, self._schema = None, None, None
        # the new snapshot's schema and rules: a redo checks rows by the table as it is now
        self.ctx = self.ctx.following(snapshot.protocol, snapshot.metadata, snapshot.schema,
                                      tuple(snapshot.partition_columns))
        for op in self.ops[:kept]:
            self.apply(op)

    def redo(self, engine: Engine, k: int, snapshot: Snapshot) -> list[Recorded]:
        """Undo ``ops[k:]``, move onto ``snapshot``, re-execute them in order."""
        undone = self.undo_from(k)
        self.rebase(snapshot, k)
        for op in undone:
            op.reset_for_redo()
            # a read must return what it returned: ReadChanged if not
            self.run(engine, op, redo=True)
        return undone

    # -- the commit --------------------------------------------------------------
    def net_actions(self, now_ms: int | None = None) -> tuple[list[AddFile], list[RemoveFile]]:
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        compacted = {a.path for op in self.ops if op.compacts for a in op.removed}
        return list(self.added.values()), [a.remove(now_ms, data_change=a.path not in compacted)
                                           for a in self.removed.values()]

    def intermediate_files(self) -> set[str]:
        """Files our ops wrote that the final commit does not add."""
        final = set(self.added) | {p for a in self.added.values() for p in a.written_files}
        written = {p for op in self.ops for a in op.added for p in a.written_files}
        return (written - final) | self.garbage

    def carried_in(self, named: set[str]) -> None:
        """Our statements landed in another writer's commit (a group commit's leader, which may
        have run some of them again): every file we wrote that it does not name (``named``,
        paths under the table) is garbage, and ``intermediate_files`` says so."""
        written = ({p for op in self.ops for a in op.added for p in a.written_files}
                   | {c.path for op in self.ops for c in op.cdc} | self.garbage)
        self.garbage = written - named
        self.added = {p: a for p, a in self.added.items()
                      if p in named and set(a.written_files) <= named}

    def updated_columns(self) -> list[str] | None:
        """The columns our commit changes when all we wrote here are updates (lower case, with
        the generated columns, which follow what they read), else None (``CommitInfo.updated``)."""
        writes = [op for op in self.ops if op.is_write]
        if (not writes or self.creating is not None or self.metadata is not None
                or self.protocol is not None
                # an update resumed without its SET: which columns it changed is unknown
                or any(not op.keeps_rows or not op.assignments_to_check() for op in writes)):
            return None
        names = {c for op in writes for c in (op.assignments_to_check() or {})}
        return sorted({n.lower() for n in names | generated_columns(self.ctx.constraints)})

    def changes(self) -> list[dict[str, Any]] | None:
        """What our commit here may change (``Change.to_json`` each), for a marker: followers'
        first reads of those rows wait for us. None: too long for every follower to read."""
        if self.creating is not None or self.metadata is not None or self.protocol is not None:
            return [Change().to_json()]  # every read meets a change of the table's schema
        gen = {g.lower() for g in generated_columns(self.ctx.constraints)}
        out = []
        for op in self.ops:
            ch = op.change() if op.is_write else None
            if ch is not None:
                if ch.columns is not None and gen:  # they follow the columns they read
                    ch = Change(ch.where, tuple(sorted(set(ch.columns) | gen)))
                out.append(ch.to_json())
        if sum(len(d["where"] or "") for d in out) > CHANGES_MAX_CHARS:
            return None
        return out

    def build_commit(self, commit_info: dict) -> Commit:
        adds, removes = self.net_actions()
        writes = [op for op in self.ops if op.is_write]
        commit_info = dict(commit_info)
        commit_info.setdefault("operation", operation_name(writes))
        commit_info.setdefault("isBlindAppend", all(op.blind for op in writes))
        cdc = [c for op in writes for c in op.cdc]
        if self.creating is not None:
            c = self.creating
            assert c.commit_info is not None  # creation_commit always writes one
            info = {**c.commit_info,
                    **{k: v for k, v in commit_info.items() if k in ("timestamp", "lakevilla")}}
            if adds:
                info["operation"] = "CREATE TABLE AS SELECT"
                info["operationMetrics"] = {
                    "numFiles": str(len(adds)),
                    "numOutputRows": str(sum(a.num_records or 0 for a in adds))}
            return Commit(adds=adds, commit_info=info, protocol=self.protocol or c.protocol,
                          metadata=self.metadata or c.metadata, cdc=cdc)
        commit_info.setdefault("readVersion", self.read_version)
        changed = self.updated_columns()
        lv = commit_info.get("lakevilla")
        if changed is not None and isinstance(lv, dict) and lv.get("kind") == InfoKind.COMMIT:
            commit_info["lakevilla"] = {**lv, "updated": changed}
        return Commit(adds=adds, removes=removes, commit_info=commit_info, metadata=self.metadata,
                      protocol=self.protocol, cdc=cdc)
