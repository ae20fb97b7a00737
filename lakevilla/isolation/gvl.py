"""Module #4.1: the global version log, a chain of immutable put-if-absent files.

``_lakevilla/gvl/%020d.json`` holds, for every table the log knows, the version an
isolated reader uses, plus the transaction that produced the entry. Appending
the next entry with put-if-absent is the validation winner's announcement and
its commit point: there is no lock to hold and none to wedge when its holder
dies. ``_latest`` is only a hint; readers probe forward from it.

An entry's own writes are *pending*: the announcement precedes the table
commits, so the entry carries the commit bytes and a version hint, and whoever
needs the table resolves the pending write to the version where it landed
(writing it first if its owner stalled). A recovering client aborts a stalled
transaction by appending an entry that names it in ``aborts``; the owner's own
announcement, validated against every entry before it, then fails.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import CorruptLogError
from ..names import GVL_DIR
from ..store import NotFound, ObjectStore, PreconditionFailed

HINT_KEY = f"{GVL_DIR}/_latest"


@dataclass
class PendingWrite:
    attempt: str
    hint: int  # the version the commit is expected at (in-place: the marker version)
    commit: str  # NDJSON commit bytes, for roll-forward
    marker: int | None = None
    mode: str = "tail"


@dataclass
class GvlEntry:
    seq: int
    tables: dict[str, int] = field(default_factory=dict)
    pending: dict[str, PendingWrite] = field(default_factory=dict)
    txn: str | None = None
    aborts: list[str] = field(default_factory=list)
    created: float = 0.0
    v: int = 1

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> GvlEntry:
        try:
            d = json.loads(data)
            if int(d.get("v", 1)) > 1:
                raise CorruptLogError(f"{where}: format version {d['v']} is newer than this lakevilla")
            return cls(
                seq=int(d["seq"]), tables={k: int(v) for k, v in (d.get("tables") or {}).items()},
                pending={k: PendingWrite(**v) for k, v in (d.get("pending") or {}).items()},
                txn=d.get("txn"), aborts=list(d.get("aborts") or []), created=d.get("created", 0.0),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptLogError(f"{where} is damaged: {e}") from None

    def knows(self, table: str) -> bool:
        return table in self.tables or table in self.pending

    def successor(self, txn: str | None) -> GvlEntry:
        """A copy to build the next entry from (pending writes carried until resolved)."""
        return GvlEntry(seq=self.seq + 1, tables=dict(self.tables), pending=dict(self.pending), txn=txn,
                        created=time.time())


def entry_key(seq: int) -> str:
    return f"{GVL_DIR}/{seq:020d}.json"


class GlobalVersionLog:
    def __init__(self, store: ObjectStore, cache_size: int = 1024) -> None:
        self.store = store
        self._cache: OrderedDict[int, GvlEntry] = OrderedDict()
        self._cache_size = cache_size
        self._known = -1
        self._lock = threading.Lock()

    def read(self, seq: int) -> GvlEntry | None:
        with self._lock:
            e = self._cache.get(seq)
        if e is not None:
            return e
        try:
            data = self.store.get(entry_key(seq)).data
        except NotFound:
            return None
        e = GvlEntry.from_bytes(data, entry_key(seq))
        self._remember(e)
        return e

    def _remember(self, e: GvlEntry) -> None:
        with self._lock:
            self._cache[e.seq] = e
            self._cache.move_to_end(e.seq)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            self._known = max(self._known, e.seq)

    def _hint(self) -> int:
        try:
            return int(json.loads(self.store.get(HINT_KEY).data)["seq"])
        except NotFound:
            return -1
        except (ValueError, KeyError, TypeError):
            return -1  # a damaged hint is only a hint

    def head(self, *, from_known: bool = False) -> GvlEntry | None:
        """The newest entry: hint, then forward probing; None if the log does not exist yet.

        ``from_known`` skips the hint and probes from the newest entry this client has seen:
        right for a transaction re-checking the head it read moments ago (entries are only
        cleaned up far behind the head), not for starting one (that needs the hint to be
        linearizable after a long idle period)."""
        with self._lock:
            known = self._known
        start = known if (from_known and known >= 0) else max(self._hint(), known)
        if start < 0:
            start = self._find_by_listing()
            if start < 0:
                return None
        seq = start
        entry = self.read(seq)
        if entry is None:  # hint or cache ahead of a cleanup, or the hint names a lost entry
            seq = self._find_by_listing()
            if seq < 0:
                return None
            entry = self.read(seq)
        while True:
            nxt = self.read(seq + 1)
            if nxt is None:
                return entry
            seq, entry = seq + 1, nxt

    def _find_by_listing(self) -> int:
        newest = -1
        for meta in self.store.list(f"{GVL_DIR}/"):
            name = meta.key.rsplit("/", 1)[-1]
            if name.endswith(".json") and name[:-5].isdigit():
                newest = max(newest, int(name[:-5]))
        return newest

    def entries_after(self, seq: int, upto: int) -> list[GvlEntry]:
        out = []
        for s in range(seq + 1, upto + 1):
            e = self.read(s)
            if e is None:
                raise CorruptLogError(f"global version log entry {s} is missing (cleaned up too eagerly?)")
            out.append(e)
        return out

    def append(self, entry: GvlEntry) -> bool:
        """Announce ``entry`` at its sequence number; False if that slot is taken. The hint
        follows every successful append (best effort: readers probe past a stale one)."""
        try:
            self.store.put_if_absent(entry_key(entry.seq), entry.to_bytes())
        except PreconditionFailed:
            return False
        self._remember(entry)
        return True

    def advance_hint(self, seq: int) -> None:
        try:
            self.write_hint(seq)
        except Exception:  # noqa: BLE001 - only a hint
            pass

    def write_hint(self, seq: int) -> None:
        self.store.put(HINT_KEY, json.dumps({"seq": seq}).encode())

    def find_decision(self, attempt: str, after: int) -> tuple[str | None, GvlEntry | None]:
        """Scan entries after ``after``: ('committed', entry) | ('aborted', entry) | (None, head)."""
        head = self.head()
        if head is None:
            return None, None
        for e in self.entries_after(max(after, -1), head.seq):
            if e.txn == attempt:
                return "committed", e
            if attempt in e.aborts:
                return "aborted", e
        return None, head

    def cleanup(self, keep: int = 1000) -> int:
        """Delete entries older than the newest ``keep``; returns how many were deleted."""
        head = self.head()
        if head is None:
            return 0
        cutoff = head.seq - keep
        n = 0
        for meta in list(self.store.list(f"{GVL_DIR}/")):
            name = meta.key.rsplit("/", 1)[-1]
            if name.endswith(".json") and name[:-5].isdigit() and int(name[:-5]) < cutoff:
                self.store.delete(meta.key)
                n += 1
        return n

    def as_dict(self, e: GvlEntry) -> dict[str, Any]:
        return asdict(e)
