"""Reading a table as it was: by version, by timestamp (as Delta and delta-rs resolve it), and
its history, newest first, with what lakevilla wrote into each commit."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pyarrow as pa
import pytest

import lakevilla as lv

T = pa.schema([("id", pa.int64()), ("v", pa.int64())])
# seconds (2023-11-14T22:13:20Z): commit file times are set from here, a minute apart
EPOCH = 1_700_000_000


def _table(tmp_path: Path, versions: int = 4) -> tuple[lv.Lake, Path]:
    """``t`` at versions 0 (create) .. versions-1 (one insert each), commit files written a
    minute apart from ``EPOCH``."""
    lake = lv.Lake(str(tmp_path / "lake"))
    lake.create_table("t", T)
    for i in range(1, versions):
        with lake.transaction("") as txn:
            txn.insert("t", {"id": [i], "v": [i]})
    log = tmp_path / "lake" / "t" / "_delta_log"
    for v in range(versions):
        os.utime(log / f"{v:020d}.json", (EPOCH + 60 * v, EPOCH + 60 * v))
    return lake, log


def _ids(table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def _at(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def test_read_by_version_and_a_version_that_does_not_exist_is_named(tmp_path):
    lake, _ = _table(tmp_path)
    assert [_ids(lake.read("t", version=v)) for v in range(4)] == [[], [1], [1, 2], [1, 2, 3]]
    for bad in (99, 4, -1):
        with pytest.raises(lv.VersionNotFoundError,
                           match=r"'t' has versions 0\.\.3.*version " + str(bad)):
            lake.read("t", version=bad)
    with pytest.raises(lv.InvalidArgumentError, match="version must be an integer"):
        lake.read("t", version="2")  # type: ignore[arg-type]
    with pytest.raises(lv.InvalidArgumentError, match="version or timestamp, not both"):
        lake.read("t", version=1, timestamp=_at(EPOCH))


@pytest.mark.parametrize("offset", [0, 30, 60, 119, 121, 180, 10_000])
def test_read_by_timestamp_is_the_newest_version_at_or_before_it_as_delta_rs_reads_it(
        tmp_path, offset):
    from deltalake import DeltaTable

    lake, _ = _table(tmp_path)
    when = _at(EPOCH + offset)
    expected = min(offset // 60, 3)
    judge = DeltaTable(str(tmp_path / "lake" / "t"))
    judge.load_as_version(when)
    assert judge.version() == expected
    assert _ids(lake.read("t", timestamp=when)) == list(range(1, expected + 1))
    assert lake.snapshot("t", timestamp=when).version == expected
    iso = when.strftime("%Y-%m-%dT%H:%M:%S") + "Z"  # an ISO string, Z for UTC
    assert lake.snapshot("t", timestamp=iso).version == expected
    naive = when.replace(tzinfo=None)  # a naive datetime is UTC
    assert lake.snapshot("t", timestamp=naive).version == expected


def test_a_moment_before_the_table_is_refused_naming_its_oldest_version(tmp_path):
    lake, _ = _table(tmp_path)
    with pytest.raises(lv.VersionNotFoundError,
                       match=r"no version written at or before .*oldest readable "
                             r"version is from 2023-11-14T22:13:20"):
        lake.read("t", timestamp=_at(EPOCH - 1))
    with pytest.raises(lv.InvalidArgumentError, match="ISO-8601"):
        lake.read("t", timestamp="yesterday")


def test_times_out_of_order_are_made_monotonic_as_delta_does(tmp_path):
    """A version whose file is newer than the next one's (a marker rewritten by its heartbeat):
    the next one counts as 1 ms after it, so the versions' times never go backwards."""
    lake, log = _table(tmp_path)
    os.utime(log / f"{1:020d}.json", (EPOCH + 150, EPOCH + 150))  # after version 2's file
    times = {e.version: e.timestamp.timestamp() for e in lake.history("t")}
    assert (times[1] == EPOCH + 150 and times[2] == pytest.approx(EPOCH + 150.001)
            and times[3] == EPOCH + 180)
    assert lake.snapshot("t", timestamp=_at(EPOCH + 130)).version == 0
    assert lake.snapshot("t", timestamp=_at(EPOCH + 150.0005)).version == 1


def test_history_is_typed_newest_first_and_names_lakevilla_transactions(tmp_path):
    lake, _ = _table(tmp_path, versions=2)
    lake.create_table("u", T)
    with lake.transaction("R,CT") as txn:  # two tables: a record decides, markers order it
        txn.update("t", set={"v": "v + 1"}, where="id = 1")
        txn.insert("u", {"id": [1], "v": [1]})
    lake.flush()  # the marker closes behind the commit: its file time moves then
    hist = lake.history("t")
    assert [e.version for e in hist] == [3, 2, 1, 0]  # CT claims its marker at commit, then commits
    top = hist[0]
    assert isinstance(top, lv.HistoryEntry) and top.operation == "UPDATE" and top.txn == txn.id
    assert top.features == "R,CT" and top.attempt == txn.attempt and not top.marker
    assert top.timestamp.tzinfo == dt.UTC
    assert hist[1].marker and hist[1].operation == "LAKEVILLA MARKER" and hist[1].txn == txn.id
    assert (hist[2].operation == "WRITE" and hist[2].features == ""
            and hist[2].metrics["numOutputRows"] == 1)
    assert top.metrics == {"numAddedFiles": 1, "numRemovedFiles": 1, "numOutputRows": 1}
    assert hist[3].operation == "CREATE TABLE" and hist[3].txn is None
    assert [e.version for e in lake.history("t", limit=2)] == [3, 2]
    for e in hist:  # the time history shows is the one time travel resolves against
        assert lake.snapshot("t", timestamp=e.timestamp).version == e.version
    with pytest.raises(lv.TableNotFoundError, match="'nosuch'"):
        lake.history("nosuch")


def test_versions_a_log_clean_up_removed_are_named_as_such(tmp_path):
    lake, log = _table(tmp_path, versions=6)
    lake.maintenance.checkpoint("t")  # at version 5
    for v in range(5):
        (log / f"{v:020d}.json").unlink()  # what Delta's log retention does below a checkpoint
    fresh = lv.Lake(str(tmp_path / "lake"))
    assert _ids(fresh.read("t", version=5)) == [1, 2, 3, 4, 5]
    assert [e.version for e in fresh.history("t")] == [5]
    with pytest.raises(lv.VersionNotFoundError,
                       match=r"versions 5\.\.5 \(older commits were removed"):
        fresh.read("t", version=3)


@pytest.mark.spark
def test_time_travel_on_the_spark_engine(tmp_path, classic_spark):
    from tests.spark_session import spark_table

    _table(tmp_path)
    lake = lv.Lake(str(tmp_path / "lake"), engine=lv.SparkEngine(classic_spark))
    by_version = spark_table(lake.read("t", version=2), T)
    by_time = spark_table(lake.read("t", timestamp=_at(EPOCH + 150)), T)
    assert _ids(by_version) == _ids(by_time) == [1, 2]
    with pytest.raises(lv.VersionNotFoundError, match=r"versions 0\.\.3"):
        lake.read("t", version=7)
