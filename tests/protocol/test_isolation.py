"""LV[I]: the global version log, validation rules, isolation modes, linearizable reads."""

from __future__ import annotations

import json
import random
import threading
import time

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.isolation.gvl import HINT_KEY, entry_key
from lakevilla.store import CountingStore
from tests.conftest import ON_AZURE, rows
from tests.helpers import (
    CrashSweep,
    HookStore,
    accounts,
    clients_of,
    crash_stride,
    crash_two_table_commit,
    dying_lake,
    join_global_log,
    open_markers,
    run_crashing,
    value_of,
)

ACC = pa.schema([("id", pa.int64()), ("balance", pa.int64())])


def _later_clock():
    return time.time() + 10_000.0


def _bank(backend, tables=("x", "y"), **kw):
    lake = backend.lake(**kw)
    for t in tables:
        lake.create_table(t, ACC)
        with lake.transaction("") as txn:
            txn.insert(t, {"id": [1, 2], "balance": [50, 50]})
    return lake


def _bal(txn_or_lake, table, id_=1):
    return txn_or_lake.read(table, where=f"id = {id_}").column("balance")[0].as_py()


@pytest.mark.parametrize("features", ["I", "R,CT,I"])
def test_read_skew_prevented_under_snapshot_and_serializable(backend, features):
    """Each table is read at one cut of the global order fixed at the first read: a transfer
    that commits between the reads is invisible to both, and the read-only transaction
    commits without validation."""
    for isolation in ("snapshot", "serializable"):
        tables = (f"rx{isolation[:3]}", f"ry{isolation[:3]}")
        x, y = tables
        lake = _bank(backend, tables)
        reader = lake.begin(features, isolation=isolation)
        bx = _bal(reader, x)
        with lake.transaction(features, isolation=isolation) as w:  # move 10 from x to y
            w.update(x, set={"balance": "balance - 10"}, where="id = 1")
            w.update(y, set={"balance": "balance + 10"}, where="id = 1")
        by = _bal(reader, y)
        reader.commit()
        assert bx + by == 100, isolation
        with lake.transaction(features, isolation=isolation) as later:
            assert _bal(later, x) + _bal(later, y) == 100 and _bal(later, x) == 40


@pytest.mark.parametrize("features", ["I", "R,CT,I"])
def test_write_skew_prevented_when_serializable_occurs_under_snapshot(backend, features):
    final = {}
    for isolation in ("snapshot", "serializable"):
        tables = (f"wx{isolation[:3]}", f"wy{isolation[:3]}")
        x, y = tables
        lake = _bank(backend, tables)
        t1, t2 = (lake.begin(features, isolation=isolation),
                  lake.begin(features, isolation=isolation))
        for t in (t1, t2):  # both check the constraint x + y >= 100 against what they read
            assert _bal(t, x) + _bal(t, y) >= 100
        t1.update(x, set={"balance": "balance - 100"}, where="id = 1")
        t2.update(y, set={"balance": "balance - 100"}, where="id = 1")
        t1.commit()
        try:
            t2.commit()
            outcome = "both committed"
        except lv.TransactionAborted:
            outcome = "one aborted"
        final[isolation] = (outcome, _bal(lake, x) + _bal(lake, y))
    assert final["snapshot"] == ("both committed", -100)  # the constraint is broken: write skew
    assert final["serializable"] == ("one aborted", 0)


def test_write_serializable_lets_read_only_transactions_skip_validation(local_backend):
    lake = _bank(local_backend)
    store = CountingStore(local_backend.store())
    lake2 = local_backend.lake(store=store)
    reader = lake2.begin("I", isolation="write_serializable")
    bx = _bal(reader, "x")
    with lake.transaction("I") as w:
        w.update("x", set={"balance": "balance - 10"}, where="id = 1")
        w.update("y", set={"balance": "balance + 10"}, where="id = 1")
    by = _bal(reader, "y")
    store.reset()
    reader.commit()  # no validation, no write
    assert bx + by == 100 and store.writes == 0 and store.reads == 0


@pytest.mark.parametrize("isolation, slack, expect", [
    ("serializable", 0, "aborted"), ("serializable", 2, "aborted"),
    ("serializable", 3, "committed"),
    ("write_serializable", 0, "aborted"), ("snapshot", 0, "committed")])
def test_slack_tolerates_recent_versions(local_backend, isolation, slack, expect):
    """A read made stale by a commit exactly 3 versions from the newest (then 2 blind inserts
    that cannot match it) aborts under ``slack`` 0 and 2, passes with ``slack=3``: both sides
    of the boundary. ``write_serializable`` validates a read-write transaction's reads like
    ``serializable``; ``snapshot`` does not."""
    lake = _bank(local_backend)
    r = lake.begin("I", isolation=isolation, slack=slack)
    seen = _bal(r, "x")
    with lake.transaction("") as w:  # the conflicting commit: newest - 2
        w.update("x", set={"balance": "balance + 1"}, where="id = 1")
    for k in range(2):  # newer commits that cannot match the read (id = 1)
        with lake.transaction("") as w:
            w.insert("x", {"id": [100 + k], "balance": [0]})
    r.update("y", set={"balance": str(seen)}, where="id = 2")  # depends on the stale read
    try:
        r.commit()
        got = "committed"
    except lv.TransactionAborted as e:
        assert e.reason == "R1", e
        got = "aborted"
    assert got == expect
    assert _bal(lake, "y", 2) == (seen if expect == "committed" else 50)


@pytest.mark.parametrize("features", ["I", "R,CT,I"])
def test_a_read_whose_rows_did_not_change_is_not_stale(local_backend, features):
    """R1 by value: a commit that rewrote the file a serializable writer read, changing other
    rows only, does not abort it, since its read returns the same rows at the version its entry
    takes in. (A commit that changed the rows read still aborts: the slack test above.)"""
    lake = _bank(local_backend)
    r = lake.begin(features, isolation="serializable")
    seen = _bal(r, "x")  # id = 1
    with lake.transaction("") as w:  # rewrites x's one data file, changing id = 2 only
        w.update("x", set={"balance": "balance + 1"}, where="id = 2")
    r.update("y", set={"balance": str(seen)}, where="id = 2")
    r.commit()
    assert r.stats["r1_same_rows"] == 1 and r.stats["r1"] == 0
    assert (_bal(lake, "y", 2), _bal(lake, "x", 2)) == (50, 51)


def test_global_log_is_built_on_demand_and_tables_join_as_compatible(backend):
    lake = _bank(backend, tables=("x", "y", "z"))
    store = backend.store()
    assert not store.exists(entry_key(0))
    with lake.transaction("I") as t:
        t.update("x", set={"balance": "balance + 1"}, where="id = 1")
        t.read("y")
    head = lake._client.gvl.head()
    assert head.knows("x") and head.knows("y") and not head.knows("z")
    assert head.txn is not None and "x" in head.pending  # the last entry announces the update
    with lake.transaction("I") as t:
        t.update("z", set={"balance": "balance + 1"}, where="id = 1")  # unknown table: joins
    head2 = backend.lake()._client.gvl.head()
    assert head2.seq > head.seq and head2.knows("z") and head2.knows("x")
    assert json.loads(store.get(HINT_KEY).data)["seq"] == head2.seq
    with backend.lake().transaction("I") as r:  # nothing new: a reader appends nothing
        assert _bal(r, "z") == 51
    assert backend.lake()._client.gvl.head().seq == head2.seq


def test_isolated_reads_do_not_list_known_tables(backend):
    tables = [f"t{i}" for i in range(10)]
    lake = _bank(backend, tables=tables)
    with lake.transaction("I") as t:  # registers all ten in the global log
        for name in tables:
            t.read(name)
        t.update("t0", set={"balance": "balance + 1"}, where="id = 1")
    for features, lists in (("I", 0), ("", 10)):
        store = CountingStore(backend.store())
        reader = backend.lake(store=store)
        with reader.transaction(features) as t:
            for name in tables:
                t.read(name)
        assert store.counts["list"] == lists, (features, dict(store.counts))


def test_linearizable_reads_even_with_a_stale_hint(backend):
    lake = _bank(backend)
    store = backend.store()
    for k in range(1, 16):
        with lake.transaction("I") as w:
            w.update("x", set={"balance": f"{100 + k}"}, where="id = 1")
        if k % 3 == 0:
            store.put(HINT_KEY, json.dumps({"seq": 0}).encode())  # a lagging hint must not matter
        fresh = backend.lake()  # another client, no cache
        with fresh.transaction("I") as r:
            assert _bal(r, "x") == 100 + k


def test_delta_rs_commits_between_isolated_transactions_are_incorporated(backend):
    from deltalake import DeltaTable, write_deltalake

    lake = _bank(backend)
    with lake.transaction("I") as t:
        t.update("x", set={"balance": "balance + 1"}, where="id = 1")
    uri, opts = backend.table_uri("x"), backend.storage_options or None
    write_deltalake(uri, pa.table({"id": [3], "balance": [7]}, schema=ACC), mode="append",
                    storage_options=opts)
    with backend.lake().transaction("I") as r:  # a reader sees the foreign append
        assert sorted(r.read("x").column("id").to_pylist()) == [1, 2, 3]
    with lake.transaction("I") as t:
        t.update("x", set={"balance": "balance * 2"}, where="id = 3")
    DeltaTable(uri, storage_options=opts).update(updates={"balance": "balance + 1000"},
                                                 predicate="id = 2")
    with lake.transaction("I") as t:
        assert _bal(t, "x", 2) == 1050
        t.update("x", set={"balance": "balance + 1"}, where="id = 2")
    assert rows(lake.read("x")) == [{"id": 1, "balance": 51}, {"id": 2, "balance": 1051},
                                    {"id": 3, "balance": 14}]
    assert rows(lake.read("x")) == backend.delta_rows("x")
    for v in range(lake.version("x") + 1):
        backend.delta_rows("x", v)  # every version readable


@pytest.mark.parametrize("features", ["I", "R,CT,I"])
@ON_AZURE
def test_crash_at_every_store_call_of_an_isolated_two_table_commit(backend, features):
    base = backend.store()

    def action_on(tables):
        x, y = tables

        def action(lake):
            with lake.transaction(features) as t:
                t.update(x, set={"balance": "balance - 5"}, where="id = 1")
                t.update(y, set={"balance": "balance + 5"}, where="id = 1")
        return action

    def make(store):
        return backend.lake(store=store, marker_ttl=5.0)

    outcomes = set()
    sweep = CrashSweep(every=crash_stride(backend))
    for i, (label, plan) in enumerate(sweep):
        tables = (f"x{i}", f"y{i}")
        _bank(backend, tables=tables)
        sweep.record(run_crashing(base, plan, make, action_on(tables)))
        rec = backend.lake(marker_ttl=5.0, clock=_later_clock)
        rec.recover(tables=list(tables))
        # recovery alone must leave all or nothing, and close every marker: checked by plain
        # readers (ours and delta-rs) before any isolated reader could finish the work itself
        for t in tables:
            assert open_markers(rec, t) == [], label
        plain = (_bal(backend.lake(), tables[0]), _bal(backend.lake(), tables[1]))
        judge = tuple(r["balance"] for t in tables for r in backend.delta_rows(t) if r["id"] == 1)
        assert plain in ((50, 50), (45, 55)), f"{label}: {plain}"
        assert judge == plain, label
        with backend.lake().transaction(features) as r:  # isolated readers agree
            got = (_bal(r, tables[0]), _bal(r, tables[1]))
        assert got == plain, label
        outcomes.add(got)
    assert outcomes == {(50, 50), (45, 55)}


def test_a_stalled_announcement_is_completed_by_whoever_finds_it(local_backend):
    from lakevilla.store import FaultInjectingStore, FaultPlan, SimulatedCrash

    _bank(local_backend)
    with local_backend.lake().transaction("I") as r:  # the log knows both tables: the dying
        r.read("x")                                   # client's first entry is its announcement
        r.read("y")
    base = local_backend.store()
    dying = local_backend.lake(store=FaultInjectingStore(base, FaultPlan(
        crash_after=1, kinds=("put_if_absent",),
        predicate=lambda k, key: key.startswith("_lakevilla/gvl/0"))))
    with pytest.raises(SimulatedCrash):
        with dying.transaction("R,CT,I") as t:
            t.update("x", set={"balance": "0"}, where="id = 1")
            t.update("y", set={"balance": "100"}, where="id = 1")
    plain = local_backend.lake()
    assert _bal(plain, "x") == 50  # announced, but no table commit written yet
    with local_backend.lake().transaction("I") as r:  # an isolated reader completes it
        assert (_bal(r, "x"), _bal(r, "y")) == (0, 100)
    assert (_bal(plain, "x"), _bal(plain, "y")) == (0, 100)
    # the crashed appender never moved the hint: the next writer still finds the head past it
    with local_backend.lake().transaction("I") as w:
        w.update("y", set={"balance": "balance + 1"}, where="id = 2")
    assert _bal(plain, "y", 2) == 51


def test_recovery_aborts_a_stalled_isolated_transaction_through_the_log(local_backend):
    """The owner stalls at commit with its marker claimed and its announcement not yet appended:
    a recovering client frees the marker and appends the attempt's abort to the global log."""
    lake = _bank(local_backend, marker_ttl=5.0)
    seen = {}

    def recover_first():  # while the owner is about to append its announcement
        seen["report"] = local_backend.lake(marker_ttl=5.0, clock=_later_clock).recover(
            tables=["x"])

    armed = threading.Event()  # the statements may append to the log too (taking x in): not those

    def is_entry(kind, key):
        return (armed.is_set() and kind == "put_if_absent" and key != HINT_KEY
                and key.startswith(entry_key(0).rsplit("/", 1)[0] + "/"))

    owner = local_backend.lake(marker_ttl=5.0,
                               store=HookStore(local_backend.store(), is_entry, recover_first))
    stalled = owner.begin("R,CT,I")
    stalled.update("x", set={"balance": "0"}, where="id = 1")
    first = stalled.attempt
    # its announcement loses the slot to the abort once, then it reads the abort
    owner.max_retries = 1
    armed.set()
    with pytest.raises(lv.TransactionAborted) as aborted:
        stalled.commit()
    assert aborted.value.reason == "preempted"
    assert len(seen["report"].freed) == 1
    assert first in lake._client.gvl.head().aborts
    assert _bal(lake, "x") == 50


def test_old_global_log_entries_are_cleaned_up(local_backend):
    lake = _bank(local_backend, gvl_keep=5)
    for k in range(12):
        with lake.transaction("I") as t:
            t.update("x", set={"balance": f"{k}"}, where="id = 1")
    lake._client.gvl.cleanup(keep=5, min_age=0.0)
    names = sorted(m.key for m in local_backend.store().list("_lakevilla/gvl/")
                   if m.key.endswith(".json"))
    assert len(names) <= 6 and names[-1] == entry_key(lake._client.gvl.head().seq)
    with local_backend.lake().transaction("I") as r:
        assert _bal(r, "x") == 11


# -- bank readers during transfers, real processes --------------------------------------------

def _transfer_worker(uri, opts, wid, n, stop, out):
    """``n`` transfers, or until ``stop`` is set (a reader saw what it was looking for)."""
    rng = random.Random(wid)
    done = 0
    with lv.Lake(uri, storage_options=opts or None) as lake:  # closed: clients may be threads
        while done < n and not stop.is_set():
            amt = rng.randint(1, 9)
            src, dst = ("x", "y") if rng.random() < 0.5 else ("y", "x")

            def move(t, src=src, dst=dst, amt=amt):
                t.update(src, set={"balance": f"balance - {amt}"}, where="id = 1")
                t.update(dst, set={"balance": f"balance + {amt}"}, where="id = 1")

            lake.run(move, features="R,CT,I", retries=30)
            done += 1
    out.put(("writer", done))


def _sum_reader(uri, opts, features, stop_on_wrong, writers_done, stop, out):
    sums = []

    def total(t):
        return (sum(t.read("x").column("balance").to_pylist())
                + sum(t.read("y").column("balance").to_pylist()))

    with lv.Lake(uri, storage_options=opts or None) as lake:
        while not writers_done.is_set() or len(sums) < 5:
            s = lake.run(total, features=features, retries=100)
            sums.append(s)
            if stop_on_wrong and s != 200:
                stop.set()
                break
    out.put(("reader", sums))


def _run_bank(backend, reader_features, stop_on_wrong, transfers):
    ctx = clients_of(backend)
    out, writers_done, stop = ctx.Queue(), ctx.Event(), ctx.Event()
    writers = [ctx.Process(target=_transfer_worker,
                           args=(backend.uri, backend.storage_options, w, transfers, stop, out))
               for w in range(3)]
    readers = [ctx.Process(target=_sum_reader,
                           args=(backend.uri, backend.storage_options, reader_features,
                                 stop_on_wrong, writers_done, stop, out))
               for _ in range(2)]
    for p in writers + readers:
        p.start()
    results = []
    while len([r for r in results if r[0] == "writer"]) < 3:
        results.append(out.get(timeout=900))
    writers_done.set()
    while len(results) < 5:
        results.append(out.get(timeout=900))
    for p in writers + readers:
        p.join(60)
    return ([s for kind, s in results if kind == "reader"],
            sum(n for kind, n in results if kind == "writer"))


@pytest.mark.slow
def test_isolated_readers_always_see_the_total_during_transfers(backend):
    lake = _bank(backend)
    # each writer's transfers; fewer through moto (suite time)
    per = 20 if backend.kind == "local" else 6
    sums, transfers = _run_bank(backend, "I", stop_on_wrong=False, transfers=per)
    assert transfers == 3 * per and all(len(s) >= 5 for s in sums)
    assert {x for s in sums for x in s} == {200}
    assert (sum(lake.read("x").column("balance").to_pylist())
            + sum(lake.read("y").column("balance").to_pylist()) == 200)


@pytest.mark.slow
def test_readers_without_isolation_see_a_wrong_total(backend):
    lake = _bank(backend)
    sums, _ = _run_bank(backend, "R", stop_on_wrong=True, transfers=1000)  # until a reader sees one
    assert any(x != 200 for s in sums for x in s)
    assert (sum(lake.read("x").column("balance").to_pylist())
            + sum(lake.read("y").column("balance").to_pylist()) == 200)


def test_concurrent_isolated_writers_on_one_table_keep_every_increment(local_backend):
    lake = _bank(local_backend)

    def worker():
        lk = local_backend.lake()
        for _ in range(8):
            lk.run(lambda t: t.update("x", set={"balance": "balance + 1"}, where="id = 1"),
                   features="I", retries=50)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(300)
    assert _bal(lake, "x") == 50 + 24
    with local_backend.lake().transaction("I") as r:
        assert _bal(r, "x") == 74


class _ClaimHook:
    """Orders the commit-time marker claims of two transactions: a1, a2, b2, b1."""
    def __init__(self) -> None:
        self.t1_claimed_a, self.t2_claimed_b = threading.Event(), threading.Event()

    def store(self, inner, me: int):
        from lakevilla.store import StoreWrapper

        hook = self

        class Hooked(StoreWrapper):
            def put_if_absent(self, key, data):
                if me == 1 and key.startswith("b/_delta_log/"):
                    hook.t2_claimed_b.wait(30)
                if me == 2 and key.startswith("a/_delta_log/"):
                    hook.t1_claimed_a.wait(30)
                out = self.inner.put_if_absent(key, data)
                if me == 1 and key.startswith("a/_delta_log/"):
                    hook.t1_claimed_a.set()
                if me == 2 and key.startswith("b/_delta_log/"):
                    hook.t2_claimed_b.set()
                return out

        return Hooked(inner)


def test_interleaved_commit_time_claims_of_isolated_writers_do_not_deadlock(local_backend):
    """LV[I] alone claims its markers at commit; claims that interleave across two tables form a
    cycle, which dependency lists must break (found by the TPC-C benchmark: it used to wait
    until wait_timeout)."""
    lake = local_backend.lake()
    for t in ("a", "b"):
        lake.create_table(t, ACC)
    hook = _ClaimHook()
    lakes = [local_backend.lake(store=hook.store(local_backend.store(), me), wait_timeout=60)
             for me in (1, 2)]
    txns = [lk.begin("I") for lk in lakes]
    for i, t in enumerate(txns, 1):
        t.insert("a", {"id": [i], "balance": [i]})
        t.insert("b", {"id": [i], "balance": [i]})
    errors = []

    def go(t):
        try:
            t.commit()
        except lv.TransactionAborted as e:
            errors.append(e)

    threads = [threading.Thread(target=go, args=(t,)) for t in txns]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert errors == []  # a deadlock would have ended in a timeout abort
    assert sum(t.stats["shifts"] for t in txns) >= 1
    assert sorted(lake.read("a").column("id").to_pylist()) == [1, 2]
    assert sorted(lake.read("b").column("id").to_pylist()) == [1, 2]


def test_an_announcement_that_loses_its_slot_is_validated_again(local_backend):
    """T2 takes the slot T1 was about to announce in; T2 wrote what T1 read. T1 must build
    on T2's entry and validate again (R1: abort), not count the lost slot as its own."""
    accounts(local_backend)
    join_global_log(local_backend)

    def t2():  # reads b, writes a
        with local_backend.lake().transaction("I") as t:
            t.update("a", set={"value": str(value_of(t, "b") + 1)}, where="id = 1")

    hook = HookStore(local_backend.store(),
                     lambda k, key: k == "put_if_absent" and key.startswith("_lakevilla/gvl/0"),
                     t2)
    t1 = local_backend.lake(store=hook).begin("I")  # reads a, writes b
    t1.update("b", set={"value": str(value_of(t1, "a") + 1)}, where="id = 1")
    with pytest.raises(lv.TransactionAborted) as info:
        t1.commit()
    assert hook.fired == 1 and info.value.reason == "R1"
    assert (value_of(local_backend.lake(), "a"), value_of(local_backend.lake(), "b")) == (1, 0)


def test_an_isolated_writer_checks_a_commit_the_log_took_in_below_its_write(local_backend):
    """Between T1's validation and its announcement, a marker-ignoring client commits to the
    table T1 writes and another reader takes that commit into the global log: the head then
    names a version of T1's table that T1 never validated (R3). T1 must not announce over it."""
    accounts(local_backend)
    join_global_log(local_backend)
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
    accounts(local_backend, tables=("a", "b", "c"))
    with local_backend.lake().transaction("I") as r:
        for t in ("a", "b", "c"):
            r.read(t)
    crash_two_table_commit(dying_lake(local_backend, "_lakevilla/gvl/0", after=True), "R,CT,I")
    lake = local_backend.lake()
    announced = lake._client.gvl.head().seq
    assert lake._client.gvl.read_hint().seq == announced - 1  # the hint lags one entry behind
    with local_backend.lake().transaction("I") as w:
        w.update("c", set={"value": "value + 1"}, where="id = 1")
    assert w.result.global_version == announced + 1
    assert value_of(lake, "c") == 1
    # and the announced transfer is part of the log
    with local_backend.lake().transaction("I") as r:
        assert (value_of(r, "a"), value_of(r, "b"), value_of(r, "c")) == (-5, 5, 1)


def test_the_first_entry_creates_the_hint_without_reading_its_absence_again(local_backend):
    """In a lake without a global log the first isolated read finds no hint, appends the first
    entry and creates the hint from that finding (put-if-absent), without a GET of the hint
    between the entry and the hint's creation to learn again that it is absent."""
    accounts(local_backend, tables=("a",))
    seen: list[tuple[str, str]] = []

    def note(kind: str, key: str) -> bool:
        if key in (HINT_KEY, entry_key(0)):
            seen.append((kind, key))
        return False

    store = HookStore(local_backend.store(), note, lambda: None, repeat=True)
    with local_backend.lake(store=store) as lake, lake.transaction("I") as r:
        r.read("a")
    assert json.loads(local_backend.store().get(HINT_KEY).data)["seq"] == 0
    after_entry = seen[seen.index(("put_if_absent", entry_key(0))) + 1:]
    assert after_entry == [("put_if_absent", HINT_KEY)], seen
