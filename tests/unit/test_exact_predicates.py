"""Predicates are exact (issue 19): every case of the issue as a regression test (embedded
engine; the Spark engine's are in interop/test_spark.py), conflicts that share the pruning test, and
Delta's partition-value and Parquet's statistics rules.

The reference is DuckDB evaluating the predicate (or running its own UPDATE) on every row;
delta-rs is the reference where it is right. Where delta-rs 1.6.6 is wrong (an UPDATE that
rewrites NaN as 1.0, ``n <= -2.5`` on an integer column truncating the literal,
``DELETE WHERE pn + 1 > 2`` on a partition column deleting every row) we compare with
DuckDB over the same rows instead and say so at the assertion.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from urllib.parse import unquote

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakevilla as lv
from lakevilla.delta.actions import AddFile
from lakevilla.scan.pruning import file_may_match, parse_predicate
from tests.conftest import rows

UTC = dt.UTC


def _duckdb_ids(table: pa.Table, where: str) -> list[int]:
    """The reference: plain DuckDB over every row."""
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    con.register("t", table)
    return sorted(r[0] for r in con.execute(f"SELECT id FROM t WHERE {where}").fetchall())


def _parquet_rows(lake, root: Path, name: str = "t") -> pa.Table:
    """Every row of the table's current files, read straight from the Parquet files with the
    partition values of the log (Delta's rules: '' and null are null), without lakevilla's
    reader."""
    snap = lake.snapshot(name)
    parts = []
    for add in snap.files.values():
        t = pq.read_table(root / name / unquote(add.path))
        for f in snap.schema:
            if f.name in snap.partition_columns:
                raw = add.partition_values.get(f.name)
                v = None if raw in (None, "") else pa.scalar(raw).cast(f.type).as_py()
                t = t.append_column(f.name, pa.array([v] * t.num_rows, f.type))
        parts.append(t.select(snap.schema.names).cast(snap.schema))
    return pa.concat_tables(parts)


def _lake_with_files(backend, schema: pa.Schema, files: list[list[dict]], partition_by=None):
    lake = backend.lake()
    lake.create_table("t", schema, partition_by=partition_by)
    for batch in files:  # one commit, one file each: statistics per file
        with lake.transaction(features="") as txn:
            txn.insert("t", pa.Table.from_pylist(batch, schema))
    return lake


def _ids(table) -> list[int]:
    return sorted(table.column("id").to_pylist())


# -- 1. NaN --------------------------------------------------------------------------------

def test_nan_rows_are_read_updated_and_deleted(backend):
    schema = pa.schema([("id", pa.int64()), ("f", pa.float64())])
    lake = _lake_with_files(backend, schema, [[{"id": 1, "f": 1.0}, {"id": 2, "f": float("nan")}],
                                              [{"id": 3, "f": 7.0}], [{"id": 4, "f": -1.0}]])
    everything = lake.read("t")  # no predicate: every file, no pruning
    for where in ["f > 5", "f <= 'NaN'::DOUBLE", "f = 'NaN'::DOUBLE", "f >= 'NaN'::DOUBLE",
                  "f <> 7", "f < 0", "NOT (f <= 5)", "f IN ('NaN'::DOUBLE, 7)",
                  "f BETWEEN 5 AND 'NaN'::DOUBLE"]:
        assert _ids(lake.read("t", where=where)) == _duckdb_ids(everything, where), where
    assert _ids(lake.read("t", where="f > 5")) == [2, 3]
    with lake.transaction(features="R") as txn:
        assert txn.update("t", set={"f": "f"}, where="f > 5") == 2
        assert txn.delete("t", where="f > 5") == 2
    # delta-rs 1.6.6 rewrites NaN as 1.0 in an UPDATE; lakevilla's own rows are the reference here
    assert _ids(lake.read("t")) == [1, 4]
    assert rows(lake.read("t")) == backend.delta_rows("t")


# -- 2, 3, 4. casts of literals, date vs timestamp, struct fields --------------------------------

def test_literals_mean_what_duckdb_says_they_mean(local_backend):
    schema = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("s", pa.string()),
                        ("d", pa.date32()), ("st", pa.struct([("x", pa.int64())])),
                        ("x", pa.int64()), ("n", pa.int32())])
    files = [[{"id": 1, "a": 4, "s": "1", "d": dt.date(2024, 1, 2), "st": {"x": 100}, "x": 1,
               "n": -3}],
             [{"id": 2, "a": 9, "s": "10", "d": dt.date(2024, 1, 5), "st": {"x": 1}, "x": 100,
               "n": 2}]]
    lake = _lake_with_files(local_backend, schema, files)
    everything = _parquet_rows(lake, Path(local_backend.uri[len("file://"):]))
    cases = {
        "a = CAST(3.7 AS INTEGER)": [1],  # = 4: DuckDB rounds
        "a = '3.7'": [1],  # the string literal becomes a BIGINT: 4
        "s = CAST(01 AS VARCHAR)": [1],  # = '1'
        "d < TIMESTAMP '2024-01-02 03:00:00'": [1],  # compared as timestamps: midnight < 03:00
        "d = TIMESTAMP '2024-01-02 00:00:00'": [1],
        "d >= TIMESTAMPTZ '2024-01-05 00:00:00+00'": [2],
        "st.x = 100": [1],  # the struct's field, not the top-level column x
        "x = 100": [2],
        "n <= -2.5": [1],  # delta-rs 1.6.6 truncates the literal to -2 and finds nothing
        "a IN (CAST(3.7 AS INTEGER), '9')": [1, 2],
    }
    for where, want in cases.items():
        assert _duckdb_ids(everything, where) == want, where  # the cases say what DuckDB says
        assert _ids(lake.read("t", where=where)) == want, where
        with lake.transaction(features="R") as txn:
            assert txn.update("t", set={"x": "x"}, where=where) == len(want), where
            assert txn.delete("t", where=where) == len(want), where
            txn.abort()


def test_arithmetic_on_a_partition_column_deletes_only_matching_rows(local_backend):
    """delta-rs 1.6.6 deletes every row for ``pn + 1 > 2``; DuckDB over the same Parquet files
    is the reference."""
    schema = pa.schema([("id", pa.int64()), ("pn", pa.int64())])
    lake = _lake_with_files(local_backend, schema, [[{"id": i, "pn": i % 3}] for i in range(6)],
                            partition_by=["pn"])
    everything = _parquet_rows(lake, Path(local_backend.uri[len("file://"):]))
    for where in ["pn + 1 > 2", "pn * 2 = 2", "NOT (pn + 1 > 2)", "pn > 1.5", "pn IN (0, '2')"]:
        assert _ids(lake.read("t", where=where)) == _duckdb_ids(everything, where), where
    with lake.transaction(features="R") as txn:
        assert (txn.delete("t", where="pn + 1 > 2")
                == len(_duckdb_ids(everything, "pn + 1 > 2")) == 2)
    assert _ids(lake.read("t")) == [0, 1, 3, 4]


# -- 5. partition values: '' is null; escaping ---------------------------------------------------

def test_an_empty_partition_string_is_null(backend):
    schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
    lake = _lake_with_files(backend, schema,
                            [[{"id": 1, "p": ""}], [{"id": 2, "p": None}], [{"id": 3, "p": "x"}]],
                            partition_by=["p"])
    values = [a.partition_values["p"] for a in lake.snapshot("t").files.values()]
    assert sorted(values, key=str) == [None, None, "x"]  # written as Delta writes it: null, not ''

    assert _ids(lake.read("t", where="p IS NULL")) == [1, 2]
    assert _ids(lake.read("t", where="p = ''")) == []
    assert rows(lake.read("t")) == backend.delta_rows("t") == [
        {"id": 1, "p": None}, {"id": 2, "p": None}, {"id": 3, "p": "x"}]


def test_an_empty_partition_string_another_writer_left_reads_as_null(local_backend, tmp_path):
    """A log whose add action says ``"p": ""`` (as older writers wrote): read, pruned and
    updated as null, as delta-rs reads it."""
    schema = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.int64())])
    _lake_with_files(local_backend, schema,
                     [[{"id": 1, "p": None, "v": 1}], [{"id": 2, "p": "x", "v": 2}]],
                     partition_by=["p"])
    log = tmp_path / "lake" / "t" / "_delta_log"
    commit = sorted(log.glob("*.json"))[1]
    text = commit.read_text()
    assert '"p":null' in text
    commit.write_text(text.replace('"p":null', '"p":""'))
    fresh = local_backend.lake()
    assert rows(fresh.read("t")) == [{"id": 1, "p": None, "v": 1}, {"id": 2, "p": "x", "v": 2}]
    assert _ids(fresh.read("t", where="p IS NULL")) == [1]
    assert _ids(fresh.read("t", where="p = ''")) == []
    with fresh.transaction(features="R") as txn:
        assert txn.update("t", set={"v": "v + 10"}, where="p IS NULL") == 1
    assert rows(fresh.read("t")) == local_backend.delta_rows("t")


def test_partition_values_with_path_characters_round_trip(backend):
    schema = pa.schema([("id", pa.int64()), ("p", pa.string()), ("q", pa.date32())])
    values = ["a/b", "c=d", "50%", "sp ace", "é😀", "x%2Fy", "__HIVE_DEFAULT_PARTITION__x", "'"]
    lake = _lake_with_files(backend, schema, [[{"id": i, "p": v, "q": dt.date(2024, 1, 1 + i)}]
                                              for i, v in enumerate(values)],
                            partition_by=["p", "q"])
    assert rows(lake.read("t")) == backend.delta_rows("t")
    for i, v in enumerate(values):
        lit = "'" + v.replace("'", "''") + "'"
        assert _ids(lake.read("t", where=f"p = {lit}")) == [i], v
        assert _ids(lake.read("t", where=f"p = {lit} AND q = DATE '2024-01-{1 + i:02d}'")) == [i], v


# -- 6, 7. SET: matching rows only, SQL assignment casts -----------------------------------------

SETS = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("m", pa.int64()), ("s", pa.string()),
                  ("ts", pa.timestamp("us", tz="UTC")), ("d", pa.date32()), ("n", pa.int64()),
                  ("f", pa.float64()), ("dec", pa.decimal128(6, 2))])
SET_ROWS = [
    {"id": 1, "k": 1, "m": 2**62, "s": "not a number", "ts": None, "d": None, "n": 1, "f": 2.5,
     "dec": None},
    {"id": 2, "k": 2, "m": 3, "s": "42", "ts": None, "d": None, "n": 7, "f": 3.5, "dec": None},
]


def _duckdb_update(schema: pa.Schema, data: list[dict], set_sql: str, where: str) -> list[dict]:
    """The reference: DuckDB's own UPDATE on a table of the same types."""
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    con.register("src", pa.Table.from_pylist(data, schema))
    con.execute("CREATE TABLE t AS SELECT * FROM src")
    con.execute(f"UPDATE t SET {set_sql} WHERE {where}")
    got = con.sql("SELECT * FROM t ORDER BY id").to_arrow_table()
    return pa.table([got.column(f.name).cast(f.type) for f in schema], schema=schema).to_pylist()


def test_set_is_evaluated_on_the_matching_rows_only(backend):
    lake = _lake_with_files(backend, SETS, [SET_ROWS])
    with lake.transaction(features="R") as txn:
        assert txn.update("t", set={"m": "m * 2"}, where="k = 2") == 1  # row 1 would overflow
        # row 1 is not a number
        assert txn.update("t", set={"k": "CAST(s AS BIGINT)"}, where="k = 2") == 1
    got = rows(lake.read("t"))
    assert [(r["k"], r["m"]) for r in got] == [(1, 2**62), (42, 6)]
    want = _duckdb_update(SETS, SET_ROWS, "m = m * 2", "k = 2")
    want = [{**r, "k": 42} if r["id"] == 2 else r for r in want]
    assert got == want
    assert got == backend.delta_rows("t")


ASSIGNMENTS = [  # (set, where): each accepted by DuckDB's own UPDATE (and by delta-rs)
    ({"ts": "'2024-01-02 03:04:05'"}, "id = 1"),  # text -> timestamp (UTC)
    ({"d": "'2024-05-01 10:00:00'"}, "id = 1"),  # text with a time -> date
    ({"m": "m * 1.5"}, "id = 2"),  # decimal -> integer: rounds half away from zero (4.5 -> 5)
    ({"n": "f"}, "true"),  # double -> integer: rounds half to even (2.5 -> 2, 3.5 -> 4)
    ({"dec": "f / 3"}, "true"),  # double -> decimal(6, 2)
    ({"s": "k + 1"}, "id = 2"),  # integer -> text
    ({"k": "'  12 '"}, "id = 1"),  # text -> integer, spaces trimmed
    ({"f": "n"}, "true"),  # integer -> double
    ({"d": "TIMESTAMP '2024-06-01 23:59:59'"}, "id = 2"),  # timestamp -> date
]


@pytest.mark.parametrize("assignment", ASSIGNMENTS,
                         ids=[next(iter(a[0])) + "=" + next(iter(a[0].values()))
                              for a in ASSIGNMENTS])
def test_set_values_take_sql_assignment_casts(local_backend, assignment):
    set_, where = assignment
    lake = _lake_with_files(local_backend, SETS, [SET_ROWS])
    with lake.transaction(features="R") as txn:
        txn.update("t", set=set_, where=where)
    col, expr = next(iter(set_.items()))
    assert rows(lake.read("t")) == _duckdb_update(SETS, SET_ROWS, f"{col} = {expr}", where)
    assert rows(lake.read("t")) == local_backend.delta_rows("t")


@pytest.mark.parametrize("set_,match", [
    ({"m": "m * 4"}, "Overflow"),  # BIGINT overflow: an error, never a wrapped value
    ({"k": "CAST(s AS BIGINT)"}, "not a number|convert"),  # text that is no number
    ({"dec": "f * 100000"}, "out of range|convert|cast"),  # does not fit decimal(6, 2)
    ({"k": "m * 1.0e30"}, "out of range|cast"),  # double beyond BIGINT
    ({"d": "'2024-13-01'"}, "date"),  # no such date
])
def test_assignments_that_do_not_fit_raise_and_write_nothing(local_backend, set_, match):
    lake = _lake_with_files(local_backend, SETS, [SET_ROWS])
    before = local_backend.all_keys()
    with pytest.raises(lv.InvalidExpressionError, match=match), \
            lake.transaction(features="R") as txn:
        txn.update("t", set=set_, where="true")
    lake.flush()
    assert local_backend.all_keys() == before
    assert rows(lake.read("t")) == SET_ROWS


def test_a_set_of_several_columns_is_one_query_and_a_failure_names_its_assignment(
        local_backend, monkeypatch):
    """Each DuckDB query costs ~3-10 ms whatever it computes, and a contended update is redone
    many times: all SET values of a statement, over every file it rewrites, come from one query.
    SQL's semantics hold (every value from the row as it was), and when one value fails the
    error names that assignment and nothing is written."""
    from lakevilla.engines import embedded

    queries: list[str] = []
    real = embedded.query_one
    monkeypatch.setattr(embedded, "query_one",
                        lambda t, select: queries.append(select) or real(t, select))
    lake = _lake_with_files(local_backend, SETS, [SET_ROWS[:1], SET_ROWS[1:]])
    with lake.transaction(features="R") as txn:
        txn.update("t", set={"n": "n * 2", "k": "n + k", "s": "upper(s) || CAST(n AS VARCHAR)"},
                   where="true")
    assert len([q for q in queries if "AS __v" in q]) == 1  # two files, three columns
    assert rows(lake.read("t")) == _duckdb_update(
        SETS, SET_ROWS, "n = n * 2, k = n + k, s = upper(s) || CAST(n AS VARCHAR)", "true")
    lake.flush()
    before = local_backend.all_keys()
    data = rows(lake.read("t"))
    with pytest.raises(lv.InvalidExpressionError, match=r"^set m='m \* 4' on 't': .*Overflow"), \
            lake.transaction(features="R") as txn:
        txn.update("t", set={"n": "n + 1", "m": "m * 4", "k": "k * 1.0e30"}, where="true")
    lake.flush()
    assert local_backend.all_keys() == before
    assert rows(lake.read("t")) == data


def test_an_update_whose_where_arrow_decides_exactly_runs_no_duckdb_mask(
        local_backend, monkeypatch):
    """Which rows of a file an update or delete selects: when the pushed-down filter is exact
    (plain columns against constants of their type), arrow decides it, ~10x cheaper than a
    DuckDB query; other predicates still go to DuckDB. Both select what DuckDB's UPDATE does."""
    from lakevilla.engines import embedded

    queries: list[str] = []
    real = embedded.query_one
    monkeypatch.setattr(embedded, "query_one",
                        lambda t, select: queries.append(select) or real(t, select))
    lake = _lake_with_files(local_backend, SETS, [SET_ROWS])
    data = SET_ROWS
    for where, duckdb_masks in [("k = 2", 0), ("id IN (1, 2) AND s = '42'", 0),
                                ("s IS NULL OR n <> 7", 0), ("k + 0 = 1", 1), ("f > 3", 1)]:
        queries.clear()
        with lake.transaction(features="R") as txn:
            txn.update("t", set={"n": "n + 1"}, where=where)
        assert len([q for q in queries if "AS __m" in q]) == duckdb_masks, where
        data = _duckdb_update(SETS, data, "n = n + 1", where)
        assert rows(lake.read("t")) == data, where


# -- 8. signed zero in the statistics we write ----------------------------------------------------

def test_delta_rs_finds_minus_zero_in_our_files(local_backend):
    """Parquet's rule: a zero min is written -0.0 and a zero max +0.0; delta-rs prunes by
    comparing bounds in IEEE total order, so min = max = 0.0 would hide -0.0 = 0.0 from it."""
    from deltalake import QueryBuilder

    schema = pa.schema([("id", pa.int64()), ("f", pa.float64())])
    lake = _lake_with_files(local_backend, schema, [[{"id": 1, "f": 0.0}], [{"id": 2, "f": -0.0}],
                                                    [{"id": 3, "f": 0.0}, {"id": 4, "f": -0.0}]])
    for a in lake.snapshot("t").files.values():
        st = json.loads(a.stats)
        assert str(st["minValues"]["f"]) == "-0.0" and str(st["maxValues"]["f"]) == "0.0"
    dt_ = local_backend.delta("t")
    for where in ["f = -0.0", "f = 0.0", "f >= 0.0", "f <= -0.0"]:
        got = pa.table(QueryBuilder().register("t", dt_)
                       .execute(f"SELECT id FROM t WHERE {where}").read_all())
        assert sorted(got.column("id").to_pylist()) == [1, 2, 3, 4], where
        assert _ids(lake.read("t", where=where)) == [1, 2, 3, 4], where


# -- the conflict test shares the pruning test ----------------------------------------------------

@pytest.mark.parametrize("read,added,conflicts", [
    ("f > 5", {"f": float("nan")}, True),  # NaN > 5: a phantom the old test missed
    ("f < 0", {"f": float("nan")}, False),  # NaN < 0 is false: still no conflict
    ("st.x = 100", {"st": {"x": 100}, "x": 1}, True),
    ("x = 100", {"st": {"x": 100}, "x": 1}, False),
    ("a = CAST(3.7 AS INTEGER)", {"a": 4}, True),
    ("d < TIMESTAMP '2024-01-02 03:00:00'", {"d": dt.date(2024, 1, 2)}, True),
    ("d < DATE '2024-01-02'", {"d": dt.date(2024, 1, 2)}, False),
])
def test_a_concurrent_file_that_may_hold_a_phantom_conflicts(local_backend, read, added, conflicts):
    schema = pa.schema([("id", pa.int64()), ("f", pa.float64()),
                        ("st", pa.struct([("x", pa.int64())])), ("x", pa.int64()),
                        ("a", pa.int64()), ("d", pa.date32())])
    lake = _lake_with_files(local_backend, schema, [[{"id": 0, "f": 1.0, "st": {"x": 1}, "x": 1,
                                                      "a": 1, "d": dt.date(2024, 1, 9)}]])
    t1 = lake.begin(features="R")
    assert t1.read("t", where=read).num_rows == 0
    with lake.transaction(features="") as other:  # a concurrent append
        other.insert("t", pa.Table.from_pylist([{"id": 1, "f": 1.0}, {"id": 2, "f": 1.0, **added}],
                                               schema))
    t1.insert("t", [{"id": 9}])  # its commit is validated against the read
    if conflicts:
        with pytest.raises(lv.TransactionAborted, match="invalidates a read"):
            t1.commit()
    else:
        t1.commit()


# -- statistics other writers leave: read by Delta's and Parquet's rules ---------------------------

def test_statistics_from_other_writers_are_read_as_bounds_only_where_they_are_bounds():
    schema = pa.schema([("s", pa.string()), ("ts", pa.timestamp("us", tz="UTC")),
                        ("w", pa.decimal128(20, 4)), ("f", pa.float64())])
    long = "k" * 40

    def add(mins: dict, maxs: dict) -> AddFile:
        return AddFile(path="f", size=1, stats=json.dumps({"numRecords": 1, "minValues": mins,
                                                           "maxValues": maxs,
                                                           "nullCount": {c: 0 for c in mins}}))

    truncated = add({"s": long[:32]}, {"s": long[:32]})  # a 32-character prefix of the real value
    assert file_may_match(parse_predicate(f"s = '{long}'"), truncated, schema, [])
    # the min still counts
    assert not file_may_match(parse_predicate(f"s < '{long[:31]}'"), truncated, schema, [])
    # truncated to ms
    millis = add({"ts": "2024-01-01T00:00:00.123Z"}, {"ts": "2024-01-01T00:00:00.123Z"})
    assert file_may_match(parse_predicate("ts = TIMESTAMPTZ '2024-01-01 00:00:00.123456+00'"),
                          millis, schema, [])
    assert not file_may_match(parse_predicate("ts > TIMESTAMPTZ '2024-01-01 00:00:00.124+00'"),
                              millis, schema, [])
    # a wide decimal through a double
    rounded = add({"w": 1234567890123456.0}, {"w": 1234567890123456.0})
    assert file_may_match(parse_predicate("w = 1234567890123456.0001"), rounded, schema, [])
    zero = add({"f": 0.0}, {"f": -0.0})  # zero bounds of either sign
    assert file_may_match(parse_predicate("f = -0.0"), zero, schema, [])
    assert file_may_match(parse_predicate("f = 0.0"), zero, schema, [])
    junk = add({"f": "NaN"}, {"f": None})
    assert file_may_match(parse_predicate("f > 1"), junk, schema, [])


def test_no_expression_runs_outside_the_grammar_even_for_statistics(tmp_path: Path):
    secret = tmp_path / "s.txt"
    secret.write_text("x")
    pred = parse_predicate(f"f > (SELECT 1 FROM read_text('{secret}'))")
    assert pred.node is None  # refused: prunes nothing, evaluates nothing
