"""A first read of a table waits for running writers that will change what it reads.

A CT transaction claims its markers at commit, so while its statements run it holds none, and
no one waits for it. When it reads rows that a writer already queued in the table's log will
change (the writer's marker says which rows and columns, ``Change``), the read is bound to be
invalidated when that writer commits, and a transaction that used the rows then aborts and
runs again from the start: its markers claimed and closed, its statements run twice, and every
other client reading its versions. Waiting for the writer before reading costs no one else
anything: the reader holds no marker. So the first statement on a table, when it is a read,
waits until each such writer has committed or ended (at most ``wait_timeout``), then reads.

Nothing else depends on the wait: validation at commit is as before, so a writer missed here
(one that claims its marker after we looked, or publishes no changes) costs what it always did.
The price: the read cannot know whether its transaction will write the table (CT validates only
reads of tables it writes), so a transaction that goes on to only read it waits for nothing it
needed; at most that writer's turn in the queue.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..errors import CorruptLogError
from ..markers.floor import scan_start
from ..markers.marker import RUNNING, MarkerPayload, commit_txn, marker_of
from ..scan.conflicts import Change
from ..scan.pruning import parse_predicate, prune_files
from .context import TxnContext
from .markerset import FULL_READ_EVERY, MARKER_SCAN_WINDOW

if TYPE_CHECKING:
    from ..delta.actions import Commit
    from ..delta.log import DeltaLog
    from ..delta.snapshot import Snapshot
    from ..statements.base import Statement

Writers = list[tuple[int, MarkerPayload]]  # (marker version, its payload)
POLL_FIRST, POLL_CAP = 0.002, 0.1  # seconds between rounds: growing by half, up to the cap


class NoReadWait:
    """Reads as they come: every feature set but CT, which alone both reads the newest version
    and claims its markers only at commit (a transaction holding a marker must not wait here:
    others may be waiting for it)."""

    def before_first_read(self, log: DeltaLog, snap: Snapshot, op: Statement) -> bool:
        """Whether it waited (the caller then takes a newer snapshot)."""
        return False


class WaitForChangers(NoReadWait):
    def __init__(self, ctx: TxnContext) -> None:
        self.ctx = ctx

    def before_first_read(self, log: DeltaLog, snap: Snapshot, op: Statement) -> bool:
        ctx = self.ctx
        if op.is_write:
            return False  # a write's conflicts are redone, not aborted for
        writers = self.changers(log, snap, op)
        if not writers:
            return False
        ctx.count("read_waits")
        started = time.monotonic()
        deadline, delay, read_at = started + ctx.settings.wait_limit, POLL_FIRST, started
        seen, landed = snap.version, set[str]()
        while writers:
            if time.monotonic() > deadline:
                ctx.count("read_waits_timed_out")
                break
            time.sleep(delay)
            delay = min(delay * 1.5, POLL_CAP)
            newest = log.probe_versions(max(seen, log.known_latest()))
            landed.update(a for _, c in log.commits_between(seen, newest)
                          if (a := commit_txn(c)) is not None)
            seen = newest
            writers = [(v, p) for v, p in writers if p.attempt not in landed]
            if writers and time.monotonic() - read_at >= FULL_READ_EVERY:
                read_at = time.monotonic()  # an abort or an expiry shows only in the marker
                writers = [(v, p) for v, p in writers if _running(log.read_commit_raw(v)[0],
                                                                  ctx.now())]
        ctx.count("read_wait_ms", round((time.monotonic() - started) * 1000))
        return True

    def changers(self, log: DeltaLog, snap: Snapshot, op: Statement) -> Writers:
        """The writers running below ``snap``'s version, as last read, whose changes may meet
        what ``op`` reads there; those whose commit landed are done."""
        now, top = self.ctx.now(), snap.version
        start = scan_start(log, max(-1, top - MARKER_SCAN_WINDOW,
                                    log.last_checkpoint_version() - 1))
        running: Writers = []
        landed: set[str] = set()
        for v, c in log.commits_between(start, top):
            p = marker_of(c)
            if p is not None and p.changes and _running(c, now) and p.txn != self.ctx.id:
                running.append((v, p))
            elif (a := commit_txn(c)) is not None:
                landed.add(a)
        # by column first, which needs no file: most writers change other columns
        cols = op.depends_on
        parsed = [(v, p, _changes(p)) for v, p in running if p.attempt not in landed]
        touching = [(v, p, chs) for v, p, chs in parsed if any(ch.touches(cols) for ch in chs)]
        if not touching:
            return []
        files = prune_files(snap.files, parse_predicate(op.where), snap.schema,
                            snap.partition_columns)
        return [(v, p) for v, p, chs in touching
                if any(ch.meets(files, cols, snap.schema, snap.partition_columns) for ch in chs)]


def _running(c: Commit, now: float) -> bool:
    p = marker_of(c)
    return p is not None and p.state == RUNNING and not p.expired(now)


def _changes(p: MarkerPayload) -> list[Change]:
    try:
        return [Change.from_json(d) for d in p.changes or []]
    except CorruptLogError:
        return []  # unreadable: read as if it were not there (validation still holds)
