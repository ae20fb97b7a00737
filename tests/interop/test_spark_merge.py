"""MERGE on the Spark engine: the embedded engine's semantics, a Spark DataFrame as source."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.statements.merge import DuplicateMatchError

S = pa.schema([("id", pa.int64()), ("part", pa.string()), ("v", pa.int64())])
TARGET = [{"id": i, "part": "ab"[i % 2], "v": i} for i in range(9)]
SOURCE = [{"id": 1, "part": "a", "v": -1}, {"id": 2, "part": "b", "v": 5},
          {"id": 7, "part": "b", "v": 3}, {"id": 20, "part": "c", "v": 2},
          {"id": None, "part": "c", "v": 2}, {"id": 30, "part": None, "v": -4}]


def _key(r):
    return (r["id"] is None, r["id"] or 0)


def _merged(uri, engine, source, partition_by, features):
    with lv.Lake(uri, engine=engine) as lake:
        lake.create_table("t", S, partition_by=partition_by)
        for lo, hi in ((0, 6), (6, 9)):  # a multi-file target
            with lake.transaction("") as txn:
                txn.insert("t", pa.Table.from_pylist(TARGET[lo:hi], schema=S))
        with lake.transaction(features) as txn:
            m = (txn.merge("t", source, on="target.id = source.id")
                 .when_matched_delete("source.v < 0")
                 .when_matched_update({"v": "target.v * 10 + source.v"}, "source.v > 3")
                 .when_matched_update_all()
                 .when_not_matched_insert({"id": "source.id", "v": "source.v * 2"}, "source.v > 0")
                 .execute())
    with lv.Lake(uri) as lake:
        return m, sorted(lake.read("t").to_pylist(), key=_key)


@pytest.mark.parametrize("partition_by", [None, ["part"]])
def test_spark_merge_gives_the_embedded_engines_rows(spark, tmp_path, partition_by):  # noqa: F811
    from deltalake import DeltaTable

    from lakevilla.engines.spark import spark_schema

    src = pa.Table.from_pylist(SOURCE, schema=S)
    want_m, want = _merged(f"file://{tmp_path}/e", None, src, partition_by, "R")
    df = spark.createDataFrame([tuple(r[f.name] for f in S) for r in SOURCE], spark_schema(S))
    got_m, got = _merged(f"file://{tmp_path}/s", lv.SparkEngine(spark), df, partition_by, "R")
    assert got == want
    # how many files the engine writes them into is its own business
    layout = ("num_target_files_added",)
    assert ({k: v for k, v in got_m.items() if k not in layout}
            == {k: v for k, v in want_m.items() if k not in layout})
    assert want_m["num_target_rows_updated"] == 2 and want_m["num_target_rows_deleted"] == 1
    assert sorted(pa.table(DeltaTable(f"{tmp_path}/s/t").to_pyarrow_table())
                  .select(S.names).to_pylist(), key=_key) == got


def test_spark_merge_refuses_duplicate_matches_and_writes_nothing(spark, tmp_path):  # noqa: F811
    uri = f"file://{tmp_path}/d"
    with lv.Lake(uri, engine=lv.SparkEngine(spark)) as lake:
        lake.create_table("t", S)
        with lake.transaction("") as txn:
            txn.insert("t", pa.Table.from_pylist(TARGET, schema=S))
        before = sorted(p.name for p in (tmp_path / "d").rglob("*"))
        with pytest.raises(DuplicateMatchError, match="several source rows|source rows"):
            with lake.transaction("R") as txn:
                txn.merge("t", {"id": [1, 1], "part": ["a", "a"], "v": [1, 2]}, on="id") \
                    .when_matched_update_all().execute()
        assert sorted(p.name for p in (tmp_path / "d").rglob("*")) == before


def test_spark_merge_with_schema_mode_merge_adds_the_source_columns(spark, tmp_path):  # noqa: F811
    """The same evolution as the embedded engine: new nullable columns, filled by *_all."""
    from lakevilla.engines.spark import spark_schema

    wide = pa.schema([*S, ("note", pa.string())])
    src_rows = [{"id": 1, "part": "a", "v": 10, "note": "x"},
                {"id": 20, "part": "c", "v": 2, "note": None}]
    got = {}
    for name, engine, src in (
            ("e", None, pa.Table.from_pylist(src_rows, schema=wide)),
            ("s", lv.SparkEngine(spark),
             spark.createDataFrame([tuple(r[f.name] for f in wide) for r in src_rows],
                                   spark_schema(wide)))):
        with lv.Lake(f"file://{tmp_path}/{name}", engine=engine) as lake:
            lake.create_table("t", S)
            with lake.transaction("") as txn:
                txn.insert("t", pa.Table.from_pylist(TARGET[:3], schema=S))
            with lake.transaction("R") as txn:
                (txn.merge("t", src, on="id", schema_mode="merge")
                 .when_matched_update_all().when_not_matched_insert_all().execute())
        with lv.Lake(f"file://{tmp_path}/{name}") as lake:
            got[name] = sorted(lake.read("t").to_pylist(), key=_key)
    assert got["s"] == got["e"]
    assert [(r["id"], r["v"], r["note"]) for r in got["e"]] == [
        (0, 0, None), (1, 10, "x"), (2, 2, None), (20, 2, None)]
