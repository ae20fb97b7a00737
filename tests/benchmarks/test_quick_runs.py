"""The benchmarks' quick modes, run once each: output shape and the invariants that must
hold whatever the timings (no timing is asserted)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import random
from pathlib import Path

import pyarrow as pa
import pytest

from benchmarks import costs, isolation, tables, ycsb
from benchmarks.common import SYSTEMS

LV_SYSTEMS = [s for s, f in SYSTEMS.items() if f is not None]


def _finite_nonneg(x) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x >= 0


# -- pure parts ---------------------------------------------------------------------------

def test_zipfian_is_skewed_and_in_range():
    rng = random.Random(7)
    z = ycsb.Zipfian(1000, rng)
    draws = [z.next() for _ in range(20000)]
    assert min(draws) >= 0 and max(draws) < 1000
    top = draws.count(0) / len(draws)
    assert 0.05 < top < 0.25  # theta 0.99 over 1000 items: item 0 takes ~13%
    assert draws.count(0) > draws.count(1) > draws.count(10)
    assert z.next(2000) < 2000  # grows in place


def test_operation_sequences_are_deterministic_and_disjoint():
    wl = ycsb.WORKLOADS["D"]
    a = ycsb.generate_ops(wl, 100, 200, client=0, clients=2, seed=3, name="D")
    b = ycsb.generate_ops(wl, 100, 200, client=0, clients=2, seed=3, name="D")
    c = ycsb.generate_ops(wl, 100, 200, client=1, clients=2, seed=3, name="D")
    assert a == b
    ins_a = {o.key for o in a if o.kind == "insert"}
    ins_c = {o.key for o in c if o.kind == "insert"}
    assert ins_a and ins_c and not ins_a & ins_c and min(ins_a | ins_c) >= 100
    reads = [o for o in a if o.kind == "read"]
    assert all(0 <= o.key < 100 or o.key in ins_a for o in reads)


# -- quick runs ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ycsb_payload(tmp_path_factory):
    """The quick mode with the clients as threads of this process (``--procs 0``): the shape and
    the final tables' invariants are the same, without a pool of spawned processes per system
    and client count (30 processes, about 30 CPU seconds of imports). Benchmark clients in
    processes: the runner's own test below, TPC-C's small run, the upserts, compaction and
    chaos quick runs."""
    out = tmp_path_factory.mktemp("ycsb")
    return ycsb.main(["--quick", "--procs", "0", "--out", str(out)]), out


def test_request_areas_name_what_each_key_is_for():
    from benchmarks.common import request_area
    from lakevilla import names

    want = {"t/_delta_log/00000000000000000007.json": "log:commit",
            "t/_delta_log/00000000000000000010.checkpoint.parquet": "log:checkpoint",
            "t/_delta_log/_last_checkpoint": "log:hint",
            names.sublog_key("abc", 3): "lakevilla:sublog",
            names.record_key("abc.1"): "lakevilla:record",
            f"{names.GVL_DIR}/00000000000000000004.json": "lakevilla:gvl",
            "t/part-0001.parquet": "data"}
    assert {k: request_area(k, detail=True) for k in want} == want
    assert {request_area(k) for k in want} == {"log", "lakevilla", "data"}


def test_ycsb_output_shape(ycsb_payload):
    payload, out = ycsb_payload
    saved = json.loads((out / "ycsb.json").read_text())
    assert {"benchmark", "info", "runs", "table"} <= saved.keys()
    assert (out / "throughput.png").stat().st_size > 0 and (out / "latency.png").stat().st_size > 0
    runs = payload["runs"]
    seen = {(r["system"], r["clients"], r["mode"]) for r in runs}
    assert seen == {(s, c, m) for s in SYSTEMS for c in (1, 2) for m in ("op", "client")}
    for r in runs:
        assert r["failure"] is None, (r["system"], r["failure"])
        assert r["ops_committed"] + r["ops_failed"] == 30
        assert _finite_nonneg(r["throughput"]) and r["throughput"] > 0
        assert (isinstance(r["aborts"], int) and r["aborts"] >= 0
                and isinstance(r["abort_reasons"], dict))
        for q in r["latency_ms"].values():
            assert _finite_nonneg(q["p50"]) and _finite_nonneg(q["p99"]) and q["p99"] >= q["p50"]
        if r["system"] == "delta-rs":
            assert r["requests_source"] in ("proxy", "n/a")
        else:
            assert r["requests_source"] == "store" and sum(r["requests"].values()) > 0
            # every request placed
            assert sum(r["requests_by_area"].values()) == sum(r["requests"].values())
            assert _finite_nonneg(r["requests_per_op"])
        assert r["vs_delta_rs"] is not None and r["vs_LV_DL"] is not None


def test_ycsb_final_tables_are_consistent(ycsb_payload):
    """No duplicated or vanished rows, no value of an aborted operation visible, every
    committed read-modify-write counted where the system prevents lost updates, and
    lakevilla reads what delta-rs reads."""
    payload, _ = ycsb_payload
    for r in payload["runs"]:
        chk = r["check"]
        assert chk["ok"], (r["system"], r["clients"], r["mode"], chk["violations"], r["errors"])
        assert chk["rows"] == chk["expected_rows"]
        assert chk["rmw_committed"] == r["ops_committed"] - r["reads_found"] - r["reads_missing"]
        if chk["prevents_lost_updates"]:
            assert chk["lost_updates"] == 0
        assert chk["lakevilla_matches_delta_rs"] is True
        assert r["error_count"] == 0, r["errors"]


def test_costs_quick(tmp_path):
    payload = costs.main(["--quick", "--out", str(tmp_path)])
    assert (tmp_path / "costs.json").exists() and (tmp_path / "requests.png").stat().st_size > 0
    rows = payload["requests"]
    have = {(r["system"], r["scenario"], r["state"]) for r in rows}
    for s in LV_SYSTEMS:
        for scen in costs.SCENARIOS:
            for state in ("warm", "cold"):
                assert (s, scen, state) in have
    for r in rows:
        assert _finite_nonneg(r["reads"]) and _finite_nonneg(r["writes"])
        assert all(_finite_nonneg(v) for v in r["kinds"].values())
        assert r["reads"] > 0  # every transaction at least looks at the table
        writes = set(costs.SCENARIOS[r["scenario"]]) - {"read"}
        if writes:
            assert r["writes"] > 0
        elif ("I" in (SYSTEMS.get(r["system"]) or "").split(",") and r["state"] == "cold"
              and r["scenario"] == "read"):
            # the first I transaction on a table the global log does not know joins it: one entry
            assert r["kinds"]["put_if_absent"] >= 1 and r["writes"] <= 3, r
        else:
            assert r["writes"] == 0, (r["system"], r["scenario"])  # read-only: nothing written
        if r["system"] == "LV[R]" and writes and r["state"] == "warm":
            assert r["extra_writes"] > 0  # markers and sublogs are not free
    load = payload["snapshot_load"]
    assert load["commits"] == 100 and load["last_checkpoint"] >= 0
    assert sum(load["lakevilla_requests"].values()) > 0
    for k in ("lakevilla_s", "lakevilla_unslowed_s", "delta_rs_s", "ratio_lakevilla_over_delta_rs",
              "isolated_first_read_s", "isolated_known_read_s"):
        assert _finite_nonneg(load[k]) and load[k] > 0
    # the first isolated read of the table joins the global log (an entry) after examining only
    # the commits after its checkpoint's promise, not all 100; afterwards the global log knows it
    first, known = load["isolated_first_read_requests"], load["isolated_known_read_requests"]
    assert first.get("put_if_absent", 0) >= 1 and not known.get("put_if_absent")
    assert first["get"] < known["get"] + 10 < 100
    lat = {r["system"]: r for r in payload["latency"]}
    assert set(LV_SYSTEMS) <= set(lat)
    for r in lat.values():  # each ratio is computed from the two measured medians, not set
        assert r["median_ratio_vs_DL"] == pytest.approx(r["median_ms"] / lat["LV[DL]"]["median_ms"])
    assert all(_finite_nonneg(r["median_ms"]) for r in lat.values())


def test_tables_quick(tmp_path):
    payload = tables.main(["--quick", "--out", str(tmp_path)])
    assert Path(payload["files"][0]).exists() and (tmp_path / "tables.png").stat().st_size > 0
    points = payload["points"]
    have = {(p["system"], p["op"], p["tables"]) for p in points}
    assert have == {(s, op, n) for s in LV_SYSTEMS for op in ("insert", "update")
                    for n in (1, 2, 4)}
    for p in points:
        assert p["errors"] == [] and p["ok"] == p["reps"], (
            p["system"], p["op"], p["tables"], p["errors"])
        assert _finite_nonneg(p["latency_ms"]) and _finite_nonneg(p["commit_ms"])
        assert p["reads"] > 0 and p["writes"] >= p["tables"]  # at least one commit per table
    by = {(p["system"], p["op"], p["tables"]): p for p in points}
    for s in LV_SYSTEMS:
        for op in ("insert", "update"):
            assert by[(s, op, 4)]["writes"] > by[(s, op, 1)]["writes"]
    for name, chk in payload["checks"].items():
        assert chk["ok"], (name, chk["problems"])


def test_ycsb_in_place_commit_mode_keeps_the_invariants(tmp_path):
    """DESIGN section 4: benchmarks run in both commit modes; the paper's in-place fill
    must keep the same final-table invariants under concurrent clients. Only the systems that
    claim markers (delta-rs and LV[DL] commit the same way in either mode), clients as threads."""
    marked = [s for s, f in SYSTEMS.items() if f]  # every LV system but LV[DL]
    payload = ycsb.main(["--quick", "--commit-mode", "in_place", "--clients", "2", "--procs", "0",
                         "--systems", ",".join(marked), "--out", str(tmp_path)])
    assert payload["info"]["commit_mode"] == "in_place" and len(marked) == 4
    assert {(r["system"], r["mode"]) for r in payload["runs"]} == {
        (s, m) for s in marked for m in ("op", "client")}
    for r in payload["runs"]:
        assert r["failure"] is None and r["error_count"] == 0, (
            r["system"], r["failure"], r["errors"])
        assert r["check"]["ok"], (r["system"], r["mode"], r["check"]["violations"])


def test_ycsb_on_a_table_with_deletion_vectors_keeps_the_invariants(tmp_path):
    """``--deletion-vectors``: updates mark rows (inline DVs) instead of rewriting files; the
    final table, read by delta-rs' SQL reader, keeps every invariant. delta-rs, which does not
    write such tables, is refused as a system."""
    payload = ycsb.main(["--quick", "--deletion-vectors", "--workloads", "A", "--clients", "2",
                         "--procs", "0", "--systems", "LV[DL],LV[R]", "--out", str(tmp_path)])
    assert payload["info"]["deletion_vectors"] is True
    for r in payload["runs"]:
        assert r["failure"] is None and r["error_count"] == 0, (r["system"], r["errors"])
        assert r["check"]["ok"], (r["system"], r["mode"], r["check"]["violations"])
    with pytest.raises(SystemExit, match="deletion vectors"):
        ycsb.main(["--quick", "--deletion-vectors", "--systems", "delta-rs",
                   "--out", str(tmp_path)])


def test_isolation_quick(tmp_path):
    """Read-only I transactions take table versions from the global log (no LIST of a
    table's log), write nothing, and read every row; validation lets a transaction
    commit past a concurrent commit on rows it did not read, and loses no update; beside
    R,CT writers, I readers never abort, never see half a transfer, never miss one."""
    payload = isolation.main(["--quick", "--out", str(tmp_path)])
    assert ((tmp_path / "isolation.json").exists()
            and (tmp_path / "isolation.png").stat().st_size > 0)
    reads = {(r["system"], r["scenario"]): r for r in payload["reads"]}
    assert set(reads) == {(s, sc) for s in isolation.FEATURE_SETS
                          for sc in ("cold", "quiet", "busy")}
    for (system, scenario), r in reads.items():
        assert r["wrong_row_counts"] == 0 and r["writes"] == 0, (system, scenario)
        assert _finite_nonneg(r["median_ms"]) and r["reads"] > 0
        if system == "LV[DL]":
            assert r["kinds"]["list"] >= payload["info"]["tables"]  # one LIST per table log
        elif scenario != "cold":
            assert r["kinds"]["list"] == 0, (system, scenario)
    val = payload["validation"]
    assert {(v["system"], v["isolation"]) for v in val} == {
        (s, i) for s in ("LV[I]", "LV[R,CT,I]") for i in ("serializable", "snapshot")}
    for v in val:
        assert v["aborts"] == 0 and v["committed"] == v["n"] and v["lost_updates"] == 0, v
        assert v["validation_requests"] > 0 and _finite_nonneg(v["validation_ms"])
    # the mixed deployment: R,CT writers, I readers beside an LV[DL] reader
    mixed = payload["mixed"]
    assert mixed["writer_errors"] == [] and mixed["transfers"] > 0 and mixed["final_balance"] == 0
    rows = {r["system"]: r for r in mixed["rows"]}
    assert set(rows) == set(isolation.FEATURE_SETS)
    for system, r in rows.items():
        assert r["n"] == payload["info"]["reps"] and _finite_nonneg(r["median_ms"]), r
        # one consistent, fresh cut: no abort, no half transfer, nothing stale
        if system != "LV[DL]":
            assert r["aborts"] == 0 and r["wrong_totals"] == 0 and r["stale_commits"] == 0, r
            assert r["kinds"]["list"] == 0, r


def test_chaos_quick(tmp_path):
    """Kills, store faults and maintenance beside a bank with a ledger: every violation count
    is zero, and the run really did commit, kill, inject faults and run maintenance.

    Every kind of worker commits, plain R,CT writers beside isolated readers included (the
    run goes on until each has, so a worker killed while it starts cannot starve its kind),
    no process exits on its own or hangs, and clean-up keeps only 5 global-log entries (and
    none younger than the workers' max age)."""
    from benchmarks import chaos

    payload = chaos.main(["--quick", "--features", "R+CT+I,R+CT,I,R,DL", "--keep-global", "5",
                          "--out", str(tmp_path)])
    assert (tmp_path / "chaos.json").exists() and (tmp_path / "chaos.png").stat().st_size > 0
    assert payload["violations"].keys() >= chaos._VIOLATION_KINDS
    assert all(n == 0 for n in payload["violations"].values()), (payload["violations"],
                                                                 payload["isolated_mismatch_examples"])
    assert set(payload["by_features"]) == {"R+CT+I", "R+CT", "I", "R", "DL"}
    assert payload["starved"] == [], payload["by_features"]
    assert all(f["committed"] > 0 for f in payload["by_features"].values()), payload["by_features"]
    assert payload["committed"] > 0 and payload["isolated_reads"] > 0
    assert sum(payload["kills"].values()) > 0
    assert (payload["faults"].get("transient", 0) > 0
            and payload["faults"].get("applied_then_failed", 0) > 0)
    for step in ("cleanup", "delete_abandoned_files", "recover", "optimize", "column_present"):
        assert payload["maintenance"].get(step, 0) > 0, payload["maintenance"]
    # every kind of work committed (in some feature set); compactions and rebuilds were checked
    assert all(sum(k[kind] for k in payload["by_kind"].values()) > 0
               for kind in ("transfer", "upsert", "derive")), payload["by_kind"]
    assert payload["checks"]["compactions_checked"] > 0
    assert payload["past_reads"] > 0 and payload["consumer_runs"] > 0
    assert payload["checks"]["flows_versions_checked"] > 0
    # clean-up trimmed the global log beside running I transactions (entries older than their
    # max age)
    assert payload["maintenance"].get("cleanup_deleted_global_entries", 0) > 0, (
        payload["maintenance"])
    assert payload["checks"]["versions_checked"] > 0


def test_reads_quick(tmp_path):
    """Every system returns delta-rs' rows for every shape; statistics prune the point lookup to
    fewer requests than the full scan; the snapshot lookup finds the one file both readers find."""
    from benchmarks import reads

    payload = reads.main(["--quick", "--out", str(tmp_path)])
    assert (tmp_path / "reads.json").exists() and (tmp_path / "reads.png").stat().st_size > 0
    rows = payload["reads"]
    assert {(r["shape"], r["system"]) for r in rows} == {
        (s, y) for s in reads.SHAPES for y in ("lakevilla", "delta-rs", "duckdb")}
    for r in rows:
        assert r["same_rows_as_delta_rs"] is True, (r["shape"], r["system"])
        assert _finite_nonneg(r["median_ms"]) and _finite_nonneg(r["vs_delta_rs"])
    lv_reqs = {r["shape"]: r["requests"] for r in rows if r["system"] == "lakevilla"}
    assert lv_reqs["point (stats prune)"]["get"] < lv_reqs["full scan"]["get"]
    assert lv_reqs["point (stats prune)"]["mb"] < lv_reqs["full scan"]["mb"]
    scale = payload["scale"]
    assert {(r["files"], r["system"]) for r in scale} == {(n, s) for n in (1000, 10000)
                                                         for s in ("lakevilla", "delta-rs")}
    for r in scale:
        assert not r["errors"], r["errors"]
        assert r["candidates"] == 1 and _finite_nonneg(r["pruned_s"]) and _finite_nonneg(r["txn_s"])
    hist = payload["history"]
    assert hist["commits"] == 25 and hist["last_checkpoint"] == 20
    assert (_finite_nonneg(hist["lakevilla_unslowed_s"])
            and _finite_nonneg(hist["ratio_lakevilla_over_delta_rs"]))
    # hint, one LIST, then checkpoint and commits together
    assert hist["lakevilla_requests"]["list"] == 1


def test_upserts_quick(tmp_path):
    from benchmarks import upserts
    from benchmarks.common import parse_systems

    # the partitioned table only (its merges match on the partition column too): both tables
    # doubled the suite's longest quick run. Clients as threads: a spawned process each cost
    # ~1.5 CPU s of imports, most of the run (they run as processes in the Spark section's test)
    payload = upserts.main(["--quick", "--tables", "partitioned", "--workers", "threads",
                            "--out", str(tmp_path)])
    assert (tmp_path / "upserts.json").exists() and (tmp_path / "upserts.png").stat().st_size > 0
    runs = payload["runs"]
    assert {(r["system"], r["table"]) for r in runs} == {
        (s, "partitioned") for s in parse_systems(upserts.DEFAULT_SYSTEMS)}
    for r in runs:
        assert r["errors"] == [], r["errors"]
        # no lost update, no double apply
        assert r["check"]["ok"], (r["system"], r["table"], r["check"])
        assert r["applied"] + r["given_up"] == r["batches"] and r["throughput"] > 0
        assert r["requests_source"] == "proxy" and r["requests_per_batch"] > 0
        if r["system"] in ("LV[R]", "LV[R,CT]"):
            assert r["aborts"] == 0 and r["given_up"] == 0  # conflicting merges are redone


def test_compaction_quick_run(tmp_path):
    """Writers beside a compaction: every acknowledged row there once, nothing lost; LV[R]'s
    writers and compactions never abort."""
    from benchmarks import compaction

    # writers and compactions as threads: 15 spawned processes cost ~1.5 CPU s of imports each
    payload = compaction.main(["--quick", "--workers", "threads", "--out", str(tmp_path)])
    assert (tmp_path / "compaction.json").exists() and (tmp_path / "compaction.png").exists()
    rows = payload["results"]
    assert {(r["system"], r["optimize"]) for r in rows} == {
        (s, o) for s in ("delta-rs", "LV[DL]", "LV[R]") for o in ("no", "yes")}
    assert all(r["rows_ok"] for r in rows)
    for r in rows:
        if r["system"] == "LV[R]":
            assert r["writer_aborts"] == 0 and r["opt_aborts"] == 0 and r["given_up"] == 0
    assert any(r["files_compacted"] > 0
               for r in rows if r["optimize"] == "yes" and r["system"] == "LV[R]")


def test_update_price_quick(tmp_path):
    """One-row statements: with deletion vectors a DELETE logs a DV and an UPDATE or a MERGE
    writes its one row, so each writes a sliver of what rewriting the file writes; both tables
    end alike."""
    from benchmarks import update_price

    payload = update_price.main(["--quick", "--out", str(tmp_path)])
    assert (tmp_path / "update_price.json").exists() and (tmp_path / "update_price.png").exists()
    by = {(r["system"], r["statement"]): r for r in payload["results"]}
    for statement in ("delete", "update", "merge"):
        rewrite, dv = by[("rewrite", statement)], by[("deletion vectors", statement)]
        assert dv["rows"] == rewrite["rows"] == payload["rows"] - payload["reps"]
        assert dv["bytes_written"] * 20 < rewrite["bytes_written"]
    rewrite, dv = by[("rewrite", "delete a third")], by[("deletion vectors", "delete a third")]
    assert dv["rows"] == rewrite["rows"] and dv["bytes_written"] * 5 < rewrite["bytes_written"]


# -- the shared client runner (benchmarks/runner.py) ---------------------------------------------

def _runner_job(job: int, gate, tick) -> int:
    if job < 0:
        raise ValueError("setup failed")
    gate()
    tick(1)
    return job * 2


@pytest.mark.parametrize("processes", [True, False], ids=["processes", "threads"])
def test_runner_starts_jobs_together_and_reports_failures(processes):
    from benchmarks.runner import RunFailed, Workers

    ticks: list[int] = []
    readied: list[int] = []
    w = Workers(3, processes=processes)
    try:
        assert w.run(_runner_job, [0, 1, 2], ticks.append, 120,
                     on_ready=lambda: readied.append(1)) == [0, 2, 4]
        assert sum(ticks) == 3 and readied == [1]
        assert w.run(_runner_job, [5], ticks.append, 120) == [10]  # the processes are reused
        with pytest.raises(RunFailed, match="never became ready"):
            # a job fails before the gate: the others stop too
            w.run(_runner_job, [1, -1], ticks.append, 120)
        # fresh workers after a failed run
        assert w.run(_runner_job, [3, 4], ticks.append, 120) == [6, 8]
        with pytest.raises(ValueError):
            # more jobs than workers would never meet
            w.run(_runner_job, [1, 2, 3, 4], ticks.append, 120)
    finally:
        w.close()


def test_reference_tables_compare_values_not_arrow_types():
    """The normalisation the reference comparison rests on: the same values in other Arrow
    types are equal (timestamp units and zones, widths, dictionaries, views, NaN), multisets
    count duplicates, and an instant one microsecond off is a difference."""
    from benchmarks.reference_tables import compare

    t = dt.datetime(2024, 1, 1, 12, 0, 0, 5)
    ours = pa.table({
        "ts": pa.array([t, t], pa.timestamp("us")),
        "x": pa.array([1, 1], pa.int64()),
        "f": [float("nan"), 1.5],
        "s": pa.array(["a", "a"]).dictionary_encode(),
        "l": pa.array([[{"d": decimal.Decimal("1.10")}], None],
                      pa.list_(pa.struct([("d", pa.decimal128(5, 2))]))),
    })
    judge = pa.table({
        "l": pa.array([None, [{"d": decimal.Decimal("1.1")}]],
                      pa.large_list(pa.struct([("d", pa.decimal128(9, 1))]))),
        "s": pa.array(["a", "a"], pa.string_view()),
        "f": pa.array([1.5, float("nan")]),
        "x": pa.array([1, 1], pa.int32()),
        "ts": pa.array([t.replace(tzinfo=dt.UTC)] * 2, pa.timestamp("ns", tz="UTC")),
    })
    assert compare(ours, judge) is None
    off = judge.set_column(4, "ts", pa.array([t.replace(tzinfo=dt.UTC) + dt.timedelta(
        microseconds=1), t.replace(tzinfo=dt.UTC)], pa.timestamp("ns", tz="UTC")))
    assert "1 only lakevilla, 1 only delta-rs" in compare(ours, off)
    assert "2 vs 1 rows" in compare(ours, judge.slice(0, 1))


def test_reference_tables_quick(tmp_path):
    """Every table in tests/data reads as delta-rs reads it (issue 38's script cannot rot)."""
    from benchmarks import reference_tables

    data = Path(__file__).resolve().parents[1] / "data"
    payload = reference_tables.main(["--data", str(data), "--json", str(tmp_path / "r.json")])
    names = {t["table"] for t in payload["tables"]}
    assert names == {p.name for p in data.iterdir() if (p / "_delta_log").is_dir()}
    assert len(names) >= 4
    assert {t["table"]: t["outcome"] for t in payload["tables"]} == dict.fromkeys(names, "same"), (
        [(t["table"], t["detail"]) for t in payload["tables"]])
    assert json.loads((tmp_path / "r.json").read_text())["totals"]["same"] == len(names)


def test_chaos_checks_see_a_stale_rebuild_and_a_compaction_that_changed_rows():
    """The end checks of the new kinds of chaos work fail when what they check is broken."""
    from types import SimpleNamespace

    from benchmarks import chaos_kinds as kinds

    ledger = pa.table({"src": ["bank_0/0", "bank_1/1"], "dst": ["bank_0/1", "bank_0/0"],
                       "amount": [5, 7]})
    flows = kinds.net_flows(ledger, "bank_0", 3, 4)
    assert flows.to_pylist() == [
        {"bank": "bank_0", "account": 0, "net": 2, "ledger_version": 4},
        {"bank": "bank_0", "account": 1, "net": 5, "ledger_version": 4},
        {"bank": "bank_0", "account": 2, "net": 0, "ledger_version": 4}]
    ledgers = {3: ledger.slice(0, 1), 4: ledger}

    def read(table, version):
        if table == "ledger":
            return ledgers[version]
        return tables[version]

    tables = {0: flows}
    assert kinds.check_flows(read, 0, 3)[0].total() == 0
    tables = {0: kinds.net_flows(ledger, "bank_0", 3, 3)}  # says version 3, computed from 4
    assert kinds.check_flows(read, 0, 3)[0]["derived_differs_from_ledger"] == 1

    def commit(*changes):
        files = [SimpleNamespace(data_change=c) for c in changes]
        return SimpleNamespace(adds=files[:1], removes=files[1:])

    commits = [(0, commit(True)), (1, commit(False, False)), (2, commit(False, True))]
    assert kinds.rearranging_versions(commits) == [1]
    tables = {0: flows, 1: flows.slice(0, 2)}
    assert kinds.check_compaction(read, "flows", commits[:2])[0]["compaction_changed_rows"] == 1
    tables = {0: flows, 1: flows.take([2, 0, 1])}
    assert kinds.check_compaction(read, "flows", commits[:2])[0].total() == 0


def test_incremental_quick(tmp_path):
    """The exactly-once consumer beside writers and kills: its output equals the batch
    recomputation at its offset, at the end and at past moments."""
    from benchmarks import incremental

    payload = incremental.main(["--quick", "--out", str(tmp_path)])
    assert (tmp_path / "incremental.json").exists()
    assert (tmp_path / "incremental.png").stat().st_size > 0
    assert payload["violations"] == {"exact_output_differs_at_offset": 0,
                                     "exact_output_differs_at_a_past_moment": 0,
                                     "process_exited": 0}, payload["exited"]
    assert payload["writers"]["committed"] > 0 and sum(payload["kills"].values()) > 0
    assert payload["checks"]["truth_orders"] > 0


def test_the_per_table_way_counts_twice_what_a_kill_between_its_commits_leaves(local_backend):
    """What the incremental benchmark compares against is really exposed: output applied, the
    offset not stored (the kill), and the next step applies the same changes again."""
    from benchmarks import incremental as inc

    lake = local_backend.lake()
    inc._setup(lake)
    with lake.transaction("R,CT") as txn:
        txn.insert("orders", {"order_id": [1], "day": ["mon"]})
        txn.insert("order_lines", {"order_id": [1], "day": ["mon"], "amount": [10]})
    got = lake.changes("order_lines")
    with lake.transaction("") as txn:  # applied, then killed before the offset
        inc.apply(txn, "daily_naive", inc.deltas(got))
    inc.naive_step(lake)
    assert inc.output(lake.read("daily_naive")) == {"mon": (20, 1)} != inc.batch(lake)
    feed = lake.consumer("revenue", inc.SOURCES)
    feed.run(lambda txn, ch: inc.apply(txn, "daily", inc.deltas(ch)))
    assert inc.output(lake.read("daily")) == inc.batch(lake) == {"mon": (10, 1)}


def test_reference_tables_judge_dat_cases_by_their_expected_rows(tmp_path):
    """A case laid out as DAT's are (the table in ``delta/``, Spark's rows per pinned version
    in ``expected/``): the rows and protocol versions it pins are the judge, a wrong expected
    row is a difference, a data file the copy lacks is not lakevilla's failure."""
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    from benchmarks import reference_tables

    def case(name: str, versions: dict[str, pa.Table], table_version: dict[str, int]) -> Path:
        root = tmp_path / "generated" / name
        write_deltalake(str(root / "delta"), pa.table({"k": [1, 2], "p": ["a", None]}),
                        partition_by=["p"])
        write_deltalake(str(root / "delta"), pa.table({"k": [3], "p": ["b"]}), mode="append")
        for label, rows in versions.items():
            out = root / "expected" / label
            (out / "table_content").mkdir(parents=True)
            pq.write_table(rows, out / "table_content" / "part-0.parquet")
            (out / "table_content" / "_SUCCESS").write_text("")
            (out / "table_version_metadata.json").write_text(json.dumps({
                "version": table_version[label], "properties": {}, "min_reader_version": 1,
                "min_writer_version": 2}))
        return root

    v0 = pa.table({"k": [1, 2], "p": ["a", None]})
    v1 = pa.table({"k": [1, 2, 3], "p": ["a", None, "b"]})
    case("good", {"latest": v1, "v0": v0}, {"latest": 1, "v0": 0})
    case("wrong", {"latest": v1.slice(1)}, {"latest": 1})
    case("version", {"v0": v0}, {"v0": 1})
    lost = case("lost", {"latest": v1}, {"latest": 1})
    for f in (lost / "delta").glob("p=__HIVE_DEFAULT_PARTITION__/*.parquet"):
        f.unlink()
    payload = reference_tables.main(["--dat", str(tmp_path / "generated")])
    got = {t["table"]: t for t in payload["tables"]}
    assert {n: t["outcome"] for n, t in got.items()} == {
        "good": "same", "wrong": "differs", "version": "differs", "lost": "judge-failed"}
    assert [r["expected"] for r in got["good"]["reads"]] == ["latest", "v0"]
    assert "3 vs 2 rows" in got["wrong"]["detail"]
    assert "version, reader, writer" in got["version"]["detail"]
    assert payload["totals"] == {"same": 1, "refused": 0, "differs": 2, "failed": 0,
                                 "judge-failed": 1}


def test_synthetic_long_log_loads_alike_in_lakevilla_and_delta_rs(tmp_path):
    """A table written as its log files (``benchmarks.synthetic``: a checkpoint of every file,
    commits that each replace one, a checkpoint every ``interval``) is the same table to
    delta-rs and to lakevilla: version, live files, the rows of its one real file."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    import lakevilla as lv
    from benchmarks.synthetic import Shape, build, row_id
    from lakevilla.store import open_store

    root = f"file://{tmp_path}"
    build(open_store(root), "t", Shape(files=50, commits=250, interval=100, real=(10,)))
    hint = json.loads((tmp_path / "t" / "_delta_log" / "_last_checkpoint").read_text())
    assert hint["version"] == 200 and hint["numOfAddFiles"] == 50
    dt = DeltaTable(f"{root}/t")
    snap = lv.Lake(root).snapshot("t")
    assert dt.version() == snap.version == 249
    assert (sorted(Path(u).name for u in dt.file_uris())
            == sorted(a.path for a in snap.files.values()))
    assert len(snap.files) == 50
    rid = row_id(10)
    rs = dt.to_pyarrow_dataset(file_pruning_predicate=f"id = {rid}").to_table(
        filter=pc.field("id") == rid).to_pylist()
    mine = lv.Lake(root).read("t", where=f"id = {rid}").to_pylist()
    assert rs == mine and [r["v"] for r in mine] == [pytest.approx(rid * 0.005)]


def test_scale_quick(tmp_path):
    """Every axis point of every system that can do its work ran and committed every
    transaction; delta-rs reads each client's row up by exactly its committed updates; a
    lakevilla transaction writes at least one commit per table it touches."""
    from benchmarks import scale

    payload = scale.main(["--quick", "--out", str(tmp_path)])
    assert (tmp_path / "scale.json").exists() and (tmp_path / "scale.png").stat().st_size > 0
    pts = payload["points"]
    systems = ("delta-rs", "LV[DL]", "LV[R,CT,I]")
    want = {(a, v, s) for a, vs in (("clients", (1, 2)), ("tables", (1, 2)),
                                    ("size", (100, 1000)), ("log", (10, 120)))
            for v in vs for s in systems if s != "delta-rs" or a != "tables" or v == 1}
    assert {(p["axis"], p["value"], p["system"]) for p in pts} == want
    for p in pts:
        key = (p["axis"], p["value"], p["system"])
        assert p["failure"] is None and p["error_count"] == 0, (key, p.get("errors"))
        assert p["committed"] == p["attempted"] > 0 and p["check"]["ok"], (key, p["check"])
        assert _finite_nonneg(p["latency_ms"]) and p["p95_ms"] >= p["latency_ms"]
        assert _finite_nonneg(p["cpu_per_txn_ms"]) and p["cpu_per_txn_ms"] > 0
        if p["system"] == "delta-rs":
            assert p["requests_source"] == "n/a" and p["requests_per_txn"] is None
        else:
            assert p["requests_source"] == "store" and p["writes_per_txn"] >= p["tables"]
    by = {(p["axis"], p["value"], p["system"]): p for p in pts}
    for s in systems[1:]:
        assert by[("tables", 2, s)]["writes_per_txn"] > by[("tables", 1, s)]["writes_per_txn"]


def test_scale_hot_quick(tmp_path):
    """The hot axis: clients updating rows of one file, with group commit off and on, side by
    side; every transaction committed, delta-rs reads each row up by its client's commits, and
    the log's versions and transactions per version are reported."""
    from benchmarks import scale

    payload = scale.main(["--quick", "--axes", "hot", "--hot", "4", "--hot-txns", "16",
                          "--systems", "LV[R]", "--group-commit", "both",
                          "--out", str(tmp_path)])
    pts = payload["points"]
    assert {(p["axis"], p["value"], p["system"]) for p in pts} == {
        ("hot", 4, "LV[R] -gc"), ("hot", 4, "LV[R]")}
    for p in pts:
        assert p["failure"] is None and p["error_count"] == 0, p.get("errors")
        assert p["committed"] == p["attempted"] == 16 and p["check"]["ok"], p["check"]
        assert p["log_versions"] > 0 and p["txns_per_version"] == p["committed"] / p[
            "log_versions"]
