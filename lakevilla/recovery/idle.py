"""Transactions known only by their sublog entries, and settling the idle ones an operator
declares dead.

An R transaction at the tail (R,CT too, until it claims its markers at commit) holds no marker
while it runs: storage shows the sublog entries written behind its statements, and nothing that
says whether its client lives (no heartbeat). A client killed mid-transaction looks the same as
one thinking between two statements, until ``max_transaction_age``. What can be known is how
long it has been idle: since its newest entry was written. ``status`` reports that (``idle``
past a threshold); an operator who knows the client is dead settles it with
``recover(older_than=)``, by the rules of expiry-driven recovery (``stalled.py``): through the
transaction's own decision mechanism, never by guessing. An ABORTED record, put-if-absent on the
attempt's key, rolls it back unless its owner's COMMITTING record is there first, and then the
record is rolled forward (I: the global log decides, as for a stalled I marker). The record is
``final``: resume refuses the transaction, and an owner that was alive after all finds it before
its deciding write (``core/context.py``: ``check_fenced``) instead of going on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .. import logs
from ..complex_txn import record as records
from ..delta.actions import Commit
from ..errors import CorruptLogError, InvalidArgumentError
from ..markers.marker import RUNNING, commit_txn, marker_of
from ..markers.publish import publish
from ..names import TXN_DIR
from ..store import NotFound, ObjectMeta, ObjectStore
from .stalled import Services, decide_gvl_abort, roll_forward_record
from .sublog import SublogEntry

ROLLED_BACK, ROLLED_FORWARD = "rolled_back", "rolled_forward"


@dataclass
class SublogTxn:
    """What a transaction's sublog entries say of it."""

    txn: str
    attempt: str  # of its newest entry
    features: str
    tables: list[str]  # written or read
    written: list[str]
    landed: list[str]  # written tables whose log holds its commit (R decides table by table)
    started: float | None
    newest: float | None  # when its newest entry was written, by the store's clock
    statements: int

    def idle(self, now: float) -> float | None:
        """Seconds since its newest entry: how long no write of it reached storage."""
        return None if self.newest is None else now - self.newest

    @property
    def finished(self) -> bool:
        return len(self.landed) == len(self.written)


def listing(store: ObjectStore) -> tuple[dict[str, list[ObjectMeta]], list[records.TxnRecord]]:
    """One LIST of ``_lakevilla/txns/``: each transaction's sublog entries, and every record."""
    sublogs: dict[str, list[ObjectMeta]] = {}
    recs = []
    for meta in list(store.list(f"{TXN_DIR}/")):
        rest = meta.key[len(TXN_DIR) + 1:]
        if "/" in rest:
            if rest.endswith(".json"):
                sublogs.setdefault(rest.split("/", 1)[0], []).append(meta)
        elif rest.endswith(".json") and (rec := records.read(store, rest[:-5])) is not None:
            recs.append(rec)
    return sublogs, recs


def ended(recs: list[records.TxnRecord]) -> set[str]:
    """Transactions (and attempts) a record ended: committed ones, attempts recovery aborted (the
    transaction goes on only if resumed, as a new attempt), transactions rolled back for good."""
    out = set()
    for rec in recs:
        if rec.state == records.COMMITTED:
            out.add(rec.txn)
        elif rec.state == records.ABORTED:
            out.add(rec.attempt)
            if rec.final:
                out.add(rec.txn)
    return out


def read(svc: Services, txn: str, metas: list[ObjectMeta]) -> SublogTxn | None:
    """The transaction as its entries describe it (None: no entry readable any more)."""
    entries = []
    for meta in metas:
        try:
            entries.append(SublogEntry.from_json(json.loads(svc.store.get(meta.key).data)))
        except (NotFound, ValueError, TypeError, CorruptLogError):
            continue
    if not entries:
        return None
    entries.sort(key=lambda e: e.seq)
    written = sorted({e.table for e in entries})
    landed = []
    for table in written:
        log = svc.log_for(table)
        lo = min(e.read_version for e in entries if e.table == table)
        if any((a := commit_txn(c)) is not None and a.rsplit(".", 1)[0] == txn
               for _, c in log.commits_between(max(-1, lo), log.latest_version())):
            landed.append(table)
    last = entries[-1]
    return SublogTxn(
        txn=txn, attempt=last.attempt or f"{txn}.0", features=last.features,
        tables=sorted(set(written) | {r["table"] for e in entries for r in e.reads}),
        written=written, landed=landed,
        started=min((e.created for e in entries if e.created), default=None),
        newest=max((m.last_modified for m in metas if m.last_modified is not None), default=None),
        statements=len({e.op_seq for e in entries}))


def settle(svc: Services, t: SublogTxn, reason: str) -> str:
    """Roll back the idle transaction ``t`` (``ROLLED_BACK``), or forward if it turns out decided
    (``ROLLED_FORWARD``). Tables an R transaction already committed to keep its commit: each
    decided on its own."""
    if "I" in t.features.split(","):
        state, entry = decide_gvl_abort(svc.gvl, t.attempt, None, landed=lambda: bool(t.landed))
        if state == "committed":
            for table, p in (entry.pending.items() if entry is not None else ()):
                if p.attempt == t.attempt:
                    publish(svc.log_for(table), p.attempt, Commit.from_bytes(p.commit.encode()),
                            marker_version=p.marker, mode=p.mode, hint=p.hint)
            return ROLLED_FORWARD
    rec = records.read(svc.store, t.attempt) or records.decide(svc.store, records.TxnRecord(
        attempt=t.attempt, txn=t.txn, state=records.ABORTED, by="recovery", reason=reason,
        final=True))
    if rec.state == records.COMMITTING:
        roll_forward_record(svc, rec)  # its owner decided after all: never undo a decision
    return ROLLED_FORWARD if rec.state in (records.COMMITTING, records.COMMITTED) else ROLLED_BACK


def check_older_than(seconds: Any, floor: float, force: bool) -> float:
    """``recover(older_than=)`` checked: a number of seconds, at least ``floor`` (the settings'
    ``idle_floor``) unless ``force``."""
    try:
        seconds = float(seconds)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"older_than must be a number of seconds, got "
                                   f"{seconds!r}") from None
    if not seconds >= 0:
        raise InvalidArgumentError("older_than must be >= 0 seconds")
    if seconds < floor and not force:
        raise InvalidArgumentError(
            f"older_than={seconds:g}s is shorter than {floor:g}s (this lake's idle floor: 60 s, "
            "or the marker ttl if longer): a client idle that long may be thinking between two "
            "statements. Pass force=True only if you know no client is writing")
    return seconds


def settle_idle(svc: Services, now: float, older_than: float,
                tables: list[str] | None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Settle every transaction known only by its sublogs that wrote nothing for ``older_than``
    seconds (of ``tables``, if given): (outcome, {"txn", "attempt", "features", "tables",
    "kept", "idle"}) each; ``kept``: tables an R transaction had committed to already."""
    sublogs, recs = listing(svc.store)
    done = ended(recs)
    for txn, metas in sorted(sublogs.items()):
        if txn in done:
            continue
        t = read(svc, txn, metas)
        quiet = t.idle(now) if t is not None else None
        if (t is None or quiet is None or quiet < older_than or t.attempt in done or t.finished
                or (tables is not None and not set(t.written) <= set(tables))
                or _holds_marker(svc, t)):
            continue
        outcome = settle(svc, t, f"idle for {quiet:.0f}s, declared dead by "
                                 f"recover(older_than={older_than:g})")
        row = {"txn": t.txn, "attempt": t.attempt, "features": t.features, "tables": t.written,
               "kept": t.landed, "idle": round(quiet, 3)}
        logs.maintenance("idle_settled", "idle transaction %s %s (no write for %.0fs)",
                         t.attempt, outcome.replace("_", " "), quiet, level=logging.WARNING,
                         outcome=outcome, **row)
        yield outcome, row


def _holds_marker(svc: Services, t: SublogTxn) -> bool:
    """Whether ``t`` holds a running marker on a table it wrote: then the marker's expiry, not
    its sublogs, says whether its client lives (recovery settles the expired ones first)."""
    for table in t.written:
        log = svc.log_for(table)
        latest = log.latest_version()
        lo = max(-1, latest - 1000, log.last_checkpoint_version() - 1)
        for _v, c in log.commits_between(lo, latest):
            m = marker_of(c)
            if m is not None and m.state == RUNNING and m.txn == t.txn:
                return True
    return False
