"""LV[DL] (``features=""``): plain Delta. Every statement is its own Delta commit.

The baseline the features are measured against, and what a client that ignores markers does:
each statement reads the newest snapshot, writes its files and commits with put-if-absent
after it; a lost race is checked at file level (Delta's optimistic protocol) and retried, a
conflict aborts the statement. Nothing is atomic across statements, so there is nothing to
decide at commit and nothing to undo at abort. Two parts: the runner commits each statement,
the decider has nothing left to decide.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..delta.features import check_readable
from ..delta.log import VersionExists
from ..engines.api import data_file_key
from ..errors import CommitPendingError, TransactionAborted
from ..markers.marker import ENGINE_INFO
from ..scan.conflicts import first_conflict
from ..statements.view import TableWork
from ..store import OutcomeUnknown
from .context import TxnContext
from .create import create_now
from .deciding import CommitResult, Decider, delete_keys
from .runner import StatementRunner

if TYPE_CHECKING:
    import pyarrow as pa

    from ..statements.base import Statement


class EachCommits(StatementRunner):
    """Runs a statement on the newest snapshot and commits it at once."""

    def run(self, op: Statement, data: Any = None) -> Any:
        ctx = self.ctx
        client = ctx.client
        if op.is_write:
            client.check_writable(f"{op.kind} on {op.table!r}")
        op_started = ctx.now()
        log = client.log(op.table)
        snap = log.snapshot()
        check_readable(op.table, snap.protocol, snap.metadata)
        tw = TableWork(op.table, log, snap, self.table_context(op.table, snap))
        op.check(tw, client.engine, client.store)
        self.journal.prepare(tw, op, client.engine)
        result = tw.run(client.engine, op, data)
        tw.ops.append(op)
        ctx.stats[op.kind] += 1
        if not op.is_write:
            return result
        adds, removes = tw.net_actions()
        if not adds and not removes and tw.metadata is None:
            return result
        commit = tw.build_commit({"timestamp": ctx.timestamp_ms(), "engineInfo": ENGINE_INFO,
                                  "lakevilla": ctx.commit_info(1)})
        v = snap.version + 1
        for _ in range(ctx.settings.max_retries + 1):
            try:
                ctx.check_age(op_started)
            except TransactionAborted:
                self._drop(op)
                raise
            try:
                log.write_commit(v, commit)  # settled by reading back if the store reports an error
            except OutcomeUnknown as e:
                raise CommitPendingError(
                    f"{op.kind} on {op.table!r}: the outcome of its commit at version {v} could "
                    f"not be learned ({e}); it may or may not have committed. Nothing was undone; "
                    "read the table to see", txn_id=ctx.id, decided=False,
                    committed=dict(ctx.committed)) from e
            except VersionExists:
                ctx.stats["retries"] += 1
                latest = log.newest()
                hit = first_conflict(tw.footprints(), log.commits_between(v - 1, latest), tw.schema,
                                     tw.base.partition_columns)
                if hit is not None and getattr(op, "numbered", None):
                    # identity values taken from a mark another commit moved: number them again
                    tw = self._renumbered(op, tw)
                    commit = tw.build_commit({"timestamp": ctx.timestamp_ms(),
                                              "engineInfo": ENGINE_INFO,
                                              "lakevilla": ctx.commit_info(1)})
                    v = tw.base.version + 1
                    continue
                if hit is not None:
                    self._drop(op)
                    raise TransactionAborted(
                        f"{op.kind} on {op.table!r} conflicts with version {hit[1]}: {hit[2]}",
                        txn_id=ctx.id) from None
                v = latest + 1
                continue
            ctx.tables.setdefault(op.table, tw)
            ctx.landed(tw, v)
            ctx.post_commit("checkpoint", client.checkpoint_if_due, log, v)
            return result
        self._drop(op)
        raise TransactionAborted(f"{op.kind} on {op.table!r}: lost the commit "
                                 f"race {ctx.settings.max_retries + 1} times", txn_id=ctx.id,
                                 reason="retries")

    def _renumbered(self, op: Statement, old: TableWork) -> TableWork:
        """``op`` (new rows it numbered) redone on the newest snapshot, as R redoes it: its
        rows read back, numbered above the marks that snapshot holds, written anew; the files
        of the first run are deleted."""
        client = self.ctx.client
        before = {p for a in op.added for p in a.written_files} | {c.path for c in op.cdc}
        snap = old.log.snapshot()
        tw = TableWork(op.table, old.log, snap, self.table_context(op.table, snap))
        op.check(tw, client.engine, client.store)
        op.reset_for_redo()
        tw.run(client.engine, op, None, redo=True)
        tw.ops.append(op)
        now = {p for a in op.added for p in a.written_files} | {c.path for c in op.cdc}
        delete_keys(self.ctx, [data_file_key(op.table, p, client.root_uri)
                               for p in sorted(before - now)])
        return tw

    def _drop(self, op: Statement) -> None:
        root = self.ctx.client.root_uri
        changes = [data_file_key(op.table, c.path, root) for c in op.cdc]  # its change data
        delete_keys(self.ctx, changes + [data_file_key(op.table, p, root) for a in op.added
                                         for p in a.written_files])

    def current_schema(self, table: str) -> pa.Schema:
        return self.ctx.client.log(table).snapshot().schema  # each statement reads the newest

    def create_table(self, name: str, schema: Any, partition_by: list[str] | str | None, data: Any,
                     properties: dict[str, str] | None, if_not_exists: bool,
                     description: str | None) -> int | None:
        """Creates the table at once (version 0), as ``lake.create_table`` does, with its rows:
        returns how many."""
        self.ctx.client.check_writable(f"create_table({name!r})")
        snap = create_now(self.ctx.client, name, schema, partition_by, data=data,
                          properties=properties, if_not_exists=if_not_exists,
                          description=description)
        return sum(a.num_records or 0 for a in snap.files.values()) if snap.version == 0 else 0


class PerStatement(Decider):
    """Each statement committed when it ran: nothing to decide, nothing to undo."""

    uses_markers = False

    def __init__(self, ctx: TxnContext) -> None:
        self.ctx = ctx

    def commit(self) -> CommitResult:
        return CommitResult(self.ctx.id, dict(self.ctx.committed), dict(self.ctx.stats),
                            partial=True)

    def undo(self) -> None:
        pass  # each statement already committed on its own: nothing can be undone
