"""A CT transaction's first read of a table waits for a running writer whose marker says it will
change the rows read (``core/read_wait.py``): it then reads them as that writer left them, instead
of reading what is about to change and aborting at commit. It does not wait for a writer that
changes other rows or other columns, nor for one that ended, nor longer than its wait limit; other
feature sets read at once."""

from __future__ import annotations

import threading

import pytest

import lakevilla as lv
from lakevilla.markers.marker import marker_of
from lakevilla.scan.conflicts import Change
from tests.conftest import rows
from tests.helpers import claim_now, two_files, wait_until


def _running_writer(backend, work=None, mode="tail"):
    """P holds a running marker on t, saying what its statements change (by default: ``value``
    of id 5, in the file of ids 5-8); in place, P claims it at its first write."""
    lake = two_files(backend)
    p = backend.lake(commit_mode=mode).begin("R")
    if work is None:
        p.update("t", set={"value": "value + 1"}, where="id = 5")
    else:
        work(p)
    claim_now(p, "t")
    return lake, p


def _read_in_thread(txn, **kw):
    got: dict = {}

    def run() -> None:
        got["rows"] = rows(txn.read("t", **kw))
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, got


@pytest.mark.parametrize(("work", "changes", "after"), [
    (None, [{"where": "id = 5", "columns": ["value"]}], [{"id": 5, "value": 51}]),
    (lambda p: p.delete("t", where="id = 5"), [{"where": "id = 5", "columns": None}], []),
    (lambda p: p.insert("t", {"id": [9], "value": [90], "note": ["x"]}, schema_mode="merge"),
     [{"where": None, "columns": None}], [{"id": 5, "value": 50, "note": None}]),
], ids=["update", "delete", "new-column"])
def test_a_first_read_of_rows_a_queued_writer_will_change_waits_for_it(
        local_backend, work, changes, after):
    """Without the wait, T reads the rows as they were and, using them, aborts at commit: P's
    commit changed what it read (its rows, or the table's columns)."""
    lake, p = _running_writer(local_backend, work)
    marker = marker_of(p.tables["t"].log.read_commit_raw(p.tables["t"].marker.version)[0])
    assert marker.changes == changes
    t = local_backend.lake(wait_timeout=20.0).begin("R,CT")
    th, got = _read_in_thread(t, where="id = 5")
    wait_until(lambda: t.stats["read_waits"] == 1, "T's read to wait for P")
    assert th.is_alive()  # P still runs: so does T's wait
    p.commit()
    th.join(30)
    assert got["rows"] == after  # as P left them
    t.update("t", set={"value": "value + 1000"}, where="id = 6")
    t.commit()
    assert t.stats["read_waits_timed_out"] == 0 and t.stats["redos"] == 0
    assert {r["id"]: r["value"] for r in rows(lake.read("t"))}[6] == 1060
    assert rows(lake.read("t")) == local_backend.delta_rows("t")


@pytest.mark.parametrize(("features", "read", "work", "mode"), [
    ("R,CT", {"where": "id = 1"}, None, "tail"),  # other rows (another file)
    ("R,CT", {"where": "id = 5", "columns": ["id"]}, None, "tail"),  # other columns
    ("R,CT", {"where": "id = 5"},  # P only appends
     lambda p: p.insert("t", {"id": [9], "value": [90]}), "tail"),
    # claimed at P's first write: its marker cannot say what P's later statements change, and
    # may be held as long as P runs them
    ("R,CT", {"where": "id = 5"}, None, "in_place"),
    ("R", {"where": "id = 5"}, None, "tail"),  # other feature sets read at once
    ("R,CT,I", {"where": "id = 5"}, None, "tail"),
], ids=["other-rows", "other-columns", "appends-only", "in-place-writer", "R", "R,CT,I"])
def test_a_first_read_does_not_wait_for_a_writer_that_cannot_change_it(
        local_backend, features, read, work, mode):
    _, p = _running_writer(local_backend, work, mode)
    t = local_backend.lake(wait_timeout=5.0).begin(features)
    got = rows(t.read("t", **read))
    assert t.stats["read_waits"] == 0
    assert got and all(r.get("value", 50) in (10, 50) for r in got)  # as before P
    p.abort()


def test_a_first_read_stops_waiting_when_the_writer_aborts(local_backend):
    """An abort shows only in the writer's marker, which the wait reads again."""
    _, p = _running_writer(local_backend)
    t = local_backend.lake(wait_timeout=5.0).begin("R,CT")
    th, got = _read_in_thread(t, where="id = 5")
    wait_until(lambda: t.stats["read_waits"] == 1, "T's read to wait for P")
    p.abort()
    th.join(30)
    assert got["rows"] == [{"id": 5, "value": 50}]
    assert t.stats["read_waits_timed_out"] == 0


def test_a_first_read_waits_no_longer_than_the_wait_limit(local_backend):
    _, p = _running_writer(local_backend)
    t = local_backend.lake(wait_timeout=0.5).begin("R,CT")
    th, got = _read_in_thread(t, where="id = 5")
    th.join(20)
    assert not th.is_alive() and got["rows"] == [{"id": 5, "value": 50}]
    assert t.stats["read_waits"] == 1 and t.stats["read_waits_timed_out"] == 1
    p.abort()


def test_a_markers_changes_are_checked_when_read():
    assert Change.from_json({"where": "id = 5", "columns": ["Value"]}) == Change("id = 5",
                                                                                  ("value",))
    assert Change.from_json({}) == Change()
    for bad in ([], {"where": 5}, {"columns": "value"}, {"columns": [1]}):
        with pytest.raises(lv.CorruptLogError):
            Change.from_json(bad)
