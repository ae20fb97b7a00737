"""What a table commit is, seen from the global log: the unit a cut takes whole or not at all.

* a marker (an empty version; an open in-place marker may still be filled),
* a commit decided by the global log (an I transaction: its entry takes it in),
* a multi-table commit decided by a transaction record (R,CT): all of its tables or none,
* anything else is a single-table commit, atomic on its own: plain Delta, delta-rs, R,
  single-table CT, table creation.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..complex_txn import record as records
from ..delta.actions import Commit
from ..markers.marker import RUNNING, marker_of
from ..store import ObjectStore
from ..vocab import CommitInfo, CommitMode, Decision

MARKER, OPEN_MARKER, ANNOUNCED, MULTI, SINGLE = (
    "marker", "open-marker", "announced", "multi", "single")


@dataclass(frozen=True)
class Unit:
    kind: str
    attempt: str | None = None
    # MULTI: every table of the transaction, when the commit names them
    tables: tuple[str, ...] = ()


def unit_of(c: Commit) -> Unit:
    m = marker_of(c)
    if m is not None:
        if m.state == RUNNING and m.mode == CommitMode.IN_PLACE:
            return Unit(OPEN_MARKER, m.attempt)
        return Unit(MARKER, m.attempt)
    info = CommitInfo.of(c.lakevilla)
    if info is not None and info.is_commit:
        if info.decision == Decision.GVL:
            return Unit(ANNOUNCED, info.attempt)
        if info.decision == Decision.RECORD and int(info.tables or 1) > 1:
            return Unit(MULTI, info.attempt, tuple(info.txn_tables or ()))
    return Unit(SINGLE)


class RecordCache:
    """Transaction records by attempt. A record that decided COMMITTING only changes to
    COMMITTED (its intents stay), and one that is gone was finished and cleaned up, so
    both answers are kept."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._known: dict[str, records.TxnRecord | None] = {}
        self._lock = threading.Lock()

    def get(self, attempt: str) -> records.TxnRecord | None:
        with self._lock:
            if attempt in self._known:
                return self._known[attempt]
        rec = records.read(self.store, attempt)
        if rec is None or rec.state in (records.COMMITTING, records.COMMITTED):
            with self._lock:
                self._known[attempt] = rec
        return rec
