"""The journal alone (recovery/journal.py): under R each write statement's sublog entry carries the
reads before it, logical when it goes out with the marker claim; without R nothing is logged."""

from __future__ import annotations

from lakevilla.recovery import sublog as sublogs
from lakevilla.recovery.journal import Journal, JournalContext, NoJournal
from lakevilla.statements.insert import Insert
from lakevilla.statements.update import Update
from lakevilla.store.local import LocalStore


def _journal_ctx(store: LocalStore, counted: list[str]) -> JournalContext:
    return JournalContext(txn_id="tx10", store=store, attempt=lambda: "tx10.0", features="R",
                          isolation="serializable", mode="tail", count=counted.append)


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
    # with the claim: logical, carries its statement
    journal.statement(_JTable(), upd, preds_unknown=True)
    ins = Insert(seq=6, table="t")
    journal.statement(_JTable(), ins, preds_unknown=False)
    entries = sublogs.read_all(store, "tx10")
    assert [(e.seq, e.op, e.kind) for e in entries] == [(3, "update", "logical"),
                                                        (4, "insert", "physical")]
    assert entries[0].statement == {"where": "k = 1", "set": {"v": "v + 1"}}
    # each read once
    assert [r["table"] for r in entries[0].reads] == ["s"] and entries[1].reads == []
    assert len(journal.keys) == 2 and counted == ["sublogs", "sublogs"]


def test_without_r_nothing_is_logged(tmp_path):
    store = LocalStore(str(tmp_path))
    journal = NoJournal(_journal_ctx(store, []))
    op = Update(seq=1, table="t", where="k = 1", assignments={"v": "1"})
    journal.read("s", 7, [], None)
    assert not journal.together_with_claim(op)
    journal.statement(_JTable(), op, preds_unknown=False)
    assert sublogs.read_all(store, "tx10") == [] and journal.keys == [] and not op.logical
