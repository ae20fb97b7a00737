"""Which version of each table ``lake.at(when)`` reads: one consistent cut as of a moment.

Per table, first the newest version written at or before the moment (the time rule below).
Then every multi-table transaction (R,CT decided by a record, I by the global log: their
commits name the attempt and every table, ``txn_tables``) that this cut holds on one table
but not on another (its commit there is a later version, or not written yet) is taken out:
the table holding it is lowered to just below that commit. Repeated until nothing changes,
since a lowered table may now miss a transaction another table holds. The result is the
newest consistent cut no later than the moment. Plain Delta commits (delta-rs, Spark, ``""``,
R, single-table CT) are atomic on their own and need nothing.

* **Seen at T** means every table commit of the transaction was written by T. A transaction
  decided before T whose commits landed after it (rolled forward by recovery, or its owner
  slow between table commits) is not seen: what ``lake.at(T)`` shows for a past T never
  changes, whoever finishes the transaction later.
* **Time rule.** A version's time is its ``commitInfo.inCommitTimestamp`` when it has one,
  else its commit file's last-modified time, made monotonic over the versions that are not
  markers. Markers (empty versions) are left out: rewriting one (heartbeats, its close) moves
  its file time, which must not move the versions after it (Delta's own rule lets it, and
  ``lake.read(t, timestamp=T)`` follows Delta), and a cut never ends on one, so its number does
  not change as markers come. An in-place marker filled later is a commit as of its fill.
* **Resolution.** Times are as fine as the store dates objects (S3: the second), so "never
  changes" holds for moments older than that; consistency does not depend on it.
* **Where the scan starts.** At the table's version in the newest global-log entry written by
  the moment that holds no pending write (such an entry is a consistent cut: nothing at or
  below it is half of anything above it), else at the oldest commit its log keeps (a GET each,
  cached per client): a multi-table transaction may be rolled forward long after its other
  commits. Tables are resolved lazily: reading one resolves it with every table a multi-table
  commit ties it to, transitively, and what is resolved stays fixed for the view.
* **Too old.** A version the cut needs that log clean-up removed (no commit or checkpoint to
  read it from) is ``MomentTooOldError`` naming the table's oldest readable version's time.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ..complex_txn import record as records
from ..delta.actions import Commit
from ..delta.history import readable
from ..delta.log import DeltaLog
from ..errors import MomentTooOldError, TableNotFoundError
from ..isolation.gvl import GlobalVersionLog, GvlEntry
from ..isolation.units import RecordCache
from ..markers.marker import marker_of
from ..markers.publish import find_commit
from ..names import GVL_DIR
from ..vocab import CommitInfo, Decision

BASE_TRIES = 8  # entries looked at for one without pending writes, newest first


@dataclass(frozen=True)
class Multi:
    """A table commit of a transaction that wrote several tables."""

    attempt: str
    decision: str
    tables: tuple[str, ...]


def multi_of(c: Commit, recs: RecordCache) -> Multi | None:
    """The multi-table transaction a commit belongs to, or None for a single-table commit."""
    info = CommitInfo.of(c.lakevilla)
    if (info is None or not info.is_commit or info.attempt is None
            or int(info.tables or 1) <= 1):
        return None
    tables = tuple(info.txn_tables or ())
    if not tables and info.decision == Decision.RECORD:  # older commits: the record names them
        rec = recs.get(info.attempt)
        tables = tuple(sorted(rec.tables)) if rec is not None else ()
    if len(tables) <= 1:
        return None  # nothing says which other tables: finished long ago, as one unit
    return Multi(info.attempt, str(info.decision), tables)


def moment_text(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()


@dataclass
class TableLog:
    """One table's kept commits, with each version's time (the module's rule)."""

    table: str
    start: int  # commits after this one are kept and loaded (-1: the whole log from version 0)
    newest: int
    commits: dict[int, Commit]
    times: dict[int, float]
    readable: list[int]
    attempts: dict[str, int] = field(default_factory=dict)  # attempt -> version of its commit
    markers: set[int] = field(default_factory=set)  # empty versions (open in-place ones too)
    based: bool = False  # starts at a consistent global-log entry's version: nothing below
    # is half of anything above
    first: float | None = None  # when the oldest readable version was written
    rest: int = -1  # where a cut with nothing above ``start`` ends: the newest non-marker <= it

    @property
    def complete(self) -> bool:
        return self.start < 0

    def newest_at(self, moment: float) -> int:
        """The newest version that is not a marker whose time (and every earlier one's) is at or
        before ``moment``; ``start`` if none of the kept commits is. Markers change nothing a
        reader sees, so the cut never ends on one (and stays the same number as they come)."""
        out = self.rest
        for v in range(self.start + 1, self.newest + 1):
            if v in self.markers:
                continue
            if self.times[v] > moment:
                break
            out = v
        return out

    def below(self, version: int) -> int:
        """The newest version under ``version`` that is not a marker (``start`` if none)."""
        v = version - 1
        while v > self.start and v in self.markers:
            v -= 1
        return self.rest if v <= self.start else v

    def oldest(self) -> float | None:
        """The time of the oldest version that can still be read."""
        if not self.readable:
            return None
        return self.times.get(self.readable[0], self.first)


def load(log: DeltaLog, base: int | None = None) -> TableLog | None:
    """Every commit the log keeps (above ``base``, a consistent global-log entry's version, if
    given and kept), and their times; None if the table does not exist."""
    listing = log.list_log()
    if not listing.commits and not listing.checkpoints and not listing.v2_checkpoints:
        return None
    present = set(listing.commits)
    newest = max(listing.commits, default=-1)
    start = newest
    while start in present:
        start -= 1
    based = base is not None and start <= base <= newest
    rest = start
    if based and base is not None:
        start = rest = base
        while rest > 0 and rest - 1 in present and marker_of(log.read_commit(rest)) is not None:
            rest -= 1  # an entry may stop a table on a marker: a cut ends below it (same rows)
    commits = dict(log.commits_between(start, newest)) if newest > start else {}
    times: dict[int, float] = {}
    markers: set[int] = set()
    prev = -math.inf
    for v in range(start + 1, newest + 1):
        c = commits[v]
        if marker_of(c) is not None:
            markers.add(v)
        else:
            ict = (c.commit_info or {}).get("inCommitTimestamp")
            raw = ict / 1000 if isinstance(ict, int) else listing.written.get(v, prev)
            prev = max(prev, int(raw * 1000) / 1000 if math.isfinite(raw) else raw)
        times[v] = prev
    ok = readable(listing)
    out = TableLog(log.table, start, newest, commits, times, ok, markers=markers, based=based,
                   first=listing.written.get(ok[0]) if ok else None, rest=rest)
    for v, c in commits.items():
        info = CommitInfo.of(c.lakevilla)
        if info is not None and info.is_commit and info.attempt is not None:
            out.attempts[info.attempt] = v
    return out


class MomentCut:
    """The consistent cut of a lake as of ``moment`` (seconds since the epoch), resolved table
    by table on demand; a table once resolved keeps its version."""

    def __init__(self, log_for: Callable[[str], DeltaLog], recs: RecordCache,
                 moment: float, gvl: GlobalVersionLog | None = None) -> None:
        self.log_for = log_for
        self.recs = recs
        self.moment = moment
        self.gvl = gvl
        self._base: GvlEntry | None = None
        self._base_looked = False
        self.logs: dict[str, TableLog | None] = {}
        self.fixed: dict[str, int | MomentTooOldError] = {}  # what a read of the table gets
        self.versions: dict[str, int] = {}  # the cut, readable or not
        self._lock = threading.Lock()

    def describe(self) -> str:
        return moment_text(self.moment)

    def version(self, table: str) -> int:
        """The table's version in the cut; -1 if it did not exist at the moment."""
        with self._lock:
            if table not in self.fixed:
                self._resolve(table)
            got = self.fixed[table]
        if isinstance(got, MomentTooOldError):
            raise got
        return got

    def table_log(self, table: str) -> TableLog | None:
        if table not in self.logs:
            base = self._base_entry()
            self.logs[table] = load(self.log_for(table),
                                    base.tables.get(table) if base is not None else None)
        return self.logs[table]

    def _base_entry(self) -> GvlEntry | None:
        """The newest global-log entry written by the moment that holds no pending write (a few
        tried, newest first): its versions are a consistent cut of the tables it knows, written
        before it, so the scan of those tables can start there."""
        if self._base_looked or self.gvl is None:
            return self._base
        self._base_looked = True
        seqs = []
        for meta in self.gvl.store.list(f"{GVL_DIR}/"):
            name = meta.key.rsplit("/", 1)[-1]
            if (name.endswith(".json") and name[:-5].isdigit() and meta.last_modified is not None
                    and meta.last_modified <= self.moment):
                seqs.append(int(name[:-5]))
        for seq in sorted(seqs, reverse=True)[:BASE_TRIES]:
            e = self.gvl.read(seq)
            if e is not None and e.v >= 2 and not e.pending:
                self._base = e
                break
        return self._base

    def _multi_commits(self, tl: TableLog, upto: int) -> list[tuple[int, Multi]]:
        out = []
        for v in range(tl.start + 1, upto + 1):
            m = multi_of(tl.commits[v], self.recs)
            if m is not None:
                out.append((v, m))
        return out

    def _resolve(self, table: str) -> None:
        cut: dict[str, int] = {}
        todo = [table]
        while todo:  # the table and every table a multi-table commit in its cut ties it to
            t = todo.pop()
            if t in cut or t in self.fixed:
                continue
            tl = self.table_log(t)
            cut[t] = -1 if tl is None else tl.newest_at(self.moment)
            if tl is not None:
                todo.extend(w for _v, m in self._multi_commits(tl, cut[t]) for w in m.tables)
        changed = True
        while changed:  # the fixpoint: lower a table below any transaction it holds only in part
            changed = False
            for t in sorted(cut):
                tl = self.logs[t]
                if tl is None:
                    continue
                for v, m in self._multi_commits(tl, cut[t]):
                    if not all(self._holds(w, m, cut) for w in m.tables if w != t):
                        cut[t] = tl.below(v)
                        changed = True
                        break
        for t, v in cut.items():
            self.versions[t] = v
            self.fixed[t] = self._checked(t, v)

    def _holds(self, w: str, m: Multi, cut: dict[str, int]) -> bool:
        """Does the cut hold ``m``'s commit on table ``w``?"""
        at = cut[w] if w in cut else self.versions.get(w, -1)
        tl = self.logs.get(w)
        if tl is None:  # no such table: one this transaction creates, not written yet?
            return not self._committing(m, w)
        v = tl.attempts.get(m.attempt)
        if v is not None:
            return v <= at
        if tl.complete or tl.based:
            return False  # never written there (yet): decided, not rolled forward
        # the log was cleaned below what it keeps: landed below that, unless still to come
        if self._committing(m, w):
            return False
        log = self.log_for(w)
        return find_commit(log, m.attempt, tl.newest, log.probe_versions(tl.newest)) is None

    def _committing(self, m: Multi, w: str) -> bool:
        """Is ``m`` decided by a record still COMMITTING, with a commit to ``w``?"""
        if m.decision != Decision.RECORD:
            return False
        rec = self.recs.get(m.attempt)
        return rec is not None and rec.state == records.COMMITTING and w in rec.tables

    def _checked(self, t: str, v: int) -> int | MomentTooOldError:
        tl = self.logs[t]
        if tl is None or (v < 0 and tl.complete):
            return -1
        if v in tl.readable:
            return v
        oldest = tl.oldest()
        when = moment_text(oldest) if oldest is not None else "none: no version can be read"
        return MomentTooOldError(
            f"table {t!r} cannot be read as of {self.describe()}: the version that moment needs "
            f"({v}) was removed by log clean-up (Delta log retention, checkpoints); the oldest "
            f"moment that can be served for it is {when}",
            oldest=dt.datetime.fromtimestamp(oldest, dt.UTC) if oldest is not None else None)


def not_found(table: str, when: str) -> TableNotFoundError:
    return TableNotFoundError(f"table {table!r} did not exist as of {when}")
