"""Which tables this client met contention on lately: where its one-table commits ride.

A commit that lost a race on a table, or went in a group commit there, is a sign of a crowd;
``CROWD`` signs each within ``RIDE_MEMORY`` seconds of the last mark the table, and while marked
the client's one-table commits to it lead a version or ride in one (``core/riding.py``) instead
of racing for it. One lost race is a collision, not a crowd: its retry puts, as before. A lead
that found no rider clears the mark: a lone writer puts its commit, as before.
"""

from __future__ import annotations

import threading
import time

RIDE_MEMORY = 5.0  # seconds a table stays contended after the last sign of a crowd
CROWD = 2  # signs within RIDE_MEMORY of each other that make a crowd (one lost race is a collision)


class Contention:
    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, float]] = {}  # table -> (signs in a row, until)
        self._lock = threading.Lock()

    def met(self, table: str) -> None:
        """A sign of a crowd on ``table``: a race lost, a group commit led, ridden or lost."""
        now = time.monotonic()
        with self._lock:
            n, until = self._seen.get(table, (0, 0.0))
            self._seen[table] = (n + 1 if now < until else 1, now + RIDE_MEMORY)

    def calm(self, table: str) -> None:
        with self._lock:
            self._seen.pop(table, None)

    def active(self, table: str) -> bool:
        with self._lock:
            n, until = self._seen.get(table, (0, 0.0))
        return n >= CROWD and time.monotonic() < until
