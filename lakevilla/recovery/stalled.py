"""Finishing or undoing other clients' stalled transactions.

A marker whose heartbeat expired belongs to a client that died or stalled. What
happens to it depends on how its transaction decides (``decision`` in the marker):

* ``table`` (LV[R]): the table commit itself is the decision. If it landed, the
  marker is closed as committed; otherwise it is freed. A late owner can still
  commit at the tail afterwards; that commit is validated like any other.
* ``record`` (LV[CT]): the transaction record decides. No record yet: we create
  it as ABORTED (put-if-absent), so the owner can no longer commit, and free the
  marker. COMMITTING: we write the table commits from the record (roll forward).
* ``gvl`` (LV[I]): the global log decides. Not announced yet: we append an entry
  that aborts it; announced: we roll its pending writes forward.

Freed markers keep their sublogs; the owner can claim new markers and go on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .. import logs
from ..complex_txn import record as records
from ..delta.actions import Commit
from ..delta.log import DeltaLog
from ..errors import CreateConflictError
from ..isolation.gvl import APPENDED, GlobalVersionLog, GvlEntry, first_entry
from ..markers.marker import COMMITTED, FREED, RUNNING, commit_txn, free_stalled, marker_of
from ..markers.publish import find_commit, publish, publish_create
from ..store import NotFound, ObjectStore


@dataclass
class Resolution:
    table: str
    version: int
    attempt: str
    outcome: str  # committed | freed | running | resolved
    commit_version: int | None = None


@dataclass
class Services:
    store: ObjectStore
    log_for: Callable[[str], DeltaLog]
    gvl: GlobalVersionLog
    now: Callable[[], float]


def resolve_marker(svc: Services, table: str, version: int, *, force: bool = False) -> Resolution:
    """Look at the marker at ``table@version``; finish or free it if it is stalled."""
    res = _resolve_marker(svc, table, version, force=force)
    if res.outcome in ("committed", "freed"):
        logs.recovered(table, version, res.attempt, res.outcome, res.commit_version)
    return res


def _resolve_marker(svc: Services, table: str, version: int, *, force: bool) -> Resolution:
    log = svc.log_for(table)
    try:
        commit, etag = log.read_commit_raw(version)
    except NotFound:
        return Resolution(table, version, "", "resolved")
    m = marker_of(commit)
    if m is None or m.state != RUNNING:
        owner = commit_txn(commit) or (m.attempt if m else "")
        return Resolution(table, version, owner, "resolved")
    if not force and not m.expired(svc.now()):
        return Resolution(table, version, m.attempt, "running")

    latest = log.latest_version()
    if m.decision == "record":
        rec = (records.read(svc.store, m.attempt)
               or records.abort(svc.store, m.attempt, m.txn, "stalled marker"))
        if rec.state in (records.COMMITTING, records.COMMITTED) and table in rec.tables:
            roll_forward_record(svc, rec)
            return _close(log, version, m, etag, table)
    elif m.decision == "gvl":
        state, entry = decide_gvl_abort(
            svc.gvl, m.attempt, m.gvl_base,
            landed=lambda: find_commit(log, m.attempt, version, latest) is not None)
        if state == "committed" and entry is not None and table in entry.pending \
                and entry.pending[table].attempt == m.attempt:
            p = entry.pending[table]
            v = publish(log, m.attempt, Commit.from_bytes(p.commit.encode()),
                        marker_version=version, mode=p.mode, hint=p.hint)
            if v != version:
                free_stalled(log, version, m, etag, COMMITTED, "rolled forward by recovery", v)
            return Resolution(table, version, m.attempt, "committed", v)
    found = find_commit(log, m.attempt, version, latest)
    # the owner's table commit landed (decision "table", or single-table commit)
    if found is not None:
        free_stalled(log, version, m, etag, COMMITTED, "closed by recovery", found)
        return Resolution(table, version, m.attempt, "committed", found)
    ok = free_stalled(log, version, m, etag, FREED, "expired")
    return Resolution(table, version, m.attempt, "freed" if ok else "resolved")


def _close(log: DeltaLog, version: int, m, etag: str, table: str) -> Resolution:
    current, etag2 = log.read_commit_raw(version)
    if commit_txn(current) == m.attempt:
        return Resolution(table, version, m.attempt, "committed", version)
    latest = log.latest_version()
    found = find_commit(log, m.attempt, version, latest)
    m2 = marker_of(current)
    if m2 is not None and m2.state == RUNNING:
        free_stalled(log, version, m2, etag2, COMMITTED, "rolled forward by recovery", found)
    return Resolution(table, version, m.attempt, "committed", found)


def roll_forward_record(svc: Services, rec: records.TxnRecord) -> dict[str, int]:
    """Write every table commit of a COMMITTING record, close its markers, mark it done."""
    landed: dict[str, int] = {}
    conflict: CreateConflictError | None = None
    for table, intent in rec.tables.items():
        log = svc.log_for(table)
        if intent.create:
            try:
                landed[table] = publish_create(log, rec.attempt,
                                               Commit.from_bytes(intent.commit.encode()))
            except CreateConflictError as e:
                # the other tables are still rolled forward; the record stays COMMITTING
                conflict = e
            continue
        v = publish(log, rec.attempt, Commit.from_bytes(intent.commit.encode()),
                    marker_version=intent.marker, mode=intent.mode)
        landed[table] = v
        if intent.marker is not None and v != intent.marker:
            current, etag = log.read_commit_raw(intent.marker)
            m = marker_of(current)
            if m is not None and m.state == RUNNING and m.attempt == rec.attempt:
                free_stalled(log, intent.marker, m, etag, COMMITTED, "rolled forward", v)
    if conflict is not None:
        raise conflict
    for t, v in landed.items():
        rec.tables[t].version = v
    if rec.state != records.COMMITTED:
        records.finish(svc.store, rec)
    logs.record_rolled_forward(rec.attempt, landed)
    return landed


def decide_gvl_abort(gvl: GlobalVersionLog, attempt: str, after: int | None,
                     landed: Callable[[], bool] | None = None) -> tuple[str, GvlEntry | None]:
    """Make sure a stalled I transaction is decided: returns ('committed'|'aborted', entry).

    The decision is in the entries after ``after`` (the entry the transaction's markers
    name). If clean-up removed some of them, a commit is still known: the entries after
    the horizon carry its writes until they land, and ``landed()`` looks for one that did.
    Otherwise we append an entry that aborts it; its owner's announcement, validated
    against every entry before it, then fails."""
    while True:
        state, entry, complete = gvl.find_decision(attempt, after if after is not None else -1)
        if state is not None:
            return state, entry
        if not complete and landed is not None and landed():
            return "committed", None
        nxt = entry.successor(None) if entry is not None else first_entry()
        nxt.aborts = [attempt]
        if gvl.append(nxt, gvl.last_hint) == APPENDED:
            logs.gvl_abort(attempt, nxt.seq)
            return "aborted", nxt
