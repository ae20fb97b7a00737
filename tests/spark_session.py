"""One small local Spark for the whole test run (a classic session whose driver also
serves Spark Connect on 127.0.0.1, so Connect tests need no second JVM), and helpers to
compare what Spark, the embedded engine and delta-rs read."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pyarrow as pa
import pytest

CONNECT_FLAG = "SPARK_CONNECT_MODE_ENABLED"  # pyspark's process-wide switch to Connect columns

# The test JVMs live for minutes and run small jobs: the C1 compiler alone and one GC thread.
# On the 2-core machine the suite is CPU-bound, and a driver's C2 compilations and parallel GC
# took a third of the Spark tests' CPU (test_spark_merge.py with test_spark_statements.py:
# 134-135 CPU s without these options, 83-86 with them, the JVM included).
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# what every Spark test's driver may receive from a job: tables of millions of rows do not fit
MAX_RESULT_SIZE = "1m"


# Every Spark test runs on both kinds of session unless marked: a test of what lakevilla's
# transactions do around Spark (which feature set commits, aborts leave nothing, serial
# order beside the embedded engine, reads at a cut) exercises no pyspark call the others do not
# already make on Connect, so it runs on a classic session only.
CLASSIC_ONLY = pytest.mark.parametrize("spark", ["classic"], indirect=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_local_spark(app_name: str = "lakevilla-tests"):
    """The shared test session: a cluster on this machine (a driver and two executor JVMs, so
    closures travel to other processes and rows stay where the executors put them), with the
    driver's results capped at 1 MiB: a statement that brought rows to the driver fails. Tuned
    for small data, with the Spark Connect server plugin on a free loopback port."""
    from lakevilla.demo.spark_session import cluster_session

    os.environ.pop(CONNECT_FLAG, None)
    return cluster_session(app_name, executors=2, cores=1, memory_mb=1024, extra={
        "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
        "spark.driver.memory": "1g", "spark.driver.extraJavaOptions": JVM_OPTIONS,
        "spark.executor.extraJavaOptions": JVM_OPTIONS,
        "spark.driver.maxResultSize": MAX_RESULT_SIZE,
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(_free_port())})


def connect_to(classic):
    """A Spark Connect client session served by ``classic``'s driver: it talks gRPC only, has
    no JVM of its own, exactly as against a remote cluster."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    port = classic.conf.get("spark.connect.grpc.binding.port")
    session = ConnectSession.builder.remote(f"sc://127.0.0.1:{port}").create()
    session.conf.set("spark.sql.session.timeZone", "UTC")
    return session


def spark_table(df, schema: pa.Schema) -> pa.Table:
    """A Spark DataFrame as arrow in the table's exact types (Spark hands timestamps
    back in the session zone)."""
    t = df.toArrow()
    return pa.table({f.name: t.column(f.name).cast(f.type) for f in schema})


def sorted_rows(table: pa.Table, key: str = "id") -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r[key])


def files_on_disk(lake_dir: Path, tables: list[str]) -> set[str]:
    """Every file under the tables' folders except their logs, as store keys."""
    out = set()
    for t in tables:
        root = lake_dir / t
        for p in root.rglob("*"):
            rel = p.relative_to(lake_dir).as_posix()
            if p.is_file() and "/_delta_log/" not in f"/{rel}":
                out.add(rel)
    return out
