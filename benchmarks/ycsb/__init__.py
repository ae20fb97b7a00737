"""YCSB core workloads A-F over one Delta table, delta-rs vs the lakevilla feature sets.

    python -m benchmarks.ycsb [--quick] [--clients 1,8,64] [--mode op,client]
                              [--workloads A,B,C,D,E,F] [--store s3 --latency s3]
                              [--store azure|gcs --latency cloud]
                              [--distribution uniform --load-files 100] ...

``usertable`` holds ``key BIGINT`` plus ten 100-byte string fields (1 KB rows),
loaded in one lakevilla transaction as ``--load-files`` Parquet files (key ranges,
so min/max statistics prune reads the way Delta's data skipping does). Every system
gets the same table layout and the same operation sequences (same seed). Keys follow
the workload's distribution (zipfian, or latest for D); ``--distribution uniform`` with
many files is the low-contention case, where writers rarely touch the same file.

Clients are independent: each has its own ``Lake`` / ``DeltaTable`` and nothing in
memory is shared. They run in spawned worker processes (``--procs``, default 8);
with more clients than processes each process runs several client threads.

Two modes: ``op`` (one transaction per operation, retried on abort like an
application would) and ``client`` (all of a client's operations in one
transaction, retried as a whole; delta-rs and LV[DL] cannot do that, so their
operations commit one by one, retried one by one).

Each run is checked afterwards with delta-rs as the independent reader: every
acknowledged insert is there exactly once, no value of an aborted operation is
visible, and for workload F the read-modify-write counters add up (lost updates are
expected only for delta-rs and LV[DL]).

The package is split by concern: ``workload`` (key choice, mixes, operation sequences),
``sessions`` (one client's connection to one system), ``client`` (one client's run, a
worker's batch), ``checks`` (load and check), ``report`` (table and plots) and ``run``
(the parent). Clients run on ``benchmarks.runner.Workers``, shared with TPC-C.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from .checks import GUARANTEES_P4, check_run, final_rows, lakevilla_rows, load_table
from .client import ClientResult, run_batch, run_ops
from .report import COLUMNS, _title, add_ratios, plot_results, summarize, table_rows
from .run import Plan, concurrency_label, make_batches, run_all, run_one, split_ops
from .sessions import ClientSpec, DeltaRsSession, LvSession, open_session, usertable_schema
from .workload import (
    FIELD_LEN,
    FIELDS,
    MAX_SCAN,
    TABLE,
    WORKLOADS,
    ZIPF_THETA,
    Op,
    ScrambledZipfian,
    Workload,
    Zipfian,
    counter_of,
    counter_value,
    fill,
    fnv1a64,
    generate_ops,
    insert_row,
    load_row,
    token_of,
)

__all__ = [
    "COLUMNS", "FIELDS", "FIELD_LEN", "GUARANTEES_P4", "MAX_SCAN", "TABLE", "WORKLOADS",
    "ZIPF_THETA", "ClientResult", "ClientSpec", "DeltaRsSession", "LvSession", "Op", "Plan",
    "ScrambledZipfian", "Workload", "Zipfian", "add_ratios", "check_run", "concurrency_label",
    "counter_of", "counter_value", "fill", "final_rows", "fnv1a64", "generate_ops", "insert_row",
    "lakevilla_rows", "load_row", "load_table", "main", "make_batches", "open_session",
    "parse_args", "plot_results", "run_all", "run_batch", "run_one", "run_ops", "split_ops",
    "summarize", "table_rows", "token_of", "usertable_schema",
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from ..common import add_commit_mode_arg, add_common_args, parse_with_quick

    p = argparse.ArgumentParser(prog="python -m benchmarks.ycsb",
                                description=__doc__.split("\n\n")[0])
    add_common_args(p, "results/ycsb")
    add_commit_mode_arg(p)
    p.add_argument("--clients", default="1,8,64", help="comma-separated client counts")
    p.add_argument("--mode", default="op,client",
                   help="'op' (txn per operation), 'client' (txn per client)")
    p.add_argument("--workloads", default="A,B,C,D,E,F")
    p.add_argument("--records", type=int, default=1000)
    p.add_argument("--ops", type=int, default=1000,
                   help="operations per run, split across the clients")
    p.add_argument("--load-files", type=int, default=10,
                   help="Parquet files the load is split into")
    p.add_argument("--retries", type=int, default=10,
                   help="re-runs of an aborted operation / transaction")
    p.add_argument("--slack", type=int, default=0,
                   help="LV[I]'s R1 slack (the paper's hidden version interval)")
    p.add_argument("--procs", type=int, default=8,
                   help="worker processes (0: all clients as threads here)")
    p.add_argument("--run-timeout", type=float, default=900.0,
                   help="seconds before a run counts as hung")
    p.add_argument("--distribution", choices=["workload", "uniform"], default="workload",
                   help="key choice: the workload's (zipfian / latest) or uniform (low contention, "
                        "with many --load-files)")
    p.add_argument("--deletion-vectors", action="store_true",
                   help="usertable with delta.enableDeletionVectors: updates mark rows instead of "
                        "rewriting files (lakevilla systems only: delta-rs 1.x does not write "
                        "such tables)")
    return parse_with_quick(p, argv, {"clients": "1,2", "workloads": "F", "records": 100, "ops": 30,
                                      "load_files": 4, "run_timeout": 120.0})


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from ..common import make_counted_env, parse_systems, print_table, run_info, write_json

    args = parse_args(argv)
    plan = Plan(systems=parse_systems(args.systems),
                workloads=[w.strip().upper() for w in args.workloads.split(",") if w],
                clients=[int(c) for c in args.clients.split(",") if c],
                modes=[m.strip() for m in args.mode.split(",")], records=args.records, ops=args.ops,
                load_files=args.load_files, retries=args.retries, procs=args.procs,
                timeout=args.run_timeout, slack=args.slack, commit_mode=args.commit_mode,
                distribution=args.distribution, deletion_vectors=args.deletion_vectors)
    if args.store == "gcs" and "delta-rs" in plan.systems:
        # no emulator here serves delta-rs' GCS (benchmarks/clouds.py); it still judges each run,
        # from a local copy of the table
        print("--store gcs: the delta-rs system does not run here (no GCS emulator serves it)")
        plan.systems = {k: v for k, v in plan.systems.items() if k != "delta-rs"}
        if not plan.systems:
            raise SystemExit("--store gcs: choose lakevilla systems (--systems 'LV[DL],LV[R]')")
    if plan.deletion_vectors and "delta-rs" in plan.systems:
        raise SystemExit("--deletion-vectors: delta-rs 1.x does not write tables with deletion "
                         "vectors; choose lakevilla systems (--systems 'LV[DL],LV[R]')")
    for w in plan.workloads:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w}; choose from {','.join(WORKLOADS)}")
    for m in plan.modes:
        if m not in ("op", "client"):
            raise SystemExit(f"unknown mode {m}; choose op and/or client")
    ce = make_counted_env(args)
    try:
        t0 = time.time()
        rows = run_all(plan, ce, args.seed)
        info = run_info(args, ce.env)
        info.update({"records": plan.records, "ops_per_run": plan.ops,
                     "load_files": plan.load_files, "slack": plan.slack,
                     "commit_mode": plan.commit_mode, "distribution": plan.distribution,
                     "deletion_vectors": plan.deletion_vectors,
                     "retries": plan.retries, "procs": plan.procs, "wall_s": time.time() - t0,
                     "delta_rs_requests_observable": ce.proxy is not None,
                     "concurrency": {c: concurrency_label(c, plan.procs)[0] for c in plan.clients}})
    finally:
        ce.close()
    text = print_table(table_rows(rows), COLUMNS, title=_title(info))
    payload = {"benchmark": "ycsb", "info": info, "runs": rows, "table": text}
    path = write_json(args.out, "ycsb", payload)
    payload["files"] = [str(path), *plot_results(args.out, rows, list(plan.systems))]
    print("wrote " + ", ".join(payload["files"]))
    return payload
