"""Creating tables: every schema form, tables created from data in one version, and
concurrent creators of one name (one table, a clear error, nothing left behind)."""

from __future__ import annotations

import json
import threading

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.store import FaultInjectingStore, FaultPlan
from tests.helpers import HookStore

ROWS = {"id": [1, 2, 3, 4], "region": ["eu", "us", "eu", None], "value": [10, 20, 30, 40]}
V0 = "t/_delta_log/00000000000000000000.json"


def data_files(backend, table: str = "t") -> set[str]:
    return {k for k in backend.all_keys() if k.startswith(f"{table}/") and k.endswith(".parquet")}


def referenced(lake, table: str = "t") -> set[str]:
    from urllib.parse import unquote

    return {f"{table}/{unquote(p)}" for p in lake.snapshot(table).files}


def test_schema_forms_spark_pandas_arrow(tmp_path):
    pytest.importorskip("pyspark")
    import pandas as pd
    from pyspark.sql import types as T

    lake = lv.Lake(str(tmp_path / "lake"))
    struct = T.StructType([T.StructField("id", T.LongType(), False),
                           T.StructField("at", T.TimestampType()),
                           T.StructField("tags", T.ArrayType(T.StringType())),
                           T.StructField("amount", T.DecimalType(10, 2))])
    s = lake.create_table("spark", struct).schema
    assert s == pa.schema([pa.field("id", pa.int64(), nullable=False),
                           ("at", pa.timestamp("us", tz="UTC")),
                           ("tags", pa.list_(pa.field("element", pa.string()))),
                           ("amount", pa.decimal128(10, 2))])
    frame = pd.DataFrame({"id": [1], "name": ["x"], "score": [0.5]})
    s = lake.create_table("pandas", frame).schema  # a frame's schema (all nullable) and rows
    assert s == pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
    assert lake.read("pandas").to_pylist() == [{"id": 1, "name": "x", "score": 0.5}]
    s = lake.create_table("arrow", pa.table({"id": pa.array([1], pa.int32())})).schema
    assert s == pa.schema([("id", pa.int32())]) and lake.read("arrow").num_rows == 1
    with pytest.raises(lv.SchemaMismatchError, match="cannot hold"):
        lake.create_table("bad", T.StructType([T.StructField("d", T.DayTimeIntervalType())]))
    with pytest.raises(lv.SchemaMismatchError, match="only nulls"):
        lake.create_table("bad", data={"id": [1], "x": [None]})
    with pytest.raises(lv.SchemaMismatchError, match="needs a schema or data"):
        lake.create_table("bad")
    assert lake.tables() == ["arrow", "pandas", "spark"]


def _frames(rows: dict) -> dict:
    import pandas as pd
    import polars as pl

    table = pa.table(rows)
    return {"pyarrow": table, "batch": table.to_batches()[0], "pandas": pd.DataFrame(rows),
            "polars": pl.DataFrame(rows),
            "stream": pa.RecordBatchReader.from_batches(table.schema, table.to_batches())}


@pytest.mark.parametrize("kind", ["pyarrow", "batch", "pandas", "polars", "stream"])
@pytest.mark.parametrize("where", ["lake", "txn"])
def test_a_frame_of_rows_given_as_the_schema_is_written_not_dropped(tmp_path, kind, where):
    """A new user's ``create_table("t", frame)``: the frame's rows are the table's first rows,
    as with ``data=`` (dropping them made a first MERGE insert rows that should have matched)."""
    lake = lv.Lake(str(tmp_path / "lake"))
    frame = _frames({"x": [1, 2, 3]})[kind]
    if where == "lake":
        lake.create_table("t", frame)
    else:
        with lake.transaction("R") as txn:
            assert txn.create_table("t", frame) == 3
    assert sorted(lake.read("t").column("x").to_pylist()) == [1, 2, 3]
    assert lake.version("t") == 0  # in the table's first version, as data= puts them


def test_an_empty_frame_is_a_schema_and_rows_given_twice_are_refused(tmp_path):
    lake = lv.Lake(str(tmp_path / "lake"))
    empty = pa.table({"x": pa.array([], pa.int64())})
    lake.create_table("e", empty)
    assert lake.read("e").num_rows == 0 and lake.history("e")[0].operation == "CREATE TABLE"
    for frame in _frames({"x": [1]}).values():
        with pytest.raises(lv.InvalidArgumentError, match=r"got rows twice.*\(as data=\)"):
            lake.create_table("twice", frame, data={"x": [2]})
    with lake.transaction("R") as txn, pytest.raises(lv.InvalidArgumentError, match="data="):
        txn.create_table("twice", pa.table({"x": [1]}), data={"x": [2]})
    assert not lake.table_exists("twice")


def test_create_with_data_writes_one_version_zero(backend):
    lake = backend.lake()
    snap = lake.create_table("t", data=ROWS, partition_by="region")
    assert snap.version == 0 and lake.version("t") == 0
    lines = [json.loads(x) for x in backend.store().get(V0).data.splitlines()]
    kinds = [next(iter(x)) for x in lines]
    # eu, us, null
    assert kinds[:3] == ["commitInfo", "protocol", "metaData"] and kinds.count("add") == 3
    assert lines[0]["commitInfo"]["operation"] == "CREATE TABLE AS SELECT"
    assert lines[0]["commitInfo"]["operationMetrics"] == {"numFiles": "3", "numOutputRows": "4"}
    assert backend.delta_rows("t") == sorted(pa.table(ROWS).to_pylist(), key=lambda r: r["id"])
    assert backend.delta("t").metadata().partition_columns == ["region"]
    assert data_files(backend) == referenced(lake)
    # an explicit schema wins over the data's (the data is cast to it)
    lake.create_table("u", pa.schema([("id", pa.int32()), ("value", pa.int64())]),
                      data={"id": [1], "value": [2]})
    assert (lake.schema("u").field("id").type == pa.int32()
            and lake.read("u").to_pylist() == [{"id": 1, "value": 2}])


def test_bad_data_or_an_existing_table_writes_nothing(backend):
    lake = backend.lake()
    lake.create_table("t", data=ROWS)
    before = backend.all_keys()
    with pytest.raises(lv.TableExistsError):
        lake.create_table("t", data=ROWS)
    assert lake.create_table("t", data={"id": [9]}, if_not_exists=True).version == 0
    with pytest.raises(lv.SchemaMismatchError):
        lake.create_table("u", pa.schema([("id", pa.int64())]), data={"id": [1], "extra": [2]})
    assert backend.all_keys() == before


def test_a_table_created_with_data_is_never_visible_half_made(backend):
    """Another client looks at the table around every store call the creator makes: it finds
    no table or the whole table, never metadata without its rows."""
    observer = backend.lake()
    seen = []

    def look() -> None:
        if observer.table_exists("t"):
            seen.append(len(observer.read("t")))
        else:
            seen.append(None)

    creator = backend.lake(store=HookStore(backend.store(), lambda kind, key: True, look,
                                           repeat=True))
    creator.create_table("t", data=ROWS, partition_by="region")
    look()
    assert set(seen) == {None, 4} and seen[-1] == 4


def test_concurrent_creator_gets_a_clear_error_and_leaves_nothing(backend):
    winner = backend.lake()

    def create_first() -> None:
        winner.create_table("t", data={"id": [7], "region": ["x"], "value": [70]})

    # the winner creates the table (reservation, version 0, release) just before the loser
    # reserves the name; the loser takes over the released reservation and finds the table
    res_key = "_lakevilla/creates/t.json"
    loser = backend.lake(store=HookStore(
        backend.store(), lambda kind, key: kind == "put_if_absent" and key == res_key,
        create_first))
    with pytest.raises(lv.TableExistsError, match="already exists"):
        loser.create_table("t", data=ROWS, partition_by="region")
    assert backend.delta_rows("t") == [{"id": 7, "region": "x", "value": 70}]
    assert data_files(backend) == referenced(winner)  # the loser deleted the files it wrote


def test_racing_creators_make_exactly_one_table(backend):
    barrier = threading.Barrier(4)
    outcomes: list[str] = []

    def create(i: int) -> None:
        lake = backend.lake()
        barrier.wait()
        try:
            lake.create_table("t", data={"id": [i], "value": [i * 10]})
            outcomes.append(f"won {i}")
        except lv.TableExistsError:
            outcomes.append("lost")

    threads = [threading.Thread(target=create, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [o for o in outcomes if o.startswith("won")]
    assert len(won) == 1 and outcomes.count("lost") == 3
    i = int(won[0].split()[1])
    assert backend.delta_rows("t") == [{"id": i, "value": i * 10}]
    assert data_files(backend) == referenced(backend.lake())


def test_version_zero_applied_but_reported_failed_is_a_success(backend):
    """A timeout after the store applied the put: the creator reads version 0 back, finds its own
    table and keeps the data files it references."""
    plan = FaultPlan(transient_after={1}, kinds=("put_if_absent",),
                     predicate=lambda kind, key: key == V0)
    lake = backend.lake(store=FaultInjectingStore(backend.store(), plan))
    assert lake.create_table("t", data=ROWS).version == 0
    assert len(backend.delta_rows("t")) == 4


def test_version_zero_not_applied_leaves_no_table_and_no_files(backend):
    """Every put of version 0 fails before it is applied: the store layer's read-back finds
    nothing and gives up, and the creator deletes the data files it wrote."""
    plan = FaultPlan(transient=set(range(1, 100)), kinds=("put_if_absent",),
                     predicate=lambda kind, key: key == V0)
    lake = backend.lake(store=FaultInjectingStore(backend.store(), plan))
    with pytest.raises(lv.StorageError):
        lake.create_table("t", data=ROWS)
    assert not backend.lake().table_exists("t") and data_files(backend) == set()
