"""Clustered tables (writer feature ``clustering``, domain ``delta.clustering``): lakevilla writes
them without clustering. Every statement, OPTIMIZE (which compacts without clustering: its files
carry no ``clusteringProvider``) and a checkpoint (V2 here, which the table asks for) keep the
clustering domain and another application's domain as they were; the files written have
statistics for the clustering columns; delta-rs reads the rows, from the checkpoint alone."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakevilla as lv

CLUSTERING = {"domain": "delta.clustering", "configuration": json.dumps(
    {"clusteringColumns": ["id"]}), "removed": False}
OTHER = {"domain": "someapp", "configuration": '{"k":1}', "removed": False}
ROWS = [{"id": i, "value": i * 10} for i in range(4)]


def clustered_table(root, policy: str = "v2") -> None:
    """Version 0 as a clustering writer leaves it: the feature, the two domains, and one file
    clustered by ``liquid``."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    pq.write_table(pa.table({"id": pa.array([r["id"] for r in ROWS], pa.int64()),
                             "value": pa.array([r["value"] for r in ROWS], pa.int64())}),
                   root / "c0.parquet")
    stats = {"numRecords": 4, "minValues": {"id": 0, "value": 0},
             "maxValues": {"id": 3, "value": 30}, "nullCount": {"id": 0, "value": 0}}
    fields = [{"name": n, "type": "long", "nullable": True, "metadata": {}}
              for n in ("id", "value")]
    features = ["domainMetadata", "clustering", "v2Checkpoint"]
    actions = [
        {"commitInfo": {"timestamp": 1, "operation": "CREATE TABLE"}},
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                      "readerFeatures": ["v2Checkpoint"], "writerFeatures": features}},
        {"metaData": {"id": "clustered", "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps({"type": "struct", "fields": fields}),
                      "partitionColumns": [], "createdTime": 1,
                      "configuration": {"delta.checkpointPolicy": policy}}},
        {"domainMetadata": CLUSTERING}, {"domainMetadata": OTHER},
        {"add": {"path": "c0.parquet", "partitionValues": {}, "dataChange": True,
                 "size": os.path.getsize(root / "c0.parquet"), "modificationTime": 1,
                 "stats": json.dumps(stats), "clusteringProvider": "liquid"}}]
    (log / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: r["id"])


@pytest.mark.parametrize("features", ["", "R,CT,I"])
def test_writes_keep_the_clustering_domain_through_commits_and_a_checkpoint(tmp_path, features):
    root = tmp_path / "lake"
    clustered_table(root / "t")
    lake = lv.Lake("file://" + str(root))
    with lake.transaction(features) as txn:
        txn.insert("t", {"id": [10, 11], "value": [100, 110]})
        txn.update("t", set={"value": "value + 1"}, where="id = 2")
    with lake.transaction(features) as txn:
        txn.delete("t", where="id = 11")
        txn.set_properties("t", {"delta.appendOnly": "false"})
    with lake.transaction(features) as txn:
        txn.optimize("t")
    want = [r if r["id"] != 2 else {"id": 2, "value": 21} for r in ROWS] + \
        [{"id": 10, "value": 100}]
    snap = lake.snapshot("t")
    assert snap.domains == {"delta.clustering": CLUSTERING, "someapp": OTHER}
    assert "clustering" in snap.protocol.writer_features
    # OPTIMIZE compacted without clustering: its one file is not marked clustered
    (only,) = snap.files.values()
    assert "clusteringProvider" not in only.extra
    assert {"id", "value"} <= set(only.parsed_stats["minValues"])
    v = lake.maintenance.checkpoint("t")
    for f in (root / "t" / "_delta_log").glob("*.json"):
        if int(f.name[:20]) < v:
            f.unlink()
    with lv.Lake("file://" + str(root)) as fresh:
        again = fresh.snapshot("t")
        assert again.domains == snap.domains and again.version == v
        assert _sorted(fresh.read("t").to_pylist()) == _sorted(want)
    from deltalake import DeltaTable, QueryBuilder

    got = pa.table(QueryBuilder().register("t", DeltaTable(str(root / "t")))
                   .execute("SELECT * FROM t")).to_pylist()
    assert _sorted(got) == _sorted(want)


def test_a_clustered_table_is_writable_and_no_longer_refused(tmp_path):
    """The features a clustering writer sets are ones lakevilla writes; a classic checkpoint
    keeps the domain and the ``clusteringProvider`` of the file a clustering writer added."""
    from lakevilla.delta.features import check_writable

    clustered_table(tmp_path / "t", policy="classic")
    lake = lv.Lake(str(tmp_path))
    snap = lake.snapshot("t")
    check_writable("t", snap.protocol, snap.metadata)
    with lake.transaction("R") as txn:
        txn.insert("t", {"id": [5], "value": [50]})
    v = lake.maintenance.checkpoint("t")  # a classic one: the table asks for no V2
    assert (tmp_path / "t" / "_delta_log" / f"{v:020d}.checkpoint.parquet").exists()
    for f in (tmp_path / "t" / "_delta_log").glob("*.json"):
        f.unlink()
    again = lv.Lake(str(tmp_path)).snapshot("t")
    assert again.domains["delta.clustering"] == CLUSTERING
    # the clustered file is still marked so, our new one is not
    assert {p: a.extra.get("clusteringProvider") for p, a in again.files.items()} == \
        {"c0.parquet": "liquid", next(p for p in again.files if p != "c0.parquet"): None}
