"""Where the join of a table new to the global log may start: a promise its checkpoint carries.

A table no global-log entry knows joins a cut only after its commits were examined for what
a cut cannot take whole (closure.py): multi-table commits (a checkpoint may hold one half of
a transfer whose other half the cut lacks), open markers, announced commits. Examining every
commit the log still has costs a GET per commit: 1,006 GETs and 7.5 s for a table of 1,000
commits on S3, against 15 GETs once an entry knows it.

Most commits need no examination: a single-table commit (delta-rs, Spark, ``""``, R, one-table
CT, a create) or a marker that can no longer be filled is taken whole by any cut, so the
search gives the same result whether it looked at them or not. lakevilla's checkpointer reads
the commits since its last checkpoint anyway (to refuse a checkpoint above an open marker), so
it writes into ``_last_checkpoint`` (Delta's ``tags`` map, which other clients ignore)
``lakevilla.joinFrom`` = f: every commit at or below f is of that kind. Commits never change
once written (markers only close), so the promise stays true; the next checkpoint extends it
from there over the commits it examines, and stops at the first commit that is not of that
kind (which a join then examines, with everything after it). A join takes the hint its client
read last (the table's snapshot just read it; else one GET) and examines only the commits
after f. A ``_last_checkpoint`` without the tag (written by another client), or commits after
f that are gone, make the join examine the whole log, as before.
"""

from __future__ import annotations

import weakref
from typing import Any

from ..delta.log import DeltaLog
from ..errors import CorruptLogError
from .units import MARKER, SINGLE, unit_of

TAG = "lakevilla.joinFrom"
# commits a checkpoint examines at most to extend the promise (beyond: it keeps the old one)
WINDOW = 500

# per log: the newest promise this process wrote or read
_promised: weakref.WeakKeyDictionary[DeltaLog, int] = weakref.WeakKeyDictionary()


def promised(hint: dict[str, Any] | None) -> int | None:
    """The version a ``_last_checkpoint`` promises a join may start after (None: no promise)."""
    if hint is None or not isinstance(hint.get("tags"), dict):
        return None
    try:
        f, version = int(hint["tags"][TAG]), int(hint["version"])
    except (KeyError, TypeError, ValueError):
        return None
    return f if 0 <= f <= version else None


def checkpoint_tags(log: DeltaLog, version: int) -> dict[str, str]:
    """The tags of a checkpoint at ``version``: the promise extended over the commits up to it
    (read by the checkpointer already: from the cache). Empty when nothing can be promised."""
    f = _promised.get(log)
    if f is None:  # the _last_checkpoint this client's snapshot started from (read if none was)
        hint = log.hints_read[0] if log.hints_read else log.read_last_checkpoint()
        given = promised(hint)
        if given is None and hint is not None:
            return {}  # checkpointed by a client that promises nothing: its commits are not at hand
        f = -1 if given is None else given  # no checkpoint yet: from version 0 on
    if f < version and version - f <= WINDOW:
        try:
            for v, c in log.commits_between(f, version):
                if unit_of(c).kind not in (SINGLE, MARKER):
                    break  # the first commit a join must examine
                f = v
        except CorruptLogError:
            pass  # commits gone (cleaned up): the promise stays where it was
    if f < 0:
        return {}
    _promised[log] = max(f, _promised.get(log, -1))  # true whether or not the checkpoint lands
    return {TAG: str(f)}


def join_start(log: DeltaLog) -> tuple[int, int] | None:
    """(checkpoint version, promised version) for the join of ``log``'s table, or None (no
    promise: examine the whole log). The ``_last_checkpoint`` this client read last if it
    promises a version near what it knows of the table (a promise stays true; the join reads
    the rest), else one GET of it."""
    hint = log.hints_read[0] if log.hints_read else None
    f = promised(hint)
    if f is None or log.known_latest() - f > WINDOW:
        hint = log.read_last_checkpoint()
        f = promised(hint)
    if hint is None or f is None:
        return None
    _promised[log] = max(f, _promised.get(log, -1))
    return int(hint["version"]), f
