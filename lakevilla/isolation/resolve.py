"""Turning a global log entry into table versions, without LISTing table logs.

A table's version in an entry is either resolved (a number) or a pending write:
an announced transaction whose table commit may not be written yet. We find
that commit by GET-probing from its hint; if its owner has not written it after
a short wait, we write it ourselves from the bytes in the entry. Then, also by
GET, we step over commits that clients ignoring the global log made since
(delta-rs, LV[R]): they are single-table commits, atomic on their own, and are
incorporated. We stop at any commit of a multi-table lakevilla transaction that
the log has not announced, so an isolated reader never sees half of one.
"""

from __future__ import annotations

import time

from ..delta.actions import Commit
from ..delta.log import DeltaLog
from ..markers import RUNNING, commit_txn, marker_of
from ..publish import publish
from ..store import NotFound
from .gvl import GvlEntry, PendingWrite


def _probe_for(log: DeltaLog, attempt: str, start: int) -> int | None:
    v = start
    while True:
        try:
            c = log.read_commit(v)  # cached when final: a landed commit never changes
        except NotFound:
            return None
        if commit_txn(c) == attempt:
            return v
        v += 1


def find_pending(log: DeltaLog, p: PendingWrite) -> int | None:
    if p.mode == "in_place" and p.marker is not None:
        start = p.marker
    else:
        start = max(p.hint, (p.marker + 1) if p.marker is not None else p.hint)
    return _probe_for(log, p.attempt, start)


def resolve(log: DeltaLog, entry: GvlEntry, table: str, *, patience: float = 2.0) -> int:
    """The version of ``table`` an isolated reader uses at ``entry``."""
    p = entry.pending.get(table)
    if p is None:
        return entry.tables[table]
    deadline = time.monotonic() + patience
    delay = 0.005
    while True:
        v = find_pending(log, p)
        if v is not None:
            return v
        if time.monotonic() >= deadline:
            # the owner announced but did not write: write it for them (idempotent)
            return publish(log, p.attempt, Commit.from_bytes(p.commit.encode()), marker_version=p.marker,
                           mode=p.mode, hint=p.hint)
        time.sleep(delay)  # protocol backoff while the owner writes its commit
        delay = min(delay * 2, 0.2)


def incorporable(c: Commit) -> bool:
    """Can an isolated reader take this commit although no entry announced it?"""
    m = marker_of(c)
    if m is not None:
        return not (m.state == RUNNING and m.mode == "in_place")  # it might still be filled
    lv = c.lakevilla
    if lv and lv.get("kind") == "commit":
        return lv.get("decision") == "table" and int(lv.get("tables", 1)) <= 1
    return True  # a commit by a client that ignores the global log


def probe_unannounced(log: DeltaLog, version: int) -> int:
    """Step forward over commits made outside the global log that we may incorporate."""
    v = version
    while True:
        try:
            c, _ = log.read_commit_raw(v + 1)
        except NotFound:
            return v
        if not incorporable(c):
            return v
        v += 1
