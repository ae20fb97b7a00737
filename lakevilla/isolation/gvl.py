"""Module #4.1: the global version log, a chain of immutable put-if-absent files.

``_lakevilla/gvl/%020d.json`` holds, for every table the log knows, the version an
isolated reader uses; every entry is a consistent cut: a multi-table commit is in
it on all of its tables or on none. Appending the next entry with put-if-absent is
the only way the log changes: an I writer's validation and commit point, an abort
decision for a stalled I transaction, or an *incorporation* of commits that other
clients (R, CT, plain Delta, delta-rs) made without announcing them. Each entry
says what it added (``grown``, ``groups``, the transaction's ``pending`` writes
and the tables it ``reads``), so that a transaction holding an older cut can tell
which later additions it may take in without seeing half of anything.

An I writer's own writes are *pending*: the announcement precedes the table
commits, so the entry carries the commit bytes and a version hint, and whoever
needs the table resolves the pending write to the version where it landed
(writing it first if its owner stalled).

``_latest`` is a small mutable object holding the hint (``seq``: probe forward
from here) and the clean-up *horizon* (entries below it may be deleted). Both
only move forward: every write of it is conditional on the etag read. Readers and
appenders never start below the horizon, and an appender that finds the horizon
above the slot it just took (clean-up deleted that slot under it) checks whether
the chain continued from its entry before trusting it.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field

from ..errors import CorruptLogError, StorageError
from ..names import GVL_DIR
from ..store import NotFound, ObjectStore, PreconditionFailed, settle_create

HINT_KEY = f"{GVL_DIR}/_latest"
FORMAT = 2  # v2: grown/groups/reads/id/prev; v1 entries are read (and treated conservatively)


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
    # what this entry added to its predecessor: tables moved forward over commits of clients
    # that do not announce (None: a v1 entry, which did not say), the sets of those tables
    # that one multi-table commit links, and the tables the transaction read
    grown: dict[str, int] | None = field(default_factory=dict)
    groups: list[list[str]] = field(default_factory=list)
    reads: list[str] | None = field(default_factory=list)
    id: str = field(default_factory=lambda: secrets.token_hex(8))
    prev: str | None = None
    v: int = FORMAT

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> GvlEntry:
        try:
            d = json.loads(data)
            v = int(d.get("v", 1))
            if v > FORMAT:
                raise CorruptLogError(f"{where}: format version {v} is newer than this lakevilla")
            old = v < 2
            return cls(
                seq=int(d["seq"]), tables={k: int(x) for k, x in (d.get("tables") or {}).items()},
                pending={k: PendingWrite(**x) for k, x in (d.get("pending") or {}).items()},
                txn=d.get("txn"), aborts=list(d.get("aborts") or []), created=d.get("created", 0.0),
                grown=None if old else {k: int(x) for k, x in (d.get("grown") or {}).items()},
                groups=[] if old else [list(g) for g in d.get("groups") or []],
                reads=None if old else list(d.get("reads") or []),
                id=str(d.get("id") or f"v1-{d['seq']}"), prev=d.get("prev"), v=v,
            )
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptLogError(f"{where} is damaged: {e}") from None

    def knows(self, table: str) -> bool:
        return table in self.tables or table in self.pending

    def successor(self, txn: str | None) -> GvlEntry:
        """A copy to build the next entry from (pending writes carried until resolved)."""
        return GvlEntry(seq=self.seq + 1, tables=dict(self.tables), pending=dict(self.pending),
                        txn=txn, created=time.time(), prev=self.id)

    def own_writes(self) -> dict[str, PendingWrite]:
        return {t: p for t, p in self.pending.items()
                if self.txn is not None and p.attempt == self.txn}

    def names(self, attempt: str) -> bool:
        """Does this entry decide ``attempt`` as committed (its entry, or a carried write)?"""
        return self.txn == attempt or any(p.attempt == attempt for p in self.pending.values())


def first_entry() -> GvlEntry:
    return GvlEntry(seq=0, created=time.time())


def entry_key(seq: int) -> str:
    return f"{GVL_DIR}/{seq:020d}.json"


@dataclass(frozen=True)
class Hint:
    seq: int  # probe forward from here
    horizon: int  # entries below it may be deleted; nobody starts or appends below it
    etag: str | None  # None: the object does not exist


# outcomes of an append
APPENDED, TAKEN, FORKED, UNSURE = "appended", "taken", "forked", "unsure"


class GlobalVersionLog:
    def __init__(self, store: ObjectStore, cache_size: int = 1024) -> None:
        self.store = store
        self._cache: OrderedDict[int, GvlEntry] = OrderedDict()
        self._cache_size = cache_size
        self._known = -1
        self._horizon = 0
        # as last read or written by this client (its etag saves a GET)
        self.last_hint: Hint | None = None
        self.recent: OrderedDict[str, None] = OrderedDict()  # tables this client's cuts read lately
        self._lock = threading.Lock()

    # -- entries -------------------------------------------------------------------
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

    def _read_uncached(self, seq: int) -> GvlEntry | None:
        try:
            return GvlEntry.from_bytes(self.store.get(entry_key(seq)).data, entry_key(seq))
        except NotFound:
            return None

    def _remember(self, e: GvlEntry) -> None:
        with self._lock:
            self._cache[e.seq] = e
            self._cache.move_to_end(e.seq)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            self._known = max(self._known, e.seq)

    def _forget(self, e: GvlEntry) -> None:
        with self._lock:
            if self._cache.get(e.seq) is e:
                del self._cache[e.seq]
            self._known = max(self._cache, default=-1)

    def note_read(self, table: str, keep: int = 64) -> None:
        with self._lock:
            self.recent[table] = None
            self.recent.move_to_end(table)
            while len(self.recent) > keep:
                self.recent.popitem(last=False)

    def recently_read(self) -> list[str]:
        with self._lock:
            return list(self.recent)

    # -- the hint and the horizon ---------------------------------------------------
    def read_hint(self) -> Hint:
        try:
            got = self.store.get(HINT_KEY)
        except NotFound:
            # kept as seen: the append that follows creates the hint from it (put-if-absent)
            # instead of reading the absence again
            self.last_hint = Hint(-1, 0, None)
            return self.last_hint
        try:
            d = json.loads(got.data)
            h = Hint(int(d["seq"]), int(d.get("horizon", 0)), got.etag)
        except (ValueError, KeyError, TypeError):
            h = Hint(-1, 0, got.etag)  # a damaged hint is only a hint
        with self._lock:
            self._horizon = max(self._horizon, h.horizon)
        self.last_hint = h
        return h

    @property
    def horizon(self) -> int:
        """The highest horizon this client has seen (no request)."""
        with self._lock:
            return self._horizon

    def _write_hint(self, cur: Hint, seq: int, horizon: int) -> str:
        body = json.dumps({"seq": seq, "horizon": horizon}).encode()
        if cur.etag is None:
            return self.store.put_if_absent(HINT_KEY, body)
        return self.store.put_if_match(HINT_KEY, body, cur.etag)

    def move_hint(self, seq: int = -1, horizon: int = 0, seen: Hint | None = None,
                  tries: int = 8) -> Hint | None:
        """Move the hint to at least ``seq`` and the horizon to at least ``horizon``, never
        back (a conditional write on the etag read). Returns the state as it stands after our
        write, as read or written after the call began (``seen``, if it was read before, is
        only trusted when our conditional write on its etag succeeds); None if it kept
        changing under us."""
        cur = seen if seen is not None else self.read_hint()
        for _ in range(tries):
            if cur.seq >= seq and cur.horizon >= horizon:
                if cur is seen:  # read before the call: confirm it is still the state
                    cur = self.read_hint()
                    seen = None
                    continue
                return cur
            new = Hint(max(cur.seq, seq), max(cur.horizon, horizon), None)
            try:
                etag = self._write_hint(cur, new.seq, new.horizon)
            except PreconditionFailed:
                cur, seen = self.read_hint(), None
                continue
            with self._lock:
                self._horizon = max(self._horizon, new.horizon)
            self.last_hint = Hint(new.seq, new.horizon, etag)
            return self.last_hint
        return None

    def advance_hint(self, seq: int) -> None:
        try:
            self.move_hint(seq)
        except Exception:  # noqa: BLE001 - only a hint
            pass

    # -- finding the head -------------------------------------------------------------
    def head(self, *, fresh: bool = True) -> GvlEntry | None:
        """The newest entry: from the hint (``fresh``: read now, else as last seen) or from the
        newest entry this client knows, never from below the horizon, then forward probing;
        None if the log does not exist yet."""
        h = self.read_hint() if fresh else self.last_hint
        start = h.seq if h is not None else -1
        with self._lock:
            known, horizon = self._known, self._horizon
        if known >= horizon:
            start = max(start, known)
        start = max(start, horizon if horizon > 0 else -1)
        if start < 0:
            start = self._find_by_listing()
            if start < 0:
                return None
        seq = start
        entry = self.read(seq)
        if entry is None:  # hint or cache ahead of a clean-up, or the hint names a lost entry
            seq = self._find_by_listing()
            if seq < 0:
                return None
            entry = self.read(seq)
            if entry is None:
                return None
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

    def walk(self, after: int) -> list[GvlEntry] | None:
        """Every entry after ``after`` up to the head, in order; None if clean-up may have
        deleted some of them (``after`` is below the horizon), so they cannot be examined.
        The horizon is read again after a walk that found entries: a clean-up forced below
        max_transaction_age may have deleted the slots we read and a stale appender refilled
        one (a fork) while we walked."""
        h = self.read_hint()
        if after < h.horizon - 1 and h.horizon > 0:
            return None
        out: list[GvlEntry] = []
        seq = after
        while True:
            e = self.read(seq + 1)
            if e is None:
                if seq < h.seq:  # a gap below the hint: deleted since we read the hint
                    return None
                if out and after < self.read_hint().horizon - 1:
                    return None  # clean-up passed us while we read: what we read may be a fork
                return out
            if out and e.prev is not None and out[-1].v >= 2 and e.prev != out[-1].id:
                return None  # not the chain we were walking: a fork below the horizon
            out.append(e)
            seq += 1

    def entries_after(self, seq: int, upto: int) -> list[GvlEntry]:
        out = []
        for s in range(seq + 1, upto + 1):
            e = self.read(s)
            if e is None:
                raise CorruptLogError(f"global version log entry {s} is missing (cleaned "
                                      "up too eagerly?)")
            out.append(e)
        return out

    # -- appending ----------------------------------------------------------------------
    def append(self, entry: GvlEntry, seen: Hint | None = None) -> str:
        """Put ``entry`` at its sequence number. ``TAKEN``: the slot is taken. ``APPENDED``:
        it is the log's entry there. If clean-up raised the horizon past the slot while we
        worked, the slot may have been deleted under us (a fork, which nobody reads: readers
        and appenders start at the horizon); then ``FORKED`` if the chain went on from another
        entry, ``UNSURE`` if that cannot be told (the next entries are gone too). An error from
        the put itself is settled by reading the slot back (``OutcomeUnknown`` if that fails
        too). Never raises after the put succeeded (the outcome then matters more than a hint
        error)."""
        data = entry.to_bytes()
        try:
            self.store.put_if_absent(entry_key(entry.seq), data)
        except PreconditionFailed:
            return TAKEN
        except StorageError as e:
            # applied or not? read the slot back (OutcomeUnknown if that fails too)
            if settle_create(self.store, entry_key(entry.seq), data, e) is None:
                return TAKEN
        self._remember(entry)
        try:
            state = self.move_hint(entry.seq, seen=seen)
            if state is not None and state.horizon <= entry.seq:
                return APPENDED
            if state is None:
                state = self.read_hint()
                if state.horizon <= entry.seq:
                    return APPENDED
            nxt = self._read_uncached(entry.seq + 1)
        except Exception:  # noqa: BLE001 - cannot tell: the caller reports an unknown outcome
            return UNSURE
        if nxt is not None and nxt.prev == entry.id:
            return APPENDED
        self._forget(entry)
        return FORKED if nxt is not None else UNSURE

    # -- decisions and clean-up ------------------------------------------------------------
    def find_decision(self, attempt: str, after: int) -> tuple[str | None, GvlEntry | None, bool]:
        """Scan entries after ``after`` (and not below the horizon): ('committed', entry) |
        ('aborted', entry) | (None, head). The flag says whether every entry after ``after``
        was still there to scan (False: clean-up removed some, so absence proves nothing)."""
        h = self.read_hint()
        head = self.head()
        if head is None:
            return None, None, True
        start = max(after, h.horizon - 1, -1)
        complete = start == max(after, -1)
        for s in range(start + 1, head.seq + 1):
            e = self.read(s)
            if e is None:  # deleted since we read the hint
                complete = False
                continue
            if e.names(attempt):
                return "committed", e, complete
            if attempt in e.aborts:
                return "aborted", e, complete
        return None, head, complete

    def cleanup(self, keep: int = 1000, *, min_age: float, now: float | None = None) -> int:
        """Delete entries older than the newest ``keep`` and, by the store's timestamps, older
        than ``min_age`` seconds (as of ``now``); returns how many were deleted.

        Why the age: an announcement goes to the slot after the head its writer read, and
        the writer appends within ``max_transaction_age`` of that read (it refuses to decide
        later). The entry another client put in that slot meanwhile is younger than that
        read, so with ``min_age = max_transaction_age`` it is still there: the put-if-absent
        loses and the log cannot fork (a fork nobody may read, but a reader that walks the
        log just as clean-up runs could). Only a clean-up forced below that age can delete
        such a slot; appenders then detect it (``append``). The horizon moves first, so
        nobody starts at or appends after an entry being deleted."""
        head = self.head()
        if head is None:
            return 0
        cutoff = head.seq - max(keep, 0)
        if cutoff <= 0:
            return 0
        now = time.time() if now is None else now
        old: list[tuple[int, str]] = []
        for meta in self.store.list(f"{GVL_DIR}/"):  # in key order: the oldest entries first
            name = meta.key.rsplit("/", 1)[-1]
            if not (name.endswith(".json") and name[:-5].isdigit()):
                continue
            seq = int(name[:-5])
            if seq >= cutoff:
                break
            if meta.last_modified is None or now - meta.last_modified < min_age:
                cutoff = seq  # young: keep it and everything after it
                break
            old.append((seq, meta.key))
        if cutoff <= 0:
            return 0
        state = self.move_hint(head.seq, cutoff)
        if state is None:
            return 0  # the hint kept changing: clean up another time
        n = 0
        for seq, key in old:
            if seq < state.horizon:
                self.store.delete(key)
                n += 1
        return n
