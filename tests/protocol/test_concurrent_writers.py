"""Writers in real processes: contention (R redoes where plain Delta aborts), lakevilla writers
beside delta-rs writers, and an incremental delta-rs reader (why ``tail`` is the default mode)."""

from __future__ import annotations

import multiprocessing as mp
import random
from collections import Counter

import pyarrow as pa
import pytest

import lakevilla as lv
from tests.conftest import rows
from tests.helpers import (
    open_markers,
)

MODES = ["tail", "in_place"]
T = pa.schema([("id", pa.int64()), ("value", pa.int64())])


def _increments(lake, features, n):
    aborted = retries = redos = 0
    for _ in range(n):
        try:
            with lake.transaction(features) as txn:
                txn.update("c", set={"value": "value + 1"}, where="id = 1")
            retries += txn.stats["retries"]
            redos += txn.stats["redos"]
        except lv.TransactionAborted:
            aborted += 1
    return aborted, retries, redos


def _increment_worker(uri, opts, n, start, out):
    """``n`` R increments, then (once every worker's are done) ``n`` plain Delta ones; each
    phase starts on every worker at once, so that they collide."""
    lake = lv.Lake(uri, storage_options=opts or None)
    start.wait()
    r = _increments(lake, "R", n)
    start.wait()
    out.put((r, _increments(lake, "", n)))


@pytest.mark.slow
def test_contention_r_commits_everything_dl_aborts(backend):
    """Four processes increment one row: under R none aborts and every increment lands (they
    collide and redo); under plain Delta some abort or lose races, and nothing acknowledged is
    lost. Through moto 8 increments a process (its round trips cost ~10x a file's)."""
    lake = backend.lake()
    lake.create_table("c", T)
    with lake.transaction("") as txn:
        txn.insert("c", {"id": [1, 2], "value": [0, 0]})
    n = 12 if backend.kind == "local" else 8
    ctx = mp.get_context("spawn")
    out, start = ctx.Queue(), ctx.Barrier(4)
    procs = [ctx.Process(target=_increment_worker, args=(backend.uri, backend.storage_options,
                                                         n, start, out)) for _ in range(4)]
    for p in procs:
        p.start()
    res = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    assert [r[0] for r, _ in res] == [0, 0, 0, 0]  # no R transaction aborted
    assert sum(r[2] for r, _ in res) > 0  # they did collide, and redid instead of aborting
    aborted = sum(d[0] for _, d in res)
    assert aborted + sum(d[1] for _, d in res) > 0  # plain Delta: aborts (or at least lost races)
    # every R increment and every acknowledged plain one (the R phase ended before plain began)
    assert rows(lake.read("c"))[0]["value"] == 8 * n - aborted
    assert rows(lake.read("c")) == backend.delta_rows("c")


def _lv_mixed_worker(uri, opts, wid, n, mode, out):
    try:
        _lv_mixed(uri, opts, wid, n, mode, out)
    except BaseException as e:
        # reported, so the parent fails at once instead of waiting out its timeout
        out.put(("error", f"lakevilla worker {wid}: {e!r}"))


def _lv_mixed(uri, opts, wid, n, mode, out):
    rng = random.Random(wid)
    lake = lv.Lake(uri, storage_options=opts or None, commit_mode=mode)
    mine, incs = [], Counter()
    for i in range(n):
        rid = wid * 1000 + i
        lake.run(lambda t, rid=rid: t.insert("m", {"id": [rid], "owner": [wid], "value": [0]}),
                 features="R")
        mine.append(rid)
        target = rng.choice(mine)
        lake.run(lambda t, target=target: t.update("m", set={"value": "value + 1"},
                                                   where=f"id = {target}"),
                 features="R", retries=20)
        incs[target] += 1
    out.put((mine, dict(incs)))


def _delta_rs_mixed_worker(uri, opts, wid, n, mode, out):
    try:
        _delta_rs_mixed(uri, opts, wid, n, mode, out)
    except BaseException as e:
        out.put(("error", f"delta-rs worker {wid}: {e!r}"))


def _retry_commit_races(fn, attempts=200):
    """Retry what delta-rs reports as a lost commit race (as an application would); any other
    error, or races that never end, fail the test."""
    from deltalake.exceptions import CommitFailedError

    for _ in range(attempts):
        try:
            return fn()
        except CommitFailedError:
            continue
    raise AssertionError(f"delta-rs lost the commit race {attempts} times")


def _delta_rs_mixed(uri, opts, wid, n, mode, out):
    from deltalake import DeltaTable, write_deltalake

    rng = random.Random(wid)
    schema = pa.schema([("id", pa.int64()), ("owner", pa.int64()), ("value", pa.int64())])
    mine, incs = [], Counter()
    for i in range(n):
        rid = wid * 1000 + i
        _retry_commit_races(lambda rid=rid: write_deltalake(
            uri, pa.table({"id": [rid], "owner": [wid], "value": [0]}, schema=schema),
            mode="append", storage_options=opts or None))
        mine.append(rid)
        target = rng.choice(mine)
        _retry_commit_races(
            lambda target=target: DeltaTable(uri, storage_options=opts or None).update(
                updates={"value": "value + 1"}, predicate=f"id = {target}"))
        incs[target] += 1
    out.put((mine, dict(incs)))


def _mixed(args):
    kind, *rest = args
    return kind, rest


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "mode"),
                         [("local", "tail"), ("local", "in_place"), ("s3", "tail"),
                          ("azure", "tail")],
                         indirect=["backend"])
def test_mixed_lakevilla_and_delta_rs_writers(backend, mode):
    """lakevilla (R) and delta-rs writers in four processes, inserting and incrementing: every
    acknowledged row once, every increment counted, no version with a duplicate. Both commit
    modes on the local store; through moto and Azurite the default mode only (the modes differ
    in the protocol, which the local runs check; the cloud runs check the backend under mixed
    writers)."""
    lake = backend.lake(commit_mode=mode)
    lake.create_table("m", pa.schema([("id", pa.int64()), ("owner", pa.int64()),
                                      ("value", pa.int64())]))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    # through moto, delta-rs' retries cost ~10x (suite time)
    n = 8 if backend.kind == "local" else 5
    procs = [ctx.Process(target=_lv_mixed_worker,
                         args=(backend.uri, backend.storage_options, w, n, mode, out))
             for w in (1, 2)]
    procs += [ctx.Process(target=_delta_rs_mixed_worker,
                          args=(backend.table_uri("m"), backend.storage_options, w, n, mode, out))
              for w in (3, 4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    assert not [r for r in results if r[0] == "error"], results
    acked = sorted(i for mine, _ in results for i in mine)
    incs = Counter()
    for _, d in results:
        incs.update(d)
    got = rows(lake.read("m"))
    assert [r["id"] for r in got] == acked  # none lost, none duplicated
    assert {r["id"]: r["value"] for r in got} == {i: incs.get(i, 0) for i in acked}
    assert got == backend.delta_rows("m")
    latest = lake.version("m")
    # one delta-rs table walked forward: each version loads incrementally
    dt = backend.delta("m", 0)
    for v in range(latest + 1):
        dt.load_as_version(v)
        assert dt.version() == v
        ids = pa.table(dt.to_pyarrow_table()).column("id").to_pylist()
        assert len(ids) == len(set(ids)), f"version {v} has duplicates"
    assert open_markers(lake, "m") == []


def test_incremental_delta_rs_reader_tail_mode_stays_in_step_in_place_diverges(local_backend):
    """The measured reason tail is the default: delta-rs' update_incremental() never re-reads
    a version it loaded, so an in-place fill of a marker it saw empty is lost to it."""
    from deltalake import DeltaTable

    outcome = {}
    for mode in MODES:
        name = f"inc_{mode}"
        lake = local_backend.lake(commit_mode=mode)
        lake.create_table(name, T)
        with lake.transaction("") as txn:
            txn.insert(name, {"id": [1, 2], "value": [10, 20]})
        follower = DeltaTable(local_backend.table_uri(name))
        for i in range(3):
            txn = lake.begin("R")
            txn.update(name, set={"value": f"value + {i + 1}"}, where="id = 1")
            follower.update_incremental()  # loads the marker version, empty
            txn.commit()
            follower.update_incremental()
        fresh = DeltaTable(local_backend.table_uri(name))
        outcome[mode] = (sorted(pa.table(follower.to_pyarrow_table()).to_pylist(),
                                key=lambda r: r["id"]),
                         sorted(pa.table(fresh.to_pyarrow_table()).to_pylist(),
                                key=lambda r: r["id"]))
    follower_rows, fresh_rows = outcome["tail"]
    assert follower_rows == fresh_rows == [{"id": 1, "value": 16}, {"id": 2, "value": 20}]
    follower_rows, fresh_rows = outcome["in_place"]
    assert fresh_rows == [{"id": 1, "value": 16}, {"id": 2, "value": 20}]
    assert follower_rows == [{"id": 1, "value": 10}, {"id": 2, "value": 20}]  # the hazard, measured
