"""What README.md promises and no other test checked (issue 18, point 7), each boundary
from both sides: markers expire at ``marker_ttl``, clean-up keeps what is younger than
its retention, the global log keeps ``keep_global`` entries; a transaction (not only
``recover()``) finishes or undoes the CT and I transactions it meets; the automatic
checkpoint stays below an open marker; decisions warn about conflicts they cannot undo;
the S3 emulation, ``LocalStore(fsync=True)`` and ``make demo``."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.complex_txn import record as records
from lakevilla.markers.marker import FREED, RUNNING, commit_txn, free_stalled, marker_of
from lakevilla.recovery import sublog as sublogs
from lakevilla.store import FaultInjectingStore, FaultPlan, SimulatedCrash
from tests.conftest import rows
from tests.helpers import HalfPublished, claim_now, claim_when, holds_marker, open_markers

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])
TTL = 5.0
ROOT = Path(__file__).resolve().parents[2]


def _at(offset: float):
    return lambda: time.time() + offset


def _setup(backend, tables=("a", "b"), **kw):
    lake = backend.lake(**kw)
    for t in tables:
        lake.create_table(t, T)
        with lake.transaction("") as txn:
            txn.insert(t, {"id": [1, 2], "value": [0, 0]})
    return lake


def _value(lake, table, id_=1):
    return lake.read(table, where=f"id = {id_}").column("value")[0].as_py()




def _dying(backend, key_prefix: str, *, after: bool):
    """A client whose store dies at its first put-if-absent under ``key_prefix``."""
    plan = FaultPlan(kinds=("put_if_absent",), predicate=lambda k, key: key.startswith(key_prefix),
                     **({"crash_after": 1} if after else {"crash_before": 1}))
    return backend.lake(store=FaultInjectingStore(backend.store(), plan), marker_ttl=TTL)


def _crash_two_table_commit(lake, features):
    txn = lake.begin(features)
    txn.update("a", set={"value": "value - 5"}, where="id = 1")
    txn.update("b", set={"value": "value + 5"}, where="id = 1")
    with pytest.raises(SimulatedCrash):
        txn.commit()
    return txn


def _join_global_log(backend):
    with backend.lake().transaction("I") as r:  # both tables join: the next entry is a decision
        r.read("a")
        r.read("b")


# -- marker_ttl: both sides ----------------------------------------------------------------------

def test_a_marker_is_stalled_only_after_marker_ttl(local_backend):
    lake = _setup(local_backend, tables=("a",), marker_ttl=TTL)
    owner = lake.begin("R")
    owner.update("a", set={"value": "1"}, where="id = 1")
    claim_now(owner, "a")
    lake._client.heartbeats.forget(owner)  # no heartbeat from now on
    v = owner.tables["a"].marker.version
    early = local_backend.lake(marker_ttl=TTL, clock=_at(TTL - 1.0)).recover()
    assert [r[:2] for r in early.running] == [("a", v)] and early.freed == []
    assert open_markers(lake, "a") == [v]
    late = local_backend.lake(marker_ttl=TTL, clock=_at(TTL + 1.0)).recover()
    assert [r[:2] for r in late.freed] == [("a", v)]
    assert marker_of(lake._client.log("a").read_commit_raw(v)[0]).state == FREED


def test_freeing_a_marker_that_moved_fails(local_backend):
    """Recovery frees a marker by a conditional write on the etag it read: once the owner
    rewrote the marker (a heartbeat, a fill), the stale free must fail and change nothing."""
    lake = _setup(local_backend, tables=("a",), marker_ttl=TTL)
    owner = lake.begin("R")
    owner.update("a", set={"value": "1"}, where="id = 1")
    claim_now(owner, "a")
    v = owner.tables["a"].marker.version
    log = local_backend.lake()._client.log("a")
    seen, etag = log.read_commit_raw(v)
    owner.heartbeat(force=True)  # the owner is alive after all: it rewrites its marker
    assert not free_stalled(log, v, marker_of(seen), etag, FREED, "expired")
    assert marker_of(log.read_commit_raw(v)[0]).state == RUNNING
    assert marker_of(seen).state == RUNNING  # nor the marker as it was read (parsed once, shared)
    owner.commit()
    assert _value(lake, "a") == 1 and open_markers(lake, "a") == []


def test_resumed_physical_operation_that_conflicts_aborts(local_backend):
    """A physical sublog entry names files, not a statement: if a newer commit conflicts with
    it, resume cannot redo it and must abort, keeping the newer commit."""
    lake = _setup(local_backend, tables=("a",), marker_ttl=TTL, commit_mode="in_place")
    stalled = lake.begin("R")
    # in place R claims at its first write: that entry goes out with the claim and carries its
    # statement; the second, with no marker before ours, is physical
    stalled.update("a", set={"value": "value + 0"}, where="id = 1")
    stalled.update("a", set={"value": "value + 1"}, where="id = 1")
    assert [e.kind for e in sublogs.read_all(lake.store, stalled.id)] == ["logical", "physical"]
    lake._client.heartbeats.forget(stalled)
    with local_backend.lake().transaction("") as w:  # ignores markers
        w.update("a", set={"value": "value + 100"}, where="id = 1")
    resumed = local_backend.lake(marker_ttl=TTL, clock=_at(10_000.0)).resume(stalled.id)
    with pytest.raises(lv.TransactionAborted) as info:
        resumed.commit()
    assert info.value.reason == "physical-conflict"
    assert _value(local_backend.lake(), "a") == 100
    assert rows(lake.read("a")) == local_backend.delta_rows("a")


def test_a_three_way_cycle_is_broken_by_a_shift(local_backend):
    """T1 waits for T2 (table b), T2 for T3 (c), T3 for T1 (a): only transitive dependency
    lists (rule II) show the cycle; a shift breaks it as a cycle, not through the
    no-progress fallback (rule IV)."""
    lake = _setup(local_backend, tables=("a", "b", "c"), shift_timeout=15.0, wait_timeout=60.0)
    watch = local_backend.lake()
    box: dict[str, lv.Transaction] = {}

    def owns_all() -> bool:
        return all(holds_marker(watch, own, box[n]) for n, own in (("t1", "a"), ("t2", "b"), ("t3", "c")))

    # markers are claimed at commit: each claims its other table only once all three own theirs
    lakes = [local_backend.lake(shift_timeout=15.0, wait_timeout=60.0,
                                store=claim_when(local_backend.store(), other, owns_all)) for other in ("b", "c", "a")]
    t1, t2, t3 = box["t1"], box["t2"], box["t3"] = [lk.begin("R,CT") for lk in lakes]
    for t, own in ((t1, "a"), (t2, "b"), (t3, "c")):
        t.update(own, set={"value": "value + 1"}, where="id = 1")
    for t, other in ((t1, "b"), (t2, "c"), (t3, "a")):
        t.update(other, set={"value": "value + 10"}, where="id = 2")
    errors: list[BaseException] = []

    def go(t):
        try:
            t.commit()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=go, args=(t,)) for t in (t1, t2, t3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not any(th.is_alive() for th in threads) and errors == []
    reasons = [marker_of(c).reason for t in ("a", "b", "c") for _, c in lake._client.log(t).commits_between(-1, lake.version(t))
               if marker_of(c) and marker_of(c).state == FREED]
    # broken as a cycle (rule III), never by the no-progress fallback (rule IV, after 15 s
    # stuck): a fallback shift can leave two-way cycles behind that are then seen as cycles,
    # so "some cycle shift" alone would not tell the two apart
    assert any(r and r.startswith("shift: cycle") for r in reasons), reasons
    assert all(r.startswith("shift: cycle") for r in reasons if r and r.startswith("shift:")), reasons
    assert [(_value(lake, t, 1), _value(lake, t, 2)) for t in ("a", "b", "c")] == [(1, 10)] * 3


def test_recover_writes_announced_commits_at_once(local_backend):
    """An I commit announced in the global log is decided: ``recover()`` writes its table
    commits from the head entry even while the owner's markers have not expired yet."""
    _setup(local_backend)
    _join_global_log(local_backend)
    _crash_two_table_commit(_dying(local_backend, "_lakevilla/gvl/0", after=True), "R,CT,I")
    lake = local_backend.lake(marker_ttl=TTL)
    assert (_value(lake, "a"), _value(lake, "b")) == (0, 0)  # announced, not written
    report = lake.recover()
    assert sorted(t for t, _ in report.pending_resolved) == ["a", "b"]
    assert (_value(lake, "a"), _value(lake, "b")) == (-5, 5)
    assert [r["value"] for r in local_backend.delta_rows("a") if r["id"] == 1] == [-5]


# -- a transaction, not recover(), meets an expired CT or I marker ---------------------------------

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
    _setup(local_backend)
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
        assert _value(local_backend.lake(), "a") == -5 and _value(local_backend.lake(), "b") == 0
    else:
        dead = _crash_two_table_commit(_dying(local_backend, "_lakevilla/txns/", after=crash == "after-record"),
                                       "R,CT")
    other = local_backend.lake(marker_ttl=TTL, clock=_at(10_000.0))
    with other.transaction("R") as t:  # commits table by table: a, then b, where the marker waits
        t.update("a", set={"value": "value * 10"}, where="id = 1")
        t.update("b", set={"value": "value * 10"}, where="id = 1")
    rec = records.read(other.store, dead.attempt)
    if crash == "before-record":
        assert t.stats["recovered_freed"] >= 1
        assert (_value(other, "a"), _value(other, "b")) == (0, 0)
        assert rec.state == records.ABORTED
    else:
        assert t.stats["recovered_committed"] >= 1
        assert (_value(other, "a"), _value(other, "b")) == (-50, 50)  # the transfer once, then ours
        assert rec.state == records.COMMITTED
    for tb in ("a", "b"):
        assert open_markers(other, tb) == []
        assert rows(other.read(tb)) == local_backend.delta_rows(tb)


@pytest.mark.parametrize("announced", [True, False])
def test_a_transaction_meeting_an_expired_i_marker_finishes_or_undoes_it(local_backend, announced):
    """Announced in the global log: the R transaction that meets its marker writes its table
    commit (nothing isolated reads in between). Not announced: it appends the abort."""
    _setup(local_backend)
    _join_global_log(local_backend)
    dead = _crash_two_table_commit(_dying(local_backend, "_lakevilla/gvl/0", after=announced), "R,CT,I")
    other = local_backend.lake(marker_ttl=TTL, clock=_at(10_000.0))
    with other.transaction("R") as t:
        t.update("a", set={"value": "value * 10"}, where="id = 1")
    if announced:
        assert t.stats["recovered_committed"] == 1
        assert _value(other, "a") == -50
    else:
        assert t.stats["recovered_freed"] == 1
        assert _value(other, "a") == 0
        assert dead.attempt in other._client.gvl.head().aborts
    assert open_markers(other, "a") == []
    assert rows(other.read("a")) == local_backend.delta_rows("a")


# -- clean-up retention and the global log's keep ------------------------------------------------------

def test_cleanup_deletes_sublogs_and_records_only_past_their_retention(local_backend):
    lake = _setup(local_backend, delete_sublogs=False)
    with lake.transaction("R,CT") as t:
        t.update("a", set={"value": "1"}, where="id = 1")
        t.update("b", set={"value": "1"}, where="id = 1")
    lake.flush()
    sub = f"_lakevilla/txns/{t.id}/"
    assert len(list(lake.store.list(sub))) == 2
    assert records.read(lake.store, f"{t.id}.0").state == records.COMMITTED
    young = local_backend.lake(clock=_at(3000.0)).maintenance.cleanup(older_than=3600, force=True)
    assert young["sublogs"] == 0 and young["records"] == 0
    assert len(list(lake.store.list(sub))) == 2 and records.read(lake.store, f"{t.id}.0") is not None
    old = local_backend.lake(clock=_at(4000.0)).maintenance.cleanup(older_than=3600, force=True)
    assert old["sublogs"] == 2 and old["records"] == 1
    assert list(lake.store.list(sub)) == [] and records.read(lake.store, f"{t.id}.0") is None
    assert (_value(lake, "a"), _value(lake, "b")) == (1, 1)


def test_cleanup_keeps_exactly_keep_global_entries_before_the_head(local_backend):
    lake = _setup(local_backend, tables=("a",), gvl_keep=0)
    for k in range(8):
        with lake.transaction("I") as t:
            t.update("a", set={"value": str(k)}, where="id = 1")
    head = lake._client.gvl.head().seq
    done = lake.maintenance.cleanup(keep_global=3, older_than=0, force=True)
    left = sorted(int(m.key.rsplit("/", 1)[1][:-5]) for m in lake.store.list("_lakevilla/gvl/")
                  if m.key.rsplit("/", 1)[1][:-5].isdigit())
    assert left == list(range(head - 3, head + 1))
    assert done["global_entries"] == head - 3
    assert lake._client.gvl.read_hint().horizon == head - 3  # the horizon moved with the deletion
    assert lake.status().to_json()["global_log"]["oldest"] == head - 3
    with local_backend.lake().transaction("I") as r:
        assert _value(r, "a") == 7


# -- the automatic checkpoint never goes above an open marker -------------------------------------

def test_automatic_checkpoint_waits_below_an_open_marker(local_backend):
    lake = local_backend.lake()
    lake.create_table("a", T, properties={"delta.checkpointInterval": "2"})
    holder = lake.begin("R")
    holder.insert("a", {"id": [1], "value": [1]})
    claim_now(holder, "a")
    marker = holder.tables["a"].marker.version
    for k in range(4):  # plain commits reach versions where a checkpoint is due
        with lake.transaction("") as t:
            t.insert("a", {"id": [10 + k], "value": [k]})
    lake.flush()
    log = lake._client.log("a")
    assert log.last_checkpoint_version() < marker
    holder.commit()
    with lake.transaction("") as t:
        t.insert("a", {"id": [20, 21], "value": [0, 0]})
    with lake.transaction("") as t:
        t.insert("a", {"id": [22], "value": [0]})
    lake.flush()
    assert log.last_checkpoint_version() > marker  # due again once the marker closed
    assert rows(lake.read("a")) == local_backend.delta_rows("a")


# -- a conflict after the decision is warned about and counted -------------------------------------

def _transfer_with_a_commit_between_tables(backend, during):
    """An R,CT transfer a -> b, ready to commit, whose store runs ``during`` after the
    commit to ``a`` landed and before the one to ``b``."""
    gate = HalfPublished(backend.store(), "a", "b", during)
    txn = backend.lake(store=gate).begin("R,CT")
    txn.update("a", set={"value": "value - 5"}, where="id = 1")
    txn.update("b", set={"value": "value + 5"}, where="id = 1")
    gate.armed = True
    return gate, txn


def test_a_conflict_by_a_marker_ignoring_client_after_the_decision_is_warned(local_backend):
    _setup(local_backend)
    plain = local_backend.lake()

    def during():  # the record decided, a's commit landed, b's not yet: plain Delta updates b
        with plain.transaction("") as w:
            w.update("b", set={"value": "100"}, where="id = 1")

    gate, txn = _transfer_with_a_commit_between_tables(local_backend, during)
    with pytest.warns(UserWarning, match="ignores lakevilla markers after transaction"):
        result = txn.commit()
    assert gate.fired == 1
    assert result.stats["conflicts_after_decision"] == 1
    assert _value(plain, "a") == -5  # the decision stands; b shows the documented hazard (README,
    # "Clients that ignore markers"): both updates of the row survive, as duplicates
    assert sorted(plain.read("b", where="id = 1").column("value").to_pylist()) == [5, 100]


def test_no_warning_without_a_conflict_after_the_decision(local_backend):
    _setup(local_backend)
    plain = local_backend.lake()

    def during():  # a commit in between that touches other rows in another file
        with plain.transaction("") as w:
            w.insert("b", {"id": [50], "value": [1]})

    gate, txn = _transfer_with_a_commit_between_tables(local_backend, during)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = txn.commit()
    assert gate.fired == 1 and "conflicts_after_decision" not in result.stats


# -- stores: the S3 emulation and fsync ---------------------------------------------------------------

def test_conditional_writes_emulate_works_where_the_endpoint_ignores_them(moto_endpoint):
    from benchmarks.common import LatencyProxy
    from lakevilla.store import PreconditionFailed, open_store
    from tests.conftest import make_bucket, s3_options

    bucket = make_bucket(moto_endpoint)
    proxy = LatencyProxy(moto_endpoint, drop_headers=("if-none-match", "if-match"))
    try:
        opts = s3_options(proxy.url)
        with pytest.warns(UserWarning, match="not atomic"):  # the README's caveat, said at open
            s = open_store(f"s3://{bucket}/lake", opts, conditional_writes="emulate")
        etag = s.put_if_absent("k", b"1")
        with pytest.raises(PreconditionFailed):
            s.put_if_absent("k", b"2")
        with pytest.raises(PreconditionFailed):
            s.put_if_match("k", b"3", "not-the-etag")
        s.put_if_match("k", b"4", etag)
        assert s.get("k").data == b"4"
        lake = lv.Lake(f"s3://{bucket}/lake", storage_options=opts, store=s)
        lake.create_table("a", T)
        with pytest.raises(lv.TableExistsError):
            lake.create_table("a", T)
        with lake.transaction("R") as t:
            t.insert("a", {"id": [1], "value": [7]})
        with lake.transaction("R") as t:
            t.update("a", set={"value": "value + 1"}, where="id = 1")
        assert rows(lake.read("a")) == [{"id": 1, "value": 8}]
    finally:
        proxy.close()


def test_local_store_fsync_syncs_every_write(tmp_path, monkeypatch):
    from lakevilla.store import local

    synced = []
    real = os.fsync
    monkeypatch.setattr(local.os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    plain = lv.Lake(str(tmp_path / "plain"))
    plain.create_table("a", T)
    assert synced == []  # off by default
    lake = lv.Lake(str(tmp_path / "synced"), store=local.LocalStore(str(tmp_path / "synced"), fsync=True))
    lake.create_table("a", T)
    n = len(synced)
    assert n >= 1
    with lake.transaction("R") as t:
        t.insert("a", {"id": [1], "value": [1]})
    lake.flush()
    assert len(synced) >= n + 3  # data file, marker, commit (at least)
    assert rows(lake.read("a")) == [{"id": 1, "value": 1}]


# -- make demo -----------------------------------------------------------------------------------------

def test_make_demo_runs_the_demo_and_its_guarantees_hold(tmp_path):
    """``make demo`` runs ``python -m lakevilla.demo``; here without its Spark act (the Spark
    tests cover that engine) and with fewer transfers."""
    target = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "-m lakevilla.demo" in target
    out = subprocess.run([sys.executable, "-m", "lakevilla.demo", "--no-spark", "--clients", "2",
                          "--transfers", "3", "--lake", str(tmp_path / "demo")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "lakevilla guarantees held." in out.stdout


# -- nothing decided is undone or forgotten -----------------------------------------------------------

def test_cleanup_keeps_the_sublogs_of_a_decided_unpublished_transaction(local_backend):
    """Its markers expired (no live client protects it) but its record says COMMITTING:
    clean-up keeps record and sublogs, so ``resume`` still finds and rolls it forward."""
    _setup(local_backend)
    dead = _crash_two_table_commit(_dying(local_backend, "_lakevilla/txns/", after=True), "R,CT")
    later = local_backend.lake(marker_ttl=TTL, clock=_at(10_000.0))
    done = later.maintenance.cleanup(older_than=0, force=True)
    assert done["sublogs"] == 0 and done["records"] == 0
    assert len(list(later.store.list(f"_lakevilla/txns/{dead.id}/"))) == 2
    with pytest.raises(lv.TransactionStateError, match="rolled forward"):
        later.resume(dead.id)
    assert (_value(later, "a"), _value(later, "b")) == (-5, 5)


def test_leaving_the_block_after_an_in_doubt_commit_undoes_nothing(local_backend):
    """``commit()`` inside a ``with`` block raised CommitPendingError (the table commit was
    applied, the reply lost): leaving the block with that error must not undo anything."""
    from tests.protocol.test_nothing_lost import _every_version_has_its_files, _only

    _setup(local_backend, tables=("t",))
    dying = local_backend.lake(store=FaultInjectingStore(local_backend.store(), FaultPlan(
        exhaust_after={1}, predicate=_only("put_if_absent", "00000000000000000002.json"))), marker_ttl=TTL)
    with pytest.raises(lv.CommitPendingError):
        with dying.transaction("R") as txn:
            txn.update("t", set={"value": "value + 1"}, where="id = 1")
            txn.commit()
    assert txn.state == "in-doubt"
    dying.flush()
    _every_version_has_its_files(local_backend, "t")
    assert _value(local_backend.lake(), "t") == 1
    assert commit_txn(local_backend.lake()._client.log("t").read_commit(2)) == txn.attempt  # its commit stands


def test_a_late_in_place_owner_whose_marker_was_freed_commits_at_the_tail(local_backend):
    """Recovery freed the marker of a slow in-place owner; nothing else was written, so the
    fill looks safe, but the conditional fill fails on the freed marker's etag: the owner
    must notice, re-claim and commit at the tail, never report a fill that did not land."""
    lake = _setup(local_backend, tables=("a",), commit_mode="in_place", marker_ttl=TTL)
    slow = lake.begin("R")
    slow.update("a", set={"value": "value + 1"}, where="id = 1")
    v = slow.tables["a"].marker.version
    lake._client.heartbeats.forget(slow)  # its heartbeat stops
    assert [r[:2] for r in local_backend.lake(marker_ttl=TTL, clock=_at(10_000.0)).recover().freed] == [("a", v)]
    result = slow.commit()
    assert result.versions["a"] != v and slow.stats["fill_lost"] == 1
    assert _value(local_backend.lake(), "a") == 1
    assert marker_of(lake._client.log("a").read_commit_raw(v)[0]).state == FREED
    assert rows(lake.read("a")) == local_backend.delta_rows("a")


# -- the global log: a lost slot and a commit below ours ----------------------------------------------------

def test_an_announcement_that_loses_its_slot_is_validated_again(local_backend):
    """T2 takes the slot T1 was about to announce in; T2 wrote what T1 read. T1 must build
    on T2's entry and validate again (R1: abort), not count the lost slot as its own."""
    from tests.helpers import HookStore

    _setup(local_backend)
    _join_global_log(local_backend)

    def t2():  # reads b, writes a
        with local_backend.lake().transaction("I") as t:
            t.update("a", set={"value": str(_value(t, "b") + 1)}, where="id = 1")

    hook = HookStore(local_backend.store(), lambda k, key: k == "put_if_absent" and key.startswith("_lakevilla/gvl/0"),
                     t2)
    t1 = local_backend.lake(store=hook).begin("I")  # reads a, writes b
    t1.update("b", set={"value": str(_value(t1, "a") + 1)}, where="id = 1")
    with pytest.raises(lv.TransactionAborted) as info:
        t1.commit()
    assert hook.fired == 1 and info.value.reason == "R1"
    assert (_value(local_backend.lake(), "a"), _value(local_backend.lake(), "b")) == (1, 0)


def test_an_isolated_writer_checks_a_commit_the_log_took_in_below_its_write(local_backend):
    """Between T1's validation and its announcement, a marker-ignoring client commits to the
    table T1 writes and another reader takes that commit into the global log: the head then
    names a version of T1's table that T1 never validated (R3). T1 must not announce over it."""
    from tests.helpers import HookStore

    _setup(local_backend)
    _join_global_log(local_backend)
    armed = []

    def sneak():
        with local_backend.lake().transaction("") as w:
            w.update("a", set={"value": "value + 100"}, where="id = 1")
        with local_backend.lake().transaction("I") as r:  # takes the commit into the log
            r.read("a")

    hook = HookStore(local_backend.store(), lambda k, key: bool(armed) and k == "get"
                     and key.startswith("_lakevilla/gvl/0"), sneak)
    t1 = local_backend.lake(store=hook).begin("I")
    t1.update("a", set={"value": "value + 1"}, where="id = 1")
    armed.append(True)
    with pytest.raises(lv.TransactionAborted):
        t1.commit()
    assert hook.fired == 1
    plain = local_backend.lake()
    assert plain.read("a", where="id = 1").column("value").to_pylist() == [100]
    assert rows(plain.read("a")) == local_backend.delta_rows("a")


def test_a_writer_finds_the_head_past_a_hint_its_appender_never_moved(local_backend):
    """An appender died between its entry and the hint. A writer whose reads show it nothing
    new (it writes another table) must still find the head past the hint, and commit."""
    _setup(local_backend, tables=("a", "b", "c"))
    with local_backend.lake().transaction("I") as r:
        for t in ("a", "b", "c"):
            r.read(t)
    _crash_two_table_commit(_dying(local_backend, "_lakevilla/gvl/0", after=True), "R,CT,I")
    lake = local_backend.lake()
    announced = lake._client.gvl.head().seq
    assert lake._client.gvl.read_hint().seq == announced - 1  # the hint lags one entry behind
    with local_backend.lake().transaction("I") as w:
        w.update("c", set={"value": "value + 1"}, where="id = 1")
    assert w.result.global_version == announced + 1
    assert _value(lake, "c") == 1
    with local_backend.lake().transaction("I") as r:  # and the announced transfer is part of the log
        assert (_value(r, "a"), _value(r, "b"), _value(r, "c")) == (-5, 5, 1)


def test_resume_rolls_an_announced_isolated_transaction_forward(local_backend):
    """Resume after an I decision (announced in the global log, no table commit written, no
    ``recover()`` first): it writes the commits once and refuses to re-run the transaction."""
    _setup(local_backend)
    _join_global_log(local_backend)
    dead = _crash_two_table_commit(_dying(local_backend, "_lakevilla/gvl/0", after=True), "R,CT,I")
    later = local_backend.lake(marker_ttl=TTL, clock=_at(10_000.0))
    with pytest.raises(lv.TransactionStateError, match="rolled forward"):
        later.resume(dead.id)
    plain = local_backend.lake()
    assert (_value(plain, "a"), _value(plain, "b")) == (-5, 5)
    assert [r["value"] for r in local_backend.delta_rows("b") if r["id"] == 1] == [5]
