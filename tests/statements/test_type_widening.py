"""Tables whose column types were widened (Delta's ``typeWidening`` reader feature): files
written before a change hold the narrower type and read as the wider one, at every version,
with statistics of either type still pruning right. delta-rs 1.6.6 refuses these tables, so the
expected rows are written out here. Written too: every file lakevilla writes holds the current,
wider types (an update rewrites narrow rows wide), and the schema keeps its ``delta.typeChanges``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakevilla as lv


def _field(name: str, t: str, before: str | None = None) -> dict:
    meta = {"delta.typeChanges": [{"fromType": before, "toType": t}]} if before else {}
    return {"name": name, "type": t, "nullable": True, "metadata": meta}


def widened_table(root: Path) -> None:
    """Version 0: int, date, float, decimal(5,2) and a file of them; version 1: the columns
    widened to long, timestamp_ntz, double, decimal(10,4); version 2: a file of the new types."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    narrow = pa.table({
        "a": pa.array([1, 5, 9], pa.int32()),
        "d": pa.array([dt.date(2020, 1, 1), dt.date(2020, 6, 1), dt.date(2021, 1, 1)]),
        "x": pa.array([1.5, 2.5, 3.5], pa.float32()),
        "p": pa.array([Decimal("1.25"), Decimal("2.50"), Decimal("3.75")], pa.decimal128(5, 2))})
    wide = pa.table({
        "a": pa.array([10_000_000_000], pa.int64()),
        "d": pa.array([dt.datetime(2022, 1, 1, 12)], pa.timestamp("us")),
        "x": pa.array([4.25], pa.float64()),
        "p": pa.array([Decimal("123456.7891")], pa.decimal128(10, 4))})
    stats = [
        {"numRecords": 3, "minValues": {"a": 1, "d": "2020-01-01", "x": 1.5, "p": 1.25},
         "maxValues": {"a": 9, "d": "2021-01-01", "x": 3.5, "p": 3.75},
         "nullCount": {"a": 0, "d": 0, "x": 0, "p": 0}},
        {"numRecords": 1, "minValues": {"a": 10_000_000_000, "d": "2022-01-01T12:00:00.000",
                                        "x": 4.25, "p": 123456.7891},
         "maxValues": {"a": 10_000_000_000, "d": "2022-01-01T12:00:00.000", "x": 4.25,
                       "p": 123456.7891},
         "nullCount": {"a": 0, "d": 0, "x": 0, "p": 0}}]
    for name, t in (("f0.parquet", narrow), ("f1.parquet", wide)):
        pq.write_table(t, root / name)

    def add(name: str, s: dict) -> dict:
        return {"add": {"path": name, "partitionValues": {}, "size": os.path.getsize(root / name),
                        "modificationTime": 1, "dataChange": True, "stats": json.dumps(s)}}

    def metadata(fields: list[dict]) -> dict:
        return {"metaData": {"id": "widened", "format": {"provider": "parquet", "options": {}},
                             "schemaString": json.dumps({"type": "struct", "fields": fields}),
                             "partitionColumns": [],
                             "configuration": {"delta.enableTypeWidening": "true"},
                             "createdTime": 1}}

    features = ["typeWidening", "timestampNtz"]
    commits = [
        [{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": features,
                       "writerFeatures": features}},
         metadata([_field("a", "integer"), _field("d", "date"), _field("x", "float"),
                   _field("p", "decimal(5,2)")]), add("f0.parquet", stats[0])],
        [metadata([_field("a", "long", "integer"), _field("d", "timestamp_ntz", "date"),
                   _field("x", "double", "float"), _field("p", "decimal(10,4)", "decimal(5,2)")])],
        [add("f1.parquet", stats[1])]]
    for v, actions in enumerate(commits):
        info = {"commitInfo": {"timestamp": 1 + v, "operation": "WRITE"}}
        (log / f"{v:020d}.json").write_text(
            "\n".join(json.dumps(a) for a in [info, *actions]) + "\n")


OLD = [{"a": 1, "d": dt.date(2020, 1, 1), "x": 1.5, "p": Decimal("1.25")},
       {"a": 5, "d": dt.date(2020, 6, 1), "x": 2.5, "p": Decimal("2.50")},
       {"a": 9, "d": dt.date(2021, 1, 1), "x": 3.5, "p": Decimal("3.75")}]
NEW = [{"a": r["a"], "d": dt.datetime.combine(r["d"], dt.time()), "x": r["x"],
        "p": r["p"].quantize(Decimal("0.0001"))} for r in OLD] + [
       {"a": 10_000_000_000, "d": dt.datetime(2022, 1, 1, 12), "x": 4.25,
        "p": Decimal("123456.7891")}]
WHERE = {
    "d >= TIMESTAMP '2021-01-01 00:00:00'": lambda r: r["d"] >= dt.datetime(2021, 1, 1),
    "d = TIMESTAMP '2020-06-01 00:00:00'": lambda r: r["d"] == dt.datetime(2020, 6, 1),
    "a > 7": lambda r: r["a"] > 7,
    "p > 3.7": lambda r: r["p"] > Decimal("3.7"),
    "x <= 1.5": lambda r: r["x"] <= 1.5,
}


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: r["a"])


def test_a_widened_table_reads_every_file_in_the_wider_types(tmp_path):
    widened_table(tmp_path / "t")
    lake = lv.Lake(str(tmp_path))
    assert lake.schema("t").types == [pa.int64(), pa.timestamp("us"), pa.float64(),
                                      pa.decimal128(10, 4)]
    assert _sorted(lake.read("t", version=0).to_pylist()) == OLD
    assert _sorted(lake.read("t").to_pylist()) == NEW
    for where, keep in WHERE.items():  # statistics of the narrow and the wide file still prune
        assert _sorted(lake.read("t", where=where).to_pylist()) == \
            [r for r in NEW if keep(r)], where
    with lake.transaction("R") as txn:
        assert len(txn.read("t", where="a < 6")) == 2


WIDE = pa.schema([("a", pa.int64()), ("d", pa.timestamp("us")), ("x", pa.float64()),
                  ("p", pa.decimal128(10, 4))])


def _data_types(path: Path) -> list[pa.DataType]:
    return [pq.read_schema(path).field(n).type for n in WIDE.names]


@pytest.mark.parametrize("features", ["", "R,CT"])
def test_writes_to_a_widened_table_are_in_the_wider_types(tmp_path, features):
    """Insert (narrow input cast up), update and delete of rows in the narrow file, OPTIMIZE of
    the narrow and wide files together: every file written holds the wide types, the rows are
    what the statements mean, and the ``delta.typeChanges`` of the schema stay."""
    widened_table(tmp_path / "t")
    lake = lv.Lake(str(tmp_path))
    schema_before = json.loads(lake.snapshot("t").metadata.schema_string)
    with lake.transaction(features) as txn:
        txn.insert("t", pa.table({"a": pa.array([20], pa.int32()),
                                  "d": pa.array([dt.date(2023, 1, 1)]),
                                  "x": pa.array([0.5], pa.float32()),
                                  "p": pa.array([Decimal("9.99")], pa.decimal128(5, 2))}))
        txn.update("t", set={"a": "a + 3000000000"}, where="a = 5")
        txn.delete("t", where="a = 1")
    with lake.transaction(features) as txn:
        txn.optimize("t")
    want = [r for r in NEW if r["a"] != 1]
    want = [{**r, "a": r["a"] + 3_000_000_000} if r["a"] == 5 else r for r in want]
    want.append({"a": 20, "d": dt.datetime(2023, 1, 1), "x": 0.5, "p": Decimal("9.9900")})
    assert _sorted(lake.read("t").to_pylist()) == _sorted(want)
    snap = lake.snapshot("t")
    assert json.loads(snap.metadata.schema_string) == schema_before
    assert len(snap.files) == 1
    assert _data_types(tmp_path / "t" / next(iter(snap.files))) == WIDE.types
    for v in range(3, snap.version):  # the files of every version written: wide
        for path in lake.snapshot("t", version=v).files:
            if path not in ("f0.parquet", "f1.parquet"):
                assert _data_types(tmp_path / "t" / path) == WIDE.types, (v, path)


def test_set_properties_enables_type_widening_with_the_protocol_upgrade(tmp_path):
    lake = lv.Lake(str(tmp_path))
    lake.create_table("t", pa.schema([("a", pa.int32())]))
    with lake.transaction("R") as txn:
        txn.set_properties("t", {"delta.enableTypeWidening": "true"})
        txn.insert("t", {"a": [1]})
    p = lake.snapshot("t").protocol
    assert (p.min_reader_version, p.min_writer_version) == (3, 7)
    assert "typeWidening" in p.reader_features and "typeWidening" in p.writer_features
    assert lake.read("t").column("a").to_pylist() == [1]
