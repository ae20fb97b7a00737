"""Tables with Delta features against delta-rs, over random sequences of statements (insert,
update, delete, merge, overwrite with a predicate; ``tests/statement_sequences.py``): after
every statement lakevilla's table holds the rows delta-rs' holds, both accepted or both refused
it, and delta-rs' SQL reader reads lakevilla's table.

* deletion vectors: lakevilla's DELETE and UPDATE mark rows (inline DVs) where delta-rs, on a
  plain table, rewrites files (Spark, an independent DV reader, reads our DV table in
  ``interop/test_spark_features.py``);
* CHECK constraints, NOT NULL and a generated column (tables made by delta-rs, which enforces
  all three): a row that breaks one is refused by both, nothing written;
* column mapping: a column-mapped table written by delta-rs, or by lakevilla's statements, is
  read as delta-rs reads the plain one.
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import lakevilla as lv
from tests.statement_sequences import (
    ROW_ANY_ID,
    S,
    Statement,
    apply_delta_rs,
    apply_lakevilla,
    delta_rs_rows,
    initial_files,
    ordered,
    statements,
)

DV = {"delta.enableDeletionVectors": "true"}
CM = {"delta.columnMapping.mode": "name"}
RULES = {"vfloor": "v IS NULL OR v > -4", "noeleven": "id <> 11"}
# which systems write column-mapped tables: with "lakevilla" the case below runs lakevilla's
# statements on a column-mapped table against delta-rs on a plain one
CM_WRITERS = ["delta-rs", "lakevilla"]



def _examples(n: int) -> settings:
    """``n`` examples; the profile decides whether they are drawn anew (``tests/conftest.py``:
    the same ones on every run unless ``LV_HYPOTHESIS=explore``)."""
    return settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck))


def _ins(*rows: tuple) -> Statement:
    return Statement("insert", rows=rows)


def _plain_reference(path: str, files: list, partitioned: bool) -> None:
    """A plain delta-rs table holding ``files`` (one append each)."""
    from deltalake import write_deltalake

    write_deltalake(path, pa.Table.from_pylist([], schema=S),
                    partition_by=["part"] if partitioned else None)
    for f in files:
        assert apply_delta_rs(path, _ins(*f)) is None


def _same_outcome(s: Statement, ours: Exception | None, theirs: Exception | None,
                  refusals: tuple[type, ...]) -> None:
    assert (ours is None) == (theirs is None), f"{s}: lakevilla {ours!r}, delta-rs {theirs!r}"
    assert ours is None or isinstance(ours, refusals), f"{s}: {ours!r}"


# -- deletion vectors -----------------------------------------------------------------------

@_examples(60)
@given(files=initial_files(), steps=st.lists(statements(), min_size=1, max_size=6),
       partitioned=st.booleans(), features=st.sampled_from(["", "R"]))
@example(files=[((1, "a", 1), (2, "a", 2), (3, "b", None))],
         steps=[Statement("delete", where="id = 2 OR v IS NULL"),
                Statement("update", where="id < 4", set=(("v", "v + 1"),)),
                Statement("delete", where="v > 0")],
         partitioned=False, features="R")  # a DV marked, then its file marked again
def test_a_table_with_deletion_vectors_holds_what_delta_rs_holds_after_each_statement(
        tmp_path_factory, files, steps, partitioned, features):
    root = tmp_path_factory.mktemp("dv")
    lake = lv.Lake(f"file://{root}/lake")
    lake.create_table("t", S, partition_by=["part"] if partitioned else None, properties=DV)
    ref = str(root / "ref")
    _plain_reference(ref, files, partitioned)
    for f in files:
        assert apply_lakevilla(lake, "t", _ins(*f)) is None
    for s in steps:
        _same_outcome(s, apply_lakevilla(lake, "t", s, features), apply_delta_rs(ref, s),
                      (lv.DataOutsidePredicateError,))
        want = delta_rs_rows(ref)
        assert ordered(lake.read("t").to_pylist()) == want, s
    assert delta_rs_rows(str(root / "lake" / "t")) == want  # delta-rs reads our DVs


# -- CHECK constraints, NOT NULL, a generated column ----------------------------------------

# a NULL in a NOT NULL column is a SchemaMismatchError (the data's shape), a broken rule a
# ConstraintViolationError
REFUSED = (lv.ConstraintViolationError, lv.SchemaMismatchError)


def _constrained(path: str, partitioned: bool) -> None:
    """A table as delta-rs makes one: id NOT NULL, g generated as id * 2, two CHECKs."""
    from deltalake import DeltaTable, Field, Schema

    DeltaTable.create(path, schema=Schema([
        Field("id", "long", nullable=False), Field("part", "string"), Field("v", "long"),
        Field("g", "long", metadata={"delta.generationExpression": "id * 2"})]),
        partition_by=["part"] if partitioned else None)
    DeltaTable(path).alter.add_constraint(RULES)


@_examples(60)
@given(files=initial_files(), steps=st.lists(statements(ROW_ANY_ID), min_size=1, max_size=6),
       partitioned=st.booleans(), features=st.sampled_from(["", "R"]))
@example(files=[((1, "a", 1), (2, "b", -3))],
         steps=[_ins((3, "a", None), (None, "a", 1)),  # NOT NULL
                Statement("update", where="id = 2", set=(("v", "coalesce(v, 0) - 3"),)),
                Statement("merge", rows=((5, "a", 1),), clauses="conditional"),  # v 1 - 4
                Statement("merge", rows=((11, "b", 5),), clauses="upsert"),
                Statement("update", where="id = 1", set=(("v", "v * -1"), ("part", "'b'")))],
         partitioned=True, features="R")
def test_a_constrained_table_refuses_what_delta_rs_refuses_and_holds_what_it_holds(
        tmp_path_factory, files, steps, partitioned, features):
    root = tmp_path_factory.mktemp("rules")
    ref = str(root / "ref")
    _constrained(ref, partitioned)
    _constrained(str(root / "lake" / "t"), partitioned)
    lake = lv.Lake(f"file://{root}/lake")
    for f in files:  # the first rows may break the rules too: a statement like the others
        _same_outcome(_ins(*f), apply_lakevilla(lake, "t", _ins(*f)),
                      apply_delta_rs(ref, _ins(*f)), REFUSED)
    for s in steps:
        _same_outcome(s, apply_lakevilla(lake, "t", s, features), apply_delta_rs(ref, s),
                      (*REFUSED, lv.DataOutsidePredicateError))
        want = delta_rs_rows(ref)
        assert ordered(lake.read("t").to_pylist()) == want, s
    assert delta_rs_rows(str(root / "lake" / "t")) == want


# -- column mapping -------------------------------------------------------------------------

@_examples(30)
@given(files=initial_files(), steps=st.lists(statements(), min_size=1, max_size=5),
       partitioned=st.booleans(), writer=st.sampled_from(CM_WRITERS))
@example(files=[((1, "a", 1), (2, None, None)), ((3, "b", -2),)],
         steps=[Statement("update", where="part IS NULL", set=(("part", "'a'"),)),
                Statement("merge", rows=((3, "b", 4), (4, "a", 0)), clauses="upsert"),
                Statement("delete", where="v < 1")],
         partitioned=True, writer=CM_WRITERS[0])  # partition values keyed by physical name
@example(files=[((1, "a", 1), (2, None, None)), ((3, "b", -2),)],
         steps=[Statement("update", where="part IS NULL", set=(("part", "'a'"),)),
                Statement("merge", rows=((3, "b", 4), (4, "a", 0)), clauses="upsert"),
                Statement("delete", where="v < 1")],
         partitioned=True, writer="lakevilla")  # the same, written by lakevilla
def test_a_column_mapped_table_reads_as_delta_rs_reads_the_same_statements(
        tmp_path_factory, files, steps, partitioned, writer):
    """``writer`` runs the statements on a column-mapped table (``name`` mode: files hold
    physical names), delta-rs on a plain one; lakevilla reads the mapped table, after every
    statement, as delta-rs holds the plain one."""
    from deltalake import DeltaTable

    root = tmp_path_factory.mktemp("cm")
    ref, path = str(root / "ref"), str(root / "lake" / "t")
    _plain_reference(ref, files, partitioned)
    parts = ["part"] if partitioned else None
    lake = lv.Lake(f"file://{root}/lake")
    if writer == "lakevilla":
        lake.create_table("t", S, partition_by=parts, properties=CM)
    else:
        DeltaTable.create(path, schema=S, partition_by=parts, configuration=CM)
        assert "delta.columnMapping.physicalName" in DeltaTable(path).schema().to_json()

    def apply(s: Statement) -> Exception | None:
        return apply_lakevilla(lake, "t", s) if writer == "lakevilla" else apply_delta_rs(path, s)

    for f in files:
        assert apply(_ins(*f)) is None
    for s in steps:
        _same_outcome(s, apply(s), apply_delta_rs(ref, s),
                      (lv.DataOutsidePredicateError, Exception))
        want = delta_rs_rows(ref)
        assert ordered(lake.read("t").to_pylist()) == want, s
        assert ordered(lake.read("t", where="v IS NULL OR v >= 0", columns=["v", "id"])
                       .to_pylist()) == ordered([{"v": r["v"], "id": r["id"]} for r in want
                                                 if r["v"] is None or r["v"] >= 0]), s
    assert delta_rs_rows(path) == want
