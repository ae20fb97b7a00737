"""Resuming a crashed transaction from its sublogs (``lake.resume``).

Earlier attempts are settled first (``settle_earlier_attempts``): a decided one is rolled
forward and reported (``TransactionStateError``), never re-executed; an undecided one is fenced
off through its own decision mechanism so it can never commit later. Then each table's view
is rebuilt from the entries: the statements join it as they were executed, and are redone at
commit if the table moved (a logical entry), or abort the transaction if they conflict (a
physical one, or a recorded read that went stale). The transaction keeps its original start
for ``max_transaction_age``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..complex_txn import record as records
from ..delta.actions import AddFile, CdcFile
from ..delta.log import DeltaLog
from ..delta.snapshot import Snapshot
from ..engines.api import TableContext, data_file_key
from ..errors import LakeVillaError, TransactionAborted, TransactionStateError
from ..markers.marker import RUNNING, marker_of
from ..statements import registry
from ..statements.base import Statement
from ..statements.view import TableWork
from ..store import NotFound, ObjectStore
from ..vocab import CommitInfo
from . import sublog as sublogs
from .stalled import Services, resolve_marker, roll_forward_record

MARKER_SCAN_WINDOW = 200


@dataclass
class Resumed:
    """A crashed transaction as its sublogs describe it, ready to be continued."""

    features: str
    isolation: str
    mode: str
    started: float | None
    attempt_no: int  # the new attempt
    sublog_seq: int  # the last entry written
    seq: int  # the last statement
    tables: dict[str, TableWork] = field(default_factory=dict)
    staged: list[str] = field(default_factory=list)  # keys deleted with the sublogs (MERGE sources)


def settle_earlier_attempts(svc: Services, log_for: Callable[[str], DeltaLog], txn_id: str,
                            first_versions: dict[str, int]) -> None:
    """Before a crashed transaction is resumed, every earlier attempt must be settled: a
    decided one is rolled forward (and nothing is resumed), an undecided one is fenced
    off through its own decision mechanism (ABORTED record, global-log abort, freed
    marker) so it can never commit later. A marker that has not expired means its client
    may still be running: resume refuses rather than race it."""
    for rec in records.of_txn(svc.store, txn_id):
        if rec.state == records.COMMITTING:
            roll_forward_record(svc, rec)
            raise TransactionStateError(f"transaction {txn_id} was already decided "
                                        f"(record {rec.attempt} says COMMITTING); it has been "
                                        "rolled forward now: nothing to resume")
        if rec.state == records.COMMITTED:
            raise TransactionStateError(f"transaction {txn_id} already committed "
                                        f"(record {rec.attempt}): nothing to resume")
        if rec.state == records.ABORTED and rec.final:
            raise TransactionStateError(f"transaction {txn_id} was rolled back ({rec.reason}): "
                                        "nothing to resume")
    now = svc.now()
    stalled: list[tuple[str, int]] = []
    for table, first in sorted(first_versions.items()):
        log = log_for(table)
        for v, c in log.commits_between(max(-1, first - 1), log.latest_version()):
            info = CommitInfo.of(c.lakevilla)
            if info is not None and info.is_commit and info.names_txn(txn_id):
                raise TransactionStateError(f"transaction {txn_id} already committed to {table!r} "
                                            f"at version {v} (rolled forward by recovery, or "
                                            "committed before the crash): nothing to resume")
            m = marker_of(c)
            if m is None or m.txn != txn_id or m.state != RUNNING:
                continue
            if not m.expired(now):
                raise TransactionStateError(
                    f"transaction {txn_id} still holds a live marker on {table}@{v} (it expires in "
                    f"{m.expires - now:.1f}s): its client may still be running. Resume it after "
                    "the marker expires (marker_ttl without a heartbeat)")
            stalled.append((table, v))
    decided = []
    for table, v in stalled:  # every one: an I decision is rolled forward marker by marker
        res = resolve_marker(svc, table, v)
        if res.outcome == "committed":
            decided.append(f"{table}@{v}")
    if decided:
        raise TransactionStateError(f"transaction {txn_id} was already decided "
                                    f"({', '.join(decided)}); it has been rolled forward now: "
                                    "nothing to resume")


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


def _check_files(store: ObjectStore, root_uri: str, txn_id: str, table: str,
                 added: list[AddFile] | list[CdcFile]) -> None:
    paths = {p for a in added
             for p in (a.written_files if isinstance(a, AddFile) else (a.path,))}
    for p in paths:  # it must be there to be committed
        try:
            store.head(data_file_key(table, p, root_uri))
        except NotFound:
            raise TransactionAborted(f"{table}: file {p} of transaction {txn_id} is gone "
                                     "(deleted as abandoned?)", txn_id=txn_id,
                                     reason="lost-data") from None


def load(svc: Services, log_for: Callable[[str], DeltaLog], root_uri: str, txn_id: str) -> Resumed:
    """Read ``txn_id``'s sublogs, settle its earlier attempts and rebuild its tables' views."""
    entries = sublogs.read_all(svc.store, txn_id)
    if not entries:
        raise LakeVillaError(f"no sublogs for transaction {txn_id!r}: nothing to resume (it "
                             "committed, was cleaned up, or never wrote)")
    first_versions: dict[str, int] = {}
    for e in entries:
        for t, v in [(e.table, e.read_version), *((r["table"], r["version"]) for r in e.reads)]:
            first_versions[t] = min(v, first_versions.get(t, v))
    settle_earlier_attempts(svc, log_for, txn_id, first_versions)
    last = entries[-1]
    attempts = [int(e.attempt.rsplit(".", 1)[1]) for e in entries if e.attempt and "." in e.attempt]
    out = Resumed(features=last.features, isolation=last.isolation, mode=last.mode,
                  started=min((e.created for e in entries if e.created), default=None),
                  attempt_no=max(attempts, default=0) + 1, sublog_seq=max(e.seq for e in entries),
                  seq=0)
    by_table: dict[str, list[sublogs.SublogEntry]] = {}
    for e in sublogs.current_ops(entries):
        by_table.setdefault(e.table, []).append(e)
    reads_by_table: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        for r in e.reads:
            reads_by_table.setdefault(r["table"], []).append(r)
    for table in sorted(set(by_table) | set(reads_by_table)):
        ents, reads = by_table.get(table, []), reads_by_table.get(table, [])
        tw = _table(svc.store, root_uri, log_for(table), txn_id, ents, reads, out)
        out.tables[table] = tw
        out.seq = max(out.seq, max((e.op_seq for e in ents), default=0))
    return out


def _table(store: ObjectStore, root_uri: str, log: DeltaLog, txn_id: str,
           ents: list[sublogs.SublogEntry], reads: list[dict[str, Any]], out: Resumed) -> TableWork:
    table = log.table
    base_v = max([e.base_version for e in ents] + [r["version"] for r in reads])
    snap: Snapshot = log.snapshot(base_v)
    ctx = TableContext.of(table, store, root_uri, snap)
    tw = TableWork(table, log, snap, ctx)
    tw.recheck |= _filled_in_place(log, base_v)
    tw.read_version = min([e.read_version for e in ents] + [r["version"] for r in reads])
    tw.validated_upto = min([e.base_version for e in ents] + [r["version"] for r in reads])
    for r in reads:
        out.seq += 1
        tw.ops.append(registry.read_of(out.seq, table, r.get("where"), set(r.get("files") or [])))
    for e in ents:
        added = e.added_files()
        _check_files(store, root_uri, txn_id, table, added)
        op: Statement = registry.decode(e.op, e.op_seq, table,
                                        e.statement if e.statement is not None else None, added,
                                        removed=[AddFile.from_json(r) for r in e.removed],
                                        read_files=set(e.read_files), logical=e.kind == "logical")
        op.cdc = e.cdc_files()
        _check_files(store, root_uri, txn_id, table, op.cdc)
        if e.predicate is not None and (e.statement is None or "where" not in e.statement):
            op.where = e.predicate
        out.staged.extend(op.staged_keys())  # the staged source goes with the sublogs
        tw.adopt(op)
    tw.logical = True
    return tw
