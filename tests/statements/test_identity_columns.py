"""Identity columns (field metadata ``delta.identity.*``, writer feature ``identityColumns``):
every statement that writes new rows numbers the identity columns the data does not give, from
``start`` by ``step`` past the table's high-water mark, and writes the new mark in a metaData
action of the same commit. Concurrent writers never share a value: the mark is metadata, so two
writers conflict and the loser numbers again (R's redo, LV[DL]'s retry). delta-rs is the
judge of what is stored."""

from __future__ import annotations

import json
import threading

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.store import open_store
from tests.helpers import HookStore

FEATURES = ["", "R", "R,CT", "R,CT,I"]


def _table(backend, start: int = 1, step: int = 1, explicit: bool = False, **kw):
    lake = backend.lake()
    schema = pa.schema([pa.field("id", pa.int64(), False,
                                 metadata=lv.identity(start, step, explicit)),
                        pa.field("v", pa.string())])
    lake.create_table("t", schema, **kw)
    return lake


def _ids(backend) -> list[int]:
    return sorted(r["id"] for r in backend.delta("t").to_pyarrow_table().to_pylist())


def _mark(backend) -> int | None:
    fields = json.loads(backend.delta("t").schema().to_json())["fields"]
    return fields[0]["metadata"].get("delta.identity.highWaterMark")


@pytest.mark.parametrize("features", FEATURES)
@pytest.mark.parametrize("start,step", [(1, 1), (100, -7)])
def test_inserts_number_the_identity_column_from_start_by_step(local_backend, features, start,
                                                               step):
    """Two statements in one transaction, then another transaction: the values run on from
    ``start`` by ``step`` (either sign), the mark is the last one, delta-rs reads it all."""
    lake = _table(local_backend, start, step)
    with lake.transaction(features) as txn:
        txn.insert("t", {"v": ["a", "b"]})
        txn.insert("t", pa.RecordBatchReader.from_batches(
            pa.schema([("v", pa.string())]), pa.table({"v": ["c"]}).to_batches()))
    with lake.transaction(features) as txn:
        txn.insert("t", [{"v": "d"}])
    want = [start + i * step for i in range(4)]
    assert _ids(local_backend) == sorted(want)
    assert _mark(local_backend) == want[-1]
    proto = local_backend.delta("t").protocol()
    assert "identityColumns" in (proto.writer_features or [])


@pytest.mark.parametrize("features", ["", "R"])
def test_a_given_identity_value_is_refused_unless_explicit_inserts_are_allowed(
        local_backend, features):
    lake = _table(local_backend)
    with pytest.raises(lv.SchemaMismatchError, match="identity column"):
        with lake.transaction(features) as txn:
            txn.insert("t", {"id": [5], "v": ["x"]})
    with pytest.raises(lv.SchemaMismatchError, match="identity column"):
        with lake.transaction(features) as txn:
            txn.update("t", {"id": "7"})
    assert _ids(local_backend) == []

    other = lv.Lake(local_backend.uri + "2")
    schema = pa.schema([pa.field("id", pa.int64(), metadata=lv.identity(1, 1, True)),
                        pa.field("v", pa.string())])
    other.create_table("t", schema)
    with other.transaction(features) as txn:
        txn.insert("t", {"id": [50], "v": ["given"]})
        txn.insert("t", {"v": ["generated"]})
    got = sorted(r["id"] for r in other.read("t").to_pylist())
    assert got == [1, 50]  # a given value leaves the mark alone


@pytest.mark.parametrize("features", ["", "R", "R,CT"])
def test_merge_inserts_and_overwrites_number_the_identity_column(local_backend, features):
    lake = _table(local_backend)
    with lake.transaction(features) as txn:
        txn.insert("t", {"v": ["a", "b"]})
    src = pa.table({"v": ["b", "c", "d"]})
    with lake.transaction(features) as txn:
        txn.merge("t", src, on="t.v = s.v", source_alias="s", target_alias="t") \
            .when_not_matched_insert_all().execute()
    assert _ids(local_backend) == [1, 2, 3, 4]
    with lake.transaction(features) as txn:
        txn.overwrite("t", {"v": ["x", "y"]})
    rows = sorted((r["id"], r["v"]) for r in local_backend.delta("t").to_pyarrow_table()
                  .to_pylist())
    assert rows == [(5, "x"), (6, "y")]
    assert _mark(local_backend) == 6
    with pytest.raises(lv.SchemaMismatchError, match="identity column"):
        with lake.transaction(features) as txn:
            txn.merge("t", pa.table({"id": [9], "v": ["z"]}), on="t.v = s.v", source_alias="s",
                      target_alias="t").when_not_matched_insert_all().execute()


def test_an_r_insert_that_loses_to_a_concurrent_insert_is_numbered_again_above_it(
        backend):
    """A numbers its rows, B commits its own from the same mark first: A's commit conflicts
    (the mark is metadata), its redo numbers the rows again above B's."""
    lake = _table(backend)
    a = lake.transaction("R")
    a.insert("t", {"v": ["a1", "a2"]})
    with backend.lake().transaction("R") as b:
        b.insert("t", {"v": ["b1", "b2", "b3"]})
    a.commit()
    rows = {r["v"]: r["id"] for r in backend.delta("t").to_pyarrow_table().to_pylist()}
    assert rows == {"b1": 1, "b2": 2, "b3": 3, "a1": 4, "a2": 5}
    assert _mark(backend) == 5


def test_an_r_overwrite_and_merge_that_lose_to_a_concurrent_insert_number_again(local_backend):
    """The overwrite's new rows (kept across other redos) and the merge's inserted rows are
    numbered again above the concurrent insert's mark."""
    lake = _table(local_backend)
    with lake.transaction("R") as txn:
        txn.insert("t", {"v": ["old"]})
    a = lake.transaction("R")
    a.overwrite("t", {"v": ["new1", "new2"]})
    a.merge("t", pa.table({"v": ["new1", "m"]}), on="t.v = s.v", source_alias="s",
            target_alias="t").when_not_matched_insert_all().execute()
    with local_backend.lake().transaction("R") as b:
        b.insert("t", {"v": ["b1", "b2"]})
    a.commit()
    rows = {r["v"]: r["id"] for r in local_backend.delta("t").to_pyarrow_table().to_pylist()}
    # serialised after B: the redone overwrite replaced B's rows too, numbering past B's mark
    assert rows == {"new1": 4, "new2": 5, "m": 6}
    assert _mark(local_backend) == 6


def test_a_plain_delta_insert_that_loses_the_race_is_numbered_again(local_backend):
    """LV[DL]: another writer's insert lands on the version ours was about to take; ours finds
    the mark moved, numbers its rows again above it and commits at the next version."""
    _table(local_backend)
    other = local_backend.lake()

    def first(kind: str, key: str) -> bool:
        return kind == "put_if_absent" and key.endswith(f"t/_delta_log/{1:020d}.json")

    def theirs() -> None:
        with other.transaction("") as t:
            t.insert("t", {"v": ["theirs"]})

    store = HookStore(open_store(local_backend.uri), first, theirs)
    with lv.Lake(local_backend.uri, store=store).transaction("") as txn:
        txn.insert("t", {"v": ["ours1", "ours2"]})
    assert store.fired == 1
    rows = {r["v"]: r["id"] for r in local_backend.delta("t").to_pyarrow_table().to_pylist()}
    assert rows == {"theirs": 1, "ours1": 2, "ours2": 3}
    assert _mark(local_backend) == 3


@pytest.mark.parametrize("features", ["", "R", "R,CT"])
def test_concurrent_writers_never_share_an_identity_value(local_backend, features):
    """Four threads inserting at once, each through its own lake: every value distinct, the
    values exactly start..n for the n rows committed (an insert that gave up under contention,
    as LV[DL] may after its retries, took none), the mark the last."""
    _table(local_backend)
    errors: list[BaseException] = []
    committed = [0]
    lock = threading.Lock()

    def writer(w: int) -> None:
        lake = local_backend.lake()
        for _ in range(6):
            try:
                with lake.transaction(features) as txn:
                    txn.insert("t", {"v": [f"w{w}", f"w{w}"]})
                with lock:
                    committed[0] += 2
            except lv.TransactionAborted as e:
                if features:  # R redoes a conflict: only plain Delta gives up
                    errors.append(e)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert committed[0] >= 2
    assert _ids(local_backend) == list(range(1, committed[0] + 1))
    assert _mark(local_backend) == committed[0]


def test_a_resumed_transaction_keeps_the_marks_its_inserts_left(local_backend):
    """The sublog entry of an insert carries its marks: the resumed transaction commits them
    and numbers its next rows past them."""
    import time

    from tests.helpers import entries_landed

    ttl = 5.0
    lake = local_backend.lake(marker_ttl=ttl)
    lake.create_table("t", pa.schema([pa.field("id", pa.int64(), False,
                                               metadata=lv.identity(1, 1)),
                                      pa.field("v", pa.string())]))
    crashed = lake.begin("R")
    crashed.insert("t", {"v": ["a", "b"]})
    lake._client.heartbeats.forget(crashed)
    entries_landed(crashed)
    later = local_backend.lake(marker_ttl=ttl, clock=lambda: time.time() + 10_000.0)
    resumed = later.resume(crashed.id)
    resumed.insert("t", {"v": ["c"]})
    resumed.commit()
    assert _ids(local_backend) == [1, 2, 3]
    assert _mark(local_backend) == 3


@pytest.mark.parametrize("inside", [False, True], ids=["create_table", "in-a-transaction"])
def test_a_table_created_with_rows_numbers_them_and_keeps_the_mark(local_backend, inside):
    lake = local_backend.lake()
    schema = pa.schema([pa.field("id", pa.int64(), False, metadata=lv.identity(5, 5)),
                        pa.field("v", pa.string())])
    if inside:
        with lake.transaction("R") as txn:
            txn.create_table("t", schema, data={"v": ["a", "b"]})
    else:
        lake.create_table("t", schema, data={"v": ["a", "b"]})
    with lake.transaction("R") as txn:
        txn.insert("t", {"v": ["c"]})
    assert _ids(local_backend) == [5, 10, 15]
    assert _mark(local_backend) == 15
