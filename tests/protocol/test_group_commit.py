"""Group commit (docs/protocol.md, "Group commit"): one-table commits of a crowd lead a version
or ride in it. The leader carries its riders' statements in one commit, running again those
that conflict with what the version carries before them; a rider whose read conflicts is left
out; a version taken by someone else carries nobody; a rider whose leader never puts fences the
version with its own commit. Every transaction's effects are present exactly once."""

from __future__ import annotations

import threading
import time

import pytest

import lakevilla as lv
from lakevilla.core import riding
from lakevilla.recovery import rides
from tests.conftest import rows
from tests.helpers import (
    RideGates,
    numbered_table,
    open_markers,
    run_group,
    two_files,
)


@pytest.fixture(autouse=True)
def _patient_riders(monkeypatch):
    """Riders here wait for their leader as long as it takes (a loaded machine can hold a
    leader past the default timeout, and a rider that fences the version then changes the
    interleaving under test); the test of the timeout sets its own."""
    monkeypatch.setattr(riding, "RIDE_TIMEOUT", 30.0)


def _values(lake, table: str = "t") -> dict[int, int]:
    return {r["id"]: r["value"] for r in rows(lake.read(table))}


def _unnamed(backend, table: str = "t") -> set[str]:
    """Files under the table that no commit of its log names (after the clients flushed)."""
    from tests.protocol.test_sublogs_and_redo import _files_no_version_names

    return _files_no_version_names(backend, table)


def _update(id_: int, by: int = 5):
    return lambda txn: txn.update("t", set={"value": f"value + {by}"}, where=f"id = {id_}")


@pytest.mark.parametrize("layout", ["one-file", "two-files"])
def test_a_leader_carries_its_riders_in_one_version(backend, layout):
    """Three writers of one table, each at the same version: the leader's commit carries both
    riders. In one file the riders' updates conflict with the leader's and are run again on it;
    in two files the rider of the other file goes in as it is."""
    lake = numbered_table(backend) if layout == "one-file" else two_files(backend)
    v0 = lake._client.log("t").latest_version()
    gates = RideGates(riders=2)
    out = run_group({"leader": backend.lake(store=gates.store(backend.store(), "leader")),
                     "rider": backend.lake(store=gates.store(backend.store(), "rider")),
                     "rider2": backend.lake(store=gates.store(backend.store(), "rider"))},
                    gates, "t", {"leader": _update(1), "rider": _update(2),
                                 "rider2": _update(3 if layout == "one-file" else 5)})
    results = {role: out[role] for role in ("leader", "rider", "rider2")}
    assert all(isinstance(r, lv.CommitResult) for r in results.values()), results
    assert {r.versions["t"] for r in results.values()} == {v0 + 1}  # one version, three commits
    leader = out["leader.txn"]
    assert leader.stats["riders_carried"] == 2
    assert leader.stats["riders_rerun"] == (2 if layout == "one-file" else 1)
    assert out["rider"].stats["carried"] == out["rider2"].stats["carried"] == 1
    lake.flush()
    expected = {1: 15, 2: 25, 3: 35, 4: 40} if layout == "one-file" else {
        1: 15, 2: 25, 3: 30, 4: 40, 5: 55, 6: 60, 7: 70, 8: 80}
    assert _values(lake) == expected
    assert rows(lake.read("t")) == backend.delta_rows("t")
    c = lake._client.log("t").read_commit(v0 + 1)
    assert riding.carried(c) == {out["rider.txn"].attempt, out["rider2.txn"].attempt}
    assert lake._client.log("t").latest_version() == v0 + 1
    lv.Lake.flush_all()
    assert _unnamed(backend) == set()  # the riders' replaced first runs are gone
    # the leader deleted the version's lead and requests with what its transaction left
    assert list(backend.store().list("_lakevilla/rides/")) == []


def test_a_rider_whose_read_the_version_changes_is_left_out(local_backend):
    """The rider read a row the leader updates: its rows were not kept for the leader, so it
    cannot be compared, and the leader leaves it out. The rider then validates against the
    version like any commit: its redone read returns other rows, and it aborts."""
    lake = numbered_table(local_backend)
    v0 = lake._client.log("t").latest_version()
    gates = RideGates()

    def reads_then_updates(txn):
        assert rows(txn.read("t", where="id = 1")) == [{"id": 1, "value": 10}]
        txn.update("t", set={"value": "value + 5"}, where="id = 2")

    out = run_group({"leader": local_backend.lake(store=gates.store(local_backend.store(),
                                                                     "leader")),
                     "rider": local_backend.lake(store=gates.store(local_backend.store(),
                                                                    "rider"))},
                    gates, "t", {"leader": _update(1), "rider": reads_then_updates})
    assert isinstance(out["leader"], lv.CommitResult)
    assert out["leader"].versions == {"t": v0 + 1}
    assert out["leader.txn"].stats["riders_left_out"] == 1
    assert isinstance(out["rider"], lv.TransactionAborted), out["rider"]
    assert out["rider"].reason == "consumed-read"
    assert _values(lake) == {1: 15, 2: 20, 3: 30, 4: 40}
    lv.Lake.flush_all()
    assert _unnamed(local_backend) == set()


def test_a_version_taken_by_another_writer_carries_nobody(local_backend, monkeypatch):
    """A plain Delta writer takes the version while the leader gathers: the leader's put fails,
    it deletes what it ran again for its rider, and both go on, each committed once, above
    that version (a request is for one version: the rider may ride again, asking anew)."""
    lake = numbered_table(local_backend)
    v0 = lake._client.log("t").latest_version()
    gates = RideGates()
    other = local_backend.lake()
    real = rides.requests

    taken: list[int] = []

    def requests(store, table, version):
        got = real(store, table, version)
        if not taken:  # once: takes the version the leader is about to put
            taken.append(version)
            with other.transaction("") as x:
                x.insert("t", {"id": [9], "value": [90]})
        return got

    monkeypatch.setattr(rides, "requests", requests)
    out = run_group({"leader": local_backend.lake(store=gates.store(local_backend.store(),
                                                                     "leader")),
                     "rider": local_backend.lake(store=gates.store(local_backend.store(),
                                                                    "rider"))},
                    gates, "t", {"leader": _update(1), "rider": _update(2)})
    assert isinstance(out["leader"], lv.CommitResult) and isinstance(out["rider"], lv.CommitResult)
    assert out["leader.txn"].stats["leads_lost"] == 1
    assert riding.carried(lake._client.log("t").read_commit(v0 + 1)) == set()  # the writer's
    # both go on above it (the rider may ride again, with a new request, in a later version)
    assert out["leader"].versions["t"] > v0 + 1 and out["rider"].versions["t"] > v0 + 1
    assert _values(lake) == {1: 15, 2: 25, 3: 30, 4: 40, 9: 90}
    assert rows(lake.read("t")) == local_backend.delta_rows("t")
    lv.Lake.flush_all()
    assert _unnamed(local_backend) == set()


def test_a_rider_whose_leader_never_puts_fences_the_version_with_its_own_commit(
        local_backend, monkeypatch):
    """The leader stalls before its put (a process paused, or dead): after ``RIDE_TIMEOUT`` the
    rider puts its own commit at the version, which it validated up to the one before. The
    leader's put then fails and carries nobody; it goes on and commits itself once."""
    monkeypatch.setattr(riding, "RIDE_TIMEOUT", 0.3)
    lake = numbered_table(local_backend)
    v0 = lake._client.log("t").latest_version()
    gates = RideGates()
    rider_done = threading.Event()
    real_build = riding.groups.build

    def slow_build(*a, **kw):
        assert rider_done.wait(10)  # the leader is held until the rider committed by itself
        return real_build(*a, **kw)

    monkeypatch.setattr(riding.groups, "build", slow_build)
    leader = local_backend.lake(store=gates.store(local_backend.store(), "leader"))
    rider = local_backend.lake(store=gates.store(local_backend.store(), "rider"))
    real_fence = riding.Riding._fence

    def fence(self, tw, version, commit):
        try:
            return real_fence(self, tw, version, commit)
        finally:
            rider_done.set()

    monkeypatch.setattr(riding.Riding, "_fence", fence)
    out = run_group({"leader": leader, "rider": rider}, gates, "t",
                    {"leader": _update(1), "rider": _update(2)})
    assert isinstance(out["rider"], lv.CommitResult) and out["rider"].versions == {"t": v0 + 1}
    assert out["rider"].stats["rides_timed_out"] == 1
    assert isinstance(out["leader"], lv.CommitResult) and out["leader"].versions["t"] > v0 + 1
    assert out["leader.txn"].stats["leads_lost"] == 1
    assert _values(lake) == {1: 15, 2: 25, 3: 30, 4: 40}
    assert rows(lake.read("t")) == local_backend.delta_rows("t")
    lv.Lake.flush_all()
    assert _unnamed(local_backend) == set()


def test_a_rider_that_died_after_its_request_is_carried_and_resume_says_so(local_backend):
    """A rider's statements may commit after it died (its request was in): a resume of it finds
    its attempt among the version's riders and says it committed, and changes nothing."""
    lake = numbered_table(local_backend)
    gates = RideGates()
    from lakevilla.store import FaultInjectingStore, FaultPlan

    dies = FaultInjectingStore(local_backend.store(), FaultPlan(  # right after its request
        predicate=lambda kind, key: kind == "put" and key.startswith("_lakevilla/rides/"),
        crash_after=1))
    out = run_group({"leader": local_backend.lake(store=gates.store(local_backend.store(),
                                                                     "leader")),
                     "rider": local_backend.lake(store=gates.store(dies, "rider"))},
                    gates, "t", {"leader": _update(1), "rider": _update(2)})
    assert isinstance(out["leader"], lv.CommitResult)
    assert out["leader.txn"].stats["riders_carried"] == 1
    assert not isinstance(out["rider"], lv.CommitResult)  # it died before it learned
    assert _values(lake) == {1: 15, 2: 25, 3: 30, 4: 40}
    with pytest.raises(lv.TransactionStateError, match="already committed"):
        local_backend.lake(clock=lambda: time.time() + 10_000).resume(out["rider.txn"].id)
    assert _values(lake) == {1: 15, 2: 25, 3: 30, 4: 40}
    assert open_markers(lake, "t") == []


def test_cleanup_deletes_the_ride_objects_of_decided_versions(local_backend):
    """Ride objects name nothing live once their version exists; ``cleanup`` deletes them (a
    request written after its leader's LIST is left behind by design)."""
    lake = numbered_table(local_backend)
    v = lake._client.log("t").latest_version()
    store = local_backend.store()
    for version in (v, v + 5):  # a decided version, and one nobody has written yet
        rides.ask(store, rides.RideRequest(txn="x", attempt="x.0", table="t", version=version,
                                           features="R", started=time.time()))
    done = lake.maintenance.cleanup()
    assert done["ride_objects"] == 1
    left = [m.key for m in store.list("_lakevilla/rides/")]
    assert len(left) == 1 and f"{v + 5:020d}" in left[0]


def test_a_lone_writer_never_rides(local_backend):
    """Group commit is for a crowd: a client that met none puts its commit at once (one
    put-if-absent, no lead, no request)."""
    from lakevilla.store import CountingStore

    numbered_table(local_backend)
    counting = CountingStore(local_backend.store())
    lone = local_backend.lake(store=counting)
    with lone.transaction("R") as txn:
        txn.update("t", set={"value": "value + 1"}, where="id = 1")
    lone.flush()
    assert counting.counts["put_if_absent"] == 1
    assert txn.stats.get("leads", 0) == txn.stats.get("rides", 0) == 0
    assert list(local_backend.store().list("_lakevilla/rides/")) == []


def _lead_gated(store, role: str, asked: dict, led: dict):
    """``store`` whose lead puts for the versions in ``asked`` go in turn: the rider's only once
    the leader's lead is in (``led``), the leader's only once the rider asked (``asked``)."""
    from lakevilla.store import StoreWrapper

    class Gated(StoreWrapper):
        def put_if_absent(self, key, data):
            if not key.endswith("/lead.json"):
                return self.inner.put_if_absent(key, data)
            at = int(key.rsplit("/", 2)[-2])
            if at not in asked:  # after the versions under test: no choreography
                return self.inner.put_if_absent(key, data)
            if role == "rider":
                asked[at].set()
                led[at].wait(10)
                return self.inner.put_if_absent(key, data)
            asked[at].wait(10)
            try:
                return self.inner.put_if_absent(key, data)
            finally:
                led[at].set()
    return Gated(store)


def _ride_past_a_missed_version(backend, v: int, asked: dict, led: dict, second_id: int):
    """A leader takes v without the rider (ids 1 and 2, each in a crowd); once v is in, a
    second client updates ``second_id`` and leads v + 1, which the rider asks for next. Returns
    every client's results (``<role>`` and ``<role>.txn``) and the three lakes."""
    from tests.helpers import crowd_on

    out: dict = {}

    def run(role, lk, id_):
        crowd_on(lk, "t")
        txn = lk.begin("R")
        out[role + ".txn"] = txn
        txn.update("t", set={"value": "value + 5"}, where=f"id = {id_}")
        out[role] = txn.commit()

    lakes = [backend.lake(store=_lead_gated(backend.store(), r, asked, led))
             for r in ("leader", "rider", "second")]
    threads = [threading.Thread(target=run, args=("leader", lakes[0], 1)),
               threading.Thread(target=run, args=("rider", lakes[1], 2))]
    for t in threads:
        t.start()
    threads[0].join(30)
    assert out["leader"].versions == {"t": v}
    run("second", lakes[2], second_id)
    threads[1].join(30)
    return out, lakes


def test_a_rider_that_missed_a_version_rides_the_next_checked_against_it(local_backend,
                                                                        monkeypatch):
    """A rider the version went to others without asks for the next one at once, with the same
    statements: that version's leader checks them against the commit the rider missed. Here the
    leader of v does not see the rider's request (as when it lands after the LIST) and updates
    another row of the rider's file; the leader of v + 1 writes another file, so only the
    version the rider missed conflicts with it, and its update must run again on it."""
    lake = two_files(local_backend)
    v = lake._client.log("t").latest_version() + 1
    asked = {v: threading.Event(), v + 1: threading.Event()}
    led = {v: threading.Event(), v + 1: threading.Event()}
    real = rides.requests
    monkeypatch.setattr(rides, "requests", lambda store, table, version: (
        [] if version == v else real(store, table, version)))

    out, (leader, rider, second) = _ride_past_a_missed_version(local_backend, v, asked, led, 5)
    assert out["second"].versions == out["rider"].versions == {"t": v + 1}
    assert out["rider"].stats["rides_on"] == 1 and out["rider"].stats["carried"] == 1
    assert out["second.txn"].stats["riders_rerun"] == 1  # against the version it missed
    lake.flush()
    assert _values(lake) == {1: 15, 2: 25, 3: 30, 4: 40, 5: 55, 6: 60, 7: 70, 8: 80}
    assert rows(lake.read("t")) == local_backend.delta_rows("t")
    for lk in (leader, rider, second):
        lk.close()
    lv.Lake.flush_all()
    assert _unnamed(local_backend) == set()


def test_a_rider_that_rode_on_fences_a_stalled_version_with_an_empty_one(local_backend,
                                                                         monkeypatch):
    """A rider that missed version v rides v + 1 with statements validated only up to v - 1.
    When v + 1's leader stalls, the rider's own commit is not valid at v + 1 (it never saw v), so
    it fences v + 1 with an empty version (a freed marker: no Delta reader sees a change), then
    validates against v, redoes, and commits above it. The stalled leader's put then fails."""
    monkeypatch.setattr(riding, "RIDE_TIMEOUT", 0.3)
    lake = numbered_table(local_backend)
    v = lake._client.log("t").latest_version() + 1
    asked = {v: threading.Event(), v + 1: threading.Event()}
    led = {v: threading.Event(), v + 1: threading.Event()}
    fenced = threading.Event()
    real_requests, real_fence = rides.requests, riding.Riding._fence
    monkeypatch.setattr(rides, "requests", lambda store, table, version: (
        [] if version == v else real_requests(store, table, version)))

    def requests_then_stall(store, table, version):
        got = real_requests(store, table, version)
        if version == v + 1:
            assert fenced.wait(10)  # v + 1's leader stalls until the rider fenced it
        return got

    monkeypatch.setattr(rides, "requests", lambda store, table, version: (
        [] if version == v else requests_then_stall(store, table, version)))

    def fence(self, tw, version, commit):
        try:
            return real_fence(self, tw, version, commit)
        finally:
            fenced.set()

    monkeypatch.setattr(riding.Riding, "_fence", fence)
    # the second leads v + 1, stalls, loses it to the fence, commits above it
    out, (leader, rider, second) = _ride_past_a_missed_version(local_backend, v, asked, led, 3)
    assert out["rider"].stats["rides_fenced"] == 1
    fence_commit = lake._client.log("t").read_commit(v + 1)
    assert fence_commit.is_empty and riding.carried(fence_commit) == set()
    assert out["rider"].versions["t"] > v + 1 and out["second"].versions["t"] > v + 1
    assert out["second.txn"].stats["leads_lost"] >= 1
    lake.flush()
    assert _values(lake) == {1: 15, 2: 25, 3: 35, 4: 40}
    assert rows(lake.read("t")) == local_backend.delta_rows("t")
    for lk in (leader, rider, second):
        lk.close()
    assert open_markers(lake, "t") == []
    lv.Lake.flush_all()
    assert _unnamed(local_backend) == set()
