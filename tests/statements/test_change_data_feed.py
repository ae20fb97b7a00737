"""Change data feed (``delta.enableChangeDataFeed``): every statement logs its change rows, and
delta-rs' ``load_cdf`` returns for our commits what it returns for its own."""

from __future__ import annotations

import collections
import json

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakevilla as lv
from lakevilla.delta.actions import Commit
from tests.conftest import Backend

S = pa.schema([("id", pa.int64()), ("part", pa.string()), ("v", pa.int64())])
CDF = {"delta.enableChangeDataFeed": "true"}
DV = {**CDF, "delta.enableDeletionVectors": "true"}


def changes(uri: str, start: int = 0, storage_options=None) -> dict[int, collections.Counter]:
    """delta-rs' change feed from ``start``: per version, the multiset of (change type, row)."""
    from deltalake import DeltaTable

    t = pa.table(DeltaTable(uri, storage_options=storage_options)
                 .load_cdf(starting_version=start).read_all())
    t = t.cast(pa.schema([f.with_type(pa.string()) if pa.types.is_string_view(f.type) else f
                          for f in t.schema]))
    out: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in t.to_pylist():
        out[r["_commit_version"]][(r["_change_type"], r["id"], r["part"], r["v"])] += 1
    return dict(out)


def _lake(backend: Backend, properties=CDF, partition_by=None, rows=None):
    lake = backend.lake()
    lake.create_table("t", S, partition_by=partition_by, properties=properties)
    if rows:
        with lake.transaction("") as txn:
            txn.insert("t", pa.Table.from_pylist(rows, schema=S))
    return lake


def _feed(backend: Backend, start: int = 0):
    return changes(backend.table_uri("t"), start, backend.storage_options or None)


def _c(*entries):
    return collections.Counter(entries)


ROWS = [{"id": i, "part": "ab"[i % 2], "v": i * 10} for i in range(6)]


def _cdc_files(backend: Backend, version: int) -> list[str]:
    data = backend.store().get(f"t/_delta_log/{version:020d}.json").data
    return [c.path for c in Commit.from_bytes(data).cdc]


@pytest.mark.parametrize("props, partition_by, features", [
    (CDF, None, "R"), (CDF, ["part"], "R"), (DV, None, "R"), (DV, ["part"], "R"),
    (CDF, ["part"], ""), (DV, None, "R,CT,I")],
    ids=["rewrite-flat", "rewrite-partitioned", "dv-flat", "dv-partitioned", "plain-delta",
         "isolated"])
def test_each_statement_logs_its_change_rows(backend, props, partition_by, features):
    lake = _lake(backend, props, partition_by, ROWS)  # an insert: no cdc file (from adds)
    assert _cdc_files(backend, 1) == []
    at = [lake.version("t")]

    def run(statement):
        with lake.transaction(features) as txn:
            statement(txn)
        lake.flush()
        at.append(lake.version("t"))

    run(lambda txn: txn.update("t", {"v": "v + 1"}, where="id = 2"))
    run(lambda txn: txn.delete("t", where="id = 3"))
    run(lambda txn: txn.merge("t", [{"id": 4, "part": "a", "v": -4},
                                    {"id": 9, "part": "b", "v": 90}], on="target.id = source.id")
        .when_matched_update({"v": "source.v"}).when_not_matched_insert_all().execute())
    run(lambda txn: txn.overwrite("t", [{"id": 7, "part": "b", "v": 70}], where="part = 'b'"))
    run(lambda txn: txn.optimize("t"))  # no row changes
    run(lambda txn: txn.overwrite("t", [{"id": 8, "part": "a", "v": 80}]))  # the whole table
    feed = _feed(backend)
    assert feed[at[0]] == _c(*(("insert", r["id"], r["part"], r["v"]) for r in ROWS))
    assert feed[at[1]] == _c(("update_preimage", 2, "a", 20), ("update_postimage", 2, "a", 21))
    assert feed[at[2]] == _c(("delete", 3, "b", 30))
    assert feed[at[3]] == _c(("update_preimage", 4, "a", 40), ("update_postimage", 4, "a", -4),
                             ("insert", 9, "b", 90))
    assert feed[at[4]] == _c(("delete", 1, "b", 10), ("delete", 5, "b", 50),
                             ("delete", 9, "b", 90), ("insert", 7, "b", 70))
    assert feed[at[6]] == _c(("delete", 0, "a", 0), ("delete", 2, "a", 21),
                             ("delete", 4, "a", -4), ("delete", 7, "b", 70),
                             ("insert", 8, "a", 80))
    assert sorted(feed) == [at[i] for i in (0, 1, 2, 3, 4, 6)]  # optimize, markers: nothing
    for v in at[1:4]:  # the rows a changed file keeps are not changes: files name them
        assert _cdc_files(backend, v)
        assert all(p.startswith("_change_data/") for p in _cdc_files(backend, v))
    assert sorted(r["id"] for r in lake.read("t").to_pylist()) == [8]


def test_statements_of_one_transaction_all_log_their_changes(local_backend):
    """Once a commit has a cdc file, readers ignore its adds: an insert beside an update is
    logged in files too, whichever comes first."""
    lake = _lake(local_backend, rows=ROWS[:2])
    with lake.transaction("R") as txn:  # v2
        txn.insert("t", [{"id": 10, "part": "a", "v": 1}])
        txn.update("t", {"v": "v * 2"}, where="id = 1")
        txn.insert("t", [{"id": 11, "part": "b", "v": 2}])
    with lake.transaction("R") as txn:  # v3
        txn.overwrite("t", [{"id": 12, "part": "a", "v": 3}])
        txn.delete("t", where="id = 12")
    feed = _feed(local_backend)
    assert feed[2] == _c(("insert", 10, "a", 1), ("update_preimage", 1, "b", 10),
                         ("update_postimage", 1, "b", 20), ("insert", 11, "b", 2))
    assert feed[3] == _c(("delete", 0, "a", 0), ("delete", 1, "b", 20), ("delete", 10, "a", 1),
                         ("delete", 11, "b", 2), ("insert", 12, "a", 3), ("delete", 12, "a", 3))


@pytest.mark.parametrize("how", ["create", "set_properties"])
def test_enabling_the_feed_upgrades_the_protocol(local_backend, how):
    lake = local_backend.lake()
    lake.create_table("t", S, properties=CDF if how == "create" else None)
    with lake.transaction("R") as txn:
        txn.insert("t", ROWS[:3])
        if how == "set_properties":
            txn.set_properties("t", CDF)
    p = lake.snapshot("t").protocol
    assert p.min_writer_version >= 4 or "changeDataFeed" in (p.writer_features or [])
    with lake.transaction("R") as txn:
        txn.delete("t", where="id = 1")
    assert _feed(local_backend, 2)[2] == _c(("delete", 1, "b", 10))


def test_features_at_writer_seven_list_the_feed(local_backend):
    lake = _lake(local_backend, DV, rows=ROWS[:2])
    p = lake.snapshot("t").protocol
    assert p.min_writer_version == 7 and "changeDataFeed" in (p.writer_features or [])


def test_checkpoints_carry_no_cdc_actions(local_backend):
    lake = _lake(local_backend, rows=ROWS)
    with lake.transaction("R") as txn:
        txn.update("t", {"v": "0"}, where="id < 3")
    v = lake.maintenance.checkpoint("t")
    import pyarrow.parquet as pq

    store = local_backend.store()
    key = f"t/_delta_log/{v:020d}.checkpoint.parquet"
    cols = pq.read_table(pa.BufferReader(store.get(key).data)).column_names
    assert "cdc" not in cols
    assert _feed(local_backend, 2)[2][("update_postimage", 1, "b", 0)] == 1


# -- undo, redo, crashes, the sweep -----------------------------------------------------------

def _change_keys(backend: Backend) -> set[str]:
    return {k for k in backend.all_keys() if "/_change_data/" in k}


def test_an_aborted_transaction_leaves_no_change_file(local_backend):
    lake = _lake(local_backend, rows=ROWS)
    with pytest.raises(RuntimeError), lake.transaction("R") as txn:
        txn.update("t", {"v": "-v"}, where="id > 2")
        assert _change_keys(local_backend)  # written with the statement
        raise RuntimeError("abort")
    assert _change_keys(local_backend) == set()


def test_a_redone_update_logs_the_rows_it_changes_on_the_newer_table(local_backend):
    """Two writers under R: the one that commits second redoes its update on the first's
    result, and its change rows are the redo's; the first run's cdc file goes."""
    lake = _lake(local_backend, rows=ROWS)
    slow = lake.begin("R")
    slow.update("t", {"v": "v + 1"}, where="id <= 2")
    first_run = _change_keys(local_backend)
    with lake.transaction("R") as fast:
        fast.update("t", {"v": "v * 100"}, where="id = 1")
    slow.commit()
    lake.flush()
    feed = _feed(local_backend, 2)
    assert feed[2] == _c(("update_preimage", 1, "b", 10), ("update_postimage", 1, "b", 1000))
    assert feed[3] == _c(("update_preimage", 0, "a", 0), ("update_postimage", 0, "a", 1),
                         ("update_preimage", 1, "b", 1000), ("update_postimage", 1, "b", 1001),
                         ("update_preimage", 2, "a", 20), ("update_postimage", 2, "a", 21))
    referenced = {f"t/{p}" for v in (2, 3) for p in _cdc_files(local_backend, v)}
    assert first_run and not first_run & referenced
    assert _change_keys(local_backend) == referenced  # the first run's file went


def test_the_sweep_keeps_change_files_commits_name_and_takes_abandoned_ones(local_backend):
    lake = _lake(local_backend, rows=ROWS)
    with lake.transaction("R") as txn:
        txn.delete("t", where="id = 1")
    stray = "t/_change_data/part-00000-00000000-0000-0000-0000-000000000000-c000.snappy.parquet"
    local_backend.store().put(stray, b"not referenced")
    found = lake.maintenance.abandoned_files("t", min_age=0, force=True)
    assert found == [("t", stray)]
    assert {k for k in _change_keys(local_backend)} - {stray}  # the delete's file is kept


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_a_crashed_transactions_change_files_are_named_by_its_sublog(local_backend, end):
    """A cdc file is written before the sublog entry that names it: a crashed transaction's
    files are kept while its sublog lives, committed by a resume or dropped by its undo."""
    from lakevilla.recovery import sublog as sublogs
    from tests.helpers import clock_at, entries_landed

    lake = _lake(local_backend, rows=ROWS)
    lake = local_backend.lake(marker_ttl=5.0)
    stalled = lake.begin("R")
    stalled.update("t", {"v": "0"}, where="id = 4")
    entries_landed(stalled)
    named = {f"t/{c['path']}" for e in sublogs.read_all(local_backend.store(), stalled.id)
             for c in e.cdc}
    assert named and named == _change_keys(local_backend)
    assert lake.maintenance.abandoned_files("t", min_age=0, force=True) == []
    lake._client.heartbeats.forget(stalled)
    resumed = local_backend.lake(marker_ttl=5.0, clock=clock_at(10_000.0)).resume(stalled.id)
    if end == "abort":
        resumed.abort()
        assert _change_keys(local_backend) == set()
        return
    resumed.commit()
    assert {f"t/{p}" for p in _cdc_files(local_backend, 2)} == named
    assert _feed(local_backend, 2)[2] == _c(("update_preimage", 4, "a", 40),
                                            ("update_postimage", 4, "a", 0))


def test_an_engine_that_writes_no_change_data_is_refused(local_backend):
    from lakevilla.engines.api import TableContext
    from lakevilla.engines.embedded import EmbeddedEngine
    from lakevilla.statements.update import Delete

    lake = _lake(local_backend, rows=ROWS)

    class NoFeed(EmbeddedEngine):  # e.g. a third engine that does not know the feed
        name = "other"
        writes_change_data = False

    snap = lake.snapshot("t")
    from lakevilla.statements.view import TableWork

    log = lake._client.log("t")
    tw = TableWork("t", log, snap, TableContext.of("t", local_backend.store(),
                                                     local_backend.uri, snap))
    with pytest.raises(lv.UnsupportedTableFeatureError, match="changeDataFeed"):
        Delete(seq=1, table="t", where="id = 1").check(tw, NoFeed(), local_backend.store())


# -- differential against delta-rs ------------------------------------------------------------

ROW = st.fixed_dictionaries({"id": st.integers(0, 9), "part": st.sampled_from(["a", "b"]),
                             "v": st.one_of(st.none(), st.integers(-3, 3))})
WHERE = st.sampled_from(["id < 3", "v > 0", "part = 'a'", "v IS NULL", "id % 2 = 0", "id > 100"])
STATEMENT = st.one_of(
    st.tuples(st.just("insert"), st.lists(ROW, min_size=1, max_size=4)),
    st.tuples(st.just("update"), WHERE),
    st.tuples(st.just("delete"), WHERE),
    st.tuples(st.just("merge"), st.lists(ROW, max_size=4, unique_by=lambda r: r["id"])),
    st.tuples(st.just("overwrite"), st.lists(ROW, max_size=3)),
)


def _ours(lake, kind, arg, features):
    with lake.transaction(features) as txn:
        if kind == "insert":
            txn.insert("t", pa.Table.from_pylist(arg, schema=S))
        elif kind == "update":
            txn.update("t", {"v": "coalesce(v, 0) + 1"}, where=arg)
        elif kind == "delete":
            txn.delete("t", where=arg)
        elif kind == "merge":
            (txn.merge("t", pa.Table.from_pylist(arg, schema=S), on="target.id = source.id")
             .when_matched_update({"v": "source.v"}).when_not_matched_insert_all().execute())
        else:
            txn.overwrite("t", pa.Table.from_pylist(arg, schema=S))


def _theirs(uri, kind, arg):
    from deltalake import DeltaTable, write_deltalake

    if kind in ("insert", "overwrite"):
        write_deltalake(uri, pa.Table.from_pylist(arg, schema=S),
                        mode="append" if kind == "insert" else "overwrite")
    elif kind == "update":
        DeltaTable(uri).update(updates={"v": "coalesce(v, 0) + 1"}, predicate=arg)
    elif kind == "delete":
        DeltaTable(uri).delete(arg)
    else:
        (DeltaTable(uri).merge(pa.Table.from_pylist(arg, schema=S), "target.id = source.id",
                               source_alias="source", target_alias="target")
         .when_matched_update({"v": "source.v"}).when_not_matched_insert_all().execute())


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=True)
@given(start=st.lists(ROW, max_size=6), statements=st.lists(STATEMENT, min_size=1, max_size=5),
       partitioned=st.booleans(), dvs=st.booleans(), features=st.sampled_from(["", "R"]))
def test_change_feed_matches_delta_rs(tmp_path_factory, start, statements, partitioned, dvs,
                                      features):
    from deltalake import DeltaTable, write_deltalake

    root = tmp_path_factory.mktemp("cdf")
    backend = Backend("local", f"file://{root}/lake")
    parts = ["part"] if partitioned else None
    lake = _lake(backend, DV if dvs else CDF, parts, start)
    ref = f"{root}/ref"
    write_deltalake(ref, pa.Table.from_pylist([], schema=S), partition_by=parts,
                    configuration=CDF)
    if start:
        write_deltalake(ref, pa.Table.from_pylist(start, schema=S), mode="append")
    ours_at, theirs_at = [], []
    for kind, arg in statements:
        before = lake.version("t"), DeltaTable(ref).version()
        _ours(lake, kind, arg, features)
        _theirs(ref, kind, arg)
        ours_at.append(lake.version("t") if lake.version("t") != before[0] else None)
        theirs_at.append(DeltaTable(ref).version() if DeltaTable(ref).version() != before[1]
                         else None)
    ours, theirs = _feed(backend), changes(ref)
    for v_ours, v_theirs, (kind, arg) in zip(ours_at, theirs_at, statements, strict=True):
        want = theirs.get(v_theirs, collections.Counter()) if v_theirs is not None else _c()
        got = ours.get(v_ours, collections.Counter()) if v_ours is not None else _c()
        assert got == want, (kind, arg, json.dumps(start))


def test_an_update_logs_no_row_it_leaves_as_it_was(local_backend):
    """Preimages EXCEPT ALL postimages and the reverse, as delta-rs logs an update: rows that
    swap values, or are set to their own, are no change."""
    lake = _lake(local_backend, rows=[{"id": 1, "part": "b", "v": None},
                                      {"id": 1, "part": "b", "v": 1},
                                      {"id": 2, "part": "a", "v": 5}])
    with lake.transaction("R") as txn:
        txn.update("t", {"v": "coalesce(v, 0) + 1"}, where="id = 1")
        txn.update("t", {"v": "v"}, where="id = 2")
    assert _feed(local_backend, 2)[2] == _c(("update_preimage", 1, "b", None),
                                            ("update_postimage", 1, "b", 2))


@pytest.mark.parametrize("props", [CDF, DV], ids=["rewrite", "dv"])
def test_an_update_that_changes_no_value_logs_no_change(local_backend, props):
    """It still rewrites (or marks) the file: an empty cdc file keeps readers from taking that
    file's rows for deletes and inserts."""
    lake = _lake(local_backend, props, rows=ROWS)
    with lake.transaction("R") as txn:
        assert txn.update("t", {"v": "v"}, where="id = 2") == 1
    assert _feed(local_backend, 2).get(2, _c()) == _c()
    assert len(_cdc_files(local_backend, 2)) == 1


def test_at_every_crash_point_the_feed_is_whole_and_no_change_file_is_lost(local_backend):
    """An R transaction (update, insert, delete) on a feed table crashed at each store call,
    then recovered and resumed (or re-run): its commit's feed is the uncrashed run's, every cdc
    action names a file that exists, and every other change file is one the sweep takes."""
    from tests.helpers import (
        clock_at,
        count_calls,
        crash_plans,
        entries_landed,
        r_transaction_on,
        run_crashing,
    )

    def settled(step):
        def run(txn, name):
            step(txn, name)
            entries_landed(txn)
        return run

    steps = [lambda t, n: t.update(n, {"v": "v + 1"}, where="id < 2"),
             lambda t, n: t.insert(n, [{"id": 7, "part": "a", "v": 7}]),
             lambda t, n: t.delete(n, where="id = 3")]
    holder: dict = {}
    action_on = r_transaction_on([settled(s) for s in steps], holder)
    base, later = local_backend.store(), clock_at(10_000.0)

    def make(store):
        return local_backend.lake(store=store, marker_ttl=5.0)

    def setup(name):
        lake = local_backend.lake()
        lake.create_table(name, S, properties=CDF)
        with lake.transaction("") as txn:
            txn.insert(name, pa.Table.from_pylist(ROWS, schema=S))

    def feed(name):
        return changes(local_backend.table_uri(name), 2).get(2)

    setup("probe")
    n = count_calls(base, make, action_on("probe"))
    want = feed("probe")
    assert want is not None and len(want) == 6
    seen = collections.Counter()
    for i, (label, plan) in enumerate(crash_plans(n)):
        name = f"t{i}"
        setup(name)
        run_crashing(base, plan, make, action_on(name))
        lake = local_backend.lake(marker_ttl=5.0, clock=later)
        lake.recover(tables=[name])
        if lake.version(name) == 1:
            try:
                resumed = local_backend.lake(marker_ttl=5.0, clock=later).resume(holder["id"])
                seen["resumed"] += 1
            except lv.LakeVillaError as e:
                assert "no sublogs" in str(e), label
                resumed = lake.begin("R")
                seen["re-run"] += 1
            for step in steps[len(resumed.operations):]:
                step(resumed, name)
            resumed.commit()
            resumed.lake.flush()
        else:
            seen["committed"] += 1
        assert feed(name) == want, label
        log = lake._client.log(name)
        named = {f"{name}/{f.path}" for _v, c in log.commits_between(-1, log.latest_version())
                 for f in c.cdc}
        stored = {k for k in local_backend.all_keys() if k.startswith(f"{name}/_change_data/")}
        assert named <= stored, label
        swept = {k for _t, k in lake.maintenance.abandoned_files(name, min_age=0, force=True)}
        assert stored - named == swept & stored, label
    assert seen["resumed"] and seen["committed"] and seen["re-run"], seen


def test_a_plain_delta_statement_that_loses_a_conflict_drops_its_change_files(tmp_path):
    """LV[DL]: each statement commits alone; one that conflicts is dropped, its cdc files too."""
    from lakevilla.store import LocalStore
    from tests.helpers import HookStore

    backend = Backend("local", f"file://{tmp_path}/lake")
    _lake(backend, rows=ROWS)
    other = backend.lake()

    def concurrent_update() -> None:
        with other.transaction("") as txn:
            txn.update("t", {"v": "0"}, where="id = 1")

    store = HookStore(LocalStore(str(tmp_path / "lake")),
                      lambda kind, key: kind == "put_if_absent" and key.endswith(
                          f"{2:020d}.json"), concurrent_update)
    lake = lv.Lake(backend.uri, store=store)
    with pytest.raises(lv.TransactionAborted, match="conflicts"):
        with lake.transaction("") as txn:
            txn.update("t", {"v": "-1"}, where="id = 1")
    assert _change_keys(backend) == {f"t/{p}" for p in _cdc_files(backend, 2)}


def test_a_table_created_with_rows_and_the_feed_logs_them_as_inserts(local_backend):
    lake = local_backend.lake()
    lake.create_table("t", S, data=pa.Table.from_pylist(ROWS[:2], schema=S), properties=CDF)
    assert _feed(local_backend) == {0: _c(("insert", 0, "a", 0), ("insert", 1, "b", 10))}


def test_an_overwrite_of_files_with_deleted_rows_logs_only_their_live_rows(local_backend):
    """The remove of a file with a deletion vector does not say which rows it still held: the
    overwrite's changes go in files, the rows the DV deleted are not deleted again."""
    lake = _lake(local_backend, DV, rows=ROWS)
    with lake.transaction("R") as txn:
        txn.delete("t", where="id < 4")
    with lake.transaction("R") as txn:
        txn.overwrite("t", [{"id": 8, "part": "a", "v": 80}])
    assert _cdc_files(local_backend, 3)
    assert _feed(local_backend, 3)[3] == _c(("delete", 4, "a", 40), ("delete", 5, "b", 50),
                                            ("insert", 8, "a", 80))
