"""Waiting for running markers at commit: a follower does not wait for the close of a commit that
landed, overtakes a waiting predecessor it cannot conflict with and waits for one it would
invalidate; a waiter pauses longer behind a longer queue; a waiter whose consumed read was
invalidated aborts at once, one with a redoable conflict waits and redoes once; what a wait round
reads (markers only at full reads, up to the lowest predecessor; every one at whole reads)."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.statements import read_results
from tests.conftest import rows
from tests.helpers import (
    HookStore,
    claim_now,
    numbered_table,
    open_markers,
    two_files,
    wait_until,
)

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])
MODES = ["tail", "in_place"]


def test_a_follower_does_not_wait_for_the_close_of_a_marker_whose_commit_landed(local_backend):
    """A one-table commit is its own decision; its marker closes afterwards. A follower that
    finds the owner's commit in the log goes on at once instead of waiting for the close (here
    the close fails, and the marker would only expire after 60 s)."""
    numbered_table(local_backend)
    no_close = lv.store.FaultInjectingStore(local_backend.store(), lv.store.FaultPlan(
        fail_before=set(range(1, 20)), kinds=("put_if_match",),
        predicate=lambda kind, key: "_delta_log/" in key))
    owner = local_backend.lake(store=no_close, marker_ttl=60.0)
    t1 = owner.begin("R")
    t1.update("t", set={"value": "value + 1"}, where="id = 1")
    claim_now(t1, "t")
    t1.commit()
    owner.flush()
    assert t1.stats["post_commit_failures_close_marker"] == 1
    assert open_markers(owner, "t") == [t1.tables["t"].marker.version]  # still running, for 60 s
    follower = local_backend.lake(marker_ttl=60.0, wait_timeout=5.0)
    with follower.transaction("R") as t2:
        t2.update("t", set={"value": "value + 100"}, where="id = 1")
    # it never waited
    assert t2.stats["waits_ended_by_commit"] >= 1 and t2.stats["wait_rounds"] == 0
    assert {r["id"]: r["value"] for r in rows(follower.read("t"))}[1] == 111
    assert rows(follower.read("t")) == local_backend.delta_rows("t")


def _held_at_commit(backend, holder: dict):
    """A client whose table commit (a put-if-absent to the Delta log once ``holder["txn"]`` has
    redone) waits for ``release``."""
    release = threading.Event()

    def when(kind, key):
        txn = holder.get("txn")
        return (kind == "put_if_absent" and "/_delta_log/" in key and txn is not None
                and txn.stats["redos"] >= 1)
    return backend.lake(store=HookStore(backend.store(), when, lambda: release.wait(30))), release


def _queued_behind_a_publisher(backend, o_id: int = 1, p_work=None):
    """O holds a marker on the file of row ``o_id``; P does ``p_work`` (by default it updates
    row 2, in file 1-4), which O's commit conflicts with; P waits for O at commit (so it
    publishes its footprint), then, once O committed, redoes and is held right before its own
    commit lands: P's marker is running, with a published footprint."""
    lake = two_files(backend)
    o = lake.begin("R")
    o.update("t", set={"value": "value + 1"}, where=f"id = {o_id}")
    claim_now(o, "t")
    holder: dict = {}
    p_lake, release = _held_at_commit(backend, holder)
    holder["txn"] = p = p_lake.begin("R")
    if p_work is None:
        p.update("t", set={"value": "value + 1000"}, where="id = 2")
    else:
        p_work(p)
    claim_now(p, "t")
    p_thread = threading.Thread(target=p.commit)
    p_thread.start()
    wait_until(lambda: p.stats["footprints_published"] == 1, "P to publish its footprint")
    o.commit()
    wait_until(lambda: p_lake.store.fired == 1, "P to redo after O and reach its commit",
               extra=lambda: dict(p.stats))
    return lake, p, p_thread, release


def _overtakes_held(backend, p_thread, release, where: str, while_held=lambda: None) -> None:
    """Q adds 5 to ``value`` where ``where`` and commits while P is held at its commit: Q
    overtakes P, with no wait round; then P is released and finishes."""
    try:
        q = backend.lake(wait_timeout=5.0).begin("R")
        q.update("t", set={"value": "value + 5"}, where=where)
        q.commit()  # while P is still held: it did not wait for P
        assert q.stats["predecessors_overtaken"] == 1 and q.stats["wait_rounds"] == 0
        while_held()
    finally:
        release.set()
        p_thread.join(30)


def test_a_follower_whose_commit_cannot_conflict_commits_before_a_waiting_predecessor(
        local_backend):
    """Issue 13: a writer that has to wait publishes its footprints on its marker; a follower on
    other files of the table does not queue behind it. The predecessor then validates against the
    follower's commit and finds nothing: no redo, no abort because of it."""
    lake, p, p_thread, release = _queued_behind_a_publisher(local_backend)

    def p_still_runs_below() -> None:
        assert open_markers(lake, "t") == [p.tables["t"].marker.version]
    _overtakes_held(local_backend, p_thread, release, "id = 6", p_still_runs_below)  # other file
    assert p.state == "committed" and p.stats["redos"] == 1  # the redo after O only
    got = {r["id"]: r["value"] for r in rows(lake.read("t"))}
    assert (got[1], got[2], got[6]) == (11, 1020, 65)
    assert rows(lake.read("t")) == local_backend.delta_rows("t")


def test_a_follower_that_updates_columns_a_waiting_predecessor_only_read_overtakes_it(
        local_backend):
    """Conflicts by column when overtaking: P read the ids of file 1-4 (and updates file 5-8,
    where it waits for O and publishes its footprints). Q adds to ``value`` in file 1-4, a
    column P's read does not depend on: Q commits past P without waiting, and P, validating
    against Q's commit, redoes nothing for it."""
    def p_work(p):
        assert sorted(p.read("t", where="id < 5", columns=["id"]).column("id").to_pylist()) == [
            1, 2, 3, 4]
        p.update("t", set={"value": "value + 1000"}, where="id = 6")

    lake, p, p_thread, release = _queued_behind_a_publisher(local_backend, 5, p_work)
    _overtakes_held(local_backend, p_thread, release, "id = 3")  # the file P read
    assert p.state == "committed" and p.stats["redos"] == 1  # the redo after O only
    got = {r["id"]: r["value"] for r in rows(lake.read("t"))}
    assert (got[3], got[5], got[6]) == (35, 51, 1060)
    assert rows(lake.read("t")) == local_backend.delta_rows("t")


def test_a_follower_whose_commit_would_conflict_still_waits(local_backend):
    """The other side of the rule: a follower rewriting a file the waiting predecessor touched
    waits for it and redoes on its commit; the predecessor commits without a redo of its own."""
    lake, p, p_thread, release = _queued_behind_a_publisher(local_backend)
    q = local_backend.lake(wait_timeout=30.0).begin("R")
    q.update("t", set={"value": "value + 5"}, where="id = 3")  # P's file
    q_thread = threading.Thread(target=q.commit)
    q_thread.start()
    try:
        wait_until(lambda: q.stats["wait_rounds"] >= 1, "Q to wait for P")
    finally:
        release.set()
        p_thread.join(30)
        q_thread.join(30)
    assert (q.stats["predecessors_overtaken"] == 0 and q.state == "committed"
            and q.stats["redos"] == 1)
    assert p.state == "committed" and p.stats["redos"] == 1  # after O only, never after Q
    got = {r["id"]: r["value"] for r in rows(lake.read("t"))}
    assert (got[1], got[2], got[3]) == (11, 1020, 35)
    assert rows(lake.read("t")) == local_backend.delta_rows("t")


def test_a_predecessor_that_loses_a_race_is_not_overtaken_again(local_backend, monkeypatch):
    """Overtaking must not starve the overtaken: once a published transaction has lost
    ``WITHDRAW_AFTER`` commit races to followers that went first (here one, to keep the script
    short), it withdraws its footprints, and the next follower, even one that cannot conflict
    with it, waits for it instead of going first too."""
    from lakevilla.markers import overtake

    monkeypatch.setattr(overtake, "WITHDRAW_AFTER", 1)
    lake, p, p_thread, release = _queued_behind_a_publisher(local_backend)
    held_again = threading.Event()
    p_store = p.lake.store
    try:
        q = local_backend.lake(wait_timeout=5.0).begin("R")
        q.update("t", set={"value": "value + 5"}, where="id = 6")
        q.commit()  # overtakes P, and takes the version P is about to put
        assert q.stats["predecessors_overtaken"] == 1
        p_store.hook, p_store.repeat = (lambda: held_again.wait(30)), True  # hold P's next put too
        release.set()
        wait_until(lambda: p_store.fired >= 2, "P to lose the race and try again",
                   extra=lambda: dict(p.stats))
        assert p.stats["retries"] >= 1 and p.stats["footprints_withdrawn"] == 1
        q2 = local_backend.lake(wait_timeout=30.0).begin("R")
        q2.update("t", set={"value": "value + 7"}, where="id = 7")  # cannot conflict with P either
        q2_thread = threading.Thread(target=q2.commit)
        q2_thread.start()
        wait_until(lambda: q2.stats["wait_rounds"] >= 1, "Q2 to wait for P",
                   extra=lambda: dict(q2.stats))
        assert q2.stats["predecessors_overtaken"] == 0
    finally:
        release.set()
        held_again.set()
        p_thread.join(30)
    q2_thread.join(30)
    assert p.state == q2.state == "committed" and q2.result.versions["t"] > p.result.versions["t"]
    got = {r["id"]: r["value"] for r in rows(lake.read("t"))}
    assert (got[1], got[2], got[6], got[7]) == (11, 1020, 65, 77)
    assert rows(lake.read("t")) == local_backend.delta_rows("t")


def test_an_overtaking_follower_that_redoes_into_the_predecessors_files_waits_after_all(
        local_backend):
    """Overtaking is decided on the follower's commit as it stands; a redo changes it. Here the
    follower's update matches nothing when it decides to go first, then a concurrent insert
    gives it a row in the predecessor's key range to rewrite: it must wait after all."""
    lake, p, p_thread, release = _queued_behind_a_publisher(local_backend)
    q = local_backend.lake(wait_timeout=30.0).begin("R")
    q.update("t", set={"value": "value + 5"}, where="value >= 1000")  # nothing matches yet
    with lake.transaction("") as x:  # a row for Q, with P's id
        x.insert("t", {"id": [2], "value": [2000]})
    q_thread = threading.Thread(target=q.commit)
    q_thread.start()
    try:
        wait_until(lambda: q.stats["overtakes_revoked"] == 1 and q.stats["wait_rounds"] >= 1,
                   "Q to wait for P", extra=lambda: dict(q.stats))
    finally:
        release.set()
        p_thread.join(30)
        q_thread.join(30)
    assert q.stats["predecessors_overtaken"] >= 1
    assert p.state == q.state == "committed" and q.result.versions["t"] > p.result.versions["t"]
    assert sorted(r["value"] for r in rows(lake.read("t")) if r["id"] == 2) == [1025, 3005]
    key = lambda r: (r["id"], r["value"])  # noqa: E731 - two rows have id 2
    assert (sorted(lake.read("t").to_pylist(), key=key)
            == sorted(local_backend.delta_rows("t"), key=key))


@pytest.mark.parametrize(("ahead", "longest"), [(1, 0.05), (2, 0.1), (40, 0.1)])
def test_a_waiter_pauses_longer_the_longer_the_queue_ahead_of_it(monkeypatch, ahead, longest):
    """Issue 13: n transactions queued ahead of a commit hand over no sooner than n times, so
    the pause between its wait rounds grows to poll_max (0.05 s) per transaction ahead, at most
    0.1 s; a waiter behind one transaction still looks every 0.05 s. The wait policy alone, on a
    stub context and a fake clock: the queue stays for 60 rounds, then clears."""
    from types import SimpleNamespace

    from lakevilla.markers import wait as w

    pauses: list[float] = []
    clock = SimpleNamespace(t=0.0)
    monkeypatch.setattr(w, "time", SimpleNamespace(
        monotonic=lambda: clock.t,
        sleep=lambda d: (pauses.append(d), setattr(clock, "t", clock.t + d))))
    queue = [(v, SimpleNamespace(attempt=f"a{v}.0", txn=f"a{v}", rev=0, expired=lambda now: False))
             for v in range(ahead)]
    rounds = iter(range(61))
    ctx = w.WaitContext(
        txn_id="me", wait_timeout=1e6, poll_max=0.05, shift_timeout=1e6, max_shifts=0,
        now=lambda: clock.t, heartbeat=lambda: None, check_held=lambda tws: None,
        recover=lambda t, v: "running", count=lambda k, n: None, waited=lambda who, s: None,
        predecessors=lambda tws: [queue if next(rounds) < 60 else [] for _ in tws])
    w.MarkerWait().wait(ctx, [SimpleNamespace(name="t", marker=SimpleNamespace(version=ahead))])
    assert len(pauses) == 60
    assert max(pauses) == pytest.approx(longest)
    # it backs off from 2 ms, never faster again while nothing moves
    assert pauses == sorted(pauses)


def _behind_a_running_writer(backend, mode):
    """P holds a running marker on the file of ids 5-8 (and has published no footprint, so
    nobody may overtake it); returns the lake, P, and a client that waits up to 20 s."""
    two_files(backend)
    lake = backend.lake(commit_mode=mode)
    p = lake.begin("R")
    p.update("t", set={"value": "value + 1"}, where="id = 5")
    claim_now(p, "t")
    return lake, p, backend.lake(commit_mode=mode, wait_timeout=20.0)


@pytest.mark.parametrize("kept", [True, False], ids=["rows-kept", "rows-not-kept"])
@pytest.mark.parametrize("mode", MODES)
def test_a_waiting_writer_whose_consumed_read_was_invalidated_aborts_without_finishing_its_wait(
        local_backend, mode, kept, monkeypatch):
    """Issue 13: a writer queued behind a running marker that sees, in a commit landed meanwhile,
    a conflict no redo can fix (a read it already returned, whose rows changed) aborts at once:
    waiting out its predecessor would end in the same abort, and its own marker would hold up
    the writers behind it all that time. Here the predecessor runs on, and the wait limit is
    20 s. Rows kept: the read is run again to see that they changed; not kept (a result too
    large to keep): the conflict alone decides."""
    if not kept:
        monkeypatch.setattr(read_results, "KEEP_MAX_ROWS", 0)
    lake, p, client = _behind_a_running_writer(local_backend, mode)
    t = client.begin("R")
    assert rows(t.read("t", where="id = 1")) == [{"id": 1, "value": 10}]  # returned: consumed
    t.update("t", set={"value": "value + 100"}, where="id = 2")  # its marker is behind P's
    with lake.transaction("") as x:  # a plain Delta writer rewrites the file T read
        x.update("t", set={"value": "value + 1000"}, where="id = 1")
    with pytest.raises(lv.TransactionAborted) as err:
        t.commit()
    assert err.value.reason == "consumed-read", err.value
    assert t.stats["aborted_while_waiting"] == 1
    # P still runs; T's marker closed
    assert open_markers(lake, "t") == [p.tables["t"].marker.version]
    p.commit()
    got = {r["id"]: r["value"] for r in rows(lake.read("t"))}
    assert (got[1], got[2], got[5]) == (1010, 20, 51)
    assert rows(lake.read("t")) == local_backend.delta_rows("t")


@pytest.mark.parametrize("mode", MODES)
def test_a_waiting_writer_with_a_redoable_conflict_waits_and_redoes_once(local_backend, mode):
    """The other side: a conflict that a redo fixes does not abort the waiting writer; it waits
    for its predecessor and redoes once, against everything committed by then."""
    lake, p, client = _behind_a_running_writer(local_backend, mode)
    t = client.begin("R")
    t.update("t", set={"value": "value + 100"}, where="id = 1")  # declarative: redoable
    with lake.transaction("") as x:
        x.update("t", set={"value": "value + 1000"}, where="id = 1")
    t_thread = threading.Thread(target=t.commit)
    t_thread.start()
    try:
        wait_until(lambda: t.stats["wait_rounds"] >= 2, "T to wait for P (and see X's commit)",
                   extra=lambda: dict(t.stats))
        assert t.state == "committing"
    finally:
        p.commit()
        t_thread.join(30)
    assert t.state == "committed", dict(t.stats)
    assert t.stats["aborted_while_waiting"] == 0 and t.stats["redos"] == 1
    got = {r["id"]: r["value"] for r in rows(lake.read("t"))}
    assert (got[1], got[5]) == (1110, 51)
    assert rows(lake.read("t")) == local_backend.delta_rows("t")




def _counting_gets(backend, key: str, reads: list[str]):
    """A client whose every GET of ``key`` (a predecessor's marker) lands in ``reads``."""
    return backend.lake(
        store=HookStore(backend.store(), lambda kind, k: kind == "get" and k == key,
                        lambda: reads.append(key), repeat=True),
        marker_ttl=600.0, wait_timeout=60.0)


def test_a_waiting_marker_holder_reads_its_predecessors_marker_only_at_full_reads(
        local_backend, monkeypatch):
    """Between full reads a round costs one probe of the log: the predecessor's commit lands
    above the markers, and a wait it ends is seen there, so the marker is not read again each
    round, nor by the claim (the follower cached it as running when its statement read the
    table). Here no full read falls inside the wait; the follower still goes on at the commit."""
    from lakevilla.core import markerset

    monkeypatch.setattr(markerset, "FULL_READ_EVERY", 3600.0)
    numbered_table(local_backend)
    owner = local_backend.lake(marker_ttl=600.0)
    t1 = owner.begin("R")
    t1.update("t", set={"value": "value + 1"}, where="id = 1")
    claim_now(t1, "t")
    key = f"t/_delta_log/{t1.tables['t'].marker.version:020d}.json"
    reads: list[str] = []
    counted = _counting_gets(local_backend, key, reads)
    t2 = counted.begin("R")
    t2.update("t", set={"value": "value + 100"}, where="id = 1")
    claim_now(t2, "t")  # a marker holder: it waits for t1's marker at commit
    assert len(reads) == 1  # by its statement's snapshot, not again by its claim
    before = len(reads)
    done = threading.Thread(target=t2.commit)
    done.start()
    wait_until(lambda: t2.stats["wait_rounds"] >= 8, "eight wait rounds")
    assert len(reads) == before  # no round read the marker again
    t1.commit()
    done.join(30)
    assert not done.is_alive() and t2.stats["waits_ended_by_commit"] >= 1
    assert {r["id"]: r["value"] for r in rows(counted.read("t"))}[1] == 111
    assert rows(counted.read("t")) == local_backend.delta_rows("t")


def test_a_waiters_scans_start_past_what_earlier_scans_cleared(local_backend, monkeypatch):
    """A wait round looks for running markers below ours from the last checkpoint it knows of;
    under a crowd checkpoints lag and that scan grew to ~200 versions a round. Once a scan
    found every marker below a version closed, or its owner's commit landed, later scans (and a
    due checkpoint's check for open markers) start there. Here: 25 commits without a
    checkpoint, then a predecessor's marker. Every round after the claim's scan starts at the
    predecessor's marker; once its commit landed, the checkpoint check reads no marker."""
    from lakevilla.core import markerset
    from lakevilla.delta.log import DeltaLog
    from lakevilla.markers.checkpoints import open_marker

    monkeypatch.setattr(markerset, "FULL_READ_EVERY", 3600.0)
    owner = local_backend.lake(marker_ttl=600.0)
    owner.create_table("t", T, properties={"delta.checkpointInterval": "1000"})
    with owner.transaction("") as t:
        t.insert("t", {"id": [1, 2], "value": [10, 20]})
    for i in range(25):
        with owner.transaction("R") as t:
            t.insert("t", {"id": [100 + i], "value": [0]})
    t1 = owner.begin("R")
    t1.update("t", set={"value": "value + 1"}, where="id = 1")
    claim_now(t1, "t")
    m1 = t1.tables["t"].marker.version
    key = f"t/_delta_log/{m1:020d}.json"
    reads: list[str] = []
    counted = _counting_gets(local_backend, key, reads)
    t2 = counted.begin("R")
    t2.update("t", set={"value": "value + 100"}, where="id = 1")
    log = t2.tables["t"].log
    assert log.last_checkpoint_version() < 0  # without the cleared range, scans start below
    scans: list[int] = []
    real = DeltaLog.commits_between

    def spy(self, lo, hi):
        if self is log and t2.tables["t"].marker is not None \
                and hi == t2.tables["t"].marker.version - 1:
            scans.append(lo)
        return real(self, lo, hi)

    monkeypatch.setattr(DeltaLog, "commits_between", spy)
    claim_now(t2, "t")
    done = threading.Thread(target=t2.commit)
    done.start()
    wait_until(lambda: t2.stats["wait_rounds"] >= 4, "four wait rounds")
    assert len(scans) >= 4 and scans[0] < m1 - 1  # the claim's scan reads its whole window
    assert all(lo >= m1 - 1 for lo in scans[1:]), (m1, scans)
    t1.commit()
    done.join(30)
    assert not done.is_alive() and t2.state == "committed"
    owner.flush()  # t1's marker is closed; t2's client still caches it as running
    before = len(reads)
    assert open_marker(log, log.known_latest()) is None
    assert len(reads) == before  # the check read no marker whose owner's commit was seen
    assert {r["id"]: r["value"] for r in rows(counted.read("t"))}[1] == 111
    assert rows(counted.read("t")) == local_backend.delta_rows("t")


def _queue_of_two(backend, clock=None):
    """Owners' R transactions t1 and t2 hold running markers m1 < m2 on t (other rows); a
    follower (whose GETs of either marker are counted in ``reads``) holds one above them and
    commits in a thread, waiting for both. -> (t1, t2, follower txn, its thread, reads, keys)."""
    numbered_table(backend)
    kw = {"clock": clock} if clock is not None else {}
    owners = []
    for i in (1, 2):
        t = backend.lake(marker_ttl=8.0 if clock else 600.0, **kw).begin("R")
        t.update("t", set={"value": "value + 1"}, where=f"id = {i}")
        claim_now(t, "t")
        owners.append(t)
    keys = [f"t/_delta_log/{t.tables['t'].marker.version:020d}.json" for t in owners]
    reads: dict[str, int] = dict.fromkeys(keys, 0)

    def count(kind: str, key: str) -> bool:
        if kind == "get" and key in reads:
            reads[key] += 1
        return False

    follower = backend.lake(store=HookStore(backend.store(), count, lambda: None, repeat=True),
                            marker_ttl=8.0 if clock else 600.0, wait_timeout=60.0, **kw)
    t3 = follower.begin("R")
    t3.update("t", set={"value": "value + 100"}, where="id = 3")
    claim_now(t3, "t")
    done = threading.Thread(target=t3.commit)
    done.start()
    return owners[0], owners[1], t3, done, reads, keys


def _finish_queue(t1, t2, t3, done, backend) -> None:
    for t in (t1, t2):
        if t.state == "active":
            t.commit()
    done.join(30)
    assert not done.is_alive() and t3.state == "committed"
    got = {r["id"]: r["value"] for r in rows(backend.lake().read("t"))}
    assert (got[1], got[2], got[3]) == (11, 21, 130)


def test_a_full_read_reads_markers_only_up_to_the_lowest_one_it_must_wait_for(
        local_backend, monkeypatch):
    """While the lowest predecessor runs, the wait lasts whatever the ones above do: a full read
    re-reads markers upwards up to the lowest one it may not overtake and keeps the state of
    those above as cached; every marker only at a whole read (here every fourth full read).
    Once the lowest has committed, the one above is the lowest and is read."""
    from lakevilla.core import markerset

    monkeypatch.setattr(markerset, "FULL_READ_EVERY", 0.0)  # every round a full read
    monkeypatch.setattr(markerset, "WHOLE_READ_EVERY", 4)
    t1, t2, t3, done, reads, (k1, k2) = _queue_of_two(local_backend)
    wait_until(lambda: t3.stats["wait_rounds"] >= 2, "two wait rounds")
    r1, r2, n = reads[k1], reads[k2], t3.stats["wait_rounds"]
    wait_until(lambda: t3.stats["wait_rounds"] >= n + 16, "sixteen more wait rounds")
    n = t3.stats["wait_rounds"] - n
    assert reads[k1] - r1 >= n - 2  # the lowest: every round
    assert 2 <= reads[k2] - r2 <= n // 4 + 2, (reads[k2] - r2, n)  # above it: whole reads only
    t1.commit()
    r2 = reads[k2]
    wait_until(lambda: reads[k2] > r2, "the marker above read once it is the lowest")
    _finish_queue(t1, t2, t3, done, local_backend)


def test_a_waiter_never_takes_a_live_predecessors_marker_for_expired(local_backend, monkeypatch):
    """A marker above the lowest predecessor is kept as cached between whole reads; a cached
    state that looks expired is read again first (its owner may have beaten since), so a waiter
    never tries to recover a live marker for a stale copy (a GET each round, for nothing). The
    lake's clock is moved past the claims' expiry once both owners have beaten; no whole read
    comes after the wait's first."""
    from lakevilla.core import markerset

    monkeypatch.setattr(markerset, "FULL_READ_EVERY", 0.0)
    monkeypatch.setattr(markerset, "WHOLE_READ_EVERY", 10**6)
    now = [time.time()]
    t1, t2, t3, done, reads, (k1, k2) = _queue_of_two(local_backend, clock=lambda: now[0])
    wait_until(lambda: t3.stats["wait_rounds"] >= 2, "two wait rounds")
    now[0] += 6.0  # ttl 8: still alive as claimed
    for t in (t1, t2):
        t._parts.markers.heartbeat(force=True)
    r2 = reads[k2]
    now[0] += 4.0  # past the claims' expiry, not the beats'
    rounds = t3.stats["wait_rounds"]
    wait_until(lambda: t3.stats["wait_rounds"] >= rounds + 5, "five more rounds")
    assert t3.stats["recovered_running"] == 0 and reads[k2] > r2
    _finish_queue(t1, t2, t3, done, local_backend)
