"""A change data feed written by the Spark engine: delta-rs' ``load_cdf`` returns for each
statement the rows it returns for the embedded engine's commit of the same statement."""

from __future__ import annotations

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

import lakevilla as lv  # noqa: E402
from tests.spark_session import CLASSIC_ONLY  # noqa: E402
from tests.statements.test_change_data_feed import CDF, ROWS, S, changes  # noqa: E402

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings(
                  "ignore:PySpark does not yet fully support pandas:FutureWarning")]


def _statements(lake: lv.Lake) -> None:
    lake.create_table("t", S, partition_by=["part"], properties=CDF)
    with lake.transaction("R") as txn:
        txn.insert("t", pa.Table.from_pylist(ROWS, schema=S))
    with lake.transaction("R") as txn:
        txn.update("t", {"v": "v + 1"}, where="id < 3")
    with lake.transaction("R") as txn:
        txn.delete("t", where="id = 4")
    with lake.transaction("R") as txn:
        (txn.merge("t", pa.Table.from_pylist([{"id": 0, "part": "a", "v": 5},
                                              {"id": 1, "part": "b", "v": -1},
                                              {"id": 9, "part": "b", "v": 9}], schema=S),
                   on="target.id = source.id")
         .when_matched_delete("source.v < 0").when_matched_update({"v": "source.v"})
         .when_not_matched_insert_all().execute())
    with lake.transaction("R") as txn:  # an insert beside an update: both in files
        txn.insert("t", pa.Table.from_pylist([{"id": 20, "part": "a", "v": 1}], schema=S))
        txn.update("t", {"v": "v"}, where="id = 5")
        txn.update("t", {"v": "v * 2"}, where="id = 9")
    with lake.transaction("R") as txn:
        txn.overwrite("t", pa.Table.from_pylist([{"id": 30, "part": "b", "v": 3}], schema=S),
                      where="part = 'b'")


def test_spark_writes_the_feed_the_embedded_engine_writes(spark, tmp_path):  # noqa: F811
    ours, theirs = f"file://{tmp_path}/spark", f"file://{tmp_path}/embedded"
    with lv.Lake(ours, engine=lv.SparkEngine(spark)) as lake:
        _statements(lake)
    with lv.Lake(theirs) as lake:
        _statements(lake)
    got, want = changes(f"{ours}/t"), changes(f"{theirs}/t")
    assert got == want
    assert sorted(got) == [1, 2, 3, 4, 5, 6]
    assert sum(got[5].values()) == 3  # the insert and the update of id 9; id 5 kept its value


@CLASSIC_ONLY
def test_lake_changes_on_spark_are_a_dataframe_of_the_embedded_engines_rows(spark, tmp_path):
    """``lake.changes`` on the Spark engine is a DataFrame computed by Spark (cdc files read,
    removed and added rows compared by ``exceptAll``), holding the rows the embedded engine
    returns for the same lake, a change-data-feed table and a plain one alike."""
    from pyspark.sql import DataFrame

    uri = f"file://{tmp_path}/lake"
    with lv.Lake(uri, engine=lv.SparkEngine(spark)) as lake:
        _statements(lake)
        lake.create_table("p", S)  # no feed: changes derived from removes and adds
        with lake.transaction("R") as txn:
            txn.insert("p", pa.Table.from_pylist(ROWS, schema=S))
        with lake.transaction("R") as txn:
            txn.update("p", {"v": "v + 1"}, where="id < 3")
            txn.delete("p", where="id = 4")
        got = lake.changes(["t", "p"])
    with lv.Lake(uri) as embedded:
        want = embedded.changes(["t", "p"])
    for table in ("t", "p"):
        assert isinstance(got[table], DataFrame)
        ours = got[table].toArrow()
        assert ours.schema.names == want[table].schema.names
        key = [(n, "ascending") for n in ours.schema.names if n != "_commit_timestamp"]
        assert (ours.cast(want[table].schema).sort_by(key).to_pylist()
                == want[table].sort_by(key).to_pylist())
