"""Reading column-mapped tables (issue 38): logical names everywhere in the API, physical names
(or Parquet field ids) on disk, in ``partitionValues`` and in statistics (writes are checked in
``test_column_mapped_writes.py``). The judge is delta-rs' SQL reader
(``DeltaTable.to_pyarrow_table`` reads every column of a column-mapped table as NULL), and the
protocol where delta-rs does not resolve field ids (files that name their columns otherwise)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.store import CountingStore, open_store
from tests.column_mapped import rows, write_table

REFERENCE = Path(__file__).parent.parent / "data" / "table_with_column_mapping"
# (mode, files name their columns otherwise than the metadata: only field ids match)
CASES = [("name", False), ("id", False), ("id", True)]


class DataFilesRead(CountingStore):
    """Which data files a read fetched anything of."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.files: set[str] = set()

    def _tally(self, kind: str, key: str) -> None:
        if kind == "get" and key.endswith(".parquet") and "/_delta_log/" not in key:
            self.files.add(key)


class Mapped(NamedTuple):
    lake: lv.Lake
    store: DataFilesRead  # which data files were read
    path: Path
    renamed: bool  # the files name columns otherwise than the metadata (id mode)
    physical: dict[str, str]  # physical name by key (tests/column_mapped.py)


def delta_rs_rows(path: Path, version: int | None = None) -> list[dict]:
    from deltalake import DeltaTable, QueryBuilder

    got = QueryBuilder().register("t", DeltaTable(str(path), version=version)) \
        .execute("SELECT * FROM t").read_all()
    return sorted(pa.table(got).to_pylist(), key=lambda r: json.dumps(r, sort_keys=True))


def by_id(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


@pytest.fixture(params=CASES, ids=["name", "id", "id-by-field-id-only"])
def mapped(request, tmp_path):
    mode, renamed = request.param
    phys = write_table(tmp_path / "lake" / "t", mode, renamed_files=renamed)
    uri = "file://" + str(tmp_path / "lake")
    store = DataFilesRead(open_store(uri))
    with lv.Lake(uri, store=store) as lake:
        yield Mapped(lake, store, tmp_path / "lake" / "t", renamed, phys)


def test_a_mapped_table_reads_with_logical_names_as_delta_rs_does(mapped):
    from lakevilla.delta.column_mapping import physical_paths

    lake, path, renamed = mapped.lake, mapped.path, mapped.renamed
    schema = lake.schema("t")
    assert schema.names == ["id", "label", "info", "part", "notes"]
    paths = physical_paths(schema)
    assert paths[("info", "score")] == (paths[("info",)][0], mapped.physical["score"])
    assert paths[("label",)] == (mapped.physical["name"],)
    assert [f.name for f in schema.field("info").type] == ["score", "tag"]
    got = lake.read("t")
    assert got.schema.names == schema.names
    assert all(not f.metadata for f in got.schema)  # the mapping stays out of the rows
    want = rows("x", "label") + rows("y", "label")
    assert by_id(got) == want
    if not renamed:  # delta-rs resolves columns by physical name even in id mode
        assert sorted(want, key=lambda r: json.dumps(r, sort_keys=True)) == delta_rs_rows(path)


def test_time_travel_reads_each_version_under_its_own_logical_names(mapped):
    lake = mapped.lake
    assert by_id(lake.read("t", version=0)) == rows("x")
    assert by_id(lake.read("t", version=1)) == rows("x") + rows("y")
    assert lake.read("t", version=1).schema.names == ["id", "name", "info", "part", "notes"]
    assert by_id(lake.read("t", version=2, where="label = 'n2'")) == rows("x", "label")[1:2]


def test_where_on_mapped_columns_prunes_by_physically_keyed_statistics(mapped):
    lake, store = mapped.lake, mapped.store
    for where, part in [("id >= 10", "y"), ("label >= 'n2'", "x"), ("part = 'x'", "x")]:
        store.files.clear()
        got = lake.read("t", where=where)
        assert {r["part"] for r in got.to_pylist()} == {part}, where
        assert len(store.files) == 1 and f"/{part}/" in next(iter(store.files)), where
    store.files.clear()
    assert by_id(lake.read("t", where="id > 100")) == []
    assert store.files == set()


def test_columns_and_nested_fields_are_selected_by_logical_name(mapped):
    lake = mapped.lake
    got = lake.read("t", where="info.score > 100 AND part = 'y'", columns=["label", "info"])
    assert got.schema.names == ["label", "info"]
    assert got.to_pylist() == [{"label": f"n{i}", "info": {"score": i * 10, "tag": f"t{i}"}}
                               for i in (11, 12)]
    assert lake.read("t", where="part = 'y'", columns=["part"]).to_pylist() == [{"part": "y"}] * 3
    ordered = lake.read("t", columns=["part", "id"], order_by="id DESC", limit=2)
    assert ordered.to_pylist() == [{"part": "y", "id": 12}, {"part": "y", "id": 11}]


def test_files_read_by_ranges_fetch_the_chunks_of_the_resolved_columns(mapped, monkeypatch):
    """Large files are read by footer and column-chunk ranges: the ranges must be those of the
    columns as the file names them (in id mode possibly not the metadata's physical names)."""
    from lakevilla.engines import ranged

    lake = mapped.lake
    monkeypatch.setattr(ranged, "WHOLE_FILE_BYTES", 0)
    monkeypatch.setattr(ranged, "FOOTER_GUESS", 16)  # the footer alone, not the whole file
    assert by_id(lake.read("t")) == rows("x", "label") + rows("y", "label")
    assert lake.read("t", where="id = 11", columns=["info"]).to_pylist() == [
        {"info": {"score": 110, "tag": "t11"}}]


@pytest.mark.parametrize("features", ["", "R", "R,CT,I"])
def test_transactions_read_a_mapped_table(mapped, features):
    lake = mapped.lake
    with lake.transaction(features=features) as txn:
        got = txn.read("t", where="id < 3")
    assert by_id(got) == rows("x", "label")[:2]


def test_statements_write_to_a_mapped_table_another_writer_made(mapped):
    """Writes to a table another writer made (in ``id`` mode, files that name their columns
    otherwise): rewritten and new files use the metadata's physical names, and every file,
    old or new, reads by the mode's rule (``test_column_mapped_writes.py`` checks the files)."""
    lake = mapped.lake
    with lake.transaction("R") as txn:
        txn.insert("t", {"id": [99], "label": ["x"], "part": ["z"]})
        txn.update("t", set={"label": "'y'"}, where="id = 1")
        txn.delete("t", where="id = 2")
    expected = [{**r, "label": "y"} if r["id"] == 1 else r
                for r in rows("x", "label") + rows("y", "label") if r["id"] != 2]
    expected.append({"id": 99, "label": "x", "info": None, "part": "z", "notes": None})
    assert by_id(lake.read("t")) == by_id(pa.Table.from_pylist(expected))
    assert lake.read("t", where="label = 'y'", columns=["id"]).to_pylist() == [{"id": 1}]


def test_delta_rs_reference_table_reads_as_delta_rs_reads_it(tmp_path):
    shutil.copytree(REFERENCE, tmp_path / "lake" / "ref")
    with lv.Lake("file://" + str(tmp_path / "lake")) as lake:
        assert lake.schema("ref").names == ["Company Very Short", "Super Name"]
        got = lake.read("ref")
        assert sorted(got.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True)) \
            == delta_rs_rows(tmp_path / "lake" / "ref")
        assert got.num_rows == 5
        bme = lake.read("ref", where='"Company Very Short" = \'BME\'', columns=["Super Name"])
        assert bme.to_pylist() == [{"Super Name": "Timothy Lamb"}]
        assert lake.read("ref", where='"Super Name" > \'T\'').num_rows == 1


def test_an_unknown_mapping_mode_is_refused(tmp_path):
    root = tmp_path / "lake" / "t"
    write_table(root, "name")
    commit = root / "_delta_log" / f"{3:020d}.json"
    md = json.loads((root / "_delta_log" / f"{2:020d}.json").read_text().splitlines()[1])
    md["metaData"]["configuration"]["delta.columnMapping.mode"] = "position"
    commit.write_text(json.dumps({"commitInfo": {"operation": "SET TBLPROPERTIES"}}) + "\n"
                      + json.dumps(md) + "\n")
    with lv.Lake("file://" + str(tmp_path / "lake")) as lake:
        with pytest.raises(lv.UnsupportedTableFeatureError, match="position"):
            lake.read("t")
        assert by_id(lake.read("t", version=2)) == rows("x", "label") + rows("y", "label")


def test_the_mode_counts_only_where_the_protocol_supports_column_mapping():
    from lakevilla.delta import column_mapping
    from lakevilla.delta.actions import Metadata, Protocol

    md = Metadata(id="m", schema_string='{"type":"struct","fields":[]}', partition_columns=[],
                  configuration={"delta.columnMapping.mode": "ID"})
    assert column_mapping.mode("t", Protocol(1, 2), md) == "none"
    assert column_mapping.mode("t", Protocol(2, 5), md) == "id"
    assert column_mapping.mode("t", Protocol(3, 7, ["timestampNtz"], ["timestampNtz"]), md) \
        == "none"
    assert column_mapping.mode("t", Protocol(3, 7, ["columnMapping"], ["columnMapping"]), md) \
        == "id"


def with_deleted_rows(root: Path, mode: str, renamed: bool) -> list[dict]:
    """The hand-built table with the first row of each file deleted by a deletion vector (as
    another writer would, protocol upgraded to both features); the rows left, logically named."""
    from tests.dv_tables import delete_by_dv

    phys = write_table(root / "t", mode, renamed_files=renamed)
    delete_by_dv(root / "t", 3, {"x": [0], "y": [0]}, key=phys["part"])
    features = ["columnMapping", "deletionVectors"]
    body = json.dumps({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                    "readerFeatures": features, "writerFeatures": features}})
    (root / "t" / "_delta_log" / f"{4:020d}.json").write_text(body + "\n")
    return rows("x", "label")[1:] + rows("y", "label")[1:]


@pytest.mark.parametrize("mode, renamed", CASES)
def test_a_column_mapped_table_with_deletion_vectors_drops_the_deleted_rows(tmp_path, mode,
                                                                             renamed):
    expected = with_deleted_rows(tmp_path, mode, renamed)
    lake = lv.Lake(str(tmp_path))
    assert sorted(lake.read("t").to_pylist(), key=lambda r: r["id"]) == expected
    got = lake.read("t", where="part = 'y'", columns=["id", "label"]).to_pylist()
    assert sorted(got, key=lambda r: r["id"]) == [
        {"id": r["id"], "label": r["label"]} for r in expected if r["part"] == "y"]
    with lake.transaction("R") as txn:  # written to as well: the deleted rows stay deleted
        txn.update("t", where="part = 'y'", set={"label": "'new'"})
    assert [r["label"] for r in lake.read("t", where="part = 'y'").to_pylist()] == ["new"] * 2


def test_delta_rs_reference_table_with_column_mapping_and_the_dv_feature_reads_the_same(tmp_path):
    """table_with_partitioning_mapping: deletion vectors enabled, column mapping set later, a
    partition column renamed: every version as delta-rs' SQL reader reads it."""
    from deltalake import DeltaTable, QueryBuilder

    src = Path(__file__).parent.parent / "data" / "table_with_partitioning_mapping"
    shutil.copytree(src, tmp_path / "t")
    lake = lv.Lake(str(tmp_path))
    for v in range(5):
        dt = DeltaTable(str(tmp_path / "t"), version=v)
        theirs = pa.table(QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all())
        ours = lake.read("t", version=v)
        assert ours.column_names == theirs.column_names, v
        key = ours.column_names[1]
        assert sorted(ours.to_pylist(), key=lambda r: r[key]) == \
            sorted(theirs.to_pylist(), key=lambda r: r[key]), v
