"""TPC-C benchmark: the quick mode end to end (shape and the invariants that must hold,
never a timing) and the consistency checker on its own."""

from __future__ import annotations

import json

import pytest

import lakevilla as lv
from benchmarks import tpcc
from benchmarks.tpcc_schema import QUICK, check_consistency, load
from benchmarks.tpcc_txns import KINDS, NewOrderInput, TypeStats, run_one

# multi-table atomicity + no lost updates: never a violation
GUARANTEED = ("LV[R,CT]", "LV[R,CT,I]")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """The quick mode with its clients as threads of this process: the shape and the invariants
    the tests below check are the same, without spawning a pool per run (35 processes, each
    importing lakevilla: about 35 CPU seconds of the run's 53). TPC-C's clients in processes:
    ``test_clients_in_processes_account_for_every_transaction``."""
    out = tmp_path_factory.mktemp("tpcc")
    return tpcc.main(["--quick", "--workers", "threads", "--out", str(out)]), out


def test_quick_run_writes_results_for_every_system_and_client_count(quick_run):
    payload, out = quick_run
    assert json.loads((out / "tpcc.json").read_text())["benchmark"] == "tpcc"
    assert (out / "tpcc.png").stat().st_size > 0
    clients = payload["config"]["clients"]
    assert 1 in clients and max(clients) > 1
    systems = ["LV[DL]", "LV[R]", "LV[R,CT]", "LV[I]", "LV[R,CT,I]"]
    assert [(r["system"], r["clients"]) for r in payload["runs"]] == [
        (s, c) for s in systems for c in clients]


def test_every_issued_transaction_is_accounted_for(quick_run):
    payload, _ = quick_run
    n = payload["config"]["txns_per_client"]
    for r in payload["runs"]:
        assert not r["hung"], r["system"]
        assert sum(t["issued"] for t in r["by_type"].values()) == r["clients"] * n == r["issued"]
        assert set(r["by_type"]) == set(KINDS)
        outcomes = r["committed"] + r["rollbacks"] + r["failed"] + r["partial"] + r["errors"]
        assert outcomes == r["issued"]
        assert r["retries"] <= r["aborts"]
        assert r["committed"] > 0 and r["requests"] > 0


def test_guaranteeing_feature_sets_never_violate_consistency(quick_run):
    payload, _ = quick_run
    for r in payload["runs"]:
        must_hold = r["system"] in GUARANTEED or (r["system"] == "LV[I]" and r["clients"] == 1)
        if must_hold:
            assert r["violations"] == 0, (r["system"], r["clients"], r["violation_details"])
            assert r["unreadable"] == "-", (r["system"], r["clients"], r["violation_details"])
            assert r["partial"] == 0 and r["errors"] == 0, (r["system"], r["error_samples"])


def test_sequential_runs_never_abort_for_conflicts(quick_run):
    payload, _ = quick_run
    for r in payload["runs"]:
        if r["clients"] == 1:
            assert r["aborts"] == 0 and r["failed"] == 0 and r["partial"] == 0, r["system"]


def test_concurrent_runs_of_guaranteeing_feature_sets_record_their_aborts(quick_run):
    """With several clients on one warehouse, conflicts are certain; they must show up as
    aborts and retries or as redos (never as violations) for the feature sets that guarantee
    consistency. Redos, since a read that returns the same rows again is redone (validation by
    value): a Payment beside another Payment redoes instead of aborting."""
    payload, _ = quick_run
    for r in payload["runs"]:
        if r["system"] in GUARANTEED and r["clients"] > 1:
            assert r["aborts"] + r["redos"] > 0, r["system"]


def test_clients_in_processes_account_for_every_transaction(tmp_path):
    """The benchmark's default workers (spawned processes, a pool per run), once: the jobs and
    their results cross the process boundary, and the run's outcomes add up."""
    payload = tpcc.main(["--quick", "--systems", "LV[R,CT]", "--clients", "2",
                         "--out", str(tmp_path)])
    assert payload["info"]["workers"] == "processes"
    (r,) = payload["runs"]
    assert (r["system"], r["clients"], r["hung"]) == ("LV[R,CT]", 2, False)
    assert (r["issued"] == 2 * payload["config"]["txns_per_client"]
            == r["committed"] + r["rollbacks"] + r["failed"])
    assert r["violations"] == 0 and r["errors"] == 0 and r["partial"] == 0, r["violation_details"]


def test_runs_on_tables_with_deletion_vectors_mark_rows_and_keep_the_invariants(tmp_path):
    """``--deletion-vectors``: each feature set runs on the plain database and, beside it, on
    one whose tables ask for deletion vectors; there Delivery's DELETE and the UPDATEs mark rows
    (live files carry DVs, none on the plain database) and conditions 1-4 still hold."""
    payload = tpcc.main(["--quick", "--workers", "threads", "--systems", "LV[R,CT]",
                         "--clients", "1,3", "--deletion-vectors", "--out", str(tmp_path)])
    assert payload["config"]["deletion_vectors"] is True
    runs = {(r["system"], r["clients"]): r for r in payload["runs"]}
    assert sorted(runs) == [("LV[R,CT]", 1), ("LV[R,CT]", 3), ("LV[R,CT] +DV", 1),
                            ("LV[R,CT] +DV", 3)]
    for (system, _), r in runs.items():
        assert r["violations"] == 0 and r["errors"] == 0 and r["partial"] == 0, \
            (system, r["violation_details"], r["error_samples"])
        assert r["committed"] > 0
        assert (r["files_with_dv"] > 0) == system.endswith("+DV"), (system, r["files_with_dv"])


def test_checker_passes_a_fresh_database_and_catches_broken_ones(tmp_path):
    lake = lv.Lake("file://" + str(tmp_path))
    load(lake, QUICK, seed=3)
    assert check_consistency(lake).total == 0
    # condition 2: the next order id runs ahead of the orders
    with lake.transaction(features="R") as txn:
        txn.update("district", set={"d_next_o_id": "d_next_o_id + 1"}, where="d_id = 4")
    # condition 1: warehouse YTD no longer the districts' sum
    with lake.transaction(features="R") as txn:
        txn.update("warehouse", set={"w_ytd": "w_ytd + 1"})
    # condition 3: a hole among the undelivered orders
    with lake.transaction(features="R") as txn:
        first = QUICK.first_undelivered
        txn.delete("new_order", where=f"no_d_id = 7 AND no_o_id = {first + 1}")
    # condition 4: an order line without its order's count
    with lake.transaction(features="R") as txn:
        txn.delete("order_line", where="ol_d_id = 9 AND ol_o_id = 1 AND ol_number = 1")
    got = check_consistency(lake)
    assert (got.c1, got.c2, got.c3, got.c4) == (1, 1, 1, 1), got.details
    assert any("district 4" in d for d in got.details)


@pytest.mark.parametrize("features, violations", [("", 1), ("R", 0)])
def test_new_order_rollback_is_undone_only_by_a_transaction(tmp_path, features, violations):
    """The invalid item is found after the district update and the order rows (the spec's
    order): LV[DL] has committed those statements already, LV[R] undoes them."""
    lake = lv.Lake("file://" + str(tmp_path))
    load(lake, QUICK, seed=5)
    st = TypeStats()
    inp = NewOrderInput(d_id=3, c_id=5, items=(1, 2, 3, 4, QUICK.items + 1),
                        quantities=(1, 1, 1, 1, 1), rollback=True)
    run_one(lake, features, "new_order", inp, st, retries=3, requests=lambda: 0)
    assert (st.rollbacks, st.committed, st.aborts) == (1, 0, 0)
    got = check_consistency(lake)
    assert (got.total, got.c4) == (violations, violations), got.details
