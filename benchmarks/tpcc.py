"""TPC-C with one warehouse over Delta tables (LakeVilla paper, section 6.5 / Table 4).

For every lakevilla feature set, a sequential run (1 client) and a concurrent run
(default 16 clients) each start from a byte-identical copy of one freshly loaded
database; afterwards the TPC-C consistency conditions 1-4 are checked and reported
next to throughput, aborts, retries, redos and store requests.

    python -m benchmarks.tpcc [--quick] [--clients 1,16] [--txns-per-client N]
        [--items N --customers N --orders N --chunk N] [--workers processes|threads]
        [--store local|s3] [--latency none|s3|MS] [--systems ...] [--deletion-vectors]
        [--out results/tpcc]

``--deletion-vectors`` runs every feature set twice in the one run, side by side: on the
plain database and on a copy whose tables have ``delta.enableDeletionVectors`` (a DELETE or
UPDATE marks rows instead of rewriting files), loaded from the same seed.

delta-rs alone is not run: it has no multi-statement transactions, and per
statement it is the same protocol as LV[DL] (which is).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import lakevilla as lv
from lakevilla.store import open_store

from .common import (
    SYSTEMS,
    AreaCountingStore,
    Env,
    add_common_args,
    latency_profile,
    make_env,
    parse_systems,
    plot,
    print_table,
    progress,
    run_info,
    write_json,
)
from .runner import Gate, RunFailed, Workers
from .tpcc_schema import QUICK, TABLES, Scale, check_consistency, load
from .tpcc_txns import KINDS, MIX, TypeStats, run_client

NAME = "tpcc"


# -- opening a client's own Lake, in this process or a spawned one ---------------------------
@dataclass(frozen=True)
class LakeSpec:
    """Everything a client needs to open its own ``Lake`` (picklable for spawned workers)."""

    kind: str
    storage_options: dict[str, str] = field(default_factory=dict)
    latency: str = "none"
    # Lake(...) keywords, e.g. wait_timeout
    lake_options: dict[str, Any] = field(default_factory=dict)
    steps: bool = False  # count requests by protocol step too

    @classmethod
    def of(cls, env: Env, lake_options: dict[str, Any], steps: bool = False) -> LakeSpec:
        return cls(env.kind, dict(env.storage_options), env.latency_label, dict(lake_options),
                   steps)

    def open(self, root: str) -> tuple[lv.Lake, AreaCountingStore]:
        env = Env(self.kind, root, dict(self.storage_options), latency_profile(self.latency),
                  self.latency)
        return env.lake(root, steps=self.steps, **self.lake_options)


@dataclass(frozen=True)
class ClientJob:
    spec: LakeSpec
    root: str
    features: str
    client: int
    txns: int
    scale: Scale
    seed: int
    retries: int
    max_seconds: float = 0.0  # > 0: start no transaction after this long


def client_main(job: ClientJob, gate: Gate, tick: Callable[[int], None]) -> dict[str, Any]:
    """One terminal with its own Lake: warm up, wait for the others, run, report."""
    lake, counting = job.spec.open(job.root)
    try:
        warm_up(lake)
        before = sum(counting.snapshot().values())
        steps_before = Counter(counting.step_snapshot())
        gate()
        start, cpu = time.time(), time.process_time()
        deadline = start + job.max_seconds if job.max_seconds > 0 else None
        stats = run_client(lake, job.features, job.client, job.txns, job.scale, job.seed,
                           job.retries, lambda: sum(counting.snapshot().values()), lambda: tick(1),
                           deadline)
        end, cpu = time.time(), time.process_time() - cpu
        lake.flush()
        steps = Counter(counting.step_snapshot())
        steps.subtract(steps_before)
    finally:
        lake.close()
    # process CPU (all its threads); clients run as threads share one process: not theirs alone
    in_thread = mp.current_process().name == "MainProcess"
    return {"start": start, "end": end, "cpu_s": None if in_thread else cpu,
            "requests": sum(counting.snapshot().values()) - before, "steps": dict(steps),
            "stats": {k: asdict(v) for k, v in stats.items()}}


def warm_up(lake: lv.Lake) -> None:
    """What a terminal pays once, not per transaction: every table's snapshot loaded cold and
    DuckDB opened (0.3-0.4 s of CPU per client). Outside the interval, in every run alike, so a
    16-client run does not pay 16 process starts where a sequential run pays one."""
    for t in TABLES:
        lake.read(t, where="false")


# -- databases -------------------------------------------------------------------------------
def copy_lake(src: str, dst: str, storage_options: dict[str, str]) -> int:
    """Byte-for-byte copy of a lake (table paths in Delta logs are relative)."""
    a, b = open_store(src, storage_options or None), open_store(dst, storage_options or None)
    keys = [m.key for m in a.list("")]
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda k: b.put(k, a.get(k).data), keys))
    return len(keys)


DV_PROPERTIES = {"delta.enableDeletionVectors": "true"}
DV_SUFFIX = " +DV"  # a system's label on the database with deletion vectors


def load_template(env: Env, scale: Scale, seed: int,
                  properties: dict[str, str] | None = None) -> tuple[str, dict[str, int]]:
    root = env.fresh_root("tpcc-template-dv" if properties else "tpcc-template")
    with lv.Lake(root, storage_options=env.storage_options or None) as lake:
        rows = load(lake, scale, seed, properties)
        bad = check_consistency(lake)
    if bad.total:
        raise RuntimeError(f"the freshly loaded database is inconsistent: {bad.details}")
    return root, rows


# -- one run -----------------------------------------------------------------------------------
def _sum_stats(results: list[dict]) -> dict[str, TypeStats]:
    total = {k: TypeStats() for k in KINDS}
    for r in results:
        for k, d in r["stats"].items():
            total[k].add(TypeStats(**d))
    return total


def _per_step(results: list[dict], committed: int) -> dict[str, float]:
    """Requests per committed transaction by protocol step (``--steps``; else empty)."""
    total: Counter[str] = Counter()
    for r in results:
        total.update(r.get("steps") or {})
    return {k: round(v / max(committed, 1), 2) for k, v in sorted(total.items()) if v}


def summarize(system: str, features: str, clients: int, results: list[dict] | None,
              violations: dict, txns: int) -> dict[str, Any]:
    row: dict[str, Any] = {"system": system, "features": features, "clients": clients,
                           "hung": results is None, "violations": violations["total"],
                           "c1": violations["c1"], "c2": violations["c2"], "c3": violations["c3"],
                           "c4": violations["c4"],
                           "unreadable": ",".join(violations["unreadable"]) or "-",
                           "violation_details": violations["details"][:12], "txns_per_client": txns,
                           "cut_by_deadline": False}
    if results is None:
        return row
    by_type = _sum_stats(results)
    tot = TypeStats()
    for st in by_type.values():
        tot.add(st)
    elapsed = max(r["end"] for r in results) - min(r["start"] for r in results)
    requests = sum(r["requests"] for r in results)
    row.update({
        "cut_by_deadline": tot.issued < clients * txns,
        "elapsed_s": elapsed, "issued": tot.issued, "committed": tot.committed,
        "rollbacks": tot.rollbacks, "aborts": tot.aborts, "retries": tot.retries,
        "failed": tot.failed, "partial": tot.partial, "errors": tot.errors, "redos": tot.redos,
        "requests": requests, "txn_per_s": tot.committed / elapsed if elapsed > 0 else 0.0,
        "new_orders_per_min": (by_type["new_order"].committed * 60.0 / elapsed if elapsed > 0
                               else 0.0),
        "requests_per_txn": requests / max(tot.committed, 1),
        "requests_by_step": _per_step(results, tot.committed),
        "cpu_ms_per_txn": (None if any(r["cpu_s"] is None for r in results) else
                           1000 * sum(r["cpu_s"] for r in results) / max(tot.committed, 1)),
        "error_samples": [s for st in by_type.values() for s in st.error_samples][:8],
        "by_type": {k: {**asdict(st), "issued": st.issued,
                        "requests_per_txn": st.requests / max(st.issued, 1)}
                    for k, st in by_type.items()},
    })
    return row


def run_once(env: Env, workers: Workers, template: str, system: str, features: str, clients: int,
             args: argparse.Namespace, scale: Scale) -> dict[str, Any]:
    label = system.removesuffix(DV_SUFFIX).strip("LV[]").replace(",", "") or "DL"
    dv = "-dv" if system.endswith(DV_SUFFIX) else ""
    root = env.fresh_root(f"tpcc-{label}{dv}-{clients}")
    copy_lake(template, root, env.storage_options)
    spec = LakeSpec.of(env, lake_options(args), args.steps)
    jobs = [ClientJob(spec, root, features, c, args.txns_per_client, scale, args.seed, args.retries,
                      args.max_seconds) for c in range(clients)]
    bar = progress(clients * args.txns_per_client, f"{system} x{clients}")
    load_before = os.getloadavg()[0]
    try:
        results = workers.run(client_main, jobs, bar.update, args.run_timeout)
    except RunFailed as e:
        print(f"  {system} x{clients}: run failed: {e}", flush=True)
        results = None
    finally:
        bar.close()
    with lv.Lake(root, storage_options=env.storage_options or None) as lake:
        violations = check_consistency(lake).as_dict()
        marked = files_with_deletion_vectors(lake)
    row = summarize(system, features, clients, results, violations, args.txns_per_client)
    row["files_with_dv"] = marked
    # machine load before/after
    row["load_average"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    return row


def files_with_deletion_vectors(lake: lv.Lake) -> int:
    """Live data files that carry a deletion vector, over the nine tables: what shows that
    the run on the DV database marked rows instead of rewriting files."""
    return sum(a.deletion_vector is not None
               for t in TABLES for a in lake.snapshot(t).files.values())


# -- reporting -------------------------------------------------------------------------------------
COLUMNS = ["system", "clients", "issued", "committed", "txn_per_s", "new_orders_per_min", "aborts",
           "retries", "failed", "partial", "errors", "redos", "rollbacks", "requests_per_txn",
           "cpu_ms_per_txn", "violations", "c1", "c2", "c3", "c4", "unreadable", "files_with_dv"]


def _bars(ax, runs: list[dict], systems: list[str], clients: list[int], metric: str,
          extra: str | None = None):
    """Grouped bars per system, one per client count; ``extra`` stacked on top, hatched."""
    width = 0.8 / max(len(clients), 1)
    for j, c in enumerate(clients):
        rows = [next((r for r in runs if r["system"] == s and r["clients"] == c), {})
                for s in systems]
        xs = [x + j * width for x in range(len(systems))]
        base = [r.get(metric) or 0 for r in rows]
        label = "sequential" if c == 1 else f"{c} clients"
        bars = ax.bar(xs, base, width, label=label)
        if extra is not None:
            top = [r.get(extra) or 0 for r in rows]
            ax.bar(xs, top, width, bottom=base, color=bars.patches[0].get_facecolor(), alpha=0.45,
                   hatch="//", label=f"{label}: partial commits" if any(top) else None)
            for x, b, t, r in zip(xs, base, top, rows):
                if r.get("unreadable", "-") != "-":
                    ax.annotate(f"lost: {r['unreadable']}", (x, b + t), ha="center", va="bottom",
                                fontsize=7, rotation=90)
    ax.set_xticks([x + width * (len(clients) - 1) / 2 for x in range(len(systems))])
    ax.set_xticklabels(systems, rotation=20)
    ax.legend(fontsize=7)


def _draw(runs: list[dict], clients: list[int]):
    def draw(fig) -> None:
        systems = list(dict.fromkeys(r["system"] for r in runs))
        ax = fig.add_subplot(1, 2, 1)
        _bars(ax, runs, systems, clients, "txn_per_s")
        ax.set_title("committed transactions / s", fontsize=10)
        ax = fig.add_subplot(1, 2, 2)
        _bars(ax, runs, systems, clients, "violations", extra="partial")
        ax.set_title("violated conditions 1-4 (+ partial commits)", fontsize=10)
        ax.margins(y=0.3)
        fig.suptitle("TPC-C, one warehouse")
    return draw


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tpcc", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, "results/tpcc")
    p.set_defaults(systems=",".join(n for n, f in SYSTEMS.items() if f is not None))
    p.add_argument("--clients", default=None,
                   help="comma-separated client counts (default 1,16; quick 1,4)")
    p.add_argument("--txns-per-client", type=int, default=None,
                   help="most transactions per client (default 25; quick 4)")
    p.add_argument("--items", type=int, default=None,
                   help=f"ITEM/STOCK rows (default {Scale.items}, spec 100000)")
    p.add_argument("--customers", type=int, default=None,
                   help=f"customers per district (default {Scale.customers}, spec 3000)")
    p.add_argument("--orders", type=int, default=None,
                   help=f"initial orders per district (default {Scale.orders}, spec 3000)")
    p.add_argument("--chunk", type=int, default=None,
                   help=f"keys per data file at load (default {Scale.chunk})")
    p.add_argument("--retries", type=int, default=10, help="lake.run retries per transaction")
    p.add_argument("--workers", choices=["processes", "threads"], default="processes",
                   help="clients as spawned processes (default) or threads; each has its own Lake")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="measurement interval per run: clients start no transaction after it "
                        "(default 60; quick: none, every client runs all its transactions)")
    p.add_argument("--wait-timeout", type=float, default=None,
                   help="seconds a commit waits for earlier markers before it shifts (CT) or "
                        "aborts: Lake(wait_timeout=...); default 10, quick 5; 0 keeps lakevilla's "
                        "own default (2 x marker_ttl = 60 s)")
    p.add_argument("--run-timeout", type=float, default=1800.0,
                   help="seconds before a run counts as hung")
    p.add_argument("--steps", action="store_true",
                   help="count each client's requests by protocol step as well (a stack walk per "
                        "request): requests_by_step per committed transaction")
    p.add_argument("--deletion-vectors", action="store_true",
                   help="also run every feature set on a database whose tables have "
                        "delta.enableDeletionVectors (rows labelled '+DV'), side by side")
    args = p.parse_args(argv)
    args.clients = [int(c) for c in (args.clients or ("1,4" if args.quick else "1,16")).split(",")
                    if c.strip()]
    if args.max_seconds is None:
        args.max_seconds = 0.0 if args.quick else 60.0
    if args.wait_timeout is None:
        args.wait_timeout = 5.0 if args.quick else 10.0
    if args.txns_per_client is None:
        args.txns_per_client = 4 if args.quick else 25
    return args


def lake_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"wait_timeout": args.wait_timeout} if args.wait_timeout > 0 else {}


def scale_of(args: argparse.Namespace) -> Scale:
    base = QUICK if args.quick else Scale()
    return Scale(items=args.items or base.items, customers=args.customers or base.customers,
                 orders=args.orders or base.orders, chunk=args.chunk or base.chunk)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    scale = scale_of(args)
    chosen = parse_systems(args.systems)
    systems = {n: f for n, f in chosen.items() if f is not None}
    notes = ["delta-rs is not run: it has no multi-statement transactions; per statement it is the "
             "protocol LV[DL] runs"] if "delta-rs" in chosen else []
    env = make_env(args)
    runs: list[dict[str, Any]] = []
    try:
        template, rows = load_template(env, scale, args.seed)
        databases = [("", template)]
        if args.deletion_vectors:
            dv_template, dv_rows = load_template(env, scale, args.seed, DV_PROPERTIES)
            if dv_rows != rows:
                raise RuntimeError(f"the two databases differ: {rows} vs {dv_rows}")
            databases.append((DV_SUFFIX, dv_template))
        for system, features in systems.items():
            # a client count's runs on both databases one after the other: a machine whose load
            # drifts during the run weighs on both alike
            for clients, (suffix, db) in ((c, d) for c in args.clients for d in databases):
                # fresh processes per run: a process that ran another system's clients has its
                # caches warm (every client seed replays the same texts), which flattered the
                # feature set run second
                workers = Workers(clients, processes=args.workers == "processes")
                try:
                    runs.append(run_once(env, workers, db, system + suffix, features, clients,
                                         args, scale))
                finally:
                    workers.close()
    finally:
        env.close()
    payload = {"benchmark": NAME, "info": {**run_info(args, env), "workers": args.workers},
               "config": {"scale": asdict(scale), "clients": args.clients,
                          "txns_per_client": args.txns_per_client, "retries": args.retries,
                          "max_seconds": args.max_seconds, "mix": MIX,
                          "lake_options": lake_options(args), "tables": list(TABLES),
                          "deletion_vectors": args.deletion_vectors},
               "load_rows": rows, "runs": runs, "notes": notes}
    print_table(runs, COLUMNS,
                title=f"TPC-C, 1 warehouse, {args.txns_per_client} transactions per client "
                      f"(store {env.kind}, latency {env.latency_label})")
    for r in runs:
        if r.get("hung"):
            print(f"!! {r['system']} x{r['clients']}: did not finish "
                  f"within {args.run_timeout:.0f}s")
        for s in r.get("error_samples", [])[:3]:
            print(f"   {r['system']} x{r['clients']}: {s}")
        if r.get("requests_by_step"):
            print(f"   {r['system']} x{r['clients']} requests per committed txn by step: "
                  + ", ".join(f"{k} {v:g}" for k, v in r["requests_by_step"].items()))
    for n in notes:
        print("note:", n)
    write_json(args.out, NAME, payload)
    plot(args.out, NAME, _draw(runs, args.clients))
    return payload


if __name__ == "__main__":
    main()
