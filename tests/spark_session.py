"""One small local SparkSession for the whole test run, and helpers to compare what
Spark, the embedded engine and delta-rs read."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa


def start_local_spark(app_name: str = "lakevilla-tests"):
    """A local[2] session tuned for small data and quiet logs."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName(app_name)
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.default.parallelism", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", "1g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_table(df, schema: pa.Schema) -> pa.Table:
    """A Spark DataFrame as arrow in the table's exact types (Spark hands timestamps
    back in the session zone and without nullability)."""
    t = df.toArrow()
    return pa.table([t.column(f.name).cast(f.type) for f in schema], schema=pa.schema(
        [pa.field(f.name, f.type) for f in schema]))


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
