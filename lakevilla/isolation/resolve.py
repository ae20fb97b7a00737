"""Turning an announced (pending) write into the table version where it landed.

A table's version in an entry is either resolved (a number) or a pending write: an
announced transaction whose table commit may not be written yet. We find that
commit by GET-probing from its hint; if its owner has not written it after a short
wait, we write it ourselves from the bytes in the entry.
"""

from __future__ import annotations

import time

from ..delta.actions import Commit
from ..delta.log import DeltaLog
from ..markers.marker import commit_txn
from ..markers.publish import publish
from ..store import NotFound
from ..vocab import CommitMode
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
    if p.mode == CommitMode.IN_PLACE and p.marker is not None:
        start = p.marker
    else:
        start = max(p.hint, (p.marker + 1) if p.marker is not None else p.hint)
    return _probe_for(log, p.attempt, start)


def resolve_write(log: DeltaLog, p: PendingWrite, *, patience: float = 2.0) -> int:
    """The version where the announced write ``p`` landed, writing it if its owner stalled."""
    deadline = time.monotonic() + patience
    delay = 0.005
    while True:
        v = find_pending(log, p)
        if v is not None:
            return v
        if time.monotonic() >= deadline:
            # the owner announced but did not write: write it for them (idempotent)
            return publish(log, p.attempt, Commit.from_bytes(p.commit.encode()),
                           marker_version=p.marker, mode=p.mode, hint=p.hint)
        time.sleep(delay)  # protocol backoff while the owner writes its commit
        delay = min(delay * 2, 0.2)


def resolve(log: DeltaLog, entry: GvlEntry, table: str, *, patience: float = 2.0) -> int:
    """The version of ``table`` an isolated reader uses at ``entry``."""
    p = entry.pending.get(table)
    if p is None:
        return entry.tables[table]
    return resolve_write(log, p, patience=patience)
