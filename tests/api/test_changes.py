"""``lake.changes(tables, since=, until=)``: change rows of several tables between two consistent
cuts. A multi-table transaction's changes are in a range whole or not at all; a change data
feed is read as Delta defines it (delta-rs is the judge); without one, changes are derived from
the files a commit removed and added."""

from __future__ import annotations

import datetime as dt
import os
import random
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import lakevilla as lv
from tests.api.test_lake_at import _commit_file, _moment, _transfer, _transfers, _versions_of
from tests.helpers import accounts

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])
KEY = ["id", "value", "_change_type", "_commit_version"]


def _rows(t: pa.Table, cols=KEY) -> list[tuple]:
    return sorted(tuple(r[c] for c in cols) for r in t.select(cols).to_pylist())


def _net(changes: dict[str, pa.Table]) -> int:
    """Money the changes add: inserted values minus deleted ones, over every table."""
    out = 0
    for t in changes.values():
        for r in t.select(["value", "_change_type"]).to_pylist():
            out += r["value"] if r["_change_type"] in ("insert", "update_postimage") else 0
            out -= r["value"] if r["_change_type"] in ("delete", "update_preimage") else 0
    return out


def test_changes_without_a_feed_are_derived_from_the_files_each_commit_removed_and_added(backend):
    lake = backend.lake()
    lake.create_table("t", T)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1, 2, 3], "value": [10, 20, 30]})
    with lake.transaction("R") as upd:
        upd.update("t", set={"value": "value + 1"}, where="id = 1")
    with lake.transaction("R") as dele:
        dele.delete("t", where="id = 2")
    got = lake.changes("t")["t"]
    assert got.schema.names == ["id", "value", "_change_type", "_commit_version",
                                "_commit_timestamp", "_lakevilla_txn"]
    v_upd, v_del = _versions_of(lake, "t", upd.id)[0], _versions_of(lake, "t", dele.id)[0]
    # rows a rewrite carried over unchanged (ids 2 and 3 in the update) do not show
    assert _rows(got) == sorted([(1, 10, "insert", 1), (2, 20, "insert", 1),
                                 (3, 30, "insert", 1), (1, 10, "delete", v_upd),
                                 (1, 11, "insert", v_upd), (2, 20, "delete", v_del)])
    txns = {r["_commit_version"]: r["_lakevilla_txn"] for r in got.to_pylist()}
    assert txns[v_upd] == upd.id and txns[v_del] == dele.id
    times = {h.version: h.timestamp for h in lake.history("t")}
    assert all(r["_commit_timestamp"] <= times[r["_commit_version"]]
               for r in got.to_pylist())  # markers never push a commit's time later here
    since = lake.changes("t", since=_moment(time.time()))["t"]
    assert since.num_rows == 0 and since.schema == got.schema


def test_a_change_data_feed_is_read_as_delta_rs_reads_it(tmp_path):
    from deltalake import DeltaTable, write_deltalake

    uri = str(tmp_path / "l" / "t")
    write_deltalake(uri, pa.table({"id": [1, 2, 3], "value": [10, 20, 30]}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    dt_ = DeltaTable(uri)
    dt_.update(updates={"value": "value + 1"}, predicate="id = 1")
    dt_.delete("id = 2")
    write_deltalake(uri, pa.table({"id": [4], "value": [40]}), mode="append")
    judge = pa.table(DeltaTable(uri).load_cdf(starting_version=0).read_all())
    got = lv.Lake(str(tmp_path / "l")).changes("t")["t"]
    assert _rows(got) == _rows(judge)
    assert {"update_preimage", "update_postimage"} <= set(got.column("_change_type").to_pylist())
    assert got.column("_lakevilla_txn").null_count == got.num_rows  # delta-rs wrote them all


def test_rows_marked_deleted_by_a_deletion_vector_are_the_only_change(tmp_path):
    lake = lv.Lake(str(tmp_path / "l"))
    lake.create_table("t", T, properties={"delta.enableDeletionVectors": "true"})
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1, 2, 3], "value": [10, 20, 30]})
    before = _moment(time.time())
    with lake.transaction("R") as dele:
        dele.delete("t", where="id = 2")
    v = _versions_of(lake, "t", dele.id)[0]
    c = lake._client.log("t").read_commit(v)
    assert c.adds[0].deletion_vector is not None  # the delete marked rows, rewrote nothing
    assert _rows(lake.changes("t", since=before)["t"]) == [(2, 20, "delete", v)]
    with lake.transaction("R") as again:
        again.delete("t", where="id = 3")
    w = _versions_of(lake, "t", again.id)[0]
    assert _rows(lake.changes("t", since=before)["t"]) == [(2, 20, "delete", v),
                                                           (3, 30, "delete", w)]


def test_a_range_boundary_between_a_transfers_two_commits_never_splits_it(local_backend):
    """The transfer's commit to ``a`` is dated before the boundary, its commit to ``b`` after:
    per-table ranges would put ``a``'s half in the first range and ``b``'s in the second. Both
    halves go to the range the whole transfer is in (the second)."""
    lake = accounts(local_backend)
    start = _moment(time.time())
    with lake.transaction("R,CT") as txn:
        _transfer(txn)
    root = Path(local_backend.uri.removeprefix("file://"))
    base = time.time() + 3600
    for t, at in (("a", base), ("b", base + 60)):
        v = _versions_of(lake, t, txn.id)[0]
        for u in range(v, lake.version(t) + 1):
            os.utime(_commit_file(root, t, u), (at, at))
    boundary, end = _moment(base + 30), _moment(base + 61)
    first = lake.changes(["a", "b"], since=start, until=boundary)
    second = lake.changes(["a", "b"], since=boundary, until=end)
    assert first["a"].num_rows == first["b"].num_rows == 0
    assert _rows(second["a"], ["id", "value", "_change_type"]) == [(1, -5, "insert"),
                                                                   (1, 0, "delete")]
    assert _net(second) == 0 and set(second["b"].column("_lakevilla_txn").to_pylist()) == {txn.id}


def test_changes_between_any_two_moments_of_concurrent_transfers_conserve_money(local_backend):
    lake = accounts(local_backend)
    start = time.time()
    errors: list[BaseException] = []
    writers = [threading.Thread(target=_transfers, args=(local_backend.lake(), 8, i, errors))
               for i in range(2)]
    for th in writers:
        th.start()
    for th in writers:
        th.join()
    assert errors == []
    moments = sorted({h.timestamp.timestamp() for t in ("a", "b") for h in lake.history(t)
                      if h.timestamp.timestamp() >= start})
    rnd = random.Random(3)
    pairs = [sorted(rnd.sample(moments, 2)) for _ in range(15)] + [[start, moments[-1]]]
    for lo, hi in pairs:
        assert _net(lake.changes(["a", "b"], since=_moment(lo), until=_moment(hi))) == 0


def test_since_after_until_and_a_range_older_than_the_kept_log_are_refused(tmp_path):
    lake = lv.Lake(str(tmp_path / "l"))
    lake.create_table("t", T)
    for i in range(3):
        with lake.transaction("") as txn:
            txn.insert("t", {"id": [i], "value": [i]})
    now = dt.datetime.now(dt.UTC)
    with pytest.raises(lv.InvalidArgumentError, match="since is after until"):
        lake.changes("t", since=now, until=now - dt.timedelta(hours=1))
    log = tmp_path / "l" / "t" / "_delta_log"
    lake.maintenance.checkpoint("t")
    (log / f"{0:020d}.json").unlink()
    (log / f"{1:020d}.json").unlink()
    with pytest.raises(lv.MomentTooOldError, match="oldest moment changes can be read from"):
        lv.Lake(str(tmp_path / "l")).changes("t")
