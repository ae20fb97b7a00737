"""Issue 10, finding by finding: a decided commit is never undone, maintenance never
touches live work. Each test reproduces one way the lake used to lose data."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.complex_txn import record as records
from lakevilla.delta.actions import Commit
from lakevilla.markers.marker import commit_txn, marker_of
from lakevilla.store import (
    FaultInjectingStore,
    FaultPlan,
    NotFound,
    PreconditionFailed,
    RetryingStore,
    SimulatedCrash,
    StoreWrapper,
    TransientStoreError,
    open_store,
)
from lakevilla.store.s3 import S3Store
from tests.conftest import make_bucket, rows, s3_options
from tests.helpers import (
    ConnectGate,
    HookStore,
    accounts,
    claim_now,
    clock_at,
    crash_two_table_commit,
    dying_lake,
    entries_landed,
    open_markers,
    value_of,
)

TTL = 5.0
T = pa.schema([("id", pa.int64()), ("value", pa.int64())])
LATER = 10_000.0


def _later_clock():
    return time.time() + LATER


def _setup(backend, tables=("t",), **kw):
    lake = backend.lake(**kw)
    for i, t in enumerate(tables):
        lake.create_table(t, T)
        with lake.transaction("") as txn:
            txn.insert(t, {"id": [10 * i + 1, 10 * i + 2], "value": [0, 0]})
    return lake


def _values(lake, table):
    return {r["id"]: r["value"] for r in rows(lake.read(table))}


def _every_version_has_its_files(backend, table):
    """Every data file that any version of ``table`` adds still exists."""
    lake = backend.lake()
    log = lake._client.log(table)
    present = {m.key for m in backend.store().list(table + "/")}
    for v, c in log.commits_between(-1, log.latest_version()):
        for a in c.adds:
            assert f"{table}/{a.path}" in present, f"{table}@{v} references {a.path}, which is gone"


def _only(kind, suffix):
    return lambda k, key: k == kind and key.endswith(suffix)


# -- 1. a landed or possibly landed commit is never undone ---------------------------------

def test_a_failed_checkpoint_after_the_commit_landed_is_counted_not_undone(local_backend):
    lake = _setup(local_backend)
    # versions 2..7: the R commit below lands at 9, its marker at 8; then 10 is due
    for i in range(6):
        with lake.transaction("") as txn:
            txn.insert("t", {"id": [100 + i], "value": [i]})
    full = local_backend.lake(store=FaultInjectingStore(local_backend.store(), FaultPlan(
        fail_before={1, 2}, kinds=("put",),
        predicate=lambda k, key: key.endswith(".checkpoint.parquet"))))
    with full.transaction("") as txn:
        txn.insert("t", {"id": [200], "value": [0]})  # version 8
    txn = full.begin("R")
    txn.update("t", set={"value": "value + 1"}, where="id = 1")
    claim_now(txn, "t")  # queued: its commit lands above its marker
    assert txn.tables["t"].marker.version == 9
    res = txn.commit()  # lands at 10, where a checkpoint is due: the disk is full
    assert res.versions == {"t": 10}
    full.flush()  # the marker close and the checkpoint run after commit() returned
    assert txn.stats["post_commit_failures_checkpoint"] == 1
    assert _values(local_backend.lake(), "t")[1] == 1
    assert rows(local_backend.lake().read("t")) == local_backend.delta_rows("t")
    _every_version_has_its_files(local_backend, "t")
    # the next commit retries the missed checkpoint (and fails again)
    with full.transaction("") as t2:
        t2.insert("t", {"id": [201], "value": [0]})
    assert t2.stats["post_commit_failures_checkpoint"] == 1
    with full.transaction("") as t3:  # and the one after writes it
        t3.insert("t", {"id": [202], "value": [0]})
    assert local_backend.store().exists("t/_delta_log/00000000000000000012.checkpoint.parquet")
    assert rows(local_backend.lake().read("t")) == local_backend.delta_rows("t")


@pytest.mark.parametrize("mode", ["tail", "in_place"])
def test_an_r_commit_whose_outcome_is_unknown_deletes_nothing(local_backend, mode):
    """The table commit (or fill) was applied, then the store stayed unreachable for that key:
    the client cannot learn the outcome, reports CommitPendingError, and undoes nothing."""
    _setup(local_backend, commit_mode=mode)
    # the tail commit (R holds no marker) or the fill of the marker
    target = "00000000000000000002.json"
    kind = "put_if_absent" if mode == "tail" else "put_if_match"
    dying = local_backend.lake(store=FaultInjectingStore(local_backend.store(), FaultPlan(
        exhaust_after={1}, predicate=_only(kind, target))), commit_mode=mode, marker_ttl=5.0)
    txn = dying.begin("R")
    txn.update("t", set={"value": "value + 1"}, where="id = 1")
    with pytest.raises(lv.CommitPendingError) as info:
        txn.commit()
    assert info.value.decided is False and txn.state == "in-doubt"
    with pytest.raises(lv.TransactionStateError):
        txn.abort()
    dying.flush()
    _every_version_has_its_files(local_backend, "t")
    assert _values(local_backend.lake(), "t")[1] == 1  # it had landed
    local_backend.lake(clock=_later_clock).recover()
    fresh = local_backend.lake()
    assert open_markers(fresh, "t") == [] and _values(fresh, "t")[1] == 1
    assert rows(fresh.read("t")) == local_backend.delta_rows("t")


@pytest.mark.parametrize("features, key", [("R,CT", "_lakevilla/txns/"), ("I", "_lakevilla/gvl/")])
def test_a_multi_table_decision_whose_outcome_is_unknown_is_settled_by_recovery(
        local_backend, features, key):
    """The record (CT) or the announcement (I) was written but the reply lost and the key stayed
    unreachable: no file deleted, no marker rewritten as aborted; recovery rolls it forward."""
    _setup(local_backend, tables=("a", "b"))
    # a and b join the global log first, so the dying writer's first global-log write is its
    # announcement
    with local_backend.lake().transaction("I") as known:
        known.read("a")
        known.read("b")
    dying = local_backend.lake(store=FaultInjectingStore(local_backend.store(), FaultPlan(
        exhaust_after={1}, kinds=("put_if_absent",),
        predicate=lambda k, key_: key_.startswith(key))),
        marker_ttl=5.0)
    txn = dying.begin(features)
    txn.update("a", set={"value": "value - 5"}, where="id = 1")
    txn.update("b", set={"value": "value + 5"}, where="id = 11")
    with pytest.raises(lv.CommitPendingError):
        txn.commit()
    dying.flush()
    fresh = local_backend.lake()
    for t in ("a", "b"):
        running = [marker_of(c)
                   for v, c in fresh._client.log(t).commits_between(1, fresh.version(t))
                   if marker_of(c) is not None]
        assert [m.state for m in running] == ["running"], (
            "the abort path must not touch the markers")
        _every_version_has_its_files(local_backend, t)
    local_backend.lake(clock=_later_clock, marker_ttl=5.0).recover()
    fresh = local_backend.lake()
    assert _values(fresh, "a")[1] == -5 and _values(fresh, "b")[11] == 5
    for t in ("a", "b"):
        assert open_markers(fresh, t) == []
        assert rows(fresh.read(t)) == local_backend.delta_rows(t)
        _every_version_has_its_files(local_backend, t)


# -- 2. maintenance consults live state and keeps a safe retention -----------------------------

def test_abandoned_file_deletion_keeps_a_transaction_open_longer_than_a_marker_ttl(local_backend):
    lake = _setup(local_backend, marker_ttl=0.05)
    txn = lake.begin("R")
    txn.insert("t", {"id": [3], "value": [3]})
    # the transaction stays open longer than two marker ttls: time itself is the condition
    time.sleep(0.2)
    # the default retention: days
    assert local_backend.lake(marker_ttl=0.05).maintenance.delete_abandoned_files() == []
    txn.commit()
    assert sorted(_values(local_backend.lake(), "t")) == [1, 2, 3]
    _every_version_has_its_files(local_backend, "t")


def test_a_retention_shorter_than_the_longest_transaction_is_refused_unless_forced(local_backend):
    lake = _setup(local_backend, max_transaction_age=600)
    for call in (lambda: lake.maintenance.abandoned_files(min_age=60),
                 lambda: lake.maintenance.delete_abandoned_files(min_age=599),
                 lambda: lake.maintenance.cleanup(older_than=0)):
        with pytest.raises(lv.InvalidArgumentError, match="max_transaction_age"):
            call()
    assert lake.maintenance.abandoned_files(min_age=600) == []
    assert lake.maintenance.abandoned_files(min_age=0, force=True) == []


def test_forced_deletion_still_keeps_files_that_live_transactions_name(local_backend):
    """min_age=0 (forced): files of a running transaction (its sublogs), of a decided CT
    transaction not yet written to its tables (COMMITTING record) and of an announced I
    transaction not yet written (pending global-log write) all stay."""
    _setup(local_backend, tables=("a", "b", "c", "d", "e"))
    running = local_backend.lake().begin("R")
    running.insert("e", {"id": [5], "value": [5]})

    def dies_after(prefix):
        return local_backend.lake(store=FaultInjectingStore(local_backend.store(), FaultPlan(
            crash_after=1, kinds=("put_if_absent",),
            predicate=lambda k, key: key.startswith(prefix))),
            marker_ttl=5.0)

    # c and d join the global log before the crash
    with local_backend.lake().transaction("I") as known:
        known.insert("c", {"id": [100], "value": [100]})
        known.insert("d", {"id": [100], "value": [100]})

    for features, prefix, tables in (("R,CT", "_lakevilla/txns/", ("a", "b")),
                                     ("I", "_lakevilla/gvl/0", ("c", "d"))):
        txn = dies_after(prefix).begin(features)
        txn.insert(tables[0], {"id": [7], "value": [7]})
        txn.insert(tables[1], {"id": [7], "value": [7]})
        with pytest.raises(SimulatedCrash):
            txn.commit()
    # its entry names its file (at the tail it goes out behind the statement)
    entries_landed(running)
    maint = local_backend.lake(max_transaction_age=1.0)
    assert maint.maintenance.delete_abandoned_files(min_age=0, force=True) == []
    running.commit()
    local_backend.lake(clock=_later_clock, marker_ttl=5.0).recover()
    fresh = local_backend.lake()
    for t in ("a", "b", "c", "d", "e"):
        assert (5 if t == "e" else 7) in _values(fresh, t)
        assert rows(fresh.read(t)) == local_backend.delta_rows(t)
        _every_version_has_its_files(local_backend, t)


def test_a_transaction_older_than_max_transaction_age_cannot_commit(local_backend):
    now = [time.time()]
    lake = _setup(local_backend, max_transaction_age=60, clock=lambda: now[0])
    for features in ("R", "R,CT", "I"):
        txn = lake.begin(features)
        txn.update("t", set={"value": "value + 1"}, where="id = 1")
        now[0] += 61  # it stayed open longer than maintenance promises to keep its files
        with pytest.raises(lv.TransactionAborted) as info:
            txn.commit()
        assert info.value.reason == "too-old"
    assert _values(local_backend.lake(), "t")[1] == 0


def test_cleanup_keeps_committing_records_and_live_sublogs(local_backend):
    _setup(local_backend, tables=("a", "b", "c"))
    live = local_backend.lake().begin("R")
    live.update("c", set={"value": "1"}, where="id = 21")
    claim_now(live, "c")  # holds a live marker and a sublog
    dying = local_backend.lake(store=FaultInjectingStore(local_backend.store(), FaultPlan(
        crash_after=1, kinds=("put_if_absent",),
        predicate=lambda k, key: key.startswith("_lakevilla/txns/"))))
    decided = dying.begin("R,CT")
    decided.update("a", set={"value": "2"}, where="id = 2")
    decided.update("b", set={"value": "2"}, where="id = 11")
    with pytest.raises(SimulatedCrash):
        decided.commit()
    gone = local_backend.lake(marker_ttl=0.01).begin("R")
    gone.update("c", set={"value": "4"}, where="id = 22")
    claim_now(gone, "c")  # its sublog stays, its marker expires at once
    gone.lake.heartbeats.forget(gone)
    time.sleep(0.05)  # the 10 ms marker ttl passes: time itself is the condition
    entries_landed(live, gone)
    done = local_backend.lake().maintenance.cleanup(older_than=0, force=True)
    assert done["sublogs"] == 1  # gone's: an expired marker and no decision
    store = local_backend.store()
    assert records.read(store, decided.attempt).state == records.COMMITTING
    assert any(True for _ in store.list(f"_lakevilla/txns/{decided.id}/"))
    assert any(True for _ in store.list(f"_lakevilla/txns/{live.id}/"))
    assert not any(True for _ in store.list(f"_lakevilla/txns/{gone.id}/"))
    local_backend.lake(clock=_later_clock).recover(tables=["a", "b"])
    live.commit()
    assert (_values(local_backend.lake(), "b")[11] == 2
            and _values(local_backend.lake(), "c")[21] == 1)
    done = local_backend.lake().maintenance.cleanup(older_than=0, force=True)
    assert done["records"] == 1 and records.read(store, decided.attempt) is None


# -- 3. resume honours decisions ----------------------------------------------------------------

def test_resume_rolls_a_decided_transaction_forward_instead_of_re_running_it(local_backend):
    _setup(local_backend, tables=("a", "b"))
    dying = local_backend.lake(store=FaultInjectingStore(local_backend.store(), FaultPlan(
        crash_after=1, kinds=("put_if_absent",),
        predicate=lambda k, key: key.startswith("_lakevilla/txns/"))),
        marker_ttl=5.0)
    txn = dying.begin("R,CT")
    txn.update("a", set={"value": "value - 5"}, where="id = 1")
    txn.update("b", set={"value": "value + 5"}, where="id = 11")
    with pytest.raises(SimulatedCrash):
        txn.commit()
    later = local_backend.lake(clock=_later_clock, marker_ttl=5.0)
    with pytest.raises(lv.TransactionStateError, match="rolled forward"):
        later.resume(txn.id)
    later.recover()
    fresh = local_backend.lake()
    assert _values(fresh, "a")[1] == -5 and _values(fresh, "b")[11] == 5  # once, not twice
    for t in ("a", "b"):
        assert open_markers(fresh, t) == []


def test_resume_refuses_while_the_owners_marker_is_alive(local_backend):
    lake = _setup(local_backend, marker_ttl=30.0)
    owner = lake.begin("R")
    owner.update("t", set={"value": "value + 1"}, where="id = 1")
    claim_now(owner, "t")
    entries_landed(owner)  # at the tail its entry goes out behind the statement: resume needs it
    with pytest.raises(lv.TransactionStateError, match="live marker"):
        local_backend.lake(marker_ttl=30.0).resume(owner.id)
    owner.commit()  # the owner was only slow: its marker is still its own
    assert _values(local_backend.lake(), "t")[1] == 1
    assert open_markers(lake, "t") == []


# -- 4. a heartbeat never writes over an in-place fill ------------------------------------------

class _BeatOnRelease:
    """Stands in for a transaction's ``mlock``: once ``armed``, its next release runs a
    heartbeat in another thread, to completion, before the releasing thread goes on."""
    def __init__(self, txn) -> None:
        self._lock = threading.RLock()
        self.txn, self.armed, self.fired = txn, False, False

    def acquire(self, blocking=True, timeout=-1):
        return self._lock.acquire(blocking, timeout)

    def release(self):
        self._lock.release()
        if self.armed and not self.fired:
            self.fired = True
            beat = threading.Thread(target=self.txn.heartbeat, kwargs={"force": True})
            beat.start()
            beat.join(30)

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


class _ArmAfterFill(StoreWrapper):
    def __init__(self, inner, key) -> None:
        super().__init__(inner)
        self.key, self.lock = key, None

    def put_if_match(self, key, data, etag):
        out = self.inner.put_if_match(key, data, etag)
        if key == self.key and commit_txn(Commit.from_bytes(data)) is not None:
            self.lock.armed = True  # the fill landed: the commit path releases its lock next
        return out


def test_a_heartbeat_right_after_an_in_place_fill_does_not_overwrite_it(local_backend):
    _setup(local_backend)
    store = _ArmAfterFill(local_backend.store(), "t/_delta_log/00000000000000000002.json")
    lake = local_backend.lake(store=store, commit_mode="in_place")
    txn = lake.begin("R")
    txn.update("t", set={"value": "value + 1"}, where="id = 1")
    assert txn.tables["t"].marker.version == 2
    store.lock = txn._ctx.mlock = _BeatOnRelease(txn)
    assert txn.commit().versions == {"t": 2}
    assert store.lock.fired
    c, _ = local_backend.lake()._client.log("t").read_commit_raw(2)
    assert commit_txn(c) == txn.attempt, "the fill was overwritten by a running marker"
    assert _values(local_backend.lake(), "t")[1] == 1
    assert rows(local_backend.lake().read("t")) == local_backend.delta_rows("t")


# -- 4b. nested tables --------------------------------------------------------------------------

def test_abandoned_files_of_a_table_exclude_tables_nested_inside_it(local_backend):
    lake = _setup(local_backend, tables=("a", "a/b"))
    assert lake.tables() == ["a", "a/b"]
    assert lake.maintenance.delete_abandoned_files(min_age=0, force=True) == []
    assert lake.maintenance.delete_abandoned_files("a", min_age=0, force=True) == []
    assert sorted(_values(local_backend.lake(), "a/b")) == [11, 12]
    assert local_backend.delta_rows("a/b") == rows(local_backend.lake().read("a/b"))


# -- 5. lake.run without markers ----------------------------------------------------------------

def test_run_without_markers_never_repeats_statements_that_committed(local_backend):
    _setup(local_backend)
    other = local_backend.lake()

    def conflicting_update():
        with other.transaction("") as t2:
            t2.update("t", set={"value": "value + 100"}, where="id = 1")

    lake = local_backend.lake(store=HookStore(local_backend.store(),
                                              _only("put_if_absent", "00000000000000000003.json"),
                                              conflicting_update))

    def block(txn):
        txn.insert("t", {"id": [3], "value": [3]})  # commits at version 2
        txn.update("t", set={"value": "value + 1"}, where="id = 1")  # loses version 3 to a conflict

    with pytest.raises(lv.PartialCommitError) as info:
        lake.run(block, features="")
    assert (info.value.committed == {"t": 2}
            and isinstance(info.value.__cause__, lv.TransactionAborted))
    assert _values(local_backend.lake(), "t") == {1: 100, 2: 0, 3: 3}  # the insert once, not twice
    # a block that aborts before anything committed is still re-run
    calls = []

    def flaky(txn):
        calls.append(1)
        if len(calls) == 1:
            raise lv.TransactionAborted("retry me")
        txn.insert("t", {"id": [4], "value": [4]})

    lake.run(flaky, features="")
    assert len(calls) == 2 and 4 in _values(local_backend.lake(), "t")


# -- 6. S3 errors, heartbeats, checkpoints --------------------------------------------------------

def test_s3_409_conditional_request_conflict_is_retried(moto_endpoint):
    from benchmarks.common import LatencyProxy

    bucket = make_bucket(moto_endpoint)
    seen = []

    def conflict_once(method, path, headers):
        if (method == "PUT" and "/k-" in path
                and (headers.get("If-None-Match") or headers.get("If-Match"))):
            seen.append(path)
            if len(seen) in (1, 3):
                return "conflict"
        return None

    proxy = LatencyProxy(moto_endpoint, faults=conflict_once)
    try:
        s = RetryingStore(S3Store(f"s3://{bucket}/p", s3_options(proxy.url)), base_delay=0.001)
        etag = s.put_if_absent("k-1", b"one")  # 409, then the retry lands
        s.put_if_match("k-1", b"two", etag)  # 409, then the retry lands
        assert s.get("k-1").data == b"two" and len(seen) == 4
        with pytest.raises(PreconditionFailed):
            s.put_if_absent("k-1", b"three")  # a real conflict stays one
    finally:
        proxy.close()


def test_s3_errors_while_reading_a_get_body_are_retried(moto_endpoint):
    from benchmarks.common import LatencyProxy

    bucket = make_bucket(moto_endpoint)
    open_store(f"s3://{bucket}/p", s3_options(moto_endpoint)).put("big", b"x" * 100_000)
    gets = []

    def truncate_first(method, path, headers):
        if method == "GET" and path.split("?")[0].endswith("/big"):
            gets.append(path)
            return "truncate" if len(gets) == 1 else None
        return None

    proxy = LatencyProxy(moto_endpoint, faults=truncate_first)
    try:
        raw = S3Store(f"s3://{bucket}/p", s3_options(proxy.url))
        with pytest.raises(TransientStoreError):
            raw.get("big")  # the body breaks off: a retryable error, not a botocore one
        assert RetryingStore(raw, base_delay=0.001).get("big").data == b"x" * 100_000
    finally:
        proxy.close()


class _OpenGateOnError(StoreWrapper):
    def __init__(self, inner, gate) -> None:
        super().__init__(inner)
        self.gate, self.errors = gate, 0

    def get(self, key):
        try:
            return self.inner.get(key)
        except TransientStoreError:
            self.errors += 1
            self.gate.open()
            raise


def test_s3_connect_timeouts_are_retried(moto_endpoint):
    bucket = make_bucket(moto_endpoint)
    open_store(f"s3://{bucket}/p", s3_options(moto_endpoint)).put("k", b"v")
    gate = ConnectGate(moto_endpoint)
    try:
        opts = {**s3_options(gate.url), "connect_timeout": "300ms"}
        inner = _OpenGateOnError(S3Store(f"s3://{bucket}/p", opts), gate)
        assert RetryingStore(inner, base_delay=0.001).get("k").data == b"v"
        assert inner.errors == 1  # the first attempt timed out connecting, the retry went through
    finally:
        gate.close()


def test_the_heartbeat_keeps_beating_after_a_failed_beat(local_backend):
    _setup(local_backend)
    failing = FaultInjectingStore(local_backend.store(), FaultPlan(fail_before=set(range(1, 7)),
                                                                    kinds=("put_if_match",)))
    lake = local_backend.lake(store=failing, marker_ttl=2.0)
    txn = lake.begin("R")
    txn.update("t", set={"value": "value + 1"}, where="id = 1")
    claim_now(txn, "t")
    h = txn.tables["t"].marker
    log = local_backend.lake()._client.log("t")
    first = marker_of(log.read_commit_raw(h.version)[0]).expires
    deadline = time.monotonic() + 20
    while marker_of(log.read_commit_raw(h.version)[0]).expires == first:
        assert time.monotonic() < deadline, (
            "the heartbeat gave up on the transaction after one failed beat")
        time.sleep(0.05)  # awaiting the background heartbeat
    assert txn.stats["heartbeat_failures"] >= 1
    txn.commit()
    assert _values(local_backend.lake(), "t")[1] == 1


class _FillAtGet(StoreWrapper):
    """Before the ``nth`` GET of ``key``, run ``fill`` (another client's in-place commit)."""
    def __init__(self, inner, key, nth, fill) -> None:
        super().__init__(inner)
        self.key, self.nth, self.fill, self.gets, self.fired = key, nth, fill, 0, False

    def get(self, key):
        if key == self.key:
            self.gets += 1
            if self.gets == self.nth:
                self.fired = True
                self.fill()
        return self.inner.get(key)


@pytest.mark.parametrize("nth", [1, 2, None])
def test_a_checkpoint_never_hides_an_in_place_fill_that_lands_while_it_is_taken(local_backend, nth):
    """Whichever of the checkpoint's reads of the open marker the fill lands before (or
    after all of them), every fresh reader sees the filled commit."""
    lake = _setup(local_backend, commit_mode="in_place")
    t1 = lake.begin("R")
    t1.update("t", set={"value": "value + 1"}, where="id = 1")
    m = t1.tables["t"].marker.version
    t3 = lake.begin("R")
    t3.update("t", set={"value": "value + 7"}, where="id = 2")  # a marker above t1's, then given up
    t3.abort()
    maint_store = _FillAtGet(local_backend.store(), f"t/_delta_log/{m:020d}.json", nth, t1.commit)
    try:
        local_backend.lake(store=maint_store).maintenance.checkpoint("t")
    except lv.InvalidArgumentError:
        assert not maint_store.fired  # refused above the open marker: fine, nothing was written
    if not maint_store.fired:
        t1.commit()
    assert _values(local_backend.lake(), "t") == {1: 1, 2: 0}
    assert local_backend.delta_rows("t") == [{"id": 1, "value": 1}, {"id": 2, "value": 0}]


def test_unknown_get_errors_are_not_misread_as_missing(local_backend):
    """Reading back a write whose reply was lost: a failing read is not 'absent'."""
    from lakevilla.store import OutcomeUnknown, settle_create

    store = FaultInjectingStore(local_backend.store(),
                                FaultPlan(exhaust_after={1}, kinds=("put_if_absent",)))
    with pytest.raises(TransientStoreError):
        store.put_if_absent("x/y.json", b"1")
    with pytest.raises(OutcomeUnknown):
        settle_create(store, "x/y.json", b"1")
    assert settle_create(local_backend.store(), "x/y.json", b"1") is not None  # healthy: it is ours
    assert settle_create(local_backend.store(), "x/y.json", b"2") is None  # someone else's bytes
    with pytest.raises(NotFound):
        local_backend.store().get("x/missing")


def test_cleanup_keeps_the_sublogs_of_a_decided_unpublished_transaction(local_backend):
    """Its markers expired (no live client protects it) but its record says COMMITTING:
    clean-up keeps record and sublogs, so ``resume`` still finds and rolls it forward."""
    accounts(local_backend)
    dead = crash_two_table_commit(dying_lake(local_backend, "_lakevilla/txns/", after=True), "R,CT")
    later = local_backend.lake(marker_ttl=TTL, clock=clock_at(10_000.0))
    done = later.maintenance.cleanup(older_than=0, force=True)
    assert done["sublogs"] == 0 and done["records"] == 0
    assert len(list(later.store.list(f"_lakevilla/txns/{dead.id}/"))) == 2
    with pytest.raises(lv.TransactionStateError, match="rolled forward"):
        later.resume(dead.id)
    assert (value_of(later, "a"), value_of(later, "b")) == (-5, 5)


def test_leaving_the_block_after_an_in_doubt_commit_undoes_nothing(local_backend):
    """``commit()`` inside a ``with`` block raised CommitPendingError (the table commit was
    applied, the reply lost): leaving the block with that error must not undo anything."""
    accounts(local_backend, tables=("t",))
    dying = local_backend.lake(store=FaultInjectingStore(local_backend.store(), FaultPlan(
        exhaust_after={1}, predicate=_only("put_if_absent", "00000000000000000002.json"))),
        marker_ttl=TTL)
    with pytest.raises(lv.CommitPendingError):
        with dying.transaction("R") as txn:
            txn.update("t", set={"value": "value + 1"}, where="id = 1")
            txn.commit()
    assert txn.state == "in-doubt"
    dying.flush()
    _every_version_has_its_files(local_backend, "t")
    assert value_of(local_backend.lake(), "t") == 1
    # its commit stands
    assert commit_txn(local_backend.lake()._client.log("t").read_commit(2)) == txn.attempt
