"""Sublogs and redo under R: each write statement's entry (physical, or logical with its
statement) goes out behind the statement, in order; a conflicting commit undoes the transaction
to its first conflicting statement and redoes from there; a read is redone, not aborted, when a
conflicting commit left its rows as they were."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.engines.api import data_file_key
from lakevilla.recovery import sublog as sublogs
from lakevilla.recovery.journal import Journal
from lakevilla.statements import read_results
from lakevilla.store.wrappers import StoreWrapper
from tests.conftest import ON_AZURE, rows
from tests.helpers import (
    HookStore,
    entries_landed,
    numbered_table,
    open_markers,
)

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])
MODES = ["tail", "in_place"]


def test_sublogs_physical_then_logical_and_blind_appends_stay_physical(local_backend):
    lake = numbered_table(local_backend)
    t1 = lake.begin("R")
    t1.update("t", set={"value": "value + 1"}, where="id = 1")
    t2 = lake.begin("R")
    t2.insert("t", {"id": [9], "value": [90]})  # a blind append, after a running marker
    t2.update("t", set={"value": "value * 2"}, where="id = 2")
    t2.delete("t", where="id = 3")
    entries_landed(t1, t2)
    e1 = sublogs.read_all(lake.store, t1.id)
    e2 = sublogs.read_all(lake.store, t2.id)
    # the first write's entry goes out with the marker claim, before it is known whether a marker
    # precedes ours, so it carries the statement
    assert [(e.op, e.kind) for e in e1] == [("update", "logical")]
    assert [(e.op, e.kind) for e in e2] == [("insert", "physical"), ("update", "logical"),
                                            ("delete", "logical")]
    assert e2[1].statement == {"where": "id = 2", "set": {"value": "value * 2"}}
    t1.commit()
    t2.commit()


@pytest.mark.parametrize("mode", MODES)
def test_conflict_undoes_to_the_first_conflicting_op_and_redoes(backend, mode):
    lake = numbered_table(backend, commit_mode=mode, delete_sublogs=False)
    t1 = lake.begin("R")
    t1.update("t", set={"value": "value + 1"}, where="id = 2")
    t2 = lake.begin("R")
    t2.insert("t", {"id": [7], "value": [70]})  # op 0: unaffected by T1
    t2.update("t", set={"value": "value * 10"}, where="id = 2")  # op 1: conflicts with T1
    # op 2: after the conflict: redone too
    t2.update("t", set={"value": "value + 5"}, where="id = 7")
    t1.commit()
    t2.commit()
    got = {r["id"]: r["value"] for r in rows(lake.read("t"))}
    assert got[2] == 210 and got[7] == 75
    assert t2.stats["redos"] == 2  # ops 1 and 2, not the insert
    entries = sublogs.read_all(lake.store, t2.id)
    assert [(e.op_seq, e.op, e.redo) for e in entries] == [
        (1, "insert", False), (2, "update", False), (3, "update", False), (2, "update", True),
        (3, "update", True)]
    assert [e.kind for e in sublogs.current_ops(entries)] == ["physical", "logical", "logical"]
    # the latest entry per op
    assert [e.redo for e in sublogs.current_ops(entries)] == [False, True, True]
    assert rows(lake.read("t")) == backend.delta_rows("t")


# R writes every entry behind its statement anyway
@pytest.mark.parametrize("features", ["R", "R,CT"])
def test_after_a_redo_the_commit_logs_beside_its_put_and_deletes_the_replaced_files_after_it(
        local_backend, features):
    """Issue 13: a redo before a one-table commit at the tail costs two round trips less. Its
    new sublog entry goes out beside the commit's put-if-absent (held here until that put has
    started: logged first, the commit would never start), and the file the undone update wrote
    is deleted after the decision (it still exists when the commit is put, so the entry not yet
    replaced names a file that is there), then is gone."""
    lake = numbered_table(local_backend)
    base = local_backend.store()
    armed, commit_started = threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def at_entry() -> None:
        seen["entry_waited_for_the_commit"] = commit_started.wait(10)

    def at_commit() -> None:
        seen["replaced_file_there_at_the_commit"] = base.exists(replaced)
        commit_started.set()

    redone = lambda: t2.stats["redos"] > 0  # noqa: E731 - the put after the redo (not a first, lost one)
    store = HookStore(HookStore(base,
                                lambda kind, key: (armed.is_set() and kind == "put"
                                                   and "/txns/" in key),
                                at_entry),
                      lambda kind, key: (redone() and kind == "put_if_absent"
                                         and key.startswith("t/_delta_log/")),
                      at_commit)
    t1 = lake.begin(features)
    t1.update("t", set={"value": "value + 1"}, where="id = 2")
    before = set(local_backend.all_keys())
    t2 = local_backend.lake(store=store).begin(features)
    t2.update("t", set={"value": "value * 10"}, where="id = 2")
    (replaced,) = [k for k in set(local_backend.all_keys()) - before if k.endswith(".parquet")]
    t1.commit()
    entries_landed(t2)  # the hook is for the redo's entry, not the first run's on its way behind
    armed.set()
    t2.commit()
    assert t2.stats["redos"] == 1
    assert seen == {"entry_waited_for_the_commit": True, "replaced_file_there_at_the_commit": True}
    lv.Lake.flush_all()
    assert not base.exists(replaced)
    assert {r["id"]: r["value"] for r in rows(lake.read("t"))}[2] == 210
    assert rows(lake.read("t")) == local_backend.delta_rows("t")


def test_a_committed_r_writer_deletes_its_sublogs_and_redone_files_in_one_request(backend):
    """After the commit, what only the transaction needed (its sublog entries, the file its
    first run of a redone statement wrote) goes in one delete request, not one per object."""
    from lakevilla.names import sublog_prefix
    from lakevilla.store import NotFound

    numbered_table(backend)
    counting = lv.store.CountingStore(backend.store())
    lake = backend.lake(store=counting)
    t = lake.begin("R")
    t.update("t", set={"value": "value + 1"}, where="id = 1")
    entries_landed(t)
    first = [data_file_key("t", a.path, backend.uri) for op in t.tables["t"].ops for a in op.added]
    with backend.lake().transaction("") as x:  # rewrites the file T read: T's update is redone
        x.update("t", set={"value": "value + 100"}, where="id = 2")
    counting.reset()
    t.commit()
    lake.flush()
    assert t.stats["redos"] == 1 and t.stats["sublogs"] == 2 and len(first) == 1
    assert counting.snapshot()["delete"] == 1
    assert list(backend.store().list(sublog_prefix(t.id))) == []
    with pytest.raises(NotFound):
        backend.store().head(first[0])
    got = {r["id"]: r["value"] for r in rows(lake.read("t"))}
    assert (got[1], got[2]) == (11, 120)
    assert rows(lake.read("t")) == backend.delta_rows("t")


@ON_AZURE
def test_a_client_deletes_what_its_finished_transactions_leave_in_one_request(backend):
    """Issue 39: a client committing one short R transaction after another does not pay a delete
    request per transaction: what each leaves (sublog entries, the file a redone statement first
    wrote) waits for the client's next batch, and one request deletes all of it."""
    from lakevilla.names import sublog_prefix

    numbered_table(backend)
    counting = lv.store.CountingStore(backend.store())
    lake = backend.lake(store=counting)
    txns = []
    for i in (1, 2, 3):
        with lake.transaction("R") as t:
            t.update("t", set={"value": f"value + {i}"}, where=f"id = {i}")
        txns.append(t)
    lake.flush()
    assert [t.stats["sublogs"] for t in txns] == [1, 1, 1]
    assert counting.snapshot()["delete"] == 1
    assert all(list(backend.store().list(sublog_prefix(t.id))) == [] for t in txns)
    assert rows(lake.read("t")) == backend.delta_rows("t")


def test_a_batch_of_deletes_nobody_adds_to_goes_by_itself():
    """The keys of a client's last transactions do not wait for its next commit or flush: a batch
    goes once its oldest key has waited ``max_wait``."""
    from lakevilla.core.deletes import LaterDeletes

    deleted: list[str] = []
    sent = threading.Event()

    class Store:
        def delete_many(self, keys):
            deleted.extend(keys)
            sent.set()

    deletes = LaterDeletes(Store(), lambda fn: fn(), max_wait=0.05)  # type: ignore[arg-type]
    deletes.add(["a", "b", "c"])
    assert sent.wait(10)
    assert deleted == ["a", "b", "c"] and deletes.waiting == 0


class _EntriesHeld(lv.store.StoreWrapper):
    """Holds every sublog PUT until ``release`` is set (by default: when a put-if-absent into a
    Delta log has started, a commit's); records, in order, the entries that landed and those
    puts-if-absent (``events``), and how many entries were held at once."""

    def __init__(self, inner, release: threading.Event | None = None) -> None:
        super().__init__(inner)
        self.release = release if release is not None else threading.Event()
        self.on_log_put = release is None
        self.events: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self.held = self.most_held = 0

    @property
    def entries(self) -> list[str]:
        return [key for kind, key in self.events if kind == "entry"]

    def put(self, key, data):
        if not (key.startswith("_lakevilla/txns/") and key.count("/") == 3):  # not an entry
            return self.inner.put(key, data)
        with self._lock:
            self.held += 1
            self.most_held = max(self.most_held, self.held)
        assert self.release.wait(10), "a statement waited for its own sublog entry"
        got = self.inner.put(key, data)
        with self._lock:
            self.held -= 1
            self.events.append(("entry", key))
        return got

    def put_if_absent(self, key, data):
        if "/_delta_log/" in key:
            with self._lock:
                self.events.append(("log", key))
            if self.on_log_put:
                self.release.set()
        return self.inner.put_if_absent(key, data)


def test_an_r_writers_sublog_entries_go_out_behind_its_statements(local_backend):
    """Issue 13: R alone at the tail needs no entry to commit (its commit is its decision), so a
    statement's entry goes out on a thread of its own while the client goes on, and the commit's
    put-if-absent waits for the entries beside it. Here every entry is held until that put has
    started: the statements return all the same, and the entries land in statement order (what
    a crash leaves is a prefix, as a resumed run needs)."""
    numbered_table(local_backend)
    gate = _EntriesHeld(local_backend.store())
    lake = local_backend.lake(store=gate, delete_sublogs=False)
    txn = lake.begin("R")
    txn.update("t", set={"value": "value + 1"}, where="id = 1")
    txn.insert("t", {"id": [8], "value": [80]})
    txn.delete("t", where="id = 3")
    assert gate.entries == []  # every statement returned with its entry still held
    txn.commit()
    assert len(gate.entries) == 3 and gate.entries == sorted(gate.entries)
    assert gate.most_held == 1  # one after another: the next goes out once the one before landed
    assert [e.op for e in sublogs.read_all(lake.store, txn.id)] == ["update", "insert", "delete"]
    assert rows(lake.read("t")) == [{"id": 1, "value": 11}, {"id": 2, "value": 20},
                                    {"id": 4, "value": 40}, {"id": 8, "value": 80}]
    assert rows(lake.read("t")) == local_backend.delta_rows("t")


def test_a_ct_writers_entries_go_out_behind_its_statements_and_land_before_its_markers(
        local_backend, monkeypatch):
    """R,CT at the tail writes its entries as R does, behind its statements (a statement does not
    wait a round trip for its own entry), but a multi-table commit is decided by its record, and
    its markers say it commits: every entry lands before the first marker is claimed, so a
    recovering client that finds a marker finds the entries to undo or finish it by."""
    numbered_table(local_backend)
    numbered_table(local_backend, "u")
    flushing = threading.Event()
    real_flush = Journal.flush

    def flush(self, must_land: bool = False) -> None:
        flushing.set()
        real_flush(self, must_land)

    monkeypatch.setattr(Journal, "flush", flush)
    gate = _EntriesHeld(local_backend.store(), flushing)
    lake = local_backend.lake(store=gate, delete_sublogs=False)
    txn = lake.begin("R,CT")
    txn.update("t", set={"value": "value + 1"}, where="id = 1")
    txn.update("u", set={"value": "value + 2"}, where="id = 2")
    assert gate.events == []  # both statements returned with their entries still held
    txn.commit()
    kinds = [k for k, _ in gate.events]
    assert kinds[:2] == ["entry", "entry"] and "entry" not in kinds[2:], gate.events
    assert txn.stats["markers"] == 2
    assert [e.op for e in sublogs.read_all(lake.store, txn.id)] == ["update", "update"]
    assert rows(lake.read("t", where="id = 1")) == [{"id": 1, "value": 11}]
    assert rows(lake.read("u", where="id = 2")) == [{"id": 2, "value": 22}]


@pytest.mark.parametrize("mode", MODES)
def test_a_read_whose_rows_a_conflicting_commit_left_unchanged_is_redone_not_aborted(backend, mode):
    """Issue 13, validation by value: T updates a row and reads other columns of it (TPC-C's
    Payment: add to w_ytd, read w_name); a concurrent writer adds to the same row, so T's
    update and read both conflict with its commit. The read, run again on the newer snapshot,
    returns the same rows, so the client computed with what that snapshot holds: T redoes and
    commits instead of aborting, and neither increment is lost."""
    lake = backend.lake(commit_mode=mode)
    lake.create_table("w", pa.schema([("id", pa.int64()), ("name", pa.string()),
                                      ("ytd", pa.int64())]))
    with lake.transaction("") as x:
        x.insert("w", {"id": [1, 2], "name": ["north", "south"], "ytd": [0, 0]})
    t = lake.begin("R")
    t.update("w", set={"ytd": "ytd + 5"}, where="id = 1")
    assert rows(t.read("w", where="id = 1", columns=["id", "name"])) == [{"id": 1, "name": "north"}]
    with backend.lake(commit_mode=mode).transaction("") as other:  # a plain Delta writer: T runs
        other.update("w", set={"ytd": "ytd + 7"}, where="id = 1")
    t.commit()
    assert t.stats["redos"] == 2  # the update and the read
    assert rows(lake.read("w")) == [{"id": 1, "name": "north", "ytd": 12},
                                    {"id": 2, "name": "south", "ytd": 0}]
    assert rows(lake.read("w")) == backend.delta_rows("w")


def test_a_read_whose_rows_changed_still_aborts_with_its_redo(local_backend):
    """The other side: the concurrent writer changes a column the read returned; the redone
    read returns other rows, so T aborts (lake.run re-runs it) and nothing of T is left."""
    lake = local_backend.lake()
    lake.create_table("w", pa.schema([("id", pa.int64()), ("name", pa.string()),
                                      ("ytd", pa.int64())]))
    with lake.transaction("") as x:
        x.insert("w", {"id": [1], "name": ["north"], "ytd": [0]})
    t = lake.begin("R")
    t.update("w", set={"ytd": "ytd + 5"}, where="id = 1")
    assert rows(t.read("w", columns=["id", "name"])) == [{"id": 1, "name": "north"}]
    with lake.transaction("") as other:
        other.update("w", set={"name": "'east'"}, where="id = 1")
    with pytest.raises(lv.TransactionAborted, match="invalidates a read") as err:
        t.commit()
    assert err.value.reason == "consumed-read"
    assert rows(lake.read("w")) == [{"id": 1, "name": "east", "ytd": 0}]
    assert open_markers(lake, "w") == []


_OTHER = {  # what a concurrent transaction does to row 1 of w, and whether T's read conflicts
    "updates-another-column": (lambda x: x.update("w", set={"ytd": "ytd + 7"}, where="id = 1"),
                               False),
    "updates-the-returned-column": (
        lambda x: x.update("w", set={"name": "'east'"}, where="id = 1"), True),
    "updates-the-filtered-column": (
        lambda x: x.update("w", set={"ytd": "ytd + 7"}, where="id = 1"), True),
    "updates-and-inserts": (lambda x: (x.update("w", set={"ytd": "ytd + 7"}, where="id = 1"),
                                       x.insert("w", {"id": [3], "name": ["west"], "ytd": [0]})),
                            True),
}


@pytest.mark.parametrize("case", list(_OTHER))
def test_a_read_of_columns_a_concurrent_update_left_alone_is_not_in_conflict(
        local_backend, monkeypatch, case):
    """TPC-C's NewOrder reads w_tax while Payments add to w_ytd of the same row. A commit of
    updates alone names the columns it changed (``commitInfo.lakevilla.updated``); a read that
    filters, orders and returns none of them returns what it returned, so that commit is no
    conflict for it, even for rows the client consumed (there, any conflict aborts). T's own
    update of the file is redone; the read stands. A commit that changes a column the read
    returns or filters by, or adds rows, is still a conflict: T aborts, nothing of it stays."""
    monkeypatch.setattr(read_results, "KEEP_MAX_ROWS", 0)  # rows consumed: a conflict aborts
    lake = local_backend.lake()
    lake.create_table("w", pa.schema([("id", pa.int64()), ("name", pa.string()),
                                      ("ytd", pa.int64())]))
    with lake.transaction("") as x:
        x.insert("w", {"id": [1, 2], "name": ["north", "south"], "ytd": [0, 0]})
    act, conflicts = _OTHER[case]
    where = "id < 3 AND ytd < 5" if case == "updates-the-filtered-column" else "id < 3"
    t = lake.begin("R")
    assert sorted(t.read("w", where=where, columns=["name"]).column("name").to_pylist()) == [
        "north", "south"]
    t.update("w", set={"ytd": "ytd + 1"}, where="id = 2")
    with local_backend.lake().transaction("R") as other:
        act(other)
    info = lake._client.log("w").read_commit(lake.version("w")).commit_info["lakevilla"]
    assert info.get("updated") == {"updates-another-column": ["ytd"],
                                   "updates-the-returned-column": ["name"],
                                   "updates-the-filtered-column": ["ytd"]}.get(case)
    before = rows(lake.read("w"))
    if conflicts:
        with pytest.raises(lv.TransactionAborted):
            t.commit()
        assert rows(lake.read("w")) == before
    else:
        t.commit()
        assert t.stats["redos"] == 1  # the update; the read stands
        assert rows(lake.read("w")) == [{"id": 1, "name": "north", "ytd": 7},
                                        {"id": 2, "name": "south", "ytd": 1}]
    assert rows(lake.read("w")) == local_backend.delta_rows("w")  # delta-rs reads the commit


@pytest.mark.parametrize(("o", "aborts"), [(100, False), (1, True)],
                         ids=["newer-order", "older-order"])
def test_a_read_of_the_first_rows_is_redone_when_a_conflict_leaves_them_first(
        local_backend, o, aborts):
    """TPC-C's Delivery: T reads the oldest new order of district 1 (order_by, limit 1) and
    deletes it; meanwhile NewOrder inserts another order of district 1. That insert matches
    T's read predicate, so it conflicts; but the first row is unchanged by a newer order, so
    T's redone read returns what the client consumed and T commits. An older order changes
    the first row: T aborts, and the order it picked stays."""
    lake = local_backend.lake()
    lake.create_table("no", pa.schema([("d", pa.int64()), ("o", pa.int64())]))
    with lake.transaction("") as x:
        x.insert("no", {"d": [1, 1, 2], "o": [3, 4, 2]})
    t = lake.begin("R")
    assert t.read("no", where="d = 1", order_by="o", limit=1).to_pylist() == [{"d": 1, "o": 3}]
    t.delete("no", where="d = 1 AND o = 3")
    with lake.transaction("") as other:
        other.insert("no", {"d": [1], "o": [o]})
    if aborts:
        with pytest.raises(lv.TransactionAborted, match="other rows") as err:
            t.commit()
        assert err.value.reason == "consumed-read"
        assert lake.read("no", where="d = 1", order_by="o").column("o").to_pylist() == [1, 3, 4]
        return
    t.commit()
    # the read, and the delete after it (a redo runs on from the conflict)
    assert t.stats["redos"] == 2
    assert lake.read("no", where="d = 1", order_by="o").column("o").to_pylist() == [4, 100]
    assert rows(lake.read("no"), "o") == local_backend.delta_rows("no", sort_by="o")


_KINDS = {  # table properties, and the kind of file an update writes beside its data files
    "plain": {},
    "deletion-vectors": {"delta.enableDeletionVectors": "true"},  # a DV file (too big inline)
    "change-data-feed": {"delta.enableChangeDataFeed": "true"},  # _change_data/ files
}


def _files_no_version_names(backend, table: str) -> set[str]:
    """Keys under ``table`` (outside its log) that no commit names: an add's or remove's data
    file or DV file, a cdc action's change file."""
    import json

    from lakevilla.delta.deletion_vectors import DeletionVector

    store = backend.store()
    named: set[str] = set()
    keys = {m.key for m in store.list(f"{table}/")}
    for key in sorted(k for k in keys if "/_delta_log/" in k and k.endswith(".json")):
        for line in store.get(key).data.decode().splitlines():
            action = json.loads(line)
            for kind in ("add", "remove", "cdc"):
                a = action.get(kind)
                if not a:
                    continue
                named.add(data_file_key(table, a["path"], backend.uri))
                dv = a.get("deletionVector")
                if dv and dv["storageType"] == "u":
                    named.add(f"{table}/{DeletionVector.from_json(dv).relative_file()}")
    return {k for k in keys if "/_delta_log/" not in k} - named


@pytest.mark.parametrize("features", ["R", "R,CT"])
@pytest.mark.parametrize("kind", list(_KINDS))
def test_a_transaction_that_redoes_and_then_aborts_leaves_no_file_of_either_run(
        local_backend, kind, features):
    """Redo leaves nothing behind: T's update is redone on a concurrent commit's version, and
    the redone read then returns other rows, so T aborts. The abort deletes what both runs of
    the update wrote (data files, a DV file, change data files), as an abort without a redo
    does: the first run's files became the redo's garbage, and an undo that forgot them would
    leave them for the abandoned-file sweep's retention (7 days)."""
    n = 20_000  # an update of every third row marks more rows than a DV inlines
    lake = local_backend.lake()
    lake.create_table("w", pa.schema([("id", pa.int64()), ("name", pa.string()),
                                      ("ytd", pa.int64())]), properties=_KINDS[kind])
    with lake.transaction("") as x:
        x.insert("w", {"id": list(range(n)), "name": ["north"] * n, "ytd": [0] * n})
    assert _files_no_version_names(local_backend, "w") == set()
    written: list[str] = []  # T's files outside the log, in the order it wrote them

    def note(kind: str, key: str) -> bool:
        if kind == "put" and key.startswith("w/") and "/_delta_log/" not in key:
            written.append(key)
        return False

    t = local_backend.lake(store=HookStore(local_backend.store(), note, lambda: None,
                                           repeat=True)).begin(features)
    t.update("w", set={"ytd": "ytd + 5"}, where="id % 3 = 0")
    first_run = set(written)
    assert any(k.endswith(".parquet") and "/_change_data/" not in k for k in first_run)
    assert any(k.endswith(".bin") for k in first_run) == (kind == "deletion-vectors")
    assert any("/_change_data/" in k for k in first_run) == (kind == "change-data-feed")
    assert rows(t.read("w", where="id = 1", columns=["id", "name"])) == [
        {"id": 1, "name": "north"}]
    with lake.transaction("") as other:
        other.update("w", set={"name": "'east'"}, where="id = 1")
    with pytest.raises(lv.TransactionAborted, match="invalidates a read") as err:
        t.commit()
    assert err.value.reason == "consumed-read"
    assert set(written) - first_run  # the update ran again on the newer version, then T aborted
    lv.Lake.flush_all()
    assert _files_no_version_names(local_backend, "w") == set()
    assert not any(local_backend.store().exists(k) for k in written)
    assert lake.read("w", where="id = 1").column("name").to_pylist() == ["east"]
    assert sum(lake.read("w").column("ytd").to_pylist()) == 0
    assert open_markers(lake, "w") == []


def test_an_abort_on_one_table_waits_for_a_redo_still_running_on_another(local_backend):
    """A multi-table commit validates its tables in parallel. When one of them aborts (its kept
    read changed) while another is still redoing, the abort's undo must wait for that redo:
    undone before the redo's new data file exists, the abort would leave that file behind. The
    redo's put is held here until the undo starts (or 3 s pass: with the wait, it never does)."""
    lake = numbered_table(local_backend, name="b")
    lake.create_table("a", pa.schema([("id", pa.int64()), ("name", pa.string()),
                                      ("ytd", pa.int64())]))
    with lake.transaction("") as x:
        x.insert("a", {"id": [1], "name": ["north"], "ytd": [0]})
    undo_started, redone = threading.Event(), threading.Event()
    first_run: set[str] = set()
    written: list[str] = []

    class Watch(StoreWrapper):
        def put(self, key, data):
            if not key.startswith("b/") or "/_delta_log/" in key:
                return self.inner.put(key, data)
            written.append(key)
            if not first_run:
                return self.inner.put(key, data)
            undo_started.wait(3)  # the redo's file
            try:
                return self.inner.put(key, data)
            finally:
                redone.set()

        def delete_many(self, keys):
            undo_started.set()
            return self.inner.delete_many(keys)

    t = local_backend.lake(store=Watch(local_backend.store())).begin("R,CT")
    assert rows(t.read("a", columns=["id", "name"])) == [{"id": 1, "name": "north"}]
    t.update("a", set={"ytd": "ytd + 1"}, where="id = 1")
    t.update("b", set={"value": "value + 1"}, where="id = 2")
    first_run.update(written)
    with lake.transaction("") as other:
        other.update("a", set={"name": "'east'"}, where="id = 1")
        other.update("b", set={"value": "value * 10"}, where="id = 2")
    with pytest.raises(lv.TransactionAborted, match="invalidates a read"):
        t.commit()
    assert redone.wait(10)  # b's update was redone (before the commit returned, with the wait)
    lv.Lake.flush_all()
    assert _files_no_version_names(local_backend, "a") == set()
    assert _files_no_version_names(local_backend, "b") == set()
