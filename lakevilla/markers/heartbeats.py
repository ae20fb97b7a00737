"""The heartbeat service: one daemon thread per client keeps its transactions' markers alive.

A marker that is not refreshed within its TTL counts as stalled and may be freed by any other
client, so every transaction holding one is watched from its first claim to its end. The
thread starts with the first watched transaction and ends when none is left.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Protocol


class Beating(Protocol):
    """What the service needs of a transaction."""

    @property
    def state(self) -> str: ...

    def heartbeat(self) -> None: ...


ALIVE_STATES = ("active", "committing")


class Heartbeats:
    """Refreshes every watched transaction each ``interval()`` seconds (read at each round, so
    a changed TTL takes effect)."""

    def __init__(self, interval: Callable[[], float]) -> None:
        self._interval = interval
        self._watched: weakref.WeakSet[Beating] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def watch(self, txn: Beating) -> None:
        with self._lock:
            self._watched.add(txn)
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._loop, name="lakevilla-heartbeat",
                                                daemon=True)
                self._thread.start()

    def forget(self, txn: Beating) -> None:
        with self._lock:
            self._watched.discard(txn)

    def watching(self, txn: Beating) -> bool:
        with self._lock:
            return txn in self._watched

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval()):
            with self._lock:
                txns = list(self._watched)
                if not txns:  # nothing to keep alive: the next watched transaction restarts us
                    self._thread = None
                    return
            for t in txns:
                if t.state not in ALIVE_STATES:
                    self.forget(t)  # finished: nothing of it to keep alive
                    continue
                try:
                    t.heartbeat()
                except Exception:  # noqa: BLE001 - counted by the transaction; beaten again next round
                    pass
                except BaseException:  # noqa: BLE001 - a dead client (simulated crash) beats no more
                    self.forget(t)
