"""MERGE: semantics against delta-rs, pruning, bad input, redo under R, concurrency, resume."""

from __future__ import annotations

import multiprocessing as mp
import time

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakevilla as lv
from lakevilla.markers.marker import RUNNING, marker_of
from lakevilla.recovery import sublog as sublogs
from lakevilla.statements.merge import DuplicateMatchError
from tests.conftest import ON_AZURE_AND_GCS, rows
from tests.helpers import HookStore

S = pa.schema([("id", pa.int64()), ("part", pa.string()), ("v", pa.int64())])


def _lake_with(backend, data, partition_by=None, files=1, **kw):
    lake = backend.lake(**kw)
    lake.create_table("t", S, partition_by=partition_by)
    n = len(data)
    for i in range(files):
        chunk = data[i * n // files:(i + 1) * n // files]
        if chunk:
            with lake.transaction("") as txn:
                txn.insert("t", pa.Table.from_pylist(chunk, schema=S))
    return lake


def _upsert(txn, source, on="id"):
    return (txn.merge("t", source, on=on)
            .when_matched_update({"v": "target.v + source.v"})
            .when_not_matched_insert_all().execute())


# -- semantics --------------------------------------------------------------------------

@pytest.mark.parametrize("features", ["", "R", "R,CT", "I", "R,CT,I"])
@ON_AZURE_AND_GCS
def test_merge_clauses_conditions_and_metrics(backend, features):
    lake = _lake_with(backend, [{"id": i, "part": "a", "v": 10 * i} for i in range(1, 6)])
    src = [{"id": 2, "part": "a", "v": 1}, {"id": 3, "part": "a", "v": -1},
           {"id": 4, "part": "a", "v": 0}, {"id": 7, "part": "b", "v": 7},
           {"id": 8, "part": "b", "v": -8}]
    with lake.transaction(features) as txn:
        m = (txn.merge("t", src, on="target.id = source.id")
             .when_matched_delete("source.v < 0")
             .when_matched_update({"v": "source.v * 100"}, predicate="source.v > 0")
             .when_not_matched_insert({"id": "source.id", "v": "source.v"},
                                      predicate="source.v > 0")
             .execute())
    assert m == {"num_source_rows": 5, "num_target_rows_updated": 1, "num_target_rows_deleted": 1,
                 "num_target_rows_inserted": 1, "num_target_files_added": 2,
                 "num_target_files_removed": 1}
    want = [{"id": 1, "part": "a", "v": 10}, {"id": 2, "part": "a", "v": 100},
            {"id": 4, "part": "a", "v": 40}, {"id": 5, "part": "a", "v": 50},
            {"id": 7, "part": None, "v": 7}]
    assert rows(lake.read("t")) == want == backend.delta_rows("t")
    info = backend.delta("t").history(1)[0]
    assert info["operation"] == "MERGE"


def test_merge_sources_pandas_and_key_lists(local_backend):
    pd = pytest.importorskip("pandas")
    lake = _lake_with(local_backend, [{"id": 1, "part": "a", "v": 1}])
    with lake.transaction("") as txn:
        txn.merge("t", pd.DataFrame({"id": [1, 2], "part": ["x", "y"], "v": [5, 6]}),
                  on=["id", "part"]) \
            .when_matched_update_all().when_not_matched_insert_all().execute()
    assert rows(lake.read("t")) == [{"id": 1, "part": "a", "v": 1}, {"id": 1, "part": "x", "v": 5},
                                    {"id": 2, "part": "y", "v": 6}]


# -- differential against delta-rs ------------------------------------------------------

ROW = st.fixed_dictionaries({"id": st.one_of(st.none(), st.integers(0, 12)),
                             "part": st.sampled_from(["a", "b", None]),
                             "v": st.one_of(st.none(), st.integers(-5, 5))})


def _unique(rs):
    seen, out = set(), []
    for r in rs:
        if r["id"] is None or r["id"] not in seen:
            seen.add(r["id"])
            out.append(r)
    return out


CLAUSES = {
    "upsert_all": [("when_matched_update_all", ()), ("when_not_matched_insert_all", ())],
    "conditional": [("when_matched_delete", ("source.v <= 0",)),
                    ("when_matched_update", ({"v": "coalesce(source.v, 0) + target.v"},
                                             "source.v > 1")),
                    ("when_not_matched_insert", ({"id": "source.id", "part": "source.part",
                                                  "v": "source.v * 2"},
                                                 "source.v IS NOT NULL"))],
    "delete_only": [("when_matched_delete", ())],
    "insert_only": [("when_not_matched_insert_all", ("source.part = 'b' OR source.part IS NULL",))],
    "update_only": [("when_matched_update", ({"v": "coalesce(source.v, -1)", "part": "'z'"},))],
}


def _apply(builder, clauses):
    for name, args in clauses:
        builder = getattr(builder, name)(*args)
    return builder.execute()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=True)
@given(target=st.lists(ROW, max_size=14).map(_unique),
       source=st.lists(ROW, max_size=10).map(_unique),
       files=st.integers(1, 3), partitioned=st.booleans(),
       clauses=st.sampled_from(sorted(CLAUSES)),
       features=st.sampled_from(["", "R"]))
def test_merge_matches_delta_rs(tmp_path_factory, target, source, files, partitioned, clauses,
                                features):
    from deltalake import DeltaTable, write_deltalake

    from tests.conftest import Backend

    root = tmp_path_factory.mktemp("m")
    backend = Backend("local", f"file://{root}/lake")
    parts = ["part"] if partitioned else None
    lake = _lake_with(backend, target, partition_by=parts, files=files)
    ref = f"{root}/ref"
    write_deltalake(ref, pa.Table.from_pylist([], schema=S), partition_by=parts)
    n = len(target)
    for i in range(files):
        chunk = target[i * n // files:(i + 1) * n // files]
        if chunk:
            write_deltalake(ref, pa.Table.from_pylist(chunk, schema=S), mode="append")
    src = pa.Table.from_pylist(source, schema=S)
    with lake.transaction(features) as txn:
        _apply(txn.merge("t", src, on="target.id = source.id"), CLAUSES[clauses])
    dt = DeltaTable(ref)
    _apply(dt.merge(src, predicate="target.id = source.id", source_alias="source",
                    target_alias="target"),
           CLAUSES[clauses])

    def key(r):
        return (r["id"] is None, r["id"] or 0, r["part"] or "", r["v"] is None, r["v"] or 0)

    want = sorted(pa.table(DeltaTable(ref).to_pyarrow_table()).select(S.names).to_pylist(), key=key)
    got = sorted(lake.read("t").to_pylist(), key=key)
    assert got == want
    ours = sorted(pa.table(backend.delta("t").to_pyarrow_table()).select(S.names).to_pylist(),
                  key=key)
    assert ours == want  # delta-rs reads the version we wrote


# -- pruning ------------------------------------------------------------------------------

def test_merge_rewrites_only_files_whose_keys_can_match(local_backend):
    lake = local_backend.lake()
    lake.create_table("t", S, partition_by=["part"])
    for p, base in (("a", 0), ("b", 100), ("a", 200), ("b", 300)):
        with lake.transaction("") as txn:
            txn.insert("t", {"id": list(range(base, base + 50)), "part": [p] * 50, "v": [0] * 50})
    before = {a.path for a in lake.snapshot("t").files.values()}
    with lake.transaction("R") as txn:
        m = _upsert(txn, {"id": [210, 220, 999], "part": ["a", "a", "a"], "v": [1, 1, 1]},
                    on=["id", "part"])
        op = txn.tables["t"].ops[-1]
    # one file of partition a holds ids 200..249; the rest are pruned
    assert len(op.read_files) == 1
    assert m["num_target_files_removed"] == 1 and m["num_target_rows_updated"] == 2
    assert m["num_target_rows_inserted"] == 1
    after = {a.path for a in lake.snapshot("t").files.values()}
    assert len(before - after) == 1
    assert lake.read("t", where="id = 220").to_pylist() == [{"id": 220, "part": "a", "v": 1}]


# -- bad input -----------------------------------------------------------------------------

@pytest.mark.parametrize("features", ["", "R"])
def test_bad_merges_fail_clearly_and_leave_storage_unchanged(local_backend, features):
    lake = _lake_with(local_backend, [{"id": i, "part": "a", "v": i} for i in range(5)])
    before = local_backend.all_keys()
    src = {"id": [1, 1, 9], "part": ["a", "a", "a"], "v": [1, 2, 3]}
    cases = [
        (lambda t: t.merge("t", src, on="nope").when_matched_delete().execute(),
         lv.LakeVillaError, "nope"),
        (lambda t: t.merge("t", src, on="target.id = source.nope").when_matched_delete().execute(),
         lv.InvalidExpressionError, "nope"),
        (lambda t: t.merge("t", src, on="id").when_matched_update({"nope": "1"}).execute(),
         lv.InvalidExpressionError, "no column 'nope'"),
        (lambda t: t.merge("t", src, on="id")
         .when_not_matched_insert({"id": "target.id"}).execute(),
         lv.InvalidExpressionError, "target"),
        (lambda t: t.merge("t", src, on="id").when_matched_update_all().execute(),
         DuplicateMatchError, "several source rows"),
        (lambda t: t.merge("t", src, on="id").execute(), lv.LakeVillaError, "no clause"),
        (lambda t: t.merge("t", {"id": [1]}, on="id").when_matched_update_all().execute(),
         lv.SchemaMismatchError, "no column(s)"),
        (lambda t: t.merge("t", {"id": [1], "v": [0]}, on="id")
         .when_matched_update({"v": "target.v / source.v"}).execute(),
         lv.InvalidExpressionError, "merge into"),
    ]
    for fn, err, text in cases:
        with pytest.raises(err, match=None) as info:
            with lake.transaction(features) as txn:
                fn(txn)
        assert text in str(info.value)
        assert isinstance(info.value, lv.LakeVillaError)
        assert local_backend.all_keys() == before, f"{text}: storage changed"
    assert rows(lake.read("t")) == [{"id": i, "part": "a", "v": i} for i in range(5)]


def test_duplicate_matches_are_allowed_for_an_unconditional_delete(local_backend):
    lake = _lake_with(local_backend, [{"id": i, "part": "a", "v": i} for i in range(3)])
    with lake.transaction("R") as txn:
        m = txn.merge("t", {"id": [1, 1]}, on="id").when_matched_delete().execute()
    assert m["num_target_rows_deleted"] == 1
    assert [r["id"] for r in rows(lake.read("t"))] == [0, 2]


# -- conflicts: a concurrent insert of a key we would insert ---------------------------------

@pytest.mark.parametrize("features", ["R", ""])
@ON_AZURE_AND_GCS
def test_concurrent_insert_of_a_matching_key_is_a_conflict(backend, features):
    """Our merge inserts id 5 (no match); before it commits, another client inserts id 5. The
    absence of a match was read: under R the merge is redone (updates the new row), under ""
    it aborts. Either way no key appears twice."""
    _lake_with(backend, [{"id": i, "part": "a", "v": 0} for i in range(3)])
    other = backend.lake()
    state = {"armed": False}

    def intrude():
        with other.transaction("") as t:
            t.insert("t", {"id": [5], "part": ["a"], "v": [100]})

    def when(kind, key):
        return state["armed"] and "_delta_log/" in key and kind in ("put_if_absent", "put_if_match")

    lake = backend.lake(store=HookStore(backend.store(), when, intrude))
    txn = lake.begin(features)
    # R: the other client commits before our commit; "": before our merge's
    state["armed"] = features == "R"
    if features == "":
        state["armed"] = True
        with pytest.raises(lv.TransactionAborted):
            _upsert(txn, {"id": [5, 1], "part": ["a", "a"], "v": [1, 1]})
        assert rows(lake.read("t"))[-1] == {"id": 5, "part": "a", "v": 100}
        return
    _upsert(txn, {"id": [5, 1], "part": ["a", "a"], "v": [1, 1]})
    txn.commit()
    assert txn.stats["redos"] == 1
    got = rows(lake.read("t"))
    assert [r["id"] for r in got] == [0, 1, 2, 5]
    assert got[-1] == {"id": 5, "part": "a", "v": 101} and got[1]["v"] == 1
    assert got == backend.delta_rows("t")


def test_concurrent_insert_of_another_key_range_is_no_conflict(local_backend):
    _lake_with(local_backend, [{"id": i, "part": "a", "v": 0} for i in range(3)])
    other = local_backend.lake()
    lake = local_backend.lake()
    txn = lake.begin("")
    with other.transaction("") as t:
        t.insert("t", {"id": [50], "part": ["a"], "v": [100]})
    txn2 = lake.begin("R")
    _upsert(txn2, {"id": [5, 6], "part": ["a", "a"], "v": [1, 1]})
    with other.transaction("") as t:
        t.insert("t", {"id": [70], "part": ["a"], "v": [100]})  # outside [5, 6]: not a phantom
    txn2.commit()
    assert txn2.stats["redos"] == 0 and txn2.stats["conflicts"] == 0
    txn.abort()


# -- crash and resume: the staged source is what the redo runs -----------------------------

def _later():
    return time.time() + 10_000


def test_resumed_merge_is_redone_from_its_staged_source(local_backend):
    _lake_with(local_backend, [{"id": i, "part": "a", "v": 0} for i in range(3)], marker_ttl=5.0)
    # in place R claims at its first write
    lake0 = local_backend.lake(marker_ttl=5.0, commit_mode="in_place")
    blocker = lake0.begin("R")
    blocker.insert("t", {"id": [7], "part": ["a"], "v": [70]})  # a running marker below ours
    crashed_lake = local_backend.lake(marker_ttl=5.0, commit_mode="in_place")
    txn = crashed_lake.begin("R")
    _upsert(txn, {"id": [7, 1], "part": ["a", "a"], "v": [1, 1]})
    entries = sublogs.read_all(local_backend.store(), txn.id)
    assert [e.kind for e in entries] == ["logical"]
    staged = entries[0].statement["merge"]["source_key"]
    assert staged and staged in local_backend.all_keys()
    # the client dies here: its transaction is never committed nor aborted
    crashed_lake._client.heartbeats.forget(txn)
    crashed_lake.close()
    blocker.commit()  # id 7 now exists: the merge's "no match" for 7 is stale
    resumer = local_backend.lake(marker_ttl=5.0, clock=_later)
    resumed = resumer.resume(txn.id)
    assert [o["kind"] for o in resumed.operations] == ["merge"]
    resumed.commit()
    # against the blocker's fill of a version the crashed client read empty
    assert resumed.stats["redos"] == 1
    got = rows(lake0.read("t"))
    assert got == [{"id": 0, "part": "a", "v": 0}, {"id": 1, "part": "a", "v": 1},
                   {"id": 2, "part": "a", "v": 0}, {"id": 7, "part": "a", "v": 71}]
    assert got == local_backend.delta_rows("t")
    log = local_backend.lake()._client.log("t")  # fresh: lake0 caches the markers it saw
    assert not [v for v, c in log.commits_between(-1, log.latest_version())
                if (m := marker_of(c)) and m.state == RUNNING]
    resumer.flush()  # the resuming client deletes what the transaction left, in a batch
    assert staged not in local_backend.all_keys()  # deleted with the sublogs


# -- concurrency with real processes --------------------------------------------------------

def _merge_worker(uri, opts, features, wid, batches, out, ready):
    try:
        lake = lv.Lake(uri, storage_options=opts or None)
        applied, aborted, redos = [], 0, 0
        ready.wait(120)  # all workers merge at the same time, however long each took to start
        for b, keys in batches:
            try:
                with lake.transaction(features) as txn:
                    _upsert(txn, {"id": keys, "part": ["a"] * len(keys), "v": [1] * len(keys)})
                applied.append(b)
                redos += txn.stats["redos"]
            except lv.TransactionAborted:
                aborted += 1
        out.put((applied, aborted, redos))
    except BaseException as e:  # reported so the parent fails at once
        out.put(("error", repr(e), 0))


def _run(features, backend, n_workers=3, per=6):
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    batches = {}
    args = []
    for w in range(n_workers):
        mine = []
        for i in range(per):
            b = w * 100 + i
            start = (w * 3 + i * 2) % 20  # overlapping key ranges across workers and batches
            batches[b] = list(range(start, start + 6))
            mine.append((b, batches[b]))
        args.append(mine)
    ready = ctx.Barrier(n_workers)
    procs = [ctx.Process(target=_merge_worker, args=(backend.uri, backend.storage_options,
                                                     features, w, a, out, ready))
             for w, a in enumerate(args)]
    for p in procs:
        p.start()
    res = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    assert all(r[0] != "error" for r in res), res
    return batches, res


@pytest.mark.slow
def test_concurrent_merges_apply_every_batch_exactly_once_under_r(local_backend):
    lake = _lake_with(local_backend, [])
    batches, res = _run("R", local_backend)
    assert sum(r[1] for r in res) == 0  # no R merge aborted
    assert sum(r[2] for r in res) > 0  # they collided, and were redone
    want: dict[int, int] = {}
    for keys in batches.values():
        for k in keys:
            want[k] = want.get(k, 0) + 1
    got = rows(lake.read("t"))
    # each batch once, no duplicates
    assert {r["id"]: r["v"] for r in got} == want and len(got) == len(want)
    assert got == local_backend.delta_rows("t")


@pytest.mark.slow
def test_concurrent_merges_conflict_under_plain_delta(local_backend):
    lake = _lake_with(local_backend, [])
    batches, res = _run("", local_backend)
    aborted = sum(r[1] for r in res)
    assert aborted > 0  # plain Delta: conflicting merges abort
    want: dict[int, int] = {}
    for r in res:
        for b in r[0]:
            for k in batches[b]:
                want[k] = want.get(k, 0) + 1
    got = rows(lake.read("t"))
    # acknowledged ones, once
    assert {r["id"]: r["v"] for r in got} == want and len(got) == len(want)


# -- crash anywhere in a transaction that merged ------------------------------------------------

def test_crash_at_every_store_call_of_a_merging_transaction(local_backend):
    """After a crash at any store call, recovery leaves all or nothing, and the crashed client
    resumes from its sublogs (the merge included) and finishes."""
    from tests.helpers import sweep_crashes_recover_resume

    steps = [
        lambda t, name: (t.merge(name, {"id": [1, 9], "part": ["a", "a"], "v": [5, 9]}, on="id")
                         .when_matched_update({"v": "target.v + source.v"})
                         .when_not_matched_insert_all().execute()),
        lambda t, name: t.update(name, set={"v": "v * 2"}, where="id = 2"),
    ]

    def setup(name):
        lake = local_backend.lake()
        lake.create_table(name, S)
        with lake.transaction("") as txn:
            txn.insert(name, pa.Table.from_pylist(
                [{"id": i, "part": "a", "v": i} for i in range(4)], schema=S))

    before, after, seen = sweep_crashes_recover_resume(local_backend, steps, setup,
                                                       lambda rs: sorted(rs, key=lambda r: r["id"]),
                                                       later=_later)
    assert after != before
    assert all(seen.values()), seen


# -- schema evolution -------------------------------------------------------------------

@pytest.mark.parametrize("features", ["", "R", "R,CT"])
def test_merge_with_schema_mode_merge_equals_delta_rs_merge_schema(tmp_path, features):
    """The source's extra columns are added (nullable; old rows NULL there) and filled by
    *_all clauses, as delta-rs' ``merge_schema=True``; delta-rs reads what we wrote."""
    from deltalake import DeltaTable, write_deltalake

    base = pa.Table.from_pylist([{"id": i, "part": "a", "v": i} for i in range(1, 5)], schema=S)
    src = pa.table({"id": [2, 3, 9], "part": ["a", "b", "c"], "v": [20, 30, 90],
                    "note": ["x", None, "z"], "score": [1.5, 2.5, None]})
    theirs_path = str(tmp_path / "theirs")
    write_deltalake(theirs_path, base)
    (DeltaTable(theirs_path).merge(src, "target.id = source.id", source_alias="source",
                                   target_alias="target", merge_schema=True)
     .when_matched_update_all().when_not_matched_insert_all().execute())
    want = sorted(DeltaTable(theirs_path).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])

    lake = lv.Lake("file://" + str(tmp_path / "ours"))
    lake.create_table("t", S)
    with lake.transaction("") as txn:
        txn.insert("t", base)
    with lake.transaction(features) as txn:
        (txn.merge("t", src, on="id", schema_mode="merge")
         .when_matched_update_all().when_not_matched_insert_all().execute())
        # later statements see them
        assert txn.read("t").column_names == ["id", "part", "v", "note", "score"]
    got = rows(lake.read("t"))
    assert got == want
    assert sorted(DeltaTable(str(tmp_path / "ours" / "t")).to_pyarrow_table().to_pylist(),
                  key=lambda r: r["id"]) == want


def test_merge_schema_mode_is_checked_and_without_it_extra_columns_are_not_added(local_backend):
    lake = _lake_with(local_backend, [{"id": 1, "part": "a", "v": 1}])
    src = [{"id": 1, "part": "a", "v": 5, "note": "n"}]
    with pytest.raises(lv.InvalidArgumentError), lake.transaction("R") as txn:
        txn.merge("t", src, on="id", schema_mode="overwrite")
    with lake.transaction("R") as txn:
        txn.merge("t", src, on="id").when_matched_update_all().execute()
    assert (lake.read("t").column_names == ["id", "part", "v"]
            and rows(lake.read("t"))[0]["v"] == 5)


def test_a_source_of_rows_takes_every_key_any_row_has(local_backend):
    """A list of row dicts: a column only later rows carry is a column (not dropped), NULL
    elsewhere."""
    lake = _lake_with(local_backend, [{"id": 1, "part": "a", "v": 1},
                                      {"id": 2, "part": "a", "v": 2}])
    with lake.transaction("R") as txn:
        (txn.merge("t", [{"id": 1}, {"id": 2, "v": 7}], on="id")
         .when_matched_update({"v": "coalesce(source.v, target.v)"}).execute())
    assert [r["v"] for r in rows(lake.read("t"))] == [1, 7]
