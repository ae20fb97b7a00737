"""Log records under ``lakevilla.*``: a wait (on whom, how long), a redo, a marker shift and
recoveries, each captured with ``caplog``; nothing printed by default."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.store import FaultInjectingStore, FaultPlan, SimulatedCrash
from tests.helpers import claim_now

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])


@pytest.fixture
def lake(local_backend):
    lake = local_backend.lake()
    for t in ("a", "b"):
        lake.create_table(t, T)
        with lake.transaction("") as txn:
            txn.insert(t, {"id": [1, 2, 3], "value": [0, 0, 0]})
    yield lake
    lake.close()


def events(caplog, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "lakevilla", {}).get("event") == name]


def test_silent_by_default():
    """Without logging configured, a redo and a recovery print nothing (NullHandler)."""
    # the child's two long lines are split as adjacent literals (the string is unchanged)
    code = ("""
import tempfile, time, pyarrow as pa, lakevilla as lv
lake = lv.Lake(tempfile.mkdtemp())
lake.create_table("a", pa.schema([("id", pa.int64()), ("v", pa.int64())]),"""
            """ data={"id": [1], "v": [0]})
first, second = lake.begin("R"), lake.begin("R")
first.update("a", set={"v": "v + 1"})
second.update("a", set={"v": "v + 1"})
first.commit(); second.commit()
assert second.stats["redos"] == 1
past = lv.Lake(lake.root_uri, clock=lambda: time.time() - 3600, commit_mode="in_place")"""
            """  # claims at its write
t = past.begin("R"); t.update("a", set={"v": "0"}); past.close()
assert lake.recover().acted == 1
print("ok")
""")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout == "ok\n" and out.stderr == "", out.stderr
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("lakevilla").handlers)


def test_a_wait_is_logged_with_whom_and_how_long(lake, caplog):
    caplog.set_level(logging.INFO, logger="lakevilla")
    first = lake.begin("R")
    first.update("a", set={"value": "1"}, where="id = 1")
    claim_now(first, "a")
    second = lake.begin("R")
    second.update("a", set={"value": "2"}, where="id = 2")  # its commit waits for first's marker
    done = threading.Thread(target=second.commit)
    done.start()
    deadline = time.monotonic() + 30
    while second.stats["wait_rounds"] == 0 and time.monotonic() < deadline:
        time.sleep(0.002)  # awaiting a condition: second's commit is polling first's marker
    time.sleep(0.05)  # let the wait last measurably
    first.commit()
    done.join(30)
    assert second.state == "committed"
    [rec] = events(caplog, "wait")
    assert rec.name == "lakevilla.transaction" and rec.levelno == logging.INFO
    assert rec.lakevilla["txn"] == second.id and rec.lakevilla["seconds"] >= 0.05
    assert rec.lakevilla["on"] == [f"{first.attempt} at a@{first.tables['a'].marker.version}"]
    assert first.attempt in rec.getMessage() and "waited" in rec.getMessage()


def test_a_redo_is_logged(lake, caplog):
    caplog.set_level(logging.INFO, logger="lakevilla")
    first, second = lake.begin("R"), lake.begin("R")
    first.update("a", set={"value": "value * 2 + 1"}, where="id < 3")
    second.update("a", set={"value": "value + 10"}, where="id = 1")  # on the snapshot first changes
    first.commit()
    second.commit()
    [rec] = events(caplog, "redo")
    assert rec.lakevilla["txn"] == second.id and rec.lakevilla["table"] == "a"
    assert (rec.lakevilla["statements"] == ["update"]
            and rec.lakevilla["version"] == first.result.versions["a"])
    assert "redid 1 statement(s) on a" in rec.getMessage()


def test_a_marker_shift_is_logged(local_backend, lake, caplog):
    caplog.set_level(logging.INFO, logger="lakevilla")
    holder = lake.begin("R")
    holder.update("a", set={"value": "1"}, where="id = 1")
    claim_now(holder, "a")  # holds a@v and never commits here
    impatient = local_backend.lake(wait_timeout=0.3, shift_timeout=0.02, max_shifts=1)
    txn = impatient.begin("R,CT")
    txn.update("a", set={"value": "2"}, where="id = 2")
    txn.update("b", set={"value": "2"}, where="id = 2")
    with pytest.raises(lv.TransactionAborted, match="timed out"):
        txn.commit()
    holder.abort()
    shifts = events(caplog, "shift")
    assert shifts and all(r.lakevilla["txn"] == txn.id for r in shifts)
    assert ("rule IV" in shifts[0].lakevilla["reason"]
            and set(shifts[0].lakevilla["markers"]) == {"a", "b"})


def test_recoveries_are_logged(local_backend, lake, caplog):
    caplog.set_level(logging.INFO, logger="lakevilla")
    dying = local_backend.lake(store=FaultInjectingStore(local_backend.store(), FaultPlan(
        crash_after=1, kinds=("put_if_absent",),
        predicate=lambda k, key: key.startswith("_lakevilla/txns/"))))
    decided = dying.begin("R,CT")
    decided.update("a", set={"value": "6"}, where="id = 2")
    decided.update("b", set={"value": "6"}, where="id = 2")
    with pytest.raises(SimulatedCrash):
        decided.commit()  # decided (record COMMITTING), died before writing its table commits
    # its markers expired an hour ago (in place, R claims its marker at its first write)
    past = local_backend.lake(clock=lambda: time.time() - 3600, commit_mode="in_place")
    stalled = past.begin("R")
    stalled.update("a", set={"value": "5"}, where="id = 1")
    past.close()
    report = lake.recover()
    [freed] = events(caplog, "recover")
    assert freed.name == "lakevilla.recovery" and freed.levelno == logging.WARNING
    assert (freed.lakevilla["attempt"], freed.lakevilla["table"], freed.lakevilla["outcome"]) == (
        stalled.attempt, "a", "freed")
    [rolled] = events(caplog, "roll_forward")
    assert (rolled.lakevilla["attempt"] == decided.attempt
            and set(rolled.lakevilla["versions"]) == {"a", "b"})
    [summary] = events(caplog, "recovery_report")
    assert (summary.name == "lakevilla.maintenance"
            and summary.lakevilla["acted"] == report.acted == 2)


def test_a_table_new_to_the_global_log_is_joined_once_and_said_so(lake, caplog, local_backend):
    """The first isolated transaction that reads a table the global log does not know examines
    the commits after what its checkpoint promises (``lakevilla.joinFrom``: single-table commits
    up to there) and logs it, with how many and from where; it joins the table to the global
    log, so the next isolated reader starts from there and logs nothing."""
    from lakevilla.store import CountingStore

    for k in range(12):  # lakevilla checkpoints at 10, with its join promise
        with lake.transaction("") as txn:
            txn.insert("a", {"id": [10 + k], "value": [k]})
    newest = lake.version("a")
    assert lake._client.log("a").last_checkpoint_version() == 10
    caplog.set_level(logging.INFO, logger="lakevilla")
    counts = []
    for _ in range(2):
        counting = CountingStore(local_backend.store())
        with local_backend.lake(store=counting).transaction("I") as r:
            # no data file can match: the log is the cost
            assert r.read("a", where="id < 0").num_rows == 0
        counts.append(dict(counting.counts))
    gets = [c["get"] for c in counts]
    joined = events(caplog, "join")
    assert [(r.lakevilla["table"], r.lakevilla["commits"], r.lakevilla["start"])
            for r in joined] == [("a", newest - 10, 10)]
    # the join reads the commits the snapshot reads anyway (no GET more than the known read),
    # LISTs and appends once (the first entry and the hint); the known read only GETs
    assert newest + 1 > gets[0] >= gets[1], counts
    assert counts[0]["put_if_absent"] == 2 and set(counts[1]) == {"get"}, counts
