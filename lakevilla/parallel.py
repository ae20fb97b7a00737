"""One process-wide pool for parallel object-store requests.

Requests are I/O-bound, so threads overlap their latency. A task already running
in the pool that fans out again (publishing many tables, each reading several
commits) runs its inner work inline: waiting on the same pool from inside it
could use up every worker and deadlock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_PREFIX = "lakevilla-io"
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()
WORKERS = int(os.environ.get("LAKEVILLA_IO_THREADS", "32"))


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=_PREFIX)
        return _pool


def in_pool() -> bool:
    return threading.current_thread().name.startswith(_PREFIX)


def pmap(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(x) for x in items]``, in parallel when that is safe and useful. Returns, or raises
    the first error (a process death before any other), only once every call has ended: a
    caller that undoes after an error must not race a call still writing (a table's redo
    beside another table's abort would leave its new files behind)."""
    items = list(items)
    if len(items) <= 1 or in_pool():
        return [fn(x) for x in items]
    pool = _get_pool()
    futures = [pool.submit(fn, x) for x in items]
    wait_futures(futures)
    failed = [e for f in futures if (e := f.exception()) is not None]
    if failed:
        raise next((e for e in failed if not isinstance(e, Exception)), failed[0])
    return [f.result() for f in futures]


def submit(fn: Callable[[], R]) -> Future:
    """``fn()`` in the pool, to overlap one request with other work (inline inside the pool)."""
    if in_pool():
        f: Future = Future()
        try:
            f.set_result(fn())
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits on it
            f.set_exception(e)
        return f
    return _get_pool().submit(fn)


def together(*calls: Callable[[], object]) -> None:
    """Run independent requests at once (the last on this thread, the others in the pool: a
    thread each per commit attempt cost the CPU that contended commits need); once all ended,
    the first error is raised (a process death, which the fault tests model as a
    BaseException, before any other)."""
    futures = [submit(fn) for fn in calls[:-1]]
    try:
        calls[-1]()
    finally:
        wait_futures(futures)
    failed = [e for f in futures if (e := f.exception()) is not None]
    if failed:
        raise next((e for e in failed if not isinstance(e, Exception)), failed[0])


class Executor:
    """Adapter for code that expects an executor with ``map`` (the log and the engine)."""

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        return pmap(fn, items)


SHARED = Executor()
