"""Transactions: the public operations and how each feature set commits them.

``features=""`` (LV[DL]) is plain Delta: each operation is its own Delta commit,
optimistic and conflict-checked at file level, and a block has no atomicity.

With markers (R, CT, I), operations only write data files; the table logs change
at commit:

* R: a marker at the first write to a table orders us behind earlier writers;
  operations are logged to sublogs; on a conflict we undo back to the first
  conflicting operation and redo it on the new snapshot. Each table commits on
  its own (single-table atomicity).
* CT: markers are claimed at commit, all at once, and carry dependency lists;
  cycles and long waits shift markers; a multi-table commit is decided by one
  put-if-absent of the transaction record.
* I: table versions come from the global version log; the announcement (one
  put-if-absent of the next entry) validates and decides.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import logs, parallel
from ..complex_txn import record as records
from ..complex_txn import reservations
from ..complex_txn.dag import Dependencies
from ..complex_txn.decide import decide_by_record
from ..complex_txn.wait import DagWait
from ..data.schemas import table_spec
from ..delta.actions import Commit
from ..delta.creation import creation_commit, new_metadata
from ..delta.features import check_readable, check_writable, is_append_only, protocol_for
from ..delta.log import DeltaLog, VersionExists
from ..delta.snapshot import Snapshot
from ..engines.api import TableContext, data_file_key
from ..errors import (
    CommitPendingError,
    CreateConflictError,
    InvalidArgumentError,
    LakeVillaError,
    PartialCommitError,
    StorageError,
    TableExistsError,
    TransactionAborted,
    TransactionStateError,
)
from ..isolation.cut import Cut
from ..isolation.decide import GlobalDecider
from ..isolation.gvl import PendingWrite
from ..markers.marker import (
    ABORTED,
    COMMITTED,
    ENGINE_INFO,
    FREED,
    RUNNING,
    MarkerLost,
    MarkerPayload,
    commit_txn,
    marker_of,
)
from ..markers.marker import claim as claim_marker
from ..markers.marker import rewrite as rewrite_marker
from ..markers.overtake import QUEUE_AFTER_CONFLICTS, RELIST_AFTER_LOST, overtake_policy
from ..markers.publish import fill_is_safe, publish, publish_create
from ..markers.wait import MarkerWait, WaitContext
from ..names import attempt_id, check_table_name, new_txn_id
from ..recovery import sublog as sublogs
from ..recovery.journal import Journal, JournalContext, NoJournal
from ..recovery.redo import RedoContext, conflict_policy
from ..recovery.stalled import resolve_marker
from ..scan.conflicts import first_conflict
from ..scan.ordering import Ordering
from ..statements import merge as merges
from ..statements.view import Op, TableWork
from ..store import NotFound
from ..vocab import CommitInfo, CommitMode, Decision, InfoKind

if TYPE_CHECKING:
    from ..core.client import LakeClient as Client
    from ..settings import LakeSettings

ISOLATIONS = ("serializable", "snapshot", "write_serializable")
MARKER_SCAN_WINDOW = 200


def parse_features(features: str | Iterable[str] | None) -> frozenset[str]:
    if features is None:
        return frozenset()
    if isinstance(features, str):
        items = [f.strip() for f in features.replace("+", ",").split(",")]
    else:
        items = [str(f).strip() for f in features]
    out = set()
    for f in items:
        if not f:
            continue
        u = f.upper()
        if u in ("DL", "NONE"):
            continue
        if u not in ("R", "CT", "I"):
            raise InvalidArgumentError(f"unknown feature {f!r}: features are any of 'R', 'CT', 'I' (or '' for plain Delta)")
        out.add(u)
    return frozenset(out)


def features_label(features: frozenset[str]) -> str:
    return ",".join(f for f in ("R", "CT", "I") if f in features)


@dataclass
class CommitResult:
    txn_id: str
    versions: dict[str, int] = field(default_factory=dict)  # table -> version that holds our commit
    stats: dict[str, int] = field(default_factory=dict)
    global_version: int | None = None


FULL_READ_EVERY = 0.25  # seconds between waits' re-reads of every running predecessor's marker


class Transaction:
    """One transaction; created by ``Lake.begin`` / ``Lake.transaction``."""

    @property
    def settings(self) -> LakeSettings:
        """The client's settings, read live (a setting changed on the lake applies at once)."""
        return self.lake.settings

    def __init__(self, lake: Client, features: frozenset[str], isolation: str = "serializable", slack: int = 0,
                 commit_mode: str | None = None, txn_id: str | None = None, *, started: float | None = None,
                 attempt_no: int = 0, sublog_seq: int = 0) -> None:
        """``started``, ``attempt_no`` and ``sublog_seq`` continue a transaction resumed from its
        sublogs (``resume_transaction``): its age counts from its first start, its new attempt
        and sublog entries follow the ones already written."""
        if isolation not in ISOLATIONS:
            raise InvalidArgumentError(f"isolation must be one of {ISOLATIONS}, got {isolation!r}")
        if not isinstance(slack, int) or slack < 0:
            raise InvalidArgumentError("slack must be a non-negative integer (table versions)")
        mode = str(CommitMode.parse(commit_mode) if commit_mode else lake.settings.commit_mode)
        self.lake = lake
        self.features = features
        self.R, self.CT, self.I = "R" in features, "CT" in features, "I" in features
        # dependency lists and marker shifts wherever a commit waits on several tables at once
        self.dag = self.CT or self.I
        # what makes a commit durable (vocab.Decision): the global log (I), the record (CT), each table
        self.decision = Decision.GVL if self.I else Decision.RECORD if self.CT else Decision.TABLE
        self.isolation = isolation
        self.slack = slack
        self.mode = mode
        self.id = txn_id or new_txn_id()
        self.attempt_no = attempt_no
        self.attempt = attempt_id(self.id, attempt_no)
        self.tables: dict[str, TableWork] = {}
        self.state = "active"
        self.stats: Counter[str] = Counter()
        now = lake.now()
        self.started = now if started is None else started
        self._seq = 0
        self._deps = Dependencies(self.attempt)
        # LV[I]: the consistent cut this transaction reads; the first global-log entry an abort
        # of our current attempt can be in (recorded in our markers for recovery)
        self._cut = Cut(lake.gvl, lake.log, lake.records, txn_id=self.id) if self.I else None
        self._global = GlobalDecider(lake.gvl, lake.log, lake.records, self._cut) if self._cut is not None else None
        self._mlock = threading.RLock()
        self._slock = threading.Lock()  # stats and sublog numbering, touched from parallel table work
        self._last_beat = now
        self._dl_versions: dict[str, int] = {}
        self._decided = False  # a record or global log entry says COMMITTING: no undo any more
        # a deciding write (tail commit, fill, record, announcement) was attempted and its outcome is
        # not known yet: from here on only the decision may undo anything
        self._in_doubt: str | None = None
        self._committed_tables: dict[str, int] = {}  # table -> version: commits that landed (R: table by table)
        self.result: CommitResult | None = None
        # the parts the features select; after construction the core asks them, not the flags
        self._conflicts = conflict_policy(self.R)
        # R alone at the tail is optimistic: it claims a marker only when it has to queue
        # (_queue); in place it claims at its first write, since the fill goes into the marker's
        # version. Where the DAG orders the markers (CT, I) a transaction claims them at commit,
        # all at once: claimed statement by statement, two transactions that write two tables meet
        # in opposite orders whenever the gap between their statements differs (a cycle, one of
        # them shifts), and a marker held while statements run holds every follower up.
        self._optimistic = self.R and not self.dag and self.mode == CommitMode.TAIL
        self._claim_at_first_write = self.R and not self.dag and not self._optimistic
        self._journal = (Journal if self.R else NoJournal)(JournalContext(
            txn_id=self.id, store=lake.store, attempt=lambda: self.attempt, features=features_label(features),
            isolation=isolation, mode=mode, count=self._count,
            stage_source=lambda spec, table, seq: merges.stage_source(lake.store, spec, table, self.id, seq)),
            seq=sublog_seq, behind=self._optimistic)  # its commit needs no entry: they go out behind
        # the global log announces table commits; a table it does not know yet has none to announce
        self._creates_tables = self.decision != Decision.GVL
        # a marker recovery freed: claimed again where each table decides alone; where a record
        # or the global log decides, the attempt may be aborted there, so a new attempt
        self._on_lost_markers: Callable[[list[TableWork]], None] = (
            self._reclaim if self.decision == Decision.TABLE else lambda lost: self._new_attempt())
        self._waits = DagWait() if self.dag else MarkerWait()
        self._overtake = overtake_policy(self.decision, self.mode, self._count, lake.map, lake.background)
        self._decide = {Decision.GVL: self._commit_global, Decision.RECORD: self._commit_record_or_table,
                        Decision.TABLE: self._commit_per_table}[self.decision]
        self._redo_ctx = RedoContext(
            txn_id=self.id, engine=lake.engine, write_sublog=self._journal.write, count=self._count,
            redone=lambda table, version, why, ops: logs.redone(self, table, version, why, ops))

    # -- public API ------------------------------------------------------------
    @property
    def uses_markers(self) -> bool:
        """Whether a statement waits for others' markers (False only for plain Delta, LV[DL])."""
        return True

    def read(self, table: str, where: str | None = None, columns: list[str] | None = None, *,
             order_by: str | list[str] | None = None, limit: int | None = None) -> Any:
        """Rows of ``table`` matching ``where``: pyarrow.Table (embedded) or DataFrame (Spark).
        ``order_by`` ("col", "col DESC" or a list) with ``limit``: only the first rows, so a
        conflict that leaves them as they were is redone, not aborted (``ordering.py``)."""
        self._check_active()
        if columns is not None and (isinstance(columns, str) or not all(isinstance(c, str) for c in columns)):
            raise InvalidArgumentError("columns must be a list of column names")
        order = Ordering.parse(order_by, limit)
        op = self._new_op("read", table, where=where, columns=list(columns) if columns else None, order=order)
        return self._execute(op)

    def insert(self, table: str, data: Any, schema_mode: str | None = None) -> int:
        """Append rows; returns how many. ``data``: pyarrow, pandas, dict of columns, list of rows
        (or a Spark DataFrame with the Spark engine). ``schema_mode="merge"``: columns of
        ``data`` the table lacks are added (nullable) in the same commit, as Delta's mergeSchema."""
        self._check_active()
        if schema_mode not in (None, "merge"):
            raise InvalidArgumentError(f"schema_mode must be None or 'merge', got {schema_mode!r}")
        op = self._new_op("insert", table, options={"schema_mode": "merge"} if schema_mode else None)
        self._execute(op, data)
        return op.rows

    def update(self, table: str, set: dict[str, str], where: str | None = None) -> int:  # noqa: A002
        """``set`` maps columns to SQL expressions over the row; returns rows updated."""
        self._check_active()
        if not isinstance(set, dict) or not set:
            raise InvalidArgumentError("update needs set={column: 'sql expression', ...}")
        op = self._new_op("update", table, where=where, assignments={str(k): str(v) if not isinstance(v, str) else v
                                                                       for k, v in set.items()})
        self._execute(op)
        return op.rows

    def delete(self, table: str, where: str | None = None) -> int:
        self._check_active()
        op = self._new_op("delete", table, where=where)
        self._execute(op)
        return op.rows

    def merge(self, table: str, source: Any, on: str | list[str], *, source_alias: str = "source",
              target_alias: str = "target", schema_mode: str | None = None) -> merges.MergeBuilder:
        """MERGE ``source`` (pyarrow, pandas, list of row dicts; a Spark DataFrame with the Spark
        engine) into ``table``: ``on`` is a predicate over ``target.``/``source.`` columns or a
        list of key columns both have. Add ``when_matched_update[_all]``,
        ``when_matched_delete``, ``when_not_matched_insert[_all]`` clauses, then ``.execute()``.
        ``schema_mode="merge"`` (delta-rs' ``merge_schema=True``): the source's columns the table
        lacks are added first, nullable, by an ``add_columns`` statement of this transaction."""
        self._check_active()
        check_table_name(table)
        if schema_mode not in (None, "merge"):
            raise InvalidArgumentError(f"schema_mode must be None or 'merge', got {schema_mode!r}")
        return merges.MergeBuilder(self, table, source, on, source_alias, target_alias, schema_mode)

    def _run_merge(self, table: str, source: Any, on: Any, clauses: list, source_alias: str,
                   target_alias: str, schema_mode: str | None = None) -> dict[str, int]:
        self._check_active()
        source = merges.source_arrow(source)
        if schema_mode == "merge":
            self._add_source_columns(table, source)
        spec = merges.MergeSpec(on=on, clauses=list(clauses), source_alias=source_alias,
                                target_alias=target_alias, source=source)
        op = self._new_op("merge", table, merge=spec)
        return self._execute(op)

    def _add_source_columns(self, table: str, source: Any) -> None:
        from ..statements.evolution import data_fields

        try:  # the view the merge then runs on (cached in self.tables); "" reads the newest, as each statement does
            current = self._current_schema(table)
        except StorageError as e:
            self._abort_quietly()
            raise TransactionAborted(f"merge into {table!r} failed because the store did ({e}); transaction "
                                     f"{self.id} is aborted", txn_id=self.id, reason="storage") from e
        have = {n.lower() for n in current.names}
        new = [f for f in data_fields(source) if f.name.lower() not in have]
        if new:
            self.add_columns(table, new)

    def _current_schema(self, table: str) -> Any:
        return self._table(table).schema  # the view the statement runs on (cached in self.tables)

    def overwrite(self, table: str, data: Any, where: str | None = None) -> int:
        """Replace the whole table with ``data``, or (``where``) the rows the predicate selects, as
        Delta's ``replaceWhere``: every row of ``data`` must satisfy ``where``
        (``DataOutsidePredicateError`` otherwise, nothing written); rows outside it stay, even in
        files that also hold replaced rows. Returns the rows written. Under R a conflicting
        overwrite is redone on the newer snapshot with the same new rows."""
        self._check_active()
        op = self._new_op("overwrite", table, where=where)
        self._execute(op, data)
        return op.rows

    def add_columns(self, table: str, fields: Any) -> None:
        """Add nullable columns (a pyarrow schema, field or list of fields, or a dict name -> type)
        as a metaData action in this transaction's commit of ``table``; later statements see them,
        rows already written read NULL there. An existing name or a non-nullable field is a
        ``SchemaEvolutionError``. Delta's rule holds: a concurrent commit that changed the
        table's metadata conflicts with ours, and ours with every concurrent writer."""
        from ..statements.evolution import requested_fields

        self._check_active()
        op = self._new_op("add_columns", table, options={"fields": requested_fields(table, fields)})
        self._execute(op)

    def optimize(self, table: str, where: str | None = None, target_file_size: int | None = None) -> dict[str, Any]:
        """Compact ``table``'s small files (Delta's OPTIMIZE bin-packing), per partition; ``where``
        selects partitions (partition columns only); ``target_file_size`` in bytes (default: the
        table's ``delta.targetFileSize``, else 100 MiB). Rows do not change (``dataChange: false``).
        Conflicts only with a concurrent change to the files it compacts; under R that is redone
        on what is left. Returns metrics: files_removed, files_added, bytes, partitions."""
        from ..statements import optimize as compaction

        self._check_active()
        if target_file_size is not None:
            compaction.target_size(None, target_file_size)  # bad input fails before anything runs
        op = self._new_op("optimize", table, where=where,
                          options={"target_file_size": target_file_size} if target_file_size is not None else None)
        self._execute(op)
        return compaction.metrics(op)

    def create_table(self, name: str, schema: Any = None, partition_by: list[str] | str | None = None, *,
                     data: Any = None, properties: dict[str, str] | None = None, if_not_exists: bool = False,
                     description: str | None = None) -> int:
        """Create a table inside the transaction (``lake.create_table``'s arguments); returns the
        rows it was created with. Its version 0 is written only if the transaction commits (with
        CT, atomically with the other tables); until then later statements of this transaction
        read and write it as an empty table, nobody else sees it. The name is reserved now, so a
        concurrent creator of the same name gets ``TableExistsError`` (see ``reservations.py``).
        With ``features=""`` every statement commits when it runs, and so does this one."""
        self._check_active()
        check_table_name(name)
        if not self._creates_tables:
            raise InvalidArgumentError(
                "create_table inside a transaction with feature I is not supported yet: create the table first "
                "(lake.create_table) or create it in an 'R' or 'R,CT' transaction")
        tw = self.tables.get(name)
        log = self.lake.log(name)
        try:
            if tw is not None or log.latest_version() >= 0:
                if if_not_exists:
                    return 0
                raise TableExistsError(f"table {name!r} already exists" + (" (created in this transaction)"
                                                                            if tw is not None and tw.creating else ""))
            tschema, parts = table_spec(name, schema, partition_by, data)
            metadata = new_metadata(tschema, parts, properties, description)
            snap = Snapshot(name, -1, protocol_for(tschema), metadata, {})
            tw = TableWork(name, log, snap, self._ctx(name, snap))
            tw.creating = creation_commit(metadata, [], with_data=False)
            self._hold_name(tw)  # a second creator learns now, not at its commit
        except StorageError as e:
            self._abort_quietly()
            raise TransactionAborted(f"create_table({name!r}) failed because the store did ({e}); transaction "
                                     f"{self.id} is aborted", txn_id=self.id, reason="storage") from e
        self.tables[name] = tw
        self.lake.heartbeats.watch(self)
        self.stats["create_table"] += 1
        return self.insert(name, data) if data is not None else 0

    def commit(self) -> CommitResult:
        self._check_active()
        self.state = "committing"
        try:
            result = self._commit()
        except BaseException as e:
            if self._decided or self._in_doubt:
                # the decision is durable, or may be: undoing now could destroy data that a
                # committed version references or that recovery must roll forward. Nothing is
                # deleted and no marker rewritten; the markers expire and recovery settles it.
                self.state = "decided" if self._decided else "in-doubt"
                self.lake.heartbeats.forget(self)
                if isinstance(e, Exception) and not isinstance(e, CommitPendingError | CreateConflictError):
                    raise self._pending_error(e) from e
                raise
            self._abort_quietly()
            if self._committed_tables and isinstance(e, Exception) and not isinstance(e, PartialCommitError):
                raise PartialCommitError(
                    f"{e} -- but {', '.join(sorted(self._committed_tables))} already committed: with features "
                    f"{features_label(self.features)!r} each table commits on its own; use 'R,CT' for "
                    "all-or-nothing across tables",
                    committed=dict(self._committed_tables), txn_id=self.id) from e
            if isinstance(e, StorageError):  # before any decision: nothing of it is visible
                raise TransactionAborted(f"transaction {self.id} could not commit because the store failed ({e}); "
                                         "nothing of it is visible", txn_id=self.id, reason="storage") from e
            raise
        self.state = "committed"
        self.lake.heartbeats.forget(self)
        self.result = result
        return result

    def abort(self) -> None:
        if self.state in ("committed", "aborted"):
            if self.state == "committed":
                raise TransactionStateError(f"transaction {self.id} is already committed")
            return
        if self.state in ("decided", "in-doubt"):
            raise TransactionStateError(f"transaction {self.id} cannot be aborted: its commit is {self.state} "
                                        "(lake.recover() settles it)")
        self._abort_quietly()

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            if self.state == "active":
                self.commit()
        elif self.state not in ("committed", "aborted"):
            self._abort_quietly()
        return False

    def __repr__(self) -> str:
        return f"<Transaction {self.id} features={features_label(self.features) or 'DL'} {self.state}>"

    @property
    def operations(self) -> list[dict[str, Any]]:
        """The writes this transaction holds, in order (after ``lake.resume``: those recovered
        from its sublogs, so the client knows which of its steps still need issuing)."""
        ops = sorted((op for tw in self.tables.values() for op in tw.ops if op.is_write), key=lambda o: o.seq)
        return [{"kind": op.kind, "table": op.table, "where": op.where, "set": op.assignments, "rows": op.rows}
                for op in ops]

    def cut_report(self) -> dict[str, Any]:
        """Where an I transaction's consistent cut stands (global-log entries it started from and
        examined last, table versions fixed, counters), so that a wrong read can be traced; empty
        without I."""
        if self._cut is None:
            return {}
        return {"cut_base": self._cut.base_seq, "cut_last": self._cut.last_seq, "cut_tables": dict(self._cut.finals),
                "cut_stats": dict(self._cut.stats)}

    # -- operations ------------------------------------------------------------
    def _check_active(self) -> None:
        if self.state != "active":
            raise TransactionStateError(f"transaction {self.id} is {self.state}")

    def _pending_error(self, cause: BaseException) -> CommitPendingError:
        committed = dict(self._committed_tables)
        if self._decided:
            msg = (f"transaction {self.id} is committed (decided) but writing its table commits failed ({cause}); "
                   "lake.recover() or any transaction that meets its markers finishes it")
        else:
            msg = (f"transaction {self.id}: the outcome of {self._in_doubt} could not be learned ({cause}); it may "
                   "or may not have committed. Nothing was undone; lake.recover() settles it once its markers "
                   "expire. Do not re-run it blindly")
        return CommitPendingError(msg, txn_id=self.id, decided=self._decided, committed=committed)

    def _check_age(self, started: float | None = None) -> None:
        """Refuse a deciding write after ``max_transaction_age``: maintenance keeps files at least
        that long, so a transaction older than it may reference files already deleted."""
        age = self.lake.now() - (self.started if started is None else started)
        if age > self.settings.max_transaction_age:
            raise TransactionAborted(
                f"transaction {self.id} has been open for {age:.0f}s, longer than the lake's max_transaction_age "
                f"({self.settings.max_transaction_age:.0f}s); maintenance may have deleted its data files, so it cannot "
                "commit", txn_id=self.id, reason="too-old")

    def _post_commit(self, what: str, fn, *args) -> None:
        """A step after our commit landed (marker close, checkpoint, record close): a failure
        is counted, never raised; the commit stands and recovery or a later commit finishes it."""
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - whatever failed, the commit itself has landed
            self._count("post_commit_failures")
            self._count(f"post_commit_failures_{what}")

    def _new_op(self, kind: str, table: str, **kw) -> Op:
        check_table_name(table)
        self._seq += 1
        return Op(seq=self._seq, kind=kind, table=table, **kw)

    def _ctx(self, name: str, snap) -> TableContext:
        return TableContext(name=name, store=self.lake.store, lake_uri=self.lake.root_uri, schema=snap.schema,
                            partition_columns=tuple(snap.partition_columns))

    def _validate_op(self, tw: TableWork, op: Op) -> None:
        eng = self.lake.engine
        if op.kind == "read":
            if op.where is not None:
                eng.validate_where(tw.ctx, op.where)
            if op.order is not None:
                op.order.check(tw.schema.names, tw.name)
        elif op.kind == "update":
            eng.validate_set(tw.ctx, op.assignments or {}, op.where)
        elif op.kind in ("delete", "overwrite") and op.where is not None:
            eng.validate_where(tw.ctx, op.where)
        elif op.kind == "merge":
            src = op.merge.source_table(self.lake.store)
            op.merge.on = merges.on_predicate(op.merge.on, tw.schema, src.schema, op.merge.target_alias,
                                              op.merge.source_alias)
            cm = merges.check(op.merge, tw.name, tw.schema, src.schema)
            op.where = merges.prune_predicate(cm, src, tuple(tw.base.partition_columns))
        elif op.kind == "optimize":
            from ..statements.optimize import check_where

            check_where(tw.name, op.where, tw.schema, tw.base.partition_columns)
        if op.is_write:
            check_writable(tw.name, tw.base.protocol, tw.base.metadata)
            if op.kind not in ("insert", "optimize", "add_columns") and is_append_only(tw.base.metadata):
                from ..errors import UnsupportedTableFeatureError

                raise UnsupportedTableFeatureError(tw.name, "appendOnly", f"{op.kind} is not allowed")

    def _execute(self, op: Op, data: Any = None) -> Any:
        try:
            return self._execute_op(op, data)
        except StorageError as e:
            # nothing of this statement is decided: the transaction ends here, as an abort
            self._abort_quietly()
            done = (f"; statements that already committed stay ({', '.join(sorted(self._dl_versions))})"
                    if self._dl_versions else "")
            raise TransactionAborted(f"{op.kind} on {op.table!r} failed because the store did ({e}); transaction "
                                     f"{self.id} is aborted{done}", txn_id=self.id, reason="storage") from e

    def _execute_op(self, op: Op, data: Any = None) -> Any:
        self.heartbeat()
        tw = self._table(op.table, op)
        self._validate_op(tw, op)
        # Bad input fails inside run() before anything is written (the engine cleans up its own
        # partial writes), so the marker comes after: its data is not reachable before commit anyway.
        result = tw.run(self.lake.engine, op, data)
        tw.ops.append(op)
        first = op.is_write and tw.marker is None and tw.creating is None and self._claim_at_first_write
        if op.kind == "read":
            self._journal.read(op.table, tw.base.version, sorted(op.read_files), op.where)
        elif first and self._journal.together_with_claim(op):
            # The marker and the sublog entry go out together (one round trip, not two). The
            # pipeline statements keep the order: a logical MERGE stages its source, and their
            # first entries stay physical when nobody precedes.
            self._together(lambda: self._claim_first_marker(tw), lambda: self._journal.statement(tw, op, True))
        else:
            if first:
                self._claim_first_marker(tw)
            # claimed at commit: whether a predecessor will make the entry logical is not known yet
            self._journal.statement(tw, op, not self._claim_at_first_write and self._journal.together_with_claim(op))
        self.stats[op.kind] += 1
        return result

    def _table(self, name: str, op: Op | None = None) -> TableWork:
        tw = self.tables.get(name)
        if tw is not None:
            return tw
        log = self.lake.log(name)
        if self._cut is not None:
            if not self._cut.knows(name):  # joining the global log writes an entry: refuse bad input first
                newest = log.snapshot()
                check_readable(name, newest.protocol, newest.metadata)
                if op is not None:
                    self._validate_op(TableWork(name, log, newest, self._ctx(name, newest)), op)
            # every table at the versions of one cut of the global order (isolation/cut.py)
            snap = log.snapshot(self._cut.version_of(name), list_log=False)
        else:
            snap = log.snapshot()
        check_readable(name, snap.protocol, snap.metadata)
        tw = TableWork(name, log, snap, self._ctx(name, snap))
        self.tables[name] = tw
        return tw

    def _commit_info(self, ntables: int, **more: Any) -> dict[str, Any]:
        return CommitInfo(txn=self.id, attempt=self.attempt, features=features_label(self.features),
                          decision=self.decision, tables=ntables, **more).to_json()

    # -- markers -----------------------------------------------------------------
    def _payload(self, table: str) -> MarkerPayload:
        now = self.lake.now()
        return MarkerPayload(
            txn=self.id, attempt=self.attempt, table=table, decision=self.decision, mode=self.mode,
            features=features_label(self.features), deps=sorted(self._deps.transitive), epoch=self._deps.epoch,
            markers={t: w.marker.version for t, w in self.tables.items() if w.marker is not None},
            started=self.started, heartbeat=now, expires=now + self.settings.marker_ttl,
            gvl_base=self._global.base if self._global is not None else None,
        )

    @staticmethod
    def _together(*calls: Callable[[], None]) -> None:
        """Run independent requests at once (the last on this thread, the others in the I/O pool:
        a thread each per commit attempt cost the CPU that contended commits need); once all
        ended, the first error is raised (a process death, which the fault tests model as a
        BaseException, before any other)."""
        futures = [parallel.submit(fn) for fn in calls[:-1]]
        try:
            calls[-1]()
        finally:
            wait_futures(futures)
        failed = [e for f in futures if (e := f.exception()) is not None]
        if failed:
            raise next((e for e in failed if not isinstance(e, Exception)), failed[0])

    def _claim_first_marker(self, tw: TableWork, publish: bool = False) -> None:
        if self._global is not None:
            self._global.note_claim()
        self._claim(tw, publish=publish)
        self.lake.heartbeats.watch(self)

    def _claim(self, tw: TableWork, start: int | None = None, publish: bool = False) -> None:
        """Claim a marker at the tail of ``tw``'s log and learn who precedes us there."""
        self._claim_many([tw], start, publish)

    def _claim_many(self, tws: list[TableWork], start: int | None = None, publish: bool = False) -> None:
        """Claim markers on several tables at once (in parallel), then apply rules II/III once.
        ``publish``: our statements there are done, the markers carry our footprints at once."""

        def one(tw: TableWork) -> list[tuple[int, MarkerPayload]]:
            with self._mlock:
                payload = self._payload(tw.name)
                if publish:
                    payload.footprint = self._overtake.claim_footprint(tw)
            first = start if start is not None else max(tw.log.known_latest(), tw.base.version) + 1
            h = claim_marker(tw.log, first, payload)  # collisions move us forward
            with self._mlock:
                tw.marker = h
            self._count("markers")
            preds = self._running_predecessors(tw)
            if preds:
                tw.logical = True
            return preds

        found = self.lake.map(one, tws)
        self._waits.claimed(self._wait_ctx(), tws, found)  # with a DAG: rules II/III now

    def _running_predecessors(self, tw: TableWork) -> list[tuple[int, MarkerPayload]]:
        """Running markers below ours (without one: below the tail we know), excluding our own,
        and excluding those whose owner's commit to this table has landed: that commit is the
        owner's decision here (its marker closes after it, off the owner's latency path), and
        we validate against it."""
        m = tw.marker.version if tw.marker is not None else tw.log.known_latest() + 1
        lo = max(-1, m - MARKER_SCAN_WINDOW, tw.log.last_checkpoint_version() - 1)
        out = []
        candidates: list[tuple[int, MarkerPayload]] = []  # running as we last read them
        landed: set[str] = set()
        for v, c in tw.log.commits_between(lo, m - 1):
            p = marker_of(c)
            if p is not None and p.state == RUNNING and p.attempt != self.attempt and p.txn != self.id:
                candidates.append((v, p))
            elif (a := commit_txn(c)) is not None:
                landed.add(a)
        # Predecessors resolve mostly in order, and while the lowest one that cannot be overtaken
        # runs we wait whatever the others do: a round re-reads markers upwards up to that one and
        # keeps the cached state of those above, all of them again every FULL_READ_EVERY seconds
        # (at most an eighth of a marker's ttl, so a cached one never looks expired). A stale
        # "running" only makes us wait longer; a commit of theirs is seen by the probe below.
        now = time.monotonic()
        full = now - tw.markers_read_at >= min(FULL_READ_EVERY, self.settings.marker_ttl / 8)
        if full:
            tw.markers_read_at = now
        blocked = False
        for v, cached in candidates:
            if blocked:
                out.append((v, cached))
                continue
            c, _ = tw.log.read_commit_raw(v)  # its state may have changed since we cached it
            p = marker_of(c)
            if p is not None and p.state == RUNNING:
                out.append((v, p))
                blocked = not full and p.footprint is None
        if out:  # a commit above our marker (or what we know) may be theirs: one GET when nothing is new
            top = m if tw.marker is not None else m - 1
            newest = tw.log.probe_versions(max(top, tw.log.known_latest()))
            landed.update(a for _, c in tw.log.commits_between(top, newest) if (a := commit_txn(c)) is not None)
            done = [(v, p) for v, p in out if p.attempt in landed]
            if done:
                self._count("waits_ended_by_commit", len(done))
                out = [(v, p) for v, p in out if p.attempt not in landed]
        return self._overtake.must_wait(tw, out)  # with none running, forgets those that finished

    def _publish_deps(self) -> None:
        if not self._deps.needs_publish():
            return
        deps = self._deps.mark_published()
        with self._mlock:
            held = [tw for tw in self.tables.values() if tw.marker is not None and not tw.marker.lost]
            where = {t: w.marker.version for t, w in self.tables.items() if w.marker}

            def one(tw: TableWork) -> None:
                tw.marker.payload.deps = deps
                tw.marker.payload.markers = where
                try:
                    rewrite_marker(tw.log, tw.marker)
                    self._count("marker_rewrites")
                except MarkerLost:
                    pass

            self.lake.map(one, held)  # each marker has its own etag: rewrites are independent

    def _shift_markers(self, why: str, kind: str) -> None:
        """Rule IV: free every marker and claim new ones at the tails; read versions stay.
        ``kind`` (cycle, no_progress, timeout, new_attempt) is counted as ``shifts_<kind>``."""
        self.stats["shifts"] += 1
        self.stats["shifts_" + kind] += 1
        self._deps.shifted()  # the new markers carry the new epoch and no dependencies yet
        with self._mlock:
            old = {t: tw.marker for t, tw in self.tables.items() if tw.marker is not None}
            for t, h in old.items():
                tw = self.tables[t]
                tw.old_markers.append(h)
                h2 = claim_marker(tw.log, tw.log.known_latest() + 1, self._payload(t))
                tw.marker = h2
                self.stats["markers"] += 1
                if not h.lost:
                    h.payload.state = FREED
                    h.payload.reason = f"shift: {why}"
                    try:
                        rewrite_marker(tw.log, h)
                    except MarkerLost:
                        pass
        for tw in self.tables.values():
            if tw.marker is None:
                continue
            preds = self._running_predecessors(tw)
            if preds:
                tw.logical = True
            self._deps.observe(tw.name, [p for _, p in preds])
        self._publish_deps()
        logs.shifted(self, why)

    def heartbeat(self, force: bool = False) -> None:
        now = self.lake.now()
        if not force and now - self._last_beat < self.settings.marker_ttl / 3:
            return
        if not self._mlock.acquire(blocking=False):
            return
        failed: Exception | None = None
        try:
            for tw in list(self.tables.values()):
                if tw.creating is not None and tw.reservation_etag is not None:
                    try:
                        self._refresh_name(tw, now)
                    except Exception as e:  # noqa: BLE001 - retried on the next beat
                        self._count("heartbeat_failures")
                        failed = e
                h = tw.marker
                if h is None:
                    continue
                # the state check and the rewrite are one critical section: the commit path
                # changes the state (close, fill) only while holding h.lock too
                with h.lock:
                    if h.lost or h.payload.state != RUNNING:
                        continue
                    h.payload.heartbeat = now
                    h.payload.expires = now + self.settings.marker_ttl
                    try:
                        rewrite_marker(tw.log, h)
                        self._count("heartbeats")
                    except MarkerLost:
                        self._count("markers_lost")
                    except Exception as e:  # noqa: BLE001 - retried on the next beat, other tables go on
                        self._count("heartbeat_failures")
                        failed = e
            if failed is None:
                self._last_beat = now  # a failed beat is retried on the next round, not a third of a ttl later
        finally:
            self._mlock.release()

    def _own_versions(self, tw: TableWork) -> set[int]:
        vs = {h.version for h in tw.old_markers}
        if tw.marker is not None:
            vs.add(tw.marker.version)
        return vs

    # -- tables this transaction creates (reservations.py) ------------------------------
    def _reservation(self, tw: TableWork, now: float) -> reservations.Reservation:
        return reservations.Reservation(table=tw.name, holder=self.attempt, txn=self.id, kind="record",
                                        created=self.started, expires=now + self.settings.marker_ttl)

    def _hold_name(self, tw: TableWork) -> None:
        """Hold (or confirm, under our current attempt) the reservation of a name we create,
        and check that the table does not exist yet."""
        now = self.lake.now()
        tw.reservation_etag = reservations.hold(self.lake.store, self._reservation(tw, now),
                                                lambda: tw.log.latest_version() >= 0, now=now,
                                                etag=tw.reservation_etag)

    def _refresh_name(self, tw: TableWork, now: float) -> None:
        from ..store import NotFound, PreconditionFailed

        try:
            tw.reservation_etag = self.lake.store.put_if_match(
                reservations.reservation_key(tw.name), self._reservation(tw, now).to_bytes(), tw.reservation_etag)
            self._count("heartbeats")
        except (PreconditionFailed, NotFound):
            tw.reservation_etag = None  # taken over (we were stalled): the commit finds out and aborts

    def _release_names(self, outcome: str) -> None:
        for tw in self.tables.values():
            if tw.creating is not None and tw.reservation_etag is not None:
                reservations.release(self.lake.store, tw.name, self.attempt, outcome)

    # -- sublogs ------------------------------------------------------------------
    def _count(self, key: str, n: int = 1) -> None:
        with self._slock:
            self.stats[key] += n

    # -- waiting for predecessors ---------------------------------------------------
    def _wait_predecessors(self, tws: list[TableWork]) -> None:
        """Wait until no running marker precedes ours in any of ``tws`` (the wait policy:
        recovery/wait.py, with the DAG's cycle checks and shifts in complex_txn/wait.py)."""
        self._waits.wait(self._wait_ctx(), tws)

    def _wait_ctx(self) -> WaitContext:
        lake = self.lake
        return WaitContext(
            txn_id=self.id, wait_timeout=lake.settings.wait_limit, poll_max=lake.settings.poll_max,
            shift_timeout=lake.settings.shift_timeout, max_shifts=lake.settings.max_shifts, now=lake.now,
            heartbeat=self.heartbeat, check_held=self._check_markers_held,
            predecessors=lambda tws: lake.map(self._running_predecessors, tws),
            recover=lambda table, v: resolve_marker(lake.services(), table, v).outcome,
            count=self._count, waited=lambda who, secs: logs.waited(self, who, secs),
            deps=lambda: self._deps, attempt=lambda: self.attempt, shift=self._shift_markers,
            publish_deps=self._publish_deps, publish_footprint=self._overtake.publish,
            abort_if_doomed=self._abort_if_doomed)

    def _check_markers_held(self, tws: list[TableWork]) -> None:
        """If a recovering client freed one of our markers, claim a new one (and, when a
        record or the global log decides, a new attempt: the old one may be aborted)."""
        lost = [tw for tw in tws if tw.marker is not None and tw.marker.lost]
        if not lost:
            return
        logs.marker_taken(self, [tw.name for tw in lost])
        self._on_lost_markers(lost)

    def _reclaim(self, lost: list[TableWork]) -> None:
        """Each table decides on its own: nothing of ours can have been decided, claim again."""
        for tw in lost:
            tw.old_markers.append(tw.marker)
            self._claim(tw)

    def _new_attempt(self) -> None:
        self.attempt_no += 1
        if self.attempt_no > self.settings.max_retries:
            raise TransactionAborted("our markers were freed by recovery too often", txn_id=self.id,
                                     reason="preempted")
        self.attempt = attempt_id(self.id, self.attempt_no)
        self._deps = Dependencies(self.attempt)
        self.stats["attempts"] += 1
        self._shift_markers("new attempt after our markers were freed", "new_attempt")

    # -- validation and redo -------------------------------------------------------
    def _foreign_commits(self, tw: TableWork, upto: int) -> list[tuple[int, Commit]]:
        own = self._own_versions(tw)
        out = []
        for v in sorted(tw.recheck - own):
            if v > tw.validated_upto:
                continue  # in the range below anyway
            c = tw.log.read_commit(v)  # unstable versions are re-read
            m = marker_of(c)
            if m is None:
                out.append((v, c))  # filled in place after we read it as empty
                tw.recheck.discard(v)
            elif m.state != RUNNING:
                tw.recheck.discard(v)
        return out + self._landed_since(tw, tw.validated_upto, upto, own)

    def _landed_since(self, tw: TableWork, lo: int, upto: int, own: set[int]) -> list[tuple[int, Commit]]:
        """Other transactions' commits in (lo, upto] (markers and our own versions left out)."""
        return [(v, c) for v, c in tw.log.commits_between(lo, upto)
                if v not in own and commit_txn(c) != self.attempt and marker_of(c) is None]

    def _abort_if_doomed(self, tws: list[TableWork]) -> None:
        """While we wait: a commit that landed since we validated and that conflicts beyond what
        a redo can fix (without R any conflict; with R a read whose rows the client holds and
        that returns other rows now, or one that cannot be compared) aborts us now, not after
        the wait; our markers close sooner and hold up nobody. Redoable conflicts wait for the
        full validation after the wait, so a redo runs once against all predecessors. The
        commits were just read by the wait round; only a kept read's re-run costs requests."""
        for tw in tws:
            upto = tw.log.known_latest()
            lo = max(tw.validated_upto, tw.doom_checked)
            if upto <= lo:
                continue
            landed = self._landed_since(tw, lo, upto, self._own_versions(tw))
            tw.doom_checked = upto
            fps = tw.footprints()
            hit = first_conflict(fps, landed, tw.schema, tw.base.partition_columns)
            if hit is None:
                continue
            k, version, why = hit
            doomed = self._conflicts.doomed(tw, k)
            if not doomed and not (self.R and self._read_changed(tw, k, fps, landed, upto)):
                continue
            self._count("conflicts", 1)
            self._count("aborted_while_waiting", 1)
            if doomed:
                self._conflicts.on_conflict(self._redo_ctx, tw, k, version, why, upto)  # raises
            raise TransactionAborted(f"{tw.name}: a commit up to version {upto} invalidates a read whose result "
                                     "this transaction already returned (its rows differ now); re-run it "
                                     "(lake.run does)", txn_id=self.id, reason="consumed-read")

    def _reread(self, tw: TableWork, k: int, fps: list, commits: list[tuple[int, Commit]],
                upto: int) -> Iterator[bool | None]:
        """For each op at or after ``ops[k]`` that ``commits`` conflict with: whether it is a
        kept read that returns other rows at ``upto`` (None: it cannot be told). Lazy, so a
        caller that has its answer stops re-running reads."""
        snap = None
        for i in range(k, len(tw.ops)):
            if first_conflict([fps[i]], commits, tw.schema, tw.base.partition_columns) is None:
                continue
            if tw.ops[i].kind != "read" or tw.ops[i].returned is None:
                yield None
                continue
            snap = snap or tw.log.snapshot(upto)
            yield tw.read_would_change(self.lake.engine, i, snap)

    def _read_changed(self, tw: TableWork, k: int, fps: list, landed: list[tuple[int, Commit]], upto: int) -> bool:
        """A kept read at or after ``ops[k]`` that a landed commit conflicts with and that would
        return other rows at ``upto``: its redo after the wait would abort, so abort now."""
        return any(changed is True for changed in self._reread(tw, k, fps, landed, upto))

    def _reads_hold(self, tw: TableWork, commits: list[tuple[int, Commit]], version: int) -> bool:
        """R1 by value, for a table we only read: every op that ``commits`` conflict with is a
        kept read that returns the same rows at ``version`` (as a redo's read must,
        ``read_results.py``), so we may be serialized after those commits."""
        if any(o.is_write for o in tw.ops):
            return False
        return all(changed is False for changed in self._reread(tw, 0, tw.footprints(), commits, version))

    def _validate_table(self, tw: TableWork, upto: int | None = None) -> bool:
        """Check our ops against every commit since we last validated; redo (R) or abort.
        True if a commit conflicted (and we redid)."""
        conflicted = False
        for _ in range(self.settings.max_retries + 1):
            latest = tw.log.newest() if upto is None else upto
            if latest <= tw.validated_upto:
                return conflicted
            hit = first_conflict(tw.footprints(), self._foreign_commits(tw, latest), tw.schema,
                                 tw.base.partition_columns)
            if hit is None:
                tw.validated_upto = latest
                return conflicted
            k, version, why = hit
            self._count("conflicts", 1)
            self._conflicts.on_conflict(self._redo_ctx, tw, k, version, why, latest)  # redo (R) or abort
            conflicted = True
            if upto is None:
                continue
            return conflicted
        raise TransactionAborted(f"{tw.name}: conflicts kept recurring", txn_id=self.id, reason="retries")

    # -- commit ---------------------------------------------------------------------
    def _commit(self) -> CommitResult:
        written = [tw for tw in self.tables.values() if tw.written]
        if not written:
            self._commit_read_only()
            return CommitResult(self.id, {}, dict(self.stats), self._cut.last_seq if self._cut else None)
        return self._decide(written)

    def _commit_record_or_table(self, written: list[TableWork]) -> CommitResult:
        """CT: several tables decide by one record; a single table by its own commit."""
        unclaimed = [tw for tw in written if tw.marker is None and tw.creating is None]
        if unclaimed:
            self._claim_many(unclaimed)  # all at once: the window in which a cycle can form is one round trip
            self.lake.heartbeats.watch(self)
        return self._commit_record(written) if len(written) > 1 else self._commit_per_table(written)

    def _commit_create(self, tw: TableWork) -> int:
        """A created table outside a CT commit decides by a record of its own (one intent), so
        that the name's reservation can fence it like any other creating transaction."""
        def prepare() -> dict[str, records.TableIntent]:
            self._hold_name(tw)
            return self._intents([tw])

        decided = decide_by_record(self.lake.store, _Deciding(self), prepare, self.settings.max_retries)
        self._decided = True
        v = publish_create(tw.log, self.attempt, Commit.from_bytes(decided.tables[tw.name].commit.encode()))
        self._decided = False  # landed: later tables of an R commit are decided on their own
        self._landed(tw, v)
        self._post_commit("record", records.finish, self.lake.store, decided)
        self._post_commit("release", reservations.release, self.lake.store, tw.name, self.attempt, "committed")
        return v

    def _commit_read_only(self) -> None:
        """Nothing to do: an I transaction that only read saw one consistent cut, a prefix of
        the global order, so it needs no validation in any isolation mode and never aborts."""
        if self._cut is not None:
            for k, n in self._cut.stats.items():
                self.stats["cut_" + k] += n

    # R (and single-table CT): each table decides by its own commit ------------------
    def _commit_per_table(self, written: list[TableWork]) -> CommitResult:
        # a failure after an earlier table committed becomes a PartialCommitError in commit()
        for tw in sorted(written, key=lambda w: w.name):
            if tw.creating is not None:
                self._journal.flush()  # a record decides a creation: every entry lands before it
                self._commit_create(tw)
            else:
                self._commit_one_table(tw)
        self._cleanup_after_commit()
        return CommitResult(self.id, dict(self._committed_tables), dict(self.stats))

    def _landed(self, tw: TableWork, version: int) -> None:
        """Our commit is in ``tw`` at ``version``: nothing may undo it any more."""
        self._committed_tables[tw.name] = version
        self._in_doubt = None

    def _commit_one_table(self, tw: TableWork) -> int:
        lost, tries, conflicted = 0, 0, 0
        while True:
            tries += 1
            spent = tries > self.settings.max_retries + 1
            if spent and tw.marker is not None:
                raise TransactionAborted(f"{tw.name}: lost the commit race {lost} times",
                                         txn_id=self.id, reason="retries")
            if spent and tw.marker is None:
                self._queue(tw, "budget")
                tries = 1  # the queue's turn gets the whole budget: the races lost before it were
                # spent racing, and a writer that ignores markers can still take its versions
            self._wait_predecessors([tw])
            if self.mode == CommitMode.IN_PLACE:
                self._validate_table(tw)
            else:  # no probe first: the commit's put-if-absent right after what we know is the probe
                with self._journal.deferred():  # a redo's entries go out beside the put below
                    redone = self._validate_table(
                        tw, upto=max(tw.log.known_latest(), tw.marker.version if tw.marker else -1))
                conflicted += bool(lost and redone)  # the race we lost went to a commit that conflicted
                if tw.marker is None and conflicted >= QUEUE_AFTER_CONFLICTS:
                    self._queue(tw, "conflicts")
                    tries = 0  # as above; then wait for what precedes the marker, as any holder
                    continue
            if tw.marker is not None and tw.marker.lost:
                continue  # a recovering client freed it: _wait_predecessors claims a new one
            commit = tw.build_commit({"timestamp": int(time.time() * 1000), "engineInfo": ENGINE_INFO,
                                      "lakevilla": self._commit_info(1, marker=tw.marker and tw.marker.version)})
            if self._overtake.revoked_by(tw, commit):
                continue  # a redo changed our commit: wait for that predecessor after all
            latest = tw.validated_upto
            if self.mode == CommitMode.IN_PLACE and self._fill_ok(tw, latest):
                self._check_age()
                self._in_doubt = f"the in-place commit to {tw.name}@{tw.marker.version}"
                try:
                    with self._mlock:
                        rewrite_marker(tw.log, tw.marker, commit)  # marks the handle committed, under its lock
                except MarkerLost:
                    self._in_doubt = None
                    self.stats["fill_lost"] += 1
                    continue
                self._landed(tw, tw.marker.version)
                self._post_commit("checkpoint", self._after_table_commit, tw.log, tw.marker.version)
                return tw.marker.version
            self._check_age()
            self._in_doubt = f"the commit to {tw.name}@{latest + 1}"
            try:
                v, c = latest + 1, commit
                flush = [self._journal.flush] if self._journal.has_deferred else []  # a redo's entries
                # once a LIST has found the tail, look one version past ours as well: taken too, we
                # are behind again (LIST); free, we lost a race at the tail (put again, no LIST)
                ahead = lost >= RELIST_AFTER_LOST
                peeks = [lambda: self._peek(tw, v)] + ([lambda: self._peek(tw, v + 1)] if ahead else [])  # noqa: B023
                self._together(*peeks, *flush, lambda: tw.log.write_commit(v, c))  # noqa: B023
            except VersionExists:
                self._in_doubt = None
                self.stats["retries"] += 1
                self._overtake.lost_race(tw, latest + 1)  # followers overtaking us must not starve us
                lost += 1
                if lost >= RELIST_AFTER_LOST and (not ahead or tw.log.known_latest() > v):  # again and again: we
                    tw.log.latest_version()  # are behind (others committed while we waited), not racing; one LIST
                    # finds the tail instead of a put per version
                continue
            self._landed(tw, latest + 1)
            self.lake.background(lambda v=latest + 1: self._after_single_commit(tw, v))
            return latest + 1

    def _queue(self, tw: TableWork, why: str) -> None:
        """Optimistic commit (R alone, at the tail) holds no marker: it waits for the running
        markers it cannot overtake, then races for the tail. Having lost
        ``QUEUE_AFTER_CONFLICTS`` races to conflicting commits, or its whole retry budget, it
        claims one: from then on followers that would conflict with it wait for it, so it cannot
        starve. Its statements are done, so the claim carries its footprints at once and
        followers that cannot conflict overtake it without a rewrite."""
        self._count("queued_at_commit")
        self._count(f"queued_for_{why}")
        self._claim_first_marker(tw, publish=True)

    @staticmethod
    def _peek(tw: TableWork, version: int) -> None:
        """Read ``version`` while our commit is put there: if another commit took it, the next
        attempt validates against it without a round trip of its own."""
        try:
            tw.log.read_commit_raw(version)
        except (NotFound, LakeVillaError):
            pass  # nothing there (ours lands), or unreadable now: the next attempt reads it again

    def _after_single_commit(self, tw: TableWork, version: int) -> None:
        """Off the commit's latency path: the commit at the tail is the decision, and it names
        our marker, so a client that finds the marker still running sees that it committed
        (recovery closes it if we die first); the close only spares followers that look."""
        self._post_commit("close_marker", self._close_marker, tw, version)
        self._post_commit("checkpoint", self._after_table_commit, tw.log, version)  # after the close: a
        # checkpoint is refused above an open marker

    def _fill_ok(self, tw: TableWork, latest: int) -> bool:
        if tw.marker is None or tw.marker.lost:
            return False
        if not fill_is_safe(tw.log, tw.marker.version, latest):
            self._count("fill_fallback")
            return False
        # a client ignoring markers that commits between our check and the fill would not have
        # seen our actions; where such clients are active, the tail is the only safe place
        lo = max(tw.read_version - 20, -1)
        for _v, c in tw.log.commits_between(lo, latest):
            if c.lakevilla is None and (c.adds or c.removes):
                self._count("fill_fallback")
                return False
        return True

    def _close_marker(self, tw: TableWork, version: int) -> None:
        h = tw.marker
        if h is None or h.lost:
            return
        with h.lock:  # not the transaction's lock: the markers of all tables close in parallel
            h.payload.state = COMMITTED
            h.payload.commit_version = version
            try:
                rewrite_marker(tw.log, h)
            except MarkerLost:
                self._count("markers_lost")

    # CT: the record decides -------------------------------------------------------
    def _prepare_all(self, written: list[TableWork]) -> None:
        """Wait for every predecessor, then validate (and redo) every written table."""
        created = [tw for tw in written if tw.creating is not None]
        written = [tw for tw in written if tw.creating is None]  # no marker, nothing to validate
        for _ in range(self.settings.max_retries + 1):
            self._wait_predecessors(written)
            self.lake.map(self._validate_table, written)  # tables in parallel: latency stays flat
            if not any(tw.marker is not None and tw.marker.lost for tw in written):
                for tw in created:  # the names we create are ours, and the tables still absent
                    self._hold_name(tw)
                return
            self._check_markers_held(written)
        raise TransactionAborted("could not hold our markers", txn_id=self.id, reason="preempted")

    def _intents(self, written: list[TableWork]) -> dict[str, records.TableIntent]:
        # several tables: a reader can take the whole transaction without its record
        together = sorted(w.name for w in written) if len(written) > 1 else None

        def one(tw: TableWork) -> tuple[str, records.TableIntent]:
            if tw.creating is not None:
                lv_info = CommitInfo(kind=InfoKind.CREATE, txn=self.id, attempt=self.attempt,
                                     features=features_label(self.features), decision=Decision.RECORD,
                                     tables=len(written), txn_tables=together).to_json()
                c = tw.build_commit({"timestamp": int(time.time() * 1000), "lakevilla": lv_info})
                return tw.name, records.TableIntent(marker=None, mode=CommitMode.TAIL, commit=c.to_bytes().decode(),
                                                    create=True)
            lv_info = self._commit_info(len(written), marker=tw.marker.version, txn_tables=together)
            c = tw.build_commit({"timestamp": int(time.time() * 1000), "engineInfo": ENGINE_INFO,
                                 "lakevilla": lv_info})
            fill = self.mode == CommitMode.IN_PLACE and self._fill_ok(tw, tw.validated_upto)
            mode = self.mode if fill else CommitMode.TAIL
            return tw.name, records.TableIntent(marker=tw.marker.version, mode=mode, commit=c.to_bytes().decode())

        return dict(self.lake.map(one, written))

    def _commit_record(self, written: list[TableWork]) -> CommitResult:
        def prepare() -> dict[str, records.TableIntent]:
            self._prepare_all(written)
            return self._intents(written)

        decided = decide_by_record(self.lake.store, _Deciding(self), prepare, self.settings.max_retries)
        self._decided = True
        versions = self._publish_all(decided.tables, written)
        self._post_commit("record", records.finish, self.lake.store, decided)
        self._post_commit("release", self._release_names, "committed")
        self._cleanup_after_commit()
        return CommitResult(self.id, versions, dict(self.stats))

    def _publish_all(self, intents: dict[str, records.TableIntent] | dict[str, PendingWrite],
                     written: list[TableWork]) -> dict[str, int]:
        by_name = {tw.name: tw for tw in written}

        def one(name: str) -> tuple[str, int]:
            tw = by_name[name]
            it = intents[name]
            hint = getattr(it, "hint", None)
            if getattr(it, "create", False):
                v = publish_create(tw.log, self.attempt, Commit.from_bytes(it.commit.encode()))
                with self._slock:
                    self._committed_tables[name] = v
                return name, v

            def foreign(v: int, c: Commit) -> None:
                hit = first_conflict(tw.footprints(), [(v, c)], tw.schema, tw.base.partition_columns)
                if hit is not None and marker_of(c) is None:
                    self._count("conflicts_after_decision")
                    warnings.warn(f"{name}@{v} was committed by a client that ignores lakevilla markers after "
                                  f"transaction {self.id} decided, and conflicts with it ({hit[2]})", stacklevel=2)

            v = publish(tw.log, self.attempt, Commit.from_bytes(it.commit.encode()), marker_version=it.marker,
                        mode=it.mode, hint=hint, on_foreign=foreign)
            with self._slock:
                self._committed_tables[name] = v
            if v != it.marker:
                self._post_commit("close_marker", self._close_marker, tw, v)
            elif tw.marker is not None:
                with tw.marker.lock:
                    tw.marker.payload.state = COMMITTED
            self._post_commit("checkpoint", self._after_table_commit, tw.log, v)
            return name, v

        return dict(self.lake.map(one, sorted(intents)))

    # I: the global log decides (isolation/decide.py) -----------------------------
    def _commit_global(self, written: list[TableWork]) -> CommitResult:
        unclaimed = [tw for tw in written if tw.marker is None]
        hint = self._global.start_commit(claims_now=bool(unclaimed))
        if unclaimed:
            self._claim_many(unclaimed)  # LV[I] alone reserves its tables now, all at once
        self.lake.heartbeats.watch(self)

        def prepare() -> dict[str, records.TableIntent]:
            self._prepare_all(written)
            return self._intents(written)

        entry = self._global.decide(_Deciding(self), {tw.name for tw in written}, prepare, hint,
                                    self.settings.max_retries * 4 + 1)
        self._decided = True
        versions = self._publish_all({tw.name: entry.pending[tw.name] for tw in written}, written)
        self._post_commit("announce", self._global.after_commit, entry.seq, self.settings.gvl_keep,
                          self.settings.max_transaction_age)
        self._cleanup_after_commit()
        return CommitResult(self.id, versions, dict(self.stats), entry.seq)

    # -- after commit / abort ---------------------------------------------------------
    def _after_table_commit(self, log, version: int) -> None:
        self.lake.checkpoint_if_due(log, version)

    def _cleanup_after_commit(self) -> None:
        garbage = [(tw.name, p) for tw in self.tables.values() for p in tw.intermediate_files()]
        keys = list(self._journal.keys)
        if not garbage and not keys:
            return

        def work() -> None:  # one request (S3's DeleteObjects) for the redone files and the sublogs
            doomed = [data_file_key(name, p, self.lake.root_uri) for name, p in garbage]
            self._delete_keys(doomed + (keys if self.settings.delete_sublogs else []))

        self.lake.background(work)

    def _delete_files(self, table: str, paths: list[str]) -> None:
        self._delete_keys([data_file_key(table, p, self.lake.root_uri) for p in paths])

    def _delete_keys(self, keys: list[str]) -> None:
        if keys:
            with contextlib.suppress(LakeVillaError):  # what is left, abandoned-file deletion and cleanup find
                self.lake.store.delete_many(keys)

    def _abort_quietly(self) -> None:
        """Undo: release markers, delete the data files we wrote. Never raises a LakeVillaError.

        Never after a deciding write was attempted (states ``decided`` and ``in-doubt``), and
        never for a table whose commit landed: only the decision may undo anything."""
        if self.state in ("committed", "aborted", "decided", "in-doubt") or self._decided or self._in_doubt:
            return
        self.state = "aborted"
        self.lake.heartbeats.forget(self)
        self._undo()

    def _undo(self) -> None:
        try:
            live = [tw for tw in self.tables.values() if tw.name not in self._committed_tables]
            with self._mlock:
                for tw in live:
                    h = tw.marker
                    if h is None or h.lost or h.payload.state != RUNNING:
                        continue
                    h.payload.state = ABORTED
                    try:
                        rewrite_marker(tw.log, h)
                    except MarkerLost:
                        pass
            doomed = [data_file_key(tw.name, p, self.lake.root_uri) for tw in live
                      for p in sorted({a.path for op in tw.ops for a in op.added} | tw.garbage)]
            with contextlib.suppress(LakeVillaError):  # a name left reserved still lets the files go
                self._release_names("aborted")
            self._journal.settle()  # an entry still on its way would outlive the delete below
            self._delete_keys(doomed + (list(self._journal.keys) if self.settings.delete_sublogs else []))
        except LakeVillaError:
            pass
        except Exception:
            pass


class _Deciding:
    """The narrow view of a transaction that ``complex_txn.decide`` sees."""

    def __init__(self, txn: Transaction) -> None:
        self._txn = txn

    @property
    def id(self) -> str:
        return self._txn.id

    @property
    def attempt(self) -> str:
        return self._txn.attempt

    def check_age(self) -> None:
        self._txn._check_age()

    def in_doubt(self, what: str | None) -> None:
        self._txn._in_doubt = what

    def preempted(self) -> None:
        self._txn.stats["preempted"] += 1
        self._txn._new_attempt()

    # what the global log's decider needs besides (isolation.decide.Announcing)
    @property
    def isolation(self) -> str:
        return self._txn.isolation

    @property
    def slack(self) -> int:
        return self._txn.slack

    @property
    def tables(self) -> dict[str, TableWork]:
        return self._txn.tables

    def decided(self) -> None:
        self._txn._decided = True

    def count(self, key: str, n: int = 1) -> None:
        self._txn._count(key, n)

    def revalidate(self, table: str) -> None:
        self._txn._validate_table(self._txn.tables[table])

    def reads_hold(self, table: str, commits: list[tuple[int, Commit]], version: int) -> bool:
        return self._txn._reads_hold(self._txn.tables[table], commits, version)


def _settle_earlier_attempts(lake: Client, txn_id: str, first_versions: dict[str, int]) -> None:
    """Before a crashed transaction is resumed, every earlier attempt must be settled: a
    decided one is rolled forward (and nothing is resumed), an undecided one is fenced
    off through its own decision mechanism (ABORTED record, global-log abort, freed
    marker) so it can never commit later. A marker that has not expired means its client
    may still be running: resume refuses rather than race it."""
    from ..complex_txn.record import of_txn
    from ..recovery.stalled import roll_forward_record

    svc = lake.services()
    for rec in of_txn(lake.store, txn_id):
        if rec.state == records.COMMITTING:
            roll_forward_record(svc, rec)
            raise TransactionStateError(f"transaction {txn_id} was already decided (record {rec.attempt} says "
                                        "COMMITTING); it has been rolled forward now: nothing to resume")
        if rec.state == records.COMMITTED:
            raise TransactionStateError(f"transaction {txn_id} already committed (record {rec.attempt}): "
                                        "nothing to resume")
    now = lake.now()
    stalled: list[tuple[str, int]] = []
    for table, first in sorted(first_versions.items()):
        log = lake.log(table)
        for v, c in log.commits_between(max(-1, first - 1), log.latest_version()):
            info = CommitInfo.of(c.lakevilla)
            if info is not None and info.is_commit and info.txn == txn_id:
                raise TransactionStateError(f"transaction {txn_id} already committed to {table!r} at version {v} "
                                            "(rolled forward by recovery, or committed before the crash): "
                                            "nothing to resume")
            m = marker_of(c)
            if m is None or m.txn != txn_id or m.state != RUNNING:
                continue
            if not m.expired(now):
                raise TransactionStateError(
                    f"transaction {txn_id} still holds a live marker on {table}@{v} (it expires in "
                    f"{m.expires - now:.1f}s): its client may still be running. Resume it after the marker "
                    "expires (marker_ttl without a heartbeat)")
            stalled.append((table, v))
    decided = []
    for table, v in stalled:  # every one: an I decision is rolled forward marker by marker
        res = resolve_marker(svc, table, v)
        if res.outcome == "committed":
            decided.append(f"{table}@{v}")
    if decided:
        raise TransactionStateError(f"transaction {txn_id} was already decided ({', '.join(decided)}); it has "
                                    "been rolled forward now: nothing to resume")


def _filled_in_place(log: DeltaLog, upto: int) -> set[int]:
    """Versions <= ``upto`` filled in place: the crashed client may have read any of them as an
    empty marker, so the resumed one validates against them (a fill it had seen only costs a
    redo; one it had not, missed, would let its statements stand on rows they never saw)."""
    lo = max(-1, upto - MARKER_SCAN_WINDOW, log.last_checkpoint_version() - 1)
    out = set()
    for v, c in log.commits_between(lo, upto):
        info = CommitInfo.of(c.lakevilla)
        if info is not None and info.is_commit and info.marker == v:
            out.add(v)
    return out


def resume_transaction(lake: Client, txn_id: str) -> Transaction:
    """Rebuild a crashed transaction from its sublogs, ready to continue or commit.

    Earlier attempts are settled first (``_settle_earlier_attempts``): a decided one is
    rolled forward and reported (``TransactionStateError``), never re-executed. Then new
    markers are claimed under a new attempt. Logical operations are redone at commit if
    the tables moved; a physical one that conflicts, or a recorded read that went stale,
    aborts. The transaction keeps its original start for ``max_transaction_age``.
    """
    from ..errors import LakeVillaError as _Err
    from ..store import NotFound

    entries = sublogs.read_all(lake.store, txn_id)
    if not entries:
        raise _Err(f"no sublogs for transaction {txn_id!r}: nothing to resume (it committed, was cleaned "
                   "up, or never wrote)")
    first_versions: dict[str, int] = {}
    for e in entries:
        for t, v in [(e.table, e.read_version), *((r["table"], r["version"]) for r in e.reads)]:
            first_versions[t] = min(v, first_versions.get(t, v))
    _settle_earlier_attempts(lake, txn_id, first_versions)
    last = entries[-1]
    attempts = [int(e.attempt.rsplit(".", 1)[1]) for e in entries if e.attempt and "." in e.attempt]
    txn = Transaction(lake, parse_features(last.features), isolation=last.isolation, commit_mode=last.mode,
                      txn_id=txn_id, started=min((e.created for e in entries if e.created), default=None),
                      attempt_no=max(attempts, default=0) + 1, sublog_seq=max(e.seq for e in entries))
    current = sublogs.current_ops(entries)
    by_table: dict[str, list[sublogs.SublogEntry]] = {}
    for e in current:
        by_table.setdefault(e.table, []).append(e)
    reads_by_table: dict[str, list[dict]] = {}
    for e in entries:
        for r in e.reads:
            reads_by_table.setdefault(r["table"], []).append(r)
    for table in sorted(set(by_table) | set(reads_by_table)):
        log = lake.log(table)
        ents = by_table.get(table, [])
        base_v = max([e.base_version for e in ents] + [r["version"] for r in reads_by_table.get(table, [])])
        snap = log.snapshot(base_v)
        tw = TableWork(table, log, snap, txn._ctx(table, snap))
        tw.recheck |= _filled_in_place(log, base_v)
        tw.read_version = min([e.read_version for e in ents] + [r["version"] for r in reads_by_table.get(table, [])])
        tw.validated_upto = min([e.base_version for e in ents] + [r["version"] for r in reads_by_table.get(table, [])])
        for r in reads_by_table.get(table, []):
            txn._seq += 1
            tw.ops.append(Op(seq=txn._seq, kind="read", table=table, where=r.get("where"),
                             read_files=set(r.get("files") or [])))
        for e in ents:
            added = e.added_files()
            for a in added:  # the data must still be there to be committed
                try:
                    lake.store.head(data_file_key(table, a.path, lake.root_uri))
                except NotFound:
                    raise TransactionAborted(f"{table}: data file {a.path} of transaction {txn_id} is gone "
                                             "(deleted as abandoned?)", txn_id=txn_id, reason="lost-data") from None
            stmt = e.statement or {}
            op = Op(seq=e.op_seq, kind=e.op, table=table, where=stmt.get("where", e.predicate),
                    assignments=stmt.get("set"), options=stmt.get("options"),
                    merge=merges.MergeSpec.from_json(stmt["merge"]) if stmt.get("merge") else None,
                    added=added,
                    inserted=added if e.op == "insert" else [sublogs.AddFile.from_json(a)
                                                             for a in stmt.get("inserted") or []],
                    removed=[sublogs.AddFile.from_json(r) for r in e.removed], read_files=set(e.read_files),
                    logical=e.kind == "logical", redoable=e.op == "insert" or e.kind == "logical")
            if op.merge is not None and op.merge.source_key:
                txn._journal.keep(op.merge.source_key)  # the staged source goes with the sublogs
            tw.adopt(op)
        tw.logical = True
        txn.tables[table] = tw
        txn._seq = max(txn._seq, max((e.op_seq for e in ents), default=0))
    for tw in txn.tables.values():
        if tw.written and txn._claim_at_first_write:
            txn._claim(tw)
    if any(tw.marker for tw in txn.tables.values()):
        lake.heartbeats.watch(txn)
    txn.stats["resumed"] += 1
    return txn
