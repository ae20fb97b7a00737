"""Tables with deletion vectors are read (deleted rows never come back, whatever the log's shape:
files, inline DVs, replaced DVs, checkpoints) and written (DV files and MERGE by DVs:
test_deletion_vector_writes.py). delta-rs' SQL reader, which applies deletion vectors, is the
judge; the reference tables come from delta-rs (tests/data/README.md)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

import lakevilla as lv
from tests.dv_tables import (
    DATA,
    LOGS,
    SMALL,
    commit,
    copy_table,
    delete_by_dv,
    delta_rs_rows,
    inline_dv,
)

SMALL_FILE = "part-00000-fae5310a-a37d-4e51-827b-c3d5516560ca-c000.snappy.parquet"
SMALL_DV = "deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin"


@pytest.fixture
def lake_dir(tmp_path) -> Path:
    return tmp_path / "lake"


def lake_of(lake_dir: Path) -> lv.Lake:
    return lv.Lake("file://" + str(lake_dir))


def our_rows(lake: lv.Lake, name: str, version: int | None = None) -> list[dict]:
    return sorted(lake.read(name, version=version).to_pylist(), key=repr)


def small_add(dv: dict | None, **extra) -> dict:
    log = (DATA / SMALL / "_delta_log" / f"{1:020d}.json").read_text().splitlines()
    add = next(json.loads(line)["add"] for line in log if '"add"' in line)
    add = {k: v for k, v in add.items() if k != "deletionVector"}
    if dv is not None:
        add["deletionVector"] = dv
    return {**add, **extra}


@pytest.mark.parametrize("name", [SMALL, LOGS])
def test_reference_tables_read_as_delta_rs_reads_them_at_every_version(lake_dir, name):
    path = copy_table(lake_dir, name)
    lake = lake_of(lake_dir)
    newest = DeltaTable(str(path)).version()
    for v in range(newest + 1):
        assert our_rows(lake, name, v) == delta_rs_rows(path, v), f"version {v}"
    assert our_rows(lake, name) == delta_rs_rows(path)


def test_deleted_rows_are_dropped_before_where_columns_and_limits(lake_dir):
    copy_table(lake_dir, SMALL)
    lake = lake_of(lake_dir)
    assert lake.read(SMALL).column("value").to_pylist() == list(range(1, 9))
    # the statistics still say min 0, max 9: the file is read, its deleted rows never match
    assert lake.read(SMALL, where="value = 0 OR value = 9").num_rows == 0
    assert lake.read(SMALL, where="value < 3", columns=["value"]).column(0).to_pylist() == [1, 2]
    assert lake.read(SMALL, where="value % 2 = 1").column(0).to_pylist() == [1, 3, 5, 7]
    top = lake.read(SMALL, order_by="value DESC", limit=2)
    assert top.column(0).to_pylist() == [8, 7]
    assert lake.read(SMALL, version=0).num_rows == 10  # before the DELETE
    with lake.transaction(features="R") as txn:
        assert txn.read(SMALL, where="value >= 8").column(0).to_pylist() == [8]


def test_an_inline_deletion_vector_is_applied(lake_dir):
    path = copy_table(lake_dir, SMALL)
    (path / SMALL_DV).unlink()  # the inline DV needs no file
    commit(path, 1, [{"remove": {"path": SMALL_FILE, "deletionTimestamp": 1, "dataChange": True}},
                     {"add": small_add(inline_dv([2, 3, 7]))}])
    rows = our_rows(lake_of(lake_dir), SMALL)
    assert [r["value"] for r in rows] == [0, 1, 4, 5, 6, 8, 9]
    assert rows == delta_rs_rows(path)


def test_a_replaced_deletion_vector_wins_whichever_order_the_commit_lists_it(lake_dir):
    """(path, dv1) removed and (path, dv2) added in one commit, the add first: the file stays
    live with dv2, as Delta's replay keys a logical file by (path, DV id)."""
    path = copy_table(lake_dir, SMALL)
    old = json.loads((path / "_delta_log" / f"{1:020d}.json").read_text().splitlines()[2])["add"]
    commit(path, 2, [{"add": small_add(inline_dv([0, 5, 9]))},
                     {"remove": {"path": SMALL_FILE, "deletionTimestamp": int(time.time() * 1000),
                                 "dataChange": True, "deletionVector": old["deletionVector"]}}])
    lake = lake_of(lake_dir)
    rows = our_rows(lake, SMALL)
    assert [r["value"] for r in rows] == [1, 2, 3, 4, 6, 7, 8]
    assert rows == delta_rs_rows(path)
    assert [r["value"] for r in our_rows(lake, SMALL, 1)] == list(range(1, 9))
    # the replaced DV stays a tombstone: a checkpoint carries both, and reads the same
    lake_of(lake_dir).maintenance.checkpoint(SMALL)
    ck = pq.read_table(path / "_delta_log" / f"{2:020d}.checkpoint.parquet").to_pylist()
    removed = [r["remove"] for r in ck if r["remove"] is not None]
    assert [r["deletionVector"]["pathOrInlineDv"] for r in removed] == \
        [old["deletionVector"]["pathOrInlineDv"]]
    assert our_rows(lake_of(lake_dir), SMALL) == rows == delta_rs_rows(path)


@pytest.mark.parametrize("name", [SMALL, LOGS])
def test_a_checkpoint_we_write_keeps_deleted_rows_deleted(lake_dir, name):
    path = copy_table(lake_dir, name)
    before = delta_rs_rows(path)
    version = lake_of(lake_dir).maintenance.checkpoint(name)
    assert json.loads((path / "_delta_log" / "_last_checkpoint").read_text())["version"] == version
    assert our_rows(lake_of(lake_dir), name) == before  # a fresh client reads the checkpoint
    assert delta_rs_rows(path) == before


def test_a_checkpoint_keeps_the_add_fields_lakevilla_does_not_model(lake_dir):
    path = copy_table(lake_dir, SMALL)
    dv = inline_dv([4])
    extra = {"baseRowId": 40, "defaultRowCommitVersion": 1, "clusteringProvider": "liquid"}
    commit(path, 1, [{"remove": {"path": SMALL_FILE, "deletionTimestamp": 1, "dataChange": True}},
                     {"add": small_add(dv, **extra)}])
    lake_of(lake_dir).maintenance.checkpoint(SMALL)
    ck = pq.read_table(path / "_delta_log" / f"{1:020d}.checkpoint.parquet").to_pylist()
    add, = [r["add"] for r in ck if r["add"] is not None]
    assert {k: add[k] for k in extra} == extra
    assert {k: v for k, v in add["deletionVector"].items() if v is not None} == dv
    assert [r["value"] for r in our_rows(lake_of(lake_dir), SMALL)] == [0, 1, 2, 3, 5, 6, 7, 8, 9]


@pytest.mark.parametrize("byte, error", [
    (-6, "fails its checksum"),  # a bit of the bitmap (before the 4-byte checksum)
    (0, "format version"),  # the file's version byte
    (4, "holds 37 bytes, the log says 36"),  # the DV's size
    (-1, "fails its checksum"),  # the checksum itself
])
def test_a_damaged_deletion_vector_file_is_a_corrupt_log_not_wrong_rows(lake_dir, byte, error):
    path = copy_table(lake_dir, SMALL)
    data = bytearray((path / SMALL_DV).read_bytes())
    data[byte] ^= 0x01
    (path / SMALL_DV).write_bytes(bytes(data))
    with pytest.raises(lv.CorruptLogError, match=error):
        lake_of(lake_dir).read(SMALL)
    assert lake_of(lake_dir).read(SMALL, version=0).num_rows == 10  # before the DV: readable


def test_a_deletion_vector_whose_cardinality_disagrees_is_a_corrupt_log(lake_dir):
    path = copy_table(lake_dir, SMALL)
    dv = inline_dv([1, 2])
    commit(path, 1, [{"remove": {"path": SMALL_FILE, "deletionTimestamp": 1, "dataChange": True}},
                     {"add": small_add({**dv, "cardinality": 3})}])
    with pytest.raises(lv.CorruptLogError, match="the log says 3"):
        lake_of(lake_dir).read(SMALL)


LIVE = list(range(1, 9))  # table-with-dv-small: values 0..9, 0 and 9 deleted by a DV
WRITES = {
    "insert": (lambda txn: txn.insert(SMALL, {"value": [42]}), LIVE + [42]),
    "delete": (lambda txn: txn.delete(SMALL, where="value = 1"), LIVE[1:]),
    "update": (lambda txn: txn.update(SMALL, set={"value": "value + 10"}, where="value = 2"),
               [1, 12] + LIVE[2:]),
    "optimize": (lambda txn: txn.optimize(SMALL), LIVE),
    "overwrite": (lambda txn: txn.overwrite(SMALL, {"value": [70]}, where="value >= 7"),
                  [1, 2, 3, 4, 5, 6, 70]),
    "merge": (lambda txn: txn.merge(SMALL, {"value": [0, 1, 42]}, on="value")
              .when_not_matched_insert_all().execute(), [0] + LIVE + [42]),
    "full-scan-update": (lambda txn: txn.update(SMALL, set={"value": "value * 2"}),
                         [2 * v for v in LIVE]),
}


@pytest.mark.parametrize("features", ["", "R", "R,CT,I"])
@pytest.mark.parametrize("write", list(WRITES))
def test_every_statement_writes_a_table_with_deletion_vectors_and_deleted_rows_stay_deleted(
        lake_dir, write, features):
    """The statements rewrite the files they change (their removes carry the file's DV), so a
    deleted row never comes back; the merge source's 0 is a new row, not the deleted 0."""
    path = copy_table(lake_dir, SMALL)
    lake = lake_of(lake_dir)
    statement, expected = WRITES[write]
    with lake.transaction(features) as txn:
        statement(txn)
    values = sorted(r["value"] for r in our_rows(lake_of(lake_dir), SMALL))
    assert values == sorted(expected)
    assert sorted(r["value"] for r in delta_rs_rows(path)) == sorted(expected)
    dvs = [a.deletion_vector for a in lake.snapshot(SMALL).files.values() if a.deletion_vector]
    if write in ("optimize", "full-scan-update"):  # the file was rewritten: no DV left
        assert dvs == []
    elif write in ("delete", "update", "overwrite"):  # the table asks for DVs: rows are marked
        assert [dv.cardinality for dv in dvs] == [{"delete": 3, "update": 3, "overwrite": 4}[write]]


def test_abandoned_file_deletion_keeps_deletion_vector_files_a_version_needs(lake_dir):
    path = copy_table(lake_dir, LOGS)
    orphan = "deletion_vector_00000000-0000-4000-8000-000000000000.bin"
    shutil.copy(path / "deletion_vector_8e4ca8be-7615-43cf-bc06-5d131148683f.bin", path / orphan)
    lake = lake_of(lake_dir)
    before = our_rows(lake, LOGS)
    gone = lake.maintenance.delete_abandoned_files(LOGS, min_age=0, force=True)
    assert [k.rsplit("/", 1)[-1] for _t, k in gone] == [orphan]
    # the live DV and the one it replaced (a tombstone within retention) both stay
    assert sorted(p.name for p in path.glob("deletion_vector_*")) == [
        "deletion_vector_8e4ca8be-7615-43cf-bc06-5d131148683f.bin",
        "deletion_vector_a2084964-69d4-4e1e-95f5-9bbd6571d5c3.bin"]
    assert our_rows(lake_of(lake_dir), LOGS) == before
    assert our_rows(lake_of(lake_dir), LOGS, 3) == delta_rs_rows(path, 3)


@pytest.mark.parametrize("storage", ["i", "u", "p"])
def test_rows_are_deleted_by_their_index_across_row_groups_and_partitions(lake_dir, monkeypatch,
                                                                           storage):
    """A partitioned table lakevilla wrote (files of several row groups), then given deletion
    vectors by another writer (inline; in one file under a random prefix, or by absolute path,
    at their offsets): a pushed-down ``where`` never skips a row group before the deleted rows
    are dropped, so the indices stay those of the file."""
    from lakevilla.engines import embedded

    monkeypatch.setattr(embedded, "ROW_GROUP_ROWS", 100)
    lake = lake_of(lake_dir)
    schema = pa.schema([("part", pa.string()), ("i", pa.int64())])
    lake.create_table("t", schema, partition_by=["part"])
    with lake.transaction(features="") as txn:
        txn.insert("t", {"part": ["a"] * 450 + ["b"] * 450, "i": list(range(450)) * 2})
    path = lake_dir / "t"
    files = [a.path for a in lake.snapshot("t").files.values()]
    assert len(files) == 2
    assert all(pq.ParquetFile(path / f).num_row_groups == 5 for f in files)
    deleted = {"a": [0, 99, 100, 101, 449], "b": list(range(150, 350))}
    latest = lake.snapshot("t").version
    delete_by_dv(path, latest + 1, deleted, key="part", storage=storage)
    lake = lake_of(lake_dir)
    want = [{"part": p, "i": i} for p in "ab" for i in range(450) if i not in deleted[p]]
    assert sorted(lake.read("t").to_pylist(), key=repr) == sorted(want, key=repr)
    assert sorted(lake.read("t").to_pylist(), key=repr) == delta_rs_rows(path)
    assert lake.read("t", where="i >= 99 AND i <= 101").to_pylist() == \
        [{"part": "b", "i": 99}, {"part": "b", "i": 100}, {"part": "b", "i": 101}]
    assert lake.read("t", where="part = 'b' AND i > 140 AND i < 360").num_rows == 9 + 10
    assert lake.read("t", version=latest).num_rows == 900


def test_a_missing_deletion_vector_file_is_a_corrupt_log(lake_dir):
    path = copy_table(lake_dir, SMALL)
    (path / SMALL_DV).unlink()
    with pytest.raises(lv.CorruptLogError, match="is missing"):
        lake_of(lake_dir).read(SMALL, where="value > 5")


def test_enabling_deletion_vectors_upgrades_the_protocol_as_delta_prescribes(tmp_path):
    """A legacy (1, 2) table: the property needs the deletionVectors reader and writer feature,
    so the protocol becomes reader 3 / writer 7 listing what writer 2 implied."""
    lake = lv.Lake(str(tmp_path))
    lake.create_table("t", pa.schema([("id", pa.int64())]),
                      properties={"delta.appendOnly": "false"})
    with lake.transaction("R") as txn:
        txn.set_properties("t", {"delta.enableDeletionVectors": "true"})
        txn.insert("t", {"id": [1, 2]})
    p = lake.snapshot("t").protocol
    assert (p.min_reader_version, p.min_writer_version) == (3, 7)
    assert p.reader_features == ["deletionVectors"]
    assert sorted(p.writer_features or []) == ["appendOnly", "deletionVectors", "invariants"]
    with lake.transaction("") as txn:
        txn.delete("t", where="id = 1")
    assert [r["id"] for r in delta_rs_rows(tmp_path / "t")] == [2]


# -- deleting and updating by deletion vectors --------------------------------------------------

DV_TABLE = {"delta.enableDeletionVectors": "true"}
IDS = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def dv_lake(root: Path, rows: int = 1000) -> lv.Lake:
    lake = lv.Lake(str(root))
    lake.create_table("t", IDS, properties=DV_TABLE)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": list(range(rows)), "v": [0] * rows})
    return lake


def parquet_files(root: Path) -> set[str]:
    return {p.name for p in (root / "t").glob("*.parquet")}


@pytest.mark.parametrize("features", ["", "R", "R,CT,I"])
def test_a_delete_marks_its_rows_and_an_update_writes_only_its_rows(tmp_path, features):
    lake = dv_lake(tmp_path)
    files = parquet_files(tmp_path)
    with lake.transaction(features) as txn:
        assert txn.delete("t", where="id = 5 OR id = 500") == 2
    assert parquet_files(tmp_path) == files  # no data file written
    add, = lake.snapshot("t").files.values()
    assert add.deletion_vector is not None and add.deletion_vector.storage_type == "i"
    assert add.deletion_vector.cardinality == 2
    with lake.transaction(features) as txn:
        assert txn.update("t", {"v": "v + 1"}, where="id = 7") == 1
    new = parquet_files(tmp_path) - files
    assert len(new) == 1  # the one updated row, as a file of its own
    expected = [{"id": i, "v": int(i == 7)} for i in range(1000) if i not in (5, 500)]
    assert sorted(lake.read("t").to_pylist(), key=lambda r: r["id"]) == expected
    assert sorted(delta_rs_rows(tmp_path / "t"), key=lambda r: r["id"]) == expected


def test_an_aborted_delete_by_deletion_vector_keeps_the_file_it_marked(tmp_path):
    """Undoing an add with a DV must not delete the data file: an earlier add wrote it."""
    lake = dv_lake(tmp_path)
    files = parquet_files(tmp_path)
    for features in ("R", "R,CT,I"):
        with pytest.raises(RuntimeError, match="changed my mind"):
            with lake.transaction(features) as txn:
                txn.delete("t", where="id < 10")
                raise RuntimeError("changed my mind")
        assert parquet_files(tmp_path) == files
        assert lake.read("t").num_rows == 1000


def test_concurrent_deletes_by_deletion_vector_on_one_file_both_land(tmp_path):
    """The second commit conflicts (the file it marked was replaced), is redone on the newer
    snapshot and marks its row beside the first's: both rows go, the data file stays."""
    lake = dv_lake(tmp_path)
    files = parquet_files(tmp_path)
    first = lake.begin("R")
    first.delete("t", where="id = 1")
    with lake.transaction("R") as other:
        other.delete("t", where="id = 2")
    result = first.commit()
    lake.flush()  # what the redo left goes out in the client's batch of deletes
    assert result.stats["redos"] >= 1
    add, = lake.snapshot("t").files.values()
    assert add.deletion_vector is not None and add.deletion_vector.cardinality == 2
    assert parquet_files(tmp_path) == files
    assert sorted(r["id"] for r in delta_rs_rows(tmp_path / "t")) == \
        [i for i in range(1000) if i not in (1, 2)]


def test_a_plain_delta_delete_that_loses_to_a_conflict_keeps_the_file_it_marked(tmp_path):
    """LV[DL]: each statement commits alone; one that conflicts is dropped (its files deleted),
    and an add with a deletion vector wrote no file of its own to drop."""
    from lakevilla.store import LocalStore
    from tests.helpers import HookStore

    dv_lake(tmp_path)
    files = parquet_files(tmp_path)
    other = lv.Lake(str(tmp_path))

    def concurrent_delete() -> None:
        with other.transaction("") as txn:
            txn.delete("t", where="id = 2")

    store = HookStore(LocalStore(str(tmp_path)),
                      lambda kind, key: kind == "put_if_absent" and key.endswith(
                          f"{2:020d}.json"), concurrent_delete)
    lake = lv.Lake(str(tmp_path), store=store)
    with pytest.raises(lv.TransactionAborted, match="conflicts"):
        with lake.transaction("") as txn:
            txn.delete("t", where="id = 1")
    assert parquet_files(tmp_path) == files
    assert sorted(r["id"] for r in delta_rs_rows(tmp_path / "t")) == \
        [i for i in range(1000) if i != 2]


def test_a_statement_reads_a_stored_deletion_vector_once(lake_dir):
    """A delete on a file with a DV in a file of its own reads the DV where it reads the rows and
    again where it marks more: a decoded DV is kept (it never changes), so one request."""
    from lakevilla.store import CountingStore, LocalStore

    class DvReads(CountingStore):
        def __init__(self, inner):
            super().__init__(inner)
            self.dv_reads = 0

        def _tally(self, kind, key):
            self.dv_reads += kind in ("get", "get_range") and key.endswith(".bin")

    copy_table(lake_dir, SMALL)
    store = DvReads(LocalStore(str(lake_dir)))
    lake = lv.Lake(str(lake_dir), store=store)
    with lake.transaction("R") as txn:
        txn.delete(SMALL, where="value = 1")
    assert store.dv_reads == 1
    assert [r["value"] for r in our_rows(lake_of(lake_dir), SMALL)] == LIVE[1:]
