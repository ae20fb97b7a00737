"""Reads and table state at scale (issue 15): lakevilla's embedded engine against delta-rs and
DuckDB over the same Parquet files, the Spark engine against plain ``spark.read.parquet``, and
snapshot loading from 10^3 to 10^6 files against delta-rs.

    python -m benchmarks.reads [--quick] [--rows 1000000,5000000] [--files 20] [--reps 5]
                               [--scale 1000,10000,100000,1000000] [--no-spark] [--no-scale]
                               [--commits 1000] [--store s3 --latency s3]

Reads: a table of ``--rows`` rows in 4 columns (``id`` clustered across ``--files`` files,
``k`` uniform in 0..999, ``v`` a double, ``s`` a short string), written once by lakevilla, so
that every system reads exactly the same files. Four shapes: a full scan, a point lookup that
statistics prune to one file, a 10% range, and ``k = 7``, a filter no statistic prunes.
Every measured read is cold (a new ``Lake``, a new ``DeltaTable``, a new DuckDB connection);
rounds go system by system, shape by shape, ``--reps`` times after one unmeasured round, and
the medians are compared in the same run. Every system must return the same rows.

Snapshots: a synthetic table of N files (statistics on two columns, as a writer with data
skipping leaves them; one checkpoint written by lakevilla, then three commits), loaded in a
fresh process per measurement after a warm-up load of a tiny table: the time and resident
memory a cold load adds, then a pruned lookup (``id = x``: which files may hold it), and a
point update transaction (one file read and rewritten, conflict check, commit).

History: a table of ``--commits`` one-row commits written by lakevilla (a checkpoint every 10),
loaded cold by a new ``Lake`` and a new ``DeltaTable`` in this process (issue 13's figure).
"""

from __future__ import annotations

import argparse
import gc
import os
import queue
import statistics
import time
from typing import Any

SHAPES = ("full scan", "point (stats prune)", "10% range", "k = 7 (prunes nothing)")
READ_SYSTEMS = ("lakevilla", "delta-rs", "duckdb", "spark engine", "spark.read.parquet")
TABLE = "t"


# -------------------------------------------------------------------------------------
# the reads table
# -------------------------------------------------------------------------------------

def schema():
    import pyarrow as pa

    return pa.schema([("id", pa.int64()), ("k", pa.int64()), ("v", pa.float64()),
                      ("s", pa.string())])


def write_table(store: Any, root: str, rows: int, files: int, seed: int) -> None:
    """``rows`` rows in ``files`` files, ``id`` clustered (file i holds a contiguous range)."""
    import numpy as np
    import pyarrow as pa

    import lakevilla as lv

    rng = np.random.default_rng(seed)
    lake = lv.Lake(root, store=store)
    try:
        lake.create_table(TABLE, schema(), properties={"delta.checkpointInterval": "10"})
        per = rows // files
        for f in range(files):
            ids = np.arange(f * per, (f + 1) * per if f < files - 1 else rows)
            t = pa.table({"id": ids, "k": rng.integers(0, 1000, len(ids)),
                          "v": rng.random(len(ids)),
                          "s": pa.array([f"s{x % 997}" for x in ids.tolist()])}, schema=schema())
            with lake.transaction(features="") as txn:
                txn.insert(TABLE, t)
        lake.flush()
    finally:
        lake.close()


def shape_filters(rows: int) -> dict[str, tuple[str | None, Any]]:
    """shape -> (lakevilla/DuckDB/Spark SQL where, delta-rs DNF filters)."""
    point = rows // 2 + 17
    lo, hi = rows // 2, rows // 2 + rows // 10
    return {
        "full scan": (None, None),
        "point (stats prune)": (f"id = {point}", [("id", "=", point)]),
        "10% range": (f"id >= {lo} AND id < {hi}", [("id", ">=", lo), ("id", "<", hi)]),
        "k = 7 (prunes nothing)": ("k = 7", [("k", "=", 7)]),
    }


class Readers:
    """One cold read per call, for every system available in this environment."""

    def __init__(self, env: Any, ce: Any, root: str, spark: Any) -> None:
        self.env, self.ce, self.root, self.spark = env, ce, root, spark
        self.local_files: list[str] = []
        self.file_uris: list[str] = []
        import lakevilla as lv

        snap = lv.Lake(root, storage_options=env.storage_options or None).snapshot(TABLE)
        from urllib.parse import unquote

        for a in snap.files.values():
            if env.kind == "local":
                self.local_files.append(f"{root[len('file://'):]}/{TABLE}/{unquote(a.path)}")
            self.file_uris.append(f"{root}/{TABLE}/{unquote(a.path)}")
        self.local_files.sort()
        self.file_uris.sort()
        self.requests: dict[str, Any] = {}

    def systems(self) -> list[str]:
        out = ["lakevilla", "delta-rs"]
        if self.env.kind == "local":
            out.append("duckdb")
        if self.spark is not None and self.env.kind == "local":
            out += ["spark engine", "spark.read.parquet"]
        return out

    def read(self, system: str, where: str | None, dnf: Any) -> Any:
        import pyarrow as pa

        if system == "lakevilla":
            lake, store = self.env.lake(self.root)
            try:
                out = lake.read(TABLE, where=where)
            finally:
                lake.close()
            self.requests[system] = {**store.snapshot(), "mb": store.bytes_read / 1e6}
            return out
        if system == "delta-rs":
            from deltalake import DeltaTable

            if self.ce.proxy is not None:
                self.ce.proxy.reset()
            dt = DeltaTable(f"{self.root}/{TABLE}",
                            storage_options=self.env.storage_options or None)
            out = pa.table(dt.to_pyarrow_table(filters=dnf))
            if self.ce.proxy is not None:
                self.requests[system] = self.ce.proxy.snapshot()
            return out
        if system == "duckdb":
            import duckdb

            con = duckdb.connect()
            try:
                sql = (f"SELECT * FROM read_parquet({self.local_files!r})"
                       + (f" WHERE {where}" if where else ""))
                return con.sql(sql).to_arrow_table()
            finally:
                con.close()
        if system == "spark engine":
            import lakevilla as lv

            lake = lv.Lake(self.root, engine=lv.SparkEngine(self.spark))
            try:
                return lake.read(TABLE, where=where).toArrow()
            finally:
                lake.close()
        if system == "spark.read.parquet":
            df = self.spark.read.parquet(*self.file_uris)
            if where:
                df = df.filter(where)
            return df.toArrow()
        raise ValueError(system)


def measure_reads(ce: Any, args: argparse.Namespace, rows: int, spark: Any,
                  bar: Any) -> list[dict[str, Any]]:
    import numpy as np

    env = ce.env
    root = env.fresh_root(f"reads-{rows}")
    write_table(ce.direct_store(root), root, rows, args.files, args.seed)
    readers = Readers(env, ce, root, spark)
    systems = readers.systems()
    filters = shape_filters(rows)
    times: dict[tuple[str, str], list[float]] = {}
    counts: dict[tuple[str, str], int] = {}
    ids: dict[tuple[str, str], Any] = {}
    requests: dict[tuple[str, str], list[dict]] = {}
    errors: dict[tuple[str, str], str] = {}
    # the Spark systems run after the others (an idle JVM beside them still takes CPU from a
    # 2-core machine right after its own reads); in each phase the order of systems rotates
    # from round to round, so that none always follows the same one
    phases = [[s for s in systems if not s.startswith("spark")],
              [s for s in systems if s.startswith("spark")]]
    plan = [(rep, shape, system) for group in phases if group for rep in range(args.reps + 1)
            for shape in SHAPES for system in group[rep % len(group):] + group[:rep % len(group)]]
    for rep, shape, system in plan:  # round 0 warms every system up and is not measured
        where, dnf = filters[shape]
        gc.collect()
        bar.update(1)
        if (shape, system) in errors:
            continue
        try:
            t0 = time.perf_counter()
            out = readers.read(system, where, dnf)
            dt_ = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 - Spark loses a large result now and then: reported
            if not system.startswith("spark"):
                raise
            errors[(shape, system)] = \
                f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            continue
        if rep == 0:
            counts[(shape, system)] = out.num_rows
            if out.num_rows <= 1_000_000 or system in ("lakevilla", "delta-rs"):
                ids[(shape, system)] = np.sort(out.column("id").to_numpy())
            continue
        times.setdefault((shape, system), []).append(dt_)
        if system in readers.requests:
            requests.setdefault((shape, system), []).append(readers.requests.pop(system))
    out = []
    for shape in SHAPES:
        ref = ids.get((shape, "delta-rs"))
        for system in systems:
            if (shape, system) in errors:
                out.append({"rows_table": rows, "shape": shape, "system": system, "median_ms": None,
                            "error": errors[(shape, system)], "same_rows_as_delta_rs": None,
                            "requests": None})
                continue
            ts = times[(shape, system)]
            reqs = requests.get((shape, system))
            mine = ids.get((shape, system))
            same = (None if mine is None or ref is None
                    else bool(len(mine) == len(ref) and (mine == ref).all()))
            out.append({"rows_table": rows, "shape": shape, "system": system,
                        "median_ms": statistics.median(ts) * 1000, "min_ms": min(ts) * 1000,
                        "reps": len(ts), "rows": counts[(shape, system)],
                        "same_rows_as_delta_rs": same,
                        "requests": None if not reqs else {
                            k: sum(r.get(k, 0) for r in reqs) / len(reqs)
                            for k in ("get", "head", "list", "mb")
                            if k != "mb" or "mb" in reqs[0]}})
    add_ratios(out)
    return out


def _ratio(r: dict[str, Any], other: dict[str, Any] | None) -> float | None:
    if not other or not other["median_ms"] or r["median_ms"] is None:
        return None
    return r["median_ms"] / other["median_ms"]


def add_ratios(rows: list[dict[str, Any]]) -> None:
    by = {(r["rows_table"], r["shape"], r["system"]): r for r in rows}
    for r in rows:
        key = (r["rows_table"], r["shape"])
        r["vs_delta_rs"] = _ratio(r, by.get((*key, "delta-rs")))
        r["vs_duckdb"] = _ratio(r, by.get((*key, "duckdb")))
        if r["system"] == "spark engine":
            r["vs_plain_spark"] = _ratio(r, by.get((*key, "spark.read.parquet")))


# -------------------------------------------------------------------------------------
# snapshot scaling
# -------------------------------------------------------------------------------------

def synthetic_table(store: Any, table: str, n: int) -> int:
    """A table of ``n`` files (``benchmarks.synthetic``): version 0 (protocol, metadata), a
    checkpoint of every file at version 1, three commits each replacing a file. Only the file
    the point transaction touches exists on storage. Returns the id it updates."""
    from .synthetic import Shape, build, row_id

    target = n // 2
    build(store, table, Shape(files=n, commits=5, interval=1_000_000, real=(target,)))
    return row_id(target)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _scale_worker(system: str, uri: str, warm_uri: str, options: dict, point: int, update: bool,
                  out: Any) -> None:
    """One cold measurement in a fresh process (spawned: delta-rs does not survive fork)."""
    import gc

    try:
        opts = options or None
        if system == "delta-rs":
            import pyarrow  # noqa: F401
            from deltalake import DeltaTable

            DeltaTable(warm_uri, storage_options=opts).to_pyarrow_dataset(
                file_pruning_predicate="id = 1")
        else:
            import lakevilla as lv
            from lakevilla.scan.pruning import candidates

            root, _, name = uri.rpartition("/")
            wroot, _, wname = warm_uri.rpartition("/")
            w = lv.Lake(wroot, storage_options=opts).snapshot(wname)
            candidates(w, "id = 1")
            len(w.files)
        gc.collect()
        r0 = _rss()
        t0 = time.perf_counter()
        if system == "delta-rs":
            dt = DeltaTable(uri, storage_options=opts)
            version = dt.version()
        else:
            lake = lv.Lake(root, storage_options=opts)
            snap = lake.snapshot(name)
            version = snap.version
        t1 = time.perf_counter()
        r1 = _rss()
        if system == "delta-rs":
            found = len(list(
                dt.to_pyarrow_dataset(file_pruning_predicate=f"id = {point}").get_fragments()))
        else:
            found = len(candidates(snap, f"id = {point}"))
        t2 = time.perf_counter()
        r2 = _rss()
        res = {"version": version, "load_s": t1 - t0, "load_mb": (r1 - r0) / 1e6,
               "pruned_s": t2 - t0, "pruned_mb": (r2 - r0) / 1e6, "candidates": found}
        if update:
            t3 = time.perf_counter()
            if system == "delta-rs":
                dt.update(updates={"v": "v + 1"}, predicate=f"id = {point}")
            else:
                with lake.transaction(features="R") as txn:
                    txn.update(name, set={"v": "v + 1"}, where=f"id = {point}")
            res["txn_s"] = time.perf_counter() - t3
        out.put(res)
    except BaseException as e:  # noqa: BLE001 - report, do not hang the parent
        out.put({"error": f"{type(e).__name__}: {e}"[:500]})
    finally:
        out.close()
        out.join_thread()  # the result is in the pipe before the process ends
        os._exit(0)  # delta-rs may abort during interpreter teardown


def measure_scale(ce: Any, args: argparse.Namespace, bar: Any) -> list[dict[str, Any]]:
    import multiprocessing as mp

    env = ce.env
    root = env.fresh_root("scale")
    store = ce.direct_store(root)
    synthetic_table(store, "warm", 100)
    opts = ce.direct_options or env.storage_options
    ctx = mp.get_context("spawn")
    out = []
    for n in args.scale:
        name = f"t{n}"
        point = synthetic_table(store, name, n)
        runs: dict[str, list[dict]] = {"lakevilla": [], "delta-rs": []}
        for rep in range(args.scale_reps):
            for system in runs:
                q = ctx.Queue()
                p = ctx.Process(target=_scale_worker,
                                args=(system, f"{root}/{name}", f"{root}/warm",
                                      env.storage_options if env.kind == "s3" else opts,
                                      point, rep == 0, q))
                p.start()
                res = None
                try:
                    while res is None:
                        try:
                            res = q.get(timeout=5)
                        except queue.Empty:
                            if not p.is_alive():  # died before reporting: no result to wait for
                                res = {"error": f"worker exited with status {p.exitcode} "
                                                "before reporting"}
                finally:
                    p.join(60)
                runs[system].append(res)
                bar.update(1)
        for system, rs in runs.items():
            errors = [r["error"] for r in rs if "error" in r]
            ok = [r for r in rs if "error" not in r]
            row = {"files": n, "system": system, "reps": len(ok), "errors": errors}
            for k in ("load_s", "load_mb", "pruned_s", "pruned_mb"):
                row[k] = statistics.median(r[k] for r in ok) if ok else None
            row["txn_s"] = next((r["txn_s"] for r in ok if "txn_s" in r), None)
            row["candidates"] = ok[0]["candidates"] if ok else None
            out.append(row)
    by = {(r["files"], r["system"]): r for r in out}
    for r in out:
        d = by.get((r["files"], "delta-rs"))
        for k in ("load_s", "load_mb", "pruned_s", "pruned_mb", "txn_s"):
            r[f"{k}_vs_delta_rs"] = (r[k] / d[k] if d and r[k] is not None and d[k] else None)
    return out


def measure_history(ce: Any, args: argparse.Namespace) -> dict[str, Any]:
    """A table of ``--commits`` one-row commits (lakevilla's default checkpoints), loaded cold:
    the checkpoint and the commits after it (issue 13's figure; ``benchmarks.costs`` measures
    the same table, beside its request counts)."""
    from .costs import measure_load

    return measure_load(ce, args.commits, args.loads)


# -------------------------------------------------------------------------------------
# the S3 proxy in a process of its own
# -------------------------------------------------------------------------------------

def _proxy_main(target: str, latency: str, conn: Any) -> None:
    from .common import CountingLatencyProxy, latency_profile

    proxy = CountingLatencyProxy(target, latency_profile(latency))
    conn.send(proxy.url)
    while True:
        msg = conn.recv()
        if msg == "close":
            proxy.close()
            conn.send(None)
            return
        conn.send(proxy.reset() if msg == "reset" else proxy.snapshot())


class ProcessProxy:
    """``CountingLatencyProxy`` run in its own process. In the benchmark's process its Python
    threads share the GIL with lakevilla's (boto3 reads response bodies in Python), not with
    delta-rs' Rust threads: a cold full scan of 1M rows through it took lakevilla 1.2 s
    (0.09 s with no proxy at all) and delta-rs 0.44 s (0.13 s), a 2x ratio that was the
    proxy's, not the read path's."""

    def __init__(self, target: str, latency: str) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_proxy_main, args=(target, latency, child), daemon=True)
        self._proc.start()
        self.url = self._conn.recv()

    def reset(self) -> dict[str, int]:
        self._conn.send("reset")
        return self._conn.recv()

    def snapshot(self) -> dict[str, int]:
        self._conn.send("snapshot")
        return self._conn.recv()

    def close(self) -> None:
        try:
            self._conn.send("close")
            self._conn.recv()
        finally:
            self._proc.join(10)


def _proxy_out_of_process(ce: Any, args: argparse.Namespace) -> None:
    """Route every S3 client of the run through a ``ProcessProxy`` instead of the in-process one."""
    if ce.proxy is None:
        return
    proxy = ProcessProxy(ce.direct_options["AWS_ENDPOINT_URL"], args.latency)
    ce.env._cleanup.append(proxy.close)
    ce.proxy = proxy
    ce.env.storage_options = {**ce.env.storage_options, "AWS_ENDPOINT_URL": proxy.url}


# -------------------------------------------------------------------------------------
# output
# -------------------------------------------------------------------------------------

def plot_reads(out_dir: str, rows: list[dict[str, Any]], scale_rows: list[dict[str, Any]]) -> str:
    from .common import plot

    sizes = sorted({r["rows_table"] for r in rows})

    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 2, 1)
        systems = [s for s in READ_SYSTEMS
                   if s != "delta-rs" and any(r["system"] == s for r in rows)]
        width = 0.8 / max(1, len(systems) * len(sizes))
        for j, size in enumerate(sizes):
            for i, s in enumerate(systems):
                vals = [next((r["vs_delta_rs"]
                              for r in rows
                              if r["rows_table"] == size and r["shape"] == sh and r["system"] == s),
                             None) or 0 for sh in SHAPES]
                xs = [k + (j * len(systems) + i) * width for k in range(len(SHAPES))]
                ax.bar(xs, vals, width, label=f"{s} {size:,} rows")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([k + (len(systems) * len(sizes) - 1) * width / 2 for k in range(len(SHAPES))])
        ax.set_xticklabels([s.split(" (")[0] for s in SHAPES], fontsize=7)
        ax.set_ylabel("time / delta-rs time")
        ax.set_title("cold reads", fontsize=9)
        ax.legend(fontsize=6)
        ax2 = fig.add_subplot(1, 2, 2)
        for s in ("lakevilla", "delta-rs"):
            pts = sorted((r["files"], r["load_s"], r["pruned_s"], r["load_mb"]) for r in scale_rows
                         if r["system"] == s and r["load_s"] is not None)
            if not pts:
                continue
            line = ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{s} load")
            ax2.plot([p[0] for p in pts], [p[2] for p in pts], marker=".", linestyle="--",
                     color=line[0].get_color(), label=f"{s} load + pruned lookup")
        ax2.set_xscale("log")
        ax2.set_yscale("log")
        ax2.set_xlabel("files in the table")
        ax2.set_ylabel("seconds (cold)")
        ax2.set_title("snapshot scaling", fontsize=9)
        if scale_rows:
            ax2.legend(fontsize=6)

    return str(plot(out_dir, "reads", draw))


READ_COLUMNS = ["rows", "shape", "system", "median ms", "vs delta-rs", "vs duckdb",
                "vs plain spark", "GET/HEAD/LIST", "MB read", "same rows"]
SCALE_COLUMNS = ["files", "system", "load ms", "load MB", "load+prune ms", "load+prune MB",
                 "txn ms", "load x", "MB x", "prune x", "prune MB x", "txn x"]


def _fmt_ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def _read_row(r: dict[str, Any]) -> dict[str, Any]:
    return {"rows": f"{r['rows_table']:,}", "shape": r["shape"], "system": r["system"],
            "median ms": "failed" if r["median_ms"] is None else r["median_ms"],
            "vs delta-rs": _fmt_ratio(r["vs_delta_rs"]), "vs duckdb": _fmt_ratio(r["vs_duckdb"]),
            "vs plain spark": _fmt_ratio(r.get("vs_plain_spark")),
            "GET/HEAD/LIST": "" if not r["requests"] else "/".join(
                f"{r['requests'][k]:.0f}" for k in ("get", "head", "list")),
            "MB read": ("" if not r["requests"] or "mb" not in r["requests"]
                        else r["requests"]["mb"]),
            "same rows": {True: "yes", False: "NO", None: ""}[r["same_rows_as_delta_rs"]]}


def _scale_row(r: dict[str, Any]) -> dict[str, Any]:
    ms = (lambda x: "n/a" if x is None else x * 1000)  # noqa: E731
    return {"files": f"{r['files']:,}", "system": r["system"], "load ms": ms(r["load_s"]),
            "load MB": r["load_mb"], "load+prune ms": ms(r["pruned_s"]),
            "load+prune MB": r["pruned_mb"], "txn ms": ms(r["txn_s"]),
            "load x": _fmt_ratio(r["load_s_vs_delta_rs"]),
            "MB x": _fmt_ratio(r["load_mb_vs_delta_rs"]),
            "prune x": _fmt_ratio(r["pruned_s_vs_delta_rs"]),
            "prune MB x": _fmt_ratio(r["pruned_mb_vs_delta_rs"]),
            "txn x": _fmt_ratio(r["txn_s_vs_delta_rs"])}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from .common import add_common_args, parse_with_quick

    p = argparse.ArgumentParser(prog="python -m benchmarks.reads",
                                description=__doc__.split("\n\n")[0])
    add_common_args(p, "results/reads")
    p.add_argument("--rows", default="1000000,5000000", help="table sizes for the read shapes")
    p.add_argument("--files", type=int, default=20, help="data files per table")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--scale", default="1000,10000,100000,300000,1000000",
                   help="file counts for snapshot loading")
    p.add_argument("--scale-reps", type=int, default=3, help="cold loads per system and file count")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark engine and plain Spark")
    p.add_argument("--no-scale", action="store_true", help="skip snapshot scaling")
    p.add_argument("--commits", type=int, default=1000,
                   help="commits of the history table loaded cold (0: skip; checkpoints "
                        "every 10 commits)")
    p.add_argument("--loads", type=int, default=7,
                   help="cold loads of the history table per system (median)")
    args = parse_with_quick(p, argv,
                            {"rows": "20000", "files": 4, "reps": 1, "scale": "1000,10000",
                             "scale_reps": 1, "no_spark": True, "commits": 25, "loads": 3})
    args.rows = [int(x) for x in str(args.rows).split(",") if x]
    args.scale = [int(x) for x in str(args.scale).split(",") if x]
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from .common import make_counted_env, print_table, progress, run_info, write_json

    args = parse_args(argv)
    ce = make_counted_env(args)
    _proxy_out_of_process(ce, args)
    env = ce.env
    spark = None
    if not args.no_spark and env.kind == "local":
        from lakevilla.demo.spark_session import local_session

        spark = local_session("lakevilla-bench-reads", cores=2,
                              extra={"spark.sql.shuffle.partitions": "2",
                                     "spark.driver.memory": "3g"})
    try:
        t0 = time.time()
        n_sys = 2 + (env.kind == "local") + 2 * (spark is not None and env.kind == "local")
        bar = progress(len(args.rows) * (args.reps + 1) * len(SHAPES) * n_sys
                       + (0 if args.no_scale else 2 * args.scale_reps * len(args.scale)), "reads")
        reads: list[dict[str, Any]] = []
        try:
            for rows in args.rows:
                bar.set_description(f"reads {rows:,} rows")
                reads += measure_reads(ce, args, rows, spark, bar)
            scale = [] if args.no_scale else measure_scale(ce, args, bar)
            history = measure_history(ce, args) if args.commits else None
        finally:
            bar.close()
        info = run_info(args, env)
        info.update({"rows": args.rows, "files": args.files, "reps": args.reps, "scale": args.scale,
                     "cpus": os.cpu_count(), "wall_s": time.time() - t0})
    finally:
        ce.close()
    text = print_table([_read_row(r) for r in reads], READ_COLUMNS,
                       title=f"Cold reads: store={env.kind}, latency={args.latency}, median "
                             f"of {args.reps} (ms); ratios to delta-rs / DuckDB / plain "
                             "Spark in the same run")
    if scale:
        text += "\n\n" + print_table([_scale_row(r) for r in scale], SCALE_COLUMNS,
                                     title="Snapshot scaling: cold, in a fresh process, median "
                                           f"of {args.scale_reps}; load = the snapshot object "
                                           "(lakevilla decodes the checkpoint lazily), load+prune "
                                           "= it plus the files a point lookup must read; MB = "
                                           "resident memory added; txn = one point update; x = "
                                           "lakevilla / delta-rs")
    if history:
        text += "\n\n" + print_table(
            [{"commits": history["commits"], "last checkpoint": history["last_checkpoint"],
              "lakevilla ms": history["lakevilla_unslowed_s"] * 1000,
              f"lakevilla ms ({args.latency})": history["lakevilla_s"] * 1000,
              "delta-rs ms": history["delta_rs_s"] * 1000,
              "ratio": history["ratio_lakevilla_over_delta_rs"],
              "lakevilla requests": " ".join(
                  f"{k}={v}" for k, v in sorted(history["lakevilla_requests"].items()) if v)}],
            ["commits", "last checkpoint", "lakevilla ms",
             *([f"lakevilla ms ({args.latency})"] if args.latency != "none"
               else []), "delta-rs ms", "ratio", "lakevilla requests"],
            title=f"Cold snapshot load of a table with a history (median of {args.loads}, in this "
                  f"process); ratio = lakevilla / delta-rs under equal conditions "
                  f"({'both slowed' if history['delta_rs_pays_latency'] else 'both unslowed'})")
    payload = {"benchmark": "reads", "info": info, "reads": reads, "scale": scale,
               "history": history, "table": text}
    path = write_json(args.out, "reads", payload)
    payload["files"] = [str(path), plot_reads(args.out, reads, scale)]
    print("wrote " + ", ".join(payload["files"]))
    return payload


if __name__ == "__main__":
    main()
