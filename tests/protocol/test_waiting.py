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
import pytest

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


# -- a transaction nested in another on the same thread ---------------------------------------

def _data_files(backend, table: str) -> set[str]:
    return {k for k in backend.all_keys() if k.startswith(f"{table}/") and k.endswith(".parquet")}


def test_a_transaction_nested_in_one_holding_its_table_in_place_fails_at_once(local_backend):
    """In place, the outer transaction's first write claims a marker; an inner one on the same
    thread that writes the table would wait for it, and the outer cannot finish while the
    thread waits. It fails at once (not at the wait timeout), writes nothing, and the outer goes
    on; lake.run does not re-run it (it would wait again)."""
    lake = local_backend.lake(commit_mode="in_place", wait_timeout=60.0)
    lake.create_table("t", T)
    before = _data_files(local_backend, "t")
    for features in ("R", "R,CT"):
        t0 = time.monotonic()
        with lake.transaction("R") as outer:
            outer.insert("t", {"id": [1], "value": [1]})
            held = f"'t' \\(version {outer.tables['t'].marker.version}\\)"
            with pytest.raises(lv.SelfWaitError, match=f"{held}.*open further up this thread"):
                with lake.transaction(features) as inner:
                    inner.insert("t", {"id": [2], "value": [2]})
            assert inner.state == "aborted"
            calls: list[int] = []

            def nested(txn, calls=calls) -> None:
                calls.append(1)
                txn.insert("t", {"id": [3], "value": [3]})

            with pytest.raises(lv.SelfWaitError):
                lake.run(nested, features, retries=3)
            assert calls == [1]
        assert time.monotonic() - t0 < 20  # not the 60-s wait timeout
        assert sorted(lake.read("t").column("id").to_pylist()) == [1] * (
            1 if features == "R" else 2)
    lake.flush()
    committed = {f"t/{p}" for p in lake.snapshot("t").files}
    assert _data_files(local_backend, "t") - before == committed  # the inner ones' files are gone


def test_a_nested_transaction_at_the_tail_commits_and_one_on_another_thread_still_waits(
        local_backend):
    """At the tail a running transaction holds no marker: the nested one commits (the default
    mode). In place, a transaction of another thread waits for the outer one's marker as any
    follower does, and commits after it."""
    tail = local_backend.lake()
    tail.create_table("t", T)
    with tail.transaction("R") as outer:
        outer.insert("t", {"id": [1], "value": [1]})
        with tail.transaction("R") as inner:
            inner.insert("t", {"id": [2], "value": [2]})
    assert sorted(tail.read("t").column("id").to_pylist()) == [1, 2]
    lake = local_backend.lake(commit_mode="in_place", wait_timeout=60.0)
    outer = lake.begin("R")
    with outer:
        outer.insert("t", {"id": [3], "value": [3]})
        other = lake.begin("R")
        other.insert("t", {"id": [4], "value": [4]})
        done: list[BaseException | lv.CommitResult] = []

        def commit_other() -> None:
            try:
                done.append(other.commit())
            except BaseException as e:  # noqa: BLE001 - reported below
                done.append(e)

        th = threading.Thread(target=commit_other)
        th.start()
        _until(lambda: other.stats["wait_rounds"] > 0 or done, "the other thread waits")
        assert not done  # it waits for the outer transaction, which is alive on this thread
    th.join(60)
    assert isinstance(done[0], lv.CommitResult), done
    assert sorted(lake.read("t").column("id").to_pylist()) == [1, 2, 3, 4]
