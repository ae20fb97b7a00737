"""Markers: what other clients see of one (an empty Delta version), how long it lives
(``marker_ttl``, kept alive by heartbeats) and how recovery frees it (only by a conditional
write on the etag it read)."""

from __future__ import annotations

import time

from lakevilla.markers.marker import FREED, RUNNING, free_stalled, marker_of
from tests.conftest import ON_AZURE, rows
from tests.helpers import (
    accounts,
    claim_now,
    clock_at,
    numbered_table,
    open_markers,
    value_of,
)

TTL = 5.0


@ON_AZURE
def test_markers_are_empty_versions_for_delta_rs(backend):
    lake = numbered_table(backend)
    t1 = lake.begin("R")
    t1.update("t", set={"value": "value + 1"}, where="id = 1")
    claim_now(t1, "t")
    marker_v = t1.tables["t"].marker.version
    dt = backend.delta("t")
    assert dt.version() == marker_v
    assert backend.delta_rows("t") == rows(lake.read("t", version=marker_v - 1))  # an empty version
    # delta-rs' history() hangs on moto's LIST (seen with 1.6.6), not on files
    if backend.kind == "local":
        hist = {h["version"]: h for h in dt.history()}
        assert hist[marker_v]["lakevilla"]["kind"] == "marker"
    t1.commit()
    assert open_markers(lake, "t") == []


def test_heartbeat_keeps_a_slow_transaction_alive(local_backend):
    lake = numbered_table(local_backend, marker_ttl=0.6)
    t1 = lake.begin("R")
    t1.update("t", set={"value": "value + 1"}, where="id = 1")
    claim_now(t1, "t")
    h = t1.tables["t"].marker
    first_expiry = h.payload.expires
    deadline = time.monotonic() + 10
    while h.payload.expires == first_expiry and time.monotonic() < deadline:
        time.sleep(0.02)  # awaiting the background heartbeat, not standing in for it
    assert h.payload.expires > first_expiry
    c, _ = lake._client.log("t").read_commit_raw(h.version)
    # refreshed on storage (a later beat may already have moved the handle on: the ttl is short)
    assert first_expiry < marker_of(c).expires <= h.payload.expires
    assert not marker_of(c).expired(time.time())
    t1.commit()


def test_a_marker_is_stalled_only_after_marker_ttl(local_backend):
    lake = accounts(local_backend, tables=("a",), marker_ttl=TTL)
    owner = lake.begin("R")
    owner.update("a", set={"value": "1"}, where="id = 1")
    claim_now(owner, "a")
    lake._client.heartbeats.forget(owner)  # no heartbeat from now on
    v = owner.tables["a"].marker.version
    early = local_backend.lake(marker_ttl=TTL, clock=clock_at(TTL - 1.0)).recover()
    assert [r[:2] for r in early.running] == [("a", v)] and early.freed == []
    assert open_markers(lake, "a") == [v]
    late = local_backend.lake(marker_ttl=TTL, clock=clock_at(TTL + 1.0)).recover()
    assert [r[:2] for r in late.freed] == [("a", v)]
    assert marker_of(lake._client.log("a").read_commit_raw(v)[0]).state == FREED


def test_freeing_a_marker_that_moved_fails(local_backend):
    """Recovery frees a marker by a conditional write on the etag it read: once the owner
    rewrote the marker (a heartbeat, a fill), the stale free must fail and change nothing."""
    lake = accounts(local_backend, tables=("a",), marker_ttl=TTL)
    owner = lake.begin("R")
    owner.update("a", set={"value": "1"}, where="id = 1")
    claim_now(owner, "a")
    v = owner.tables["a"].marker.version
    log = local_backend.lake()._client.log("a")
    seen, etag = log.read_commit_raw(v)
    owner.heartbeat(force=True)  # the owner is alive after all: it rewrites its marker
    assert not free_stalled(log, v, marker_of(seen), etag, FREED, "expired")
    assert marker_of(log.read_commit_raw(v)[0]).state == RUNNING
    assert marker_of(seen).state == RUNNING  # nor the marker as it was read (parsed once, shared)
    owner.commit()
    assert value_of(lake, "a") == 1 and open_markers(lake, "a") == []
