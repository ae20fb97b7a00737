"""Data in the shapes Python users hold it, under one type discipline: pyarrow tables, batches
and streams, pandas and polars frames, dicts of columns and lists of rows go into insert,
overwrite, create_table(data=) and merge; text never silently becomes a number."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.data.schemas import assignable
from lakevilla.engines import embedded
from lakevilla.store import CountingStore, open_store

T = pa.schema([("id", pa.int64()), ("name", pa.string())])
ROWS = [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": None}]


def counted_lake(root: str) -> lv.Lake:
    return lv.Lake(root, store=CountingStore(open_store(root)))


def shapes() -> dict[str, Callable[[list[dict]], Any]]:
    import pandas as pd

    out: dict[str, Callable[[list[dict]], Any]] = {
        "pyarrow.Table": lambda rows: pa.Table.from_pylist(rows, schema=T),
        "RecordBatch": lambda rows: pa.RecordBatch.from_pylist(rows, schema=T),
        "RecordBatchReader": lambda rows: pa.RecordBatchReader.from_batches(
            T, pa.Table.from_pylist(rows, schema=T).to_batches(max_chunksize=1)),
        "pandas": lambda rows: pd.DataFrame(rows),
        "dict of columns": lambda rows: {k: [r[k] for r in rows] for k in ("id", "name")},
        "list of row dicts": lambda rows: list(rows),
    }
    try:
        import polars as pl

        out["polars"] = lambda rows: pl.DataFrame(rows, schema={"id": pl.Int64, "name": pl.String})
    except ImportError:
        pass
    return out


SHAPES = shapes()


def read_rows(lake: lv.Lake, table: str) -> list[dict]:
    return sorted(lake.read(table).to_pylist(), key=lambda r: r["id"])


# -- every shape, every way in ----------------------------------------------------------------

@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_inserts_overwrites_and_creates(tmp_path, shape):
    make = SHAPES[shape]
    lake = lv.Lake(str(tmp_path / "lake"))
    lake.create_table("t", T)
    with lake.transaction("R") as txn:
        assert txn.insert("t", make(ROWS)) == 3
    assert read_rows(lake, "t") == ROWS
    with lake.transaction("R") as txn:
        assert txn.overwrite("t", make(ROWS[:2])) == 2
    assert read_rows(lake, "t") == ROWS[:2]
    lake.create_table("made", data=make(ROWS))
    assert lake.schema("made") == T  # the log's types, whatever the frame's (large_string, ...)
    assert read_rows(lake, "made") == ROWS
    with lake.transaction("R,CT") as txn:
        txn.create_table("made_in_txn", data=make(ROWS))
    assert read_rows(lake, "made_in_txn") == ROWS


MERGE_SHAPES = sorted(SHAPES)


@pytest.mark.parametrize("shape", MERGE_SHAPES)
def test_every_shape_is_a_merge_source(tmp_path, shape):
    lake = lv.Lake(str(tmp_path / "lake"))
    lake.create_table("t", T)
    with lake.transaction("R") as txn:
        txn.insert("t", ROWS[:1])
    source = SHAPES[shape]([{"id": 1, "name": "A"}, {"id": 4, "name": "d"}])
    with lake.transaction("R") as txn:
        m = (txn.merge("t", source, on="id").when_matched_update_all()
             .when_not_matched_insert_all().execute())
    assert (m["num_target_rows_updated"], m["num_target_rows_inserted"]) == (1, 1)
    assert read_rows(lake, "t") == [{"id": 1, "name": "A"}, {"id": 4, "name": "d"}]


# -- one type discipline ------------------------------------------------------------------------

TEXT_ID = pa.table({"id": pa.array(["3"]), "name": pa.array(["x"])})


def _bad_insert(lake: lv.Lake) -> None:
    with lake.transaction("R") as txn:
        txn.insert("t", TEXT_ID)


def _bad_overwrite(lake: lv.Lake) -> None:
    with lake.transaction("R") as txn:
        txn.overwrite("t", TEXT_ID)


def _bad_create(lake: lv.Lake) -> None:
    lake.create_table("t2", T, data=TEXT_ID)


def _bad_create_in_txn(lake: lv.Lake) -> None:
    with lake.transaction("R,CT") as txn:
        txn.create_table("t2", T, data=TEXT_ID)


def _bad_merge(clause: str) -> Callable[[lv.Lake], None]:
    def run(lake: lv.Lake) -> None:
        with lake.transaction("R") as txn:
            b = txn.merge("t", TEXT_ID, on="name")
            if clause == "update":
                b.when_matched_update_all().execute()
            else:
                b.when_not_matched_insert_all().execute()
    return run


@pytest.mark.parametrize("how", [_bad_insert, _bad_overwrite, _bad_create, _bad_create_in_txn,
                                 _bad_merge("update"), _bad_merge("insert")],
                         ids=["insert", "overwrite", "create_table", "txn.create_table",
                              "merge_update_all", "merge_insert_all"])
def test_text_into_a_number_column_is_refused_naming_it_and_nothing_is_written(tmp_path, how):
    lake = counted_lake(str(tmp_path / "lake"))
    lake.create_table("t", T)
    with lake.transaction("R") as txn:
        txn.insert("t", [{"id": 1, "name": "x"}])
    lake.flush()
    n = lake.store.writes
    with pytest.raises(lv.SchemaMismatchError, match="column 'id' has type string, the table has "
                                                     "int64") as err:
        how(lake)
    lake.flush()
    assert lake.store.writes == n  # nothing was written
    assert "pyarrow.compute.cast" in str(err.value)
    assert read_rows(lake, "t") == [{"id": 1, "name": "x"}] and lake.tables() == ["t"]


WIDE = pa.schema([("i64", pa.int64()), ("f64", pa.float64()), ("dec", pa.decimal128(10, 2)),
                  ("ts", pa.timestamp("us", tz="UTC")), ("s", pa.string())])


@pytest.mark.parametrize("column, values, expected", [
    ("i64", pa.array([7], pa.int32()), 7),  # widening
    ("i64", pa.array([7], pa.uint8()), 7),
    ("i64", pa.array([7.0], pa.float64()), 7),  # a number that fits exactly
    ("f64", pa.array([1.5], pa.float32()), 1.5),
    ("f64", pa.array([2], pa.int64()), 2.0),
    ("dec", pa.array([3], pa.int16()), __import__("decimal").Decimal("3.00")),
    ("ts", pa.array([dt.date(2026, 1, 2)], pa.date32()), dt.datetime(2026, 1, 2, tzinfo=dt.UTC)),
    ("ts", pa.array([dt.datetime(2026, 1, 2, 3)], pa.timestamp("ns")),
     dt.datetime(2026, 1, 2, 3, tzinfo=dt.UTC)),  # pandas' naive nanoseconds, read as UTC
    ("s", pa.array(["x"], pa.large_string()), "x"),
    ("s", pa.array(["x"]).dictionary_encode(), "x"),  # a pandas categorical
])
def test_safe_conversions_stay_allowed(tmp_path, column, values, expected):
    lake = lv.Lake(str(tmp_path / "lake"))
    lake.create_table("w", WIDE)
    with lake.transaction("R") as txn:
        txn.insert("w", pa.table({column: values}))
    assert lake.read("w").column(column).to_pylist() == [expected]


@pytest.mark.parametrize("column, values", [
    ("i64", pa.array(["7"])), ("i64", pa.array([True])), ("f64", pa.array(["1.5"])),
    ("ts", pa.array(["2026-01-02"])), ("s", pa.array([7])), ("s", pa.array([True])),
    ("dec", pa.array(["3.00"])), ("i64", pa.array([7.5])),  # the last: a number that does not fit
])
def test_conversions_that_change_what_a_value_is_are_refused(tmp_path, column, values):
    lake = counted_lake(str(tmp_path / "lake"))
    lake.create_table("w", WIDE)
    n = lake.store.writes
    with pytest.raises(lv.SchemaMismatchError, match=f"column '{column}'"):
        with lake.transaction("R") as txn:
            txn.insert("w", pa.table({column: values}))
    assert lake.store.writes == n


def test_both_engines_share_the_rule():
    """The Spark engine's rule for Spark frames (``_cast_kind``) and ``assignable`` agree on
    every pair of atomic Delta types, except that arrow data may also move between timestamps
    with and without a zone (pandas' naive datetimes are UTC, as everywhere in lakevilla)."""
    pytest.importorskip("pyspark")
    from lakevilla.engines.spark_types import cast_kind as _cast_kind
    from lakevilla.engines.spark_types import spark_schema

    types = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float32(), pa.float64(),
             pa.decimal128(10, 2), pa.decimal128(20, 0), pa.bool_(), pa.string(), pa.binary(),
             pa.date32(), pa.timestamp("us", tz="UTC"), pa.timestamp("us")]

    def spark(t: pa.DataType):
        return spark_schema(pa.schema([("c", t)])).fields[0].dataType

    differ = []
    for a in types:
        for b in types:
            both_ts = pa.types.is_timestamp(a) and pa.types.is_timestamp(b)
            if not both_ts and (_cast_kind(spark(a), spark(b)) is not None) != assignable(a, b):
                differ.append((str(a), str(b)))
    assert differ == []


# -- streams are written file by file -----------------------------------------------------------

def batches(n: int, size: int, taken: list[int], bad_at: int | None = None
            ) -> Iterator[pa.RecordBatch]:
    for i in range(n):
        taken[0] += 1
        ids = list(range(i * size, (i + 1) * size))
        if i == bad_at:
            ids[-1] = 1 << 40  # does not fit an int32 column
        yield pa.record_batch({"id": pa.array(ids, pa.int64()),
                               "part": pa.array([f"p{j % 3}" for j in ids])})


class Watch(CountingStore):
    """Notes how many batches the stream had given when each data file was written."""

    def __init__(self, inner, taken: list[int]) -> None:
        super().__init__(inner)
        self.taken, self.at_file = taken, []

    def put(self, key, data):
        if key.endswith(".parquet"):
            self.at_file.append(self.taken[0])
        return super().put(key, data)


@pytest.mark.parametrize("partitioned", [False, True])
def test_a_stream_is_written_as_several_files_and_reads_back_whole(tmp_path, monkeypatch,
                                                                     partitioned):
    monkeypatch.setattr(embedded, "MAX_ROWS_PER_FILE", 1000)
    root = str(tmp_path / "lake")
    taken = [0]
    store = Watch(open_store(root), taken)
    lake = lv.Lake(root, store=store)
    schema = pa.schema([("id", pa.int64()), ("part", pa.string())])
    lake.create_table("events", schema, partition_by=["part"] if partitioned else None)
    reader = pa.RecordBatchReader.from_batches(schema, batches(25, 400, taken))
    with lake.transaction("R") as txn:
        assert txn.insert("events", reader) == 10_000
    assert taken[0] == 25
    files = lake.snapshot("events").files
    assert len(files) == (30 if partitioned else 10)  # 10 pieces of 1,000 rows (x3 partitions)
    # written as the stream went: the first file before a quarter of the stream was read
    assert store.at_file[0] <= 3 and store.at_file == sorted(store.at_file)
    got = lake.read("events")
    assert sorted(got.column("id").to_pylist()) == list(range(10_000))


def test_a_stream_that_fails_half_way_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(embedded, "MAX_ROWS_PER_FILE", 1000)
    root = tmp_path / "lake"
    lake = lv.Lake(str(root))
    schema = pa.schema([("id", pa.int32()), ("part", pa.string())])
    lake.create_table("events", schema)
    taken = [0]
    source = pa.schema([("id", pa.int64()), ("part", pa.string())])
    reader = pa.RecordBatchReader.from_batches(source, batches(25, 400, taken, bad_at=20))
    with pytest.raises(lv.SchemaMismatchError, match="column 'id'"):
        with lake.transaction("R") as txn:
            txn.insert("events", reader)
    assert 20 < taken[0] < 25  # several files were written before the bad piece
    assert list(root.joinpath("events").glob("*.parquet")) == []
    assert lake.read("events").num_rows == 0


def test_a_stream_creates_a_table_and_overwrites_it(tmp_path, monkeypatch):
    monkeypatch.setattr(embedded, "MAX_ROWS_PER_FILE", 1000)
    lake = lv.Lake(str(tmp_path / "lake"))
    schema = pa.schema([("id", pa.int64()), ("part", pa.string())])
    lake.create_table("e", data=pa.RecordBatchReader.from_batches(schema, batches(5, 400, [0])))
    assert lake.schema("e") == schema and lake.read("e").num_rows == 2000
    assert len(lake.snapshot("e").files) == 2
    with lake.transaction("R") as txn:
        txn.overwrite("e", pa.RecordBatchReader.from_batches(schema, batches(3, 400, [0])),
                      where="id < 1200")
    assert sorted(lake.read("e").column("id").to_pylist()) == list(range(2000))


def test_columns_an_insert_leaves_out_are_null_if_nullable_and_refused_if_not(backend):
    """As Delta's Spark writer: a nullable column the data leaves out is NULL in every row (for
    delta-rs too); a non-nullable one is refused by name before anything is written."""
    lake = backend.lake()
    lake.create_table("t", pa.schema([pa.field("id", pa.int64(), nullable=False),
                                      ("name", pa.string()), ("score", pa.float64())]))
    with lake.transaction("R") as txn:
        txn.insert("t", {"id": [1, 2]})
        txn.insert("t", [{"id": 3, "score": 0.5}])
    want = [{"id": 1, "name": None, "score": None}, {"id": 2, "name": None, "score": None},
            {"id": 3, "name": None, "score": 0.5}]
    assert sorted(lake.read("t").to_pylist(), key=lambda r: r["id"]) == want
    assert backend.delta_rows("t") == want
    before = backend.all_keys()
    with pytest.raises(lv.SchemaMismatchError, match="missing non-nullable column 'id'"):
        with lake.transaction("R") as txn:
            txn.insert("t", {"name": ["x"]})
    assert backend.all_keys() == before
