"""Recovery by another transaction: a transaction that meets the expired marker of a stalled or
dead one finishes it if it was decided and undoes it if not, then goes on; a late owner whose
marker was freed notices and commits after what went past it. One test per kind of owner: R (at
the tail and in place), CT (before its record, after it, between its table commits) and I
(announced in the global log, or not)."""

from __future__ import annotations

import pytest

from lakevilla.complex_txn import record as records
from lakevilla.markers.marker import FREED, marker_of
from lakevilla.store import SimulatedCrash
from tests.conftest import rows
from tests.helpers import (
    HalfPublished,
    accounts,
    claim_now,
    clock_at,
    crash_two_table_commit,
    dying_lake,
    join_global_log,
    numbered_table,
    open_markers,
    value_of,
)

TTL = 5.0
LATER = 10_000.0  # seconds: a client whose clock is past every marker's expiry
MODES = ["tail", "in_place"]


# -- R: the marker is freed, the late owner redoes at the tail -------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_expired_marker_is_freed_and_the_late_owner_continues(backend, mode):
    lake = numbered_table(backend, commit_mode=mode, marker_ttl=TTL)
    stalled = lake.begin("R")
    stalled.update("t", set={"value": "value + 1"}, where="id = 1")
    claim_now(stalled, "t")
    stalled_marker = stalled.tables["t"].marker.version
    lake._client.heartbeats.forget(stalled)  # its heartbeat stops: the client is stalled
    other = backend.lake(commit_mode=mode, marker_ttl=TTL, clock=clock_at(LATER))
    with other.transaction("R") as t2:
        t2.update("t", set={"value": "value + 100"}, where="id = 1")
    assert t2.stats["recovered_freed"] == 1
    c, _ = lake._client.log("t").read_commit_raw(stalled_marker)
    assert marker_of(c).state == "freed"
    stalled.commit()  # the late owner validates against T2's commit, redoes, commits
    assert stalled.stats["redos"] == 1
    # T2's commit lies above its old marker: filling there is unsafe, so the tail
    if mode == "in_place":
        assert stalled.stats["fill_fallback"] >= 1
    c, _ = lake._client.log("t").read_commit_raw(stalled_marker)
    assert marker_of(c).state == "freed"  # the late owner could not overwrite the freed marker
    # and T2's update is not lost
    assert {r["id"]: r["value"] for r in rows(lake.read("t"))}[1] == 111
    assert open_markers(lake, "t") == []


def test_a_late_in_place_owner_whose_marker_was_freed_commits_at_the_tail(local_backend):
    """Recovery freed the marker of a slow in-place owner; nothing else was written, so the
    fill looks safe, but the conditional fill fails on the freed marker's etag: the owner
    must notice, re-claim and commit at the tail, never report a fill that did not land."""
    lake = accounts(local_backend, tables=("a",), commit_mode="in_place", marker_ttl=TTL)
    slow = lake.begin("R")
    slow.update("a", set={"value": "value + 1"}, where="id = 1")
    v = slow.tables["a"].marker.version
    lake._client.heartbeats.forget(slow)  # its heartbeat stops
    assert [r[:2] for r in local_backend.lake(
        marker_ttl=TTL, clock=clock_at(LATER)).recover().freed] == [("a", v)]
    result = slow.commit()
    assert result.versions["a"] != v and slow.stats["fill_lost"] == 1
    assert value_of(local_backend.lake(), "a") == 1
    assert marker_of(lake._client.log("a").read_commit_raw(v)[0]).state == FREED
    assert rows(lake.read("a")) == local_backend.delta_rows("a")


# -- CT: the record decides -------------------------------------------------------------------

class _CrashBetweenTables(HalfPublished):
    """The owner's commit to ``a`` lands, then it dies before its commit to ``b``."""

    def __init__(self, inner) -> None:
        def die():
            raise SimulatedCrash("between the table commits")
        super().__init__(inner, "a", "b", die)


@pytest.mark.parametrize("crash", ["before-record", "after-record", "between-tables"])
def test_a_transaction_meeting_an_expired_ct_marker_finishes_or_undoes_it(local_backend, crash):
    """Decided (record COMMITTING, maybe half published): the transaction that meets the
    marker rolls it forward, each table commit exactly once, and goes after it. Undecided:
    it writes the ABORTED record, frees the marker, and the late owner can never commit."""
    accounts(local_backend)
    if crash == "between-tables":
        gate = _CrashBetweenTables(local_backend.store())
        owner = local_backend.lake(store=gate, marker_ttl=TTL)
        dead = owner.begin("R,CT")
        dead.update("a", set={"value": "value - 5"}, where="id = 1")
        dead.update("b", set={"value": "value + 5"}, where="id = 1")
        gate.armed = True
        with pytest.raises(SimulatedCrash):
            dead.commit()
        owner.flush()
        assert (value_of(local_backend.lake(), "a") == -5
                and value_of(local_backend.lake(), "b") == 0)
    else:
        dead = crash_two_table_commit(dying_lake(local_backend, "_lakevilla/txns/",
                                                 after=crash == "after-record"),
                                      "R,CT")
    other = local_backend.lake(marker_ttl=TTL, clock=clock_at(LATER))
    with other.transaction("R") as t:  # commits table by table: a, then b, where the marker waits
        t.update("a", set={"value": "value * 10"}, where="id = 1")
        t.update("b", set={"value": "value * 10"}, where="id = 1")
    rec = records.read(other.store, dead.attempt)
    if crash == "before-record":
        assert t.stats["recovered_freed"] >= 1
        assert (value_of(other, "a"), value_of(other, "b")) == (0, 0)
        assert rec.state == records.ABORTED
    else:
        assert t.stats["recovered_committed"] >= 1
        # the transfer once, then ours
        assert (value_of(other, "a"), value_of(other, "b")) == (-50, 50)
        assert rec.state == records.COMMITTED
    for tb in ("a", "b"):
        assert open_markers(other, tb) == []
        assert rows(other.read(tb)) == local_backend.delta_rows(tb)


# -- I: announced in the global log means decided ------------------------------------------------

def test_a_transaction_meeting_the_expired_marker_of_an_announced_i_commit_writes_that_commit(
        local_backend):
    """An I commit announced in the global log (its decision), then its owner died before any
    table commit: the R transaction that meets its expired marker resolves the marker through
    the log and writes the announced commit first (nothing isolated reads in between), then its
    own on top. Freeing the marker as if undecided would drop a decided transfer."""
    accounts(local_backend)
    join_global_log(local_backend)
    crash_two_table_commit(dying_lake(local_backend, "_lakevilla/gvl/0", after=True), "R,CT,I")
    other = local_backend.lake(marker_ttl=TTL, clock=clock_at(LATER))
    with other.transaction("R") as t:
        t.update("a", set={"value": "value * 10"}, where="id = 1")
    assert t.stats["recovered_committed"] == 1 and t.stats["recovered_freed"] == 0
    assert value_of(other, "a") == -50  # the transfer's -5, then ours
    assert open_markers(other, "a") == []
    assert rows(other.read("a")) == local_backend.delta_rows("a")


def test_a_transaction_meeting_the_expired_marker_of_an_unannounced_i_commit_appends_its_abort(
        local_backend):
    """Its owner died before its entry: undecided. The R transaction that meets the expired
    marker appends the abort to the global log (so the owner can never announce) and frees it."""
    accounts(local_backend)
    join_global_log(local_backend)
    dead = crash_two_table_commit(dying_lake(local_backend, "_lakevilla/gvl/0", after=False),
                                  "R,CT,I")
    other = local_backend.lake(marker_ttl=TTL, clock=clock_at(LATER))
    with other.transaction("R") as t:
        t.update("a", set={"value": "value * 10"}, where="id = 1")
    assert t.stats["recovered_freed"] == 1 and t.stats["recovered_committed"] == 0
    assert value_of(other, "a") == 0
    assert dead.attempt in other._client.gvl.head().aborts
    assert open_markers(other, "a") == []
    assert rows(other.read("a")) == local_backend.delta_rows("a")
