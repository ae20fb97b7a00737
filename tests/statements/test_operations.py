"""The embedded engine through transactions: pruning, minimal rewrites, input forms, errors."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.store import CountingStore
from tests.conftest import rows

ACC = pa.schema([("id", pa.int64()), ("region", pa.string()), ("balance", pa.int64())])


def _counting_lake(backend, **kw):
    store = CountingStore(backend.store())
    return backend.lake(store=store, **kw), store


def _data_gets(store: CountingStore, lake, fn) -> int:
    """Data files (not log files) that fn reads from (whole or by ranged GETs)."""
    import lakevilla.store.wrappers as w

    seen = set()
    orig, orig_range = w.CountingStore.get, w.CountingStore.get_range

    def note(key):
        if key.endswith(".parquet") and "/_delta_log/" not in key:
            seen.add(key)

    def spy(self, key):
        note(key)
        return orig(self, key)

    def spy_range(self, key, start, length=None):
        note(key)
        return orig_range(self, key, start, length)

    w.CountingStore.get, w.CountingStore.get_range = spy, spy_range
    try:
        fn()
    finally:
        w.CountingStore.get, w.CountingStore.get_range = orig, orig_range
    return len(seen)


def test_read_prunes_by_partition_and_stats(backend):
    lake, store = _counting_lake(backend)
    lake.create_table("acc", ACC, partition_by=["region"])
    for i, region in enumerate(["eu", "us", "ap"]):
        with lake.transaction(features="") as txn:
            txn.insert("acc", {"id": list(range(i * 100, i * 100 + 100)), "region": [region] * 100,
                               "balance": [10] * 100})
    assert len(lake.snapshot("acc").files) == 3
    got = {}
    n = _data_gets(store, lake,
                   lambda: got.setdefault("p", lake.read("acc", where="region = 'us'")))
    assert (n == 1 and got["p"].num_rows == 100
            and set(got["p"].column("region").to_pylist()) == {"us"})
    n = _data_gets(store, lake, lambda: got.setdefault("s", lake.read("acc", where="id = 250")))
    assert n == 1 and got["s"].to_pylist() == [{"id": 250, "region": "ap", "balance": 10}]
    n = _data_gets(store, lake,
                   lambda: got.setdefault("r", lake.read(
                       "acc", where="id BETWEEN 150 AND 160 OR id IN (5)")))
    assert n == 2 and got["r"].num_rows == 12
    n = _data_gets(store, lake, lambda: got.setdefault("none", lake.read("acc", where="id > 1000")))
    assert n == 0 and got["none"].num_rows == 0
    n = _data_gets(store, lake,
                   lambda: got.setdefault("all", lake.read("acc", where="balance = 10")))
    assert n == 3 and got["all"].num_rows == 300
    with lake.transaction(features="R") as txn:  # the same pruning inside a transaction
        n = _data_gets(store, lake,
                       lambda: got.setdefault("t", txn.read("acc", where="id = 5",
                                                            columns=["balance"])))
    assert n == 1 and got["t"].to_pylist() == [{"balance": 10}]


@pytest.mark.parametrize("features", ["", "R"])
def test_update_and_delete_rewrite_only_the_files_they_must(backend, features):
    lake = backend.lake()
    lake.create_table("acc", ACC)
    for i in range(3):
        with lake.transaction(features="") as txn:
            txn.insert("acc", {"id": list(range(i * 10, i * 10 + 10)), "region": ["eu"] * 10,
                               "balance": [100] * 10})
    before = lake.snapshot("acc").files
    with lake.transaction(features=features) as txn:
        assert txn.update("acc", set={"balance": "balance - 5"}, where="id = 12 OR id = 13") == 2
    after = lake.snapshot("acc").files
    assert len(set(before) - set(after)) == 1 and len(set(after) - set(before)) == 1
    with lake.transaction(features=features) as txn:
        # a whole file goes: removed, nothing added
        assert txn.delete("acc", where="id >= 20") == 10
        assert txn.update("acc", set={"balance": "0"}, where="id = 999") == 0
    final = lake.snapshot("acc").files
    assert len(final) == 2
    got = rows(lake.read("acc"))
    assert [r["balance"] for r in got if r["id"] in (12, 13)] == [95, 95]
    assert max(r["id"] for r in got) == 19
    assert rows(lake.read("acc")) == backend.delta_rows("acc")


def test_partitioned_update_moves_rows_between_partitions(local_backend):
    lake = local_backend.lake()
    lake.create_table("acc", ACC, partition_by="region")
    with lake.transaction(features="R") as txn:
        txn.insert("acc", {"id": [1, 2, 3], "region": ["eu", "eu", "us"], "balance": [1, 2, 3]})
        txn.update("acc", set={"region": "'us'"}, where="id = 1")
    assert rows(lake.read("acc", where="region = 'us'")) == [
        {"id": 1, "region": "us", "balance": 1}, {"id": 3, "region": "us", "balance": 3}]
    assert rows(lake.read("acc")) == local_backend.delta_rows("acc")
    paths = sorted(lake.snapshot("acc").files)
    assert all(p.startswith(("region=eu/", "region=us/")) for p in paths)


def test_insert_accepts_common_forms_and_fills_missing_nullable_columns(local_backend):
    lake = local_backend.lake()
    lake.create_table("acc", ACC)
    with lake.transaction(features="R") as txn:
        txn.insert("acc", pa.table({"id": [1], "region": ["eu"], "balance": [1]}))
        txn.insert("acc", pd.DataFrame({"id": [2], "region": ["eu"], "balance": [2]}))
        txn.insert("acc", {"id": [3], "balance": [3]})
        txn.insert("acc", [{"id": 4, "region": "us", "balance": 4}])
        # case, safe widening
        txn.insert("acc", pa.table({"ID": pa.array([5], pa.int32()), "Balance": [5]}))
        # rows with different keys: a key only later rows carry is a column, not dropped
        txn.insert("acc", [{"id": 6}, {"id": 7, "region": "ap"}, {"balance": 8, "id": 8}])
    got = rows(lake.read("acc"))
    assert [r["id"] for r in got] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert got[2]["region"] is None
    assert [(r["region"], r["balance"]) for r in got[5:]] == [(None, None), ("ap", None), (None, 8)]


def test_read_inside_transaction_sees_own_writes_and_a_fixed_snapshot(local_backend):
    lake = local_backend.lake()
    lake.create_table("acc", ACC)
    with lake.transaction(features="") as txn:
        txn.insert("acc", {"id": [1, 2], "region": ["eu", "eu"], "balance": [10, 20]})
    t1 = lake.begin(features="R")
    assert t1.read("acc", where="id = 1").num_rows == 1
    with lake.transaction(features="") as other:  # a concurrent plain Delta append of other rows
        other.insert("acc", {"id": [3], "region": ["eu"], "balance": [30]})
    t1.insert("acc", {"id": [4], "region": ["eu"], "balance": [40]})
    # own write, fixed snapshot
    assert sorted(t1.read("acc", where="id > 0").column("id").to_pylist()) == [1, 2, 4]
    with pytest.raises(lv.TransactionAborted, match="invalidates a read"):
        t1.commit()  # the second read (id > 0) missed row 3: a phantom, so no serial order exists
    assert sorted(lake.read("acc").column("id").to_pylist()) == [1, 2, 3]


def test_concurrent_append_outside_the_read_predicate_does_not_conflict(local_backend):
    """Precision locking: the appended file's stats cannot match id = 1."""
    lake = local_backend.lake()
    lake.create_table("acc", ACC)
    with lake.transaction(features="") as txn:
        txn.insert("acc", {"id": [1, 2], "region": ["eu", "eu"], "balance": [10, 20]})
    t1 = lake.begin(features="R")
    bal = t1.read("acc", where="id = 1").column("balance")[0].as_py()
    with lake.transaction(features="") as other:
        other.insert("acc", {"id": [3], "region": ["eu"], "balance": [30]})
    t1.update("acc", set={"balance": str(bal + 1)}, where="id = 1")
    t1.commit()
    assert rows(lake.read("acc")) == [{"id": 1, "region": "eu", "balance": 11},
                                      {"id": 2, "region": "eu", "balance": 20},
                                      {"id": 3, "region": "eu", "balance": 30}]


# -- bad input ------------------------------------------------------------------------

BAD_INPUTS = [
    ("unknown table", lv.TableNotFoundError, lambda t: t.read("nope")),
    ("unknown table insert", lv.TableNotFoundError, lambda t: t.insert("nope", {"id": [1]})),
    ("extra column", lv.SchemaMismatchError,
     lambda t: t.insert("acc", {"id": [1], "colour": ["red"]})),
    ("wrong type", lv.SchemaMismatchError, lambda t: t.insert("acc", {"id": ["one"]})),
    ("not insertable", lv.SchemaMismatchError, lambda t: t.insert("acc", 42)),
    ("rows not dicts", lv.SchemaMismatchError,
     lambda t: t.insert("acc", [{"id": 1}, (2, "eu", 3)])),
    ("rows mixed types", lv.SchemaMismatchError,
     lambda t: t.insert("acc", [{"id": 1}, {"id": "two"}])),
    ("row column unknown", lv.SchemaMismatchError,
     lambda t: t.insert("acc", [{"id": 1}, {"id": 2, "colour": "x"}])),
    ("where syntax", lv.InvalidExpressionError, lambda t: t.read("acc", where="id = = 1")),
    ("where column", lv.InvalidExpressionError, lambda t: t.delete("acc", where="colour = 'red'")),
    ("where not boolean", lv.InvalidExpressionError, lambda t: t.delete("acc", where="id + 1")),
    ("where two statements", lv.InvalidExpressionError,
     lambda t: t.delete("acc", where="true; DROP TABLE x")),
    ("set column", lv.InvalidExpressionError,
     lambda t: t.update("acc", set={"colour": "'x'"}, where="id = 1")),
    ("set syntax", lv.InvalidExpressionError,
     lambda t: t.update("acc", set={"balance": "balance +"})),
    ("set type", lv.InvalidExpressionError,
     lambda t: t.update("acc", set={"balance": "'lots'"}, where="id = 1")),
    ("set empty", lv.InvalidArgumentError, lambda t: t.update("acc", set={})),
    ("escape dots", lv.InvalidTableNameError, lambda t: t.insert("../acc", {"id": [1]})),
    ("escape nested", lv.InvalidTableNameError, lambda t: t.read("a/../../acc")),
    ("absolute", lv.InvalidTableNameError, lambda t: t.read("/etc/passwd")),
    ("url", lv.InvalidTableNameError, lambda t: t.read("s3://other/acc")),
    ("reserved", lv.InvalidTableNameError, lambda t: t.read("_lakevilla")),
    ("bad columns", lv.InvalidArgumentError, lambda t: t.read("acc", columns="id")),
]


# Input is refused before anything reaches the store, so one backend shows it for most cases;
# names that could escape the lake's prefix are tried through moto too, where keys are not paths.
_KEYS_AT_STAKE = {"escape dots", "escape nested", "absolute", "url", "reserved"}


@pytest.mark.parametrize("features", ["", "R", "R,CT,I"])
@pytest.mark.parametrize(("backend", "case"), [
    pytest.param(kind, c, id=f"{kind}-{c[0]}") for c in BAD_INPUTS
    for kind in ("local", "s3") if kind == "local" or c[0] in _KEYS_AT_STAKE], indirect=["backend"])
def test_bad_input_raises_a_clear_error_and_changes_nothing(backend, features, case):
    _, err, action = case
    lake = backend.lake()
    lake.create_table("acc", ACC)
    with lake.transaction(features="") as txn:
        txn.insert("acc", {"id": [1, 2], "region": ["eu", "us"], "balance": [10, 20]})
    def keys():  # I: the global log may have taken the table in (any reader of it does)
        return [k for k in backend.all_keys() if not k.startswith("_lakevilla/gvl/")]

    before = keys()
    with pytest.raises(err) as info, lake.transaction(features=features) as txn:
        action(txn)
    assert isinstance(info.value, lv.LakeVillaError)
    lake.flush()
    assert keys() == before
    assert rows(lake.read("acc")) == [{"id": 1, "region": "eu", "balance": 10},
                                      {"id": 2, "region": "us", "balance": 20}]


def test_table_names_may_hold_dots_inside_a_segment(local_backend):
    """Delta tables are often named with dots (delta-rs' ``delta-0.8.0``): written, listed and
    read by lakevilla and delta-rs; a segment that starts with a dot, or a trailing newline, is
    still no table name."""
    lake = local_backend.lake()
    for name in ("sales.v2", "db.x/t-0.8.0"):
        lake.create_table(name, ACC)
        with lake.transaction(features="R") as txn:
            txn.insert(name, {"id": [1], "region": ["eu"], "balance": [5]})
        assert rows(lake.read(name)) == [{"id": 1, "region": "eu", "balance": 5}]
        assert local_backend.delta_rows(name) == [{"id": 1, "region": "eu", "balance": 5}]
    assert set(lake.tables()) == {"sales.v2", "db.x/t-0.8.0"}
    for bad in (".hidden", "a/.b", "sales.v2\n"):
        with pytest.raises(lv.InvalidTableNameError):
            lake.read(bad)


def test_create_table_errors(local_backend):
    lake = local_backend.lake()
    lake.create_table("acc", ACC)
    with pytest.raises(lv.TableExistsError):
        lake.create_table("acc", ACC)
    assert lake.create_table("acc", ACC, if_not_exists=True).version == 0
    with pytest.raises(lv.SchemaMismatchError):
        lake.create_table("p", ACC, partition_by=["nope"])
    with pytest.raises(lv.SchemaMismatchError):
        lake.create_table("q", pa.schema([("a", pa.int64()), ("A", pa.int64())]))
    with pytest.raises(lv.InvalidTableNameError):
        lake.create_table("../x", ACC)
    with pytest.raises(lv.InvalidArgumentError):
        lake.begin(features="R,X")
    with pytest.raises(lv.InvalidArgumentError):
        lake.begin(features="R", isolation="linearizable")
    before = local_backend.all_keys()
    for kw in ({"isolation": "snapshot"}, {"isolation": "write_serializable"}, {"slack": 2}):
        with pytest.raises(lv.InvalidArgumentError, match="only means something with feature 'I'"):
            lake.begin(features="R,CT", **kw)  # meaningless without I: refused, not ignored
        with pytest.raises(lv.InvalidArgumentError, match="only means something with feature 'I'"):
            lake.run(lambda txn: None, features="", **kw)
    lake.begin(features="I", isolation="snapshot", slack=2).abort()
    assert local_backend.all_keys() == before
