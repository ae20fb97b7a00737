"""What finished transactions leave behind, deleted in batches across transactions.

A committed transaction leaves objects nothing needs any more: its sublog entries and the files
the first runs of its redone statements wrote. Deleting them at once costs one request per
transaction (S3's DeleteObjects), as much as a commit's put; a client committing one short
transaction after another (YCSB, a stream of updates) paid it every time. The keys now wait
here and go in one request for many transactions: when ``BATCH`` keys wait, when the oldest has
waited ``MAX_WAIT`` seconds, and when the client flushes or closes.

Nothing depends on when they go: a finished transaction's sublogs are what ``lake.status`` skips
(its commit is in every table it wrote), ``resume`` refuses (its commit landed) and ``cleanup``
deletes (a crashed client's batch); the redone files are reachable from no version and go by
abandoned-file deletion if the batch is lost.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from ..errors import LakeVillaError
from ..store import ObjectStore
from ..store.base import DELETE_BATCH

BATCH = DELETE_BATCH  # keys: one DeleteObjects request's limit
MAX_WAIT = 5.0  # seconds the oldest key waits before its batch goes anyway


class LaterDeletes:
    """Keys to delete after commits, sent in batches on ``submit`` (the client's background
    thread): the batch goes when full, when old, or on ``flush``."""

    def __init__(self, store: ObjectStore, submit: Callable[[Callable[[], None]], None],
                 max_wait: float = MAX_WAIT) -> None:
        self._store = store
        self._submit = submit
        self._max_wait = max_wait
        self._lock = threading.Lock()
        self._keys: list[str] = []
        self._since = 0.0
        self._timer: threading.Timer | None = None

    def add(self, keys: list[str]) -> None:
        if not keys:
            return
        with self._lock:
            if not self._keys:
                self._since = time.monotonic()
                self._arm()
            self._keys.extend(keys)
            due = (len(self._keys) >= BATCH
                   or time.monotonic() - self._since >= self._max_wait)
        if due:
            self._submit(self.send)

    def _arm(self) -> None:
        """A batch that nobody adds to still goes after ``max_wait`` (call under the lock)."""
        self._timer = threading.Timer(self._max_wait, lambda: self._submit(self.send))
        self._timer.daemon = True
        self._timer.start()

    def send(self) -> None:
        """Delete what waits now (on the background thread, or by ``flush``)."""
        with self._lock:
            keys, self._keys = self._keys, []
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        for i in range(0, len(keys), BATCH):
            # what a failure leaves, abandoned-file deletion and cleanup find
            with contextlib.suppress(LakeVillaError):
                self._store.delete_many(keys[i:i + BATCH])

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._keys)
