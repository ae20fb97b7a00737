"""Schema evolution: txn.add_columns and insert(schema_mode="merge"), against delta-rs, with
Delta's conflict rules for metadata changes."""

from __future__ import annotations

import tempfile
import time

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.recovery import sublog as sublogs
from tests.conftest import Backend
from tests.helpers import entries_landed

T = pa.schema([("id", pa.int64()), ("x", pa.int64())])
FEATURES = ["", "R", "R,CT", "R,CT,I"]


def _rows(t) -> list[dict]:
    t = pa.table(t)
    return sorted(t.select(sorted(t.column_names)).to_pylist(), key=lambda r: r["id"])


def _setup(backend: Backend, **kw):
    lake = backend.lake(**kw)
    lake.create_table("t", T)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1, 2], "x": [10, 20]})
    return lake


@pytest.mark.parametrize("features", FEATURES)
def test_evolution_matches_delta_rs(features):
    """The same appends with new columns (mergeSchema) and the same added column: delta-rs and
    lakevilla give the same rows and schema; delta-rs reads every version we write."""
    from deltalake import DeltaTable, write_deltalake
    from deltalake.schema import Field, PrimitiveType

    steps = [pa.table({"id": pa.array([3], pa.int64()), "x": pa.array([30], pa.int64()),
                       "s": pa.array(["a"], pa.string())}),
             pa.table({"id": pa.array([4], pa.int64()), "d": pa.array([1.5], pa.float64())})]
    with tempfile.TemporaryDirectory() as d:
        ref = f"{d}/ref"
        write_deltalake(ref, pa.table({"id": pa.array([1, 2], pa.int64()),
                                       "x": pa.array([10, 20], pa.int64())}))
        for s in steps:
            write_deltalake(ref, s, mode="append", schema_mode="merge")
        DeltaTable(ref).alter.add_columns([Field("k", PrimitiveType("integer"), nullable=True)])
        lake = lv.Lake(f"file://{d}/lake")
        lake.create_table("t", T)
        with lake.transaction("") as txn:
            txn.insert("t", {"id": [1, 2], "x": [10, 20]})
        first = lake.version("t")
        with lake.transaction(features) as txn:
            for s in steps:
                txn.insert("t", s, schema_mode="merge")
            txn.add_columns("t", {"k": pa.int32()})
            if features:  # later statements of the transaction see the new columns
                assert txn.read("t", where="s IS NULL AND d IS NULL",
                                columns=["id"]).column("id").to_pylist() == [1, 2]
        ours, theirs = DeltaTable(f"{d}/lake/t"), DeltaTable(ref)
        assert (_rows(ours.to_pyarrow_table()) == _rows(theirs.to_pyarrow_table())
                == _rows(lake.read("t")))
        assert [(f.name, f.type, f.nullable) for f in ours.schema().fields] == \
            [(f.name, f.type, f.nullable) for f in theirs.schema().fields]
        for v in range(first, lake.version("t") + 1):
            DeltaTable(f"{d}/lake/t", version=v).to_pyarrow_table()
        assert _rows(lake.read("t", where="s = 'a'")) == [
            {"d": None, "id": 3, "k": None, "s": "a", "x": 30}]


@pytest.mark.parametrize("features", ["", "R"])
def test_incompatible_changes_are_refused_and_change_nothing(local_backend: Backend, features):
    lake = _setup(local_backend)
    before = (local_backend.all_keys(), lake.version("t"))
    txn = lake.begin(features)
    bad = [
        (lambda: txn.add_columns("t", {"X": pa.string()}), "already exists"),
        (lambda: txn.add_columns("t", [pa.field("n", pa.int64(), nullable=False)]),
         "must be nullable"),
        (lambda: txn.insert("t", {"id": ["text"], "x": [1]}, schema_mode="merge"),
         "only adds columns"),
        (lambda: txn.insert("t", {"id": [1.5], "x": [1]}, schema_mode="merge"),
         "only adds columns"),
        (lambda: txn.add_columns("t", {"a": pa.int8(), "A": pa.int8()}), "twice"),
    ]
    for fn, why in bad:
        with pytest.raises(lv.SchemaEvolutionError, match=why):
            fn()
    with pytest.raises(lv.SchemaMismatchError):  # without schema_mode a new column is an error
        txn.insert("t", {"id": [3], "y": [1]})
    assert txn.read("t").column_names == ["id", "x"] if features else True
    txn.commit()
    assert (local_backend.all_keys(), lake.version("t")) == before
    assert lake.schema("t").names == ["id", "x"]


@pytest.mark.parametrize("features", ["R", "CT"])
def test_a_concurrent_metadata_change_conflicts_with_ours(backend: Backend, features):
    """Two transactions add columns: the second to commit meets the first's metadata; under R it
    is redone on top (both columns), without R it aborts."""
    lake = _setup(backend)
    mine = lake.begin(features)
    mine.add_columns("t", {"a": pa.string()})
    mine.insert("t", {"id": [3], "x": [30], "a": ["q"]})
    with lake.transaction("") as other:
        other.add_columns("t", {"b": pa.float64()})
    if features == "R":
        mine.commit()
        assert mine.stats["redos"] == 2
        assert lake.schema("t").names == ["id", "x", "b", "a"]
        assert _rows(lake.read("t")) == _rows(backend.delta("t").to_pyarrow_table())
        assert [r["a"] for r in _rows(lake.read("t"))] == [None, None, "q"]
    else:
        with pytest.raises(lv.TransactionAborted, match="schema"):
            mine.commit()
        assert lake.schema("t").names == ["id", "x", "b"]


@pytest.mark.parametrize("features", ["R", "CT"])
def test_our_metadata_change_conflicts_with_a_concurrent_writer(local_backend: Backend, features):
    """Delta's rule the other way: a writer that started before our schema change meets it at
    its commit; a blind append is redone under R (its rows read NULL in the new column), and
    aborted without R."""
    lake = _setup(local_backend)
    writer = lake.begin(features)
    writer.insert("t", {"id": [5], "x": [50]})
    with lake.transaction("") as evolve:
        evolve.add_columns("t", {"c": pa.int64()})
    if features == "R":
        writer.commit()
        assert writer.stats["redos"] == 1
        assert [r["c"] for r in _rows(lake.read("t"))] == [None, None, None]
        assert [r["id"] for r in _rows(lake.read("t"))] == [1, 2, 5]
    else:
        with pytest.raises(lv.TransactionAborted, match="schema"):
            writer.commit()


def test_adding_the_same_column_concurrently_is_an_error_at_the_redo(local_backend: Backend):
    lake = _setup(local_backend)
    mine = lake.begin("R")
    mine.add_columns("t", {"a": pa.string()})
    with lake.transaction("") as other:
        other.add_columns("t", {"a": pa.int64()})
    with pytest.raises(lv.SchemaEvolutionError, match="changed type concurrently"):
        mine.commit()
    assert mine.state == "aborted"
    assert lake.schema("t").field("a").type == pa.int64()


def test_a_resumed_transaction_keeps_the_columns_it_added(local_backend: Backend):
    ttl = 5.0
    lake = _setup(local_backend, marker_ttl=ttl)
    crashed = lake.begin("R")
    crashed.add_columns("t", {"a": pa.string()})
    crashed.insert("t", {"id": [7], "a": ["z"], "n": [1.0]}, schema_mode="merge")
    lake._client.heartbeats.forget(crashed)
    entries_landed(crashed)
    entries = sublogs.read_all(lake.store, crashed.id)
    assert [e.kind for e in entries] == ["physical", "physical"]
    later = local_backend.lake(marker_ttl=ttl, clock=lambda: time.time() + 10_000.0)
    resumed = later.resume(crashed.id)
    assert resumed.read("t", where="id = 7").to_pylist() == [
        {"id": 7, "x": None, "a": "z", "n": 1.0}]
    resumed.commit()
    assert lake.schema("t").names == ["id", "x", "a", "n"]
    assert _rows(lake.read("t")) == _rows(local_backend.delta("t").to_pyarrow_table())
