"""LV[DL] (``features=""``): plain Delta. Every statement is its own Delta commit.

The baseline the features are measured against, and what a client that ignores
markers does: each statement reads the newest snapshot, writes its files and commits
with put-if-absent after it; a lost race is checked at file level (Delta's optimistic
protocol) and retried, a conflict aborts the statement. Nothing is atomic across
statements, so there is nothing to decide at commit and nothing to undo at abort.
A subclass of the commit skeleton, so that the skeleton never asks which it is.
"""

from __future__ import annotations

import time
from typing import Any

from ..core.create import create_now
from ..delta.features import check_readable
from ..delta.log import VersionExists
from ..errors import CommitPendingError, TransactionAborted
from ..markers.marker import ENGINE_INFO
from ..names import check_table_name
from ..scan.conflicts import first_conflict
from ..statements.view import Op, TableWork
from ..store import OutcomeUnknown
from .transaction import CommitResult, Transaction


class DeltaTransaction(Transaction):
    """A transaction without features: each statement commits when it runs."""

    @property
    def uses_markers(self) -> bool:
        return False

    def create_table(self, name: str, schema: Any = None, partition_by: list[str] | str | None = None, *,
                     data: Any = None, properties: dict[str, str] | None = None, if_not_exists: bool = False,
                     description: str | None = None) -> int:
        """Creates the table at once (version 0), as ``lake.create_table`` does."""
        self._check_active()
        check_table_name(name)
        snap = create_now(self.lake, name, schema, partition_by, data=data, properties=properties,
                          if_not_exists=if_not_exists, description=description)
        return sum(a.num_records or 0 for a in snap.files.values()) if snap.version == 0 else 0

    def _current_schema(self, table: str) -> Any:
        return self.lake.log(table).snapshot().schema  # each statement reads the newest

    def _commit(self) -> CommitResult:
        self.state = "committed"
        return CommitResult(self.id, dict(self._dl_versions), dict(self.stats))

    def _undo(self) -> None:
        pass  # each statement already committed on its own: nothing can be undone

    def _execute_op(self, op: Op, data: Any = None) -> Any:
        self.heartbeat()
        op_started = self.lake.now()
        log = self.lake.log(op.table)
        snap = log.snapshot()
        check_readable(op.table, snap.protocol, snap.metadata)
        tw = TableWork(op.table, log, snap, self._ctx(op.table, snap))
        self._validate_op(tw, op)
        result = tw.run(self.lake.engine, op, data)
        tw.ops.append(op)
        self.stats[op.kind] += 1
        if not op.is_write:
            return result
        adds, removes = tw.net_actions()
        if not adds and not removes and tw.metadata is None:
            return result
        commit = tw.build_commit({"timestamp": int(time.time() * 1000), "engineInfo": ENGINE_INFO,
                                  "lakevilla": self._commit_info(1)})
        v = snap.version + 1
        for _ in range(self.settings.max_retries + 1):
            try:
                self._check_age(op_started)
            except TransactionAborted:
                self._delete_files(op.table, [a.path for a in op.added])
                raise
            try:
                log.write_commit(v, commit)  # settled by reading back if the store reports an error
            except OutcomeUnknown as e:
                raise CommitPendingError(
                    f"{op.kind} on {op.table!r}: the outcome of its commit at version {v} could not be learned "
                    f"({e}); it may or may not have committed. Nothing was undone; read the table to see",
                    txn_id=self.id, decided=False, committed=dict(self._dl_versions)) from e
            except VersionExists:
                self.stats["retries"] += 1
                latest = log.newest()
                hit = first_conflict(tw.footprints(), log.commits_between(v - 1, latest), tw.schema,
                                     tw.base.partition_columns)
                if hit is not None:
                    self._delete_files(op.table, [a.path for a in op.added])
                    raise TransactionAborted(
                        f"{op.kind} on {op.table!r} conflicts with version {hit[1]}: {hit[2]}",
                        txn_id=self.id) from None
                v = latest + 1
                continue
            self.tables.setdefault(op.table, tw)
            self._dl_versions[op.table] = v
            self._post_commit("checkpoint", self._after_table_commit, log, v)
            return result
        self._delete_files(op.table, [a.path for a in op.added])
        raise TransactionAborted(f"{op.kind} on {op.table!r}: lost the commit race {self.settings.max_retries + 1} times",
                                 txn_id=self.id, reason="retries")

