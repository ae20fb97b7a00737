"""The Delta log: delta-rs and lakevilla read the same rows at every version, both ways."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

import lakevilla as lv
from lakevilla.delta.stats import stats_from_parquet, stats_from_table
from lakevilla.store import StoreWrapper
from tests.conftest import ON_AZURE, ON_AZURE_AND_GCS, rows

SCHEMA = pa.schema([
    ("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64()), ("day", pa.date32()),
    ("ts", pa.timestamp("us", tz="UTC")), ("flag", pa.bool_()), ("small", pa.int32()),
])


def _batch(start: int, n: int) -> pa.Table:
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "name": [f"n{i}" if i % 7 else None for i in range(start, start + n)],
        "amount": [i * 1.5 for i in range(start, start + n)],
        "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i % 30) for i in range(start, start + n)],
        "ts": pa.array([base + dt.timedelta(seconds=i, microseconds=7)
                        for i in range(start, start + n)], pa.timestamp("us", tz="UTC")),
        "flag": [i % 2 == 0 for i in range(start, start + n)],
        "small": pa.array([i % 100 for i in range(start, start + n)], pa.int32()),
    }, schema=SCHEMA)


def _norm(table: pa.Table) -> list[dict]:
    return rows(table.cast(SCHEMA) if table.schema != SCHEMA else table)


@ON_AZURE_AND_GCS
def test_delta_rs_reads_every_version_we_write(backend):
    lake = backend.lake()
    lake.create_table("t", SCHEMA, properties={"delta.checkpointInterval": "5"})
    for i in range(12):
        with lake.transaction(features="") as txn:
            txn.insert("t", _batch(i * 10, 10))
            if i % 3 == 1:
                txn.update("t", set={"amount": "amount * 2", "name": "'upd'"},
                           where=f"id < {i * 5}")
            if i % 4 == 3:
                txn.delete("t", where=f"id % 9 = {i % 9}")
    latest = lake.version("t")
    assert latest > 12
    for v in range(latest + 1):
        ours = _norm(lake.read("t", version=v))
        theirs = backend.delta_rows("t", v)
        assert ours == theirs, f"version {v} differs"
    keys = backend.all_keys()
    assert any(k.endswith(".checkpoint.parquet") for k in keys)
    # a cold client loads through our checkpoint; so does delta-rs after the older commits are gone
    cp = json.loads(backend.store().get("t/_delta_log/_last_checkpoint").data)["version"]
    for v in range(cp):
        backend.store().delete(f"t/_delta_log/{v:020d}.json")
    assert _norm(backend.lake().read("t")) == backend.delta_rows("t")


@ON_AZURE
def test_we_read_every_version_delta_rs_writes(backend):
    from deltalake import DeltaTable, write_deltalake

    uri, opts = backend.table_uri("d"), backend.storage_options or None
    part_schema = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.float64()),
                             ("ts", pa.timestamp("us", tz="UTC"))])

    def batch(start):
        return pa.table({"id": pa.array(range(start, start + 6), pa.int64()),
                         "p": [["a", "b c", "d/e"][i % 3] for i in range(6)],
                         "v": [float(i) for i in range(6)],
                         "ts": pa.array([dt.datetime(2024, 5, 1, tzinfo=dt.UTC)] * 6,
                                        pa.timestamp("us", tz="UTC"))},
                        schema=part_schema)

    write_deltalake(uri, batch(0), partition_by=["p"], storage_options=opts,
                    configuration={"delta.checkpointInterval": "3"})
    for i in range(1, 8):
        write_deltalake(uri, batch(i * 10), mode="append", storage_options=opts)
    DeltaTable(uri, storage_options=opts).delete("id % 4 = 0")
    DeltaTable(uri, storage_options=opts).update(updates={"v": "v + 100"}, predicate="id > 50")
    DeltaTable(uri, storage_options=opts).create_checkpoint()
    lake = backend.lake()
    latest = lake.version("d")
    for v in range(latest + 1):
        ours = rows(lake.read("d", version=v).select(part_schema.names))
        theirs = rows(pa.table(DeltaTable(uri, version=v, storage_options=opts)
                               .to_pyarrow_table()).select(part_schema.names).cast(part_schema))
        assert ours == theirs, f"version {v}"
    # partition pruning on a delta-rs table: only the 'b c' files are read
    got = lake.read("d", where="p = 'b c'")
    assert set(got.column("p").to_pylist()) == {"b c"}
    # and we can write to it; delta-rs reads our commit
    with lake.transaction(features="R") as txn:
        txn.update("d", set={"v": "-1"}, where="p = 'd/e'")
    assert {r["v"] for r in backend.delta_rows("d") if r["p"] == "d/e"} == {-1.0}


def test_stats_from_arrow_match_the_parquet_footer():
    t = _batch(0, 50)
    buf = io.BytesIO()
    pq.write_table(t, buf)
    a = json.loads(stats_from_table(t))
    b = json.loads(stats_from_parquet(pq.ParquetFile(io.BytesIO(buf.getvalue())).metadata))
    assert a == b
    assert a["numRecords"] == 50
    assert a["minValues"]["id"] == 0 and a["maxValues"]["id"] == 49
    assert a["nullCount"]["name"] == 8  # ids 0, 7, ..., 49
    assert a["minValues"]["ts"] == "2024-01-01T00:00:00.000007Z"
    assert a["minValues"]["day"] == "2024-01-01"
    assert "flag" not in a["minValues"]  # no min/max for booleans


def test_our_stats_are_what_delta_rs_computes(local_backend):
    """delta-rs reads our stats strings and agrees on numRecords/min/max/nullCount."""
    lake = local_backend.lake()
    lake.create_table("s", SCHEMA)
    with lake.transaction(features="") as txn:
        txn.insert("s", _batch(0, 40))
    acts = pa.table(local_backend.delta("s").get_add_actions(flatten=True)).to_pylist()[0]
    assert acts["num_records"] == 40
    assert acts["min.id"] == 0 and acts["max.id"] == 39
    assert acts["null_count.name"] == 6
    assert acts["min.small"] == 0 and acts["max.small"] == 39


def _append_raw_commit(backend, table: str, lines: list[dict]) -> None:
    lake = backend.lake()
    v = lake.version(table) + 1
    body = "\n".join(json.dumps(x) for x in lines).encode()
    backend.store().put_if_absent(f"{table}/_delta_log/{v:020d}.json", body)


@pytest.mark.parametrize("feature, lines", [
    ("icebergCompatV2", [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 7,
                                       "writerFeatures": ["icebergCompatV2"]}}]),
    ("typeWidening-preview", [{"protocol": {
        "minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["typeWidening-preview"],
        "writerFeatures": ["typeWidening-preview"]}}]),
])
def test_unsupported_features_are_refused_and_nothing_is_written(backend, feature, lines):
    lake = backend.lake()
    lake.create_table("f", pa.schema([("id", pa.int64())]))
    with lake.transaction(features="") as txn:
        txn.insert("f", {"id": [1, 2]})
    if isinstance(lines, str):
        k, v = lines.split(":", 1)[1].split("=", 1)
        md = lake.snapshot("f").metadata.to_json()
        md["configuration"] = {k: v}
        lines = [{"metaData": md}]
    _append_raw_commit(backend, "f", [{"commitInfo": {"operation": "SET TBLPROPERTIES"}}, *lines])
    before = backend.all_keys()
    fresh = backend.lake()
    for features in ("", "R", "R,CT,I"):
        with pytest.raises(lv.UnsupportedTableFeatureError, match=feature):
            with fresh.transaction(features=features) as txn:
                txn.insert("f", {"id": [3]})
        with pytest.raises(lv.UnsupportedTableFeatureError, match=feature):
            with fresh.transaction(features=features) as txn:
                txn.delete("f", where="id = 1")
    assert backend.all_keys() == before


def test_corrupt_commit_is_reported_and_nothing_is_written(backend):
    lake = backend.lake()
    lake.create_table("c", pa.schema([("id", pa.int64())]))
    with lake.transaction(features="") as txn:
        txn.insert("c", {"id": [1]})
    backend.store().put_if_absent("c/_delta_log/00000000000000000002.json",
                                  b'{"add": {"path": "x.parquet"\n')
    before = backend.all_keys()
    for features in ("", "R"):
        with pytest.raises(lv.CorruptLogError, match="version 2"):
            backend.lake().read("c")
        with pytest.raises(lv.CorruptLogError):
            with backend.lake().transaction(features=features) as txn:
                txn.insert("c", {"id": [2]})
    assert backend.all_keys() == before


class _CheckpointWaitsForACommit(StoreWrapper):
    """The checkpoint GET waits (up to a timeout) until a commit after it is being fetched."""

    def __init__(self, inner, after: int) -> None:
        super().__init__(inner)
        self.after = after
        self.commit_asked = threading.Event()
        self.overlapped: bool | None = None

    def get(self, key):
        name = key.rsplit("/", 1)[-1]
        if name.endswith(".json") and name[:20].isdigit() and int(name[:20]) > self.after:
            self.commit_asked.set()
        return self.inner.get(key)

    def get_range(self, key, start, length=None):
        if ".checkpoint." in key:
            self.overlapped = self.commit_asked.wait(timeout=5)
        return self.inner.get_range(key, start, length)


def test_cold_snapshot_fetches_the_checkpoint_and_the_commits_after_it_together(backend):
    """A cold load costs one round trip for the checkpoint and the commits after it, not one
    after the other (issue 13); and still reads exactly the rows, and reports a missing commit."""
    lake = backend.lake()
    lake.create_table("h", pa.schema([("id", pa.int64())]),
                      properties={"delta.checkpointInterval": "5"})
    for i in range(7):
        with lake.transaction(features="") as txn:
            txn.insert("h", {"id": [i]})
    lake.flush()
    assert lake._client.log("h").last_checkpoint_version() == 5
    store = _CheckpointWaitsForACommit(backend.store(), after=5)
    cold = lv.Lake(backend.uri, storage_options=backend.storage_options or None, store=store)
    assert sorted(cold.read("h").column("id").to_pylist()) == list(range(7))
    assert store.overlapped is True
    backend.store().delete("h/_delta_log/00000000000000000006.json")
    with pytest.raises(lv.CorruptLogError, match="missing"):
        backend.lake().read("h")


def test_deletion_vector_descriptors_decode_as_the_protocol_examples_say():
    """PROTOCOL.md's examples: a random prefix becomes a folder, the UUID comes from Z85; its
    inline DV is in the legacy native format, refused by name (delta-rs refuses it too); a
    descriptor survives JSON, checkpoint columns and actions unchanged."""
    from lakevilla.delta.actions import AddFile
    from lakevilla.delta.deletion_vectors import DeletionVector, deleted_rows
    from lakevilla.delta.files import ActionTable

    on_disk = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4,
               "sizeInBytes": 40, "cardinality": 6}
    dv = DeletionVector.from_json(on_disk)
    assert dv.relative_file() == "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert dv.unique_id == "uab^-aqEH.-t@S}K{vb[*k^@4"
    inline = DeletionVector.from_json({"storageType": "i", "pathOrInlineDv":
                                       "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
                                       "sizeInBytes": 40, "cardinality": 6})
    with pytest.raises(lv.CorruptLogError, match="legacy native bitmap format"):
        deleted_rows(None, "t", "file:///lake", inline)  # inline: no store needed
    add = AddFile.from_json({"path": "p.parquet", "size": 1, "deletionVector": on_disk,
                             "baseRowId": 7, "defaultRowCommitVersion": 2,
                             "clusteringProvider": "liquid"})
    assert add.to_json()["deletionVector"] == on_disk
    back, = ActionTable.from_actions([add], AddFile).actions()
    assert back == add and back.to_json() == add.to_json()


def test_a_table_of_action_objects_makes_a_field_a_column_only_when_asked():
    """Every new log version makes such a table in every client that reads it (a snapshot's
    overlay, a commit's new files), and a prune needs two of its fields: each field becomes a
    column when first asked for, typed as a checkpoint's, and the objects go once all have."""
    from lakevilla.delta.actions import AddFile, RemoveFile
    from lakevilla.delta.files import ADD_SCHEMA, REMOVE_SCHEMA, ActionTable

    dv = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4,
          "sizeInBytes": 40, "cardinality": 6}
    adds = [AddFile.from_json({"path": f"d=1/p{i}.parquet", "size": 10 + i,
                               "partitionValues": {"d": "1"}, "modificationTime": 5,
                               "dataChange": i == 0, "stats": '{"numRecords": 3}',
                               "tags": {"k": "v"}, "deletionVector": dv, "baseRowId": 7,
                               "defaultRowCommitVersion": 2, "clusteringProvider": "liquid"})
            for i in range(2)] + [AddFile(path="bare.parquet", size=1)]
    removes = [RemoveFile(path="gone.parquet", deletion_timestamp=9, data_change=True,
                          partition_values={"d": "1"}, size=4, extended_file_metadata=True,
                          deletion_vector=adds[0].deletion_vector)]
    for kind, rows_, schema in ((AddFile, adds, ADD_SCHEMA), (RemoveFile, removes, REMOVE_SCHEMA)):
        t = ActionTable.from_actions(rows_, kind)
        assert t.num_rows == len(rows_)
        assert t.column("path").to_pylist() == [a.path for a in rows_]
        assert t.values("size") == [a.size for a in rows_]  # read from the objects
        assert list(t._columns) == ["path"]  # nothing else was built
        whole = t.table
        assert whole.schema.equals(schema) and set(t._columns) == set(schema.names)
        assert t._lazy is None  # every field is a column: the action objects are let go
        assert ActionTable(whole, kind).table.equals(whole)  # as a checkpoint's would be
        assert t.values("size") == [a.size for a in rows_]  # from the column now
        assert t.actions() == rows_
    assert ActionTable.from_actions([], AddFile).table.equals(ADD_SCHEMA.empty_table())


def test_replay_keys_a_logical_file_by_its_path_and_deletion_vector():
    """A remove cancels only the (path, DV) it names: a stale remove of a replaced DV leaves the
    file live with its new DV; the replaced DV stays a tombstone beside it."""
    from lakevilla.delta.actions import AddFile, Commit, Metadata, Protocol, RemoveFile
    from lakevilla.delta.checkpoint import CheckpointContents
    from lakevilla.delta.deletion_vectors import DeletionVector
    from lakevilla.delta.files import ActionTable
    from lakevilla.delta.snapshot import SnapshotBuilder

    def dv(n: int) -> DeletionVector:
        return DeletionVector("u", f"{n:020d}", size_in_bytes=10, cardinality=n, offset=1)

    def add(d: DeletionVector | None) -> AddFile:
        return AddFile("p.parquet", 10, deletion_vector=d)

    def remove(d: DeletionVector | None) -> RemoveFile:
        return RemoveFile("p.parquet", 1, deletion_vector=d)

    b = SnapshotBuilder("t")
    b.apply(0, Commit(protocol=Protocol(3, 7, ["deletionVectors"], ["deletionVectors"]),
                      metadata=Metadata("id", '{"type":"struct","fields":[]}'), adds=[add(None)]))
    b.apply(1, Commit(adds=[add(dv(1))], removes=[remove(None)]))
    b.apply(2, Commit(adds=[add(dv(2))], removes=[remove(dv(1))]))
    snap = b.build()
    assert snap.files["p.parquet"].deletion_vector == dv(2)
    assert snap.tombstones["p.parquet"].deletion_vector == dv(1)
    # the same from a checkpoint at 2 (the live add in its columns, not in the overlay)
    cp = CheckpointContents()
    cp.protocol, cp.metadata = snap.protocol, snap.metadata
    cp.adds = ActionTable.from_actions([add(dv(2))], AddFile)
    from_cp = SnapshotBuilder("t")
    from_cp.apply_checkpoint(2, cp)
    for builder in (b, from_cp):
        builder.apply(3, Commit(removes=[remove(dv(1))]))  # names a logical file no longer live
        assert builder.build().files["p.parquet"].deletion_vector == dv(2)
        builder.apply(4, Commit(removes=[remove(dv(2))]))
        assert "p.parquet" not in builder.build().files


def test_a_metadata_without_schema_string_is_a_schema_without_columns(tmp_path):
    """Delta Live Tables' placeholder version 0 (delta-rs' ``delta-live-table``) has a metaData
    without ``schemaString``; version 1 replaces it. Read as Delta on Spark reads it: no
    columns at version 0, the real schema after (delta-rs reads the latest version only)."""
    from tests.dv_tables import copy_table, delta_rs_rows

    path = copy_table(tmp_path, "delta-live-table")
    lake = lv.Lake(str(tmp_path), read_only=True)
    latest = lake.read("delta-live-table")
    want = DeltaTable(str(path)).schema().to_arrow()
    assert latest.num_rows == 0 and latest.column_names == [f.name for f in want]
    assert delta_rs_rows(path) == []
    first = lake.read("delta-live-table", version=0)
    assert (first.num_rows, first.column_names) == (0, [])


def test_a_log_of_checkpoints_only_reads_at_its_checkpoint(local_backend):
    """A log whose commits were all cleaned up (delta-rs' ``table-with-domain-metadata`` holds
    only ``108.checkpoint.parquet``) is read at its checkpoint's version by number too, and an
    older version is a ``VersionNotFoundError``, not a missing table."""
    lake = local_backend.lake()
    lake.create_table("k", pa.schema([("id", pa.int64())]))
    for i in range(3):
        with lake.transaction(features="") as txn:
            txn.insert("k", {"id": [i]})
    assert lake.maintenance.checkpoint("k") == 3
    store = local_backend.store()
    for key in [m.key for m in store.list("k/_delta_log/") if m.key.endswith(".json")]:
        store.delete(key)
    cold = local_backend.lake(read_only=True)
    assert sorted(cold.read("k", version=3).column("id").to_pylist()) == [0, 1, 2]
    assert local_backend.delta("k", version=3).version() == 3
    with pytest.raises(lv.VersionNotFoundError, match="has versions 3..3"):
        local_backend.lake(read_only=True).read("k", version=0)


class _ListingMisses(StoreWrapper):
    """A LIST that misses one commit below newer ones, as a local directory read in hash order
    while commits are written can."""

    def __init__(self, inner, missed: str) -> None:
        super().__init__(inner)
        self.missed = missed

    def list_page(self, prefix, start_after=None, token=None, max_keys=1000):
        page = self.inner.list_page(prefix, start_after=start_after, token=token,
                                    max_keys=max_keys)
        return dataclasses.replace(page, items=[m for m in page.items if m.key != self.missed])


def test_a_listing_that_missed_a_commit_between_newer_ones_does_not_make_it_gone(local_backend):
    """A hole between listed commits is asked for before it counts as cleaned up: time travel,
    history, lake.at and lake.changes still reach every version."""
    lake = local_backend.lake()
    lake.create_table("t", pa.schema([("id", pa.int64())]))
    for i in range(4):
        with lake.transaction("R") as txn:
            txn.insert("t", {"id": [i]})
    store = _ListingMisses(local_backend.store(), "t/_delta_log/00000000000000000002.json")
    seen = lv.Lake(local_backend.uri, store=store)
    assert seen._client.log("t").list_log().commits == [0, 1, 2, 3, 4]
    assert sorted(seen.read("t", version=2).column("id").to_pylist()) == [0, 1]
    assert [h.version for h in seen.history("t")] == [4, 3, 2, 1, 0]
    assert sorted(seen.changes("t")["t"].column("id").to_pylist()) == [0, 1, 2, 3]


def test_a_long_lived_clients_snapshots_fold_the_commits_they_replay(local_backend):
    """A client that follows a table commit by commit keeps each snapshot's files since the
    checkpoint as an overlay, rebuilt (and its statistics parsed again) for each new snapshot:
    a busy table without checkpoints would cost every read its whole history. Past 64 changes
    the overlay is folded into the snapshot's table, whose parsed statistics later snapshots
    share; the files are the ones delta-rs sees."""
    lake = local_backend.lake()
    lake.create_table("t", pa.schema([("id", pa.int64())]),
                      properties={"delta.checkpointInterval": "0"})  # no checkpoint: all replayed
    log = lake._client.log("t")
    for k in range(100):
        with lake.transaction("") as t:
            t.insert("t", {"id": [k]})
        snap = log.snapshot()
        assert len(snap.files.extra) <= 64
    assert log.last_checkpoint_version() == -1
    theirs = sorted(u.rsplit("/", 1)[1] for u in local_backend.delta("t").file_uris())
    assert sorted(p.rsplit("/", 1)[-1] for p in snap.files) == theirs and len(theirs) == 100
    assert rows(lake.read("t")) == local_backend.delta_rows("t")
