"""The read path (issue 15): reads equal delta-rs' rows for random predicates over random
tables, pushdown into Parquet only skips what cannot match, statistics prune what they allow
(request counts), and updates/deletes read whole only the files holding a match.

The reference for a filtered read is delta-rs' full read of the same table, filtered by
DuckDB (the engine's semantics: NaN, casts, NULL); delta-rs' own filters are DataFusion's
and differ on the cases tests/unit/test_exact_predicates.py lists.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import hashlib
import math
import shutil
import tempfile

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import lakevilla as lv
from lakevilla.engines import embedded
from lakevilla.engines.pushdown import arrow_filter, pushdown
from lakevilla.store import CountingStore
from tests.conftest import ON_AZURE
from tests.predicates import PARTITION, SCHEMA, as_read, files, predicates, selected_ids, valid

UTC = dt.UTC


def canon(v):
    """A value compared by what it is (NaN equals NaN, -0.0 differs from 0.0, instants by text)."""
    if isinstance(v, float):
        return "NaN" if math.isnan(v) else repr(v)
    if isinstance(v, dt.datetime | dt.date):
        return v.isoformat()
    if isinstance(v, dict):
        return {k: canon(x) for k, x in v.items()}
    if isinstance(v, decimal.Decimal):
        return str(v)
    return v


def canon_rows(table) -> list[dict]:
    return sorted(({k: canon(v) for k, v in r.items()} for r in table.to_pylist()),
                  key=lambda r: r["id"])


# -- reads equal delta-rs' ---------------------------------------------------------------------

_EMPTY_ROW = {"id": 0, "i": None, "n": None, "f": None, "r": None, "dec": None, "w": None, "s": "",
              "d": None, "ts": None, "tz": None, "b": None, "st": None, "x": None, "p": None,
              "q": None}


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
# found by CI
@example(fs=[[_EMPTY_ROW]], wheres=["(i + 1 = 0) AND (CAST(s AS DATE) IS NULL)"], rg=1)
@given(fs=files(max_files=7, max_rows=7), wheres=st.lists(predicates(), min_size=4, max_size=6),
       rg=st.sampled_from([1, 2, 1 << 20]))
def test_reads_equal_delta_rs_for_random_predicates(fs, wheres, rg):
    """Many files (some with row groups of one or two rows), partitions with nulls and odd
    strings, NaN and signed zeros, timestamps, structs; a checkpoint every other commit so
    that the snapshot comes from a columnar checkpoint plus commits."""
    from deltalake import DeltaTable

    wheres = [w for w in wheres if valid(w)]
    assume(wheres)
    root = tempfile.mkdtemp(prefix="lv-reads-")
    old = embedded.ROW_GROUP_ROWS
    embedded.ROW_GROUP_ROWS = rg
    try:
        lake = lv.Lake("file://" + root)
        lake.create_table("t", SCHEMA, partition_by=PARTITION,
                          properties={"delta.checkpointInterval": "2"})
        for rows in fs:
            with lake.transaction(features="") as txn:
                txn.insert("t", rows)
        fresh = lv.Lake("file://" + root)
        theirs = pa.table(DeltaTable(root + "/t").to_pyarrow_table())
        ours = fresh.read("t")
        assert canon_rows(ours) == canon_rows(theirs)
        assert canon_rows(ours) == canon_rows(
            pa.Table.from_pylist([r for rows in fs for r in as_read(rows)], SCHEMA))
        for where in wheres:
            want = selected_ids(theirs, where)
            if want is None:
                continue  # DuckDB raises on some row: the engine raises too (or pruned the row)
            got = fresh.read("t", where=where)
            assert sorted(got.column("id").to_pylist()) == want, where
            expected = [r for r in canon_rows(theirs) if r["id"] in set(want)]
            assert canon_rows(got) == expected, where
            proj = fresh.read("t", where=where, columns=["id", "p"])
            assert (proj.column_names == ["id", "p"]
                    and sorted(proj.column("id").to_pylist()) == want)
    finally:
        embedded.ROW_GROUP_ROWS = old
        shutil.rmtree(root, ignore_errors=True)


def test_simple_filters_equal_delta_rs_own_filters(local_backend):
    """Where DataFusion and DuckDB agree (integers, strings, dates, partitions), delta-rs'
    own filtered read is the reference too."""
    schema = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("s", pa.string()),
                        ("d", pa.date32()), ("p", pa.string())])
    lake = local_backend.lake()
    lake.create_table("t", schema, partition_by=["p"])
    for f in range(6):
        with lake.transaction(features="") as txn:
            txn.insert("t", [{"id": f * 10 + i, "k": (f * 10 + i) % 7, "s": f"s{i}",
                              "d": dt.date(2024, 1, 1 + f), "p": ["a/b", None, "x y"][f % 3]}
                             for i in range(10)])
    cases = [("id = 17", [("id", "=", 17)]),
             ("id >= 20 AND id < 35", [("id", ">=", 20), ("id", "<", 35)]),
             ("k = 3", [("k", "=", 3)]), ("s = 's4'", [("s", "=", "s4")]),
             ("d > DATE '2024-01-04'", [("d", ">", dt.date(2024, 1, 4))]),
             ("p = 'a/b'", [("p", "=", "a/b")]),
             ("k IN (1, 2)", [("k", "in", [1, 2])])]
    dt_ = local_backend.delta("t")
    for where, dnf in cases:
        theirs = pa.table(dt_.to_pyarrow_table(filters=dnf))
        assert canon_rows(lake.read("t", where=where)) == canon_rows(theirs), where


# -- pushdown only skips what cannot match ----------------------------------------------------

@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(fs=files(max_files=3, max_rows=6), wheres=st.lists(predicates(), min_size=6, max_size=6),
       rg=st.sampled_from([1, 2, 3]))
def test_pushed_filter_keeps_every_matching_row(fs, wheres, rg, tmp_path_factory):
    """pyarrow evaluates the pushed filter against row-group statistics and rows; every row
    DuckDB selects must survive it (NaN, -0.0, nulls, casts, long strings, timestamps), and a
    filter called exact (the engine then skips DuckDB) keeps nothing else."""
    table = pa.Table.from_pylist([r for rows in fs for r in as_read(rows)], SCHEMA)
    path = tmp_path_factory.mktemp("push") / "f.parquet"
    pq.write_table(table, path, row_group_size=rg)
    data = ds.dataset(str(path), format="parquet", schema=SCHEMA)
    for where in wheres:
        if not valid(where):
            continue
        want = selected_ids(table, where)
        if want is None:
            continue
        pushed, exact = pushdown(where, SCHEMA)
        if pushed is None:
            continue
        kept = set(data.to_table(columns=["id"], filter=pushed).column("id").to_pylist())
        assert set(want) <= kept, (where, pushed, sorted(set(want) - kept))
        if exact:
            assert kept == set(want), (where, pushed, sorted(kept - set(want)))


def test_pushdown_is_built_only_from_atoms_both_engines_read_alike():
    schema = pa.schema([("i", pa.int64()), ("f", pa.float64()), ("s", pa.string()),
                        ("d", pa.date32()), ("dec", pa.decimal128(10, 2)), ("b", pa.bool_())])
    assert arrow_filter("i = 7", schema) is not None
    assert arrow_filter("s IN ('a', 'b') AND d >= DATE '2024-01-01'", schema) is not None
    assert arrow_filter("i IS NULL", schema) is not None
    assert pushdown("i = 7 AND NOT (s IN ('a', NULL) OR b)", schema)[1]
    assert not pushdown("i = 7 AND f > 5", schema)[1]  # pushed, but f > 5 is left to DuckDB
    for where in ["f > 5",  # NaN > 5 in DuckDB; not in pyarrow
                  # the column would be cast
                  "dec = 1.25", "i + 1 = 7", "d < TIMESTAMP '2024-01-02 03:00:00'",
                  "CAST(i AS VARCHAR) = '7'", "i = 7 OR f > 5"]:
        assert arrow_filter(where, schema) is None, where


# -- statistics prune what they allow (requests) ------------------------------------------------

def _lake(backend):
    store = CountingStore(backend.store())
    return backend.lake(store=store), store


def _data_requests(store: CountingStore, fn) -> tuple[int, int]:
    """(GETs of data files, bytes of data files) that ``fn`` makes."""
    import lakevilla.store.wrappers as w

    got = {"n": 0, "bytes": 0}
    orig, orig_range = w.CountingStore.get, w.CountingStore.get_range

    def spy(self, key):
        r = orig(self, key)
        if key.endswith(".parquet") and "/_delta_log/" not in key:
            got["n"] += 1
            got["bytes"] += len(r.data)
        return r

    def spy_range(self, key, start, length=None):
        r = orig_range(self, key, start, length)
        if key.endswith(".parquet") and "/_delta_log/" not in key:
            got["n"] += 1
            got["bytes"] += len(r)
        return r

    w.CountingStore.get, w.CountingStore.get_range = spy, spy_range
    try:
        fn()
    finally:
        w.CountingStore.get, w.CountingStore.get_range = orig, orig_range
    return got["n"], got["bytes"]


WIDE = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("pad", pa.string())])


def _pad(i: int) -> str:
    """320 characters Parquet cannot compress (so that bytes read measure what was read)."""
    return "".join(hashlib.sha256(f"{i}-{j}".encode()).hexdigest() for j in range(5))


def _wide_rows(lo: int, n: int) -> list[dict]:
    return [{"id": i, "k": i % 5, "pad": _pad(i)} for i in range(lo, lo + n)]


@ON_AZURE
def test_point_read_gets_one_row_group_of_one_file(backend, monkeypatch):
    """Statistics skip files and row groups; projection skips columns. A point lookup in a
    table of 4 files of 8 row groups reads a footer and one column chunk set of one file."""
    monkeypatch.setattr("lakevilla.engines.ranged.WHOLE_FILE_BYTES", 0)
    monkeypatch.setattr(embedded, "ROW_GROUP_ROWS", 250)
    lake, store = _lake(backend)
    lake.create_table("t", WIDE)
    for f in range(4):
        with lake.transaction(features="") as txn:
            txn.insert("t", _wide_rows(f * 4000, 4000))
    sizes = {a.path: a.size for a in lake.snapshot("t").files.values()}
    n_all, b_all = _data_requests(store, lambda: lake.read("t"))
    # every column, nothing to skip: each file whole by one GET, no footer first
    assert (n_all, b_all) == (len(sizes), sum(sizes.values()))
    got = {}
    n, b = _data_requests(store, lambda: got.setdefault("p", lake.read("t", where="id = 4321")))
    assert got["p"].to_pylist() == _wide_rows(4321, 1)
    assert n <= 3 and b < min(sizes.values()) / 4, (n, b)  # footer + the chunks of one row group
    n, b = _data_requests(store, lambda: got.setdefault("c", lake.read("t", where="k = 3",
                                                                       columns=["id"])))
    assert got["c"].num_rows == 3200
    assert b < b_all / 4, (b, b_all)  # the pad column is never read
    n, b = _data_requests(store,
                          lambda: got.setdefault("none", lake.read("t", where="id > 100000")))
    assert (n, b) == (0, 0) and got["none"].num_rows == 0


def test_a_filtered_read_that_needs_most_of_a_file_fetches_it_whole_after_its_footer(
        local_backend, monkeypatch):
    """When the footer shows that the columns and row groups a scan needs make up most of a
    file, the file is fetched whole, as stored (its bytes then serve pyarrow as they are,
    not copied chunk by chunk into a buffer); a scan needing little of it still fetches only
    its chunks."""
    monkeypatch.setattr("lakevilla.engines.ranged.WHOLE_FILE_BYTES", 0)
    lake, store = _lake(local_backend)
    lake.create_table("t", WIDE.append(pa.field("p", pa.string())), partition_by=["p"])
    rows = [{**r, "p": f"p{r['id'] // 1000}"} for r in _wide_rows(0, 3000)]
    for f in range(3):
        with lake.transaction(features="") as txn:
            txn.insert("t", rows[f * 1000:(f + 1) * 1000])
    sizes = [a.size for a in lake.snapshot("t").files.values()]
    tail = min(embedded.ranged.FOOTER_GUESS, min(sizes))
    got = {}
    n, b = _data_requests(store, lambda: got.setdefault("k", lake.read("t", where="k = 3")))
    assert sorted(got["k"].to_pylist(), key=lambda r: r["id"]) == [r for r in rows if r["k"] == 3]
    assert (n, b) == (2 * len(sizes), len(sizes) * tail + sum(sizes))  # footer, then all of it
    n, b = _data_requests(store, lambda: lake.read("t", where="k = 3", columns=["id"]))
    assert n == 2 * len(sizes) and b < sum(sizes) / 4  # footer, then the id and k chunks


def test_update_and_delete_read_whole_only_files_with_a_match(backend, monkeypatch):
    """A file whose statistics admit the predicate but that holds no matching row is read by
    its predicate column only and left alone."""
    monkeypatch.setattr("lakevilla.engines.ranged.WHOLE_FILE_BYTES", 0)
    lake, store = _lake(backend)
    lake.create_table("t", WIDE)
    for f in range(3):  # ids with gaps: 0, 2, 4, ... so odd ids fall inside every file's range
        with lake.transaction(features="") as txn:
            txn.insert("t", [r for r in _wide_rows(f * 4000, 4000) if r["id"] % 2 == 0])
    files_before = set(lake.snapshot("t").files)
    smallest = min(a.size for a in lake.snapshot("t").files.values())
    with lake.transaction(features="R") as txn:
        n, b = _data_requests(store, lambda: txn.delete("t", where="id = 4001"))
    assert b < smallest / 4, (b, smallest)  # one file's footer and id column only
    assert set(lake.snapshot("t").files) == files_before
    with lake.transaction(features="R") as txn:
        assert txn.update("t", set={"k": "k + 100"}, where="id = 4002") == 1
    after = set(lake.snapshot("t").files)
    assert len(files_before - after) == 1 and len(after - files_before) == 1
    assert lake.read("t", where="id = 4002").column("k").to_pylist() == [102]


@pytest.mark.parametrize("statement", ["update", "delete"])
def test_a_small_file_an_update_or_delete_rewrites_is_fetched_once(backend, statement):
    """Issue 13: finding the rows fetches a file of at most WHOLE_FILE_BYTES whole, so
    rewriting it reuses those bytes: one GET per file, where it took two (one round trip
    less on every update, and on every redo of one)."""
    lake, store = _lake(backend)
    lake.create_table("t", WIDE)
    with lake.transaction(features="") as txn:
        txn.insert("t", _wide_rows(0, 200))
    size = max(a.size for a in lake.snapshot("t").files.values())
    assert size <= embedded.ranged.WHOLE_FILE_BYTES
    with lake.transaction(features="R") as txn:
        run = ((lambda: txn.update("t", set={"k": "k + 1"}, where="id = 7"))
               if statement == "update" else (lambda: txn.delete("t", where="id = 7")))
        n, b = _data_requests(store, run)
    assert (n, b) == (1, size)
    want = [3] if statement == "update" else []  # k = id % 5, plus one
    assert lake.read("t", where="id = 7").column("k").to_pylist() == want
    assert lake.read("t").num_rows == (200 if statement == "update" else 199)


def test_a_missing_data_file_is_a_lakevilla_error(local_backend, tmp_path):
    lake = local_backend.lake()
    lake.create_table("t", WIDE)
    with lake.transaction(features="") as txn:
        txn.insert("t", _wide_rows(0, 10))
    (path,) = list(lake.snapshot("t").files)
    (tmp_path / "lake" / "t" / path).unlink()
    with pytest.raises(lv.CorruptLogError, match="missing"):
        lake.read("t")
    with pytest.raises(lv.CorruptLogError, match="missing"):
        with lake.transaction(features="R") as txn:
            txn.delete("t", where="id = 3")


def test_a_store_crash_during_a_scan_reaches_the_caller(local_backend):
    """Reads run on pyarrow's threads; the store's exceptions (a crash included) still reach
    the reader unchanged."""
    from lakevilla.store import FaultInjectingStore, FaultPlan, SimulatedCrash

    lake = local_backend.lake()
    lake.create_table("t", WIDE)
    with lake.transaction(features="") as txn:
        txn.insert("t", _wide_rows(0, 10))
    store = FaultInjectingStore(local_backend.store(),
                                FaultPlan(crash_before=1,
                                          predicate=lambda k, key: key.endswith(".parquet")
                                          and "_delta_log" not in key))
    with pytest.raises(SimulatedCrash):
        local_backend.lake(store=store).read("t")


def test_strings_decode_as_dictionaries_only_where_every_chunk_is_dictionary_encoded(tmp_path):
    """Few distinct strings: dictionary pages throughout, decoded as a dictionary. Distinct long
    strings make the writer fall back to plain pages: decoding those as a dictionary would hash
    every value, so they stay plain. Either way the scan returns ``string``."""
    from lakevilla.engines import ranged

    lake = lv.Lake(f"file://{tmp_path}")
    schema = pa.schema([("id", pa.int64()), ("few", pa.string()), ("many", pa.string())])
    lake.create_table("t", schema)
    n = 40_000
    with lake.transaction(features="") as txn:
        txn.insert("t", {"id": list(range(n)), "few": [f"v{i % 7}" for i in range(n)],
                         "many": [_pad(i) for i in range(n)]})
    snap = lake.snapshot("t")
    (add,) = snap.files.values()
    src = ranged.Source(f"t/{add.path}", add.size)
    ranged._open(lake.store, src)
    md = ranged._metadata(src)
    assert ranged._dictionary_encoded(md, "few") and not ranged._dictionary_encoded(md, "many")
    seen = {}
    orig = ranged.prepare

    def spy(*a, **kw):
        frags, dictionary = orig(*a, **kw)
        seen["dictionary"] = dictionary
        return frags, dictionary

    ranged.prepare = spy
    try:
        got = lake.read("t", where="id % 1000 = 3")
    finally:
        ranged.prepare = orig
    assert seen["dictionary"] == ("few",)
    assert got.schema == schema and got.num_rows == n // 1000
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == [
        {"id": i, "few": f"v{i % 7}", "many": _pad(i)} for i in range(3, n, 1000)]


@pytest.mark.parametrize("crash_at", [1, 2, 4])
def test_a_scan_in_batches_fetches_ahead_and_keeps_order_and_errors(local_backend, monkeypatch,
                                                                    crash_at):
    """With a batch per file, batch i+1 is fetched while batch i decodes: the rows come out
    complete and in file order, and a store crash in any batch's fetch reaches the reader."""
    from lakevilla.store import FaultInjectingStore, FaultPlan, SimulatedCrash

    monkeypatch.setattr("lakevilla.engines.ranged.BATCH_BYTES", 1)
    lake = local_backend.lake()
    lake.create_table("t", WIDE)
    for f in range(4):
        with lake.transaction(features="") as txn:
            txn.insert("t", _wide_rows(100 * f, 50))
    files = lake.snapshot("t").files.values()
    want = sorted((r for f in range(4) for r in _wide_rows(100 * f, 50)), key=lambda r: r["id"])
    assert sorted(lake.read("t").to_pylist(), key=lambda r: r["id"]) == want
    got = lake.engine._read(local_backend_ctx(lake, "t"), list(files), ["id"])
    assert got.column("id").to_pylist() == [r["id"] for a in files for r in _rows_of(lake, a)]
    store = FaultInjectingStore(local_backend.store(),
                                FaultPlan(crash_before=crash_at,
                                          predicate=lambda k, key: key.endswith(".parquet")
                                          and "_delta_log" not in key))
    with pytest.raises(SimulatedCrash):
        local_backend.lake(store=store).read("t")


def test_a_scan_that_fits_one_batch_is_one_batch_and_a_bigger_one_starts_small():
    """Files that fit in one batch are fetched and decoded together (a pipeline would only add
    its threads); a bigger scan's first batch is about one file, so decoding starts early."""
    from lakevilla.engines import ranged

    mb = 1 << 20
    small = [ranged.Source(f"f{i}", 4 * mb) for i in range(ranged.BATCH_BYTES // (4 * mb))]
    assert ranged.batches(small) == [small]
    big = [ranged.Source(f"f{i}", 4 * mb) for i in range(20)]
    got = ranged.batches(big)
    assert [len(b) for b in got] == [1, 8, 8, 3] and sum(got, []) == big


def test_batches_decode_side_by_side_in_order_and_fetch_at_most_a_few_ahead():
    """Batch i+1 decodes while batch i still does (no barrier between batches), the tables
    come out in batch order, and while a batch's decode is unfinished no batch more than
    DECODERS + 1 after it is fetched (the compressed bytes held stay a few batches)."""
    import threading

    from lakevilla.engines import parquet_read

    n = parquet_read.DECODERS + 4
    fetched: list[int] = []
    second_started, too_far = threading.Event(), threading.Event()
    held: list[bool] = []

    def fetch(i):
        fetched.append(i)
        if i > parquet_read.DECODERS + 1:
            too_far.set()
        return i

    def decode(i):
        if i == 0:  # held until batch 1 decodes beside it (bounded: a broken pipeline fails)
            assert second_started.wait(timeout=30), "batch 1 did not decode beside batch 0"
            # a fetch past the bound would come while this decode is held: give it a second
            held.append(too_far.wait(timeout=1))
        elif i == 1:
            second_started.set()
        return [pa.table({"b": [i]})]

    got = parquet_read.pipelined(list(range(n)), fetch, decode)
    assert [t.column("b")[0].as_py() for t in got] == list(range(n))
    assert fetched == list(range(n))
    assert held == [False], "a batch too far ahead was fetched while batch 0 decoded"


BOUNDED = pa.schema([("id", pa.int64()), ("i", pa.int32()), ("d", pa.date32()),
                     ("s", pa.string()), ("p", pa.string())])


def _bounded_rows(f: int) -> list[dict]:
    """File f: ``i`` in 10f..10f+9 (NULL in every third row of the odd files), ``d`` one date."""
    return [{"id": 10 * f + j, "i": None if f % 2 and j % 3 == 0 else 10 * f + j,
             "d": dt.date(2024, 1, 1 + f), "s": f"s{j}", "p": "ab"[f % 2]} for j in range(10)]


@pytest.mark.parametrize("where", [
    "i >= 0", "i < 39", "i <= 39", "i > 10", "i >= 10 AND i < 20", "i = 19", "i <> 20",
    "i IS NULL", "i IS NOT NULL", "i IS NULL OR i > 33", "NOT (i > 25)", "i IN (9, 10, 31)",
    "i BETWEEN 12 AND 27", "d >= DATE '2024-01-02'", "d < DATE '2024-01-02' OR i IS NULL",
    "i >= 0 AND s = 's3'", "p = 'b' AND i < 30"])
@pytest.mark.parametrize("whole_file_bytes", [0, 1 << 20])
def test_footer_bounds_given_to_the_scan_hold_for_every_row(local_backend, monkeypatch, where,
                                                            whole_file_bytes):
    """The scan tells pyarrow what each file's footer bounds for its integer and date columns
    (min, max, and whether a NULL may occur in the row groups it reads), so that pyarrow drops
    the comparisons they decide: a read still returns exactly the rows the predicate selects,
    at the bounds themselves, with NULLs, with row groups skipped, beside partition values,
    and whether the files are fetched whole at once or footer first."""
    monkeypatch.setattr(embedded, "ROW_GROUP_ROWS", 4)
    monkeypatch.setattr("lakevilla.engines.ranged.WHOLE_FILE_BYTES", whole_file_bytes)
    lake = local_backend.lake()
    lake.create_table("t", BOUNDED, partition_by=["p"])
    for f in range(4):
        with lake.transaction(features="") as txn:
            txn.insert("t", _bounded_rows(f))
    every = pa.Table.from_pylist([r for f in range(4) for r in _bounded_rows(f)], BOUNDED)
    want = selected_ids(every, where)
    got = local_backend.lake().read("t", where=where)
    assert sorted(got.column("id").to_pylist()) == want


def test_footer_bounds_cover_only_exact_signed_integer_and_date_statistics(tmp_path):
    """Bounds come from integer and date columns only (a writer may truncate strings'
    statistics), a column whose row groups may hold a NULL admits it, and a column a row
    group has no statistics for gives no bound."""
    from lakevilla.engines.parquet_read import bounds

    t = pa.table({"i": pa.array([5, None, 9, 2], pa.int64()), "j": pa.array([1, 2, 3, 4]),
                  "u": pa.array([1, 2, 3, 4], pa.uint32()), "s": ["a", "b", "c", "d"],
                  "d": pa.array([dt.date(2024, 1, 3), dt.date(2024, 1, 1)] * 2)})
    pq.write_table(t, tmp_path / "f.parquet", row_group_size=2)
    md = pq.ParquetFile(tmp_path / "f.parquet").metadata
    schema = pa.schema([("i", pa.int64()), ("j", pa.int64()), ("u", pa.int64()),
                        ("s", pa.string()), ("d", pa.date32())])
    got = bounds(md, [0, 1], schema, set(schema.names))
    import pyarrow.compute as pc

    want = (((pc.field("i") >= 2) & (pc.field("i") <= 9)) | pc.field("i").is_null()) \
        & ((pc.field("j") >= 1) & (pc.field("j") <= 4)) \
        & ((pc.field("d") >= pa.scalar(dt.date(2024, 1, 1)))
           & (pc.field("d") <= pa.scalar(dt.date(2024, 1, 3))))
    assert got.equals(want), str(got)
    assert str(bounds(md, [1], schema, {"i"})) == str((pc.field("i") >= 2) & (pc.field("i") <= 9))
    pq.write_table(t, tmp_path / "g.parquet", write_statistics=["j"])
    assert bounds(pq.ParquetFile(tmp_path / "g.parquet").metadata, [0], schema, {"i", "s"}) is None


def local_backend_ctx(lake, name):
    from lakevilla.engines.api import TableContext

    snap = lake.snapshot(name)
    return TableContext(name, lake.store, lake.root_uri, snap.schema, tuple(snap.partition_columns))


def _rows_of(lake, add):
    return lake.engine._read(local_backend_ctx(lake, "t"), [add], ["id"]).to_pylist()


# -- ORDER BY ... LIMIT --------------------------------------------------------------------------

ORDERED = pa.schema([("d", pa.int64()), ("o", pa.int64()), ("s", pa.string())])
ORDERED_ROWS = {"d": [1, 1, 2, 2, 1, None, 2, 1], "o": [5, 3, 9, None, 3, 1, 9, 7],
                "s": ["e", "c", "i", "n", "b", "a", "h", "g"]}


def ordered_reference(order: list[tuple[str, bool]], limit: int | None,
                      where=lambda r: True) -> list[dict]:
    """Python's answer: the keys, then the other columns ascending as tie-breaks; nulls last."""
    keys = order + [(c, False) for c in ORDERED.names if c not in [k for k, _ in order]]

    def cmp(a: dict, b: dict) -> int:
        for c, desc in keys:
            x, y = a[c], b[c]
            if x == y:
                continue
            if x is None or y is None:
                return 1 if x is None else -1
            return (1 if x > y else -1) * (-1 if desc else 1)
        return 0

    data = [dict(zip(ORDERED_ROWS, vals)) for vals in zip(*ORDERED_ROWS.values())]
    out = sorted((r for r in data if where(r)), key=functools.cmp_to_key(cmp))
    return out if limit is None else out[:limit]


def _ordered_lake(backend, files: int = 3):
    lake = backend.lake()
    lake.create_table("no", ORDERED)
    n = len(ORDERED_ROWS["d"])
    bounds = [n * k // files for k in range(files + 1)]
    for lo, hi in zip(bounds, bounds[1:]):  # several files, so the order is not the files' own
        with lake.transaction("") as t:
            t.insert("no", {c: v[lo:hi] for c, v in ORDERED_ROWS.items()})
    return lake


@pytest.mark.parametrize(("order_by", "limit", "where"), [
    ("o", 3, None), ("o DESC", 2, None), (["d", "o desc"], 4, None), ("o", None, None),
    ("o", 0, None), ("o asc", 1, "d = 1"), (["s DESC"], 3, "o >= 3")])
def test_order_by_and_limit_return_the_first_rows_with_nulls_last_and_ties_broken_by_the_other_columns(  # noqa: E501
        local_backend, order_by, limit, where):
    lake = _ordered_lake(local_backend)
    items = [order_by] if isinstance(order_by, str) else order_by
    order = [(i.split()[0], len(i.split()) == 2 and i.split()[1].lower() == "desc") for i in items]
    pred = {None: lambda r: True, "d = 1": lambda r: r["d"] == 1,
            "o >= 3": lambda r: r["o"] is not None and r["o"] >= 3}[where]
    want = ordered_reference(order, limit, pred)
    got = lake.read("no", where=where, order_by=order_by, limit=limit).to_pylist()
    assert got == want
    with lake.transaction("R") as t:  # the same inside a transaction, with fewer columns
        assert t.read("no", where=where, columns=["s"], order_by=order_by,
                      limit=limit).to_pylist() == [{"s": r["s"]} for r in want]


@pytest.mark.parametrize(("kw", "error", "match"), [
    ({"limit": 2}, lv.InvalidArgumentError, "limit needs order_by"),
    ({"order_by": "nope", "limit": 1}, lv.InvalidExpressionError, "no column.*nope.*order by"),
    ({"order_by": "o sideways"}, lv.InvalidArgumentError, "'column DESC'"),
    ({"order_by": "o", "limit": -1}, lv.InvalidArgumentError, "non-negative integer"),
    ({"order_by": "o", "limit": True}, lv.InvalidArgumentError, "non-negative integer"),
    ({"order_by": []}, lv.InvalidArgumentError, "non-empty list"),
    ({"order_by": [3]}, lv.InvalidArgumentError, "non-empty list")])
def test_bad_order_by_or_limit_is_refused_before_anything_is_read(local_backend, kw, error, match):
    lake = _ordered_lake(local_backend, files=1)
    with pytest.raises(error, match=match):
        lake.read("no", **kw)
    t = lake.begin("R")
    with pytest.raises(error, match=match):
        t.read("no", **kw)
    t.abort()
