"""txn.overwrite: whole-table and replaceWhere overwrites, against delta-rs, redone under R."""

from __future__ import annotations

import tempfile
import time

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakevilla as lv
from lakevilla.recovery import sublog as sublogs
from tests.conftest import ON_AZURE, ON_AZURE_AND_GCS, Backend

T = pa.schema([("id", pa.int64()), ("x", pa.int64()), ("p", pa.string())])
FEATURES = ["", "R", "R,CT", "R,CT,I"]
LATER = 10_000.0

# (SQL for both lakevilla and delta-rs, the same predicate in Python: True only when SQL says TRUE)
PREDICATES = [
    ("x > 5", lambda r: r["x"] is not None and r["x"] > 5),
    ("p = 'a'", lambda r: r["p"] == "a"),
    ("x IS NULL OR x < 3", lambda r: r["x"] is None or r["x"] < 3),
    ("p = 'b' AND x >= 4", lambda r: r["p"] == "b" and r["x"] is not None and r["x"] >= 4),
    ("id % 2 = 0", lambda r: r["id"] % 2 == 0),
]


def _key(r):
    return tuple((v is None, v) for v in (r["id"], r["x"], r["p"]))


def _sorted(t) -> list[dict]:
    return sorted(pa.table(t).select(["id", "x", "p"]).to_pylist(), key=_key)


def _table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=T)


def _delta_rows(uri: str) -> list[dict]:
    from deltalake import DeltaTable

    return _sorted(DeltaTable(uri).to_pyarrow_table())


row = st.fixed_dictionaries({"id": st.integers(0, 40), "x": st.none() | st.integers(0, 9),
                             "p": st.sampled_from(["a", "b", "c"]) | st.none()})


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(row, min_size=1, max_size=6), min_size=1, max_size=4),
       new=st.lists(row, max_size=6), pred=st.sampled_from(range(len(PREDICATES)) ) | st.none(),
       partitioned=st.booleans(), features=st.sampled_from(["", "R"]))
def test_overwrite_matches_delta_rs(batches, new, pred, partitioned, features):
    """The same table (several files), the same overwrite: delta-rs and lakevilla leave the same
    rows, and delta-rs reads the version lakevilla wrote."""
    from deltalake import write_deltalake

    where, keep = PREDICATES[pred] if pred is not None else (None, None)
    if keep is not None:
        new = [r for r in new if keep(r)]
    parts = ["p"] if partitioned else None
    with tempfile.TemporaryDirectory() as d:
        ref = f"{d}/ref"
        for b in batches:
            write_deltalake(ref, _table(b), mode="append", partition_by=parts)
        write_deltalake(ref, _table(new), mode="overwrite", partition_by=parts,
                        **({"predicate": where} if where else {}))
        lake = lv.Lake(f"file://{d}/lake")
        lake.create_table("t", T, partition_by=parts)
        for b in batches:
            with lake.transaction("") as txn:
                txn.insert("t", _table(b))
        with lake.transaction(features) as txn:
            assert txn.overwrite("t", _table(new), where=where) == len(new)
        want = _delta_rows(ref)
        assert _sorted(lake.read("t")) == want
        assert _delta_rows(f"{d}/lake/t") == want


@pytest.mark.parametrize("features", FEATURES)
@ON_AZURE_AND_GCS
def test_overwrite_in_every_feature_set(backend: Backend, features):
    lake = backend.lake()
    lake.create_table("t", T, partition_by=["p"])
    with lake.transaction("") as txn:
        txn.insert("t", _table([{"id": i, "x": i, "p": "ab"[i % 2]} for i in range(8)]))
    with lake.transaction(features) as txn:
        txn.overwrite("t", _table([{"id": 100, "x": 100, "p": "a"}]), where="p = 'a'")
        txn.overwrite("t", _table([{"id": 101, "x": 7, "p": "b"}]), where="x >= 5 AND p = 'b'")
        if features:  # later statements see the overwrite
            assert sorted(txn.read("t", columns=["id"]).column("id").to_pylist()) == [
                1, 3, 100, 101]
    want = [{"id": i, "x": i, "p": "b"} for i in (1, 3)] + [{"id": 100, "x": 100, "p": "a"},
                                                             {"id": 101, "x": 7, "p": "b"}]
    assert _sorted(lake.read("t")) == sorted(want, key=_key)
    assert backend.delta_rows("t") == sorted(want, key=lambda r: r["id"])
    with lake.transaction(features) as txn:
        txn.overwrite("t", {"id": [5], "x": [5], "p": ["c"]})
    assert _sorted(lake.read("t")) == [{"id": 5, "x": 5, "p": "c"}]
    assert backend.delta_rows("t") == [{"id": 5, "x": 5, "p": "c"}]


@pytest.mark.parametrize("features", ["", "R"])
def test_rows_outside_the_predicate_are_refused_and_nothing_changes(local_backend, features):
    lake = local_backend.lake()
    lake.create_table("t", T)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1, 2], "x": [1, 9], "p": ["a", "a"]})
    before = local_backend.all_keys()
    txn = lake.begin(features)
    # false, NULL
    for bad in ({"id": [3], "x": [2], "p": ["a"]}, {"id": [3], "x": [None], "p": ["a"]}):
        with pytest.raises(lv.DataOutsidePredicateError, match="do not satisfy"):
            txn.overwrite("t", bad, where="x > 5")
    with pytest.raises(lv.InvalidExpressionError):
        txn.overwrite("t", {"id": [3], "x": [7], "p": ["a"]}, where="nope > 5")
    txn.commit()
    assert local_backend.all_keys() == before
    assert lake.version("t") == 1


@ON_AZURE
def test_a_conflicting_overwrite_is_redone_under_r(backend: Backend):
    """T2 replaces x > 5 while T1 appends a row there and commits first: under R, T2's overwrite
    is redone on T1's commit and replaces T1's row too (the serial order T1, T2); a blind append
    outside the predicate does not conflict at all; without R the conflict aborts."""
    lake = backend.lake(delete_sublogs=False)
    lake.create_table("t", T)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1, 2, 3], "x": [1, 6, 7], "p": ["a", "a", "a"]})
    t2 = lake.begin("R")
    t2.overwrite("t", {"id": [10], "x": [10], "p": ["n"]}, where="x > 5")
    with lake.transaction("") as t1:
        t1.insert("t", {"id": [4, 5], "x": [8, 2], "p": ["c", "c"]})
    t2.commit()
    lake.flush()  # what the redo left goes out in the client's batch of deletes
    assert t2.stats["redos"] == 1
    assert [r["id"] for r in _sorted(lake.read("t"))] == [1, 5, 10]
    assert [r["id"] for r in backend.delta_rows("t")] == [1, 5, 10]
    entries = sublogs.read_all(lake.store, t2.id)
    assert [(e.op, e.redo, e.kind) for e in entries] == [("overwrite", False, "physical"),
                                                         ("overwrite", True, "logical")]
    assert [a["path"] for a in entries[1].statement["inserted"]] == [
        a["path"] for a in entries[0].added][-1:]

    t3 = lake.begin("R")
    t3.overwrite("t", {"id": [11], "x": [11], "p": ["n"]}, where="x > 5")
    with lake.transaction("") as t1:
        t1.insert("t", {"id": [6], "x": [0], "p": ["c"]})  # statistics say: no row with x > 5
    t3.commit()
    assert t3.stats["redos"] == 0 and t3.stats["conflicts"] == 0
    assert [r["id"] for r in _sorted(lake.read("t"))] == [1, 5, 6, 11]

    t4 = lake.begin("I")
    t4.overwrite("t", {"id": [12], "x": [12], "p": ["n"]}, where="x > 5")
    with lake.transaction("") as t1:
        t1.insert("t", {"id": [7], "x": [9], "p": ["c"]})
    with pytest.raises(lv.TransactionAborted):
        t4.commit()
    assert [r["id"] for r in _sorted(lake.read("t"))] == [1, 5, 6, 7, 11]


def test_a_resumed_overwrite_is_redone_from_its_sublog(local_backend: Backend):
    """A client crashes after a logical overwrite; a conflicting commit lands; the resumed
    transaction redoes the overwrite from its sublog, with the same new rows (the files the
    sublog names), and commits the serial result."""
    ttl = 5.0
    # R claims at its first write
    lake = local_backend.lake(marker_ttl=ttl, delete_sublogs=False, commit_mode="in_place")
    lake.create_table("t", T)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1, 2, 3], "x": [1, 6, 7], "p": ["a", "a", "a"]})
    first = lake.begin("R")
    # a running predecessor: the next sublog is logical
    first.update("t", set={"x": "x"}, where="id = 1")
    crashed = lake.begin("R")
    crashed.overwrite("t", {"id": [10, 11], "x": [10, 11], "p": ["n", "n"]}, where="x > 5")
    lake._client.heartbeats.forget(crashed)  # the client is gone: no heartbeat, no commit
    assert [e.kind for e in sublogs.read_all(lake.store, crashed.id)] == ["logical"]
    first.commit()
    with local_backend.lake().transaction("") as w:  # ignores markers
        w.insert("t", {"id": [4], "x": [9], "p": ["c"]})
    later = local_backend.lake(marker_ttl=ttl, clock=lambda: time.time() + LATER,
                               delete_sublogs=False)
    resumed = later.resume(crashed.id)
    assert [o["kind"] for o in resumed.operations] == ["overwrite"]
    resumed.commit()
    later.flush()  # what the redo left goes out in the client's batch of deletes
    assert resumed.stats["redos"] == 1
    assert [r["id"] for r in _sorted(lake.read("t"))] == [1, 10, 11]
    assert [r["id"] for r in local_backend.delta_rows("t")] == [1, 10, 11]


@ON_AZURE
def test_crash_at_every_store_call_of_an_overwriting_transaction(backend: Backend):
    """A crash anywhere in an R transaction that overwrites: recovery leaves all or nothing,
    and the crashed client resumes from its sublogs and finishes with the same rows."""
    from tests.helpers import crash_stride, sweep_crashes_recover_resume

    steps = [
        lambda t, name: t.overwrite(name, {"id": [20, 21], "x": [6, 9], "p": ["a", "b"]},
                                    where="x > 5"),
        lambda t, name: t.insert(name, {"id": [22], "x": [1], "p": ["c"]}),
    ]

    def setup(name):
        lake = backend.lake()
        lake.create_table(name, T)
        with lake.transaction("") as txn:
            txn.insert(name, {"id": [1, 2, 3], "x": [1, 6, 7], "p": ["a", "a", "b"]})

    before, after, seen = sweep_crashes_recover_resume(backend, steps, setup,
                                                       lambda rs: sorted(rs, key=_key),
                                                       every=crash_stride(backend),
                                                       later=lambda: time.time() + LATER)
    assert before == [{"id": i, "x": x, "p": p}
                      for i, x, p in ((1, 1, "a"), (2, 6, "a"), (3, 7, "b"))]
    assert [r["id"] for r in after] == [1, 20, 21, 22]
    assert seen["resumed"] > 0 and seen["committed"] > 0 and seen["re-run"] > 0, seen
