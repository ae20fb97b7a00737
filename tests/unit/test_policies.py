"""The commit path's policies alone: the conflict policy that aborts (recovery/redo.py) and the
overtake policy (markers/overtake.py), which waits only for the predecessors our commit can
invalidate and revokes an overtake once a redo moved our commit onto their files."""

from __future__ import annotations

import pytest

from lakevilla.errors import TransactionAborted
from lakevilla.recovery.redo import AbortOnConflict, RedoContext


def test_abort_policy_aborts_on_a_conflict():
    class TW:
        name = "t"

    ctx = RedoContext(txn_id="tx4", engine=None, write_sublog=lambda *a: None,
                      count=lambda *a: None, redone=lambda *a: None)
    with pytest.raises(TransactionAborted, match="conflict with version 7"):
        AbortOnConflict().on_conflict(ctx, TW(), 0, 7, "removed a file we read", 7)


class _OvertakeTable:
    """The TableWork view the overtake policy reads: our commit as it stands, our footprints."""

    def __init__(self, commit) -> None:
        import pyarrow as pa

        self.name = "t"
        self.schema = pa.schema([("id", pa.int64())])
        self.base = type("Base", (), {"partition_columns": []})()
        self.commit = commit
        self.marker = None

    def build_commit(self, info):
        return self.commit


def _predecessor(footprints, decision="table", mode="tail"):
    from lakevilla.markers.marker import MarkerPayload

    return MarkerPayload(txn="p", attempt="p-0", table="t", decision=decision, mode=mode,
                         footprint=(None if footprints is None
                                    else [fp.to_json() for fp in footprints]))


def test_overtake_waits_only_for_predecessors_our_commit_can_invalidate():
    from collections import Counter

    from lakevilla.delta.actions import AddFile, Commit, RemoveFile
    from lakevilla.markers.overtake import NeverOvertake, Overtake, overtake_policy
    from lakevilla.scan.conflicts import Footprint

    counts: Counter[str] = Counter()
    policy = overtake_policy("table", "tail", lambda k, n=1: counts.update({k: n}),
                             lambda f, xs: [f(x) for x in xs])
    assert isinstance(policy, Overtake)
    for decision, mode in (("record", "tail"), ("gvl", "tail"), ("table", "in_place")):
        assert type(overtake_policy(decision, mode, print, print)) is NeverOvertake

    ours = _OvertakeTable(Commit(adds=[AddFile("b2.parquet", 1, stats='{"numRecords": 1}')],
                                 removes=[RemoveFile("b.parquet")]))
    disjoint = _predecessor([Footprint(read_files={"a.parquet"}, removed_files={"a.parquet"})])
    reads_ours = _predecessor([Footprint(read_files={"b.parquet"})])
    silent = _predecessor(None)  # published nothing (still running statements, or an older client)
    multi = _predecessor([Footprint(read_files={"a.parquet"})], decision="record")
    running = [(3, disjoint), (4, reads_ours), (5, silent), (6, multi)]
    assert [v for v, _ in policy.must_wait(ours, running)] == [4, 5, 6]
    assert counts["predecessors_overtaken"] == 1
    policy.must_wait(ours, running)  # asked again each round: counted once
    assert counts["predecessors_overtaken"] == 1

    assert not policy.revoked_by(ours, ours.commit)
    redone = Commit(removes=[RemoveFile("a.parquet")])  # a redo moved our commit onto its file
    assert policy.revoked_by(ours, redone) and counts["overtakes_revoked"] == 1
    assert not policy.revoked_by(ours, redone)  # revoked once: from now on it is waited for

    assert NeverOvertake().must_wait(ours, running) == running
