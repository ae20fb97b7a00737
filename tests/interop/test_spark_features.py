"""Spark on a table lakevilla wrote with deletion vectors, after a sequence of the statements
the feature differential draws (``statements/test_feature_differential.py``), once per run.

delta-spark is not installed here (no Delta jars in the local Maven or Ivy caches, and the
suite's session loads none), so Spark does not read Delta on its own: lakevilla's Spark engine
reads the Parquet files through Spark and drops the rows each DV marks by
``_metadata.row_index``. delta-rs' SQL reader is the independent judge of the DVs."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

import lakevilla as lv  # noqa: E402
from tests.statement_sequences import (  # noqa: E402
    S,
    Statement,
    apply_delta_rs,
    apply_lakevilla,
    delta_rs_rows,
    ordered,
)

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings(
                  "ignore:PySpark does not yet fully support pandas:FutureWarning")]

FIRST = [((1, "a", 1), (2, "a", 2), (3, "b", None), (4, "b", 4), (11, "a", 3), (12, "b", 0)),
         ((5, "a", -1), (6, None, 0), (7, "b", 3), (8, "a", 5), (9, "a", None), (10, "b", 2))]
STEPS = [Statement("merge", rows=((7, "b", -2), (9, "a", 2), (4, "b", 3)), clauses="conditional"),
         Statement("overwrite", rows=((10, "a", 1),), where="id >= 10"),
         Statement("delete", where="id = 2 OR v IS NULL"),
         Statement("update", where="id < 6", set=(("v", "v + 1"),))]


def test_spark_reads_a_table_lakevilla_wrote_with_deletion_vectors_as_delta_rs_does(
        classic_spark, tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    uri = f"file://{tmp_path}/lake"
    ref = str(tmp_path / "ref")
    write_deltalake(ref, pa.Table.from_pylist([], schema=S), partition_by=["part"])
    with lv.Lake(uri) as lake:
        lake.create_table("t", S, partition_by=["part"],
                          properties={"delta.enableDeletionVectors": "true"})
        for rows in FIRST:
            s = Statement("insert", rows=rows)
            assert apply_lakevilla(lake, "t", s) is None and apply_delta_rs(ref, s) is None
        for s in STEPS:
            assert apply_lakevilla(lake, "t", s, "R") is None and apply_delta_rs(ref, s) is None
        marked = [a for a in lake.snapshot("t").files.values() if a.deletion_vector is not None]
        embedded = ordered(lake.read("t").to_pylist())
    # a file two statements marked rows of: its DV the union of both
    assert max(a.deletion_vector.cardinality for a in marked) >= 2
    want = delta_rs_rows(ref)
    assert embedded == want == delta_rs_rows(str(tmp_path / "lake" / "t"))
    with lv.Lake(uri, engine=lv.SparkEngine(classic_spark)) as lake:
        got = ordered([r.asDict() for r in lake.read("t").collect()])
        some = ordered([r.asDict() for r in lake.read("t", where="v >= 2").collect()])
    assert got == want
    assert some == [r for r in want if r["v"] is not None and r["v"] >= 2]
