"""Spark statements at cluster scale, on the shared test cluster: a driver and two executor JVMs
of their own, the driver's results capped at 1 MiB (``tests/spark_session.py``), so that a
statement that brought rows to the driver fails.

Every statement on tables of a million rows (a row-sized collect is tens of MiB); an executor
killed in the middle of a MERGE; a conflict that redoes a Spark MERGE, and a crashed Spark
MERGE resumed by another client, both from the staged source; bad input refused before any
job, and a failed job that leaves nothing behind."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")

import lakevilla as lv  # noqa: E402
from lakevilla.markers.marker import RUNNING, marker_of  # noqa: E402
from lakevilla.names import sublog_prefix  # noqa: E402
from lakevilla.recovery import sublog as sublogs  # noqa: E402
from tests.spark_session import CLASSIC_ONLY, MAX_RESULT_SIZE, files_on_disk  # noqa: E402

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings(
                  "ignore:PySpark does not yet fully support pandas:FutureWarning")]

# enough that a collect of the rows trips the cap threefold (sequential ids compress: 200,000
# rows of two longs are 1.3 MiB as Arrow, 300,000 are 2.3 MiB collected); the million-row run
# is the benchmark's (benchmarks/README.md, spark_statements --parts cap)
ROWS = 300_000
S = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def _plain_rows(n: int) -> int:
    """What the driver-cap steps leave in the plain table (and the DV + CDF one): ``n`` rows,
    the multiples of 7 deleted, ids [n/2, 3n/2) merged in (the deleted ones come back, half
    are new), ids below n/10 overwritten by n/10 rows."""
    tenth, half = n // 10, n // 2
    sevens = (half - 1) // 7 - (tenth - 1) // 7
    return tenth + (half - tenth - sevens) + n


@CLASSIC_ONLY
def test_every_statement_brings_no_row_to_the_driver(spark, tmp_path):
    """The fourteen statements of the driver-cap check (``benchmarks.spark_statements``): insert,
    delete, update, merge (a DataFrame source of half a million rows), overwrite(where) and
    optimize on a plain table; the same and ``lake.changes`` on a table with deletion vectors
    and a change data feed; insert and merge into a table with an identity column. Each passes
    under the cap, and delta-rs reads every table as lakevilla does. (The cap cannot see a
    list of row indexes: collected results are compressed, and 143,000 of them pass it even
    at a million rows; deletion vectors are built on the executors by ``spark_tasks``.)"""
    from benchmarks.spark_statements import run_cap

    assert spark.conf.get("spark.driver.maxResultSize") == MAX_RESULT_SIZE
    with pytest.raises(Exception, match="maxResultSize"):  # the cap is real: a collect fails
        spark.range(ROWS).selectExpr("id", "id * 2 AS v").collect()
    got = run_cap(spark, f"file://{tmp_path}/lake", ROWS)
    assert [(s["table"], s["statement"]) for s in got["steps"] if not s["ok"]] == [], got["steps"]
    want = _plain_rows(ROWS)
    assert got["counts"] == {
        "plain": {"lakevilla": want, "delta_rs": want, "distinct": want,
                  "sum_v": got["counts"]["plain"]["sum_v"]},
        "dvcdf": {"lakevilla": want, "delta_rs": want, "distinct": want,
                  "sum_v": got["counts"]["plain"]["sum_v"]},  # the same statements: the same rows
        "ident": {"lakevilla": ROWS * 3 // 2, "delta_rs": ROWS * 3 // 2,
                  "distinct": ROWS * 3 // 2, "sum_v": got["counts"]["ident"]["sum_v"]}}
    assert got["agree"]


# -- an executor dies in the middle of a MERGE --------------------------------------------------

def _executor_pids(spark) -> list[int]:
    """The executor JVMs of this application (local-cluster runs them as processes here)."""
    app = spark.sparkContext.applicationId.encode()
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes()
        except OSError:
            continue
        if b"CoarseGrainedExecutorBackend" in cmd and app in cmd:
            out.append(int(p.name))
    return out


def _wait_for(what: str, cond, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@CLASSIC_ONLY
def test_an_executor_killed_in_the_middle_of_a_merge_changes_nothing_but_the_time(
        spark, tmp_path):
    """A merge runs; once its source is staged and a job of the merge is running, one executor
    JVM is killed (SIGKILL). Spark retries the lost tasks on a new executor, the transaction
    commits once (one new version), and delta-rs finds every row once: no duplicate, none
    missing, every merged value in place."""
    from benchmarks.spark_statements import rows

    n = ROWS
    uri = f"file://{tmp_path}/lake"
    lake = lv.Lake(uri, engine=lv.SparkEngine(spark))
    lake.create_table("t", S)
    with lake.transaction("R") as txn:
        txn.insert("t", rows(spark, 0, n).selectExpr("id", "id AS v"))
    before = lake.version("t")
    txn = lake.begin("R")
    outcome: dict = {}

    def merge() -> None:
        try:
            src = rows(spark, n // 2, n + n // 2).selectExpr("id", "-id AS v")
            txn.merge("t", src, on="id").when_matched_update({"v": "source.v"}) \
                .when_not_matched_insert_all().execute()
            outcome["result"] = txn.commit()
        except BaseException as e:  # noqa: BLE001 - reported below
            outcome["error"] = e

    worker = threading.Thread(target=merge)
    pids = _executor_pids(spark)
    assert len(pids) == 2
    worker.start()
    store = lake.store
    _wait_for("the staged source", lambda: any(
        "merge-source" in m.key for m in store.list(sublog_prefix(txn.id))) or not
        worker.is_alive())
    tracker = spark.sparkContext.statusTracker()
    _wait_for("a running job of the merge", lambda: tracker.getActiveJobsIds() or not
              worker.is_alive())
    assert worker.is_alive() and lake.version("t") == before  # in the middle: not committed
    os.kill(pids[0], signal.SIGKILL)
    worker.join(600)
    assert "error" not in outcome, outcome.get("error")
    _wait_for("a new executor", lambda: len(_executor_pids(spark)) == 2)
    assert lake.version("t") == before + 1  # committed once
    from tests.dv_tables import delta_rs_rows

    half = n // 2
    got = delta_rs_rows(f"{uri}/t", None, None, sql="SELECT count(*) AS n, "
                        "count(DISTINCT id) AS d, min(id) AS lo, max(id) AS hi, "
                        f"sum(CASE WHEN id >= {half} THEN v + id ELSE 0 END) AS merged, "
                        f"sum(CASE WHEN id < {half} THEN v - id ELSE 0 END) AS kept FROM t")
    assert got == [{"n": n + n // 2, "d": n + n // 2, "lo": 0, "hi": n + n // 2 - 1,
                    "merged": 0, "kept": 0}]


# -- redo and resume from the staged source ----------------------------------------------------

def _clock_later() -> float:
    return time.time() + 10_000


def _stamped(spark, ids: list[int]):
    """A source whose ``v`` differs each time Spark computes it (a nondeterministic UDF): a
    merge that computed it twice would write other values than it staged."""
    from pyspark.sql import functions as F

    stamp = F.udf(lambda i: time.time_ns() + i, "long").asNondeterministic()
    return spark.createDataFrame([(i,) for i in ids], "id long").withColumn("v", stamp("id"))


def _staged_values(store, keys: list[str]) -> dict[int, int]:
    t = pa.concat_tables([pq.read_table(pa.BufferReader(store.get(k).data)) for k in keys])
    return dict(zip(t.column("id").to_pylist(), t.column("v").to_pylist(), strict=True))


def test_a_conflict_redoes_a_spark_merge_from_its_staged_source(spark, tmp_path):
    """A Spark MERGE (R) stages its source before it runs; a concurrent commit inserts a key the
    merge found unmatched, so its commit redoes the merge on the newer snapshot: the new row is
    updated (not inserted twice), and every merged value is the one staged, although the source
    gives other values each time it is computed."""
    uri = f"file://{tmp_path}/lake"
    lake = lv.Lake(uri, engine=lv.SparkEngine(spark))
    lake.create_table("t", S)
    with lake.transaction("R") as txn:
        txn.insert("t", {"id": list(range(10)), "v": [0] * 10})
    txn = lake.begin("R")
    txn.merge("t", _stamped(spark, list(range(5, 15))), on="id") \
        .when_matched_update({"v": "source.v"}).when_not_matched_insert_all().execute()
    keys = [m.key for m in lake.store.list(sublog_prefix(txn.id)) if "merge-source" in m.key]
    assert keys  # staged before it ran, beside the sublogs
    values = _staged_values(lake.store, keys)
    with lv.Lake(uri) as other, other.transaction("R") as t2:  # the embedded engine, meanwhile
        t2.insert("t", {"id": [12], "v": [-1]})
    result = txn.commit()
    assert txn.stats["redos"] == 1 and result.versions["t"] == lake.version("t")
    from tests.dv_tables import delta_rs_rows

    got = {r["id"]: r["v"] for r in delta_rs_rows(f"{uri}/t", None, None)}
    assert sorted(got) == list(range(15))  # 12 once
    assert {i: got[i] for i in range(5, 15)} == values  # the staged values, redo included
    lake.flush()
    assert not [k for k in keys if k in {m.key for m in lake.store.list("")}]  # gone with sublogs


@CLASSIC_ONLY
def test_a_crashed_spark_merge_is_resumed_by_an_embedded_client_from_its_staged_files(
        spark, tmp_path):
    """A Spark MERGE's logical sublog entry names the Parquet files the executors staged; its
    client dies before commit; a client of the embedded engine resumes the transaction, redoes
    the merge against a commit that landed meanwhile, reading the staged files, and commits."""
    uri = f"file://{tmp_path}/lake"
    seed = lv.Lake(uri, marker_ttl=5.0)
    seed.create_table("t", S)
    with seed.transaction("") as t0:
        t0.insert("t", {"id": [0, 1, 2], "v": [0, 0, 0]})
    blocker = lv.Lake(uri, marker_ttl=5.0, commit_mode="in_place").begin("R")
    blocker.insert("t", {"id": [7], "v": [70]})  # a running marker below the merge's
    crashed = lv.Lake(uri, marker_ttl=5.0, commit_mode="in_place", engine=lv.SparkEngine(spark))
    txn = crashed.begin("R")
    txn.merge("t", _stamped(spark, [7, 1]), on="id") \
        .when_matched_update({"v": "target.v + source.v"}).when_not_matched_insert_all().execute()
    entries = sublogs.read_all(crashed.store, txn.id)
    assert [e.kind for e in entries] == ["logical"]
    spec = entries[0].statement["merge"]
    files = spec.get("source_files") or [spec["source_key"]]
    values = _staged_values(crashed.store, files)
    crashed._client.heartbeats.forget(txn)  # the client dies: never committed nor aborted
    crashed.close()
    blocker.commit()  # id 7 exists now: the merge's "no match" for 7 is stale
    resumer = lv.Lake(uri, marker_ttl=5.0, clock=_clock_later)
    resumed = resumer.resume(txn.id)
    resumed.commit()
    assert resumed.stats["redos"] == 1
    got = {r["id"]: r["v"] for r in seed.read("t").to_pylist()}
    assert got == {0: 0, 1: values[1], 2: 0, 7: 70 + values[7]}
    log = lv.Lake(uri)._client.log("t")
    assert not [v for v, c in log.commits_between(-1, log.latest_version())
                if (m := marker_of(c)) and m.state == RUNNING]
    resumer.flush()
    assert not set(files) & {m.key for m in seed.store.list("")}  # deleted with the sublogs


# -- bad input and failed jobs -------------------------------------------------------------------

@CLASSIC_ONLY
def test_a_source_of_the_wrong_schema_is_refused_before_any_job_runs(spark, tmp_path):
    lake = lv.Lake(f"file://{tmp_path}/lake", engine=lv.SparkEngine(spark))
    lake.create_table("t", S)
    with lake.transaction("R") as txn:
        txn.insert("t", {"id": [1], "v": [1]})
    sc = spark.sparkContext
    cases = [("id string, v long", "insert_all", lv.SchemaMismatchError),  # text into a number
             ("id long, w long", "insert_all", lv.SchemaMismatchError),  # no column v
             ("id long, v long", "bad_value", lv.InvalidExpressionError)]  # no column source.x
    for i, (ddl, clause, error) in enumerate(cases):
        src = spark.createDataFrame([], ddl)
        group = f"lv-schema-{i}"
        sc.setJobGroup(group, "a merge that must not run")
        try:
            with pytest.raises(error), lake.transaction("R") as txn:
                b = txn.merge("t", src, on="id")
                (b.when_not_matched_insert_all() if clause == "insert_all"
                 else b.when_matched_update({"v": "source.x"})).execute()
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        assert list(sc.statusTracker().getJobIdsForGroup(group)) == []


def test_a_merge_whose_job_fails_leaves_no_file_and_commits_nothing(spark, tmp_path):
    """The merge's write job fails on the executors (a text that is not a number, cast under
    ANSI): the statement is refused with a lakevilla error, the transaction aborts, and every
    file it wrote (staged source, data files) is gone."""
    lake_dir = tmp_path / "lake"
    lake = lv.Lake(f"file://{lake_dir}", engine=lv.SparkEngine(spark))
    lake.create_table("t", S)
    with lake.transaction("R") as txn:
        txn.insert("t", {"id": list(range(5)), "v": [0] * 5})
    lake.flush()
    before = files_on_disk(lake_dir, ["t"])
    version = lake.version("t")
    src = spark.createDataFrame([(1, "7"), (2, "x")], "id long, s string")
    with pytest.raises(lv.LakeVillaError), lake.transaction("R") as txn:
        txn.merge("t", src, on="id").when_matched_update(
            {"v": "CAST(source.s AS BIGINT)"}).execute()
    lake.flush()
    assert lake.version("t") == version
    assert files_on_disk(lake_dir, ["t"]) == before
    assert not [k for k in (m.key for m in lake.store.list("_lakevilla/txns/"))
                if "merge-source" in k]


@CLASSIC_ONLY
def test_files_spark_wrote_but_could_not_describe_are_deleted(spark, tmp_path):
    """Spark wrote the files; reading their footers fails (the store errs): the statement fails
    with a lakevilla error and the files go, not left for the sweep."""
    from lakevilla.errors import StorageError
    from lakevilla.store import StoreWrapper, open_store

    class FailingFooters(StoreWrapper):
        def get_range(self, key, start, length=None):
            if "/lv-" in key:
                raise StorageError(f"injected: footer of {key} unreadable")
            return self.inner.get_range(key, start, length)

    lake_dir = tmp_path / "lake"
    uri = f"file://{lake_dir}"
    lake = lv.Lake(uri, store=FailingFooters(open_store(uri)), engine=lv.SparkEngine(spark))
    lake.create_table("t", S)
    before = files_on_disk(lake_dir, ["t"])
    with pytest.raises(lv.LakeVillaError, match="footer"), lake.transaction("R") as txn:
        txn.insert("t", spark.range(1000).selectExpr("id", "id AS v"))
    assert files_on_disk(lake_dir, ["t"]) == before
