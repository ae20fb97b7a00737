"""A CT transaction that writes one table commits at the tail as R does: optimistically, with a
marker only to queue. Its marker would order it behind every running writer of the table (it may
not be overtaken: it names the record as its decision), conflicting or not, and nobody can wait
for a transaction that holds no marker, so it cannot close a cycle while it races."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

import lakevilla as lv
from tests.helpers import HookStore, held_at_its_record, wait_until

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])


def _table(backend, *names: str) -> lv.Lake:
    lake = backend.lake()
    for t in names:
        lake.create_table(t, T)
        with lake.transaction("") as txn:  # rows 1 and 2, each in a file of its own
            txn.insert(t, {"id": [1], "value": [0]})
        with lake.transaction("") as txn:
            txn.insert(t, {"id": [2], "value": [0]})
    return lake


def _log_versions(lake: lv.Lake, table: str) -> int:
    return lake.snapshot(table).version


def test_a_one_table_ct_commit_at_the_tail_takes_one_log_version_and_no_marker(local_backend):
    lake = _table(local_backend, "t", "u")
    before = _log_versions(lake, "t")
    with lake.transaction("R,CT") as one:
        one.update("t", set={"value": "value + 1"}, where="id = 1")
    assert _log_versions(lake, "t") == before + 1
    assert one.stats["markers"] == 0
    # two tables: markers order it and a record decides, as before
    with lake.transaction("R,CT") as two:
        two.update("t", set={"value": "value + 1"}, where="id = 2")
        two.update("u", set={"value": "value + 1"}, where="id = 1")
    assert two.stats["markers"] == 2
    assert _log_versions(lake, "t") == before + 3


def test_a_one_table_ct_commit_does_not_queue_behind_a_writer_it_cannot_conflict_with(
        local_backend):
    """A (CT, row 1) is held at its commit's put; B (CT, row 2, another file) commits meanwhile.
    Had A claimed a marker, B would wait for it (a CT marker is never overtaken) until its own
    wait timed out. A then loses the race, validates against B's commit, finds no conflict and
    commits above it."""
    lake = _table(local_backend, "t")
    at_put, release = threading.Event(), threading.Event()
    armed = threading.Event()

    def hold() -> None:
        at_put.set()
        release.wait(60)

    held = HookStore(local_backend.store(),
                     lambda kind, key: (armed.is_set() and kind == "put_if_absent"
                                        and key.startswith("t/_delta_log/")), hold)
    a = local_backend.lake(store=held).begin("R,CT")
    a.update("t", set={"value": "value + 1"}, where="id = 1")
    errors: list[BaseException] = []

    def commit_a() -> None:
        try:
            a.commit()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    armed.set()
    a_thread = threading.Thread(target=commit_a)
    a_thread.start()
    try:
        assert at_put.wait(60), "A never reached its commit"
        b = local_backend.lake(wait_timeout=5.0).begin("R,CT")
        b.update("t", set={"value": "value + 10"}, where="id = 2")
        b_version = b.commit().versions["t"]
    finally:
        release.set()
        a_thread.join(60)
    assert errors == []
    assert a.stats["retries"] == 1 and a.stats["redos"] == 0  # lost the race, nothing to redo
    assert a.stats["markers"] == 0 and b.stats["wait_rounds"] == 0
    assert a.result.versions["t"] > b_version
    got = sorted((r["id"], r["value"]) for r in lake.read("t").to_pylist())
    assert got == [(1, 1), (2, 10)]  # each row once: neither commit left a stale copy behind


@pytest.mark.parametrize("features", ["R,CT", "CT"])
def test_a_one_table_ct_commit_waiting_without_a_marker_never_shifts(local_backend, features):
    """Behind a two-table transaction stopped at its decision, a one-table CT commit holds no
    marker: nobody waits for it, so there is no cycle to break and no marker a shift could move.
    It waits as R does and aborts at its wait timeout, not after ``max_shifts`` shifts."""
    lake = _table(local_backend, "t", "u")
    held, at_decision, release = held_at_its_record(local_backend.store())
    p = local_backend.lake(store=held, marker_ttl=60.0).begin("R,CT")
    p.update("t", set={"value": "value + 1"}, where="id = 1")
    p.update("u", set={"value": "value + 1"}, where="id = 1")
    p_thread = threading.Thread(target=p.commit)
    p_thread.start()
    try:
        assert at_decision.wait(60), "P never reached its decision"
        w = local_backend.lake(wait_timeout=1.5, shift_timeout=0.05).begin(features)
        w.update("t", set={"value": "value + 10"}, where="id = 2")
        with pytest.raises(lv.TransactionAborted) as e:
            w.commit()
        assert e.value.reason == "timeout"
        assert w.stats["shifts"] == 0 and w.stats["markers"] == 0
        wait_until(lambda: w.stats["wait_rounds"] > 0, "W waited")
    finally:
        release.set()
        p_thread.join(60)
    got = sorted((r["id"], r["value"]) for r in lake.read("t").to_pylist())
    assert got == [(1, 1), (2, 0)]
