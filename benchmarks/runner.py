"""Running benchmark clients side by side: spawned processes or threads.

Every benchmark that measures concurrent clients runs them through ``Workers``: each job is
one client (or a batch of clients a worker runs as threads), all jobs start together, and the
parent may act in between (e.g. reset a request counter) once every job is set up. Processes
are spawned, never forked: delta-rs does not survive ``fork``. A pool's processes keep what
they cached between runs, so a benchmark gives each system compared its own pool.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

Tick = Callable[[int], None]  # progress: n operations done
# (job, gate, tick) -> result; module-level for processes
JobFn = Callable[[Any, "Gate", Tick], Any]


class RunFailed(Exception):
    """A run did not finish: a job failed, never became ready, or the run timed out."""


class Gate:
    """Where a job waits, once it is set up, for every other job and the parent."""

    def __init__(self, ready: Any, go: Any, timeout: float) -> None:
        self.ready, self.go, self.timeout = ready, go, timeout

    def __call__(self) -> None:
        self.ready.wait(self.timeout)
        self.go.wait(self.timeout)

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self.ready.abort()
        with contextlib.suppress(Exception):
            self.go.abort()


_TICKS: Any = None  # a spawned worker's progress queue


def _init_process(ticks: Any) -> None:
    global _TICKS
    _TICKS = ticks


def _in_process(fn: JobFn, job: Any, gate: Gate) -> Any:
    return fn(job, gate, _TICKS.put)


class Workers:
    """Up to ``size`` jobs at once, in spawned processes (``processes=True``) or threads."""

    def __init__(self, size: int, processes: bool = True) -> None:
        self.size, self.processes = size, processes
        self._pool: Any = None
        self._manager: Any = None
        self._ticks: Any = None

    def _start(self) -> None:
        if self._pool is None:
            ctx = mp.get_context("spawn")
            self._manager = self._manager or ctx.Manager()
            self._ticks = self._manager.Queue()
            self._pool = ctx.Pool(self.size, initializer=_init_process, initargs=(self._ticks,))

    def run(self, fn: JobFn, jobs: list[Any], tick: Tick, timeout: float,
            on_ready: Callable[[], None] = lambda: None) -> list[Any]:
        """Each job's result, in order. ``on_ready`` runs once every job is set up and before
        any starts. Raises ``RunFailed`` (and kills the processes) if a job raised, or the
        jobs did not all get ready or finish within ``timeout``."""
        if not jobs:
            return []
        if len(jobs) > self.size:
            raise ValueError(f"{len(jobs)} jobs for {self.size} workers: they would wait for "
                             "each other forever")
        if self.processes:
            return self._run_processes(fn, jobs, tick, timeout, on_ready)
        return self._run_threads(fn, jobs, tick, timeout, on_ready)

    def _run_processes(self, fn: JobFn, jobs: list[Any], tick: Tick, timeout: float,
                       on_ready: Callable[[], None]) -> list[Any]:
        self._start()
        n = len(jobs) + 1
        gate = Gate(self._manager.Barrier(n), self._manager.Barrier(n), timeout)
        pending = [self._pool.apply_async(_in_process, (fn, j, gate)) for j in jobs]

        def drain() -> None:
            with contextlib.suppress(queue.Empty, EOFError, OSError):
                while True:
                    tick(self._ticks.get_nowait())

        try:
            self._pass(gate, on_ready, lambda: any(p.ready() for p in pending))
            deadline = time.monotonic() + timeout
            while not all(p.ready() for p in pending):
                if time.monotonic() > deadline:
                    raise RunFailed(f"clients did not finish within {timeout:.0f}s")
                try:
                    tick(self._ticks.get(timeout=0.5))
                except queue.Empty:
                    pass
            drain()
            return [self._result(p.get) for p in pending]
        except RunFailed:
            self.kill()
            raise

    def _run_threads(self, fn: JobFn, jobs: list[Any], tick: Tick, timeout: float,
                     on_ready: Callable[[], None]) -> list[Any]:
        n = len(jobs) + 1
        gate = Gate(threading.Barrier(n), threading.Barrier(n), timeout)
        lock = threading.Lock()

        def safe_tick(k: int) -> None:
            with lock:
                tick(k)

        pool = ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="bench-client")
        futures = [pool.submit(fn, j, gate, safe_tick) for j in jobs]
        try:
            self._pass(gate, on_ready, lambda: any(f.done() for f in futures))
            deadline = time.monotonic() + timeout
            for f in futures:
                left = deadline - time.monotonic()
                with contextlib.suppress(Exception):
                    f.exception(timeout=max(left, 0.0))
                if not f.done():
                    raise RunFailed(f"clients did not finish within {timeout:.0f}s")
            return [self._result(f.result) for f in futures]
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def _pass(gate: Gate, on_ready: Callable[[], None], any_done: Callable[[], bool]) -> None:
        """The parent's side of the gate; a job that ends before it (it failed while setting
        up) breaks the gate at once instead of after the timeout."""
        passed = threading.Event()

        def watch() -> None:
            while not passed.wait(0.2):
                if any_done():
                    gate.abort()
                    return

        threading.Thread(target=watch, daemon=True).start()
        try:
            gate.ready.wait(gate.timeout)
            on_ready()
            gate.go.wait(gate.timeout)
        except threading.BrokenBarrierError as e:
            raise RunFailed("a client never became ready (its setup failed, hung or died)") from e
        finally:
            passed.set()

    @staticmethod
    def _result(get: Callable[[], Any]) -> Any:
        try:
            return get()
        except Exception as e:  # noqa: BLE001 - a job's own failure: the run failed
            raise RunFailed(f"{type(e).__name__}: {e}") from e

    def kill(self) -> None:
        """Stop the processes now (a hung or failed run); the next run starts fresh ones."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None
        if self._manager is not None:
            self._manager.shutdown()
            self._manager = None
