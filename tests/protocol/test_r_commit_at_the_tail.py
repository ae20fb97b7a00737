"""LV[R] commits at the tail: optimistically, without a marker when nobody precedes it; after a
lost race it backs off and reads forward to the first free version (LISTing when far behind), or
queues (claims a marker that carries its footprints) with a fresh retry budget; several tables
commit one by one, and a partial commit keeps what committed."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.markers.marker import marker_of
from lakevilla.vocab import CommitInfo
from tests.conftest import rows
from tests.helpers import (
    HookStore,
    numbered_table,
    open_markers,
    two_files,
    wait_until,
)

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])


def _seen_by(lake) -> None:
    """``lake``'s log of t learns the versions another writer just committed, as the read after
    a lost race learns the winner."""
    log = lake._client.log("t")
    log.probe_versions(log.known_latest())


def test_an_r_writer_nobody_precedes_commits_without_a_marker(backend):
    """Issue 13: LV[R] at the tail is optimistic. With no running marker to wait for, its commit
    is one put-if-absent right after its snapshot: no marker claimed, none closed, one version
    per transaction, as with plain Delta (a marker is claimed only to queue), and no read."""
    numbered_table(backend)
    counting = lv.store.CountingStore(backend.store())
    lake = backend.lake(store=counting)
    txn = lake.begin("R")
    txn.update("t", set={"value": "value + 1"}, where="id = 1")
    assert txn.tables["t"].marker is None
    counting.reset()
    txn.commit()
    lake.flush()
    assert txn.result.versions == {"t": 2} and txn.stats["markers"] == 0
    log = lake._client.log("t")
    assert log.latest_version() == 2 and marker_of(log.read_commit(2)) is None
    assert CommitInfo.of(log.read_commit(2).lakevilla).marker is None
    assert counting.snapshot()["put_if_absent"] == 1 and counting.snapshot()["put_if_match"] == 0
    # issue 39: the put that wins reads nothing beside it (the winner is read after a lost race)
    assert counting.snapshot()["get"] == 0
    assert {r["id"]: r["value"] for r in rows(lake.read("t"))}[1] == 11
    assert rows(lake.read("t")) == backend.delta_rows("t")


def test_an_r_writer_that_keeps_losing_the_commit_race_queues_with_its_footprints(local_backend):
    """Racing for the tail guarantees no turn: an optimistic writer that lost its whole retry
    budget claims a marker instead of aborting, so that from then on followers that would
    conflict with it wait for it. Its statements are done, so the claim carries its footprints
    at once: a follower on another file overtakes it without waiting, though the queued writer
    never waited (and so never published in a wait round). Here a blind append beats each of
    T's first ``max_retries`` + 1 puts; T's commit after the claim is held while the follower
    runs."""
    retries = 3
    lake = two_files(local_backend)
    other = local_backend.lake()
    release = threading.Event()
    puts = {"n": 0}

    held = threading.Event()

    def before_put():
        puts["n"] += 1
        if puts["n"] <= retries + 1:  # another writer takes the version T is about to put
            with other.transaction("") as x:
                x.insert("t", {"id": [100 + puts["n"]], "value": [0]})
            _seen_by(t_lake)
        elif t.tables["t"].marker is not None and not held.is_set():  # the claim went through; hold
            held.set()  # the commit after it
            release.wait(30)

    t_lake = local_backend.lake(max_retries=retries, store=HookStore(
        local_backend.store(),
        lambda kind, key: kind == "put_if_absent" and key.startswith("t/_delta_log/")
        and key.endswith(".json"), before_put, repeat=True))
    t = t_lake.begin("R")
    t.update("t", set={"value": "value + 1"}, where="id = 1")
    t_thread = threading.Thread(target=t.commit)
    t_thread.start()
    try:
        wait_until(held.is_set, "T to queue and reach its commit", extra=lambda: dict(t.stats))
        assert t.stats["retries"] == retries + 1 and t.stats["queued_at_commit"] == 1
        assert t.stats["queued_for_budget"] == 1 and t.stats["redos"] == 0
        h = t.tables["t"].marker
        claimed = marker_of(lake._client.log("t").read_commit(h.version))
        assert claimed.state == "running" and claimed.footprint == h.payload.footprint is not None
        q = local_backend.lake(wait_timeout=20.0).begin("R")
        q.update("t", set={"value": "value + 5"}, where="id = 6")  # the other file
        q.commit()  # while T is held: it did not wait for T
        assert q.stats["predecessors_overtaken"] == 1 and q.stats["wait_rounds"] == 0
    finally:
        release.set()
        t_thread.join(30)
    assert t.state == "committed" and t.stats["redos"] == 0  # nothing it lost to touched its file
    got = {r["id"]: r["value"] for r in rows(lake.read("t"))}
    assert (got[1], got[6]) == (11, 65) and len(got) == 8 + retries + 1
    assert rows(lake.read("t")) == local_backend.delta_rows("t")


@pytest.mark.parametrize("winners", ["conflicting", "blind"])
def test_an_r_writer_queues_early_only_after_races_lost_to_conflicting_commits(
        local_backend, winners):
    """A race lost to a commit that conflicted cost a redo, and the next may cost another: after
    ``QUEUE_AFTER_CONFLICTS`` of them the writer queues at once (conflicting followers then wait
    for it). A race lost to a commit that did not conflict cost one put, less than a queue's
    marker costs everyone: the writer races on, holding no marker, within its budget. Here a
    winner commits inside each of T's first ``n`` puts: T meets them one lost race each."""
    from lakevilla.markers.overtake import QUEUE_AFTER_CONFLICTS

    lake = two_files(local_backend)
    other = local_backend.lake()
    n = QUEUE_AFTER_CONFLICTS if winners == "conflicting" else 2 * QUEUE_AFTER_CONFLICTS + 1
    puts = {"n": 0}

    def before_put():
        puts["n"] += 1
        if puts["n"] > n:
            return
        with other.transaction("") as x:  # another writer takes the version T is about to put
            if winners == "conflicting":
                x.update("t", set={"value": "value + 100"}, where="id = 1")  # T's row: T redoes
            else:
                x.insert("t", {"id": [100 + puts["n"]], "value": [0]})

    t = local_backend.lake(store=HookStore(
        local_backend.store(),
        lambda kind, key: kind == "put_if_absent" and key.startswith("t/_delta_log/")
        and key.endswith(".json"), before_put, repeat=True)).begin("R")
    t.update("t", set={"value": "value + 1"}, where="id = 1")
    t.commit()
    got = {r["id"]: r["value"] for r in rows(lake.read("t"))}
    if winners == "conflicting":
        assert t.stats["retries"] == t.stats["redos"] == n, str(dict(t.stats))
        assert (t.stats["queued_at_commit"] == t.stats["queued_for_conflicts"]
                == t.stats["markers"] == 1)
        assert got[1] == 10 + 100 * n + 1
    else:
        assert t.stats["retries"] == n and t.stats["redos"] == 0
        assert t.stats["queued_at_commit"] == t.stats["markers"] == 0
        assert got[1] == 11 and len(got) == 8 + n
    assert rows(lake.read("t")) == local_backend.delta_rows("t")


@pytest.mark.parametrize("losses", ["budget", "budget+1"])
def test_a_queued_r_writer_gets_the_whole_retry_budget_after_it_queues(local_backend, losses,
                                                                      monkeypatch):
    """The races an optimistic writer lost before it queued were spent racing; its queued turn
    must not inherit what is left of them, since a writer that ignores markers can still take
    its versions. A blind append takes each of T's first puts: T survives ``max_retries`` + 1
    losses, queues, survives ``max_retries`` + 1 more and commits; one loss more and it aborts
    (the budget is still a bound). Only the races lost before it queued back off: once queued,
    followers wait for it."""
    from lakevilla.core import per_table

    retries = 3
    n_lost = 2 * (retries + 1) - 1 + (losses == "budget+1")
    lake = two_files(local_backend)
    other = local_backend.lake()
    puts = {"n": 0}

    def before_put():
        puts["n"] += 1
        if puts["n"] == retries + 2:
            return  # the marker's claim
        if puts["n"] - (puts["n"] > retries + 2) <= n_lost:  # another writer takes T's version
            with other.transaction("") as x:
                x.insert("t", {"id": [100 + puts["n"]], "value": [0]})
            _seen_by(t_lake)

    t_lake = local_backend.lake(max_retries=retries, group_commit=False, store=HookStore(
        local_backend.store(),
        lambda kind, key: kind == "put_if_absent" and key.startswith("t/_delta_log/")
        and key.endswith(".json"), before_put, repeat=True))
    t = t_lake.begin("R")
    t.update("t", set={"value": "value + 1"}, where="id = 1")
    backed_off: list[int] = []
    real_back_off = per_table.back_off
    monkeypatch.setattr(per_table, "back_off",
                        lambda lost, took: (backed_off.append(lost), real_back_off(lost, took)))
    if losses == "budget":
        t.commit()
        assert (t.state == "committed" and t.stats["queued_at_commit"] == 1
                and t.stats["retries"] == n_lost)
        # only the races lost before it queued: a queued writer holds up the followers
        assert backed_off == list(range(1, retries + 2))
        got = {r["id"]: r["value"] for r in rows(lake.read("t"))}
        assert got[1] == 11 and len(got) == 8 + n_lost
    else:
        with pytest.raises(lv.TransactionAborted, match=f"lost the commit race {n_lost} times"):
            t.commit()
        assert t.stats["queued_at_commit"] == 1
        assert {r["id"]: r["value"] for r in rows(lake.read("t"))}[1] == 10
    assert rows(lake.read("t")) == local_backend.delta_rows("t")


def test_a_commit_far_behind_the_tail_lists_the_log_after_one_lost_race(local_backend):
    """A writer whose snapshot is many versions old (others committed while it ran) does not walk
    up the log one lost put per version, nor queue for it: after its first lost race it reads
    forward from the winner, finds three versions taken, LISTs the log once and puts right after
    the tail."""
    from lakevilla.store import CountingStore

    lake = numbered_table(local_backend)
    counting = CountingStore(local_backend.store())
    t = local_backend.lake(store=counting, group_commit=False).begin("R")
    t.update("t", set={"value": "value + 1"}, where="id = 1")
    other = local_backend.lake()
    for i in range(12):
        with other.transaction("") as x:
            x.insert("t", {"id": [100 + i], "value": [0]})
    lists = counting.counts["list"]
    t.commit()
    assert t.stats["retries"] == 1 and t.stats["markers"] == 0 and t.result.versions == {"t": 14}
    assert counting.counts["list"] - lists == 1
    assert rows(lake.read("t")) == local_backend.delta_rows("t")


@pytest.mark.parametrize("taken", [2, 4])
def test_after_a_lost_race_a_commit_reads_forward_to_the_first_free_version_and_puts_there(
        local_backend, monkeypatch, taken):
    """Issue 39: a commit that lost a race at the tail does not put at the next version blindly
    (in YCSB A others had taken it four times in five): it backs off (a random part of what its
    lost put took), then reads forward from the winner's commit to the first free version and
    puts there. Others take ``taken`` versions inside T's first put: two, and T reads them and a
    free one and puts once more, without a LIST; four, and after three versions read taken T is
    behind, LISTs once and puts right after the tail."""
    from lakevilla.core import per_table
    from lakevilla.store import CountingStore

    lake = two_files(local_backend)
    base = lake._client.log("t").latest_version()
    other = local_backend.lake()
    done: list[int] = []
    puts: list[int] = []
    backed_off: list[tuple[int, float, int]] = []
    real_back_off = per_table.back_off

    def recorded(lost: int, put_took: float) -> None:
        backed_off.append((lost, put_took, len(puts)))
        real_back_off(lost, put_took)

    monkeypatch.setattr(per_table, "back_off", recorded)

    class Race(HookStore):
        def _maybe(self, kind, key):
            name = key.rsplit("/", 1)[-1]
            if kind != "put_if_absent" or not key.startswith("t/_delta_log/"):
                return
            puts.append(int(name[:-5]))
            if not done:  # others commit here, then T's put finds its version taken
                done.append(taken)
                for i in range(taken):
                    with other.transaction("") as x:
                        x.insert("t", {"id": [100 + i], "value": [0]})

    counting = CountingStore(local_backend.store())
    t = local_backend.lake(store=Race(counting, lambda k, key: False, lambda: None),
                           group_commit=False).begin("R")
    t.update("t", set={"value": "value + 1"}, where="id = 1")
    lists = counting.counts["list"]
    t.commit()
    assert t.stats["retries"] == 1 and t.stats["queued_at_commit"] == 0
    assert puts == [base + 1, base + taken + 1] and t.result.versions == {"t": base + taken + 1}
    assert counting.counts["list"] - lists == (0 if taken < 3 else 1)
    assert [(lost, at) for lost, _, at in backed_off] == [(1, 1)]  # before the second put
    assert backed_off[0][1] > 0
    got = {r["id"]: r["value"] for r in rows(lake.read("t"))}
    assert got[1] == 11 and len(got) == 8 + taken
    assert rows(lake.read("t")) == local_backend.delta_rows("t")


def test_a_back_off_after_lost_races_pauses_at_most_losses_times_the_lost_put():
    """The pause is a random part of what the lost put took, times the races lost (at most
    ``BACK_OFF_LOSSES``): a long pause would leave the tail idle."""
    from unittest import mock

    from lakevilla.core import per_table
    from lakevilla.markers.overtake import BACK_OFF_LOSSES

    with mock.patch.object(per_table.random, "uniform", side_effect=lambda a, b: b) as u, \
            mock.patch.object(per_table.time, "sleep") as sleep:
        per_table.back_off(2, 0.05)
        per_table.back_off(BACK_OFF_LOSSES + 5, 0.05)
    assert [c.args for c in u.call_args_list] == [(0, 2 * 0.05), (0, BACK_OFF_LOSSES * 0.05)]
    assert [c.args for c in sleep.call_args_list] == [(0.1,), (BACK_OFF_LOSSES * 0.05,)]


def test_partial_commit_keeps_what_committed(local_backend):
    """R alone commits table by table; when a later table cannot commit, the earlier one stays
    committed and readable (the TPC-C benchmark found its files being deleted by the abort)."""
    lake = local_backend.lake()
    for t in ("a", "b"):
        lake.create_table(t, T)
        with lake.transaction("R") as x:
            x.insert(t, {"id": [1], "value": [0]})
    t1 = lake.begin("R")
    t1.update("a", set={"value": "value + 1"}, where="id = 1")
    t1.read("b", where="id = 1")  # consumed: a later change to b cannot be redone
    with lake.transaction("R") as t2:
        t2.update("b", set={"value": "value + 10"}, where="id = 1")
    t1.update("b", set={"value": "value + 1"}, where="id = 1")
    with pytest.raises(lv.PartialCommitError) as info:
        t1.commit()
    assert list(info.value.committed) == ["a"]
    lake.flush()
    assert rows(lake.read("a")) == [{"id": 1, "value": 1}] == local_backend.delta_rows("a")
    assert rows(lake.read("b")) == [{"id": 1, "value": 10}]
    assert open_markers(lake, "a") == [] and open_markers(lake, "b") == []


def test_a_commit_says_whether_its_tables_committed_one_by_one(local_backend):
    """``CommitResult.partial`` (README, "Things to know"): True where the transaction committed
    piece by piece, so a crash between two pieces could have left the first alone (plain Delta:
    every statement; R: every table); False where one decision covers it all."""
    lake = local_backend.lake()
    for t in ("a", "b"):
        lake.create_table(t, T)

    def commit(features: str, tables: tuple[str, ...]):
        with lake.transaction(features) as txn:
            for t in tables:
                txn.insert(t, {"id": [1], "value": [1]})
        return txn.result

    got = {(f, n): commit(f, ("a", "b")[:n]).partial
           for f in ("", "R", "R,CT", "R,CT,I") for n in (1, 2)}
    assert got == {("", 1): True, ("", 2): True, ("R", 1): False, ("R", 2): True,
                   ("R,CT", 1): False, ("R,CT", 2): False, ("R,CT,I", 1): False,
                   ("R,CT,I", 2): False}
    r = commit("R", ("a", "b"))
    assert r.partial and set(r.versions) == {"a", "b"}
