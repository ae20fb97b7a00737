"""overwrite, optimize and add_columns with the Spark engine (classic and Spark Connect): Spark
writes and reads the data files, the semantics are the embedded engine's, delta-rs reads every
version."""

from __future__ import annotations

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

import lakevilla as lv  # noqa: E402
from tests.spark_session import CLASSIC_ONLY  # noqa: E402

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings(
                  "ignore:PySpark does not yet fully support pandas:FutureWarning")]

T = pa.schema([("id", pa.int64()), ("x", pa.int64()), ("p", pa.string())])


def _ids(t) -> list[int]:
    t = t.toArrow() if hasattr(t, "toArrow") else t
    return sorted(t.column("id").to_pylist())


def _delta(uri: str, version: int | None = None) -> list[dict]:
    from deltalake import DeltaTable

    t = pa.table(DeltaTable(f"{uri}/t", version=version).to_pyarrow_table())
    return sorted(t.to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("features", ["R"])  # LV[DL] runs the same engine calls (tested embedded)
def test_spark_overwrite_optimize_and_new_columns(spark, tmp_path, features):  # noqa: F811
    uri = "file://" + str(tmp_path / "lake")
    with lv.Lake(uri, engine=lv.SparkEngine(spark)) as lake:
        lake.create_table("t", T, partition_by=["p"])
        for i in range(4):
            with lake.transaction("") as txn:
                txn.insert("t", spark.createDataFrame([(i, i, "ab"[i % 2]), (10 + i, 10 + i, "a")],
                                                      "id long, x long, p string"))
        first = lake.version("t")
        with lake.transaction(features) as txn:
            with pytest.raises(lv.DataOutsidePredicateError):
                txn.overwrite("t",
                              spark.createDataFrame([(99, 1, "a")], "id long, x long, p string"),
                              where="x >= 10")
            assert txn.overwrite("t", spark.createDataFrame([(50, 50, "b")],
                                                            "id long, x long, p string"),
                                 where="x >= 10") == 1
            m = txn.optimize("t", target_file_size=1 << 20)
            txn.add_columns("t", {"note": pa.string()})
            txn.insert("t", spark.createDataFrame([(60, 6, "a", "n", 1.5)],
                                                  "id long, x long, p string, "
                                                  "note string, w double"), schema_mode="merge")
            if features:
                assert _ids(txn.read("t", where="note IS NULL")) == [0, 1, 2, 3, 50]
        assert m["files_removed"] >= 2
        got = sorted(lake.read("t").toArrow().to_pylist(), key=lambda r: r["id"])
        assert [r["id"] for r in got] == [0, 1, 2, 3, 50, 60]
        assert got[-1]["note"] == "n" and got[-1]["w"] == 1.5 and got[0]["note"] is None
        assert _delta(uri) == got
        for v in range(first, lake.version("t") + 1):
            _delta(uri, v)  # delta-rs reads every version
    with lv.Lake(uri) as embedded:
        assert sorted(embedded.read("t").to_pylist(), key=lambda r: r["id"]) == got


@CLASSIC_ONLY
def test_spark_optimize_is_redone_under_r(spark, tmp_path):  # noqa: F811
    uri = "file://" + str(tmp_path / "lake")
    with lv.Lake(uri, engine=lv.SparkEngine(spark)) as lake:
        lake.create_table("t", T)
        for i in range(3):
            with lake.transaction("") as txn:
                txn.insert("t", spark.createDataFrame([(i, i, "a")], "id long, x long, p string"))
        opt = lake.begin("R")
        opt.optimize("t")
        with lv.Lake(uri).transaction("") as w:  # another client deletes from a compacted file
            w.delete("t", where="id = 1")
        opt.commit()
        assert opt.stats["redos"] == 1
        assert _ids(lake.read("t")) == [0, 2] == [r["id"] for r in _delta(uri)]
        assert len(lake.snapshot("t").files) == 1


def test_spark_refuses_rows_that_break_a_check_constraint(spark, tmp_path):  # noqa: F811
    uri = "file://" + str(tmp_path / "lake")
    with lv.Lake(uri, engine=lv.SparkEngine(spark)) as lake:
        lake.create_table("t", T, properties={"delta.constraints.small": "x < 10"})
        ok = spark.createDataFrame([(1, 9, "a")], "id long, x long, p string")
        with lake.transaction("R") as txn:
            txn.insert("t", ok)
        before = lake.version("t")
        for statement in (
                lambda txn: txn.insert("t", spark.createDataFrame(
                    [(2, 3, "a"), (3, None, "b")], "id long, x long, p string")),
                lambda txn: txn.update("t", {"x": "x + 1"}, where="id = 1")):
            with pytest.raises(lv.ConstraintViolationError, match="'small'") as e:
                with lake.transaction("R") as txn:
                    statement(txn)
            assert set(e.value.row) == {"x"}
        assert lake.version("t") == before
        assert _delta(uri) == [{"id": 1, "x": 9, "p": "a"}]


def test_spark_computes_and_checks_generated_columns(spark, tmp_path):  # noqa: F811
    """A table delta-rs made with ``g = a * 2``: Spark computes g where the data (a DataFrame;
    Arrow data and streams as the embedded engine) or a clause leaves it out, recomputes it when
    an update or a merge sets a, refuses a wrong one."""
    from deltalake import DeltaTable, Field, Schema

    DeltaTable.create(str(tmp_path / "lake" / "t"), schema=Schema([
        Field("id", "long"), Field("a", "long"),
        Field("g", "long", metadata={"delta.generationExpression": "a * 2"})]))
    uri = "file://" + str(tmp_path / "lake")
    with lv.Lake(uri, engine=lv.SparkEngine(spark)) as lake:
        with lake.transaction("R") as txn:
            txn.insert("t", spark.createDataFrame([(1, 5), (2, None)], "id long, a long"))
            txn.insert("t", {"id": [3], "a": [7], "g": [14]})
            five = pa.table({"id": [5], "a": [2]})
            txn.insert("t", pa.RecordBatchReader.from_batches(five.schema, five.to_batches()))
            txn.update("t", {"a": "a + 1"}, where="id = 1")
            txn.merge("t", pa.table({"id": [3, 9], "a": [30, 9]}), on="id") \
                .when_matched_update({"a": "source.a"}).when_not_matched_insert_all().execute()
        before = lake.version("t")
        for statement in (
                lambda txn: txn.insert("t", spark.createDataFrame([(4, 1, 3)],
                                                                  "id long, a long, g long")),
                lambda txn: txn.update("t", {"g": "0"}, where="id = 1")):
            with pytest.raises(lv.ConstraintViolationError, match="column 'g'") as e:
                with lake.transaction("R") as txn:
                    statement(txn)
            assert set(e.value.row) == {"a", "g"}
        assert lake.version("t") == before
    assert _delta(uri) == [{"id": 1, "a": 6, "g": 12}, {"id": 2, "a": None, "g": None},
                           {"id": 3, "a": 30, "g": 60}, {"id": 5, "a": 2, "g": 4},
                           {"id": 9, "a": 9, "g": 18}]


def test_spark_deletes_updates_and_merges_by_deletion_vectors(spark, tmp_path):  # noqa: F811
    """On a table that asks for DVs Spark finds the rows and lakevilla marks them: no data file
    is rewritten (a large DV goes to a DV file), only updated and inserted rows are written;
    delta-rs reads what the embedded engine would have written."""
    from tests.dv_tables import delta_rs_rows
    from tests.statements.test_deletion_vector_writes import BIG, DV_TABLE, IDS, ROWS

    root = tmp_path / "lake"
    lv.Lake(str(root)).create_table("t", IDS, properties=DV_TABLE)
    with lv.Lake(str(root)).transaction("") as txn:
        txn.insert("t", {"id": list(range(ROWS)), "v": [0] * ROWS})
    original = {p.name for p in (root / "t").glob("*.parquet")}
    with lv.Lake("file://" + str(root), engine=lv.SparkEngine(spark)) as lake:
        with lake.transaction("R") as txn:
            assert txn.delete("t", where=BIG) == len(range(0, ROWS, 3))
            assert txn.update("t", {"v": "v + 1"}, where="id = 1") == 1
            metrics = (txn.merge("t", {"id": [2, 4, 3, ROWS], "v": [-1, 7, 5, 9]}, on="id")
                       .when_matched_delete("source.v < 0")
                       .when_matched_update({"v": "source.v"})
                       .when_not_matched_insert_all().execute())
        assert (metrics["num_target_rows_updated"], metrics["num_target_rows_deleted"],
                metrics["num_target_rows_inserted"]) == (1, 1, 2)  # 3 is deleted already
        dvs = [a.deletion_vector for a in lake.snapshot("t").files.values()
               if a.deletion_vector is not None]
    assert len(dvs) == 1 and dvs[0].storage_type == "u"
    assert dvs[0].cardinality == len(range(0, ROWS, 3)) + 3  # and ids 1, 2, 4
    assert len(list((root / "t").glob("deletion_vector_*.bin"))) == 1  # the first, replaced
    assert original <= {p.name for p in (root / "t").rglob("*.parquet")}  # none rewritten
    expected = sorted([{"id": i, "v": {1: 1, 4: 7}.get(i, 0)} for i in range(ROWS)
                       if i % 3 and i != 2] + [{"id": 3, "v": 5}, {"id": ROWS, "v": 9}],
                      key=lambda r: r["id"])
    got = lv.Lake(str(root)).read("t").to_pylist()
    assert sorted(got, key=lambda r: r["id"]) == expected
    assert sorted(delta_rs_rows(root / "t"), key=lambda r: r["id"]) == expected


@pytest.mark.parametrize("mode", ["id"])  # writes are the same in name mode (ids too)
def test_spark_writes_a_column_mapped_table_under_physical_names(spark, tmp_path,  # noqa: F811
                                                                 mode):
    """Every statement the Spark engine writes (insert, update, delete, merge, optimize, new
    columns, a rename): files under physical names with field ids (nested too), partition
    values and statistics keyed physically; the embedded engine and delta-rs read the same."""
    from deltalake import DeltaTable, QueryBuilder

    from lakevilla.store import open_store
    from tests.column_mapped import assert_files_are_physical

    uri = "file://" + str(tmp_path / "lake")
    schema = pa.schema([("id", pa.int64()), ("info", pa.struct([("score", pa.int64())])),
                        ("part", pa.string())])
    ddl = "id long, info struct<score: long>, part string"
    with lv.Lake(uri, engine=lv.SparkEngine(spark)) as lake:
        lake.create_table("t", schema, partition_by=["part"],
                          properties={"delta.columnMapping.mode": mode})
        with lake.transaction("R") as txn:
            txn.insert("t", spark.createDataFrame([(1, (10,), "a"), (2, (20,), "a"),
                                                   (3, (30,), "b")], ddl))
            txn.update("t", where="info.score = 20", set={"id": "22"})
            txn.delete("t", where="id = 3")
        with lake.transaction("R") as txn:
            txn.merge("t", spark.createDataFrame([(1, (11,), "a"), (4, (40,), "b")], ddl),
                      on=["id"]).when_matched_update({"part": "'c'"}) \
                .when_not_matched_insert({"id": "source.id", "part": "source.part"}).execute()
            txn.optimize("t")
            txn.add_columns("t", {"note": pa.string()})
            txn.rename_column("t", "id", "key")
            txn.insert("t", spark.createDataFrame([(5, (50,), "b", "n")],
                                                  "key long, info struct<score: long>, "
                                                  "part string, note string"))
        got = sorted(lake.read("t").toArrow().to_pylist(), key=lambda r: r["key"])
    expected = [{"key": 1, "info": {"score": 10}, "part": "c", "note": None},
                {"key": 4, "info": None, "part": "b", "note": None},
                {"key": 5, "info": {"score": 50}, "part": "b", "note": "n"},
                {"key": 22, "info": {"score": 20}, "part": "a", "note": None}]
    assert got == expected
    embedded = lv.Lake(uri)
    assert sorted(embedded.read("t").to_pylist(), key=lambda r: r["key"]) == expected
    by_delta_rs = QueryBuilder().register("t", DeltaTable(f"{uri}/t")) \
        .execute("SELECT * FROM t").read_all()
    assert sorted(pa.table(by_delta_rs).to_pylist(), key=lambda r: r["key"]) == expected
    assert_files_are_physical(open_store(uri), uri, embedded, "t")
