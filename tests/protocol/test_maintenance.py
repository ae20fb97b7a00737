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
from tests.helpers import claim_now

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
        crash_after=1, kinds=("put_if_absent",), predicate=lambda k, key: key.startswith("_lakevilla/txns/"))),
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
    assert cli(["cleanup", root, "--older-than", "0"]) == 2  # shorter than max transaction age: refused
    assert cli(["cleanup", root, "--older-than", "0", "--force"]) == 0
    assert "deleted 1 transaction record(s)" in capsys.readouterr().out
    assert records.read(lake.store, txn.attempt) is None
    assert cli(["history", root, "a"]) == 0
    out = capsys.readouterr().out
    assert "marker committed" in out and "UPDATE" in out
    stray = "a/part-00000-abandoned.parquet"  # a data file no version references
    lake.store.put(stray, b"PAR1")
    referenced = sorted(m.key for m in lake.store.list("a/") if m.key.endswith(".parquet") and m.key != stray)
    assert cli(["abandoned", root, "--min-age", "0"]) == 2  # shorter than max transaction age: refused
    capsys.readouterr()
    assert cli(["abandoned", root, "--min-age", "0", "--force", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"files": [{"table": "a", "key": stray}], "deleted": False}
    assert lake.store.exists(stray)  # listing deletes nothing
    assert cli(["abandoned", root, "--min-age", "0", "--force", "--delete", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"files": [{"table": "a", "key": stray}], "deleted": True}
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
