"""Maintenance beside live transactions (issue 10): abandoned-file deletion, clean-up,
checkpoints and recovery run in a loop, with a short retention, while transactions stay
open longer than the retention, while a slow insert writes its files, and while decided
transactions wait for someone to publish them. Nothing a committed version references may
ever be missing, and every acknowledged commit is there exactly once."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.store import FaultInjectingStore, FaultPlan, SimulatedCrash, StoreWrapper

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])
RETENTION = 3.0  # seconds maintenance keeps unreferenced files and finished records
MAX_AGE = 2.5  # every writer's max_transaction_age: below the retention, as the rule requires
TABLES = ("a", "b", "c")


class SlowDataWrites(StoreWrapper):
    """Data files trickle in: each PUT of a Parquet file takes ``delay`` seconds (the
    simulation)."""

    def __init__(self, inner, delay: float) -> None:
        super().__init__(inner)
        self.delay = delay

    def put(self, key, data):
        if key.endswith(".parquet"):
            time.sleep(self.delay)
        return self.inner.put(key, data)


def _every_version_has_its_files(backend, lake, table):
    present = {m.key for m in backend.store().list(table + "/")}
    log = lake._client.log(table)
    for v, c in log.commits_between(-1, log.latest_version()):
        for a in c.adds:
            assert f"{table}/{a.path}" in present, (
                f"{table}@{v} references {a.path}, which maintenance deleted")


def test_maintenance_in_a_loop_beside_live_transactions(backend):
    lake = backend.lake(max_transaction_age=MAX_AGE)
    for t in (*TABLES, "d1", "d2", "e1", "e2"):
        lake.create_table(t, T)
        with lake.transaction("") as txn:
            txn.insert(t, {"id": [0], "value": [0]})
    with lake.transaction("I") as known:  # e1 and e2 join the global log now, so that the dying I
        known.read("e1")                  # writer's first global-log write is its announcement
        known.read("e2")
    orphan = backend.lake(store=FaultInjectingStore(backend.store(), FaultPlan(
        crash_before=1, predicate=lambda k, key: "_delta_log" in key and k == "put_if_absent")))
    dead = orphan.begin("R")
    dead.insert("c", {"id": [6000], "value": [1]})
    # wrote its data file and sublog, dies at its commit: an orphan
    with pytest.raises(SimulatedCrash):
        dead.commit()
    stop = threading.Event()
    runs: Counter = Counter()
    errors: list[BaseException] = []
    # recover() finishes a decided transaction at once; so that decided transactions really wait
    # to be published (their files aging past the retention meanwhile, named only by their record
    # or announcement), the loop's recovery step starts once that has happened
    recover_from = time.monotonic() + RETENTION + 0.5

    def maintenance():
        m = backend.lake(max_transaction_age=MAX_AGE, marker_ttl=0.5)
        while not stop.is_set():
            try:
                runs["deleted_files"] += len(
                    m.maintenance.delete_abandoned_files(min_age=RETENTION))
                runs["abandoned"] += 1
                m.maintenance.cleanup(older_than=RETENTION)
                runs["cleanup"] += 1
                for t in TABLES:
                    try:
                        m.maintenance.checkpoint(t)
                        runs["checkpoint"] += 1
                    except lv.InvalidArgumentError:
                        runs["checkpoint_refused"] += 1  # an open marker: refused, by design
                if time.monotonic() >= recover_from:
                    m.recover()
                    runs["recover"] += 1
            except lv.LakeVillaError as e:  # a race with a writer is fine; anything else is not
                runs["maintenance_errors"] += 1
                if not isinstance(e, lv.TransactionAborted | lv.StorageError):
                    errors.append(e)

    acked: list[tuple[str, int]] = []
    lock = threading.Lock()

    def short_writers(wid: int, features: str):
        w = backend.lake(max_transaction_age=MAX_AGE, marker_ttl=0.5)
        for i in range(6):
            rid = wid * 1000 + i
            t = TABLES[(wid + i) % len(TABLES)]
            try:
                with w.transaction(features) as txn:
                    txn.insert(t, {"id": [rid], "value": [1]})
                with lock:
                    acked.append((t, rid))
            except lv.TransactionAborted:
                pass  # timed out behind a marker, too old under load: not acknowledged, not visible

    def slow_insert():
        w = backend.lake(store=SlowDataWrites(backend.store(), 0.3), max_transaction_age=MAX_AGE,
                         marker_ttl=0.5)
        try:
            with w.transaction("R") as txn:
                # three files, 0.3 s each: written over ~1 s, younger than the retention
                for i in range(3):
                    txn.insert("a", {"id": [9000 + i], "value": [1]})
        except lv.TransactionAborted:
            return  # too old on a loaded machine: not acknowledged, so not checked either way
        with lock:
            acked.extend(("a", 9000 + i) for i in range(3))

    too_old: list[str] = []

    def long_open(features: str, table: str, rid: int):
        w = backend.lake(max_transaction_age=MAX_AGE, marker_ttl=0.5)
        txn = w.begin(features)
        txn.insert(table, {"id": [rid], "value": [1]})
        # stays open longer than the retention: time itself is the condition
        time.sleep(RETENTION + 0.3)
        try:
            txn.commit()
        except lv.TransactionAborted as e:
            too_old.append(e.reason)

    def decided_then_dies(features: str, prefix: str, tables: tuple[str, str], rid: int):
        try:
            for attempt in range(5):
                if attempt and "I" in features.split(","):
                    # the aborted attempt left a version on each table (its aborted markers): an I
                    # transaction's first read of them would append that news to the global log,
                    # a write the dying store crashes on before any decision; a healthy reader
                    # takes the news in first, so that the next global-log write is the announcement
                    with backend.lake().transaction("I") as fresh:
                        for t in tables:
                            fresh.read(t)
                dying = backend.lake(store=FaultInjectingStore(backend.store(), FaultPlan(
                    crash_after=1, kinds=("put_if_absent",),
                    predicate=lambda k, key: key.startswith(prefix))),
                    marker_ttl=RETENTION, max_transaction_age=MAX_AGE)
                txn = dying.begin(features)
                for t in tables:
                    txn.insert(t, {"id": [rid], "value": [1]})
                try:
                    txn.commit()
                except SimulatedCrash:
                    with lock:
                        acked.extend((t, rid) for t in tables)  # decided: recovery must finish it
                    return
                except lv.TransactionAborted as e:
                    if e.reason != "too-old":
                        raise
                    # a loaded machine: older than MAX_AGE before its decision, so it aborted (its
                    # age is checked before the deciding write); the same rows again, as a new one
            errors.append(AssertionError(
                f"{features} writer never reached its decision within {MAX_AGE} s"))
        except BaseException as e:  # noqa: BLE001 - reported by the test, not lost in a thread
            errors.append(e)

    m = threading.Thread(target=maintenance, daemon=True)
    m.start()
    try:
        work = [threading.Thread(target=short_writers, args=(w, f))
                for w, f in ((1, "R"), (2, "R,CT"), (3, "I"), (4, ""))]
        work += [threading.Thread(target=slow_insert)]
        work += [threading.Thread(target=long_open, args=(f, t, 8000 + i))
                 for i, (f, t) in enumerate((("R", "b"), ("I", "c"), ("R,CT", "b")))]
        work += [threading.Thread(target=decided_then_dies,
                                  args=("R,CT", "_lakevilla/txns/", ("d1", "d2"), 7000)),
                 threading.Thread(target=decided_then_dies,
                                  args=("I", "_lakevilla/gvl/", ("e1", "e2"), 7001))]
        for th in work:
            th.start()
        for th in work:
            th.join(120)
        deadline = time.monotonic() + 60
        reader = backend.lake()

        def published() -> bool:
            return all(rid in [r["id"] for r in reader.read(t).to_pylist()]
                       for t, rid in (("d1", 7000), ("d2", 7000), ("e1", 7001), ("e2", 7001)))

        while not published():  # the maintenance loop's recovery publishes the decided transactions
            assert errors == []
            assert time.monotonic() < deadline, (
                "maintenance never published the decided transactions")
            time.sleep(0.05)  # awaiting the maintenance loop's progress
        before = runs["recover"]
        while runs["recover"] < before + 2:  # two more full rounds
            assert time.monotonic() < deadline
            time.sleep(0.05)
        stop.set()
        m.join(60)
        assert errors == []
        # open longer than the retention: refused, never committed
        assert sorted(too_old) == ["too-old"] * 3
        final = backend.lake(clock=lambda: time.time() + 10_000)
        final.recover()
        got = Counter()
        for t in (*TABLES, "d1", "d2", "e1", "e2"):
            _every_version_has_its_files(backend, final, t)
            rows = final.read(t).to_pylist()
            assert sorted(rows, key=lambda r: r["id"]) == backend.delta_rows(t)
            got.update((t, r["id"]) for r in rows if r["id"])
        # every acknowledged one, once
        assert all(got[k] == 1 for k in acked), [k for k in acked if got[k] != 1]
        # and nothing else (long-open and aborted ones are absent)
        assert set(got) <= set(acked)
        assert runs["abandoned"] >= 3 and runs["cleanup"] >= 3 and runs["recover"] >= 3
        assert runs["deleted_files"] > 0  # the orphan (at least) aged out and was deleted
    finally:
        stop.set()  # a failed check must not leave the maintenance loop running past the test
        m.join(60)
