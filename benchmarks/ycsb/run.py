"""The parent: one run per system, workload, client count and mode, in processes
of its own per system."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..runner import RunFailed, Workers
from .checks import DV_PROPERTIES, check_run, final_rows, lakevilla_rows, load_table
from .client import run_batch
from .report import add_ratios, summarize
from .sessions import ClientSpec
from .workload import WORKLOADS, generate_ops


def split_ops(total: int, clients: int) -> list[int]:
    base, extra = divmod(total, clients)
    return [base + (1 if i < extra else 0) for i in range(clients)]


def make_batches(specs: list[ClientSpec], workers: int) -> list[list[ClientSpec]]:
    batches: list[list[ClientSpec]] = [[] for _ in range(workers)]
    for i, s in enumerate(specs):
        batches[i % workers].append(s)
    return batches


@dataclass
class Plan:
    systems: dict[str, str | None]
    workloads: list[str]
    clients: list[int]
    modes: list[str]
    records: int
    ops: int
    load_files: int
    retries: int
    procs: int
    timeout: float
    slack: int = 0
    commit_mode: str = "tail"
    distribution: str = "workload"
    deletion_vectors: bool = False


def run_one(plan: Plan, ce: Any, pool: Workers, system: str, wl: str, n_clients: int, mode: str,
            seed: int, concurrency: str, bar: Any) -> tuple[dict[str, Any], str | None]:
    env = ce.env
    root = env.fresh_root(
        f"ycsb-{wl}-{n_clients}-{mode}-{system.strip('[]').replace('[', '-').replace(',', '')}")
    direct_opts = ce.judge_options
    load_table(ce.direct_store(root), root, plan.records, plan.load_files,
               DV_PROPERTIES if plan.deletion_vectors else None)
    specs = [ClientSpec(system, plan.systems[system], root, env.storage_options, env.kind,
                        env.latency_label, mode, c,
                        generate_ops(WORKLOADS[wl], plan.records, n, c, n_clients, seed, wl,
                                                         plan.distribution), plan.retries,
                        plan.slack, plan.commit_mode)
             for c, n in enumerate(split_ops(plan.ops, n_clients))]
    bar_base = bar.n
    failure = None
    try:
        batches = pool.run(run_batch, make_batches(specs, pool.size), bar.update, plan.timeout,
                           on_ready=(lambda: ce.proxy.reset()) if ce.proxy else (lambda: None))
        clients = [c for b in batches for c in b]
    except RunFailed as e:
        failure, clients = str(e), []
    bar.n = bar_base + sum(len(s.ops) for s in specs)
    bar.refresh()
    proxy_counts = ce.proxy.reset() if ce.proxy else None
    row = summarize(system, wl, n_clients, mode, clients, proxy_counts, concurrency)
    row["failure"] = failure
    if failure is None:
        rows = final_rows(root, direct_opts, ce.direct_store(root))
        lv_rows = lakevilla_rows(ce.direct_store(root), root)
        row["check"] = check_run(system, plan.records, rows, clients, lv_rows)
    else:
        row["check"] = {"ok": False, "violations": ["run did not finish"]}
    return row, failure


def concurrency_label(n_clients: int, procs: int) -> tuple[str, int]:
    if procs <= 0:
        return f"{n_clients} threads in one process, one Lake/DeltaTable each", n_clients
    workers = min(n_clients, procs)
    if workers == n_clients:
        return f"{n_clients} processes", workers
    return (f"{workers} processes x {math.ceil(n_clients / workers)} threads, one Lake/DeltaTable "
            "per client", workers)


def run_all(plan: Plan, ce: Any, seed: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    total = len(plan.systems) * len(plan.workloads) * len(plan.modes) * len(plan.clients) * plan.ops
    from ..common import progress

    bar = progress(total, "ycsb")
    try:
        for n_clients in plan.clients:
            label, workers = concurrency_label(n_clients, plan.procs)
            for system in plan.systems:
                # processes of each system's own: one that ran another system's clients keeps its
                # caches warm (every seed replays the same keys and texts), which flattered
                # whichever system ran later; every system now meets the same history
                pool = Workers(workers, processes=plan.procs > 0)
                try:
                    for wl in plan.workloads:
                        for mode in plan.modes:
                            bar.set_description(f"ycsb {wl} {n_clients}c {mode} {system}")
                            row, _ = run_one(plan, ce, pool, system, wl, n_clients, mode, seed,
                                             label, bar)
                            rows.append(row)
                            # a hung or dead worker: Workers killed the processes, the
                            # next run starts fresh ones
                finally:
                    pool.close()
    finally:
        bar.close()
    order = {k: i for i, k in enumerate(plan.systems)}
    wls, modes = list(plan.workloads), list(plan.modes)
    rows.sort(key=lambda r: (plan.clients.index(r["clients"]), wls.index(r["workload"]),
                             modes.index(r["mode"]), order[r["system"]]))
    add_ratios(rows)
    return rows
