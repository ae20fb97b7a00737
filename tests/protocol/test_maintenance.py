"""Maintenance: the CLI, clean-up of finished records, checkpoints refused above open markers."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.cli import main as cli
from lakevilla.complex_txn import record as records
from lakevilla.store import FaultInjectingStore, FaultPlan, SimulatedCrash
from tests.conftest import rows
from tests.helpers import (
    accounts,
    claim_now,
    clock_at,
    entries_landed,
    numbered_table,
    value_of,
)

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])


def _lake(backend):
    lake = backend.lake()
    for t in ("a", "b"):
        lake.create_table(t, T)
        with lake.transaction("") as txn:
            txn.insert(t, {"id": [1], "value": [0]})
    return lake


def test_cli_recovers_a_crashed_commit_and_cleans_up(local_backend, capsys):
    lake = _lake(local_backend)
    dying = local_backend.lake(store=FaultInjectingStore(local_backend.store(), FaultPlan(
        crash_after=1, kinds=("put_if_absent",),
        predicate=lambda k, key: key.startswith("_lakevilla/txns/"))),
        marker_ttl=0.01)
    txn = dying.begin("R,CT")
    txn.update("a", set={"value": "1"}, where="id = 1")
    txn.update("b", set={"value": "1"}, where="id = 1")
    with pytest.raises(SimulatedCrash):
        txn.commit()
    root = local_backend.uri
    assert cli(["tables", root]) == 0
    assert capsys.readouterr().out.split() == ["a", "b"]
    time.sleep(0.05)  # let the 10 ms marker expiry pass: the condition is time itself
    assert cli(["--marker-ttl", "0.01", "recover", root]) == 0
    assert "1 records completed" in capsys.readouterr().out
    assert [r["value"] for r in lake.read("a").to_pylist()] == [1]
    assert [r["value"] for r in lake.read("b").to_pylist()] == [1]
    assert records.read(lake.store, txn.attempt).state == records.COMMITTED
    # shorter than max transaction age: refused
    assert cli(["cleanup", root, "--older-than", "0"]) == 2
    assert cli(["cleanup", root, "--older-than", "0", "--force"]) == 0
    assert "deleted 1 transaction record(s)" in capsys.readouterr().out
    assert records.read(lake.store, txn.attempt) is None
    assert cli(["history", root, "a"]) == 0
    out = capsys.readouterr().out
    assert "marker committed" in out and "UPDATE" in out
    stray = "a/part-00000-abandoned.parquet"  # a data file no version references
    lake.store.put(stray, b"PAR1")
    referenced = sorted(m.key for m in lake.store.list("a/")
                        if m.key.endswith(".parquet") and m.key != stray)
    # shorter than max transaction age: refused
    assert cli(["abandoned", root, "--min-age", "0"]) == 2
    capsys.readouterr()
    assert cli(["abandoned", root, "--min-age", "0", "--force", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"files": [{"table": "a", "key": stray}],
                                                   "deleted": False}
    assert lake.store.exists(stray)  # listing deletes nothing
    assert cli(["abandoned", root, "--min-age", "0", "--force", "--delete", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"files": [{"table": "a", "key": stray}],
                                                   "deleted": True}
    assert not lake.store.exists(stray)
    assert all(lake.store.exists(k) for k in referenced)
    assert [r["value"] for r in lake.read("a").to_pylist()] == [1]
    assert cli(["abandoned", root, "--min-age", "0", "--force", "--delete"]) == 0
    assert "0 abandoned file(s) deleted" in capsys.readouterr().err
    assert cli(["history", root, "../etc"]) == 2  # a clear error, not a traceback


def test_checkpoint_is_refused_above_an_open_marker(backend):
    lake = _lake(backend)
    txn = lake.begin("R")
    txn.update("a", set={"value": "2"}, where="id = 1")
    claim_now(txn, "a")
    with pytest.raises(lv.InvalidArgumentError, match="open marker"):
        lake.maintenance.checkpoint("a")
    txn.commit()
    v = lake.maintenance.checkpoint("a")
    assert backend.store().exists(f"a/_delta_log/{v:020d}.checkpoint.parquet")
    assert backend.delta_rows("a") == [{"id": 1, "value": 2}]


def test_a_checkpointer_that_saw_a_marker_running_checkpoints_once_it_closed(local_backend):
    """The log keeps a tail marker as final (its data never changes), but its state does: the
    check before a checkpoint reads a marker it once saw running again, or a client that read
    the table during someone's transaction would refuse to checkpoint it for good."""
    writer = _lake(local_backend)
    other = local_backend.lake()
    txn = writer.begin("R")
    txn.update("a", set={"value": "2"}, where="id = 1")
    assert other.read("a").num_rows == 1  # other's log now holds the running marker
    txn.commit()
    writer.flush()  # the marker is closed
    v = other.maintenance.checkpoint("a")
    assert local_backend.store().exists(f"a/_delta_log/{v:020d}.checkpoint.parquet")
    assert local_backend.delta_rows("a") == [{"id": 1, "value": 2}]


def test_abandoned_files_of_a_crashed_transaction_are_found_and_deleted(local_backend):
    from lakevilla.store import FaultInjectingStore, FaultPlan, SimulatedCrash

    numbered_table(local_backend)
    base = local_backend.store()
    dying = local_backend.lake(store=FaultInjectingStore(base, FaultPlan(
        crash_before=1, kinds=("put_if_absent",),
        predicate=lambda k, key: key.endswith(".json") and "_delta_log" in key
        and not key.endswith("000001.json"))))
    txn = dying.begin("R")
    txn.insert("t", {"id": [50], "value": [1]})
    entries_landed(txn)
    with pytest.raises(SimulatedCrash):
        txn.commit()  # data file and sublog written, then the commit's put dies
    lake = local_backend.lake()
    # its sublog names them: it may be resumed
    assert lake.maintenance.abandoned_files(min_age=0, force=True) == []
    # no marker, no decision
    assert lake.maintenance.cleanup(older_than=0, force=True)["sublogs"] == 1
    # too young: might belong to a live writer
    assert lake.maintenance.abandoned_files(min_age=60, force=True) == []
    found = lake.maintenance.abandoned_files(min_age=0, force=True)
    assert len(found) >= 1 and all(k.endswith(".parquet") for _, k in found)
    lake.maintenance.delete_abandoned_files(min_age=0, force=True)
    assert lake.maintenance.abandoned_files(min_age=0, force=True) == []
    assert rows(lake.read("t")) == local_backend.delta_rows("t")


def test_cleanup_deletes_sublogs_and_records_only_past_their_retention(local_backend):
    lake = accounts(local_backend, delete_sublogs=False)
    with lake.transaction("R,CT") as t:
        t.update("a", set={"value": "1"}, where="id = 1")
        t.update("b", set={"value": "1"}, where="id = 1")
    lake.flush()
    sub = f"_lakevilla/txns/{t.id}/"
    assert len(list(lake.store.list(sub))) == 2
    assert records.read(lake.store, f"{t.id}.0").state == records.COMMITTED
    young = local_backend.lake(clock=clock_at(3000.0)).maintenance.cleanup(
        older_than=3600, force=True)
    assert young["sublogs"] == 0 and young["records"] == 0
    assert (len(list(lake.store.list(sub))) == 2
            and records.read(lake.store, f"{t.id}.0") is not None)
    old = local_backend.lake(clock=clock_at(4000.0)).maintenance.cleanup(
        older_than=3600, force=True)
    assert old["sublogs"] == 2 and old["records"] == 1
    assert list(lake.store.list(sub)) == [] and records.read(lake.store, f"{t.id}.0") is None
    assert (value_of(lake, "a"), value_of(lake, "b")) == (1, 1)


def test_cleanup_keeps_exactly_keep_global_entries_before_the_head(local_backend):
    lake = accounts(local_backend, tables=("a",), gvl_keep=0)
    for k in range(8):
        with lake.transaction("I") as t:
            t.update("a", set={"value": str(k)}, where="id = 1")
    head = lake._client.gvl.head().seq
    done = lake.maintenance.cleanup(keep_global=3, older_than=0, force=True)
    left = sorted(int(m.key.rsplit("/", 1)[1][:-5]) for m in lake.store.list("_lakevilla/gvl/")
                  if m.key.rsplit("/", 1)[1][:-5].isdigit())
    assert left == list(range(head - 3, head + 1))
    assert done["global_entries"] == head - 3
    assert lake._client.gvl.read_hint().horizon == head - 3  # the horizon moved with the deletion
    assert lake.status().to_json()["global_log"]["oldest"] == head - 3
    with local_backend.lake().transaction("I") as r:
        assert value_of(r, "a") == 7


def test_automatic_checkpoint_waits_below_an_open_marker(local_backend):
    lake = local_backend.lake()
    lake.create_table("a", T, properties={"delta.checkpointInterval": "2"})
    holder = lake.begin("R")
    holder.insert("a", {"id": [1], "value": [1]})
    claim_now(holder, "a")
    marker = holder.tables["a"].marker.version
    for k in range(4):  # plain commits reach versions where a checkpoint is due
        with lake.transaction("") as t:
            t.insert("a", {"id": [10 + k], "value": [k]})
    lake.flush()
    log = lake._client.log("a")
    assert log.last_checkpoint_version() < marker
    holder.commit()
    with lake.transaction("") as t:
        t.insert("a", {"id": [20, 21], "value": [0, 0]})
    with lake.transaction("") as t:
        t.insert("a", {"id": [22], "value": [0]})
    lake.flush()
    assert log.last_checkpoint_version() > marker  # due again once the marker closed
    assert rows(lake.read("a")) == local_backend.delta_rows("a")


def test_a_due_checkpoint_goes_just_below_the_lowest_open_marker(local_backend):
    """Writers that always have a marker open would leave a table without any checkpoint: a
    due one lands below the lowest open marker instead, where every version is final."""
    lake = local_backend.lake()
    lake.create_table("a", T, properties={"delta.checkpointInterval": "4"})
    for k in range(3):
        with lake.transaction("") as t:
            t.insert("a", {"id": [k], "value": [k]})
    holder = lake.begin("R")
    holder.insert("a", {"id": [9], "value": [9]})
    claim_now(holder, "a")
    marker = holder.tables["a"].marker.version
    assert marker == 4
    for k in range(4):  # version 8 is due, with the marker still open
        with lake.transaction("") as t:
            t.insert("a", {"id": [10 + k], "value": [k]})
    lake.flush()
    log = lake._client.log("a")
    assert log.last_checkpoint_version() == marker - 1
    assert local_backend.store().exists(f"a/_delta_log/{marker - 1:020d}.checkpoint.parquet")
    holder.commit()
    lake.flush()
    assert rows(local_backend.lake().read("a")) == local_backend.delta_rows("a")
    assert len(local_backend.delta_rows("a")) == 8


def test_maintenance_never_restates_a_table_with_a_feature_it_cannot_write(tmp_path):
    """A table with a writer feature lakevilla does not write (icebergCompatV2, at writer
    version 7): its actions may name files the sweep cannot see. Clean-up must not take any of its
    files for abandoned, nor a checkpoint restate its log."""
    from deltalake import write_deltalake

    root = tmp_path / "lake"
    write_deltalake(str(root / "feed"), pa.table({"id": [1, 2, 3], "v": [10, 20, 30]}))
    (root / "feed" / "_delta_log" / f"{1:020d}.json").write_text(json.dumps(
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7,
                      "writerFeatures": ["icebergCompatV2"]}}) + "\n")
    (root / "feed" / "unknown.parquet").write_bytes(b"named by an action we do not know")
    write_deltalake(str(root / "plain"), pa.table({"id": [1]}))
    (root / "plain" / "stray.parquet").write_bytes(b"not referenced")
    lake = lv.Lake(str(root))

    swept = lake.maintenance.abandoned_files(min_age=0, force=True)
    assert swept == [("plain", "plain/stray.parquet")]  # the sweep skips the table, not the lake
    with pytest.raises(lv.UnsupportedTableFeatureError, match="icebergCompatV2"):
        lake.maintenance.delete_abandoned_files("feed", min_age=0, force=True)
    with pytest.raises(lv.UnsupportedTableFeatureError, match="icebergCompatV2"):
        lake.maintenance.checkpoint("feed")
    assert (root / "feed" / "unknown.parquet").exists()
    assert not any(p.name.endswith(".checkpoint.parquet")
                   for p in (root / "feed" / "_delta_log").iterdir())
    assert lake.maintenance.checkpoint("plain") == 0


def test_the_sweep_keeps_the_change_files_commits_name(tmp_path):
    """A table delta-rs wrote with a change data feed: its `_change_data/` files are named by
    `cdc` actions only, in commits (never in a checkpoint). The sweep keeps them while a commit
    names them, and a checkpoint of the table drops the cdc actions."""
    from deltalake import DeltaTable, write_deltalake

    root = tmp_path / "lake"
    write_deltalake(str(root / "feed"), pa.table({"id": [1, 2, 3], "v": [10, 20, 30]}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    DeltaTable(str(root / "feed")).update(predicate="id = 2", updates={"v": "99"})
    changes = list((root / "feed" / "_change_data").iterdir())
    assert len(changes) == 1
    (root / "feed" / "_change_data" / "stray.parquet").write_bytes(b"not referenced")
    lake = lv.Lake(str(root))
    assert lake.maintenance.delete_abandoned_files("feed", min_age=0, force=True) == [
        ("feed", "feed/_change_data/stray.parquet")]
    assert lake.maintenance.checkpoint("feed") == 1
    assert changes[0].exists()
    feed = DeltaTable(str(root / "feed")).load_cdf(starting_version=1).read_all()
    assert sorted(feed.column("_change_type").to_pylist()) == ["update_postimage",
                                                                "update_preimage"]
