"""Settings and the words written to storage, alone: the facade's settings are checked once
(and again when replaced), the vocabulary serialises as the bare strings it replaced, and the
heartbeat service beats while a transaction lives and stops with the last one."""

from __future__ import annotations

import json

import pytest

from lakevilla.vocab import CommitInfo, Decision, InfoKind, MarkerState, RecordState


def test_vocabulary_serializes_as_the_bare_strings_it_replaced():
    assert json.dumps([Decision.GVL, Decision.RECORD, Decision.TABLE, MarkerState.RUNNING,
                       RecordState.ABORTED]) == '["gvl", "record", "table", "running", "ABORTED"]'
    info = CommitInfo(txn="t1", attempt="t1.0", features="R,CT", decision=Decision.RECORD,
                      tables=2, marker=5, txn_tables=["a", "b"])
    text = json.dumps(info.to_json(), separators=(",", ":"))
    assert text == ('{"v":1,"kind":"commit","txn":"t1","attempt":"t1.0","features":"R,CT",'
                    '"decision":"record","tables":2,"marker":5,"txn_tables":["a","b"]}')
    assert CommitInfo.of(json.loads(text)) == info
    assert CommitInfo(kind=InfoKind.CREATE).to_json() == {"v": 1, "kind": "create"}
    assert CommitInfo.of({"v": 1, "kind": "marker"}) is None


def test_settings_are_checked_once_and_replaced_checked():
    from lakevilla.errors import InvalidArgumentError
    from lakevilla.settings import LakeSettings
    from lakevilla.vocab import CommitMode

    s = LakeSettings(marker_ttl=4, commit_mode="in_place")
    assert s.commit_mode is CommitMode.IN_PLACE and s.marker_ttl == 4.0
    assert s.wait_limit == 8.0  # twice the TTL unless given
    assert s.with_(marker_ttl=1).wait_limit == 2.0 and s.with_(wait_timeout=3).wait_limit == 3.0
    for bad in ({"marker_ttl": 0}, {"marker_ttl": float("nan")}, {"commit_mode": "sideways"},
                {"max_retries": -1}, {"max_retries": 1.5}, {"max_shifts": True},
                {"wait_timeout": -1}, {"max_transaction_age": 0}, {"poll_max": "soon"}):
        with pytest.raises(InvalidArgumentError):
            LakeSettings(**bad)
    with pytest.raises(InvalidArgumentError):
        s.with_(gvl_keep=-5)
    assert s.with_(max_retries=0).max_retries == 0 and s.max_retries == 10  # frozen: a copy


def test_the_heartbeat_service_beats_while_alive_and_stops_with_the_last():
    import threading

    from lakevilla.markers.heartbeats import Heartbeats

    class Txn:
        def __init__(self) -> None:
            self.state = "active"
            self.beats = 0
            self.beat = threading.Event()

        def heartbeat(self) -> None:
            self.beats += 1
            self.beat.set()

    hb = Heartbeats(lambda: 0.005)
    a, b = Txn(), Txn()
    hb.watch(a)
    hb.watch(b)
    assert a.beat.wait(10) and b.beat.wait(10)
    a.state = "committed"  # finished: forgotten at the next round, never beaten again
    deadline = threading.Event()
    for _ in range(2000):
        if not hb.watching(a):
            break
        deadline.wait(0.005)
    assert not hb.watching(a) and hb.watching(b)
    beats = a.beats
    b.beat.clear()
    assert b.beat.wait(10)  # b still beats
    assert a.beats == beats
    hb.forget(b)
    t = hb._thread
    assert t is not None
    t.join(10)
    assert not t.is_alive()  # nothing left to keep alive: the thread ended
    hb.watch(b)  # and the next watched transaction starts it again
    b.beat.clear()
    assert b.beat.wait(10)
    hb.stop()
