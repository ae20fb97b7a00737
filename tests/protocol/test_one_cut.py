"""LV[I] in mixed deployments (issue 11): one consistent cut per transaction, always fresh.

Writers use any features (``""``, R, CT, R,CT, delta-rs) beside I readers and I writers.
Every test here is a scripted interleaving (or a sequential script) for one of the issue's
points, named after what must hold.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import os
import random
import threading
import time

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.isolation.gvl import HINT_KEY
from lakevilla.markers.marker import commit_txn
from lakevilla.names import GVL_DIR
from lakevilla.store import StoreWrapper
from tests.helpers import HalfPublished, HookStore, open_markers

ACC = pa.schema([("id", pa.int64()), ("balance", pa.int64())])
ROW = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def _later_clock():
    return time.time() + 10_000.0


def _bank(backend, tables=("x", "y"), known=True, **kw):
    """Two accounts of 50 per table; ``known``: the global log knows every table (an I
    transaction wrote them)."""
    lake = backend.lake(**kw)
    for t in tables:
        lake.create_table(t, ACC)
        with lake.transaction("") as txn:
            txn.insert(t, {"id": [1, 2], "balance": [50, 50]})
    if known:
        with lake.transaction("I") as txn:
            for t in tables:
                txn.update(t, set={"balance": "balance + 0"}, where="id = 1")
    return lake


def _sum(txn_or_lake, table):
    return sum(txn_or_lake.read(table).column("balance").to_pylist())


def _bal(txn_or_lake, table, id_=1):
    return txn_or_lake.read(table, where=f"id = {id_}").column("balance")[0].as_py()


def _transfer(lake, features, src="x", dst="y", amount=10):
    with lake.transaction(features) as t:
        t.update(src, set={"balance": f"balance - {amount}"}, where="id = 1")
        t.update(dst, set={"balance": f"balance + {amount}"}, where="id = 1")


def _isolated_totals(lake, tables=("x", "y"), isolation="serializable"):
    with lake.transaction("I", isolation=isolation) as r:
        return [_sum(r, t) for t in tables]


class GvlAudit(StoreWrapper):
    """Records every successful put-if-absent of a global-log entry and every hint value
    written, across all the clients that share it: a slot created twice is a fork."""

    def __init__(self, inner, shared: dict | None = None) -> None:
        super().__init__(inner)
        self.shared = (shared if shared is not None
                       else {"created": [], "hints": [], "lock": threading.Lock()})

    def put_if_absent(self, key, data):
        if key == HINT_KEY:
            return self._hint(self.inner.put_if_absent, key, data)
        etag = self.inner.put_if_absent(key, data)
        if key.startswith(GVL_DIR + "/") and key.endswith(".json"):
            with self.shared["lock"]:
                self.shared["created"].append(key)
        return etag

    def put_if_match(self, key, data, etag):
        if key == HINT_KEY:
            return self._hint(self.inner.put_if_match, key, data, etag)
        return self.inner.put_if_match(key, data, etag)

    def put(self, key, data):
        if key == HINT_KEY:
            return self._hint(self.inner.put, key, data)
        return self.inner.put(key, data)

    def _hint(self, write, *args):
        # the order values are recorded in is the order they were stored in
        with self.shared["lock"]:
            out = write(*args)
            self.shared["hints"].append(int(json.loads(args[1])["seq"]))
            return out

    def forks(self) -> list[str]:
        seen = self.shared["created"]
        return sorted({k for k in seen if seen.count(k) > 1})

    def hint_went_back(self) -> bool:
        h = self.shared["hints"]
        return any(b < a for a, b in zip(h, h[1:]))


# -- point 0: one client, no concurrency -------------------------------------------------------

FEATURE_SETS = ["", "R", "CT", "I", "R,CT", "R,I", "CT,I", "R,CT,I"]


def _alternate(lake, x, y, a, b) -> list[str]:
    """Four transactions a, b, a, b; each reads both tables, inserts a row into each and
    updates every row. Returns what went wrong."""
    wrong = []
    for k, features in enumerate((a, b, a, b)):
        seen = {}
        try:
            with lake.transaction(features) as t:
                for tab in (x, y):
                    seen[tab] = t.read(tab).num_rows
                    t.insert(tab, {"id": [k + 1], "v": [0]})
                    t.update(tab, set={"v": "v + 1"})
        except lv.TransactionAborted as e:
            wrong.append(f"{a}/{b} step {k} ({features or 'DL'}): aborted: {e}")
            continue
        if seen != {x: k + 1, y: k + 1}:
            wrong.append(f"{a}/{b} step {k} ({features or 'DL'}): read {seen}, "
                         f"{k + 1} rows committed")
    for tab in (x, y):
        got = sorted(lake.read(tab).to_pylist(), key=lambda r: r["id"])
        want = [{"id": i, "v": 4 if i == 0 else 5 - i} for i in range(5)]
        if got != want:
            wrong.append(f"{a}/{b}: {tab} ends as {got}")
    return wrong


def test_alternating_feature_sets_on_one_client_read_every_commit(backend):
    """Point 0: the 64 ordered pairs of feature sets (S3: the pairs that mix I with CT and
    without), four transactions each, one client: every read sees every earlier commit and
    nothing aborts."""
    pairs = list(itertools.product(FEATURE_SETS, repeat=2))
    if backend.kind == "s3":
        pairs = [p for p in pairs if ("I" in p[0]) != ("I" in p[1]) and "CT" in p[0] + p[1]][::5]
    lake = backend.lake()
    wrong = []
    for i, (a, b) in enumerate(pairs):
        x, y = f"x{i}", f"y{i}"
        for tab in (x, y):
            lake.create_table(tab, ROW)
            with lake.transaction("") as t:
                t.insert(tab, {"id": [0], "v": [0]})
        wrong += _alternate(lake, x, y, a, b)
    assert wrong == []


# -- points 1-4: R,CT transfers beside I readers and writers --------------------------------

@pytest.mark.parametrize("known", ["x", "none"])
def test_isolated_reader_never_sees_half_of_a_ct_transfer_on_tables_the_log_does_not_know(
        backend, known):
    """Point 1: a table the global log does not know joins the cut consistently with the
    tables it knows."""
    lake = _bank(backend, known=False)
    if known == "x":
        with lake.transaction("I") as t:
            t.update("x", set={"balance": "balance + 0"}, where="id = 1")
    _transfer(lake, "R,CT")
    assert _isolated_totals(backend.lake()) == [90, 110]
    assert _isolated_totals(lake) == [90, 110]


def _forget_log_below(lake, table, version):
    """What Spark's or delta-rs' log clean-up leaves: the commits below ``version`` gone (a
    checkpoint at ``version`` holds them)."""
    for v in range(version):
        lake.store.delete(f"{table}/_delta_log/{v:020d}.json")


@pytest.mark.timeout(120)  # the first bug this names looped for ever
@pytest.mark.parametrize("record",
                         ["kept", "kept-log-cleaned-up", "cleaned-up", "cleaned-up-log-too"])
def test_a_table_new_to_the_cut_joins_it_whole_when_its_checkpoint_holds_the_other_half(
        backend, record):
    """Point 1, checkpointed: the cut knows x, a R,CT transfer then moved x and y, and y was
    checkpointed above it (one more commit up). y joins the cut with the transfer's y half, so
    the x half is taken too: a reader neither loops looking for a y commit above the checkpoint
    (the record kept) nor leaves the x half out (the record cleaned up; and y's commits below
    the checkpoint cleaned up too, as Spark or delta-rs would after their log retention), nor
    fails looking for the y half in commits that clean-up deleted (the record kept: records are
    kept for days, a log retention may be shorter)."""
    lake = _bank(backend, known=False)
    with lake.transaction("I") as t:  # the global log knows x only
        t.update("x", set={"balance": "balance + 0"}, where="id = 1")
    _transfer(lake, "R,CT")
    with lake.transaction("") as t:  # y moves on: its checkpoint lies above the transfer
        t.update("y", set={"balance": "balance + 0"}, where="id = 2")
    at = lake.maintenance.checkpoint("y")
    if record.startswith("cleaned-up"):
        assert lake.maintenance.cleanup(older_than=0, force=True)["records"] == 1
    if record.endswith("log-too") or record.endswith("log-cleaned-up"):
        _forget_log_below(lake, "y", at)
    assert _isolated_totals(backend.lake()) == [90, 110]
    assert _isolated_totals(lake) == [90, 110]


@pytest.mark.parametrize("checkpointer", ["lakevilla", "delta-rs"])
def test_a_table_joined_at_a_checkpoint_never_shows_half_of_a_transfer_whose_other_table_was_read(
        backend, checkpointer):
    """Point 1, from the other side: a reader read x, then a R,CT transfer moved x and y and
    y was checkpointed; y, new to the cut, joins without the transfer (x cannot take it), even
    though its newest checkpoint holds it. Checkpointed by lakevilla, whose promise ends below
    the transfer, or by delta-rs, which promises nothing (the whole log is examined)."""
    from deltalake import DeltaTable

    lake = _bank(backend, known=False)
    with lake.transaction("I") as t:  # the global log knows x only
        t.update("x", set={"balance": "balance + 0"}, where="id = 1")
    reader = backend.lake()
    with reader.transaction("I") as r:
        seen_x = _sum(r, "x")
        _transfer(lake, "R,CT")
        if checkpointer == "lakevilla":
            lake.maintenance.checkpoint("y")
        else:
            lake.flush()
            DeltaTable(backend.table_uri("y"),
                       storage_options=backend.storage_options or None).create_checkpoint()
        assert (seen_x, _sum(r, "y")) == (100, 100)
    assert _isolated_totals(reader) == [90, 110]


def test_a_table_that_cannot_be_read_without_half_a_transfer_does_not_join_the_cut(backend):
    """Point 1, log cleaned up: as above, but y's only readable versions hold the transfer
    (its older commits are gone, the checkpoint is at the transfer's version). y cannot join
    this reader's cut: the read aborts (``gvl-cut``), and a new transaction sees the whole
    transfer."""
    lake = _bank(backend, known=False)
    with lake.transaction("I") as t:  # the global log knows x only
        t.update("x", set={"balance": "balance + 0"}, where="id = 1")
    reader = backend.lake()
    with pytest.raises(lv.TransactionAborted) as e:
        with reader.transaction("I") as r:
            _sum(r, "x")
            _transfer(lake, "R,CT")
            at = lake.maintenance.checkpoint("y")
            # the checkpoint is at the transfer
            assert commit_txn(lake._client.log("y").read_commit(at)) is not None
            _forget_log_below(lake, "y", at)
            _sum(r, "y")
    assert e.value.reason == "gvl-cut"
    assert _isolated_totals(reader) == [90, 110]


class CommitGets(StoreWrapper):
    """Counts GETs of Delta commits (``<table>/_delta_log/<version>.json``)."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.commit_gets = 0

    def get(self, key):
        if "/_delta_log/" in key and key.endswith(".json"):
            self.commit_gets += 1
        return self.inner.get(key)


def test_a_table_new_to_the_cut_joins_it_with_the_same_reads_whatever_its_log_length(backend):
    """The first isolated read of a table no entry knows examines only the commits after what
    its checkpoint promises (every commit up to there a single-table one, which any cut takes
    whole): as many commit GETs for a log of 42 commits as for one of 12 (it was one per
    commit), and the read sees every row."""
    lake = backend.lake()
    lengths = {"short": 12, "long": 42}
    for t, n in lengths.items():
        lake.create_table(t, ROW)
        for k in range(n - 1):
            with lake.transaction("") as txn:
                txn.insert(t, {"id": [k], "v": [k]})
    lake.flush()
    gets = {}
    for t, n in lengths.items():
        store = CommitGets(backend.store())
        reader = backend.lake(store=store)
        with reader.transaction("I") as r:
            assert r.read(t).num_rows == n - 1
        gets[t] = store.commit_gets
        reader.close()
    assert gets["short"] == gets["long"] <= 6
    assert lake._client.gvl.head().tables == {"short": 11, "long": 41}  # both joined whole


@pytest.mark.parametrize("first", ["y", "x"])
def test_a_transfer_half_published_below_a_checkpoint_is_never_seen_half_by_a_join(
        backend, first):
    """A R,CT transfer decided and published on y, not yet on x, and y checkpointed above its
    half: the checkpoint's promise ends below the transfer, so y's join examines it. Read
    first, y takes it and the x half is written from the record; read after x (which cannot
    take it), y joins below it. Either way the money is all there."""
    lake = _bank(backend, known=False)
    with lake.transaction("I") as t:  # the global log knows x only
        t.update("x", set={"balance": "balance + 0"}, where="id = 1")
    seen = {}

    def during():
        with lake.transaction("") as t:  # y moves on above the transfer's half
            t.update("y", set={"balance": "balance + 0"}, where="id = 2")
        lake.maintenance.checkpoint("y")
        with backend.lake().transaction("I") as r:
            other = "x" if first == "y" else "y"
            seen.update({first: _sum(r, first), other: _sum(r, other)})

    gate = HalfPublished(backend.store(), "y", "x", during)
    writer = backend.lake(store=gate)
    txn = writer.begin("R,CT")
    txn.update("y", set={"balance": "balance - 10"}, where="id = 1")
    txn.update("x", set={"balance": "balance + 10"}, where="id = 1")
    gate.armed = True
    txn.commit()
    assert gate.fired == 1
    assert seen == ({"x": 110, "y": 90} if first == "y" else {"x": 100, "y": 100})
    assert _isolated_totals(backend.lake()) == [110, 90]


def test_fresh_isolated_reader_sees_every_acknowledged_commit(backend):
    """Point 2: record-decided commits, single-table CT and R commits, plain Delta and
    delta-rs commits are all visible to an I transaction that starts after them."""
    from deltalake import write_deltalake

    lake = _bank(backend)
    _transfer(lake, "R,CT", "x", "y", 10)
    _transfer(lake, "R,CT", "y", "x", 3)
    assert _isolated_totals(backend.lake()) == [93, 107]
    with lake.transaction("CT") as t:  # single-table CT: decided by its table commit
        t.update("x", set={"balance": "balance + 1"}, where="id = 2")
    with lake.transaction("R") as t:
        t.update("y", set={"balance": "balance - 1"}, where="id = 2")
    with lake.transaction("") as t:
        t.insert("x", {"id": [3], "balance": [5]})
    write_deltalake(backend.table_uri("y"), pa.table({"id": [4], "balance": [6]}, schema=ACC),
                    mode="append", storage_options=backend.storage_options or None)
    assert _isolated_totals(backend.lake()) == [99, 112]
    assert _isolated_totals(lake) == [99, 112]  # a warm client too


def test_isolated_writer_commits_after_a_ct_transfer(backend):
    """Point 3: an I writer reads the table with the CT commit in it, so it validates and
    commits on its first attempt."""
    lake = _bank(backend)
    _transfer(lake, "R,CT")
    attempts = []

    def bump(t):
        attempts.append(1)
        t.update("x", set={"balance": "balance + 1"}, where="id = 1")

    lake.run(bump, features="I", retries=3)
    assert len(attempts) == 1
    assert _bal(lake, "x") == 41


@pytest.mark.parametrize("op", ["insert", "update"])
def test_isolated_writer_never_exposes_half_of_a_ct_transfer(backend, op):
    """Point 4: an I writer that moves x past an R,CT transfer takes in the transfer's y
    commit too, so fresh I readers see all of it."""
    lake = _bank(backend)
    _transfer(lake, "R,CT")
    with lake.transaction("I") as t:
        if op == "insert":
            t.insert("x", {"id": [3], "balance": [0]})
        else:
            t.update("x", set={"balance": "balance + 0"}, where="id = 2")
    assert _isolated_totals(backend.lake()) == [90, 110]


@pytest.mark.parametrize("writer", ["R,CT", "I"])
def test_half_published_transfer_is_seen_whole_or_not_at_all(backend, writer):
    """A transfer decided and published on x but not yet on y: a reader that meets its x
    commit completes the y commit (from the record or the global log entry) instead of
    showing half; a reader that read y before the transfer sees neither side."""
    lake = _bank(backend)
    early = backend.lake().begin("I")
    assert _sum(early, "y") == 100
    seen = {}

    def read_now():
        seen["fresh"] = _isolated_totals(backend.lake())
        seen["early"] = _sum(early, "x")
        early.commit()

    gate = HalfPublished(backend.store(), "x", "y", read_now)
    writer_lake = backend.lake(store=gate)
    txn = writer_lake.begin(writer)
    txn.update("x", set={"balance": "balance - 10"}, where="id = 1")
    txn.update("y", set={"balance": "balance + 10"}, where="id = 1")
    gate.armed = True
    txn.commit()
    assert gate.fired == 1
    assert seen == {"fresh": [90, 110], "early": 100}
    assert _isolated_totals(backend.lake()) == [90, 110]
    assert (_sum(lake, "x"), _sum(lake, "y")) == (90, 110)


# -- point 5: one cut, also under snapshot isolation ------------------------------------------

@pytest.mark.parametrize("writer", ["I", "R,CT", "R,CT,I", "CT,I"])
@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_reader_sees_all_or_nothing_of_a_transfer_between_its_reads(backend, writer, isolation):
    """Point 5: each table is read at one cut fixed at the first read, so a transfer that
    commits between two reads is invisible to both (the second read is not newer than the
    first), and the read-only transaction commits without validation."""
    _reader_between_reads(backend, writer, isolation)


@pytest.mark.parametrize("writer", ["I", "R,CT", "R,CT,I", "CT,I"])
def test_write_serializable_reader_sees_all_or_nothing_of_a_transfer(local_backend, writer):
    """The same under write_serializable (local store only: a read-only transaction takes the
    same path on S3 as under snapshot)."""
    _reader_between_reads(local_backend, writer, "write_serializable")


def _reader_between_reads(backend, writer, isolation):
    lake = _bank(backend)
    reader = backend.lake().begin("I", isolation=isolation)
    bx = _sum(reader, "x")
    _transfer(lake, writer)
    by = _sum(reader, "y")
    reader.commit()
    assert (bx, by) == (100, 100)


def test_reader_that_starts_after_a_transfer_sees_it_whole(backend):
    lake = _bank(backend)
    for w in ("I", "R,CT", "R,CT,I"):
        _transfer(lake, w)
    assert _isolated_totals(backend.lake(), isolation="snapshot") == [70, 130]


# -- freshness with I writers and foreign writers -------------------------------------------------

def test_foreign_commits_are_visible_beside_an_isolated_writer_that_moved_another_table(backend):
    """A reader that read x before an I writer moved x still sees a delta-rs commit to y
    that was acknowledged before the reader started (it commutes with the I write)."""
    from deltalake import write_deltalake

    lake = _bank(backend)
    write_deltalake(backend.table_uri("y"), pa.table({"id": [3], "balance": [7]}, schema=ACC),
                    mode="append", storage_options=backend.storage_options or None)
    reader = backend.lake().begin("I")
    assert _sum(reader, "x") == 100
    with lake.transaction("I") as t:
        t.update("x", set={"balance": "balance + 5"}, where="id = 1")
    assert _sum(reader, "y") == 107
    assert _sum(reader, "x") == 100
    reader.commit()
    assert _isolated_totals(backend.lake()) == [105, 107]


def test_commit_that_lands_while_an_isolated_writer_validates_is_ordered_after_it(backend):
    """An I writer read y, then a delta-rs append lands on y after the writer took y's
    commits in but before it announced: the writer is ordered before the append. A reader
    that read x before the writer's x commit therefore misses the writer, and must miss the
    append too (seeing it would put the reader after the append, the append after the
    writer, and the writer after the reader)."""
    from deltalake import write_deltalake

    _bank(backend)
    reader = backend.lake().begin("I")
    assert _sum(reader, "x") == 100

    def append_to_y():
        write_deltalake(backend.table_uri("y"), pa.table({"id": [3], "balance": [7]}, schema=ACC),
                        mode="append", storage_options=backend.storage_options or None)

    w_lake = backend.lake(store=HookStore(backend.store(), lambda k, key: k == "put_if_absent" and
                                          key.startswith(GVL_DIR + "/0"), append_to_y))
    w = w_lake.begin("I")
    seen_y = _sum(w, "y")
    w.update("x", set={"balance": f"balance + {seen_y - 100}"}, where="id = 1")
    w.update("x", set={"balance": "balance + 1"}, where="id = 2")
    w.commit()
    assert w_lake.store.fired == 1
    assert _sum(reader, "y") == 100  # neither the writer nor the append
    assert _sum(reader, "x") == 100
    reader.commit()
    assert _isolated_totals(backend.lake()) == [101, 107]


def test_reader_takes_what_it_can_of_an_entry_that_moved_a_table_it_read(backend):
    """Another reader's entry takes in, together, a delta-rs append to y and a later R,CT
    transfer between x and y. A reader that read x before the transfer cannot take that
    entry whole, but still takes the append (it was acknowledged before the reader started
    and needs nothing of x)."""
    from deltalake import write_deltalake

    _bank(backend)
    write_deltalake(backend.table_uri("y"), pa.table({"id": [3], "balance": [7]}, schema=ACC),
                    mode="append", storage_options=backend.storage_options or None)
    reader = backend.lake().begin("I")
    assert _sum(reader, "x") == 100
    _transfer(backend.lake(), "R,CT")
    assert _isolated_totals(backend.lake()) == [90, 117]  # another reader takes both in
    assert _sum(reader, "y") == 107
    reader.commit()
    assert reader.stats["cut_left_out"] >= 1


def test_isolated_writer_validates_reads_against_commits_incorporated_at_its_commit(local_backend):
    """Serializable I writers validate (R1) their reads against every commit on the tables
    they read up to the commit they announce with, by any client; snapshot writers do not."""
    for isolation, expect in (("serializable", "aborted"), ("snapshot", "committed")):
        lake = _bank(local_backend, tables=(f"a{isolation[:2]}", f"b{isolation[:2]}"))
        a, b = f"a{isolation[:2]}", f"b{isolation[:2]}"
        w = lake.begin("I", isolation=isolation)
        total = _sum(w, a)
        with lake.transaction("R") as t:  # a plain R writer changes what w read
            t.update(a, set={"balance": "balance + 1"}, where="id = 2")
        w.update(b, set={"balance": str(total)}, where="id = 1")
        try:
            w.commit()
            got = "committed"
        except lv.TransactionAborted as e:
            assert "R1" in str(e)
            got = "aborted"
        assert got == expect


# -- points 6 and 7: clean-up never forks or wedges the log ---------------------------------------

@pytest.mark.parametrize("long", [True, False])
def test_cleanup_never_lets_a_long_transaction_fork_the_log(backend, monkeypatch, long):
    """Point 6: an I transaction whose start entry (and the slot after it) were cleaned up
    does not append into the deleted slot; the hint never moves backwards; new clients see
    every acknowledged update. A transaction older than LONG_TRANSACTION reads the hint again
    at commit and commits; a younger one appends from what it knows, finds its slot behind
    the horizon and aborts (nothing of it visible)."""
    import lakevilla.isolation.decide

    monkeypatch.setattr(lakevilla.isolation.decide, "LONG_TRANSACTION", 0.0 if long else 3600.0)
    shared = {"created": [], "hints": [], "lock": threading.Lock()}
    _bank(backend)

    def audited(**kw):
        return backend.lake(store=GvlAudit(backend.store(), shared), **kw)

    lake = audited()
    txn = lake.begin("I")
    txn.update("x", set={"balance": "balance + 1"}, where="id = 1")
    other = audited()
    for k in range(5):
        with other.transaction("I") as t:
            t.update("y", set={"balance": f"{60 + k}"}, where="id = 1")
    assert other.maintenance.cleanup(keep_global=1, older_than=0, force=True)["global_entries"] > 0
    if long:
        txn.commit()
    else:
        with pytest.raises(lv.TransactionAborted):
            txn.commit()
    audit = GvlAudit(backend.store(), shared)
    assert audit.forks() == [] and not audit.hint_went_back()
    with backend.lake().transaction("I") as r:
        assert (_bal(r, "x"), _bal(r, "y")) == (51 if long else 50, 64)
    assert _bal(backend.lake(), "x") == (51 if long else 50)


def test_cleanup_between_validation_and_announcement_cannot_fork_the_log(backend):
    """Point 6, the narrow race: other clients append and clean up between our reading of
    the head and our put-if-absent of the next entry; the put lands in a deleted slot, and
    the transaction must notice and abort instead of committing a fork."""
    shared = {"created": [], "hints": [], "lock": threading.Lock()}
    _bank(backend)
    other = backend.lake(store=GvlAudit(backend.store(), shared))

    def race():
        for k in range(4):
            with other.transaction("I") as t:
                t.update("y", set={"balance": f"{70 + k}"}, where="id = 1")
        # below max_transaction_age: slots can go
        other.maintenance.cleanup(keep_global=1, older_than=0, force=True)

    store = HookStore(GvlAudit(backend.store(), shared),
                      lambda kind, key: kind == "put_if_absent" and key.startswith(GVL_DIR + "/0"),
                      race)
    lake = backend.lake(store=store)
    txn = lake.begin("I")
    txn.update("x", set={"balance": "balance + 1"}, where="id = 1")
    lake._client.gvl.head()  # warm
    outcome = "committed"
    try:
        txn.commit()
    except lv.TransactionAborted:
        outcome = "aborted"
    assert store.fired == 1
    audit = GvlAudit(backend.store(), shared)
    assert not audit.hint_went_back()
    with backend.lake().transaction("I") as r:
        got = (_bal(r, "x"), _bal(r, "y"))
    assert got == ((51 if outcome == "committed" else 50), 73)
    assert _bal(backend.lake(), "x") == got[0]  # plain readers agree: no orphaned table commit


@pytest.mark.parametrize("forced", [False, True])
def test_a_reader_never_walks_into_a_fork_written_below_the_horizon(local_backend, forced):
    """Point 6, the reader's side. A reader walks the log from its cut; between its hint read
    and its read of the next slot, others append and clean up, and a writer whose head is
    that reader's puts its announcement into that slot.

    Clean-up keeps every entry younger than max_transaction_age, so the slot is still taken:
    the writer loses the put, validates again and commits, and nothing forks. Forced below
    that age, clean-up deletes the slot, the writer's put makes a fork and the writer aborts;
    the reader must not take the fork for the log (it did: it rolled the aborted writer's
    commit onto the table, naming a data file the writer had deleted)."""
    backend = local_backend
    shared = {"created": [], "hints": [], "lock": threading.Lock()}

    def audited(store=None, **kw):
        return backend.lake(store=GvlAudit(store or backend.store(), shared), **kw)

    lake0 = _bank(backend, tables=("x", "y", "z"))
    other = audited()
    cleaned: list[int] = []

    def others_append_and_clean_up():
        for k in range(4):
            with other.transaction("I") as t:
                t.update("x", set={"balance": f"{70 + k}"}, where="id = 2")
        opts = {"older_than": 0, "force": True} if forced else {}
        cleaned.append(other.maintenance.cleanup(keep_global=1, **opts)["global_entries"])

    stale = audited(HookStore(
        backend.store(),
        lambda kind, key: kind == "put_if_absent" and key.startswith(GVL_DIR + "/0"),
        others_append_and_clean_up)).begin("I")
    stale.update("z", set={"balance": "balance + 1000"}, where="id = 1")
    outcome: list[str] = []

    def stale_writer_announces():
        try:
            stale.commit()
            outcome.append("committed")
        except lv.TransactionAborted:
            outcome.append("aborted")

    armed = [False]
    slot = lake0._client.gvl.head().seq + 1
    reader_store = HookStore(backend.store(), lambda kind, key: armed[0] and kind == "get"
                             and key == f"{GVL_DIR}/{slot:020d}.json", stale_writer_announces)
    r = audited(reader_store).begin("I")
    assert _sum(r, "x") == 100  # the cut starts at the head, the slot after it still free
    # news on y that no entry took in: the reader walks the log for it
    with lake0.transaction("") as t:
        t.update("y", set={"balance": "balance + 5"}, where="id = 1")
    armed[0] = True
    y_seen = _sum(r, "y")
    assert reader_store.fired == 1
    z_seen = _sum(r, "z")
    r.commit()
    forks = GvlAudit(backend.store(), shared).forks()
    if forced:
        assert cleaned[0] > 0 and outcome == ["aborted"]  # the writer found its slot cleaned up
        # nothing of it seen, nothing landed
        assert z_seen == 100 and _sum(backend.lake(), "z") == 100
        assert [e.version for e in backend.lake().history("z")
                if e.txn == stale.id and not e.marker] == []
    else:
        assert cleaned == [0] and forks == []  # too young to delete: the slot stayed taken, no fork
        assert (outcome == ["committed"] and z_seen in (100, 1100)
                and _sum(backend.lake(), "z") == 1100)
    assert y_seen in (100, 105)


def test_hint_never_moves_backwards(backend):
    """Two appenders: the first writes its hint only after the second appended the next
    entry and wrote its own hint. The hint must end at the newer entry."""
    lake = _bank(backend)
    other = backend.lake()

    def overtake():
        with other.transaction("I") as t:
            t.update("y", set={"balance": "balance + 1"}, where="id = 2")

    store = HookStore(backend.store(),
                      lambda k, key: key == HINT_KEY and k in ("put", "put_if_match"), overtake)
    slow = backend.lake(store=store)
    with slow.transaction("I") as t:
        t.update("x", set={"balance": "balance + 1"}, where="id = 2")
    assert store.fired == 1
    head = lake._client.gvl.head()
    assert json.loads(backend.store().get(HINT_KEY).data)["seq"] == head.seq
    assert head.seq == slow._client.gvl.head().seq


def test_long_reader_still_takes_in_commits_after_clean_up(backend):
    """A read-only I transaction whose start entry (and the ones after it) were cleaned up
    goes on from the oldest entry kept, since nothing it read changed in between: a commit
    acknowledged later, before it reads that table, is still visible to it."""
    lake = _bank(backend, tables=("x", "y", "z"))
    reader = backend.lake().begin("I")
    assert _sum(reader, "x") == 100
    for k in range(4):
        with lake.transaction("I") as t:
            t.update("y", set={"balance": f"{60 + k}"}, where="id = 1")
    lake.maintenance.cleanup(keep_global=1, older_than=0, force=True)
    with lake.transaction("R,CT") as t:  # not announced: the reader must take it in itself
        t.update("z", set={"balance": "balance + 5"}, where="id = 1")
    assert _sum(reader, "z") == 105
    assert _sum(reader, "y") == 113
    reader.commit()


def test_stalled_isolated_transaction_is_decided_after_its_entries_were_cleaned_up(backend):
    """Point 7: recovery (and a writer that meets the stalled marker) can decide a stalled I
    transaction whose start entry is gone."""
    lake = _bank(backend, marker_ttl=5.0)
    stalled = lake.begin("R,CT,I")
    stalled.update("x", set={"balance": "0"}, where="id = 1")  # its marker names its start entry
    lake._client.heartbeats.forget(stalled)
    for k in range(4):
        with lake.transaction("I") as t:
            t.update("y", set={"balance": f"{80 + k}"}, where="id = 1")
    lake.maintenance.cleanup(keep_global=1, older_than=0, force=True)
    later = backend.lake(marker_ttl=5.0, clock=_later_clock)
    with later.transaction("R") as t:  # waits on the stalled marker, finds it expired, decides
        t.update("x", set={"balance": "balance + 1"}, where="id = 2")
    report = later.recover()
    assert report.running == []
    assert open_markers(later, "x") == []
    assert _isolated_totals(backend.lake()) == [101, 133]
    stalled.lake.settings = stalled.lake.settings.with_(max_retries=0)
    with pytest.raises(lv.TransactionAborted):
        stalled.commit()
    assert _bal(later, "x") == 50


def test_cleanup_in_a_loop_beside_long_isolated_transactions(local_backend):
    """Clean-up keeping two entries runs in a loop while I writers transfer and long I
    readers check totals: the hint never goes back, no wedge, no wrong total, and every
    acknowledged transfer (and nothing else) is in the balances. Clean-up here is forced below
    any transaction's age (min_age=0), so a slow appender can put its announcement into a slot
    clean-up just deleted (a fork, docs/protocol.md "Clean-up by age"): one in about eight runs
    on a loaded machine. The appender must find it and give up; the balances show that it did."""
    shared = {"created": [], "hints": [], "lock": threading.Lock()}
    _bank(local_backend)
    acked: list[tuple[str, str, int]] = []

    def audited():
        return local_backend.lake(store=GvlAudit(local_backend.store(), shared))

    stop = threading.Event()
    errors, totals, cleaned = [], [], []

    def cleaner():
        lk = audited()
        while not stop.is_set():
            try:
                # entries of any age: slots can go
                cleaned.append(lk._client.gvl.cleanup(2, min_age=0.0))
            except Exception as e:  # noqa: BLE001 - surfaced below
                errors.append(e)

    def writer(seed):
        lk, rng = audited(), random.Random(seed)
        for _ in range(12):
            amt = rng.randint(1, 5)
            src, dst = ("x", "y") if rng.random() < 0.5 else ("y", "x")

            def move(t, src=src, dst=dst, amt=amt):
                t.update(src, set={"balance": f"balance - {amt}"}, where="id = 1")
                t.update(dst, set={"balance": f"balance + {amt}"}, where="id = 1")

            try:
                lk.run(move, features=rng.choice(["I", "R,CT,I", "R,CT"]), retries=40)
                acked.append((src, dst, amt))
            except Exception as e:  # noqa: BLE001
                errors.append(e)

    def long_reader():
        lk = audited()
        while not stop.is_set():
            try:
                r = lk.begin("I")
                a = _sum(r, "x")
                time.sleep(0.02)  # stays open while others commit and clean up
                b = _sum(r, "y")
                r.commit()
                totals.append(a + b)
            except Exception as e:  # noqa: BLE001
                errors.append(e)

    threads = [threading.Thread(target=cleaner), threading.Thread(target=long_reader)]
    writers = [threading.Thread(target=writer, args=(s,)) for s in range(2)]
    for th in threads + writers:
        th.start()
    for th in writers:
        th.join(600)
    stop.set()
    for th in threads:
        th.join(60)
    assert errors == []
    assert totals and set(totals) == {200}
    assert sum(cleaned) > 0
    audit = GvlAudit(local_backend.store(), shared)
    assert not audit.hint_went_back()
    assert sum(_isolated_totals(local_backend.lake())) == 200
    want = {t: 50 + sum(a for _, d, a in acked if d == t) - sum(a for s_, _, a in acked if s_ == t)
            for t in ("x", "y")}
    final = local_backend.lake()
    assert {t: _bal(final, t) for t in ("x", "y")} == want and len(acked) == 24


# -- the bank in real processes: R,CT writers, read-only I readers --------------------------------

def _report(out, item, lake) -> None:
    out.put(item)
    out.close()
    out.join_thread()  # flushed before we leave
    lake.close()
    os._exit(0)  # delta-rs teardown may abort the interpreter (environment notes)


def _ct_transfers(uri, opts, wid, n, out):
    rng = random.Random(wid)
    lake = lv.Lake(uri, storage_options=opts or None)
    for _ in range(n):
        amt = rng.randint(1, 9)
        src, dst = ("x", "y") if rng.random() < 0.5 else ("y", "x")
        sign = -amt if src == "x" else amt

        def move(t, src=src, dst=dst, amt=amt, sign=sign):
            t.update(src, set={"balance": f"balance - {amt}"}, where="id = 1")
            t.update(dst, set={"balance": f"balance + {amt}"}, where="id = 1")
            t.insert("ledger", {"id": [wid], "balance": [sign]})  # x's change, for the auditors

        lake.run(move, features="R,CT", retries=50)
    _report(out, ("writer", n), lake)


def _auditor(uri, opts, writers_done, out):
    lake = lv.Lake(uri, storage_options=opts or None)
    n = wrong = aborts = 0
    while not writers_done.is_set() or n < 5:
        r = lake.begin("I")
        try:
            x, y, dx = _sum(r, "x"), _sum(r, "y"), _sum(r, "ledger")
            r.commit()
        except lv.TransactionAborted:
            aborts += 1
            continue
        n += 1
        wrong += (x + y != 200) or (x != 100 + dx)
    _report(out, ("auditor", (n, wrong, aborts)), lake)


@pytest.mark.slow
def test_bank_with_ct_writers_and_isolated_auditors_in_processes(backend):
    lake = _bank(backend, known=False)
    lake.create_table("ledger", ACC)
    ctx = mp.get_context("spawn")
    out, done = ctx.Queue(), ctx.Event()
    per_writer = 12 if backend.kind == "local" else 5
    writers = [ctx.Process(target=_ct_transfers,
                           args=(backend.uri, backend.storage_options, w, per_writer, out))
               for w in range(3)]
    auditors = [ctx.Process(target=_auditor, args=(backend.uri, backend.storage_options, done, out))
                for _ in range(2)]
    for p in writers + auditors:
        p.start()
    got = [out.get(timeout=900) for _ in writers]
    done.set()
    got += [out.get(timeout=900) for _ in auditors]
    for p in writers + auditors:
        p.join(60)
    audits = [a for kind, a in got if kind == "auditor"]
    assert sum(n for kind, n in got if kind == "writer") == 3 * per_writer
    assert all(n >= 5 for n, _, _ in audits)
    assert [w for _, w, _ in audits] == [0, 0]  # no wrong total
    assert [a for _, _, a in audits] == [0, 0]  # no reader abort
    fresh = backend.lake()
    final = [_sum(fresh, "x"), _sum(fresh, "y"), _sum(fresh, "ledger")]
    with fresh.transaction("I") as r:  # a fresh reader after the writers stop sees the final state
        assert [_sum(r, "x"), _sum(r, "y"), _sum(r, "ledger")] == final
    assert final[0] + final[1] == 200 and final[0] == 100 + final[2]
    assert fresh.read("ledger").num_rows == 3 * per_writer



@pytest.mark.parametrize("foreign", [False, True])
def test_a_reader_writes_a_created_tables_version_0_and_never_over_a_foreign_table(
        backend, foreign):
    """A R,CT transaction decided to create n and move x, and landed x; n's version 0 is not
    written yet. An isolated reader of x finishes the transaction from its record: it writes n
    at version 0. If delta-rs (which ignores lakevilla's reservation of the name) created n
    meanwhile, the reader must not append the creating commit to that foreign table: it
    raises ``CreateConflictError``, as the owner and recovery do, and n keeps its one version."""
    from deltalake import write_deltalake

    _bank(backend, tables=("x",))
    seen: list[object] = []

    def during():
        if foreign:
            uri, opts = backend.table_uri("n"), backend.storage_options or None
            write_deltalake(uri, pa.table({"id": [7], "v": [7]}, schema=ROW), storage_options=opts)
        try:
            with backend.lake().transaction("I") as r:
                seen.append((_sum(r, "x"), r.read("n").num_rows))
        except lv.LakeVillaError as e:
            seen.append(e)

    gate = HalfPublished(backend.store(), "x", "n", during)
    txn = backend.lake(store=gate).begin("R,CT")
    txn.create_table("n", data={"id": [1], "v": [1]}, partition_by=None)
    txn.update("x", set={"balance": "balance - 10"}, where="id = 1")
    gate.armed = True
    if foreign:
        with pytest.raises(lv.CreateConflictError):
            txn.commit()
    else:
        assert txn.commit().versions["n"] == 0
    assert gate.fired == 1 and len(seen) == 1
    assert backend.delta("n").version() == 0
    if foreign:
        assert isinstance(seen[0], lv.CreateConflictError), seen
        assert backend.delta_rows("n") == [{"id": 7, "v": 7}]
    else:
        assert seen == [(90, 1)]
        assert backend.delta_rows("n") == [{"id": 1, "v": 1}]
