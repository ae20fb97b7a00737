"""The PySpark act of ``make demo``: an ingest job appends to two tables in one
transaction while another Spark job reads a consistent snapshot of both."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa

import lakevilla as lv

ORDERS = pa.schema([("order_id", pa.int64()), ("day", pa.string()), ("lines", pa.int64()),
                    ("total", pa.int64())])
LINES = pa.schema([("order_id", pa.int64()), ("line", pa.int64()), ("day", pa.string()),
                   ("amount", pa.int64())])
BATCHES = 6
ORDERS_PER_BATCH = 200


def act_spark(base: Path) -> bool:
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark\..*")
    from pyspark.sql import functions as F

    from .spark_session import local_session
    from .voice import say, thread

    say("\n== PySpark pipeline: ingest into two tables per transaction, a reader job alongside")
    t0 = time.time()
    spark = local_session("lakevilla-demo", cores="*")
    say(f"   Spark {spark.version} local[*] up in {time.time() - t0:.1f}s")
    root = f"file://{base / 'act-spark'}"
    lake = lv.Lake(root, engine=lv.SparkEngine(spark))
    lake.create_table("orders", ORDERS, partition_by=["day"])
    lake.create_table("order_lines", LINES, partition_by=["day"])
    done = threading.Event()
    checks = {"consistent": 0, "inconsistent": 0, "attempts": 0}

    def ingest() -> None:
        for b in range(BATCHES):
            day = f"2026-11-{b + 1:02d}"
            orders = (spark.range(b * ORDERS_PER_BATCH, (b + 1) * ORDERS_PER_BATCH)
                      .withColumnRenamed("id", "order_id").withColumn("day", F.lit(day))
                      .withColumn("lines", (F.col("order_id") % 4 + 1).cast("long")))
            lines = (orders
                     .withColumn("line", F.explode(
                         F.sequence(F.lit(1), F.col("lines")).cast("array<long>")))
                     .withColumn("amount", (F.col("order_id") * 7 + F.col("line") * 3) % 100)
                     .select("order_id", "line", "day", "amount"))
            totals = lines.groupBy("order_id").agg(F.sum("amount").alias("total"))
            orders = orders.join(totals, "order_id").select("order_id", "day", "lines", "total")
            with lake.transaction("R,CT,I") as txn:  # both tables or neither
                txn.insert("orders", orders)
                txn.insert("order_lines", lines)
        done.set()

    def both(txn: lv.Transaction):
        checks["attempts"] += 1
        o = txn.read("orders").agg(F.sum("lines").alias("lines"),
                                   F.sum("total").alias("total")).first()
        ln = txn.read("order_lines").agg(F.count("*").alias("lines"),
                                         F.sum("amount").alias("total")).first()
        return o, ln

    def reader() -> None:
        while not done.is_set() or (checks["consistent"] == 0 and not errors):
            # serializable: if an ingest overtakes the reads, the snapshot is refused and re-read
            o, ln = lake.run(both, features="I", retries=50)
            same = (o["lines"] or 0) == ln["lines"] and (o["total"] or 0) == (ln["total"] or 0)
            checks["consistent" if same else "inconsistent"] += 1

    t0 = time.time()
    errors: list[str] = []

    def ingest_then_stop() -> None:
        try:
            ingest()
        finally:
            done.set()  # the reader stops even if the ingest failed

    threads = [thread(ingest_then_stop, errors), thread(reader, errors)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        say(f"   a job stopped: {e}")
    final = lake.read("orders").count(), lake.read("order_lines").count()
    say(f"   ingested {BATCHES} batches ({final[0]} orders, {final[1]} lines) "
        f"in {time.time() - t0:.1f}s")
    say(f"   reader job: {checks['consistent']} snapshots with matching order and line totals, "
        f"{checks['inconsistent']} mismatched ({checks['attempts'] - checks['consistent']} "
        "re-reads after an ingest overtook the reads)")
    from deltalake import DeltaTable

    dr = pa.table(DeltaTable(f"{root}/orders").to_pyarrow_table()).num_rows
    say(f"   delta-rs reads {dr} orders")
    lake.close()  # its background work ends before the session it runs on
    spark.stop()
    return (not errors and checks["inconsistent"] == 0
            and final[0] == dr == BATCHES * ORDERS_PER_BATCH)
