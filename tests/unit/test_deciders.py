"""The commit path's parts alone, without a Lake or a Transaction (issue 12's seam):
the record decider (complex_txn/decide.py), the conflict policies (recovery/redo.py) and
the on-storage vocabulary (vocab.py), the facade's settings and heartbeat service."""

from __future__ import annotations

import json

import pytest

from lakevilla.complex_txn import record as records
from lakevilla.complex_txn.decide import decide_by_record
from lakevilla.delta.log import DeltaLog
from lakevilla.errors import TransactionAborted
from lakevilla.isolation.cut import Cut
from lakevilla.isolation.decide import GlobalDecider
from lakevilla.isolation.gvl import GlobalVersionLog
from lakevilla.isolation.units import RecordCache
from lakevilla.names import attempt_id
from lakevilla.recovery import sublog as sublogs
from lakevilla.recovery.journal import Journal, JournalContext, NoJournal
from lakevilla.recovery.redo import AbortOnConflict, RedoContext
from lakevilla.recovery.stalled import decide_gvl_abort
from lakevilla.statements.insert import Insert
from lakevilla.statements.update import Update
from lakevilla.store.local import LocalStore
from lakevilla.vocab import CommitInfo, Decision, InfoKind, MarkerState, RecordState


class FakeTxn:
    """The narrow view the record decider sees; records what it was asked to do."""

    def __init__(self, txn: str) -> None:
        self.id = txn
        self.no = 0
        self.attempt = attempt_id(txn, 0)
        self.calls: list[str] = []

    def check_age(self) -> None:
        self.calls.append("age")

    def in_doubt(self, what: str | None) -> None:
        self.calls.append(f"doubt:{what is not None}")

    def preempted(self) -> None:
        self.calls.append("preempted")
        self.no += 1
        self.attempt = attempt_id(self.id, self.no)


def intents() -> dict[str, records.TableIntent]:
    return {"t": records.TableIntent(marker=3, mode="tail", commit="{}\n")}


def test_record_decider_writes_committing_once(tmp_path):
    store = LocalStore(str(tmp_path))
    txn = FakeTxn("tx1")
    rec = decide_by_record(store, txn, intents, max_retries=3)
    assert rec.state == RecordState.COMMITTING and rec.attempt == "tx1.0"
    assert records.read(store, "tx1.0").state == records.COMMITTING
    assert txn.calls == ["age", "doubt:True", "doubt:False"]


def test_record_decider_moves_to_a_new_attempt_when_recovery_aborted_the_old_one(tmp_path):
    store = LocalStore(str(tmp_path))
    records.abort(store, "tx2.0", "tx2", "stalled marker")  # a recovering client decided first
    txn = FakeTxn("tx2")
    rec = decide_by_record(store, txn, intents, max_retries=3)
    assert "preempted" in txn.calls
    assert rec.attempt == "tx2.1" and rec.state == records.COMMITTING
    assert records.read(store, "tx2.0").state == records.ABORTED  # the old decision stands


def test_record_decider_gives_up_when_preempted_every_time(tmp_path):
    store = LocalStore(str(tmp_path))
    for n in range(3):
        records.abort(store, f"tx3.{n}", "tx3", "stalled marker")
    with pytest.raises(TransactionAborted, match="preempted"):
        decide_by_record(store, FakeTxn("tx3"), intents, max_retries=2)


class FakeAnnouncer(FakeTxn):
    """The narrow view the global-log decider sees: one written table, nothing else read."""

    def __init__(self, txn: str, store: LocalStore, isolation: str = "serializable") -> None:
        super().__init__(txn)
        self.isolation = isolation
        self.slack = 0
        self.tables = {"t": _Written(DeltaLog(store, "t"))}
        self.counts: dict[str, int] = {}
        self.was_decided = False

    def decided(self) -> None:
        self.was_decided = True

    def count(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def revalidate(self, table: str) -> None:
        self.calls.append(f"revalidate:{table}")


class _Written:
    def __init__(self, log: DeltaLog) -> None:
        self.log = log
        self.validated_upto = -1


def _global_decider(store: LocalStore) -> GlobalDecider:
    gvl = GlobalVersionLog(store)
    cut = Cut(gvl, lambda t: DeltaLog(store, t), RecordCache(store))
    cut.start()  # as the transaction's first read does
    return GlobalDecider(gvl, lambda t: DeltaLog(store, t), RecordCache(store), cut)


def _one_intent() -> dict[str, records.TableIntent]:
    return {"t": records.TableIntent(marker=None, mode="tail", commit="{}\n")}


def test_global_decider_appends_one_entry_that_names_our_write(tmp_path):
    store = LocalStore(str(tmp_path))
    decider = _global_decider(store)
    txn = FakeAnnouncer("tx7", store)
    assert decider.start_commit(claims_now=True) is not None and decider.base == -1
    entry = decider.decide(txn, {"t"}, _one_intent, None, tries=3)
    assert decider.gvl.head().seq == entry.seq == 0
    assert entry.txn == "tx7.0" and set(entry.own_writes()) == {"t"}
    assert txn.calls == ["age", "doubt:True", "doubt:False"] and not txn.was_decided


def test_global_decider_refuses_an_attempt_recovery_aborted_in_the_log(tmp_path):
    store = LocalStore(str(tmp_path))
    decider = _global_decider(store)
    decider.start_commit(claims_now=True)  # our commit starts before the log has an entry
    assert decide_gvl_abort(decider.gvl, "tx8.0", -1)[0] == "aborted"  # a recovering client, meanwhile
    with pytest.raises(TransactionAborted) as e:
        decider.decide(FakeAnnouncer("tx8", store), {"t"}, _one_intent, None, tries=3)
    assert e.value.reason == "preempted"
    assert decider.gvl.head().seq == 0  # nothing of ours was announced


def test_global_decider_gives_up_after_its_tries(tmp_path):
    store = LocalStore(str(tmp_path))
    decider = _global_decider(store)
    decider.start_commit(claims_now=True)
    txn = FakeAnnouncer("tx9", store)
    txn.tables["t"].validated_upto = 5  # a commit at 6 that the log's entry cannot take yet: try again
    with pytest.raises(TransactionAborted, match="too often"):
        decider.decide(txn, {"t"}, _one_intent, None, tries=2)
    assert txn.counts == {"gvl_not_yet": 2} and decider.gvl.head() is None


def _journal_ctx(store: LocalStore, counted: list[str]) -> JournalContext:
    return JournalContext(txn_id="tx10", store=store, attempt=lambda: "tx10.0", features="R", isolation="serializable",
                          mode="tail", count=counted.append)


class _JTable:
    name = "t"
    logical = False
    base = type("Snap", (), {"version": 4})()
    read_version = 4


def test_the_journal_logs_each_write_statement_with_the_reads_before_it(tmp_path):
    store = LocalStore(str(tmp_path))
    counted: list[str] = []
    journal = Journal(_journal_ctx(store, counted), seq=2)  # a resumed run continues its numbering
    journal.read("s", 7, ["part-1.parquet"], "k = 1")
    upd = Update(seq=5, table="t", where="k = 1", assignments={"v": "v + 1"})
    assert journal.together_with_claim(upd)
    journal.statement(_JTable(), upd, preds_unknown=True)  # with the claim: logical, carries its statement
    ins = Insert(seq=6, table="t")
    journal.statement(_JTable(), ins, preds_unknown=False)
    entries = sublogs.read_all(store, "tx10")
    assert [(e.seq, e.op, e.kind) for e in entries] == [(3, "update", "logical"), (4, "insert", "physical")]
    assert entries[0].statement == {"where": "k = 1", "set": {"v": "v + 1"}}
    assert [r["table"] for r in entries[0].reads] == ["s"] and entries[1].reads == []  # each read once
    assert len(journal.keys) == 2 and counted == ["sublogs", "sublogs"]


def test_without_r_nothing_is_logged(tmp_path):
    store = LocalStore(str(tmp_path))
    journal = NoJournal(_journal_ctx(store, []))
    op = Update(seq=1, table="t", where="k = 1", assignments={"v": "1"})
    journal.read("s", 7, [], None)
    assert not journal.together_with_claim(op)
    journal.statement(_JTable(), op, preds_unknown=False)
    assert sublogs.read_all(store, "tx10") == [] and journal.keys == [] and not op.logical


def test_abort_policy_aborts_on_a_conflict():
    class TW:
        name = "t"

    ctx = RedoContext(txn_id="tx4", engine=None, write_sublog=lambda *a: None,
                      count=lambda *a: None, redone=lambda *a: None)
    with pytest.raises(TransactionAborted, match="conflict with version 7"):
        AbortOnConflict().on_conflict(ctx, TW(), 0, 7, "removed a file we read", 7)


def test_vocabulary_serializes_as_the_bare_strings_it_replaced():
    assert json.dumps([Decision.GVL, Decision.RECORD, Decision.TABLE, MarkerState.RUNNING, RecordState.ABORTED]) == \
        '["gvl", "record", "table", "running", "ABORTED"]'
    info = CommitInfo(txn="t1", attempt="t1.0", features="R,CT", decision=Decision.RECORD, tables=2, marker=5,
                      txn_tables=["a", "b"])
    text = json.dumps(info.to_json(), separators=(",", ":"))
    assert text == ('{"v":1,"kind":"commit","txn":"t1","attempt":"t1.0","features":"R,CT","decision":"record",'
                    '"tables":2,"marker":5,"txn_tables":["a","b"]}')
    assert CommitInfo.of(json.loads(text)) == info
    assert CommitInfo(kind=InfoKind.CREATE).to_json() == {"v": 1, "kind": "create"}
    assert CommitInfo.of({"v": 1, "kind": "marker"}) is None


# -- the facade's settings and heartbeat service, alone --------------------------------------

def test_settings_are_checked_once_and_replaced_checked():
    from lakevilla.errors import InvalidArgumentError
    from lakevilla.settings import LakeSettings
    from lakevilla.vocab import CommitMode

    s = LakeSettings(marker_ttl=4, commit_mode="in_place")
    assert s.commit_mode is CommitMode.IN_PLACE and s.marker_ttl == 4.0
    assert s.wait_limit == 8.0  # twice the TTL unless given
    assert s.with_(marker_ttl=1).wait_limit == 2.0 and s.with_(wait_timeout=3).wait_limit == 3.0
    for bad in ({"marker_ttl": 0}, {"marker_ttl": float("nan")}, {"commit_mode": "sideways"},
                {"max_retries": -1}, {"max_retries": 1.5}, {"max_shifts": True}, {"wait_timeout": -1},
                {"max_transaction_age": 0}, {"poll_max": "soon"}):
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


# -- overtaking (recovery/overtake.py), alone -------------------------------------------------

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
                         footprint=None if footprints is None else [fp.to_json() for fp in footprints])


def test_overtake_waits_only_for_predecessors_our_commit_can_invalidate():
    from collections import Counter

    from lakevilla.delta.actions import AddFile, Commit, RemoveFile
    from lakevilla.markers.overtake import NeverOvertake, Overtake, overtake_policy
    from lakevilla.scan.conflicts import Footprint

    counts: Counter[str] = Counter()
    policy = overtake_policy("table", "tail", lambda k, n=1: counts.update({k: n}), lambda f, xs: [f(x) for x in xs])
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
