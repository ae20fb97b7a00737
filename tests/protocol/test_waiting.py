"""A writer waits for every running marker below its commit: the ordering all features rest on.

An optimistic R writer holds no marker; its commit goes above every version it knows of, so
every running marker there precedes it. While it waits for one predecessor, the log can grow
past what its wait looked at (the predecessor's commit, found by the probe that ends the wait,
lies above a marker claimed meanwhile). Committing on without looking again would put its
commit above a running marker it never waited for: that transaction, deciding after it had
validated, would publish over the commit (a lost update and a row twice)."""

from __future__ import annotations

import threading
import time

import pyarrow as pa

import lakevilla as lv
from tests.helpers import HookStore, claim_now, held_at_its_record

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])


def _until(cond, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.005)


def test_an_optimistic_writer_waits_for_a_marker_claimed_while_it_waited(local_backend):
    setup = local_backend.lake()
    for t in ("t", "u"):
        setup.create_table(t, T)
        with setup.transaction("") as txn:
            txn.insert(t, {"id": [1, 2, 3, 4], "value": [0, 0, 0, 0]})
    # P holds a marker on t; U (R, optimistic: no marker) waits for it. P's marker stays running
    # after its commit (its close fails): U learns that P is done from P's commit in the log
    no_close = lv.store.FaultInjectingStore(local_backend.store(), lv.store.FaultPlan(
        fail_before=set(range(1, 50)), kinds=("put_if_match",),
        predicate=lambda kind, key: "_delta_log/" in key))
    p = local_backend.lake(store=no_close, marker_ttl=60.0).begin("R")
    p.update("t", set={"value": "value + 1"}, where="id = 1")
    claim_now(p, "t")
    # holds U's reads of the log between two rounds
    paused, go = threading.Event(), threading.Event()

    def hold_u() -> None:
        if paused.is_set():
            go.wait(60)

    u_store = HookStore(local_backend.store(),
                        lambda kind, key: kind == "get" and "t/_delta_log/" in key, hold_u,
                        repeat=True)
    u = local_backend.lake(store=u_store, marker_ttl=60.0, wait_timeout=60.0).begin("R")
    u.update("t", set={"value": "value + 10"}, where="id = 2")
    errors: list[BaseException] = []

    def run(txn) -> None:
        try:
            txn.commit()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    u_thread = threading.Thread(target=run, args=(u,))
    u_thread.start()
    _until(lambda: u.stats["wait_rounds"] >= 1, "U waits for P")
    paused.set()  # U's next look at the log sees T's marker and P's commit at once
    # T (R,CT) claims its markers above P's, waits for P, validates, and stops at its decision
    held, at_decision, release = held_at_its_record(local_backend.store())
    t_lake = local_backend.lake(store=held, marker_ttl=60.0)
    t = t_lake.begin("R,CT")
    t.update("t", set={"value": "value + 100"}, where="id = 2")
    t.update("u", set={"value": "value + 1"}, where="id = 1")
    t_thread = threading.Thread(target=run, args=(t,))
    t_thread.start()
    _until(lambda: t.tables["t"].marker is not None, "T claims its markers")
    p.commit()  # P's commit lies above T's marker
    assert at_decision.wait(60), "T never reached its decision"
    paused.clear()
    go.set()
    rounds = u.stats["wait_rounds"]
    _until(lambda: not u_thread.is_alive() or u.stats["wait_rounds"] >= rounds + 3,
           "U commits or waits on")
    assert u_thread.is_alive(), "U committed above T's running marker, without waiting for T"
    release.set()
    t_thread.join(60)
    u_thread.join(60)
    assert errors == []
    assert t.stats["conflicts_after_decision"] == 0  # nobody committed past T's marker meanwhile
    assert u.stats["redos"] >= 1  # U validated against T's commit and redid its update
    got = {r["id"]: r["value"] for r in setup.read("t").to_pylist()}
    assert got == {1: 1, 2: 110, 3: 0, 4: 0}
    assert sorted(r["id"] for r in local_backend.delta_rows("t")) == [1, 2, 3, 4]  # no row twice
