"""Where a scan for running markers may start: what the client's earlier scans already cleared.

A writer that waits looks for running markers below its own in every round, from the last
checkpoint it knows of (at most ``MARKER_SCAN_WINDOW`` versions back). Under a crowd some marker
is nearly always open, checkpoints lag behind, and the scan grew to ~200 versions a round: a
wait round's CPU with it, and the TPC-C rate at 16 clients fell from 4.7 to 3.0 transactions
per second over 75 s (``docs/notes/2026-11-27-issue-39-floor.md``).

Each table keeps one cleared range ``[base, top)``: a scan read every version in it and found
each marker there closed, or its owner's commit to this table landed (that commit is the
owner's decision there, whatever its marker still says). Neither can change back: markers are
claimed only at the tail, a closed one stays closed, a landed commit stays. A later scan that
would start inside the range starts at its top instead; one that would start below it (an
older marker's wider window) reads all of its window, as before.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from ..delta.log import DeltaLog


@dataclass
class _Cleared:
    base: int  # lowest version of the range
    top: int  # first version above it that may hold a running marker


_cleared: WeakKeyDictionary[DeltaLog, _Cleared] = WeakKeyDictionary()
_lock = threading.Lock()


def scan_start(log: DeltaLog, lo: int) -> int:
    """Where a scan of ``(lo, ...]`` may start: past the cleared range when it begins there."""
    with _lock:
        r = _cleared.get(log)
        if r is None or lo + 1 < r.base:
            return lo
        return max(lo, r.top - 1)


def scanned(log: DeltaLog, start: int, running: int) -> None:
    """A scan read every version in ``(start, running)``, and ``running`` is the lowest version
    it left that may still hold a running marker (or the top of the scan)."""
    with _lock:
        r = _cleared.get(log)
        if r is not None and start + 1 <= r.top:
            if running >= r.base:  # it joins the range (no running marker between): extend it
                r.base, r.top = min(r.base, start + 1), max(r.top, running)
        elif r is None or running > r.top:  # a gap below: the newer range serves later scans
            _cleared[log] = _Cleared(start + 1, running)
