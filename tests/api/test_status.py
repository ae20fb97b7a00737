"""``lake.status()`` and ``lakevilla status``: each kind of transaction reported as what it is."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest

from lakevilla.cli import main as cli
from lakevilla.store import FaultInjectingStore, FaultPlan, SimulatedCrash
from tests.helpers import claim_now, entries_landed

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])
TABLES = ("a", "b", "c", "d", "e", "f")


def _dies_after_deciding(backend, prefix: str):
    """A client that crashes right after its deciding put-if-absent under ``prefix``."""
    plan = FaultPlan(crash_after=1, kinds=("put_if_absent",),
                     predicate=lambda kind, key: key.startswith(prefix) and key.endswith(".json"))
    return backend.lake(store=FaultInjectingStore(backend.store(), plan))


@pytest.fixture
def busy_lake(backend):
    """A lake with one transaction of each kind, built deterministically (no sleeps)."""
    lake = backend.lake()
    for t in TABLES:
        lake.create_table(t, T)
        with lake.transaction("") as txn:
            txn.insert(t, {"id": [1], "value": [0]})
    live = lake.begin("R")
    live.update("a", set={"value": "1"}, where="id = 1")
    # as after lost commit races: an optimistic R transaction holds no marker before
    claim_now(live, "a")
    queued = lake.begin("R")
    queued.update("a", set={"value": "2"}, where="id = 1")
    claim_now(queued, "a")  # its marker lies above `live`'s
    # a client whose markers expired an hour ago, dead at commit: markers claimed, record not
    # written
    before_record = FaultPlan(crash_before=1, kinds=("put_if_absent",),
                              predicate=lambda kind, key: (key.startswith("_lakevilla/txns/")
                                                           and key.count("/") == 2))
    past = backend.lake(clock=lambda: time.time() - 3600,
                        store=FaultInjectingStore(backend.store(), before_record))
    stalled = past.begin("R,CT")
    stalled.update("b", set={"value": "3"}, where="id = 1")
    stalled.update("c", set={"value": "3"}, where="id = 1")
    with pytest.raises(SimulatedCrash):
        stalled.commit()
    past.close()  # its heartbeats stop: the client is gone
    ct = _dies_after_deciding(backend, "_lakevilla/txns/").begin("R,CT")
    ct.update("d", set={"value": "4"}, where="id = 1")
    ct.update("e", set={"value": "4"}, where="id = 1")
    with pytest.raises(SimulatedCrash):
        ct.commit()  # decided (record COMMITTING), no table commit written
    # f joins the global log (entry 0): the dying I writer's first global-log write is then its
    # announcement (entry 1)
    with lake.transaction("I") as known:
        known.read("f")
    announced = _dies_after_deciding(backend, "_lakevilla/gvl/").begin("I")
    announced.update("f", set={"value": "5"}, where="id = 1")
    with pytest.raises(SimulatedCrash):
        announced.commit()  # announced in the global log, not written to f
    optimistic = lake.begin("R")  # R at the tail: no marker; its sublog entry is all storage shows
    optimistic.read("c")  # a read rides along with the next entry
    optimistic.update("b", set={"value": "6"}, where="id = 1")
    entries_landed(optimistic)
    yield lake, {"live": live, "queued": queued, "stalled": stalled, "ct": ct,
                 "announced": announced, "optimistic": optimistic}
    for txn in (live, queued, optimistic):
        txn.abort()
    lake.close()


def run_cli(capsys, backend, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    opts = (["--storage-options", json.dumps(backend.storage_options)]
            if backend.storage_options else [])
    code = cli([*opts, *argv])
    return code, capsys.readouterr().out


def test_status_reports_each_transaction_as_what_it_is(busy_lake, backend, capsys):
    lake, tx = busy_lake
    st = lake.status()
    live, queued = st.transaction(tx["live"].attempt), st.transaction(tx["queued"].attempt)
    assert live.state == "running" and set(live.markers) == {"a"} and live.heartbeat_age < 30
    assert queued.state == "waiting" and queued.waits_for == [tx["live"].attempt]
    stalled = st.transaction(tx["stalled"].attempt)
    assert (stalled.state == "stalled" and set(stalled.markers) == {"b", "c"}
            and stalled.heartbeat_age > 3000)
    assert stalled.features == "R,CT" and stalled.age > 3000
    ct = st.transaction(tx["ct"].attempt)
    assert (ct.state, ct.decided_by, ct.unpublished) == (
        "decided-unpublished", "record", ["d", "e"])
    ann = st.transaction(tx["announced"].attempt)
    assert (ann.state, ann.decided_by, ann.unpublished) == (
        "decided-unpublished", "global_log", ["f"])
    opt = st.transaction(tx["optimistic"].attempt)
    assert (opt.state, opt.tables, opt.statements, opt.markers, opt.features) == (
        "running", ["b", "c"], 1, {}, "R")
    assert opt.heartbeat is None and opt.activity_age < 600 and opt.age < 600
    assert live.tables == ["a"] and live.statements == 1
    assert len(st.transactions) == 6 and st.records["COMMITTING"] == 1
    g = st.global_log
    assert (g.head, g.oldest, g.entries, g.head_txn) == (1, 0, 2, tx["announced"].attempt)
    assert g.pending == [{"table": "f", "attempt": tx["announced"].attempt, "published": False}]
    markers = {m.table: m for ts in st.tables for m in ts.open_markers}
    assert (markers["b"].state == "stalled" and markers["a"].state == "running"
            and set(markers) == set(TABLES))

    # the same from the shell, as JSON and as text
    code, stdout = run_cli(capsys, backend, "status", backend.uri, "--json")
    assert code == 0
    out = json.loads(stdout)
    states = {t["attempt"]: t["state"] for t in out["transactions"]}
    assert states == {tx["live"].attempt: "running", tx["queued"].attempt: "waiting",
                      tx["stalled"].attempt: "stalled", tx["ct"].attempt: "decided-unpublished",
                      tx["announced"].attempt: "decided-unpublished",
                      tx["optimistic"].attempt: "running"}
    assert out["v"] == 1 and out["global_log"]["head"] == 1 and out["records"]["COMMITTING"] == 1
    assert [t["name"] for t in out["tables"]] == list(TABLES)
    code, text = run_cli(capsys, backend, "status", backend.uri)
    assert code == 0
    for attempt, state in states.items():
        assert any(attempt in ln and state in ln for ln in text.splitlines()), (
            attempt, state, text)
    assert ("unpublished: d, e (decided by record)" in text
            and "unpublished: f (decided by global log)" in text)

    # recovery writes every decided commit and undoes the stalled transaction; live ones are left
    # alone, and so is the announced one's marker until it expires (its commit is written:
    # "decided")
    lake.recover()
    after = lake.status()
    assert {t.attempt: t.state for t in after.transactions} == {
        tx["live"].attempt: "running", tx["queued"].attempt: "waiting",
        tx["announced"].attempt: "decided", tx["optimistic"].attempt: "running"}
    assert after.transaction(tx["announced"].attempt).unpublished == []
    assert after.records == {"COMMITTING": 0, "COMMITTED": 1, "ABORTED": 1}
    assert after.global_log.pending == [
        {"table": "f", "attempt": tx["announced"].attempt, "published": True}]


def test_a_transaction_known_only_by_its_sublogs_is_abandoned_past_the_max_age(local_backend):
    lake = local_backend.lake()
    lake.create_table("a", T)
    txn = lake.begin("R")
    txn.insert("a", {"id": [1], "value": [1]})
    entries_landed(txn)
    assert [t.state for t in lake.status().transactions] == ["running"]
    later = local_backend.lake(clock=lambda: time.time() + lake.settings.max_transaction_age + 60)
    assert [(t.attempt, t.state) for t in later.status().transactions] == [
        (txn.attempt, "abandoned")]
    txn.commit()
    lake.flush()  # the sublogs go behind the commit
    assert lake.status().transactions == []


def test_a_transaction_holding_no_marker_is_idle_past_idle_after_and_the_shell_settles_it(
        local_backend, capsys):
    """What an operator can know of a client that holds no marker: how long it wrote nothing,
    and that no heartbeat exists. ``--idle-after`` sets when that counts as idle; ``recover
    --older-than`` rolls it back (below the idle floor only with ``--force``)."""
    lake = local_backend.lake()
    lake.create_table("a", T)
    txn = lake.begin("R")
    txn.insert("a", {"id": [1], "value": [1]})
    entries_landed(txn)
    root = local_backend.uri
    code, text = run_cli(capsys, local_backend, "status", root)
    assert code == 0 and f"{txn.attempt}  R       running " in text
    assert "no heartbeat (holds no marker)" in text and "1 statement(s) in its sublogs" in text
    code, text = run_cli(capsys, local_backend, "status", root, "--idle-after", "0")
    line = next(ln for ln in text.splitlines() if txn.attempt in ln)
    assert " idle " in line and "no write for" in line
    assert "if it is dead, 'lakevilla recover ROOT --older-than 0' rolls it back" in line
    code, out = run_cli(capsys, local_backend, "--json", "status", root, "--idle-after", "0")
    st = json.loads(out)
    assert st["idle_after"] == 0 and st["transactions"][0]["state"] == "idle"
    assert st["transactions"][0]["heartbeat"] is None
    code, out = run_cli(capsys, local_backend, "recover", root, "--older-than", "0", "--json")
    assert code == 2 and "--older-than 0s is shorter than 60s" in json.loads(out)["error"][
        "message"]
    code, out = run_cli(capsys, local_backend, "recover", root, "--older-than", "0", "--force",
                        "--json")
    rec = json.loads(out)
    assert code == 0 and [r["attempt"] for r in rec["idle_rolled_back"]] == [txn.attempt]
    assert rec["acted"] == 1 and lake.status().transactions == []
    txn.abort()
