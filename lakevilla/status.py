"""What an operator sees (``Lake.status()``, ``lakevilla status``): read-only, from storage.

Per table, the open markers: who holds them, with which features, since when, when they
last beat and which open markers below them they queue behind. Per transaction (grouped by
attempt): ``running``, ``waiting`` (queued behind another transaction's open marker: from
storage we cannot tell whether its client is still issuing statements or already waits at
commit), ``stalled`` (a marker past its expiry: its client died or paused; ``recover``
finishes or undoes it), ``decided-unpublished`` (a COMMITTING record, or an announced global
log entry, whose table commits are not all written yet: any client that meets it, or
``recover``, writes them) or ``decided`` (all written, bookkeeping left). And the global log's
head, hint and clean-up horizon. A transaction with no marker (R commits at the tail without
one) is known by its sublog entries, and no heartbeat says whether its client lives: only how
long it has written nothing. ``running``; ``idle`` past ``idle_after`` (its client may be dead,
or thinking: an operator who knows it is dead rolls it back with ``recover(older_than=)``); or
``abandoned`` once older than the lake's max_transaction_age (it can never commit; clean-up
removes its entries).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .complex_txn import record as records
from .delta.log import not_found
from .errors import TableNotFoundError
from .isolation import resolve as gvl_resolve
from .isolation.gvl import HINT_KEY
from .markers.marker import RUNNING, commit_txn, marker_of
from .markers.publish import find_commit
from .names import GVL_DIR
from .recovery import idle
from .store import NotFound
from .vocab import Decision

if TYPE_CHECKING:
    # what status reads: the store, logs, the global log
    from .core.client import LakeClient as Lake

MARKER_WINDOW = 1000  # versions below the newest searched for open markers (as recover does)
RUNNING_STATE, WAITING, STALLED = "running", "waiting", "stalled"
_DECIDERS: dict[str, str] = {Decision.TABLE: "table", Decision.RECORD: "record",
                             Decision.GVL: "global_log"}
DECIDED_UNPUBLISHED, DECIDED = "decided-unpublished", "decided"
# sublogs only (no marker, no heartbeat): no write for idle_after (an operator may declare its
# client dead: recover(older_than=)), or for max_transaction_age (it can never commit)
IDLE, ABANDONED = "idle", "abandoned"


@dataclass
class MarkerStatus:
    table: str
    version: int
    txn: str
    attempt: str
    features: str
    decision: str
    mode: str
    state: str  # running | stalled
    started: float
    heartbeat: float
    expires: float
    age: float
    heartbeat_age: float
    waits_for: list[str] = field(default_factory=list)  # attempts of open markers below this one
    # its transaction's commit already landed here (marker not closed yet)
    committed_at: int | None = None


@dataclass
class TableStatus:
    name: str
    version: int
    open_markers: list[MarkerStatus] = field(default_factory=list)


@dataclass
class TransactionStatus:
    attempt: str
    txn: str
    state: str  # running | waiting | stalled | decided-unpublished | decided
    features: str = ""
    decision: str = ""
    markers: dict[str, int] = field(default_factory=dict)  # table -> open marker version
    started: float | None = None
    heartbeat: float | None = None
    age: float | None = None
    heartbeat_age: float | None = None
    waits_for: list[str] = field(default_factory=list)
    decided_by: str | None = None  # "record" | "global_log"
    # decided tables whose commit is not written
    unpublished: list[str] = field(default_factory=list)
    # the tables it touched (markers, sublog entries)
    tables: list[str] = field(default_factory=list)
    statements: int = 0  # write statements its sublogs hold (R)
    activity_age: float | None = None  # seconds since its newest sublog entry


@dataclass
class GlobalLogStatus:
    head: int
    head_txn: str | None
    head_created: float
    hint: int | None
    oldest: int | None  # the clean-up horizon: the oldest entry still present
    entries: int
    pending: list[dict[str, Any]] = field(default_factory=list)  # {table, attempt, published}


@dataclass
class LakeStatus:
    root: str
    now: float
    marker_ttl: float
    tables: list[TableStatus] = field(default_factory=list)
    transactions: list[TransactionStatus] = field(default_factory=list)
    records: dict[str, int] = field(default_factory=dict)
    global_log: GlobalLogStatus | None = None
    # names held for a table being created: {table, holder, txn, kind, age, expired}
    creating: list[dict[str, Any]] = field(default_factory=list)
    # seconds without a write after which a transaction known by its sublogs alone is "idle"
    idle_after: float = 60.0
    v: int = 1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def transaction(self, attempt: str) -> TransactionStatus | None:
        return next((t for t in self.transactions if t.attempt == attempt), None)


def _open_markers(lake: Lake, table: str, now: float) -> TableStatus:
    log = lake.log(table)
    latest = log.latest_version()
    out = TableStatus(table, latest)
    if latest < 0:
        return out
    lo = max(-1, latest - MARKER_WINDOW, log.last_checkpoint_version() - 1)
    candidates, landed = [], {}
    for v, c in log.commits_between(lo, latest):
        m = marker_of(c)
        if m is not None and m.state == RUNNING:
            candidates.append(v)
        elif commit_txn(c) is not None:
            landed[commit_txn(c)] = v
    below: list[str] = []
    for v in candidates:
        try:
            # heartbeats and states move: never trust a cached marker
            fresh, _ = log.read_commit_raw(v)
        except NotFound:
            continue
        m = marker_of(fresh)
        if m is None or m.state != RUNNING:
            continue
        out.open_markers.append(MarkerStatus(
            table=table, version=v, txn=m.txn, attempt=m.attempt, features=m.features,
            decision=m.decision, mode=m.mode, state=STALLED if m.expired(now) else RUNNING_STATE,
            started=m.started, heartbeat=m.heartbeat, expires=m.expires,
            age=round(now - m.started, 3), heartbeat_age=round(now - m.heartbeat, 3),
            waits_for=sorted({a for a in below if a != m.attempt}),
            committed_at=landed.get(m.attempt)))
        below.append(m.attempt)
    return out


def gvl_horizon(lake: Lake) -> tuple[int | None, int]:
    """(oldest entry present, number of entries): clean-up deletes below the horizon, and
    no appender may write there."""
    seqs = []
    for meta in lake.store.list(f"{GVL_DIR}/"):
        name = meta.key.rsplit("/", 1)[-1]
        if name.endswith(".json") and name[:-5].isdigit():
            seqs.append(int(name[:-5]))
    return (min(seqs) if seqs else None), len(seqs)


def _global_log(lake: Lake) -> GlobalLogStatus | None:
    head = lake.gvl.head()
    if head is None:
        return None
    try:
        hint: int | None = int(json.loads(lake.store.get(HINT_KEY).data)["seq"])
    except (NotFound, ValueError, KeyError, TypeError):
        hint = None
    oldest, entries = gvl_horizon(lake)
    pending = [{"table": t, "attempt": p.attempt,
                "published": gvl_resolve.find_pending(lake.log(t), p) is not None}
               for t, p in sorted(head.pending.items())]
    return GlobalLogStatus(head=head.seq, head_txn=head.txn, head_created=head.created, hint=hint,
                           oldest=oldest, entries=entries, pending=pending)


def _records(recs: list[records.TxnRecord]) -> tuple[dict[str, int], list[records.TxnRecord]]:
    """Record counts by state, and the COMMITTING records."""
    counts: dict[str, int] = {records.COMMITTING: 0, records.COMMITTED: 0, records.ABORTED: 0}
    for rec in recs:
        counts[rec.state] = counts.get(rec.state, 0) + 1
    return counts, [r for r in recs if r.state == records.COMMITTING]


def _from_sublogs(t: idle.SublogTxn, now: float, max_age: float,
                  idle_after: float) -> TransactionStatus:
    """A transaction known by its sublog entries alone (R at the tail holds no marker): no
    heartbeat says whether its client lives, only how long it has written nothing: ``running``,
    ``idle`` past ``idle_after``, ``abandoned`` past max_transaction_age (it can never commit)."""
    quiet = t.idle(now)
    state = (RUNNING_STATE if quiet is None or quiet < idle_after
             else IDLE if quiet <= max_age else ABANDONED)
    return TransactionStatus(attempt=t.attempt, txn=t.txn, state=state, features=t.features,
                             started=t.started, tables=t.tables, statements=t.statements,
                             activity_age=round(quiet, 3) if quiet is not None else None)


def _unwritten(lake: Lake, rec: records.TxnRecord) -> list[str]:
    out = []
    for table, intent in sorted(rec.tables.items()):
        log = lake.log(table)
        latest = log.latest_version()
        lo = (intent.marker - 1) if intent.marker is not None else max(-1, latest - MARKER_WINDOW)
        if find_commit(log, rec.attempt, lo, latest) is None:
            out.append(table)
    return out


def lake_status(lake: Lake, tables: list[str] | None, list_tables: Callable[[], list[str]],
                idle_after: float | None = None) -> LakeStatus:
    """``tables``: the tables to report (None: every table ``list_tables`` finds).
    ``idle_after``: seconds without a write after which a transaction holding no marker is
    ``idle`` (default: the settings' ``idle_floor``, the least ``recover(older_than=)`` takes)."""
    now = lake.now()
    st = LakeStatus(root=lake.root_uri, now=now, marker_ttl=lake.settings.marker_ttl,
                    idle_after=lake.settings.idle_floor if idle_after is None else idle_after)
    st.tables = [_open_markers(lake, t, now)
                 for t in (tables if tables is not None else list_tables())]
    missing = [ts.name for ts in st.tables if ts.version < 0] if tables is not None else []
    if missing:
        raise not_found(lake.log(missing[0])) if not lake.store.root_exists() else (
            TableNotFoundError(f"no such table(s) in {lake.root_uri}: {', '.join(missing)}"))
    txns: dict[str, TransactionStatus] = {}
    for ts in st.tables:
        for m in ts.open_markers:
            t = txns.get(m.attempt)
            if t is None:
                t = txns[m.attempt] = TransactionStatus(attempt=m.attempt, txn=m.txn,
                                                        state=RUNNING_STATE, features=m.features,
                                                        decision=m.decision, started=m.started,
                                                        heartbeat=m.heartbeat)
            t.markers[m.table] = m.version
            t.heartbeat = max(t.heartbeat or 0.0, m.heartbeat)
            t.waits_for = sorted(set(t.waits_for) | set(m.waits_for))
            if m.state == STALLED:
                t.state = STALLED
    by_attempt: dict[str, list[MarkerStatus]] = {}
    for ts in st.tables:
        for m in ts.open_markers:
            by_attempt.setdefault(m.attempt, []).append(m)
    for attempt, t in txns.items():
        if all(m.committed_at is not None for m in by_attempt[attempt]):
            # markers not closed yet
            t.state, t.decided_by = DECIDED, _DECIDERS.get(t.decision, t.decision)
        elif t.state != STALLED and t.waits_for:
            t.state = WAITING

    def decided(attempt: str, txn: str, by: str, unpublished: list[str]) -> None:
        t = txns.get(attempt) or txns.setdefault(
            attempt, TransactionStatus(attempt=attempt, txn=txn, state=DECIDED))
        t.decided_by = by
        t.unpublished = sorted(set(t.unpublished) | set(unpublished))
        t.state = DECIDED_UNPUBLISHED if t.unpublished else DECIDED

    sublogs, recs = idle.listing(lake.store)
    st.records, committing = _records(recs)
    ended = idle.ended(recs)
    for rec in committing:
        decided(rec.attempt, rec.txn, "record", _unwritten(lake, rec))
    st.global_log = _global_log(lake)
    if st.global_log is not None:
        for p in st.global_log.pending:
            if not p["published"]:
                decided(p["attempt"], p["attempt"].rsplit(".", 1)[0], "global_log", [p["table"]])
    svc = lake.services()
    for txn, metas in sorted(sublogs.items()):
        ours = [t for t in txns.values() if t.txn == txn]
        if txn in ended and not ours:
            continue
        known = idle.read(svc, txn, metas)
        if known is None or known.finished or known.attempt in ended:
            continue  # committed everywhere, or ended by a record (sublogs left for clean-up)
        if ours:  # its markers told us already: add what its sublogs say
            quiet = known.idle(now)
            for t in ours:
                t.statements = known.statements
                t.activity_age = round(quiet, 3) if quiet is not None else None
                t.tables = sorted(set(t.tables) | set(known.tables))
        else:
            t = _from_sublogs(known, now, lake.settings.max_transaction_age, st.idle_after)
            txns[t.attempt] = t
    for t in txns.values():
        t.tables = sorted(set(t.tables) | set(t.markers) | set(t.unpublished))
        if t.started is not None:
            t.age = round(now - t.started, 3)
        if t.heartbeat is not None:
            t.heartbeat_age = round(now - t.heartbeat, 3)
    from .complex_txn import reservations

    for res, _etag in reservations.all_reservations(lake.store):
        if res.state == reservations.HELD and (tables is None or res.table in tables):
            st.creating.append({"table": res.table, "holder": res.holder, "txn": res.txn,
                                "kind": res.kind, "age": round(now - res.created, 3),
                                "expired": now > res.expires})
    order = {DECIDED_UNPUBLISHED: 0, STALLED: 1, IDLE: 2, WAITING: 3, RUNNING_STATE: 4,
             DECIDED: 5, ABANDONED: 6}
    st.transactions = sorted(txns.values(), key=lambda t: (order.get(t.state, 9), t.attempt))
    return st


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if abs(seconds) < 120:
        return f"{seconds:.1f}s"
    if abs(seconds) < 7200:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"


def render_text(st: LakeStatus) -> str:
    lines = [f"lake {st.root} (marker ttl {st.marker_ttl:g}s)", ""]
    lines.append(f"tables ({len(st.tables)})")
    for ts in st.tables:
        opened = f"{len(ts.open_markers)} open marker(s)" if ts.open_markers else "no open markers"
        lines.append(f"  {ts.name:<24} version {ts.version:<6} {opened}")
        for m in ts.open_markers:
            queue = f"  waits for {', '.join(m.waits_for)}" if m.waits_for else ""
            lines.append(f"    @{m.version:<5} {m.attempt}  {m.features or '-':<7} {m.state:<8} "
                         f"age {_ago(m.age)}, heartbeat {_ago(m.heartbeat_age)} ago{queue}")
    lines += ["", f"transactions ({len(st.transactions)})"]
    if not st.transactions:
        lines.append("  none open")
    for t in st.transactions:
        where = ", ".join(f"{k}@{v}" for k, v in sorted(t.markers.items())) or "-"
        extra = []
        if t.unpublished:
            assert t.decided_by is not None  # set with them (``decided``)
            extra.append(f"unpublished: {', '.join(t.unpublished)} (decided "
                         f"by {t.decided_by.replace('_', ' ')})")
        elif t.decided_by:
            extra.append(f"all published (decided by {t.decided_by.replace('_', ' ')}; "
                         "bookkeeping left)")
        if t.waits_for:
            extra.append(f"waits for {', '.join(t.waits_for)}")
        if t.state in (STALLED, DECIDED_UNPUBLISHED):
            extra.append("'lakevilla recover' finishes it")
        if t.statements:
            extra.append(f"{t.statements} statement(s) in its sublogs, no write for "
                         f"{_ago(t.activity_age)}")
        if t.state == IDLE:
            extra.append("whether its client lives cannot be known from storage: if it is "
                         f"dead, 'lakevilla recover ROOT --older-than {st.idle_after:g}' rolls "
                         "it back")
        beat = (f"heartbeat {_ago(t.heartbeat_age)} ago" if t.heartbeat is not None
                else "no heartbeat (holds no marker)")
        lines.append(f"  {t.attempt}  {t.features or '-':<7} {t.state:<20} "
                     f"tables {', '.join(t.tables) or '-'}; markers {where}; "
                     f"age {_ago(t.age)}, {beat}" + ("; " + "; ".join(extra) if extra else ""))
    for c in st.creating:
        dead = "expired: 'lakevilla recover' frees it" if c["expired"] else "held"
        lines.append(f"  creating {c['table']} by {c['holder']} ({c['kind']}), "
                     f"age {_ago(c['age'])}, {dead}")
    rec = st.records
    lines += ["", "records: " + ", ".join(f"{n} {s}" for s, n in rec.items())]
    g = st.global_log
    if g is None:
        lines.append("global log: none (no LV[I] transaction has run)")
    else:
        waiting = [p for p in g.pending if not p["published"]]
        lines.append(f"global log: head {g.head} (txn {g.head_txn or '-'}, "
                     f"{_ago(st.now - g.head_created)} ago), "
                     f"hint {g.hint if g.hint is not None else '-'}, oldest entry {g.oldest} "
                     f"(clean-up horizon), {g.entries} entries, {len(g.pending)} pending "
                     f"write(s), {len(waiting)} not yet in their table")
    return "\n".join(lines)
