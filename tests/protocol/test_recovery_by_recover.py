"""Recovery by ``recover()`` (and ``lakevilla recover``): what was decided is rolled forward,
whatever was left pending by the decider, without waiting for the owner's markers to expire
where the decision is on storage. The marker pass (an expired marker freed or closed) is in
test_markers.py and the crash sweeps; the CLI in test_maintenance.py."""

from __future__ import annotations

import pytest

import lakevilla as lv
from tests.conftest import rows
from tests.helpers import (
    accounts,
    clock_at,
    crash_two_table_commit,
    dying_lake,
    join_global_log,
    numbered_table,
    value_of,
)

TTL = 5.0
LATER = 10_000.0  # seconds: a recovering client whose clock is past every marker's expiry


def test_a_failure_after_the_decision_is_finished_by_recovery_not_undone(local_backend):
    """CT decided COMMITTING, then writing a table commit failed (not a crash): nothing may be
    deleted, the caller learns it is committed-but-pending, and recovery finishes it."""
    from lakevilla.store import FaultInjectingStore, FaultPlan
    from lakevilla.store.base import StorageError

    lake = numbered_table(local_backend, name="a", n=1)
    numbered_table(local_backend, name="b", n=1)
    failing = local_backend.lake(store=FaultInjectingStore(local_backend.store(), FaultPlan(
        transient_rate=1.0, kinds=("put_if_absent",),
        predicate=lambda k, key: key.startswith("b/_delta_log/") and not key.endswith("2.json"))),
        marker_ttl=TTL)
    txn = failing.begin("R,CT")
    txn.update("a", set={"value": "value + 1"}, where="id = 1")
    txn.update("b", set={"value": "value + 1"}, where="id = 1")
    with pytest.raises(lv.CommitPendingError) as info:
        txn.commit()
    assert isinstance(info.value.__cause__, StorageError)
    failing.flush()
    report = local_backend.lake(marker_ttl=TTL, clock=clock_at(LATER)).recover()
    assert report.records_rolled_forward == [txn.attempt]
    assert rows(lake.read("a")) == [{"id": 1, "value": 11}] == local_backend.delta_rows("a")
    assert rows(lake.read("b")) == [{"id": 1, "value": 11}] == local_backend.delta_rows("b")


def test_recover_writes_the_commits_the_global_logs_head_announced_before_their_markers_expire(
        local_backend):
    """An I commit announced in the global log is decided; its owner died before any table
    commit. ``recover()`` writes its table commits from the pending writes of the log's head at
    once, while the owner's markers are still alive (so no marker pass could do it)."""
    accounts(local_backend)
    join_global_log(local_backend)
    crash_two_table_commit(dying_lake(local_backend, "_lakevilla/gvl/0", after=True), "R,CT,I")
    lake = local_backend.lake(marker_ttl=TTL)  # the real clock: the markers have not expired
    assert (value_of(lake, "a"), value_of(lake, "b")) == (0, 0)  # announced, not written
    report = lake.recover()
    assert sorted(t for t, _ in report.pending_resolved) == ["a", "b"] and report.freed == []
    assert (value_of(lake, "a"), value_of(lake, "b")) == (-5, 5)
    assert [r["value"] for r in local_backend.delta_rows("a") if r["id"] == 1] == [-5]
