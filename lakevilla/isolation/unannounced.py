"""The consistent cut of a client that cannot write: a read-only lake, or read-only credentials.

An isolated reader normally appends what no global-log entry took in yet (the log is built
on demand), so that every I transaction committing later is ordered after its read, and it
finishes a decided transaction it finds half published. A client that cannot write does
neither. It computes the same cut: the newest entry, then every commit since that can be
taken whole (a multi-table commit with all its halves, never one half). It keeps that cut to
itself instead of appending it, and grows it from there as from an entry of the log. A
half-published transaction stays out of the cut until its owner or recovery finishes it. So
its reads are one consistent cut, as fresh as the commits that had landed whole when each
table was first read. They are serializable but not
linearizable: an I writer that commits later is not ordered after them.
"""

from __future__ import annotations

import time

from ..errors import TransactionAborted
from .closure import Growth
from .cut import Cut
from .gvl import GvlEntry, PendingWrite
from .resolve import find_pending


class UnannouncedCut(Cut):
    """Never appends (what it takes in stands in for the entries: ``Cut.taken``), never
    finishes another transaction, never writes an announced write for its owner."""

    rolls_forward = False

    def _resolve(self, table: str, p: PendingWrite) -> int:
        """Wait for an announced write to land; a client that cannot write cannot write it."""
        deadline = time.monotonic() + self.patience
        delay = 0.005
        while True:
            v = find_pending(self.log_for(table), p)
            if v is not None:
                return v
            if time.monotonic() >= deadline:
                raise TransactionAborted(
                    f"table {table!r}: transaction {p.attempt} was announced in the global log but "
                    "has not written this table yet, and a client that cannot write cannot finish "
                    "it; read again later (its owner or lake.recover() with write "
                    "access finishes it)", txn_id=self.txn_id, reason="unwritten")
            time.sleep(delay)  # protocol backoff while the owner writes its commit
            delay = min(delay * 2, 0.2)

    def _announce(self, head: GvlEntry | None, delta: dict[str, int], growth: Growth) -> str:
        return self._keep(delta)
