"""lakevilla's Spark statements at cluster scale: what they cost over plain Spark, and what
they cost the driver.

    python -m benchmarks.spark_statements [--quick] [--parts time,cap] [--sizes 1,4,16]
                                          [--kinds plain,dv] [--cap-rows N] [--out DIR]

Runs on a cluster of this machine (``local-cluster``: a driver and two executor JVMs; or the
active session when there is one, as in the test suite).

``time``: for each table size (millions of rows) and table kind (plain; deletion vectors),
each statement in its own R transaction beside the same work written in plain Spark (read
Parquet, filter or join, write Parquet), one after the other in one run: INSERT against a
Parquet write of the same rows, UPDATE and DELETE against a read-filter-write of the table,
MERGE (an upsert of a tenth of the table's rows, half of them new) against a read, anti-join,
union and write. With the driver JVM's peak heap (classic sessions) and this process's peak
RSS while the size ran: they must stay flat as the table grows, since rows never come to the
driver.

``cap``: the fourteen statements of the driver-cap check (``STEPS``) on tables of
``--cap-rows`` rows with ``spark.driver.maxResultSize`` capped (1 MiB): a statement that
brings rows to the driver fails there. Each step's outcome, then delta-rs reads every table
and must agree with lakevilla row count for row count.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

import lakevilla as lv
from benchmarks.common import plot, print_table, write_json

NAME = "spark_statements"
MILLION = 1_000_000
PLAIN = pa.schema([("id", pa.int64()), ("grp", pa.int64()), ("v", pa.float64()),
                   ("s", pa.string())])
DV_CDF = {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"}
DV = {"delta.enableDeletionVectors": "true"}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="0.1 million rows, deletion-vector tables for 'time': a minute")
    p.add_argument("--parts", default="time,cap", help="time, cap or both")
    p.add_argument("--sizes", default=None,
                   help="table sizes for 'time', millions of rows (default 1,4,16)")
    p.add_argument("--kinds", default="plain,dv", help="table kinds for 'time': plain, dv")
    p.add_argument("--cap-rows", type=int, default=None,
                   help="rows per table for 'cap' (default 16,000,000; quick 200,000)")
    p.add_argument("--cap", default="1m", help="spark.driver.maxResultSize of an owned session")
    p.add_argument("--executor-memory", type=int, default=2048, help="MB per executor JVM")
    p.add_argument("--out", default=f"results/{NAME}", help="results folder (JSON + PNG)")
    args = p.parse_args(argv)
    if args.sizes is None:
        args.sizes = "0.1" if args.quick else "1,4,16"
    args.sizes = [float(s) for s in str(args.sizes).split(",") if s.strip()]
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    args.parts = [k.strip() for k in args.parts.split(",") if k.strip()]
    if args.quick and args.kinds == ["plain", "dv"]:
        args.kinds = ["dv"]
    args.cap_rows = args.cap_rows or (100_000 if args.quick else 16 * MILLION)
    return args


def session(args: argparse.Namespace) -> tuple[Any, bool]:
    """The active session if there is one (tests share theirs), else a cluster we own."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    from lakevilla.demo.spark_session import cluster_session

    return cluster_session("lakevilla-bench-spark-statements", executors=2, cores=1,
                           memory_mb=args.executor_memory, extra={
                               "spark.driver.maxResultSize": args.cap,
                               "spark.driver.memory": "1g",
                               "spark.sql.shuffle.partitions": "8"}), True


def rows(spark: Any, lo: int, hi: int, with_id: bool = True) -> Any:
    """Rows ``lo`` <= id < ``hi``, computed by the executors (never by this process)."""
    cols = ["id % 1000 AS grp", "id * 0.5 AS v", "concat('r', CAST(id AS STRING)) AS s"]
    df = spark.range(lo, hi)
    return df.selectExpr(*(["id", *cols] if with_id else ["id AS k", *cols[1:]]))


# -- driver memory ---------------------------------------------------------------------------

class DriverMemory:
    """Peak RSS of this process (sampled) and peak heap of the driver JVM (its memory pools'
    peaks, reset at ``start``; classic sessions only: Connect has no JVM here)."""

    def __init__(self, spark: Any) -> None:
        self.jvm = getattr(getattr(spark, "sparkContext", None), "_jvm", None) \
            if type(spark).__module__.startswith("pyspark.sql.session") else None
        self.rss_peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def rss() -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def _pools(self) -> list:
        mf = self.jvm.java.lang.management.ManagementFactory
        return [p for p in mf.getMemoryPoolMXBeans() if str(p.getType()) == "Heap memory"]

    def start(self) -> None:
        self.rss_peak = self.rss()
        if self.jvm is not None:
            self.jvm.java.lang.System.gc()
            for p in self._pools():
                p.resetPeakUsage()
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.rss_peak = max(self.rss_peak, self.rss())

    def stop(self) -> dict[str, float | None]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        heap = (sum(p.getPeakUsage().getUsed() for p in self._pools()) / MILLION
                if self.jvm is not None else None)
        return {"driver_heap_peak_mb": heap, "python_rss_peak_mb": self.rss_peak / MILLION}


# -- the driver-cap check: fourteen statements -----------------------------------------------

@dataclass(frozen=True)
class Step:
    name: str
    table: str
    run: Callable[[lv.Lake, Any, int], Any]


def _merge_plain(lake: lv.Lake, spark: Any, n: int, table: str) -> Any:
    with lake.transaction("R") as txn:
        return (txn.merge(table, rows(spark, n // 2, n + n // 2), on="id")
                .when_matched_update({"v": "source.v + 1"}).when_not_matched_insert_all()
                .execute())


def _txn(table: str, body: Callable[[Any, Any, int], Any]) -> Callable[[lv.Lake, Any, int], Any]:
    def run(lake: lv.Lake, spark: Any, n: int) -> Any:
        with lake.transaction("R") as txn:
            return body(txn, spark, n)
    return run


def _tables_steps(table: str) -> list[Step]:
    """The statements every kind of table gets."""
    return [
        Step("insert", table, _txn(table, lambda t, s, n: t.insert(table, rows(s, 0, n)))),
        Step("delete", table, _txn(table, lambda t, s, n: t.delete(table, where="id % 7 = 0"))),
        Step("update", table, _txn(table, lambda t, s, n: t.update(
            table, {"v": "v + 1"}, where="id % 10 = 0"))),
        Step("merge", table, lambda lake, s, n: _merge_plain(lake, s, n, table)),
        Step("overwrite(where)", table, _txn(table, lambda t, s, n: t.overwrite(
            table, rows(s, 0, n // 10), where=f"id < {n // 10}"))),
    ]


def _identity_insert(txn: Any, spark: Any, n: int) -> Any:
    return txn.insert("ident", rows(spark, 0, n, with_id=False))


def _identity_merge(lake: lv.Lake, spark: Any, n: int) -> Any:
    with lake.transaction("R") as txn:
        return (txn.merge("ident", rows(spark, n // 2, n + n // 2, with_id=False), on="k")
                .when_matched_update({"v": "source.v"}).when_not_matched_insert_all().execute())


def _changes(lake: lv.Lake, spark: Any, n: int) -> Any:
    return lake.changes("dvcdf")["dvcdf"].count()  # counted by the executors


STEPS: list[Step] = [
    *_tables_steps("plain"),
    Step("optimize", "plain", _txn("plain", lambda t, s, n: t.optimize("plain"))),
    *_tables_steps("dvcdf"),
    Step("lake.changes", "dvcdf", _changes),
    Step("insert", "ident", _txn("ident", _identity_insert)),
    Step("merge", "ident", _identity_merge),
]
KIND_OF = {"plain": "plain", "dvcdf": "DV + CDF", "ident": "identity"}


def create_cap_tables(lake: lv.Lake) -> None:
    lake.create_table("plain", PLAIN)
    lake.create_table("dvcdf", PLAIN, properties=DV_CDF)
    ident = pa.schema([pa.field("id", pa.int64(), nullable=False,
                                metadata=lv.identity(start=1, step=1)),
                       ("k", pa.int64()), ("v", pa.float64()), ("s", pa.string())])
    lake.create_table("ident", ident)


def delta_rs_counts(uri: str) -> dict[str, Any]:
    """delta-rs' own count of a table's live rows, of its distinct ids and the sum of ``v``
    (its SQL reader applies deletion vectors)."""
    from deltalake import DeltaTable, QueryBuilder

    got = QueryBuilder().register("t", DeltaTable(uri)).execute(
        "SELECT count(*) AS n, count(DISTINCT id) AS d, sum(v) AS s FROM t").read_all()
    row = pa.table(got).to_pylist()[0]
    return {"rows": int(row["n"]), "distinct": int(row["d"]), "sum_v": float(row["s"] or 0)}


def run_cap(spark: Any, root: str, n: int) -> dict[str, Any]:
    """The fourteen steps, each tried whatever the others did; then delta-rs' counts."""
    out = []
    with lv.Lake(root, engine=lv.SparkEngine(spark)) as lake:
        create_cap_tables(lake)
        for step in STEPS:
            t = time.perf_counter()
            try:
                step.run(lake, spark, n)
                ok, error = True, ""
            except Exception as e:  # noqa: BLE001 - the table reports what failed and why
                ok = False
                error = next((ln.strip() for ln in str(e).splitlines()
                              if "maxResultSize" in ln), str(e).splitlines()[0][:160])
            out.append({"table": KIND_OF[step.table], "statement": step.name, "ok": ok,
                        "seconds": time.perf_counter() - t, "error": error})
        lake.flush()
        from pyspark.sql import functions as F

        agree, same = {}, True
        for table in KIND_OF:  # counted by the executors, and by delta-rs
            ours = lake.read(table).agg(F.count(F.lit(1)).alias("n"),
                                        F.sum("v").alias("s")).collect()[0]
            theirs = delta_rs_counts(f"{root}/{table}")
            agree[table] = {"lakevilla": int(ours["n"]), "delta_rs": theirs["rows"],
                            "distinct": theirs["distinct"], "sum_v": theirs["sum_v"]}
            same &= (int(ours["n"]) == theirs["rows"]
                     and abs(float(ours["s"] or 0) - theirs["sum_v"]) < 1e-6 * max(
                         1.0, abs(theirs["sum_v"])))
    return {"rows": n, "steps": out, "passed": sum(s["ok"] for s in out),
            "counts": agree, "agree": same}


# -- time against plain Spark ----------------------------------------------------------------

def _timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run_size(spark: Any, work: str, n: int, kind: str) -> dict[str, Any]:
    """One table size and kind: each statement by lakevilla, then by plain Spark."""
    tag = f"{kind}-{n}-{time.monotonic_ns()}"
    root = f"file://{work}/lake-{tag}"
    plain = f"file://{work}/plain-{tag}"
    mem = DriverMemory(spark)
    mem.start()
    src = rows(spark, 0, n)
    up = rows(spark, n - n // 20, n + n // 20)  # a tenth of the table: half new keys
    times: dict[str, dict[str, float]] = {}
    with lv.Lake(root, engine=lv.SparkEngine(spark)) as lake:
        lake.create_table("t", PLAIN, properties=DV if kind == "dv" else None)

        def lv_txn(body: Callable[[Any], Any]) -> Callable[[], Any]:
            def go() -> Any:
                with lake.transaction("R") as txn:
                    return body(txn)
            return go

        def plain_rewrite(version: int, transform: Callable[[Any], Any]) -> Callable[[], Any]:
            return lambda: transform(spark.read.parquet(f"{plain}/v{version}")).write.parquet(
                f"{plain}/v{version + 1}")

        times["insert"] = {"lakevilla": _timed(lv_txn(lambda t: t.insert("t", src))),
                           "plain": _timed(lambda: src.write.parquet(f"{plain}/v0"))}
        from pyspark.sql import functions as F

        times["update"] = {
            "lakevilla": _timed(lv_txn(lambda t: t.update("t", {"v": "v + 1"},
                                                         where="id % 10 = 0"))),
            "plain": _timed(plain_rewrite(0, lambda d: d.withColumn(
                "v", F.when(F.col("id") % 10 == 0, F.col("v") + 1).otherwise(F.col("v")))))}
        times["delete"] = {
            "lakevilla": _timed(lv_txn(lambda t: t.delete("t", where="id % 7 = 0"))),
            "plain": _timed(plain_rewrite(1, lambda d: d.filter(F.col("id") % 7 != 0)))}
        times["merge"] = {
            "lakevilla": _timed(lv_txn(lambda t: t.merge("t", up, on="id")
                                       .when_matched_update({"v": "source.v"})
                                       .when_not_matched_insert_all().execute())),
            "plain": _timed(plain_rewrite(2, lambda d: d.join(up, "id", "left_anti")
                                          .unionByName(up)))}
        lake.flush()
    memory = mem.stop()
    return {"rows": n, "kind": kind, "times": times, **memory,
            "ratios": {k: v["lakevilla"] / v["plain"] for k, v in times.items()}}


def run_time(spark: Any, work: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each size and kind after one untimed round of every statement on a small table of the
    kind (the JVMs' JIT, the Python workers, Spark's caches), so the first size pays no
    start-up the others do not."""
    out = []
    for kind in args.kinds:
        run_size(spark, work, min(int(min(args.sizes) * MILLION), 50_000), kind)  # warm-up
    for kind in args.kinds:
        for size in args.sizes:
            n = int(size * MILLION)
            out.append(run_size(spark, work, n, kind))
            print_table([{"statement": k, "lakevilla s": v["lakevilla"], "plain s": v["plain"],
                          "ratio": out[-1]["ratios"][k]} for k, v in out[-1]["times"].items()],
                        ["statement", "lakevilla s", "plain s", "ratio"],
                        title=f"{kind} table, {n:,} rows (driver heap peak "
                              f"{out[-1]['driver_heap_peak_mb']} MB, Python RSS peak "
                              f"{out[-1]['python_rss_peak_mb']:.0f} MB)")
    return out


def report(result: dict[str, Any], out: str) -> None:
    if result.get("cap"):
        cap = result["cap"]
        print_table(cap["steps"], ["table", "statement", "ok", "seconds", "error"],
                    title=f"driver-cap check: {cap['rows']:,} rows per table, "
                          f"maxResultSize {result['max_result_size']} "
                          f"({cap['passed']} of {len(cap['steps'])} passed)")
        print_table([{"table": t, **c} for t, c in cap["counts"].items()],
                    ["table", "lakevilla", "delta_rs", "distinct", "sum_v"],
                    title=f"rows read back (delta-rs agrees, rows and sum of v: "
                          f"{cap['agree']})")
    sizes = result.get("sizes") or []
    if sizes:
        print_table([{"kind": s["kind"], "rows": s["rows"], **{k: v for k, v in
                                                            s["ratios"].items()},
                      "heap MB": s["driver_heap_peak_mb"], "RSS MB": s["python_rss_peak_mb"]}
                     for s in sizes],
                    ["kind", "rows", "insert", "update", "delete", "merge", "heap MB",
                     "RSS MB"], title="lakevilla / plain Spark time (lower is better), and the "
                                      "driver's peak memory")
    write_json(out, NAME, result)
    if not sizes:
        return

    def draw(fig: Any) -> None:
        ax1, ax2 = fig.subplots(1, 2)
        for kind in sorted({s["kind"] for s in sizes}):
            mine = [s for s in sizes if s["kind"] == kind]
            for st in ("insert", "update", "delete", "merge"):
                ax1.plot([s["rows"] / MILLION for s in mine], [s["ratios"][st] for s in mine],
                         marker="o", label=f"{kind} {st}")
            ax2.plot([s["rows"] / MILLION for s in mine],
                     [s["python_rss_peak_mb"] for s in mine], marker="o",
                     label=f"{kind}: Python RSS")
            if all(s["driver_heap_peak_mb"] is not None for s in mine):
                ax2.plot([s["rows"] / MILLION for s in mine],
                         [s["driver_heap_peak_mb"] for s in mine], marker="s",
                         label=f"{kind}: driver heap")
        ax1.axhline(1.0, color="gray", lw=0.8)
        ax1.set_xlabel("table rows (millions)")
        ax1.set_ylabel("lakevilla / plain Spark time")
        ax1.legend(fontsize=6)
        ax2.set_xlabel("table rows (millions)")
        ax2.set_ylabel("peak MB")
        ax2.set_ylim(bottom=0)
        ax2.legend(fontsize=6)

    plot(out, NAME, draw)
    print(f"wrote {Path(out) / (NAME + '.json')} and {Path(out) / (NAME + '.png')}")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    spark, owned = session(args)
    work = tempfile.mkdtemp(prefix="lakevilla-spark-statements-")
    result: dict[str, Any] = {"master": spark.conf.get("spark.master", ""),
                              "max_result_size": spark.conf.get("spark.driver.maxResultSize",
                                                                "1g"),
                              "spark": spark.version, "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
                              "cores": os.cpu_count()}
    try:
        if "cap" in args.parts:
            result["cap"] = run_cap(spark, f"file://{work}/cap", args.cap_rows)
        if "time" in args.parts:
            result["sizes"] = run_time(spark, work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if owned:
            spark.stop()
    report(result, args.out)
    return result


if __name__ == "__main__":
    main()
