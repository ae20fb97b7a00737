"""Taking commits into a cut: the most that can be taken without taking half of anything.

Given where a cut stands on each table, we move some tables forward over the commits
after it. Moving a table to version v takes every commit up to v (a cut is a prefix of
each table's log), so it is allowed only if each of those commits can be taken whole:

* a single-table commit always can;
* a multi-table commit decided by a transaction record (R,CT) only if its commit on
  every other table is taken too: that table is moved forward as well (when allowed),
  and a commit the record decided but nobody wrote yet (its owner is between table
  commits, or died there) is written from the record, after giving the owner a moment;
* a commit announced in the global log only through its entry, never here;
* an open in-place marker may still be filled, unless a real commit already lies above
  it (then its owner must fall back to the tail).

The result is the greatest such set of commits (caps only ever move down while we look,
and a table is reloaded at most once per commit written or found on it, so the search
ends), with the groups of tables that multi-table commits tie together.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import logs
from ..complex_txn import record as records
from ..delta.actions import Commit
from ..delta.log import DeltaLog
from ..errors import CorruptLogError
from ..markers.marker import commit_txn
from ..markers.publish import find_commit, publish, publish_create
from ..parallel import pmap
from . import join_from
from .units import ANNOUNCED, MULTI, OPEN_MARKER, RecordCache, unit_of

_OK, _CAP, _AGAIN = "ok", "cap", "again"


def _whole_log(log: DeltaLog) -> tuple[int, int, int]:
    """(start, newest, floor) of a scan over every commit the log still has (one LIST): where
    older commits were cleaned up, it starts after the gap and the table can be read only from
    a checkpoint at or above it (``floor``)."""
    listing = log.list_log()
    present = set(listing.commits)
    checkpoints = listing.complete_checkpoints()
    newest = max(listing.commits + checkpoints, default=-1)
    start = newest
    while start in present:
        start -= 1
    floor = -1
    if start >= 0:  # older commits were cleaned up: readable from a checkpoint at or above
        floor = min((c for c in checkpoints if c >= start), default=newest)
    return start, newest, floor


@dataclass
class Scan:
    table: str
    base: int | None  # where the cut stands (None: the table is new to it)
    start: int  # commits after this one are examined
    cap: int  # commits up to this one are taken (so far)
    newest: int
    commits: list[tuple[int, Commit]]
    attempts: dict[str, int] = field(default_factory=dict)  # attempt -> version of its commit here
    # the oldest version it can be read at (a table new to the cut whose log was cleaned)
    floor: int = -1
    # a table new to the cut examined after what its checkpoint (at this version) promises
    checkpoint: int | None = None


@dataclass
class Growth:
    caps: dict[str, int]  # every table examined -> the version it can move to (>= where it stood)
    groups: list[list[str]]  # tables linked by a multi-table commit taken in
    rolled_forward: int = 0


class Closure:
    """One search. ``base_of(t)``: the version the cut has for ``t`` (None if the table is
    new to it). ``frozen``: tables that must not move. ``limits``: do not move a table past
    this version. ``pull``: tables outside the targets may be moved to take a commit whole."""

    def __init__(self, log_for: Callable[[str], DeltaLog], recs: RecordCache,
                 base_of: Callable[[str], int | None], *,
                 frozen: set[str] | frozenset[str] = frozenset(),
                 limits: dict[str, int] | None = None, pull: bool = True, patience: float = 0.5,
                 roll_forward: bool = True,
                 below_commit: set[str] | frozenset[str] = frozenset()) -> None:
        self.log_for = log_for
        self.recs = recs
        self.base_of = base_of
        self.frozen = frozen
        self.limits = limits or {}
        self.pull = pull
        self.patience = patience
        self.roll_forward = roll_forward
        self.below_commit = below_commit  # tables our own commit will land on above the limit
        self.scans: dict[str, Scan] = {}
        self._below: dict[tuple[str, str], bool] = {}
        self._finished: set[tuple[str, str]] = set()
        self.rolled = 0

    # -- loading a table's commits after the cut -------------------------------------------
    def _load(self, t: str) -> None:
        self.scans[t] = self._scan(t)

    def _scan(self, t: str) -> Scan:
        log = self.log_for(t)
        base = self.base_of(t)
        limit = self.limits.get(t)
        floor = -1
        if base is None:
            joined = self._join(t, log, limit)
            if joined is not None:
                return joined
            # new to the cut and no promise from its checkpoint: every commit it still has is
            # examined, not only those after its newest checkpoint, which may hold one half of a
            # multi-table commit whose other half the cut lacks (a reader that read that other
            # table already would see half of it)
            start, newest, floor = _whole_log(log)
            logs.joining(t, newest - start, start)
        else:
            known = log.known_latest()
            # below a limit we already know of, nothing newer matters (our own written tables)
            newest = (known if limit is not None and limit <= known
                      else log.probe_versions(max(base, known)))
            start = base
        return self._examine(t, log, base, start, newest, floor)

    def _join(self, t: str, log: DeltaLog, limit: int | None) -> Scan | None:
        """A table new to the cut whose checkpoint promises that every commit up to some version
        is one any cut takes whole (join_from.py): only the commits after it are examined, with
        the result examining all of them would give. None: examine the whole log."""
        hint = join_from.join_start(log)
        if hint is None or (limit is not None and limit < hint[0]):
            return None
        checkpoint, start = hint
        try:
            # the newest commit: GET-probed from what this client knows if that is past the
            # checkpoint (one round trip when nothing is new), else one LIST after the checkpoint
            known = log.known_latest()
            newest = (log.probe_versions(known) if known >= checkpoint
                      else max([checkpoint, *log.list_log(after=checkpoint).commits]))
            scan = self._examine(t, log, None, start, newest, -1)
        except CorruptLogError:
            return None  # commits after the promise were cleaned up: the whole log
        scan.checkpoint = checkpoint
        logs.joining(t, len(scan.commits), start)
        return scan

    def _examine(self, t: str, log: DeltaLog, base: int | None, start: int, newest: int,
                 floor: int) -> Scan:
        newest = max(newest, start)
        limit = self.limits.get(t)
        cap = newest if limit is None else min(newest, max(limit, start))
        commits = log.commits_between(start, cap) if cap > start else []
        scan = Scan(t, base, start, cap, newest, commits, floor=floor)
        for v, c in commits:
            a = commit_txn(c)
            if a is not None:
                scan.attempts[a] = v
        return scan

    def grow(self, targets: set[str] | list[str]) -> Growth:
        todo = sorted(t for t in set(targets) if t not in self.scans and t not in self.frozen)
        for t, scan in zip(todo, pmap(self._scan, todo)):  # one probe per table, all at once
            self.scans[t] = scan
        while self._pass():
            pass
        for s in self.scans.values():
            if s.checkpoint is not None and s.cap < s.checkpoint:  # below its checkpoint: can it
                s.floor = _whole_log(self.log_for(s.table))[2]  # be read there? (a LIST)
        # a table new to the cut that cannot be read as far back as its commits allow stays out
        # (the others are consistent without it: it joins later, at or above what they took)
        caps = {t: s.cap for t, s in self.scans.items() if s.cap >= s.floor}
        return Growth(caps, self._groups(), self.rolled)

    def _pass(self) -> bool:
        """One look at every commit taken so far; True if something changed."""
        for t in list(self.scans):
            s = self.scans[t]
            for i, (v, c) in enumerate(s.commits):
                if v > s.cap:
                    break
                verdict = self._check(s, i, v, c)
                if verdict == _CAP:
                    s.cap = v - 1
                    return True
                if verdict == _AGAIN:
                    return True
        return False

    def _check(self, s: Scan, i: int, v: int, c: Commit) -> str:
        u = unit_of(c)
        if u.kind == OPEN_MARKER:
            if s.table in self.below_commit:
                return _OK  # our commit lands above it, so its owner can no longer fill it
            above = any(unit_of(c2).kind not in ("marker", OPEN_MARKER)
                        for v2, c2 in s.commits[i + 1:] if v2 <= s.cap)
            return _OK if above else _CAP
        if u.kind == ANNOUNCED:
            return _CAP  # only its global-log entry takes it in
        if u.kind != MULTI or u.attempt is None:
            return _OK
        tables = set(u.tables)
        if not tables:  # written before commits named their tables: the record does
            rec = self.recs.get(u.attempt)
            if rec is None:
                return _OK  # finished and cleaned up long ago: every table commit landed
            tables = set(rec.tables)
        for w in sorted(tables - {s.table}):
            verdict = self._other(w, u.attempt)
            if verdict != _OK:
                return verdict
        return _OK

    # -- where is the same transaction's commit on another table? ---------------------------
    def _other(self, w: str, attempt: str) -> str:
        sw = self.scans.get(w)
        if sw is None:
            if w in self.frozen or not self.pull:
                return _OK if self._landed_by(w, attempt, self.base_of(w)) else _CAP
            self._load(w)
            return _AGAIN
        at = sw.attempts.get(attempt)
        if at is not None:
            return _OK if at <= sw.cap else _CAP
        # at or below where w's scan starts is taken whatever the cap: the cut's own version of w
        # or, for a table new to the cut, its newest checkpoint
        if self._landed_by(w, attempt, sw.start):
            return _OK
        if self._beyond(sw, attempt):
            return _CAP  # it landed above what we may take of w
        if self.roll_forward and (w, attempt) not in self._finished and self._finish(w, attempt):
            self._finished.add((w, attempt))  # reloaded once per commit: the search ends
            self._load(w)
            return _AGAIN
        return _CAP

    def _beyond(self, sw: Scan, attempt: str) -> bool:
        """Has ``attempt`` landed on the table after the commits we loaded (above a limit)?"""
        if sw.newest <= sw.cap:
            return False
        log = self.log_for(sw.table)
        return find_commit(log, attempt, sw.cap, sw.newest) is not None

    def _landed_by(self, w: str, attempt: str, version: int | None) -> bool:
        """Did ``attempt``'s commit on ``w`` land at or below ``version``?"""
        if version is None or version < 0:
            return False
        key = (w, attempt)
        if self._below.get(key):
            return True
        rec = self.recs.get(attempt)
        log = self.log_for(w)
        if rec is None or w not in rec.tables or rec.state == records.COMMITTED:
            # every commit landed (the record says so, or was cleaned up after it did): below unless
            # above; what lies below may be gone (a Delta log clean-up
            # shorter than records are kept)
            newest = log.probe_versions(max(version, log.known_latest()))
            found = find_commit(log, attempt, version, newest) is None
        else:
            marker = rec.tables[w].marker
            lo = (marker if marker is not None else version) - 1
            found = marker is None or marker <= version
            found = found and find_commit(log, attempt, max(lo, -1), version) is not None
        if found:
            self._below[key] = True
        return found

    def _finish(self, w: str, attempt: str) -> bool:
        """The transaction decided and wrote some table commits but not ``w``'s yet: give
        its owner a moment, then write it from the record (idempotent, as recovery does). A
        table the transaction creates whose name a foreign client took meanwhile raises
        ``CreateConflictError``, as for the owner and recovery: its half can never be written."""
        rec = self.recs.get(attempt)
        if (rec is None or w not in rec.tables
                or rec.state not in (records.COMMITTING, records.COMMITTED)):
            return False
        it = rec.tables[w]
        log = self.log_for(w)
        lo = (it.marker if it.marker is not None else log.known_latest()) - 1
        deadline = time.monotonic() + self.patience
        delay = 0.005
        while True:
            newest = log.probe_versions(max(lo, log.known_latest()))
            if find_commit(log, attempt, max(lo, -1), newest) is not None:
                return True
            if time.monotonic() >= deadline:
                break
            time.sleep(delay)  # protocol backoff while the owner writes its commit
            delay = min(delay * 2, 0.1)
        commit = Commit.from_bytes(it.commit.encode())
        # version 0 or nothing: never on top of a table a foreign client created meanwhile
        if it.create:
            publish_create(log, attempt, commit)
        else:
            publish(log, attempt, commit, marker_version=it.marker, mode=it.mode)
        self.rolled += 1
        return True

    # -- groups ---------------------------------------------------------------------------
    def _groups(self) -> list[list[str]]:
        parent: dict[str, str] = {t: t for t in self.scans}

        def find(a: str) -> str:
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        by_attempt: dict[str, list[str]] = {}
        for t, s in self.scans.items():
            for a, v in s.attempts.items():
                if s.start < v <= s.cap:
                    by_attempt.setdefault(a, []).append(t)
        for ts in by_attempt.values():
            for other in ts[1:]:
                parent[find(other)] = find(ts[0])
        groups: dict[str, list[str]] = {}
        for t, s in self.scans.items():
            if s.base is None or s.cap > s.base:
                groups.setdefault(find(t), []).append(t)
        return [sorted(g) for g in groups.values() if len(g) > 1]
