"""The commit path's parts alone, without a Lake or a Transaction (issue 12's seam):
the record decider (complex_txn/decide.py), the conflict policies (recovery/redo.py) and
the on-storage vocabulary (vocab.py)."""

from __future__ import annotations

import json

import pytest

from lakevilla.complex_txn import record as records
from lakevilla.complex_txn.decide import decide_by_record
from lakevilla.errors import TransactionAborted
from lakevilla.names import attempt_id
from lakevilla.recovery.redo import AbortOnConflict, RedoContext
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


def test_abort_policy_aborts_on_a_conflict():
    class TW:
        name = "t"

    ctx = RedoContext(txn_id="tx4", engine=None, write_sublog=lambda *a: None, delete_files=lambda *a: None,
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
