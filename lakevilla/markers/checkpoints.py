"""Checkpoints beside markers: never at or above an open marker.

An in-place fill may still land in a running marker's version; a checkpoint that already
covered the empty marker would hide the fill from every reader that starts from it. So a
checkpoint is written only when no running marker lies at or below its version: a due one
goes just below the lowest open marker instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .. import logs
from ..delta.log import DeltaLog
from ..errors import InvalidArgumentError
from ..store import NotFound
from .floor import scan_start
from .marker import RUNNING, marker_of


def open_marker(log: DeltaLog, version: int) -> int | None:
    """A running marker at or below ``version`` (since the last checkpoint), read fresh.

    Called *before* the checkpoint's snapshot is built: if every version read here is
    final (no running marker), none of them can change any more, so the snapshot built
    afterwards is exact. Built the other way round, an in-place fill landing between the
    snapshot and this check would be hidden by the checkpoint."""
    # past what this client's waits cleared: a marker there is closed or its owner's commit
    # landed, and neither is ever filled (a fill is its owner's commit)
    lo = scan_start(log, max(log.last_checkpoint_version(), version - 500))
    for v, c in log.commits_between(lo, version):
        m = marker_of(c)
        if m is None or m.state != RUNNING:
            continue
        try:  # a cached marker may have closed since (a tail marker's content is cached as final)
            m = marker_of(log.read_commit_raw(v)[0])
        except NotFound:
            continue
        if m is not None and m.state == RUNNING:
            return v
    return None


Tags = Callable[[DeltaLog, int], dict[str, str]]  # what _last_checkpoint also tells


def _no_tags(log: DeltaLog, version: int) -> dict[str, str]:
    return {}


def checkpoint_if_due(log: DeltaLog, version: int, missed: set[str],
                      tags: Tags = _no_tags) -> None:
    """A checkpoint at ``version`` when one is due, or when an earlier one failed (``missed``:
    the tables whose last attempt failed, kept by the client). Raises if writing it fails.
    ``tags(log, version)``: what ``_last_checkpoint`` also tells (isolation/join_from.py)."""
    try:
        config = log.snapshot(version, list_log=False).metadata.configuration
    except Exception:  # noqa: BLE001 - checkpoints are an optimisation
        return
    if not (log.checkpoint_due(version, config) or log.table in missed):
        return
    lowest = open_marker(log, version)
    if lowest is not None:
        # never at or above an open marker, but just below the lowest one: every version there is
        # final. Writers that always have a marker open (a crowd on one table) would otherwise
        # leave the table without a checkpoint, and every reader to replay its whole log.
        if lowest - 1 <= log.last_checkpoint_version():
            return
        version = lowest - 1
    try:
        log.write_checkpoint(log.snapshot(version, list_log=False), tags=tags(log, version))
    except BaseException:
        missed.add(log.table)
        raise
    missed.discard(log.table)
    logs.maintenance("checkpoint", "checkpoint of %s at version %d", log.table, version,
                     level=logging.DEBUG)


def checkpoint_now(log: DeltaLog, tags: Tags = _no_tags) -> int:
    """A checkpoint at the newest version; refused above an open marker."""
    v = log.latest_version()
    mv = open_marker(log, v)
    if mv is not None:
        raise InvalidArgumentError(f"{log.table}@{mv} is an open marker; a checkpoint now "
                                   "could hide its commit")
    log.write_checkpoint(log.snapshot(v), tags=tags(log, v))
    return v
