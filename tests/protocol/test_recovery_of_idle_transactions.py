"""Transactions that hold no marker (R at the tail, R,CT before its commit) and stopped writing:
status shows them idle, with no heartbeat; ``recover()`` leaves them alone (nothing says their
clients died); ``recover(older_than=)`` settles them by the rules of expiry-driven recovery:
rolled back through their decision mechanism, rolled forward if found decided, never guessed.
The record it writes is final: ``resume`` refuses the transaction, and an owner that was alive
after all learns it before its deciding write."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import pytest

import lakevilla as lv
from lakevilla.complex_txn import record as records
from lakevilla.store import FaultInjectingStore, FaultPlan, SimulatedCrash
from tests.helpers import HookStore, accounts, clock_at, crowd_on, entries_landed

LATER = 120.0  # seconds: how long a client has been idle to a recovering one whose clock is ahead


def _write_then_hang(uri: str, features: str, ready) -> None:
    """A client that writes both tables, then waits to be killed (in a spawned process)."""
    lake = lv.Lake(uri)
    txn = lake.begin(features)
    txn.update("a", set={"value": "value - 5"}, where="id = 1")
    txn.update("b", set={"value": "value + 5"}, where="id = 1")
    entries_landed(txn)
    ready.put(txn.id)
    time.sleep(600)


def _data_files(backend) -> set[str]:
    return {k for k in backend.all_keys() if k.endswith(".parquet")}


@pytest.mark.parametrize("features", ["R", "R,CT"])
def test_a_killed_client_shows_idle_and_recover_older_than_rolls_it_back(local_backend,
                                                                         features):
    lake = accounts(local_backend)
    files_before = _data_files(local_backend)
    ctx = mp.get_context("spawn")
    ready = ctx.Queue()
    proc = ctx.Process(target=_write_then_hang, args=(local_backend.uri, features, ready))
    proc.start()
    try:
        txn_id = ready.get(timeout=120)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(60)
    assert _data_files(local_backend) > files_before  # its writes are on storage
    later = local_backend.lake(clock=clock_at(LATER))
    (t,) = later.status().transactions
    assert (t.txn, t.state, t.features, t.tables, t.statements) == (
        txn_id, "idle", features, ["a", "b"], 2)
    assert t.heartbeat is None and t.markers == {} and t.activity_age >= LATER
    assert lake.status().transactions[0].state == "running"  # idle only past idle_after (60 s)
    assert later.recover().acted == 0  # nothing says the client died: left alone
    assert later.status().transactions[0].state == "idle"
    with pytest.raises(lv.InvalidArgumentError, match="older_than=30s is shorter than 60s"):
        later.recover(older_than=30)

    report = later.recover(older_than=60)
    (row,) = report.idle_rolled_back
    assert (row["txn"], row["tables"], row["kept"], report.idle_rolled_forward) == (
        txn_id, ["a", "b"], [], [])
    assert report.acted == 1 and "1 idle transactions rolled back" in str(report)
    assert later.status().transactions == []
    (rec,) = records.of_txn(later.store, txn_id)
    assert rec.state == records.ABORTED and rec.final and "recover(older_than=60)" in rec.reason
    with pytest.raises(lv.TransactionStateError, match="was rolled back .*nothing to resume"):
        later.resume(txn_id)
    for table in ("a", "b"):  # nothing of it in any table, as delta-rs reads them too
        assert local_backend.delta_rows(table) == [{"id": 1, "value": 0}, {"id": 2, "value": 0}]
    assert later.recover(older_than=60).acted == 0  # settled once


@pytest.mark.parametrize("features", ["R", "R,CT"])
def test_an_owner_alive_after_all_learns_it_was_rolled_back_before_it_commits(local_backend,
                                                                               features):
    """The operator was wrong: the client only paused. Before its deciding write (R: the table
    commit; R,CT: the record) it finds the final record and aborts, and undoes its work, instead
    of committing a transaction recovery reported rolled back."""
    accounts(local_backend)
    files_before = _data_files(local_backend)
    now = [time.time()]
    owner = local_backend.lake(clock=lambda: now[0])
    txn = owner.begin(features)
    txn.update("a", set={"value": "value - 5"}, where="id = 1")
    txn.update("b", set={"value": "value + 5"}, where="id = 1")
    entries_landed(txn)
    report = local_backend.lake(clock=clock_at(LATER)).recover(older_than=60)
    assert [r["txn"] for r in report.idle_rolled_back] == [txn.id]
    now[0] += LATER  # the owner's clock too: it paused that long
    with pytest.raises(lv.TransactionAborted, match="rolled back while it was idle") as err:
        txn.commit()
    assert err.value.reason == "rolled-back" and txn.state == "aborted"
    owner.flush()
    for table in ("a", "b"):
        assert local_backend.delta_rows(table) == [{"id": 1, "value": 0}, {"id": 2, "value": 0}]
    assert _data_files(local_backend) == files_before  # its undo deleted what it wrote


def test_an_idle_transaction_found_decided_is_rolled_forward_not_back(local_backend):
    """Between recovery's look and its ABORTED record, the owner decided (its COMMITTING record
    landed, then it died before writing a table commit). The put-if-absent loses, and recovery
    rolls the decided transaction forward: never guessed from what it saw before."""
    accounts(local_backend)
    dies = FaultPlan(crash_after=1, kinds=("put_if_absent",),
                     predicate=lambda k, key: key.startswith("_lakevilla/txns/")
                     and key.count("/") == 2)
    owner = local_backend.lake(store=FaultInjectingStore(local_backend.store(), dies))
    txn = owner.begin("R,CT")
    txn.update("a", set={"value": "value - 5"}, where="id = 1")
    txn.update("b", set={"value": "value + 5"}, where="id = 1")
    entries_landed(txn)

    def owner_decides() -> None:
        with pytest.raises(SimulatedCrash):
            txn.commit()  # its record says COMMITTING; no table commit written

    record_key = f"_lakevilla/txns/{txn.attempt}.json"
    recovering = local_backend.lake(clock=clock_at(LATER), store=HookStore(
        local_backend.store(), lambda kind, key: kind == "put_if_absent" and key == record_key,
        owner_decides))
    report = recovering.recover(older_than=60)
    assert report.idle_rolled_back == [] and [r["txn"] for r in report.idle_rolled_forward] == [
        txn.id]
    assert local_backend.delta_rows("a") == [{"id": 1, "value": -5}, {"id": 2, "value": 0}]
    assert local_backend.delta_rows("b") == [{"id": 1, "value": 5}, {"id": 2, "value": 0}]
    assert records.read(recovering.store, txn.attempt).state == records.COMMITTED


def test_a_rider_alive_after_all_learns_it_was_rolled_back_before_its_request(local_backend):
    """In a crowd an R commit is decided by a ride request (whatever leader lists it may carry
    it), so the owner looks for an operator's rollback before writing one: it aborts and no
    request is left for a leader to carry."""
    accounts(local_backend)
    now = [time.time()]
    owner = local_backend.lake(clock=lambda: now[0])
    txn = owner.begin("R")
    txn.update("a", set={"value": "value - 5"}, where="id = 1")
    entries_landed(txn)
    report = local_backend.lake(clock=clock_at(LATER)).recover(older_than=60)
    assert [r["txn"] for r in report.idle_rolled_back] == [txn.id]
    now[0] += LATER
    crowd_on(owner, "a")  # lost races lately: this client rides on "a"
    with pytest.raises(lv.TransactionAborted, match="rolled back while it was idle") as err:
        txn.commit()
    assert err.value.reason == "rolled-back"
    assert list(local_backend.store().list("_lakevilla/rides/")) == []
    owner.flush()
    assert local_backend.delta_rows("a") == [{"id": 1, "value": 0}, {"id": 2, "value": 0}]
