"""txn.optimize: bin-packing compaction, dataChange false, conflicts only on its own files,
redone under R beside concurrent writers."""

from __future__ import annotations

import json
import multiprocessing as mp

import pyarrow as pa
import pytest

import lakevilla as lv
from tests.conftest import Backend

T = pa.schema([("id", pa.int64()), ("x", pa.int64()), ("p", pa.string())])
FEATURES = ["", "R", "R,CT", "R,CT,I"]


def _ids(table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def _small_files(lake, name="t", n=6, parts=("a", "b")):
    for i in range(n):
        with lake.transaction("") as txn:
            txn.insert(name, {"id": [i * 10 + k for k in range(len(parts))], "x": [i] * len(parts),
                              "p": list(parts)})


def _actions(backend: Backend, version: int) -> list[dict]:
    store = backend.store()
    raw = store.get(f"t/_delta_log/{version:020d}.json").data.decode()
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


@pytest.mark.parametrize("features", FEATURES)
def test_optimize_compacts_per_partition_and_changes_no_row(backend: Backend, features):
    lake = backend.lake()
    lake.create_table("t", T, partition_by=["p"])
    _small_files(lake)
    before = _ids(lake.read("t"))
    assert len(lake.snapshot("t").files) == 12
    with lake.transaction(features) as txn:
        m = txn.optimize("t", target_file_size=1 << 20)
        if features:
            assert _ids(txn.read("t")) == before  # later statements see the compacted view
    assert (m["files_removed"], m["files_added"], m["partitions_optimized"], m["rows"]) == (
        12, 2, 2, 12)
    snap = lake.snapshot("t")
    assert sorted(a.partition_values["p"] for a in snap.files.values()) == ["a", "b"]
    assert _ids(lake.read("t")) == before == [r["id"] for r in backend.delta_rows("t")]
    acts = _actions(backend, snap.version)
    assert {a["commitInfo"]["operation"] for a in acts if "commitInfo" in a} == {"OPTIMIZE"}
    changes = [a.get("add", a.get("remove")) for a in acts if "add" in a or "remove" in a]
    assert len(changes) == 14 and all(c["dataChange"] is False for c in changes)
    with lake.transaction(features) as txn:  # nothing left to compact
        assert txn.optimize("t", target_file_size=1 << 20)["files_removed"] == 0


def test_optimize_where_target_and_bad_input(local_backend: Backend):
    lake = local_backend.lake()
    lake.create_table("t", T, partition_by=["p"])
    _small_files(lake, n=4)
    size = max(a.size for a in lake.snapshot("t").files.values())
    with lake.transaction("R") as txn:
        with pytest.raises(lv.InvalidArgumentError, match="non-partition"):
            txn.optimize("t", where="x > 1")
        with pytest.raises(lv.InvalidArgumentError, match="target_file_size"):
            txn.optimize("t", target_file_size=0)
        m = txn.optimize("t", where="p = 'a'", target_file_size=2 * size + 1)  # two files per bin
    assert (m["files_removed"], m["files_added"]) == (4, 2)
    files = lake.snapshot("t").files.values()
    assert sorted(a.partition_values["p"] for a in files) == ["a", "a", "b", "b", "b", "b"]
    with lake.transaction("R") as txn:  # files at or above the target are left alone
        assert txn.optimize("t", target_file_size=size)["files_removed"] == 0
    assert _ids(lake.read("t")) == [r["id"] for r in local_backend.delta_rows("t")]


def test_optimize_of_rows_written_in_the_same_transaction_is_a_data_change(local_backend: Backend):
    lake = local_backend.lake()
    lake.create_table("t", T)
    _small_files(lake, n=2, parts=("a",))
    with lake.transaction("R") as txn:
        txn.insert("t", {"id": [99], "x": [9], "p": ["a"]})
        assert txn.optimize("t")["files_removed"] == 3
    adds = [a["add"] for a in _actions(local_backend, lake.version("t")) if "add" in a]
    assert len(adds) == 1 and adds[0]["dataChange"] is True  # row 99 is new to every reader
    assert _ids(lake.read("t")) == [0, 10, 99]


@pytest.mark.parametrize("features", ["R", "CT"])
def test_optimize_conflicts_only_on_its_own_files(backend: Backend, features):
    """A blind append and a change to a file it did not compact commit beside it; a delete of
    one of its files conflicts: redone on what is left under R, aborted without R."""
    lake = backend.lake()
    lake.create_table("t", T, partition_by=["p"])
    _small_files(lake, n=3)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [500], "x": [0], "p": ["big"]})
    opt = lake.begin(features)
    opt.optimize("t", where="p = 'a' OR p = 'b'", target_file_size=1 << 20)
    with lake.transaction("") as w:
        # blind append into a compacted partition
        w.insert("t", {"id": [200], "x": [0], "p": ["a"]})
        w.delete("t", where="id = 500")  # a file the compaction did not touch
    opt.commit()
    assert opt.stats["conflicts"] == 0
    assert _ids(lake.read("t")) == [0, 1, 10, 11, 20, 21, 200]

    opt = lake.begin(features)
    opt.optimize("t", target_file_size=1 << 20)
    with lake.transaction("") as w:
        w.delete("t", where="id = 10")  # rewrites a file the compaction removed
    if features == "R":
        opt.commit()
        assert opt.stats["redos"] == 1
    else:
        with pytest.raises(lv.TransactionAborted, match="was removed"):
            opt.commit()
    want = [0, 1, 11, 20, 21, 200]
    assert _ids(lake.read("t")) == want == [r["id"] for r in backend.delta_rows("t")]


def test_a_compaction_does_not_invalidate_a_concurrent_reader(local_backend: Backend):
    """Rows a compaction moves are the same rows: a serializable transaction that read them
    (and wrote) commits without a conflict; one that rewrote a compacted file conflicts."""
    lake = local_backend.lake(wait_timeout=20.0)
    lake.create_table("t", T)
    _small_files(lake, n=4, parts=("a",))
    reader = lake.begin("I")
    assert _ids(reader.read("t", where="x >= 0")) == [0, 10, 20, 30]
    reader.insert("t", {"id": [40], "x": [4], "p": ["a"]})
    writer = lake.begin("CT")
    writer.update("t", set={"x": "x + 100"}, where="id = 0")
    with lake.transaction("") as opt:  # plain Delta: it does not wait for their markers
        opt.optimize("t", where=None)  # compacts every file, including the ones both read
    with pytest.raises(lv.TransactionAborted, match="was removed"):
        writer.commit()
    reader.commit()
    assert reader.stats["conflicts"] == 0
    assert {r["id"]: r["x"] for r in lake.read("t").to_pylist()} == {
        0: 0, 10: 1, 20: 2, 30: 3, 40: 4}


def _writer(uri: str, opts: dict, w: int, n: int, out, start=None) -> None:
    # a loaded machine waits, never aborts
    lake = lv.Lake(uri, storage_options=opts or None, wait_timeout=300.0)
    if start is not None:
        start.wait(120)  # the optimizer is up: the writes and the compactions overlap
    acked, deleted, aborts = [], [], []
    for i in range(n):
        rid = w * 1000 + i
        txn = lake.begin("R")
        try:
            txn.insert("t", {"id": [rid], "x": [i], "p": ["ab"[i % 2]]})
            if i % 3 == 2:
                txn.delete("t", where=f"id = {rid - 2}")
            txn.commit()
            acked.append(rid)
            if i % 3 == 2:
                deleted.append(rid - 2)
        except lv.TransactionAborted as e:
            aborts.append(str(e))
    lake.close()
    out.put(("writer", acked, deleted, aborts, 0))


def _optimizer(uri: str, opts: dict, start, writers_done, out) -> None:
    """Compacts while the writers run: each round waits until they committed two more
    versions (a condition on the log, not a time), so every round has new small files."""
    # a loaded machine waits, never aborts
    lake = lv.Lake(uri, storage_options=opts or None, wait_timeout=300.0)
    aborts: list[str] = []
    redos = compacted = rounds = 0
    seen = lake.version("t")
    start.set()
    while not writers_done.is_set():
        if lake.version("t") < seen + 2:
            writers_done.wait(0.005)  # returns at once when the writers finish
            continue
        txn = lake.begin("R")
        try:
            compacted += txn.optimize("t", target_file_size=1 << 20)["files_removed"]
            txn.commit()
            redos += txn.stats["redos"]
            rounds += 1
        except lv.TransactionAborted as e:
            aborts.append(str(e))
        seen = lake.version("t")
    lake.close()
    out.put(("optimizer", compacted, redos, aborts, rounds))


@pytest.mark.slow
def test_compaction_beside_concurrent_writers_loses_and_duplicates_nothing(local_backend: Backend):
    lake = local_backend.lake()
    lake.create_table("t", T, partition_by=["p"])
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    per = 24
    start, writers_done = ctx.Event(), ctx.Event()
    procs = [ctx.Process(target=_writer, args=(local_backend.uri, {}, w, per, out, start))
             for w in range(2)]
    procs.append(ctx.Process(target=_optimizer,
                             args=(local_backend.uri, {}, start, writers_done, out)))
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs[:2]]
    writers_done.set()
    results.append(out.get(timeout=600))
    for p in procs:
        p.join(60)
    writers = [r for r in results if r[0] == "writer"]
    (opt,) = [r for r in results if r[0] == "optimizer"]
    acked = sorted(x for r in writers for x in r[1])
    deleted = {x for r in writers for x in r[2]}
    assert [m for r in writers for m in r[3]] == [] and opt[3] == []  # no aborts under R
    assert len(acked) == 2 * per
    got = lake.read("t").column("id").to_pylist()
    assert len(got) == len(set(got)), "duplicate rows"
    assert sorted(got) == sorted(set(acked) - deleted)
    assert sorted(got) == [r["id"] for r in local_backend.delta_rows("t")]
    assert opt[4] > 0 and opt[1] > 0, opt  # compactions ran during the writes, and compacted
