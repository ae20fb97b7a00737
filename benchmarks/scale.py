"""Cost per committed transaction as the crowd, the transaction and the table grow (issue 39):
latency, store requests and CPU against clients, tables per transaction, files per table and
commits in the log, lakevilla against delta-rs where delta-rs can do the same work.

    python -m benchmarks.scale [--quick] [--axes clients,tables,size,log]
        [--clients 1,2,4,8,16,32,64] [--tables 1,2,4,16,64] [--files 100,...,1000000]
        [--commits 100,1000,10000,100000] [--txns 24] [--reps 5] [--procs 8]
        [--store local|s3] [--latency none|s3|MS] [--systems ...]

The transaction: ``v = v + 1`` on one row of each table it touches (a point update: statistics
prune to one file, which is read and rewritten). Each axis is varied alone, the others at a
small default (1 client, 1 table, 100 files, 10 commits). Clients each own a row in a file of
their own (no two clients conflict on a row; plain Delta writers may still conflict on commit
order), start together at a barrier once set up (their table state loaded, an ``I`` client's
table joined to the global log: ``setup s``), and run ``--txns`` transactions between them
(at least 2 each) on the clients axis, ``--reps`` on the others. Clients are spawned processes
(``--procs``, more clients run as threads in them; 0: threads of this process). delta-rs runs
only single-table points (it has no multi-table transactions) and retries ``CommitFailedError``
as an application would; lakevilla retries ``TransactionAborted``.

Tables are written straight to the store (``benchmarks.synthetic``): a checkpoint of N file
actions and commits that each replace a file, a checkpoint every 100 versions on the log axis
(every 10^6 elsewhere: the size axis measures state, not checkpoint writing). Each system gets
its own copy. After each point delta-rs reads every updated row back: each committed
transaction added 1 to its client's row, once (``check``).

Reported per point: committed transactions, median and p95 latency of a committed transaction
(first attempt to acknowledged commit), store requests (lakevilla: at its store layer; delta-rs:
at the S3 proxy, n/a on the local store) and CPU seconds (of the clients' processes) per
committed transaction, aborts, given up, errors.
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import statistics
import threading
import time
import traceback
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from .runner import Gate, RunFailed, Workers
from .synthetic import PER_FILE, Shape, build, log_objects, row_id

AXES = ("clients", "tables", "size", "log", "hot")
AXIS_FIELD = {"clients": "clients", "tables": "tables", "size": "files", "log": "commits",
              "hot": "clients"}
AXIS_LABEL = {"clients": "clients", "tables": "tables per transaction",
              "size": "files per table", "log": "commits in the log",
              "hot": "clients on one hot file"}
DEFAULT_SYSTEMS = "delta-rs,LV[DL],LV[R],LV[R,CT],LV[R,CT,I]"
SMALL = {"clients": 1, "tables": 1, "files": 100, "commits": 10}
NO_GC = " -gc"  # a system's label with group commit off (``--group-commit off|both``)
LOG_INTERVAL = 100  # checkpoints on the log axis, as a Delta writer configured so leaves them
NO_CHECKPOINT = 1_000_000


def file_of(files: int, client: int) -> int:
    """The file client ``client`` updates (a real file of its own, away from the replaced ones)."""
    return max(3, files // 2 - 32) + client


def hot_row(files: int, client: int) -> int:
    """The row client ``client`` updates on the hot axis: all clients in one file, a row each."""
    return file_of(files, 0) * PER_FILE + client % PER_FILE


@dataclass(frozen=True)
class Point:
    axis: str
    clients: int
    tables: int
    files: int
    commits: int

    @property
    def value(self) -> int:
        return int(getattr(self, AXIS_FIELD[self.axis]))

    def shape(self) -> Shape:
        interval = LOG_INTERVAL if self.axis == "log" else NO_CHECKPOINT
        real = (file_of(self.files, 0),) if self.axis == "hot" else tuple(
            file_of(self.files, k) for k in range(self.clients))
        return Shape(self.files, self.commits, interval, real)

    def row(self, client: int) -> int:
        return (hot_row(self.files, client) if self.axis == "hot"
                else row_id(file_of(self.files, client)))


def table_name(i: int) -> str:
    return f"t{i:03d}"


# -------------------------------------------------------------------------------------
# one client, one job (a process's clients)
# -------------------------------------------------------------------------------------

@dataclass
class ClientSpec:
    client: int
    row: int
    txns: int


@dataclass
class Job:
    system: str
    features: str | None  # None: delta-rs
    root: str
    tables: list[str]
    storage_options: dict[str, str]
    store_kind: str
    latency: str
    commit_mode: str
    retries: int
    clients: list[ClientSpec]
    group_commit: bool = True


@dataclass
class ClientResult:
    client: int
    latencies: list[float] = field(default_factory=list)  # committed transactions, seconds
    aborts: int = 0
    given_up: int = 0
    errors: list[str] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)
    setup_s: float = 0.0


class LvClient:
    """A lakevilla client: its own ``Lake`` over its own counting store."""

    def __init__(self, job: Job, spec: ClientSpec) -> None:
        import lakevilla as lv
        from lakevilla.store import LatencyStore, open_store

        from .common import AreaCountingStore, latency_profile

        inner = open_store(job.root, job.storage_options or None)
        profile = latency_profile(job.latency)
        if job.store_kind == "local" and profile is not None:
            inner = LatencyStore(inner, profile, seed=spec.client)
        self.store = AreaCountingStore(inner)
        self.lake = lv.Lake(job.root, storage_options=job.storage_options or None,
                            store=self.store, commit_mode=job.commit_mode,
                            group_commit=job.group_commit)
        self.aborts: tuple[type[BaseException], ...] = (lv.TransactionAborted,)
        self.features, self.tables, self.row = job.features or "", job.tables, spec.row

    def warm(self) -> None:
        with self.lake.transaction(features=self.features) as txn:
            for t in self.tables:
                txn.read(t, where=f"id = {self.row}")
        self.lake.flush()
        self.store.reset()

    def txn(self) -> None:
        txn = self.lake.begin(features=self.features)
        try:
            for t in self.tables:
                txn.update(t, set={"v": "v + 1"}, where=f"id = {self.row}")
            txn.commit()
        except BaseException:
            txn.abort()
            raise

    def finish(self) -> dict[str, int]:
        self.lake.flush()
        counts = dict(self.store.snapshot())
        self.lake.close()
        return counts


class DeltaRsClient:
    """A delta-rs client: its own ``DeltaTable``, refreshed before each update."""

    def __init__(self, job: Job, spec: ClientSpec) -> None:
        from deltalake.exceptions import CommitFailedError

        self.aborts = (CommitFailedError,)
        self.job, self.row = job, spec.row

    def warm(self) -> None:
        from deltalake import DeltaTable

        self.dt = DeltaTable(f"{self.job.root}/{self.job.tables[0]}",
                             storage_options=self.job.storage_options or None)

    def txn(self) -> None:
        self.dt.update_incremental()
        self.dt.update(updates={"v": "v + 1"}, predicate=f"id = {self.row}")

    def finish(self) -> dict[str, int]:
        return {}


def _run_client(c: Any, spec: ClientSpec, retries: int, res: ClientResult,
                tick: Any) -> None:
    for _ in range(spec.txns):
        t0 = time.perf_counter()
        delay = 0.01
        for _attempt in range(retries + 1):
            try:
                c.txn()
            except c.aborts:
                res.aborts += 1
                time.sleep(random.uniform(0, delay))  # jittered backoff, as lake.run does
                delay = min(delay * 2, 1.0)
                continue
            except Exception as e:  # noqa: BLE001 - a failure of the system under test: a result
                res.errors.append(f"{type(e).__name__}: {e}"[:400])
                break
            res.latencies.append(time.perf_counter() - t0)
            break
        else:
            res.given_up += 1
        tick(1)


def run_job(job: Job, gate: Gate, tick: Any) -> dict[str, Any]:
    """Set every client of this process up, pass the gate, run them as threads; the process's
    CPU time from the gate to the last client's end is the job's."""
    results = [ClientResult(s.client) for s in job.clients]
    clients: list[Any] = []
    for spec, res in zip(job.clients, results):
        t0 = time.perf_counter()
        try:
            c = DeltaRsClient(job, spec) if job.features is None else LvClient(job, spec)
            c.warm()
            clients.append(c)
        except Exception as e:  # noqa: BLE001
            res.errors.append(f"setup: {type(e).__name__}: {e}\n{traceback.format_exc()}"[:2000])
            clients.append(None)
        res.setup_s = time.perf_counter() - t0
    start = threading.Event()

    def body(i: int) -> None:
        start.wait()
        if clients[i] is not None:
            try:
                _run_client(clients[i], job.clients[i], job.retries, results[i], tick)
            except Exception as e:  # noqa: BLE001
                results[i].errors.append(f"{type(e).__name__}: {e}"[:400])

    threads = [threading.Thread(target=body, args=(i,), daemon=True)
               for i in range(len(job.clients))]
    for t in threads:
        t.start()
    gate()
    cpu0, t0 = time.process_time(), time.perf_counter()
    start.set()
    for t in threads:
        t.join()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    for c, res in zip(clients, results):
        if c is not None:
            try:
                res.requests = c.finish()
            except Exception as e:  # noqa: BLE001
                res.errors.append(f"finish: {type(e).__name__}: {e}"[:400])
    return {"cpu_s": cpu, "wall_s": wall, "clients": [asdict(r) for r in results]}


def import_job(job: Any, gate: Gate, tick: Any) -> None:
    """Import what a client needs once per process, so that no point's ``setup s`` holds a
    process's first imports."""
    import deltalake  # noqa: F401

    import lakevilla  # noqa: F401

    gate()


# -------------------------------------------------------------------------------------
# one point of one system
# -------------------------------------------------------------------------------------

class Fixtures:
    """The objects of the last table shape asked for, made once and copied for each system."""

    def __init__(self) -> None:
        self.shape: Shape | None = None
        self.objects: list[tuple[str, bytes]] = []

    def write(self, store: Any, tables: list[str], shape: Shape) -> float:
        t0 = time.perf_counter()
        if shape != self.shape:
            self.shape, self.objects = None, []  # free the old one first (10^6 files: ~100 MB)
            self.objects, self.shape = list(log_objects(shape)), shape
        for t in tables:
            build(store, t, shape, self.objects)
        return time.perf_counter() - t0


def check(root: str, options: dict[str, str], tables: list[str], row_counts: dict[int, int]
          ) -> dict[str, Any]:
    """delta-rs reads each updated row: ``v`` went up by the committed transactions of its
    client, on every table (nothing lost, nothing applied twice)."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    bad = []
    rows = sorted(row_counts)
    for t in tables:
        dt = DeltaTable(f"{root}/{t}", storage_options=options or None)
        pred = " OR ".join(f"id = {r}" for r in rows)
        got = dt.to_pyarrow_dataset(file_pruning_predicate=pred).to_table(
            filter=pc.field("id").isin(rows)).to_pylist()
        have = {r["id"]: r["v"] for r in got}
        for r, n in row_counts.items():
            if r not in have or abs(have[r] - (r * 0.005 + n)) > 1e-6:
                bad.append(f"{t} id={r}: v={have.get(r)}, expected {r * 0.005 + n:.3f}")
    return {"ok": not bad, "problems": bad[:10]}


def measure(ce: Any, args: argparse.Namespace, pools: dict[str, Workers], fx: Fixtures,
            system: str, features: str | None, pt: Point, bar: Any) -> dict[str, Any]:
    env = ce.env
    root = env.fresh_root(f"scale-{pt.axis}-{pt.value}-{(features or 'rs').replace(',', '')}")
    tables = [table_name(i) for i in range(pt.tables)]
    build_s = fx.write(ce.direct_store(root), tables, pt.shape())
    txns = txns_per_client(args, pt)
    specs = [ClientSpec(k, pt.row(k), txns) for k in range(pt.clients)]
    before = _log_version(ce, root, tables[0])
    pool = pools[system]
    n_jobs = min(pool.size, pt.clients) if pool.processes else 1
    jobs = [Job(system, features, root, tables, env.storage_options, env.kind, args.latency,
                args.commit_mode, args.retries, specs[j::n_jobs],
                not system.endswith(NO_GC)) for j in range(n_jobs)]
    reset = (lambda: ce.proxy.reset()) if ce.proxy is not None else (lambda: None)
    row: dict[str, Any] = {"axis": pt.axis, "value": pt.value, "system": system,
                           **asdict(pt), "txns_per_client": txns, "build_s": build_s}
    try:
        out = _measured(ce, row, specs, features, tables, root,
                        pool.run(run_job, jobs, bar.update, args.run_timeout, on_ready=reset))
        # what the table's log took: with group commit several transactions share a version
        versions = _log_version(ce, root, tables[0]) - before
        out["log_versions"] = versions
        out["txns_per_version"] = out["committed"] / versions if versions > 0 else None
        out["versions_per_s"] = (versions * out["throughput"] / out["committed"]
                                 if out["committed"] else 0.0)
        return out
    except RunFailed as e:
        return {**row, "failure": str(e)[:500], "committed": 0}
    finally:
        if env.kind == "local":  # a 10^5-commit copy: deleted now, not all at the end
            shutil.rmtree(root[len("file://"):], ignore_errors=True)


def txns_per_client(args: argparse.Namespace, pt: Point) -> int:
    if pt.axis == "clients":
        return max(2, math.ceil(args.txns / pt.clients))
    if pt.axis == "hot":
        return max(2, math.ceil(args.hot_txns / pt.clients))
    return args.reps


def _log_version(ce: Any, root: str, table: str) -> int:
    """The newest version of ``table`` (markers included: every version is a put on its log)."""
    import lakevilla as lv

    lake = lv.Lake(root, storage_options=ce.direct_options or ce.env.storage_options or None,
                   store=ce.direct_store(root))
    try:
        return lake._client.log(table).latest_version()
    finally:
        lake.close()


def _measured(ce: Any, row: dict[str, Any], specs: list[ClientSpec], features: str | None,
              tables: list[str], root: str, out: list[dict[str, Any]]) -> dict[str, Any]:
    """A point's row from its jobs' results, and delta-rs' check of the rows updated."""
    proxy_counts = ce.proxy.snapshot() if ce.proxy is not None else None
    results = [c for o in out for c in o["clients"]]
    lat = sorted(x for c in results for x in c["latencies"])
    committed = len(lat)
    counts: Counter[str] = Counter()
    for c in results:
        counts.update(c["requests"])
    if features is None:
        counts = Counter(proxy_counts or {})
    from .common import per, percentile, reads_writes

    r, w = reads_writes(counts)
    measured = features is not None or proxy_counts is not None
    row.update({
        "failure": None, "committed": committed,
        "attempted": sum(s.txns for s in specs),
        "aborts": sum(c["aborts"] for c in results),
        "given_up": sum(c["given_up"] for c in results),
        "errors": [e for c in results for e in c["errors"]][:10],
        "error_count": sum(len(c["errors"]) for c in results),
        "latency_ms": statistics.median(lat) * 1000 if lat else None,
        "p95_ms": percentile(lat, 95) * 1000 if lat else None,
        "throughput": committed / max(o["wall_s"] for o in out) if committed else 0.0,
        "cpu_per_txn_ms": (sum(o["cpu_s"] for o in out) / committed * 1000 if committed
                           else None),
        "setup_s": max(c["setup_s"] for c in results),
        "requests_per_txn": (r + w) / committed if committed and measured else None,
        "reads_per_txn": r / committed if committed and measured else None,
        "writes_per_txn": w / committed if committed and measured else None,
        "kinds_per_txn": per(counts, committed) if measured else None,
        "requests_source": ("store" if features is not None
                            else "proxy" if proxy_counts is not None else "n/a"),
    })
    done = Counter({s.row: len(c["latencies"]) for s, c in
                    zip(specs, sorted(results, key=lambda c: c["client"]))})
    row["check"] = check(root, ce.direct_options or ce.env.storage_options, tables, dict(done))
    return row


# -------------------------------------------------------------------------------------
# the run
# -------------------------------------------------------------------------------------

def points(args: argparse.Namespace) -> list[Point]:
    out = []
    for axis in args.axes:
        for v in args.hot if axis == "hot" else getattr(args, AXIS_FIELD[axis]):
            d = {**SMALL, AXIS_FIELD[axis]: v}
            out.append(Point(axis, d["clients"], d["tables"], d["files"], d["commits"]))
    return out


def applies(features: str | None, pt: Point) -> bool:
    """delta-rs does single-table work only."""
    return features is not None or pt.tables == 1


def _ints(spec: str) -> list[int]:
    return [int(float(x)) for x in str(spec).split(",") if x.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from .common import add_commit_mode_arg, add_common_args, parse_with_quick

    p = argparse.ArgumentParser(prog="python -m benchmarks.scale",
                                description=__doc__.split("\n\n")[0])
    add_common_args(p, "results/scale")
    add_commit_mode_arg(p)
    p.set_defaults(systems=DEFAULT_SYSTEMS)
    p.add_argument("--axes", default="clients,tables,size,log",
                   help="a subset of " + ",".join(AXES) + " (hot only when asked for)")
    p.add_argument("--clients", default="1,2,4,8,16,32,64")
    p.add_argument("--tables", default="1,2,4,16,64")
    p.add_argument("--files", default="100,1000,10000,100000,1000000")
    p.add_argument("--commits", default="100,1000,10000,100000")
    p.add_argument("--txns", type=int, default=24,
                   help="transactions per point on the clients axis (at least 2 per client)")
    p.add_argument("--hot", default="16",
                   help="client counts on the hot axis: every client updates a row of its own "
                        "in one file of one table")
    p.add_argument("--hot-txns", type=int, default=160,
                   help="transactions per point on the hot axis (at least 2 per client)")
    p.add_argument("--reps", type=int, default=5, help="transactions per point on the others")
    p.add_argument("--procs", type=int, default=8,
                   help="client processes per system (more clients: threads in them; 0: threads)")
    p.add_argument("--retries", type=int, default=10)
    p.add_argument("--group-commit", choices=["on", "off", "both"], default="on",
                   help="lakevilla's group commit (Lake(group_commit=...)); both: every "
                        "lakevilla system twice, without it (labelled ' -gc') and with it")
    p.add_argument("--run-timeout", type=float, default=1200.0)
    args = parse_with_quick(p, argv, {"clients": "1,2", "tables": "1,2", "files": "100,1000",
                                      "commits": "10,120", "txns": 4, "reps": 2, "procs": 0,
                                      "hot": "2", "hot_txns": 4,
                                      "systems": "delta-rs,LV[DL],LV[R,CT,I]"})
    args.axes = [a.strip() for a in args.axes.split(",") if a.strip()]
    if set(args.axes) - set(AXES):
        raise SystemExit(f"unknown axes {sorted(set(args.axes) - set(AXES))}: choose from {AXES}")
    for name in ("clients", "tables", "files", "commits", "hot"):
        setattr(args, name, _ints(getattr(args, name)))
    if min(args.commits) < 3:
        raise SystemExit("--commits: at least 3 versions")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from .common import make_counted_env, parse_systems, print_table, progress, run_info, write_json

    args = parse_args(argv)
    systems = parse_systems(args.systems)
    if args.group_commit == "both":  # each lakevilla system twice, side by side: off and on
        systems = {n: f for s, f in systems.items()
                   for n in ((s + NO_GC, s) if f is not None else (s,))}
    elif args.group_commit == "off":
        systems = {(s + NO_GC if f is not None else s): f for s, f in systems.items()}
    pts = points(args)
    ce = make_counted_env(args)
    env = ce.env
    pools = {s: Workers(max(args.procs, 1), processes=args.procs > 0) for s in systems}
    fx = Fixtures()
    rows: list[dict[str, Any]] = []
    t0 = time.time()
    total = 0
    for pt in pts:
        per_point = txns_per_client(args, pt) * (pt.clients if pt.axis in ("clients", "hot")
                                                 else 1)
        total += per_point * sum(applies(f, pt) for f in systems.values())
    bar = progress(total, "scale")
    bar.unit = "txn"
    try:
        for pool in pools.values():
            if pool.processes:
                pool.run(import_job, [None] * pool.size, lambda n: None, args.run_timeout)
        for i, pt in enumerate(pts):
            names = [s for s, f in systems.items() if applies(f, pt)]
            k = i % len(names)  # the order of systems rotates from point to point
            for s in names[k:] + names[:k]:
                bar.set_description(f"scale {pt.axis}={pt.value:,} {s}")
                row = measure(ce, args, pools, fx, s, systems[s], pt, bar)
                rows.append(row)
                bar.write(_progress_line(row))
        info = run_info(args, env)
        info.update({"axes": args.axes, "small": SMALL, "txns": args.txns, "reps": args.reps,
                     "procs": args.procs, "commit_mode": args.commit_mode,
                     "log_checkpoint_interval": LOG_INTERVAL, "wall_s": time.time() - t0})
    finally:
        bar.close()
        for pool in pools.values():
            pool.close()
        ce.close()
    add_ratios(rows)
    text = print_table([_row(r) for r in rows], COLUMNS,
                       title=f"Cost per committed transaction: store={env.kind}, "
                             f"latency={args.latency}, one-row update per table; each axis "
                             f"alone, the others at {SMALL}; x rs = latency / delta-rs'")
    payload: dict[str, Any] = {"benchmark": "scale", "info": info, "points": rows, "table": text}
    path = write_json(args.out, "scale", payload)
    files = [str(path), plot_scale(args.out, rows)]
    payload["files"] = files
    print("wrote " + ", ".join(files))
    return payload


def add_ratios(rows: list[dict[str, Any]]) -> None:
    by = {(r["axis"], r["value"], r["system"]): r for r in rows}
    for r in rows:
        d = by.get((r["axis"], r["value"], "delta-rs"))
        ok = d is not None and d.get("latency_ms") and r.get("latency_ms")
        r["latency_vs_delta_rs"] = r["latency_ms"] / d["latency_ms"] if d and ok else None


COLUMNS = ["axis", "value", "system", "txns", "p50 ms", "p95 ms", "x rs", "req/txn", "r/w",
           "cpu ms/txn", "txn/s", "ver/s", "txn/ver", "aborts", "given up", "setup s", "check",
           "errors"]


def _row(r: dict[str, Any]) -> dict[str, Any]:
    def num(k: str) -> Any:
        return "n/a" if r.get(k) is None else r[k]

    return {"axis": r["axis"], "value": f"{r['value']:,}", "system": r["system"],
            "txns": f"{r['committed']}/{r.get('attempted', '?')}",
            "p50 ms": num("latency_ms"), "p95 ms": num("p95_ms"),
            "x rs": "" if r.get("latency_vs_delta_rs") is None
            else f"{r['latency_vs_delta_rs']:.2f}",
            "req/txn": num("requests_per_txn"),
            "r/w": "" if r.get("reads_per_txn") is None
            else f"{r['reads_per_txn']:.1f}/{r['writes_per_txn']:.1f}",
            "cpu ms/txn": num("cpu_per_txn_ms"), "txn/s": r.get("throughput", 0.0),
            "ver/s": num("versions_per_s"), "txn/ver": num("txns_per_version"),
            "aborts": r.get("aborts", ""), "given up": r.get("given_up", ""),
            "setup s": r.get("setup_s", ""),
            "check": "failed: " + r["failure"][:40] if r.get("failure")
            else ("ok" if r["check"]["ok"] else "BAD"),
            "errors": r.get("error_count") or ""}


def _progress_line(r: dict[str, Any]) -> str:
    x = _row(r)
    return (f"{r['axis']}={x['value']} {r['system']}: {x['txns']} txns, p50 "
            f"{_f(r.get('latency_ms'))} ms, {_f(r.get('requests_per_txn'))} req/txn, cpu "
            f"{_f(r.get('cpu_per_txn_ms'))} ms/txn, {_f(r.get('throughput'))} txn/s over "
            f"{_f(r.get('versions_per_s'))} versions/s, aborts {x['aborts']}, setup "
            f"{_f(r.get('setup_s'))} s, build {r['build_s']:.1f} s, check {x['check']}")


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _tick(v: int) -> str:
    k = round(math.log10(v)) if v > 0 else 0
    return f"$10^{k}$" if v >= 100 and 10 ** k == v else f"{v:,}"


def plot_scale(out_dir: str, rows: list[dict[str, Any]]) -> str:
    """One column per axis: latency (solid) and CPU (dashed) per committed transaction above,
    store requests per committed transaction below; log x."""
    from matplotlib import ticker

    from .common import plot

    axes = [a for a in AXES if any(r["axis"] == a for r in rows)]
    systems = list(dict.fromkeys(r["system"] for r in rows))

    def draw(fig: Any) -> None:
        fig.set_size_inches(3.6 * max(len(axes), 1), 6.5)
        colors = {s: f"C{i}" for i, s in enumerate(systems)}
        for j, axis in enumerate(axes):
            top = fig.add_subplot(2, len(axes), j + 1)
            low = fig.add_subplot(2, len(axes), len(axes) + j + 1)
            for s in systems:
                pts = sorted((r["value"], r.get("latency_ms"), r.get("cpu_per_txn_ms"),
                              r.get("requests_per_txn")) for r in rows
                             if r["axis"] == axis and r["system"] == s and r.get("latency_ms"))
                if not pts:
                    continue
                xs = [p[0] for p in pts]
                top.plot(xs, [p[1] for p in pts], marker="o", color=colors[s], label=s)
                top.plot(xs, [p[2] for p in pts], marker=".", linestyle="--", color=colors[s],
                         alpha=0.6)
                req = [(p[0], p[3]) for p in pts if p[3] is not None]
                if req:
                    low.plot([p[0] for p in req], [p[1] for p in req], marker="o",
                             color=colors[s], label=s)
            values = sorted({r["value"] for r in rows if r["axis"] == axis})
            for ax in (top, low):
                ax.set_xscale("log")
                ax.set_yscale("log")
                ax.set_xticks(values, [_tick(v) for v in values])
                ax.xaxis.set_minor_locator(ticker.NullLocator())
                ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
                ax.yaxis.set_minor_formatter(ticker.NullFormatter())
                ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda y, _: f"{y:g}"))
                ax.tick_params(labelsize=7)
            top.set_title(AXIS_LABEL[axis], fontsize=9)
            low.set_xlabel(AXIS_LABEL[axis], fontsize=8)
            if j == 0:
                top.set_ylabel("ms per committed txn\n(solid: latency p50, dashed: CPU)",
                               fontsize=8)
                low.set_ylabel("store requests per committed txn", fontsize=8)
                top.legend(fontsize=6)

    return str(plot(out_dir, "scale", draw))


if __name__ == "__main__":
    main()
