"""Transactions: the public statement API, and the state a transaction is in.

``features=""`` (LV[DL]) is plain Delta: each statement is its own Delta commit, optimistic
and conflict-checked at file level, and a block has no atomicity. With markers (R, CT, I),
statements only write data files; the table logs change at commit:

* R: statements are logged to sublogs; on a conflict the statements from the first
  conflicting one on are undone and redone on the new snapshot. Each table commits on its
  own (single-table atomicity).
* CT: markers are claimed at commit, all at once, and carry dependency lists; cycles and
  long waits shift markers; a multi-table commit is decided by one put-if-absent of the
  transaction record. A commit of one table at the tail commits as R does.
* I: table versions come from the global version log; the announcement (one put-if-absent
  of the next entry) validates and decides.

How each of those is done is a part chosen once (``parts.py``); this class runs statements
through them and maps failures onto what a user can act on.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import TYPE_CHECKING, Any, Literal

from ..core.client import LakeClient
from ..core.context import State, TxnContext
from ..core.deciding import CommitResult
from ..data.schemas import rows_as_data
from ..errors import (
    CommitPendingError,
    CreateConflictError,
    InvalidArgumentError,
    PartialCommitError,
    StorageError,
    TransactionAborted,
    TransactionStateError,
)
from ..names import check_table_name, new_txn_id
from ..recovery.resume import Resumed
from ..scan.ordering import Ordering
from ..statements import evolution
from ..statements import merge as merges
from ..statements.add_columns import AddColumns
from ..statements.base import Statement
from ..statements.drop_columns import DropColumns, checked_names
from ..statements.insert import Insert
from ..statements.optimize import Optimize, target_size
from ..statements.overwrite import Overwrite
from ..statements.read import Read
from ..statements.rename_column import RenameColumn, checked_name
from ..statements.set_properties import SetProperties, checked_properties
from ..statements.update import Delete, Update
from ..statements.view import TableWork
from ..vocab import CommitMode
from . import parts as feature_parts
from .features import ISOLATIONS, parse_features

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CommitResult", "State", "Transaction"]


class Transaction:
    """One transaction; made by ``Lake.begin`` / ``Lake.transaction``.

    ``started``, ``attempt_no`` and ``sublog_seq`` continue a transaction resumed from its
    sublogs (``Lake.resume``): its age counts from its first start, its new attempt and sublog
    entries follow the ones already written."""

    def __init__(self, lake: LakeClient, features: frozenset[str], isolation: str = "serializable",
                 slack: int = 0, commit_mode: str | None = None, txn_id: str | None = None, *,
                 started: float | None = None, attempt_no: int = 0, sublog_seq: int = 0) -> None:
        if isolation not in ISOLATIONS:
            raise InvalidArgumentError(f"isolation must be one of {ISOLATIONS}, got {isolation!r}")
        if not isinstance(slack, int) or slack < 0:
            raise InvalidArgumentError("slack must be a non-negative integer (table versions)")
        if "I" not in features and (isolation != "serializable" or slack):
            what = f"isolation={isolation!r}" if isolation != "serializable" else f"slack={slack}"
            raise InvalidArgumentError(f"{what} only means something with feature 'I' (isolated "
                                       "reads from one cut); add 'I' to features, or leave it out")
        mode = str(CommitMode.parse(commit_mode) if commit_mode else lake.settings.commit_mode)
        self.lake = lake
        self.features = features
        self.isolation = isolation
        self.slack = slack
        self.mode = mode
        self.id = txn_id or new_txn_id()
        self._ctx = TxnContext(lake, self.id, features, isolation, slack, mode,
                               feature_parts.decision_of(features),
                               lake.now() if started is None else started, attempt_no)
        self._parts = feature_parts.build(lake, self._ctx, lambda: lake.heartbeats.watch(self),
                                          sublog_seq)
        self._seq = 0
        self.result: CommitResult | None = None

    # -- what it is ---------------------------------------------------------------------------
    @property
    def state(self) -> State:
        """Where it is: active, committing, committed, aborted, decided or in-doubt (``State``)."""
        return self._ctx.state

    @property
    def attempt(self) -> str:
        """The current attempt (``<id>.<n>``): a new one when recovery fenced the last one off."""
        return self._ctx.attempt

    @property
    def tables(self) -> dict[str, TableWork]:
        """The tables it touched, each with its view and statements (``statements/view.py``)."""
        return self._ctx.tables

    @property
    def stats(self) -> Counter[str]:
        """Counters of what it did (statements, markers, waits, redos, requests' outcomes)."""
        return self._ctx.stats

    @property
    def started(self) -> float:
        """When it started, by the lake's clock (a resumed one keeps its first start)."""
        return self._ctx.started

    @property
    def committed(self) -> dict[str, int]:
        """Tables whose commit of this transaction has landed so far (table -> version): with
        ``features=""`` every statement's, with R each table's as the commit reaches it."""
        return dict(self._ctx.committed)

    @property
    def operations(self) -> list[dict[str, Any]]:
        """The writes this transaction holds, in order (after ``lake.resume``: those recovered
        from its sublogs, so the client knows which of its steps still need issuing)."""
        ops = sorted((op for tw in self.tables.values() for op in tw.ops if op.is_write),
                     key=lambda o: o.seq)
        return [op.describe() for op in ops]

    def cut_report(self) -> dict[str, Any]:
        """Where an I transaction's consistent cut stands (global-log entries it started from and
        examined last, table versions fixed, counters), so that a wrong read can be traced; empty
        without I."""
        return self._parts.reader.report()

    def __repr__(self) -> str:
        return f"<Transaction {self.id} features={self._ctx.label or 'DL'} {self.state}>"

    # -- statements ---------------------------------------------------------------------------
    def read(self, table: str, where: str | None = None, columns: list[str] | None = None, *,
             order_by: str | list[str] | None = None, limit: int | None = None) -> Any:
        """Rows of ``table`` matching ``where``: pyarrow.Table (embedded) or DataFrame (Spark).
        ``order_by`` ("col", "col DESC" or a list) with ``limit``: only the first rows, so a
        conflict that leaves them as they were is redone, not aborted (``scan/ordering.py``)."""
        self._check_active()
        if columns is not None and (isinstance(columns, str)
                                    or not all(isinstance(c, str) for c in columns)):
            raise InvalidArgumentError("columns must be a list of column names")
        order = Ordering.parse(order_by, limit)
        return self._execute(Read(seq=self._next(table), table=table, where=where,
                                  columns=list(columns) if columns else None, order=order))

    def insert(self, table: str, data: Any, schema_mode: str | None = None) -> int:
        """Append rows; returns how many. ``data``: pyarrow, pandas, dict of columns, list of rows
        (or a Spark DataFrame with the Spark engine). ``schema_mode="merge"``: columns of
        ``data`` the table lacks are added (nullable) in the same commit, as Delta's mergeSchema."""
        self._check_active()
        _check_schema_mode(schema_mode)
        return self._execute(Insert(seq=self._next(table), table=table, schema_mode=schema_mode),
                             data)

    def update(self, table: str, set: dict[str, str], where: str | None = None) -> int:  # noqa: A002
        """``set`` maps columns to SQL expressions over the row; returns rows updated."""
        self._check_active()
        if not isinstance(set, dict) or not set:
            raise InvalidArgumentError("update needs set={column: 'sql expression', ...}")
        assignments = {str(k): v if isinstance(v, str) else str(v) for k, v in set.items()}
        return self._execute(Update(seq=self._next(table), table=table, where=where,
                                    assignments=assignments))

    def delete(self, table: str, where: str | None = None) -> int:
        """Delete the rows ``where`` selects (every row without it); returns how many."""
        self._check_active()
        return self._execute(Delete(seq=self._next(table), table=table, where=where))

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
        _check_schema_mode(schema_mode)

        def execute(clauses: list[merges.MergeClause]) -> merges.MergeResult:
            self._check_active()
            src = self.lake.engine.merge_source(source)  # the rows stay where the engine has them
            if schema_mode == "merge":
                self._add_source_columns(table, src.schema)
            spec = merges.MergeSpec(on=on if isinstance(on, str) else tuple(on),
                                    clauses=tuple(clauses), source_alias=source_alias,
                                    target_alias=target_alias)
            return self._execute(merges.Merge(seq=self._next(table), table=table, spec=spec,
                                              source=src))

        return merges.MergeBuilder(execute)

    def _add_source_columns(self, table: str, source: pa.Schema) -> None:
        current = self._guarded(f"merge into {table!r}",
                                lambda: self._parts.runner.current_schema(table))
        have = {n.lower() for n in current.names}
        new = [f.with_nullable(True) for f in source if f.name.lower() not in have]
        if new:
            self.add_columns(table, new)

    def overwrite(self, table: str, data: Any, where: str | None = None) -> int:
        """Replace the whole table with ``data``, or (``where``) the rows the predicate selects, as
        Delta's ``replaceWhere``: every row of ``data`` must satisfy ``where``
        (``DataOutsidePredicateError`` otherwise, nothing written); rows outside it stay, even in
        files that also hold replaced rows. Returns the rows written. Under R a conflicting
        overwrite is redone on the newer snapshot with the same new rows."""
        self._check_active()
        return self._execute(Overwrite(seq=self._next(table), table=table, where=where), data)

    def add_columns(self, table: str, fields: Any) -> None:
        """Add nullable columns (a pyarrow schema, field or list of fields, or a dict name -> type)
        as a metaData action in this transaction's commit of ``table``; later statements see them,
        rows already written read NULL there. An existing name or a non-nullable field is a
        ``SchemaEvolutionError``. Delta's rule holds: a concurrent commit that changed the
        table's metadata conflicts with ours, and ours with every concurrent writer."""
        self._check_active()
        requested = evolution.requested_fields(table, fields)
        self._execute(AddColumns(seq=self._next(table), table=table, fields=requested))

    def set_properties(self, table: str, properties: dict[str, str | None]) -> None:
        """Set table properties (a value of None unsets one), as a metaData action in this
        transaction's commit of ``table`` (Delta's SET / UNSET TBLPROPERTIES), with the protocol
        upgrade a property needs. ``{"delta.constraints.<name>": "<expression>"}`` adds a CHECK
        constraint: the rows already there are checked first (``ConstraintViolationError``), later
        statements enforce it. A property that would enable a Delta feature lakevilla does not
        write is refused (``UnsupportedTableFeatureError``). As any metadata change, it conflicts
        with every concurrent writer of the table."""
        self._check_active()
        props = checked_properties(table, properties)
        self._execute(SetProperties(seq=self._next(table), table=table, properties=props))

    def rename_column(self, table: str, old: str, new: str) -> None:
        """Rename a top-level column of a column-mapped table (``delta.columnMapping.mode``
        ``name`` or ``id``; refused otherwise), as a metaData action: no data file is rewritten,
        later statements and readers use the new name. A column a CHECK constraint or a
        generated column reads is refused. As any metadata change, it conflicts with every
        concurrent writer of the table."""
        self._check_active()
        self._execute(RenameColumn(seq=self._next(table), table=table,
                                   old=checked_name(table, old, "rename_column"),
                                   new=checked_name(table, new, "rename_column")))

    def drop_columns(self, table: str, names: str | list[str]) -> None:
        """Drop top-level columns of a column-mapped table (refused otherwise), as a metaData
        action: the files keep the data, no reader sees it. Partition columns, the last column
        and columns a CHECK constraint or generated column reads are refused. Conflicts as
        ``rename_column``."""
        self._check_active()
        self._execute(DropColumns(seq=self._next(table), table=table,
                                  names=checked_names(table, names)))

    def optimize(self, table: str, where: str | None = None,
                 target_file_size: int | None = None) -> dict[str, Any]:
        """Compact ``table``'s small files (Delta's OPTIMIZE bin-packing), per partition; ``where``
        selects partitions (partition columns only); ``target_file_size`` in bytes (default: the
        table's ``delta.targetFileSize``, else 100 MiB). Rows do not change (``dataChange: false``).
        Conflicts only with a concurrent change to the files it compacts; under R that is redone
        on what is left. Returns metrics: files_removed, files_added, bytes, partitions."""
        self._check_active()
        if target_file_size is not None:
            target_size(None, target_file_size)  # bad input fails before anything runs
        return self._execute(Optimize(seq=self._next(table), table=table, where=where,
                                      target_file_size=target_file_size))

    def create_table(self, name: str, schema: Any = None,
                     partition_by: list[str] | str | None = None, *, data: Any = None,
                     properties: dict[str, str] | None = None, if_not_exists: bool = False,
                     description: str | None = None) -> int:
        """Create a table inside the transaction (``lake.create_table``'s arguments); returns the
        rows it was created with. Its version 0 is written only if the transaction commits (with
        CT, atomically with the other tables); until then later statements of this transaction
        read and write it as an empty table, nobody else sees it. The name is reserved now, so a
        concurrent creator of the same name gets ``TableExistsError`` (see
        ``complex_txn/reservations.py``). With ``features=""`` every statement commits when it
        runs, and so does this one."""
        self._check_active()
        check_table_name(name)
        schema, data = rows_as_data(name, schema, data)  # a frame of rows is data, never dropped
        rows = self._guarded(f"create_table({name!r})", lambda: self._parts.runner.create_table(
            name, schema, partition_by, data, properties, if_not_exists, description))
        if rows is not None:
            return rows
        return self.insert(name, data) if data is not None else 0

    def heartbeat(self, force: bool = False) -> None:
        """Keep this transaction's markers alive (the client's heartbeat thread calls it)."""
        self._parts.markers.heartbeat(force)

    # -- running ------------------------------------------------------------------------------
    def _check_active(self) -> None:
        if self.state != State.ACTIVE:
            raise TransactionStateError(f"transaction {self.id} is {self.state}")

    def _next(self, table: str) -> int:
        check_table_name(table)
        self._seq += 1
        return self._seq

    def _execute(self, op: Statement, data: Any = None) -> Any:
        done = self._guarded(f"{op.kind} on {op.table!r}", lambda: self._parts.runner.run(op, data))
        return op.result(done)

    def _guarded(self, what: str, fn: Any) -> Any:
        """``fn()``; a store failure ends the transaction here, as an abort (nothing of the
        statement is decided)."""
        try:
            return fn()
        except StorageError as e:
            self._abort_quietly()
            committed = self._ctx.committed
            done = (f"; statements that already committed stay ({', '.join(sorted(committed))})"
                    if committed else "")
            raise TransactionAborted(f"{what} failed because the store did ({e}); "
                                     f"transaction {self.id} is aborted{done}", txn_id=self.id,
                                     reason="storage") from e

    # -- the end ------------------------------------------------------------------------------
    def commit(self) -> CommitResult:
        """Commit (what the features decide together, all or nothing); the versions it landed at.
        ``TransactionAborted``: nothing of it is visible. ``CommitPendingError``: the outcome is
        recovery's to settle; nothing was undone."""
        self._check_active()
        ctx = self._ctx
        ctx.state = State.COMMITTING
        try:
            result = self._parts.decider.commit()
        except BaseException as e:
            if ctx.decided or ctx.in_doubt:
                # the decision is durable, or may be: undoing now could destroy data that a
                # committed version references or that recovery must roll forward. Nothing is
                # deleted and no marker rewritten; the markers expire and recovery settles it.
                ctx.state = State.DECIDED if ctx.decided else State.IN_DOUBT
                self.lake.heartbeats.forget(self)
                if (isinstance(e, Exception)
                        and not isinstance(e, CommitPendingError | CreateConflictError)):
                    raise self._pending_error(e) from e
                raise
            self._abort_quietly()
            if ctx.committed and isinstance(e, Exception) and not isinstance(e, PartialCommitError):
                raise PartialCommitError(
                    f"{e} -- but {', '.join(sorted(ctx.committed))} already committed: with "
                    f"features {ctx.label!r} each table commits on its own; use 'R,CT' for "
                    "all-or-nothing across tables", committed=dict(ctx.committed),
                    txn_id=self.id) from e
            if isinstance(e, StorageError):  # before any decision: nothing of it is visible
                raise TransactionAborted(f"transaction {self.id} could not commit because the "
                                         f"store failed ({e}); nothing of it is visible",
                                         txn_id=self.id, reason="storage") from e
            raise
        ctx.state = State.COMMITTED
        self.lake.heartbeats.forget(self)
        self.result = result
        return result

    def _pending_error(self, cause: BaseException) -> CommitPendingError:
        ctx = self._ctx
        if ctx.decided:
            msg = (f"transaction {self.id} is committed (decided) but writing its table commits "
                   f"failed ({cause}); lake.recover() or any transaction that meets its "
                   "markers finishes it")
        else:
            msg = (f"transaction {self.id}: the outcome of {ctx.in_doubt} could not be learned "
                   f"({cause}); it may or may not have committed. Nothing was undone; "
                   "lake.recover() settles it once its markers expire. Do not re-run it blindly")
        return CommitPendingError(msg, txn_id=self.id, decided=ctx.decided,
                                  committed=dict(ctx.committed))

    def abort(self) -> None:
        """Undo: nothing of it becomes visible (not after a commit, nor once its commit is decided
        or in doubt: ``lake.recover()`` settles those)."""
        if self.state == State.COMMITTED:
            raise TransactionStateError(f"transaction {self.id} is already committed")
        if self.state == State.ABORTED:
            return
        if self.state in (State.DECIDED, State.IN_DOUBT):
            raise TransactionStateError(f"transaction {self.id} cannot be aborted: its commit "
                                        f"is {self.state} (lake.recover() settles it)")
        self._abort_quietly()

    def _abort_quietly(self) -> None:
        """Undo: release markers, delete the data files we wrote. Never raises a LakeVillaError.

        Never after a deciding write was attempted (states ``decided`` and ``in-doubt``), and
        never for a table whose commit landed: only the decision may undo anything."""
        ctx = self._ctx
        if (ctx.state in (State.COMMITTED, State.ABORTED, State.DECIDED, State.IN_DOUBT)
                or ctx.decided or ctx.in_doubt):
            return
        ctx.state = State.ABORTED
        self.lake.heartbeats.forget(self)
        # what is left, abandoned-file deletion and cleanup find
        with contextlib.suppress(Exception):
            self._parts.decider.undo()

    def __enter__(self) -> Transaction:
        self._ctx.block(inside=True)  # a transaction nested in this block must not wait for it
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: Any) -> Literal[False]:
        self._ctx.block(inside=False)
        if exc_type is None:
            if self.state == State.ACTIVE:
                self.commit()
        elif self.state not in (State.COMMITTED, State.ABORTED):
            self._abort_quietly()
        return False

    # -- resumed from sublogs -------------------------------------------------------------------
    @classmethod
    def resumed(cls, lake: LakeClient, txn_id: str, r: Resumed) -> Transaction:
        """A crashed transaction rebuilt from its sublogs (``recovery/resume.py``): its tables
        hold the statements it had run; new markers are claimed under a new attempt."""
        txn = cls(lake, parse_features(r.features), isolation=r.isolation, commit_mode=r.mode,
                  txn_id=txn_id, started=r.started, attempt_no=r.attempt_no,
                  sublog_seq=r.sublog_seq)
        txn.tables.update(r.tables)
        txn._seq = r.seq
        for key in r.staged:
            txn._parts.journal.keep(key)
        for tw in txn.tables.values():
            txn._parts.runner.claims.resumed(tw)
        if any(tw.marker for tw in txn.tables.values()):
            lake.heartbeats.watch(txn)
        txn.stats["resumed"] += 1
        return txn


def _check_schema_mode(schema_mode: str | None) -> None:
    if schema_mode not in (None, "merge"):
        raise InvalidArgumentError(f"schema_mode must be None or 'merge', got {schema_mode!r}")
