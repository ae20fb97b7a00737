"""A Variant column (Delta's ``variantType`` reader feature) reads as its Parquet encoding: a
struct of the binary ``metadata`` and ``value`` of the Variant binary format, uninterpreted
(``lakevilla.delta.schema.VARIANT``). The table's other columns read as usual; writes stay
refused; shredded variants (``variantShredding``, values spread into typed columns) are refused,
since the two binaries alone would not hold their values."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakevilla as lv
from lakevilla.delta.schema import VARIANT

META = b"\x01\x00\x00"  # Variant metadata: version 1, an empty dictionary
ROWS = [{"id": 1, "v": {"metadata": META, "value": b"\x0c\x05"}},  # the int8 5
        {"id": 2, "v": {"metadata": META, "value": b"\x00"}}]  # null


def variant_table(root: Path, reader_features: list[str]) -> None:
    (root / "_delta_log").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(ROWS, schema=pa.schema([("id", pa.int64()),
                                                                  ("v", VARIANT)])),
                   root / "f.parquet")
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "v", "type": "variant", "nullable": True, "metadata": {}}]}
    stats = {"numRecords": 2, "minValues": {"id": 1}, "maxValues": {"id": 2},
             "nullCount": {"id": 0}}
    actions = [
        {"commitInfo": {"timestamp": 1, "operation": "WRITE"}},
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                      "readerFeatures": reader_features, "writerFeatures": reader_features}},
        {"metaData": {"id": "variant", "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(schema), "partitionColumns": [],
                      "configuration": {}, "createdTime": 1}},
        {"add": {"path": "f.parquet", "partitionValues": {},
                 "size": os.path.getsize(root / "f.parquet"), "modificationTime": 1,
                 "dataChange": True, "stats": json.dumps(stats)}}]
    (root / "_delta_log" / f"{0:020d}.json").write_text(
        "\n".join(json.dumps(a) for a in actions) + "\n")


def test_a_variant_column_reads_as_its_two_binaries_and_the_rest_as_usual(tmp_path):
    variant_table(tmp_path / "t", ["variantType"])
    lake = lv.Lake(str(tmp_path))
    assert lake.schema("t").field("v").type == VARIANT
    assert lake.read("t").to_pylist() == ROWS
    assert lake.read("t", where="id = 2", columns=["id"]).to_pylist() == [{"id": 2}]
    with pytest.raises(lv.UnsupportedTableFeatureError, match="variantType"):
        with lake.transaction("R") as txn:
            txn.insert("t", {"id": [3]})


def test_a_shredded_variant_table_is_refused(tmp_path):
    variant_table(tmp_path / "t", ["variantType", "variantShredding-preview"])
    with pytest.raises(lv.UnsupportedTableFeatureError, match="variantShredding"):
        lv.Lake(str(tmp_path)).read("t")
