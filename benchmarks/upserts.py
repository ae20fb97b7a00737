"""CDC-style upserts: N clients MERGE overlapping key batches into one table.

    python -m benchmarks.upserts [--quick] [--clients 1,4,8] [--batches 8] [--store s3 --latency s3]
                                 [--spark-clients 4] [--workers processes|threads]

Each client is its own spawned process (``--workers threads``: a thread of this one) with
its own ``Lake`` / ``DeltaTable``. A batch
is a set of keys drawn from a window that overlaps the other clients' windows and
runs past the loaded keys, so every merge updates some rows (``v = target.v + 1``)
and inserts others (``v = 1``). delta-rs runs ``DeltaTable.merge`` and retries a lost
commit (its conflict checker aborts a merge whose files changed); lakevilla runs
``txn.merge`` in LV[DL] (plain Delta: abort and retry), LV[R] and LV[R,CT] (a
conflicting merge is redone, not aborted). A batch given up after ``--retries``
failed attempts is not applied.

Afterwards the table is read with delta-rs: every key's ``v`` must equal the number
of acknowledged batches holding it, with no key twice. A shortfall is a lost update
(a batch acknowledged but not applied, or applied on a stale read), an excess or a
duplicate key is a double apply. Requests are counted at the S3 proxy for every
system (delta-rs included), per acknowledged batch.

The Spark engine runs at one size (``--spark-clients``, 0 skips it): the clients are
threads of one driver, each with its own ``Lake`` on ``SparkEngine`` (Spark joins the
source with the target and writes the data files), on the local store, beside delta-rs
clients as threads on the same store. Delta's own Spark MERGE is not there (its jars
come from Maven, which these machines cannot reach). Requests are those of the store
layer (the commit protocol; Spark's data-file writes bypass it).
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections import Counter
from typing import Any

import pyarrow as pa

from .common import (
    SYSTEMS,
    add_common_args,
    clients_kind,
    make_counted_env,
    parse_systems,
    parse_with_quick,
    plot,
    print_table,
    run_info,
    write_json,
)

DEFAULT_SYSTEMS = "delta-rs,LV[DL],LV[R],LV[R,CT]"
TABLE = "cdc"
SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("v", pa.int64())])
PARTS = 4


def part_of(key: int) -> str:
    return f"p{key % PARTS}"


def make_batches(clients: int, batches: int, keys: int, batch_size: int,
                 seed: int) -> list[list[tuple[int, list[int]]]]:
    """Per client: (batch id, sorted keys). Windows overlap across clients and reach past the
    loaded keys (new keys are inserted, and may be inserted concurrently by two clients)."""
    rng = random.Random(seed)
    window = max(batch_size * 3, keys // 4)
    out = []
    for c in range(clients):
        mine = []
        for b in range(batches):
            start = rng.randrange(0, keys + window // 2)
            ks = sorted(rng.sample(range(start, start + window), batch_size))
            mine.append((c * 10_000 + b, ks))
        out.append(mine)
    return out


def source_of(ks: list[int]) -> pa.Table:
    return pa.table({"id": ks, "part": [part_of(k) for k in ks], "v": [1] * len(ks)}, schema=SCHEMA)


def _on(partitioned: bool, delta_rs: bool) -> Any:
    if delta_rs:
        return "target.id = source.id" + (" AND target.part = source.part" if partitioned else "")
    return ["id", "part"] if partitioned else ["id"]


def _worker(system: str, features: str | None, uri: str, opts: dict, work: list, partitioned: bool,
            retries: int, ready: Any, go: Any, out: Any) -> None:
    res: dict[str, Any] = {"applied": [], "given_up": [], "aborts": 0, "redos": 0, "errors": [],
                           "busy_s": 0.0}
    lake: Any = None
    try:
        if features is None:
            from deltalake import DeltaTable
            from deltalake.exceptions import CommitFailedError

            def attempt(ks: list[int]) -> None:
                dt = DeltaTable(uri, storage_options=opts or None)
                (dt.merge(source_of(ks), predicate=_on(partitioned, True), source_alias="source",
                          target_alias="target")
                 .when_matched_update({"v": "target.v + 1"})
                 .when_not_matched_insert({"id": "source.id", "part": "source.part",
                                           "v": "source.v"})
                 .execute())
            lost: tuple = (CommitFailedError,)
        else:
            import lakevilla as lv

            lake = lv.Lake(uri, storage_options=opts or None)

            def attempt(ks: list[int]) -> None:
                with lake.transaction(features) as txn:
                    (txn.merge(TABLE, source_of(ks), on=_on(partitioned, False))
                     .when_matched_update({"v": "target.v + 1"})
                     .when_not_matched_insert_all().execute())
                res["redos"] += txn.stats.get("redos", 0)
            lost = (lv.TransactionAborted,)
        ready.wait()
        go.wait()
        _apply_batches(attempt, lost, work, retries, res)
    except BaseException as e:  # noqa: BLE001 - reported, the run is marked failed
        res["errors"].append(f"{system}: {e!r}"[:500])
    out.put(res)
    if lake is not None:
        # its deletes behind commits go while the endpoint is up (the caller joins this worker
        # before it stops the endpoint); as a thread nothing else would send them, and a later
        # flush of every client of the process would wait on the stopped endpoint
        lake.close()


def _apply_batches(attempt: Any, lost: tuple, work: list, retries: int,
                   res: dict[str, Any]) -> None:
    """Merge each batch, retrying what aborts as an application would; record the outcome."""
    t0 = time.perf_counter()
    for bid, ks in work:
        for _ in range(retries + 1):
            try:
                attempt(ks)
                res["applied"].append(bid)
                break
            except lost:
                res["aborts"] += 1
                time.sleep(random.uniform(0.0, 0.05))  # an application's backoff before it retries
        else:
            res["given_up"].append(bid)
    res["busy_s"] = time.perf_counter() - t0


def _spark_client(system: str, features: str | None, root: str, spark: Any, work: list,
                  retries: int, start: Any, res: dict[str, Any]) -> None:
    """One Spark-engine client (or a delta-rs one beside it) as a thread of this driver."""
    try:
        if features is None:
            from deltalake import DeltaTable
            from deltalake.exceptions import CommitFailedError

            def attempt(ks: list[int]) -> None:
                (DeltaTable(f"{root}/{TABLE}").merge(source_of(ks), predicate=_on(False, True),
                                                     source_alias="source", target_alias="target")
                 .when_matched_update({"v": "target.v + 1"})
                 .when_not_matched_insert({"id": "source.id", "part": "source.part",
                                           "v": "source.v"})
                 .execute())
            lost: tuple = (CommitFailedError,)
        else:
            import lakevilla as lv
            from lakevilla.store import CountingStore, open_store

            res["store"] = store = CountingStore(open_store(root))
            lake = lv.Lake(root, store=store, engine=lv.SparkEngine(spark))

            def attempt(ks: list[int]) -> None:
                with lake.transaction(features) as txn:
                    (txn.merge(TABLE, spark.createDataFrame(source_of(ks)), on=_on(False, False))
                     .when_matched_update({"v": "target.v + 1"})
                     .when_not_matched_insert_all().execute())
                res["redos"] += txn.stats.get("redos", 0)
            lost = (lv.TransactionAborted,)
        start.wait()
        _apply_batches(attempt, lost, work, retries, res)
        if features is not None:
            lake.close()  # background closes finish before the requests are read
    except BaseException as e:  # noqa: BLE001 - reported, the run is marked failed
        res["errors"].append(f"{system}: {e!r}"[:500])


def run_spark(args: argparse.Namespace, seed: int) -> list[dict[str, Any]]:
    """delta-rs, LV[DL] and LV[R] at ``--spark-clients`` clients, the lakevilla ones on Spark."""
    import shutil
    import tempfile

    from .spark_insert import spark_session

    spark, owned = spark_session("local[*]")
    n = args.spark_clients
    runs = []
    try:
        for system, features in (("delta-rs", None), ("LV[DL] on Spark", ""),
                                 ("LV[R] on Spark", "R")):
            work_dir = tempfile.mkdtemp(prefix="lakevilla-upserts-spark-")
            root = "file://" + work_dir
            try:
                uri = load(root, {}, args.keys, args.files, False)
                work = make_batches(n, args.batches, args.keys, args.batch_size, seed)
                start = threading.Barrier(n + 1)
                results = [{"applied": [], "given_up": [], "aborts": 0, "redos": 0, "errors": [],
                            "busy_s": 0.0}
                           for _ in range(n)]
                threads = [threading.Thread(target=_spark_client,
                                            args=(system, features, root, spark, work[c],
                                                  args.retries, start, results[c]))
                           for c in range(n)]
                for t in threads:
                    t.start()
                start.wait(timeout=300)
                t0 = time.perf_counter()
                for t in threads:
                    t.join(args.timeout)
                wall = time.perf_counter() - t0
                applied = [b for r in results for b in r["applied"]]
                counts: Counter[str] = Counter()
                for r in results:
                    if "store" in r:
                        counts.update(r.pop("store").snapshot())
                chk = check(uri, {}, {b: ks for w in work for b, ks in w}, applied, args.keys)
            finally:
                shutil.rmtree(work_dir, ignore_errors=True)
            nb = max(len(applied), 1)
            runs.append({"system": system, "table": "plain (Spark, local store)", "clients": n,
                         "batches": n * args.batches, "applied": len(applied),
                         "given_up": sum(len(r["given_up"]) for r in results),
                         "aborts": sum(r["aborts"] for r in results),
                         "redos": sum(r["redos"] for r in results), "wall_s": wall,
                         "throughput": len(applied) / wall if wall > 0 else 0.0,
                         "requests": dict(counts),
                         "requests_per_batch": sum(counts.values()) / nb if counts else None,
                         "requests_source": "store layer" if counts else "n/a", "check": chk,
                         "errors": [e for r in results for e in r["errors"]]})
            r = runs[-1]
            print(f"  Spark section {n} clients {system}: {r['applied']}/{r['batches']} applied, "
                  f"{r['aborts']} aborts, {r['throughput']:.2f} batches/s", flush=True)
    finally:
        if owned:
            spark.stop()
    return runs


def load(root: str, opts: dict, keys: int, files: int, partitioned: bool) -> str:
    import lakevilla as lv

    lake = lv.Lake(root, storage_options=opts or None)
    lake.create_table(TABLE, SCHEMA, partition_by=["part"] if partitioned else None)
    per = -(-keys // files)
    for lo in range(0, keys, per):
        ks = list(range(lo, min(lo + per, keys)))
        with lake.transaction("") as txn:
            txn.insert(TABLE,
                       pa.table({"id": ks, "part": [part_of(k) for k in ks], "v": [0] * len(ks)},
                                schema=SCHEMA))
    lake.close()
    return f"{root}/{TABLE}"


def check(uri: str, opts: dict, batches: dict[int, list[int]], applied: list[int],
          keys: int) -> dict[str, Any]:
    from deltalake import DeltaTable

    t = pa.table(DeltaTable(uri, storage_options=opts or None).to_pyarrow_table())
    got = Counter()
    vals: dict[int, int] = {}
    for r in t.select(["id", "v"]).to_pylist():
        got[r["id"]] += 1
        vals[r["id"]] = r["v"]
    want = Counter()
    for b in applied:
        want.update(batches[b])
    dup = sum(n - 1 for n in got.values() if n > 1)
    lost = sum(max(0, want[k] - vals.get(k, 0)) for k in set(want) | set(vals))
    extra = sum(max(0, vals.get(k, 0) - want[k]) for k in set(want) | set(vals))
    missing = [k for k in range(keys) if k not in got]
    return {"rows": t.num_rows, "duplicate_keys": dup, "lost_updates": lost,
            "double_applied": extra, "missing_loaded_keys": len(missing),
            "ok": dup == 0 and lost == 0 and extra == 0 and not missing}


def run_one(ce: Any, system: str, features: str | None, clients: int, partitioned: bool,
            args: argparse.Namespace, seed: int) -> dict[str, Any]:
    env = ce.env
    root = env.fresh_root(f"upserts-{'p' if partitioned else 'u'}{clients}")
    uri = load(root, ce.direct_options or env.storage_options, args.keys, args.files, partitioned)
    work = make_batches(clients, args.batches, args.keys, args.batch_size, seed)
    ctx = clients_kind(args.workers)  # each client has its own Lake or DeltaTable either way
    ready, go, out = ctx.Barrier(clients + 1), ctx.Barrier(clients + 1), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(system, features, uri if features is None else root,
                                               env.storage_options, work[c], partitioned,
                                               args.retries, ready, go, out))
             for c in range(clients)]
    for p in procs:
        p.start()
    ready.wait(timeout=300)
    if ce.proxy is not None:
        ce.proxy.reset()
    t0 = time.perf_counter()
    go.wait(timeout=60)
    results = [out.get(timeout=args.timeout) for _ in procs]
    wall = time.perf_counter() - t0
    counts = ce.proxy.snapshot() if ce.proxy is not None else {}
    for p in procs:
        p.join(60)
    applied = [b for r in results for b in r["applied"]]
    given_up = sum(len(r["given_up"]) for r in results)
    errors = [e for r in results for e in r["errors"]]
    chk = check(uri, ce.direct_options or env.storage_options, {b: ks for w in work for b, ks in w},
                applied, args.keys)
    n = max(len(applied), 1)
    return {"system": system, "table": "partitioned" if partitioned else "plain",
            "clients": clients, "batches": clients * args.batches, "applied": len(applied),
            "given_up": given_up, "aborts": sum(r["aborts"] for r in results),
            "redos": sum(r["redos"] for r in results), "wall_s": wall,
            "throughput": len(applied) / wall if wall > 0 else 0.0, "requests": counts,
            "requests_per_batch": sum(counts.values()) / n if counts else None,
            "requests_source": "proxy" if counts else "n/a", "check": chk, "errors": errors}


COLUMNS = ["table", "clients", "system", "applied", "given_up", "aborts", "redos", "batches/s",
           "x delta-rs", "lost", "dup", "req/batch"]


def _row(r: dict[str, Any]) -> dict[str, Any]:
    c = r["check"]
    return {"table": r["table"], "clients": r["clients"], "system": r["system"],
            "applied": f"{r['applied']}/{r['batches']}", "given_up": r["given_up"],
            "aborts": r["aborts"], "redos": r["redos"], "batches/s": r["throughput"],
            "x delta-rs": r.get("vs_delta_rs") or "", "lost": c["lost_updates"],
            "dup": c["duplicate_keys"] + c["double_applied"],
            "req/batch": r["requests_per_batch"] if r["requests_per_batch"] is not None else "n/a"}


def add_ratios(runs: list[dict[str, Any]]) -> None:
    base = {(r["table"], r["clients"]): r["throughput"] for r in runs if r["system"] == "delta-rs"}
    for r in runs:
        b = base.get((r["table"], r["clients"]))
        r["vs_delta_rs"] = r["throughput"] / b if b else None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.upserts",
                                description=__doc__.split("\n")[0])
    add_common_args(p, "results/upserts")
    p.set_defaults(store="s3", latency="s3", systems=DEFAULT_SYSTEMS)
    p.add_argument("--clients", default="1,4,8")
    p.add_argument("--batches", type=int, default=8, help="merges per client")
    p.add_argument("--batch-size", type=int, default=40, help="keys per merge")
    p.add_argument("--keys", type=int, default=2000, help="keys loaded before the run")
    p.add_argument("--files", type=int, default=8,
                   help="files the loaded keys are spread over (key ranges)")
    p.add_argument("--retries", type=int, default=10,
                   help="attempts per batch before it is given up")
    p.add_argument("--tables", default="plain,partitioned")
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--workers", choices=["processes", "threads"], default="processes",
                   help="clients as spawned processes (default) or threads of this process")
    p.add_argument("--spark-clients", type=int, default=4,
                   help="clients of the Spark-engine section (threads of one driver, local "
                        "store); 0 skips it")
    return parse_with_quick(p, argv,
                            {"clients": "2", "batches": 2, "batch_size": 10, "keys": 100,
                             "files": 2, "latency": "none", "spark_clients": 0})


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    systems = parse_systems(args.systems)
    clients = [int(x) for x in args.clients.split(",")]
    tables = [t.strip() for t in args.tables.split(",") if t.strip()]
    ce = make_counted_env(args)
    t0 = time.time()
    runs: list[dict[str, Any]] = []
    try:
        for tbl in tables:
            for n in clients:
                for name, features in systems.items():
                    r = run_one(ce, name, features, n, tbl == "partitioned", args, args.seed + n)
                    runs.append(r)
                    print(f"  {tbl} {n} clients {name}: {r['applied']}/{r['batches']} applied, "
                          f"{r['aborts']} aborts, {r['throughput']:.2f} batches/s", flush=True)
        if args.spark_clients > 0:
            runs.extend(run_spark(args, args.seed + args.spark_clients))
        info = run_info(args, ce.env)
        info.update({"clients": clients, "batches_per_client": args.batches,
                     "batch_size": args.batch_size, "keys": args.keys, "files": args.files,
                     "retries": args.retries, "spark_clients": args.spark_clients,
                     "wall_s": time.time() - t0})
    finally:
        ce.close()
    add_ratios(runs)
    text = print_table([_row(r) for r in runs], COLUMNS,
                       title=f"Upserts (MERGE): store={info['store']}, latency={info['latency']}, "
                             f"{args.batches} merges of {args.batch_size} keys per client; x = "
                             "throughput / delta-rs")
    payload = {"benchmark": "upserts", "info": info, "runs": runs, "table": text,
               "systems": {k: v for k, v in SYSTEMS.items() if k in systems}}
    write_json(args.out, "upserts", payload)

    spark_runs = [r for r in runs if "Spark" in r["table"]]

    def draw(fig: Any) -> None:
        panels = len(tables) + (1 if spark_runs else 0)
        for i, tbl in enumerate(tables):
            ax = fig.add_subplot(1, panels, i + 1)
            for name in systems:
                pts = sorted((r["clients"], r["throughput"])
                             for r in runs if r["system"] == name and r["table"] == tbl)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
            ax.set_title(f"{tbl} table")
            ax.set_xlabel("clients")
            ax.set_ylabel("merged batches / s")
            ax.legend(fontsize=7)
        if spark_runs:
            ax = fig.add_subplot(1, panels, panels)
            ax.bar([r["system"] for r in spark_runs], [r["throughput"] for r in spark_runs],
                   color=["tab:gray", "tab:orange", "tab:blue"][:len(spark_runs)])
            ax.set_title(f"Spark engine, {args.spark_clients} clients, local store")
            ax.set_ylabel("merged batches / s")
            ax.tick_params(axis="x", labelrotation=20, labelsize=7)

    plot(args.out, "upserts", draw)
    if args.spark_clients > 0:
        print("Spark section: local store, no latency; lakevilla's clients use SparkEngine "
              "(threads of one driver); requests are the store layer's (Spark writes the "
              "data files itself)")
    return payload


if __name__ == "__main__":
    main()
