"""Test helpers: store hooks, crash-point enumeration."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from lakevilla.store import (
    FaultInjectingStore,
    FaultPlan,
    ObjectStore,
    SimulatedCrash,
    StoreWrapper,
)


class HalfPublished(StoreWrapper):
    """Holds a transaction's table commit to ``second`` until its commit to ``first`` has
    landed, then runs ``during()``: the transaction is decided and half published (``second``
    may be a table it creates: its version 0 is held the same way). Armed
    by setting ``armed`` (marker claims and other writes pass untouched)."""

    def __init__(self, inner: ObjectStore, first: str, second: str,
                 during: Callable[[], None]) -> None:
        super().__init__(inner)
        self.first, self.second, self.during = first, second, during
        self.first_done = threading.Event()
        self.armed = False
        self.fired = 0

    def _gate(self, key, data, write):
        is_commit = self.armed and (b'"kind":"commit"' in data or b'"kind":"create"' in data)
        if is_commit and key.startswith(self.second + "/_delta_log/") and not self.fired:
            assert self.first_done.wait(60)
            self.fired += 1
            self.during()
        out = write()
        if is_commit and key.startswith(self.first + "/_delta_log/"):
            self.first_done.set()
        return out

    def put_if_absent(self, key, data):
        return self._gate(key, data, lambda: self.inner.put_if_absent(key, data))

    def put_if_match(self, key, data, etag):  # an in-place commit fills its marker
        return self._gate(key, data, lambda: self.inner.put_if_match(key, data, etag))


class HookStore(StoreWrapper):
    """Runs ``hook(kind, key)`` before matching calls (once per match unless ``repeat``).

    Used to make another client act at an exact point of this client's protocol,
    deterministically, instead of hoping a sleep lines the two up.
    """

    def __init__(self, inner: ObjectStore, when: Callable[[str, str], bool],
                 hook: Callable[[], None], repeat: bool = False) -> None:
        super().__init__(inner)
        self.when, self.hook, self.repeat, self.fired = when, hook, repeat, 0

    def _maybe(self, kind: str, key: str) -> None:
        if (self.repeat or not self.fired) and self.when(kind, key):
            self.fired += 1
            self.hook()

    def put_if_absent(self, key, data):
        self._maybe("put_if_absent", key)
        return self.inner.put_if_absent(key, data)

    def put_if_match(self, key, data, etag):
        self._maybe("put_if_match", key)
        return self.inner.put_if_match(key, data, etag)

    def put(self, key, data):
        self._maybe("put", key)
        return self.inner.put(key, data)

    def get(self, key):
        self._maybe("get", key)
        return self.inner.get(key)


def holds_marker(lake, table: str, txn) -> bool:
    """Whether transaction ``txn`` has claimed a marker in ``table`` (in any state)."""
    from lakevilla.markers.marker import marker_of

    log = lake._client.log(table)
    return any((m := marker_of(c)) is not None and m.txn == txn.id
               for _, c in log.commits_between(-1, log.latest_version()))


def held_at_its_record(inner: ObjectStore) -> tuple[HookStore, threading.Event, threading.Event]:
    """A store whose client stops at its transaction record's put-if-absent (its multi-table
    decision) until ``release`` is set; ``at_decision`` is set when it gets there."""
    at_decision, release = threading.Event(), threading.Event()

    def hold() -> None:
        at_decision.set()
        release.wait(60)

    def record_put(kind: str, key: str) -> bool:  # a transaction record, not a sublog entry
        return (kind == "put_if_absent" and key.startswith("_lakevilla/txns/")
                and key.count("/") == 2)

    return HookStore(inner, record_put, hold), at_decision, release


def claim_now(txn, table: str) -> None:
    """Have LV[R] transaction ``txn`` hold a marker on ``table`` from now on, as it does once it
    queues (after ``QUEUE_AFTER_CONFLICTS`` races lost to conflicting commits, or its retry
    budget); in place it claimed at its first write.
    For tests of what a marker held while statements run does to others."""
    tw = txn.tables[table]
    if tw.marker is None:
        txn._parts.markers.claim_first(tw)


def entries_landed(*txns) -> None:
    """Wait until the sublog entries of these transactions have landed: R at the tail writes a
    statement's entry behind it, on a thread of its own (a client that died meanwhile would have
    left a prefix of them)."""
    for txn in txns:
        txn._parts.journal.settle()


def claim_when(store: ObjectStore, table: str, cond: Callable[[], bool],
               timeout: float = 30.0) -> HookStore:
    """``store``, whose first marker claim (put-if-absent) in ``table`` waits until ``cond()``.
    CT and I claim their markers at commit, all at once: this lines up two commits' claims."""
    def wait() -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, f"the claim in {table} waited {timeout}s in vain"
            time.sleep(0.005)  # polling the condition we wait for

    return HookStore(store,
                     lambda kind, key: (kind == "put_if_absent"
                                        and key.startswith(f"{table}/_delta_log/")),
                     wait)


def count_calls(base: ObjectStore, make_lake: Callable[[ObjectStore], object],
                action: Callable[[object], None],
                kinds: tuple[str, ...] | None = None) -> int:
    """How many store calls ``action`` makes on a fault-free run."""
    probe = FaultInjectingStore(base, FaultPlan(kinds=kinds))
    lake = make_lake(probe)
    action(lake)
    lake.flush()
    return probe.calls


# (single-table sweep, multi-table sweep) strides per store: odd, so that crashes before and
# after a call alternate; GCS, the smaller sample, about half as many points
CRASH_STRIDES = {"s3": (9, 17), "azure": (9, 17), "gcs": (19, 35)}


def crash_stride(backend, tables: str = "several") -> int:
    """Every crash point on the local store; through moto and Azurite every 17th for the
    multi-table sweeps (CT, I) and every ninth for single-table ones; on GCS about half as many
    points. The faults are injected by the same wrapper above any backend, so the protocol is
    checked at every point locally (and the mutation check runs the local sweeps); the cloud
    runs re-check the backend (its etags, its errors, its listing) on a sample of about half a
    dozen points. An odd stride alternates
    crashes before and after a call; the first point and the crash after the last call are
    always taken. Each sampled point costs a fresh lake and a recovery through moto (~0.5 s,
    and moto's CPU)."""
    if backend.kind == "local":
        return 1
    one, several = CRASH_STRIDES[backend.kind]
    return one if tables == "one" else several


def clients_of(backend):
    """What a test's concurrent clients run in (``Process``, ``Queue``, ``Event``, ``Barrier``):
    spawned processes on the local store, whose atomic creates must hold across processes;
    threads of this process through moto, each with its own ``Lake`` and connections, since
    the emulator decides every race there and a spawned client costs ~2 CPU s of imports."""
    from benchmarks.common import clients_kind

    return clients_kind("processes" if backend.kind == "local" else "threads")


def crash_plans(n_calls: int, kinds: tuple[str, ...] | None = None, every: int = 1):
    """(label, plan) for a crash before and after each of ``n_calls`` calls (every
    ``every``-th of that sequence, and always the crash after the last call)."""
    i = 0
    for n in range(1, n_calls + 1):
        for label, plan in ((f"crash before call {n}", FaultPlan(crash_before=n, kinds=kinds)),
                            (f"crash after call {n}", FaultPlan(crash_after=n, kinds=kinds))):
            if i % every == 0 or (n == n_calls and plan.crash_after == n):
                yield label, plan
            i += 1


def run_crashing(base: ObjectStore, plan: FaultPlan, make_lake, action) -> bool:
    """Run ``action`` on a lake whose store dies as ``plan`` says; True if it died."""
    store = FaultInjectingStore(base, plan)
    lake = make_lake(store)
    crashed = False
    try:
        action(lake)
    except SimulatedCrash:
        crashed = True
    try:
        lake.close()
    except BaseException:  # noqa: BLE001 - a dead client's clean-up may die too
        pass
    return crashed


class CrashSweep:
    """Crash points before and after call 1, 2, ... until a run finishes without crashing.

    Adaptive, so it covers every call of the action even when runs make different numbers
    of calls (global state that grows between runs, parallel requests in a different order).
    """

    def __init__(self, max_calls: int = 2000, every: int = 1) -> None:
        self.max_calls = max_calls
        self.every = every
        self.finished = False
        self.runs = 0

    def __iter__(self):
        n, i = 1, 0
        while not self.finished and n <= self.max_calls:
            for label, plan in ((f"crash before call {n}", FaultPlan(crash_before=n)),
                                (f"crash after call {n}", FaultPlan(crash_after=n))):
                if self.finished:
                    return
                if i % self.every == 0:
                    self.runs += 1
                    yield label, plan
                i += 1
            n += 1

    def record(self, crashed: bool) -> None:
        if not crashed:
            self.finished = True


class ConnectGate:
    """A loopback port where connecting times out until ``open()``, then a relay to ``target``.

    Its listening socket has a backlog of one, filled by a connection of our own, so the
    kernel drops every further SYN: clients see a real connect timeout, nothing simulated.
    ``open()`` drains the backlog and starts relaying bytes to ``target`` (an ``http://``
    URL on loopback)."""

    def __init__(self, target: str) -> None:
        import socket
        import threading
        from urllib.parse import urlparse

        u = urlparse(target)
        self._target = (u.hostname, u.port)
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(0)
        port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self._filler = socket.create_connection(("127.0.0.1", port))
        self._opened = threading.Event()
        self._conns: list = [self._filler]
        threading.Thread(target=self._serve, daemon=True).start()

    def open(self) -> None:
        self._opened.set()

    def _serve(self) -> None:
        import socket
        import threading

        self._opened.wait()
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            up = socket.create_connection(self._target)
            self._conns += [conn, up]
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(2)
            except OSError:
                pass

    def close(self) -> None:
        self._sock.close()
        for c in self._conns:
            try:
                c.close()
            except OSError:
                pass


def r_transaction_on(steps: list[Callable], holder: dict,
                     queued: bool = False) -> Callable[[str], Callable]:
    """A crash-sweep action: one R transaction running ``steps`` on a table, its id kept in
    ``holder`` so that the sweep can resume it; ``queued``: it claims its marker before its
    commit (``claim_now``)."""
    def action_on(name: str) -> Callable:
        def action(lake) -> None:
            txn = lake.begin("R")
            holder["id"] = txn.id
            for step in steps:
                step(txn, name)
            if queued:
                claim_now(txn, name)
            txn.commit()
        return action
    return action_on


def sweep_crashes_recover_resume(backend, steps: list[Callable], setup: Callable[[str], None],
                                 canon: Callable[[list[dict]], list[dict]], *, every: int = 1,
                                 later: Callable[[], float],
                                 ) -> tuple[list[dict], list[dict], dict[str, int]]:
    """``steps`` as one R transaction, crashed at every ``every``-th store call (each on a fresh
    table ``setup`` makes identical): after ``recover()`` lakevilla and delta-rs read the table
    entirely before or entirely after it, and an uncommitted one is resumed from its sublogs and
    finished. Returns (rows before, rows after, outcomes counted). Each statement's sublog entry
    lands before the next statement runs (at the tail it goes out behind it, on its own thread),
    so that the n-th store call is the same one in every run and a sample of the crash points
    (``every``) always holds some between the entries and the commit."""
    import lakevilla as lv

    base = backend.store()
    holder: dict = {}

    def settled(step: Callable) -> Callable:
        def run(txn, name: str) -> None:
            step(txn, name)
            entries_landed(txn)
        return run

    action_on = r_transaction_on([settled(s) for s in steps], holder)

    def make(store):
        return backend.lake(store=store, marker_ttl=5.0)

    setup("probe")
    before = canon(backend.lake().read("probe").to_pylist())
    n = count_calls(base, make, action_on("probe"))
    after = canon(backend.lake().read("probe").to_pylist())
    seen = {"committed": 0, "resumed": 0, "re-run": 0}
    for i, (label, plan) in enumerate(crash_plans(n, every=every)):
        name = f"t{i}"
        setup(name)
        run_crashing(base, plan, make, action_on(name))
        recoverer = backend.lake(marker_ttl=5.0, clock=later)
        recoverer.recover(tables=[name])
        got = canon(recoverer.read(name).to_pylist())
        assert got == canon(backend.delta_rows(name)), label
        assert got in (before, after), f"{label}: partial state {got}"
        if got == after:
            seen["committed"] += 1
            continue
        try:
            resumed = backend.lake(marker_ttl=5.0).resume(holder["id"])
        except lv.LakeVillaError as e:
            assert "no sublogs" in str(e), label  # died before its first sublog: re-run instead
            seen["re-run"] += 1
            continue
        # the client issues what the sublogs do not hold
        for step in steps[len(resumed.operations):]:
            step(resumed, name)
        resumed.commit()
        assert (canon(recoverer.read(name).to_pylist()) == after
                == canon(backend.delta_rows(name))), label
        seen["resumed"] += 1
    return before, after, seen


def open_markers(lake, table: str) -> list[int]:
    """Versions of ``table`` holding a running marker, once the background work of every client
    in this process ended (a one-table commit closes its marker there, after ``commit()``)."""
    from lakevilla.markers.marker import RUNNING, marker_of

    type(lake).flush_all()  # any client of this process may still be closing its marker
    log = lake._client.log(table)
    # the log caches a tail marker as final (its content never changes, its state does): re-read
    return [v for v, c in log.commits_between(-1, log.latest_version())
            if (m := marker_of(c)) and m.state == RUNNING
            and (m := marker_of(log.read_commit_raw(v)[0])) and m.state == RUNNING]


# -- two small accounts tables and a client that dies at a chosen write ---------------------------

def clock_at(offset: float) -> Callable[[], float]:
    """A clock ``offset`` seconds ahead of the real one (a client that sees markers expire)."""
    return lambda: time.time() + offset


def numbered_table(backend, name: str = "t", n: int = 4, **kw):
    """A lake with table ``name`` ``(id, value)``: ids 1..n, each with value 10 * id, in one
    file."""
    import pyarrow as pa

    lake = backend.lake(**kw)
    lake.create_table(name, pa.schema([("id", pa.int64()), ("value", pa.int64())]))
    with lake.transaction(features="") as txn:
        txn.insert(name, {"id": list(range(1, n + 1)), "value": [10 * i for i in range(1, n + 1)]})
    return lake


def two_files(backend):
    """Table t in two files: ids 1-4 in one, 5-8 in the other (statistics tell them apart)."""
    lake = numbered_table(backend)
    with lake.transaction(features="") as txn:
        txn.insert("t", {"id": [5, 6, 7, 8], "value": [50, 60, 70, 80]})
    return lake


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 30.0,
               extra: Callable | None = None) -> None:
    """Poll ``cond`` (another thread's progress) until it holds; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, (
            f"timed out waiting for {what}: {extra() if extra else ''}")
        time.sleep(0.01)


def accounts(backend, tables=("a", "b"), **kw):
    """A lake with a table ``(id, value)`` holding ids 1 and 2 at value 0 for each of ``tables``."""
    import pyarrow as pa

    lake = backend.lake(**kw)
    for t in tables:
        lake.create_table(t, pa.schema([("id", pa.int64()), ("value", pa.int64())]))
        with lake.transaction("") as txn:
            txn.insert(t, {"id": [1, 2], "value": [0, 0]})
    return lake


def value_of(lake, table: str, id_: int = 1):
    """The ``value`` of row ``id_`` as ``lake`` (or a transaction) reads it."""
    return lake.read(table, where=f"id = {id_}").column("value")[0].as_py()


def dying_lake(backend, key_prefix: str, *, after: bool, marker_ttl: float = 5.0):
    """A client whose store dies at its first put-if-absent under ``key_prefix``, before the
    put or once it was applied (``after``)."""
    plan = FaultPlan(kinds=("put_if_absent",), predicate=lambda k, key: key.startswith(key_prefix),
                     **({"crash_after": 1} if after else {"crash_before": 1}))
    return backend.lake(store=FaultInjectingStore(backend.store(), plan), marker_ttl=marker_ttl)


def crash_two_table_commit(lake, features: str):
    """A transfer of 5 from ``a`` to ``b`` (row 1) whose commit dies (``lake`` is a dying one)."""
    import pytest

    txn = lake.begin(features)
    txn.update("a", set={"value": "value - 5"}, where="id = 1")
    txn.update("b", set={"value": "value + 5"}, where="id = 1")
    with pytest.raises(SimulatedCrash):
        txn.commit()
    return txn


def join_global_log(backend, tables=("a", "b")) -> None:
    """An I read of ``tables``: they join the global log, so the next I commit's entry is its
    decision."""
    with backend.lake().transaction("I") as r:
        for t in tables:
            r.read(t)


class RideGates:
    """Lines up a group commit: the leader takes the lead of the version only once every rider's
    request is there, and each rider tries the lead only once the leader holds it (so the
    riders ride). A side that ends, however (returned, aborted, died), opens its gates: a fault
    anywhere never leaves the other waiting. ``timeout`` bounds every wait all the same."""

    def __init__(self, riders: int = 1, timeout: float = 10.0) -> None:
        self.asked = threading.Semaphore(0)
        self.riders = riders
        self.led = threading.Event()
        self.timeout = timeout

    def store(self, inner: ObjectStore, role: str) -> ObjectStore:
        gates = self

        class Gated(StoreWrapper):
            def put_if_absent(self, key, data):
                if not key.endswith("/lead.json"):
                    return self.inner.put_if_absent(key, data)
                if role == "rider":
                    gates.asked.release()
                    gates.led.wait(gates.timeout)
                    return self.inner.put_if_absent(key, data)
                for _ in range(gates.riders):
                    gates.asked.acquire(timeout=gates.timeout)
                try:
                    return self.inner.put_if_absent(key, data)
                finally:
                    gates.led.set()

        return Gated(inner)

    def ended(self, role: str) -> None:
        if role == "leader":
            self.led.set()
        else:
            self.asked.release()


def crowd_on(lake, table: str) -> None:
    """Make ``lake``'s client take ``table`` for crowded (as after two lost races there): its
    one-table commits there lead or ride (``core/contention.py``)."""
    from lakevilla.core.contention import CROWD

    for _ in range(CROWD):
        lake._client.contention.met(table)


def run_group(lakes: dict[str, object], gates: RideGates, table: str,
              work: dict[str, Callable]) -> dict[str, object]:
    """Each of ``lakes`` (role -> lake: "leader", "rider", "rider2", ...) runs its transaction
    (``work[role](txn)`` under R) on its own thread and commits; returns role -> the
    ``CommitResult``, or the exception it ended with (a ``SimulatedCrash`` too)."""
    out: dict[str, object] = {}

    def one(role: str) -> None:
        lake = lakes[role]
        kind = "leader" if role == "leader" else "rider"
        try:
            txn = lake.begin("R")
            out[role + ".txn"] = txn
            work[role](txn)
            entries_landed(txn)
            out[role] = txn.commit()
        except BaseException as e:  # noqa: BLE001 - the outcome under test
            out[role] = e
        finally:
            gates.ended(kind)
            try:
                lake.close()
            except BaseException:  # noqa: BLE001 - a dead client's clean-up may die too
                pass
    for lake in lakes.values():
        crowd_on(lake, table)
    threads = [threading.Thread(target=one, args=(role,)) for role in lakes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a group commit's client hung"
    return out
