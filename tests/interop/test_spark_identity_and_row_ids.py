"""The Spark engine on tables with identity columns and row tracking: it numbers identity
values and gets row ids as the embedded engine does (DataFrames are numbered through Arrow)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")

import lakevilla as lv  # noqa: E402

pytestmark = [pytest.mark.spark]


def _expected_row_ids(path) -> dict[str, tuple[int, int]]:
    """v -> (row id, row commit version), from our adds: baseRowId plus the row's place."""
    live: dict[str, dict] = {}
    for f in sorted((path / "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            o = json.loads(line)
            if "remove" in o:
                live.pop(o["remove"]["path"], None)
            if "add" in o:
                live[o["add"]["path"]] = o["add"]
    out = {}
    for p, add in live.items():
        for i, v in enumerate(pq.read_table(path / p).column("v").to_pylist()):
            out[v] = (add["baseRowId"] + i, add["defaultRowCommitVersion"])
    return out


def test_the_spark_engine_numbers_identity_values_and_row_ids_as_the_embedded_one(
        spark, tmp_path):
    """Inserts through the Spark engine (a DataFrame without the identity column, Arrow rows, a
    merge's inserts) beside embedded ones: the values run on by ``step``, every file's row ids
    follow the mark, and delta-rs reads the table. (Delta on Spark is not installed here:
    lakevilla's Spark engine writes Parquet itself, so Delta's reading of ``_metadata.row_id``
    is not checked.) On classic and Connect sessions: the executors number the values."""
    uri = "file://" + str(tmp_path / "lake")
    lake = lv.Lake(uri)
    schema = pa.schema([pa.field("id", pa.int64(), False, metadata=lv.identity(10, 5)),
                        pa.field("v", pa.string())])
    lake.create_table("t", schema, properties={"delta.enableRowTracking": "true"})
    with lake.transaction("R") as txn:
        txn.insert("t", {"v": ["a", "b", "c"]})
    with lv.Lake(uri, engine=lv.SparkEngine(spark)) as on_spark:
        with on_spark.transaction("R") as txn:
            txn.insert("t", spark.createDataFrame([("d",), ("e",)], "v string"))
            txn.insert("t", {"v": ["f"]})
            txn.update("t", {"v": "'b2'"}, where="v = 'b'")
            txn.merge("t", pa.table({"v": ["a", "g"]}), on="t.v = s.v", source_alias="s",
                      target_alias="t").when_not_matched_insert_all().execute()
        with pytest.raises(lv.SchemaMismatchError, match="identity column"):
            with on_spark.transaction("R") as txn:
                txn.insert("t", spark.createDataFrame([(1, "x")], "id long, v string"))
    path = tmp_path / "lake" / "t"
    from deltalake import DeltaTable

    ids = {r["v"]: r["id"] for r in DeltaTable(str(path)).to_pyarrow_table().to_pylist()}
    assert ids == {"a": 10, "b2": 15, "c": 20, "d": 25, "e": 30, "f": 35, "g": 40}
    mark = json.loads(DeltaTable(str(path)).schema().to_json())["fields"][0]["metadata"]
    assert mark["delta.identity.highWaterMark"] == 40
    row_ids = _expected_row_ids(path)
    assert sorted(r for r, _c in row_ids.values()) == sorted(set(r for r, _c in
                                                                 row_ids.values()))
    assert row_ids["d"][0] >= 3 and row_ids["d"][1] == row_ids["f"][1] == 2
