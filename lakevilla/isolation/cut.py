"""One transaction's consistent cut: the table versions an isolated transaction reads.

The cut starts as the newest global-log entry at the transaction's first read, and
only grows by what can be ordered before everything the transaction does not see:

* When a table is first read, one GET probes its log past the cut. Nothing new: the
  table is read where the cut has it.
* Something new: the entries appended since are examined. Each adds commits taken in
  from clients that do not announce (in groups a multi-table commit ties together)
  and an I transaction's writes and reads. A part is taken into the cut if it does
  not move a table already read and touches no table of a part left out before it:
  then it commutes with everything left out, and the cut is still a prefix of the
  log's order with those parts moved ahead. A group that cannot be taken whole is
  taken as far as its commits allow (a table up to the first multi-table commit that
  needs a table already read).
* What no entry has taken in yet is appended as a new entry (the log is built on
  demand), so that any I transaction committing later is ordered after it and
  validates against it. A table the log does not know joins the same way.

So every table is read at the versions of one cut, fresh as of its first read: a
commit acknowledged before the transaction started is in it, unless an I writer
that read the same table was between validating and announcing when it landed
(that writer is then ordered first, and a reader that missed the writer must miss
the commit too). A read-only transaction needs no validation and never aborts.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from ..delta.log import DeltaLog, not_found
from ..errors import (
    StorageCredentialsError,
    StoragePermissionError,
    TransactionAborted,
)
from .closure import Closure, Growth
from .gvl import APPENDED, TAKEN, GlobalVersionLog, GvlEntry, PendingWrite
from .resolve import resolve_write
from .units import RecordCache

Version = int | PendingWrite
# seconds: an I writer this old reads the log's head again before claiming its markers, so that
# clean-up of the entries it started from does not make it abort (a cost trade-off only)
LONG_TRANSACTION = 5.0


@dataclass(frozen=True)
class Part:
    """What one entry added: commits taken in (``txn`` False) or a transaction's writes."""

    changes: dict[str, Version]
    touched: frozenset[str] | None  # None: an old-format entry that did not say
    txn: bool


def parts(prev: GvlEntry | None, e: GvlEntry) -> list[Part]:
    if e.grown is None:  # v1: one part that may have touched anything
        changes: dict[str, Version] = {t: v for t, v in e.tables.items()
                                       if prev is None or prev.tables.get(t) != v}
        changes.update(e.own_writes())
        return [Part(changes, None, True)] if changes else []
    out = []
    parent = {t: t for t in e.grown}

    def find(a: str) -> str:
        while parent[a] != a:
            a = parent[a]
        return a

    for g in e.groups:
        linked = [t for t in g if t in parent]
        for t in linked[1:]:
            parent[find(t)] = find(linked[0])
    comps: dict[str, list[str]] = {}
    for t in e.grown:
        comps.setdefault(find(t), []).append(t)
    for comp in comps.values():
        out.append(Part({t: e.grown[t] for t in comp}, frozenset(comp), False))
    own = e.own_writes()
    if own:
        out.append(Part(dict(own), frozenset(own) | frozenset(e.reads or ()), True))
    return out


def entry_map(e: GvlEntry | None) -> dict[str, Version]:
    if e is None:
        return {}
    out: dict[str, Version] = dict(e.tables)
    out.update(e.pending)
    return out


class Cut:
    def __init__(self, gvl: GlobalVersionLog, log_for: Callable[[str], DeltaLog], recs: RecordCache,
                 *, patience: float = 2.0, roll_patience: float = 0.5,
                 txn_id: str | None = None) -> None:
        self.gvl = gvl
        self.log_for = log_for
        self.recs = recs
        self.patience = patience
        self.roll_patience = roll_patience
        self.txn_id = txn_id
        self.started = False
        self.base_seq: int | None = None  # the entry fixed at the first read (-1: no log yet)
        self.last: GvlEntry | None = None  # the newest entry examined
        self.view: dict[str, Version] = {}
        self.finals: dict[str, int] = {}  # tables read, at the version read
        self.blocked: set[str] = set()  # touched by a part left out: nothing more of them
        self.opaque = False  # a part left out whose tables are unknown: nothing more at all
        self.stats: Counter[str] = Counter()
        # what this cut took in but could not append (a client that cannot write,
        # isolation/unannounced.py): later growth builds on it as on an entry of the log
        self.taken: dict[str, int] = {}

    rolls_forward = True  # finish a decided transaction found half published (it writes)

    @property
    def last_seq(self) -> int | None:
        return self.last.seq if self.last is not None else self.base_seq

    def age(self) -> float:
        """Seconds since the cut was fixed (0 before the first read)."""
        return time.monotonic() - self._t0 if self.started else 0.0

    def start(self) -> None:
        if self.started:
            return
        self.started = True
        self._t0 = time.monotonic()
        head = self.gvl.head()
        self.last = head
        self.base_seq = head.seq if head is not None else -1
        self.view = entry_map(head)

    def knows(self, table: str) -> bool:
        """Does the cut have a version for ``table`` (so reading it appends no join entry)?"""
        self.start()
        return table in self.view

    # -- reading a table -------------------------------------------------------------------
    def version_of(self, table: str) -> int:
        """The version of ``table`` in this cut; fixed from now on."""
        self.start()
        if table in self.finals:
            return self.finals[table]
        log = self.log_for(table)
        delay = 0.002
        for _ in range(50):
            cur = self._current(table)
            if cur is not None and self._newest(log, cur) <= cur:
                break
            self.stats["news"] += 1
            if not self._catch_up():
                break
            cur = self._current(table)
            if cur is not None and self._newest(log, cur) <= cur:
                break
            if self.opaque or table in self.blocked or table in self.finals:
                break
            outcome = self._incorporate(table)
            if outcome != TAKEN:
                break
            self.stats["append_races"] += 1
            time.sleep(random.uniform(0, delay))  # others are appending: back off, then look again
            delay = min(delay * 2, 0.05)
        v = self._current(table)
        if v is None:
            if log.latest_version() < 0:
                raise not_found(log)
            raise TransactionAborted(
                f"table {table!r} could not join this transaction's consistent cut (the global log "
                "was cleaned up past the transaction's start, or kept changing); re-run it",
                txn_id=self.txn_id, reason="gvl-cut")
        self.finals[table] = v
        self.gvl.note_read(table)
        return v

    def _current(self, table: str) -> int | None:
        x = self.view.get(table)
        if isinstance(x, PendingWrite):
            x = self._resolve(table, x)
            self.view[table] = x
        return x

    def _resolve(self, table: str, p: PendingWrite) -> int:
        """The version an announced write landed at (written for its owner if it stalled)."""
        return resolve_write(self.log_for(table), p, patience=self.patience)

    @staticmethod
    def _newest(log: DeltaLog, cur: int) -> int:
        known = log.known_latest()
        return known if known > cur else log.probe_versions(cur)

    # -- the entries appended since ---------------------------------------------------------
    def _catch_up(self) -> bool:
        walked = self.gvl.walk(self.last.seq if self.last is not None else -1)
        if walked is None:
            return self._jump()
        for e in walked:
            self._absorb(e)
            self.last = e
        return True

    def _jump(self) -> bool:
        """Clean-up removed entries after ours: we can only go on from the oldest entry kept
        if nothing we read changed in between and we left nothing out before."""
        self.stats["horizon_jumps"] += 1
        if self.opaque or self.blocked:
            self.opaque = True
            return False
        h = self.gvl.read_hint()
        e = self.gvl.read(max(h.horizon, 0))
        if e is None:
            self.opaque = True
            return False
        m = entry_map(e)
        for t, v in self.finals.items():
            x = m.get(t)
            if isinstance(x, PendingWrite):
                x = self._resolve(t, x)
                m[t] = x
            if x != v:
                self.opaque = True
                return False
        self.view = m
        self.last = e
        walked = self.gvl.walk(e.seq)
        if walked is None:
            self.opaque = True
            return False
        for e2 in walked:
            self._absorb(e2)
            self.last = e2
        return True

    def _absorb(self, e: GvlEntry) -> None:
        for part in parts(self.last, e):
            if self.opaque:
                return
            if part.touched is None:
                if self.blocked or any(t in self.finals for t in part.changes):
                    self.opaque = True
                    self.stats["left_out"] += 1
                else:
                    self.view.update(part.changes)
            elif part.txn:
                if part.touched & self.blocked or any(t in self.finals for t in part.changes):
                    self.blocked |= part.touched
                    self.stats["left_out"] += 1
                else:
                    self.view.update(part.changes)
            else:
                self._absorb_growth(part)

    def _absorb_growth(self, part: Part) -> None:
        # a growth part takes commits in: versions, never a PendingWrite
        changes = {t: int(cast(int, v)) for t, v in part.changes.items()}
        conflict = {t for t, v in changes.items()
                    if t in self.blocked or (t in self.finals and self.finals[t] != v)}
        if not conflict:
            self.view.update(changes)
            return
        self.stats["left_out"] += 1
        free = [t for t in changes if t not in conflict and t not in self.finals]
        caps: dict[str, int] = {}
        if free:  # take each table as far as it does not depend on what we must leave out
            base = {t: self._current(t) for t in free}
            frozen = set(self.view) | set(self.finals) | self.blocked
            frozen -= set(free)
            growth = Closure(self.log_for, self.recs,
                             lambda t: base.get(t) if t in base else self._current(t),
                             frozen=frozen, limits={t: changes[t] for t in free}, pull=False,
                             roll_forward=False).grow(free)
            caps = growth.caps
        for t in free:
            cap = caps.get(t)
            if cap is not None and ((b := base[t]) is None or cap > b):
                self.view[t] = cap
            if cap is None or cap < changes[t]:
                self.blocked.add(t)
        self.blocked |= conflict

    # -- appending what nobody took in yet ---------------------------------------------------
    def _keep(self, delta: dict[str, int]) -> str:
        """Take ``delta`` in without an entry (see ``taken``)."""
        self.taken.update(delta)
        self.view.update(delta)
        self.stats["unannounced"] += 1
        return "unannounced"

    def _head_map(self) -> dict[str, Version]:
        """Where the tables stand in the log this cut builds on."""
        return {**entry_map(self.last), **self.taken}

    def _incorporate(self, table: str) -> str:
        head = self.last
        head_map = self._head_map()
        resolved: dict[str, int | None] = {}

        def base_of(t: str) -> int | None:
            if t not in resolved:
                x = head_map.get(t)
                if isinstance(x, PendingWrite):
                    x = self._resolve(t, x)
                resolved[t] = x
            return resolved[t]

        frozen = set(self.finals) | self.blocked
        # the tables this client read lately are likely next: take their news in the same entry
        # (one probe each, in parallel) instead of appending once per table
        targets = {table} | {t for t in self.gvl.recently_read()
                             if t in head_map and t not in frozen}
        growth = Closure(self.log_for, self.recs, base_of, frozen=frozen, pull=True,
                         patience=self.roll_patience, roll_forward=self.rolls_forward).grow(targets)
        self.stats["rolled_forward"] += growth.rolled_forward
        delta = {t: v for t, v in growth.caps.items()
                 if v >= 0 and ((b := base_of(t)) is None or v > b)}
        if not delta:
            return "nothing"
        return self._announce(head, delta, growth)

    def _announce(self, head: GvlEntry | None, delta: dict[str, int], growth: Growth) -> str:
        """Append the entry that takes ``delta`` in, so that every I transaction committing later
        is ordered after this read."""
        entry = head.successor(None) if head is not None else GvlEntry(seq=0, created=time.time())
        for t, v in delta.items():
            entry.tables[t] = v
            entry.pending.pop(t, None)  # resolved: the table moved past it
        entry.grown = delta
        entry.groups = [g for g in growth.groups if all(t in delta for t in g)]
        entry.reads = []
        try:
            outcome = self.gvl.append(entry, self.gvl.last_hint)
        except (StoragePermissionError, StorageCredentialsError):
            # credentials that only read: keep the cut to ourselves (isolation/unannounced.py)
            self.rolls_forward = False
            return self._keep(delta)
        if outcome == APPENDED:
            self.stats["appended"] += 1
            self.view.update(delta)
            self.last = entry
        return outcome
