"""What lakevilla's Spark path costs over a plain Spark Parquet write.

    python -m benchmarks.spark_insert [--quick] [--rows N] [--reps R] [--out results/spark_insert]

One SparkSession times ``txn.insert(table, df)`` in an R transaction against
``df.write.parquet(path)`` of the same cached DataFrame (alternating, after one
untimed warm-up of each), and counts the store requests of one insert transaction:
its fixed overhead, since Spark writes the data files outside the store.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

import lakevilla as lv
from benchmarks.common import plot, print_table, progress, write_json
from lakevilla.store import CountingStore, open_store

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int32()), ("x", pa.float64()), ("s", pa.string()),
                    ("at", pa.timestamp("us", tz="UTC"))])
NAME = "spark_insert"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="20,000 rows, 2 repetitions: seconds")
    p.add_argument("--rows", type=int, default=None,
                   help="rows per insert (default 1,000,000; quick 20,000)")
    p.add_argument("--reps", type=int, default=None,
                   help="timed repetitions of each (default 3; quick 2)")
    p.add_argument("--master", default="local[*]", help="Spark master when no session is active")
    p.add_argument("--out", default=f"results/{NAME}", help="results folder (JSON + PNG)")
    args = p.parse_args(argv)
    args.rows = args.rows or (20_000 if args.quick else 1_000_000)
    args.reps = args.reps or (2 if args.quick else 3)
    return args


def spark_session(master: str) -> tuple[Any, bool]:
    """The active session if there is one (tests share theirs), else a new one we own."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (SparkSession.builder.master(master).appName("lakevilla-spark-insert")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark, True


def make_frame(spark: Any, rows: int) -> Any:
    """The rows to insert, cached so both paths time writing, not generating."""
    df = spark.range(rows).selectExpr(
        "id", "CAST(id % 1000 AS INT) AS k", "id * 0.5 AS x",
        "concat('name-', CAST(id AS STRING)) AS s",
        "timestamp_micros(1700000000000000 + id * 1000) AS at")
    df = df.cache()
    df.count()
    return df


def time_lakevilla(lake: lv.Lake, df: Any) -> float:
    t = time.perf_counter()
    with lake.transaction(features="R") as txn:
        txn.insert("bench", df)
    return time.perf_counter() - t


def time_plain(df: Any, path: str) -> float:
    t = time.perf_counter()
    df.write.parquet(path)
    return time.perf_counter() - t


def count_requests(spark: Any, root: str, df: Any) -> dict[str, int]:
    """Store requests of one insert transaction into an existing table, by kind."""
    store = CountingStore(open_store(root))
    with lv.Lake(root, store=store, engine=lv.SparkEngine(spark)) as lake:
        lake.create_table("counted", SCHEMA)
        lake.flush()
        store.reset()
        with lake.transaction(features="R") as txn:
            txn.insert("counted", df)
        lake.flush()
        return dict(sorted(store.snapshot().items()))


def run(args: argparse.Namespace, spark: Any) -> dict[str, Any]:
    work = tempfile.mkdtemp(prefix="lakevilla-spark-insert-")
    root = "file://" + work
    try:
        df = make_frame(spark, args.rows)
        with lv.Lake(root, engine=lv.SparkEngine(spark)) as lake:
            lake.create_table("bench", SCHEMA)
            bar = progress(2 * (args.reps + 1), "spark insert")
            try:
                time_lakevilla(lake, df)  # warm-up: JIT, codegen, file system caches
                time_plain(df, f"{root}/plain-warmup")
                bar.update(2)
                lv_times, plain_times = [], []
                for i in range(args.reps):
                    lv_times.append(time_lakevilla(lake, df))
                    plain_times.append(time_plain(df, f"{root}/plain-{i}"))
                    bar.update(2)
            finally:
                bar.close()
        requests = count_requests(spark, root, df)
        df.unpersist()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lv_rate = args.rows / statistics.median(lv_times)
    plain_rate = args.rows / statistics.median(plain_times)
    return {
        "rows": args.rows, "reps": args.reps, "master": spark.sparkContext.master,
        "spark": spark.version, "lakevilla_seconds": lv_times, "plain_seconds": plain_times,
        "lakevilla_rows_per_s": lv_rate, "plain_rows_per_s": plain_rate,
        "ratio": lv_rate / plain_rate,
        "requests": {"total": sum(requests.values()), "by_kind": requests},
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def report(result: dict[str, Any], out: str) -> None:
    rows = [
        {"path": "lakevilla txn.insert (R)",
         "median s": statistics.median(result["lakevilla_seconds"]),
         "rows/s": result["lakevilla_rows_per_s"]},
        {"path": "df.write.parquet", "median s": statistics.median(result["plain_seconds"]),
         "rows/s": result["plain_rows_per_s"]},
    ]
    print_table(rows, ["path", "median s", "rows/s"],
                title=f"Spark insert of {result['rows']:,} rows "
                      f"({result['master']}, {result['reps']} reps)")
    print(f"lakevilla / plain throughput: {result['ratio']:.2f}")
    req = result["requests"]
    print_table([{"kind": k, "requests": v} for k, v in req["by_kind"].items()] +
                [{"kind": "total", "requests": req["total"]}], ["kind", "requests"],
                title="store requests of one insert transaction (data files excluded: "
                      "Spark writes them)")
    write_json(out, NAME, result)

    def draw(fig) -> None:
        ax1, ax2 = fig.subplots(1, 2)
        ax1.bar(["lakevilla (R)", "plain parquet"],
                [result["lakevilla_rows_per_s"], result["plain_rows_per_s"]],
                color=["tab:blue", "tab:gray"])
        ax1.set_ylabel("rows / s")
        ax1.set_title(f"insert of {result['rows']:,} rows (ratio {result['ratio']:.2f})")
        kinds = list(req["by_kind"])
        ax2.bar(kinds, [req["by_kind"][k] for k in kinds], color="tab:orange")
        ax2.set_ylabel("requests")
        ax2.set_title("store requests per insert transaction")
        ax2.tick_params(axis="x", labelrotation=30)

    plot(out, NAME, draw)
    print(f"wrote {Path(out) / (NAME + '.json')} and {Path(out) / (NAME + '.png')}")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    spark, owned = spark_session(args.master)
    try:
        result = run(args, spark)
    finally:
        if owned:
            spark.stop()
    report(result, args.out)
    return result


if __name__ == "__main__":
    main()
