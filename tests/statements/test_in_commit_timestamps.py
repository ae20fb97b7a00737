"""Tables with in-commit timestamps (writer feature ``inCommitTimestamp``): every commit lakevilla
writes to one, statements and its own protocol commits alike (markers, in-place fills, CT and R
commits at the tail, recovery's roll-forward), carries ``commitInfo`` first with a timestamp
strictly greater than the previous commit's, stamped for the version it landed at; enabling them
on an existing table records the version and timestamp; time travel and history go by them.
delta-rs reads the tables."""

from __future__ import annotations

import datetime as dt
import json
import os
import time

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.delta import ict
from lakevilla.delta.actions import Commit
from lakevilla.delta.log import DeltaLog, VersionExists
from lakevilla.store import FaultInjectingStore, FaultPlan
from tests.helpers import clock_at

SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.int64())])
ON = {"delta.enableInCommitTimestamps": "true"}


def log_lines(backend, table: str) -> dict[int, list[dict]]:
    """Each commit file of ``table`` as its list of actions."""
    store, prefix = backend.store(), f"{table}/_delta_log/"
    out = {}
    for meta in store.list(prefix):
        name = meta.key[len(prefix):]
        if name.endswith(".json") and name[:20].isdigit():
            out[int(name[:20])] = [json.loads(x) for x in store.get(meta.key).data.splitlines()]
    return out


def stamps(backend, table: str, since: int = 0) -> list[int]:
    """The in-commit timestamps of versions >= ``since``, checking each is on the first action."""
    out = []
    for v, lines in sorted(log_lines(backend, table).items()):
        if v < since:
            continue
        assert list(lines[0]) == ["commitInfo"], (v, lines[0])
        assert isinstance(lines[0]["commitInfo"].get("inCommitTimestamp"), int), (v, lines[0])
        out.append(lines[0]["commitInfo"]["inCommitTimestamp"])
    return out


def increasing(xs: list[int]) -> bool:
    return all(b > a for a, b in zip(xs, xs[1:], strict=False))


def test_every_commit_carries_an_increasing_timestamp_first(backend):
    """Statements in every feature set and both commit modes, markers, a two-table CT commit,
    OPTIMIZE and a roll-forward by ``recover``: each version has its timestamp first, each later
    than the one before."""
    lake = backend.lake()
    for t in ("a", "b"):
        lake.create_table(t, SCHEMA, properties=ON)
        with lake.transaction("") as txn:
            txn.insert(t, {"id": [1, 2], "value": [0, 0]})
    assert "inCommitTimestamp" in (lake.snapshot("a").protocol.writer_features or [])
    for mode in ("tail", "in_place"):
        for features in ("", "R", "R,CT", "R,CT,I"):
            with backend.lake(commit_mode=mode).transaction(features) as txn:
                txn.update("a", set={"value": "value + 1"}, where="id = 1")
                txn.insert("b", {"id": [10], "value": [1]})
    with lake.transaction("") as txn:
        txn.optimize("b")
    # CT decided, then b's commit (after its marker) fails: recovery rolls it forward
    tail = f"b/_delta_log/{lake.version('b') + 2:020d}.json"
    failing = backend.lake(marker_ttl=5.0, store=FaultInjectingStore(backend.store(), FaultPlan(
        transient_rate=1.0, kinds=("put_if_absent",), predicate=lambda k, key: key == tail)))
    txn = failing.begin("R,CT")
    txn.update("a", set={"value": "value + 1"}, where="id = 1")
    txn.insert("b", {"id": [20], "value": [2]})
    with pytest.raises(lv.CommitPendingError):
        txn.commit()
    failing.flush()
    report = backend.lake(marker_ttl=5.0, clock=clock_at(10_000.0)).recover()
    assert report.records_rolled_forward == [txn.attempt]
    lines = log_lines(backend, "a")
    markers = [v for v, c in lines.items()
               if c[0]["commitInfo"].get("lakevilla", {}).get("kind") == "marker"]
    assert markers  # markers are versions too: stamped like any commit
    for t in ("a", "b"):
        got = stamps(backend, t)
        assert len(got) == len(log_lines(backend, t)) and increasing(got), (t, got)
    assert lake.read("b").num_rows == 11
    assert backend.delta_rows("a") == sorted(lake.read("a").to_pylist(), key=lambda r: r["id"])
    assert backend.delta_rows("b") == sorted(lake.read("b").to_pylist(), key=lambda r: r["id"])


def test_a_commit_retried_at_another_version_is_stamped_for_that_version(local_backend):
    """Another writer took version 2 with a timestamp an hour ahead: our commit, put at 2 and
    then at 3, carries that timestamp plus 1 ms, not the one it would have had at 2."""
    lake = local_backend.lake()
    lake.create_table("t", SCHEMA, properties=ON)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1], "value": [1]})
    ahead = int(time.time() * 1000) + 3_600_000
    local_backend.store().put_if_absent("t/_delta_log/00000000000000000002.json", json.dumps(
        {"commitInfo": {"inCommitTimestamp": ahead, "operation": "WRITE"}}).encode() + b"\n")
    log = DeltaLog(local_backend.store(), "t")
    log.snapshot(1)
    ours = Commit(commit_info={"operation": "WRITE"})
    with pytest.raises(VersionExists):
        log.write_commit(2, ours)
    log.write_commit(3, ours)
    assert stamps(local_backend, "t")[2:] == [ahead, ahead + 1]
    assert ours.commit_info == {"operation": "WRITE"}  # the caller's commit is not changed


def test_enabling_them_records_the_version_and_timestamp_and_upgrades_the_protocol(backend):
    lake = backend.lake()
    lake.create_table("t", SCHEMA)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1], "value": [1]})
    assert lake.snapshot("t").protocol.min_writer_version == 2
    with lake.transaction("R") as txn:
        txn.set_properties("t", ON)
    with lake.transaction("R,CT") as txn:
        txn.insert("t", {"id": [2], "value": [2]})
    snap = lake.snapshot("t")
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (1, 7)
    assert {"appendOnly", "invariants", "inCommitTimestamp"} <= set(snap.protocol.writer_features)
    at, when = ict.enablement(snap.metadata)
    lines = log_lines(backend, "t")
    enabling = [v for v, c in lines.items() if any("metaData" in a for a in c) and v > 0]
    assert enabling == [at] and at > 1  # a marker of the R transaction came first
    assert all("inCommitTimestamp" not in lines[v][0].get("commitInfo", {}) for v in range(at))
    got = stamps(backend, "t", since=at)
    assert got[0] == when and increasing(got)
    before = backend.store().head(f"t/_delta_log/{at - 1:020d}.json").last_modified
    assert when > before * 1000
    assert [r["id"] for r in backend.delta_rows("t")] == [1, 2]


def _set_file_times(root, table: str, seconds: float) -> None:
    for f in (root / table / "_delta_log").glob("*.json"):
        os.utime(f, (seconds, seconds))


def test_time_travel_and_history_go_by_the_timestamps(local_backend, tmp_path):
    """The commit files' times are all moved to one moment in 2001, so only the timestamps
    the commits carry can tell the versions apart; before enablement, file times decide."""
    lake = local_backend.lake()
    lake.create_table("t", SCHEMA)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [0], "value": [0]})
    with lake.transaction("") as txn:
        txn.set_properties("t", ON)
    for i in (1, 2, 3):
        with lake.transaction("") as txn:
            txn.insert("t", {"id": [i], "value": [i]})
    at, when = ict.enablement(lake.snapshot("t").metadata)
    assert at == 2
    old = dt.datetime(2001, 1, 1, tzinfo=dt.UTC).timestamp()
    _set_file_times(tmp_path / "lake", "t", old)
    fresh = local_backend.lake()
    got = stamps(local_backend, "t", since=at)
    for v, stamp in enumerate(got, at):
        moment = dt.datetime.fromtimestamp(stamp / 1000, dt.UTC)
        assert fresh.snapshot("t", timestamp=moment).version == v
        assert fresh.read("t", timestamp=moment).num_rows == v - 1
        assert fresh.snapshot("t", timestamp=moment - dt.timedelta(microseconds=1000)).version \
            == v - 1
    history = {e.version: e.timestamp for e in fresh.history("t")}
    assert [history[v] for v in range(at, at + len(got))] == \
        [dt.datetime.fromtimestamp(s / 1000, dt.UTC) for s in got]
    # before the enabling version: the (monotonic) file times, all in 2001
    assert fresh.snapshot("t", timestamp="2001-01-01T00:00:00.500Z").version == 1
    assert history[1] < dt.datetime(2001, 1, 2, tzinfo=dt.UTC)
    with pytest.raises(lv.VersionNotFoundError):
        fresh.snapshot("t", timestamp="2000-12-31T00:00:00Z")


def test_enabling_them_in_place_above_markers_goes_to_the_tail(local_backend):
    """In-place mode: our marker has no timestamp and another transaction's marker lies above
    it; filling ours with the enabling commit would leave that marker, a later version, without
    one. The enabling commit goes to the tail instead: no version from it on lacks one."""
    from tests.helpers import claim_now

    lake = local_backend.lake(commit_mode="in_place")
    lake.create_table("t", SCHEMA)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1], "value": [1]})
    first = lake.begin("R")
    first.set_properties("t", ON)
    claim_now(first, "t")
    other = local_backend.lake(commit_mode="in_place").begin("R")
    other.insert("t", {"id": [2], "value": [2]})
    claim_now(other, "t")
    first.commit()
    other.abort()
    at, _ = ict.enablement(lake.snapshot("t").metadata)
    assert at == first.committed["t"]
    lines = log_lines(local_backend, "t")
    assert max(lines) >= at and len(stamps(local_backend, "t", since=at)) == max(lines) - at + 1
    assert all("inCommitTimestamp" not in lines[v][0]["commitInfo"] for v in range(at))


def test_a_writer_that_has_not_read_the_previous_commit_fetches_it_to_stamp(local_backend):
    """A log that knows the tail only from a LIST (as after a re-LIST, or a roll-forward by a
    fresh client) has not read the previous commit: it fetches it, so the commit it writes is
    stamped later than that one."""
    lake = local_backend.lake()
    lake.create_table("t", SCHEMA, properties=ON)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1], "value": [1]})
    log = DeltaLog(local_backend.store(), "t")
    latest = log.latest_version()  # a LIST: no commit read
    log.write_commit(latest + 1, Commit(commit_info={"operation": "WRITE"}))
    got = stamps(local_backend, "t")
    assert len(got) == latest + 2 and increasing(got), got
