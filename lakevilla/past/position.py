"""``lake.at(n)``: the cut the global log's entry ``n`` records.

An entry is a consistent cut of the tables it knows: each table's version, or for a table an
announced I transaction wrote, its pending write, which counts as decided at that position and
is read where it landed. One whose owner has not written it yet is written from the entry (as
every isolated reader does); a read-only client cannot, and says so instead. A position that
clean-up deleted (below the horizon) is ``MomentTooOldError`` naming the oldest kept entry.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..delta.log import DeltaLog
from ..errors import InvalidArgumentError, MomentTooOldError, VersionNotFoundError
from ..isolation.gvl import GlobalVersionLog, GvlEntry
from ..isolation.resolve import find_pending, resolve_write
from ..names import GVL_DIR
from .cut import not_found


def _kept(gvl: GlobalVersionLog) -> list[int]:
    out = []
    for meta in gvl.store.list(f"{GVL_DIR}/"):
        name = meta.key.rsplit("/", 1)[-1]
        if name.endswith(".json") and name[:-5].isdigit():
            out.append(int(name[:-5]))
    return sorted(out)


def entry_at(gvl: GlobalVersionLog, seq: int) -> GvlEntry:
    """Entry ``seq``, or the error that says why it cannot be read."""
    if seq < 0:
        raise InvalidArgumentError(f"a global-log position is >= 0, got {seq}")
    e = gvl.read(seq)
    if e is not None:
        return e
    kept = _kept(gvl)
    if kept and seq < kept[0]:
        raise MomentTooOldError(
            f"global-log position {seq} was removed by clean-up (lake.maintenance.cleanup keeps "
            f"the newest gvl_keep entries and those younger than max_transaction_age); the oldest "
            f"position that can be served is {kept[0]}", oldest=kept[0])
    head = kept[-1] if kept else -1
    raise InvalidArgumentError(f"the global log has no position {seq} (its newest is {head})")


class PositionCut:
    """The versions of entry ``seq``; pending writes resolved on demand."""

    def __init__(self, gvl: GlobalVersionLog, log_for: Callable[[str], DeltaLog], seq: int,
                 *, writable: bool) -> None:
        self.entry = entry_at(gvl, seq)
        self.log_for = log_for
        self.writable = writable
        self.fixed: dict[str, int] = {}
        self._lock = threading.Lock()

    def describe(self) -> str:
        return f"global-log position {self.entry.seq}"

    def known(self) -> list[str]:
        return sorted(set(self.entry.tables) | set(self.entry.pending))

    def version(self, table: str) -> int:
        with self._lock:
            if table not in self.fixed:
                self.fixed[table] = self._resolve(table)
            return self.fixed[table]

    def _resolve(self, table: str) -> int:
        e = self.entry
        p = e.pending.get(table)
        if p is None:
            if table not in e.tables:
                raise not_found(table, f"{self.describe()} (the global log does not know it "
                                       "there)")
            return e.tables[table]
        log = self.log_for(table)
        if self.writable:
            return resolve_write(log, p)
        v = find_pending(log, p)
        if v is None:
            raise VersionNotFoundError(
                f"table {table!r} at {self.describe()}: transaction {p.attempt} is decided there "
                "but its commit to this table is not written yet, and this client cannot write "
                "it (read-only); a client with write access (lake.recover()) finishes it")
        return v
