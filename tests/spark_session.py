"""One small local SparkSession for the whole test run, and helpers to compare what
Spark, the embedded engine and delta-rs read."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa


def start_local_spark(app_name: str = "lakevilla-tests"):
    """The shared test session: lakevilla's local-session helper, tuned for small data."""
    from lakevilla.engines.spark import local_session

    return local_session(app_name, cores=2, extra={"spark.sql.shuffle.partitions": "2",
                                                    "spark.default.parallelism": "2",
                                                    "spark.driver.memory": "1g"})


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
