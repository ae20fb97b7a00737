"""Recovery by ``resume``: a crashed transaction is finished from its sublogs, or refused where it
cannot be: a physical entry a newer commit conflicts with aborts it, and an I commit already
announced in the global log is rolled forward, never run again."""

from __future__ import annotations

import pytest

import lakevilla as lv
from lakevilla.recovery import sublog as sublogs
from tests.conftest import rows
from tests.helpers import (
    accounts,
    clock_at,
    crash_two_table_commit,
    dying_lake,
    join_global_log,
    value_of,
)

TTL = 5.0


def test_resumed_physical_operation_that_conflicts_aborts(local_backend):
    """A physical sublog entry names files, not a statement: if a newer commit conflicts with
    it, resume cannot redo it and must abort, keeping the newer commit."""
    lake = accounts(local_backend, tables=("a",), marker_ttl=TTL, commit_mode="in_place")
    stalled = lake.begin("R")
    # in place R claims at its first write: that entry goes out with the claim and carries its
    # statement; the second, with no marker before ours, is physical
    stalled.update("a", set={"value": "value + 0"}, where="id = 1")
    stalled.update("a", set={"value": "value + 1"}, where="id = 1")
    assert [e.kind for e in sublogs.read_all(lake.store, stalled.id)] == ["logical", "physical"]
    lake._client.heartbeats.forget(stalled)
    with local_backend.lake().transaction("") as w:  # ignores markers
        w.update("a", set={"value": "value + 100"}, where="id = 1")
    resumed = local_backend.lake(marker_ttl=TTL, clock=clock_at(10_000.0)).resume(stalled.id)
    with pytest.raises(lv.TransactionAborted) as info:
        resumed.commit()
    assert info.value.reason == "physical-conflict"
    assert value_of(local_backend.lake(), "a") == 100
    assert rows(lake.read("a")) == local_backend.delta_rows("a")


def test_resume_rolls_an_announced_isolated_transaction_forward(local_backend):
    """Resume after an I decision (announced in the global log, no table commit written, no
    ``recover()`` first): it writes the commits once and refuses to re-run the transaction."""
    accounts(local_backend)
    join_global_log(local_backend)
    dead = crash_two_table_commit(dying_lake(local_backend, "_lakevilla/gvl/0", after=True),
                                  "R,CT,I")
    later = local_backend.lake(marker_ttl=TTL, clock=clock_at(10_000.0))
    with pytest.raises(lv.TransactionStateError, match="rolled forward"):
        later.resume(dead.id)
    plain = local_backend.lake()
    assert (value_of(plain, "a"), value_of(plain, "b")) == (-5, 5)
    assert [r["value"] for r in local_backend.delta_rows("b") if r["id"] == 1] == [5]
