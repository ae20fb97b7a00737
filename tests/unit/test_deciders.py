"""The deciders alone, without a Lake or a Transaction: the record decider (CT,
complex_txn/decide.py) writes COMMITTING once, moves to a new attempt when recovery aborted the
old one and gives up when preempted every time; the global-log decider (I, isolation/decide.py)
appends one entry naming our write, refuses an attempt recovery aborted in the log and gives up
after its tries."""

from __future__ import annotations

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
from lakevilla.recovery.stalled import decide_gvl_abort
from lakevilla.store.local import LocalStore
from lakevilla.vocab import RecordState


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
    # a recovering client, meanwhile
    assert decide_gvl_abort(decider.gvl, "tx8.0", -1)[0] == "aborted"
    with pytest.raises(TransactionAborted) as e:
        decider.decide(FakeAnnouncer("tx8", store), {"t"}, _one_intent, None, tries=3)
    assert e.value.reason == "preempted"
    assert decider.gvl.head().seq == 0  # nothing of ours was announced


def test_global_decider_gives_up_after_its_tries(tmp_path):
    store = LocalStore(str(tmp_path))
    decider = _global_decider(store)
    decider.start_commit(claims_now=True)
    txn = FakeAnnouncer("tx9", store)
    # a commit at 6 that the log's entry cannot take yet: try again
    txn.tables["t"].validated_upto = 5
    with pytest.raises(TransactionAborted, match="too often"):
        decider.decide(txn, {"t"}, _one_intent, None, tries=2)
    assert txn.counts == {"gvl_not_yet": 2} and decider.gvl.head() is None


