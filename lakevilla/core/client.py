"""The plumbing one lake client shares with every transaction it makes.

``Lake`` is the user's facade; this is what sits behind it and what the transaction core
depends on: the store, the engine, the Delta logs it has opened (each caches its commits),
the I/O pool, one background thread for work off the commit's latency path, the heartbeat
service, the global version log and the cache of decided records. Nothing here is public API.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from ..delta.log import DeltaLog
from ..errors import ReadOnlyLakeError
from ..isolation.gvl import GlobalVersionLog
from ..isolation.join_from import checkpoint_tags
from ..isolation.units import RecordCache
from ..markers import checkpoints
from ..markers.heartbeats import Heartbeats
from ..markers.marker import is_final
from ..names import check_table_name
from ..parallel import SHARED, pmap
from ..recovery.stalled import Services
from ..settings import LakeSettings
from ..store import ObjectStore
from .contention import Contention
from .deletes import LaterDeletes

T = TypeVar("T")
R = TypeVar("R")

# every client of this process, for flush_all
_CLIENTS: weakref.WeakSet[LakeClient] = weakref.WeakSet()


class LakeClient:
    """One client's shared state. ``settings`` is replaced whole when the user changes one
    (``Lake.marker_ttl = ...``); readers take it live, so the change applies at once."""

    def __init__(self, store: ObjectStore, root_uri: str, engine: Any, settings: LakeSettings,
                 clock: Callable[[], float] | None = None, read_only: bool = False) -> None:
        self.store = store
        self.read_only = read_only
        self.root_uri = root_uri
        self.engine = engine
        self.settings = settings
        self._clock = clock or time.time
        self._missed_checkpoints: set[str] = set()
        self._bg = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakevilla-bg")
        self._bg_futures: list[Future[None]] = []
        # what finished transactions leave (sublogs, redone files): one request for many
        self.deletes = LaterDeletes(store, self.background)
        self.contention = Contention()  # tables whose one-table commits ride (core/riding.py)
        self._logs: dict[str, DeltaLog] = {}
        self._lock = threading.Lock()
        self.gvl = GlobalVersionLog(store)
        self.records = RecordCache(store)  # decided transaction records, for LV[I] cuts
        # keeps this client's markers alive; a TTL set later takes effect at the next round
        self.heartbeats = Heartbeats(lambda: max(min(self.settings.marker_ttl / 4, 2.0), 0.01))
        _CLIENTS.add(self)

    def now(self) -> float:
        return self._clock()

    def check_writable(self, what: str) -> None:
        """``ReadOnlyLakeError`` before any request, on a lake opened read-only."""
        if self.read_only:
            raise ReadOnlyLakeError(f"{what}: this lake was opened with read_only=True; "
                                    "nothing was sent")

    def log(self, table: str) -> DeltaLog:
        """The one ``DeltaLog`` of ``table`` for this client (its cache is shared)."""
        check_table_name(table)
        with self._lock:
            lg = self._logs.get(table)
            if lg is None:
                lg = DeltaLog(self.store, table, executor=SHARED, is_final=is_final)
                self._logs[table] = lg
            return lg

    @staticmethod
    def map(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``fn`` over ``items`` on the I/O pool (independent requests: tables, markers)."""
        return pmap(fn, items)

    def background(self, fn: Callable[[], object]) -> None:
        """Best-effort work off the commit's latency path (marker closes, checkpoints, deletes)."""
        def safe() -> None:
            with contextlib.suppress(BaseException):  # includes a simulated crash of this client
                fn()

        with self._lock:
            self._bg_futures = [f for f in self._bg_futures if not f.done()]
            with contextlib.suppress(RuntimeError):  # closed: a batch's timer fired too late
                self._bg_futures.append(self._bg.submit(safe))

    def flush(self) -> None:
        """Wait for this client's background work, the deletes that wait for a batch too."""
        if self.deletes.waiting:
            self.background(self.deletes.send)
        with self._lock:
            futs = list(self._bg_futures)
        for f in futs:
            f.result()

    @staticmethod
    def flush_all() -> None:
        """``flush`` every client of this process."""
        for client in list(_CLIENTS):
            client.flush()

    def services(self) -> Services:
        """What stalled-client recovery needs (``recovery/stalled.py``)."""
        return Services(store=self.store, log_for=self.log, gvl=self.gvl, now=self.now)

    def checkpoint_if_due(self, log: DeltaLog, version: int) -> None:
        """After a commit: a checkpoint when one is due, or when an earlier one of this client
        failed (retried by its next commit). Raises if writing it fails (the caller counts it)."""
        checkpoints.checkpoint_if_due(log, version, self._missed_checkpoints, checkpoint_tags)

    def close(self) -> None:
        self.heartbeats.stop()
        self.flush()
        self._bg.shutdown(wait=True)
