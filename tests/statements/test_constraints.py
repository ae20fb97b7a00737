"""CHECK constraints and column invariants: every statement that writes rows enforces them
before anything is written (false or NULL breaks a rule, as in Delta and delta-rs)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

import lakevilla as lv

S = pa.schema([("id", pa.int64()), ("amount", pa.float64())])
RULE = {"delta.constraints.positive": "amount > 0"}


def _lake(backend):
    lake = backend.lake()
    lake.create_table("t", S, properties=RULE)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1, 2], "amount": [5.0, 6.0]})
    return lake


def _merge_in(txn, rows):
    src = pa.Table.from_pylist(rows, schema=S)
    return txn.merge("t", src, on="id").when_not_matched_insert_all().execute()


STATEMENTS = {
    "insert": lambda txn: txn.insert("t", {"id": [3, 4], "amount": [1.0, -1.0]}),
    "insert-null": lambda txn: txn.insert("t", {"id": [3], "amount": [None]}),
    "update": lambda txn: txn.update("t", {"amount": "amount - 5.5"}, where="id = 1"),
    "merge": lambda txn: _merge_in(txn, [{"id": 9, "amount": -2.0}]),
    "overwrite": lambda txn: txn.overwrite("t", {"id": [1], "amount": [0.0]}),
}


@pytest.mark.parametrize("features", ["", "R", "R,CT,I"])
@pytest.mark.parametrize("statement", list(STATEMENTS))
def test_a_row_that_breaks_a_check_constraint_is_refused_and_nothing_is_written(
        local_backend, statement, features):
    lake = _lake(local_backend)

    def table_keys():  # an I transaction may start the global log: bookkeeping, not data
        return [k for k in local_backend.all_keys() if k.startswith("t/")]

    before = table_keys()
    with pytest.raises(lv.ConstraintViolationError, match="'positive'") as e:
        with lake.transaction(features) as txn:
            STATEMENTS[statement](txn)
    assert e.value.table == "t" and e.value.expression == "amount > 0"
    assert set(e.value.row) == {"amount"}  # the values the rule reads
    assert e.value.row["amount"] is None or e.value.row["amount"] <= 0
    assert table_keys() == before
    assert sorted(lake.read("t").column("amount").to_pylist()) == [5.0, 6.0]


def test_rows_that_keep_the_rules_are_written_and_delta_rs_reads_them(backend):
    lake = _lake(backend)
    with lake.transaction("R") as txn:
        txn.insert("t", {"id": [3], "amount": [0.5]})
        txn.update("t", {"amount": "amount + 1"}, where="id = 1")
    assert lake.snapshot("t").protocol.min_writer_version == 3  # Delta's CHECK constraints
    assert backend.delta_rows("t") == [{"id": 1, "amount": 6.0}, {"id": 2, "amount": 6.0},
                                       {"id": 3, "amount": 0.5}]


def test_a_constraint_delta_rs_added_is_enforced_like_delta_rs_does(tmp_path):
    """The same two appends against delta-rs and lakevilla: each refuses the same one."""
    from deltalake import DeltaTable, write_deltalake

    path = tmp_path / "lake" / "t"
    write_deltalake(str(path), pa.table({"id": [1], "amount": [5.0]}, schema=S))
    DeltaTable(str(path)).alter.add_constraint({"positive": "amount > 0"})
    lake = lv.Lake(str(tmp_path / "lake"))
    good = pa.table({"id": [2], "amount": [1.0]}, schema=S)
    bad = pa.table({"id": [3], "amount": [-1.0]}, schema=S)
    with lake.transaction("R") as txn:
        txn.insert("t", good)
    with pytest.raises(lv.ConstraintViolationError, match="positive"):
        with lake.transaction("R") as txn:
            txn.insert("t", bad)
    with pytest.raises(Exception, match="failed validation"):
        write_deltalake(str(path), bad, mode="append")
    assert sorted(DeltaTable(str(path)).to_pyarrow_table().column("id").to_pylist()) == [1, 2]


def test_a_column_invariant_is_enforced(local_backend):
    lake = local_backend.lake()
    lake.create_table("t", S)
    snap = lake.snapshot("t")
    md = snap.metadata.to_json()
    schema = json.loads(md["schemaString"])
    schema["fields"][1]["metadata"] = {
        "delta.invariants": json.dumps({"expression": {"expression": "amount < 100"}})}
    md["schemaString"] = json.dumps(schema)
    body = "\n".join(json.dumps(x) for x in [
        {"commitInfo": {"operation": "SET TBLPROPERTIES"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, {"metaData": md}])
    local_backend.store().put_if_absent("t/_delta_log/00000000000000000001.json", body.encode())
    lake = local_backend.lake()
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1], "amount": [99.0]})
    with pytest.raises(lv.ConstraintViolationError, match="invariant of column 'amount'"):
        with lake.transaction("") as txn:
            txn.insert("t", {"id": [2], "amount": [100.0]})
    assert lake.read("t").column("id").to_pylist() == [1]


def test_a_constraint_outside_the_grammar_makes_the_table_unwritable_by_name(local_backend):
    lake = local_backend.lake()
    lake.create_table("t", S, properties={"delta.constraints.odd": "no_such_fn(amount)"})
    with pytest.raises(lv.UnsupportedTableFeatureError, match="'odd'"):
        with lake.transaction("") as txn:
            txn.insert("t", {"id": [1], "amount": [1.0]})
    assert lake.read("t").num_rows == 0


def test_a_redo_onto_a_table_that_gained_a_constraint_meanwhile_enforces_it(tmp_path):
    """delta-rs adds a constraint while an R transaction's insert waits to commit: the commit
    conflicts (the metadata changed), the insert is redone on the new snapshot, and the redo
    checks the new rule."""
    from deltalake import DeltaTable

    lake = lv.Lake(str(tmp_path / "lake"))
    lake.create_table("t", S)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1], "amount": [5.0]})
    with pytest.raises(lv.ConstraintViolationError, match="positive"):
        with lake.transaction("R") as txn:
            txn.insert("t", {"id": [2], "amount": [-1.0]})
            DeltaTable(str(tmp_path / "lake" / "t")).alter.add_constraint(
                {"positive": "amount > 0"})
    assert lake.read("t").column("id").to_pylist() == [1]


# -- adding and removing rules: set_properties ------------------------------------------------

@pytest.mark.parametrize("features", ["", "R", "R,CT,I"])
def test_set_properties_adds_a_constraint_delta_rs_then_enforces_too(tmp_path, features):
    from deltalake import DeltaTable, write_deltalake

    lake = lv.Lake(str(tmp_path / "lake"))
    lake.create_table("t", S)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1, 2], "amount": [5.0, 6.0]})
    with lake.transaction(features) as txn:
        txn.set_properties("t", RULE)
        with pytest.raises(lv.ConstraintViolationError, match="positive"):
            txn.insert("t", {"id": [3], "amount": [-1.0]})  # later statements enforce it
        txn.insert("t", {"id": [3], "amount": [1.0]})
    snap = lake.snapshot("t")
    assert snap.metadata.configuration == RULE
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (1, 3)
    path = str(tmp_path / "lake" / "t")
    assert DeltaTable(path).metadata().configuration == RULE
    with pytest.raises(Exception, match="failed validation"):
        write_deltalake(path, pa.table({"id": [4], "amount": [-2.0]}, schema=S), mode="append")
    with lake.transaction(features) as txn:
        txn.set_properties("t", {"delta.constraints.positive": None})
        txn.insert("t", {"id": [4], "amount": [-2.0]})  # unset: no rule any more
    assert sorted(lake.read("t").column("id").to_pylist()) == [1, 2, 3, 4]


def test_a_constraint_the_rows_already_there_break_is_refused_and_nothing_is_written(
        local_backend):
    lake = local_backend.lake()
    lake.create_table("t", S)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1, 2], "amount": [5.0, -6.0]})
    before = local_backend.all_keys()
    with pytest.raises(lv.ConstraintViolationError, match="positive") as e:
        with lake.transaction("R") as txn:
            txn.set_properties("t", RULE)
    assert e.value.row == {"amount": -6.0}
    assert [k for k in local_backend.all_keys() if k.startswith("t/")] == \
        [k for k in before if k.startswith("t/")]


def test_a_row_added_while_a_constraint_waits_to_commit_is_checked_by_its_redo(tmp_path):
    """delta-rs appends a row that breaks the rule between the check of the existing rows and
    the commit: the commit conflicts (a full-table read), the redo checks again and refuses."""
    from deltalake import write_deltalake

    lake = lv.Lake(str(tmp_path / "lake"))
    lake.create_table("t", S)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1], "amount": [5.0]})
    with pytest.raises(lv.ConstraintViolationError, match="positive"):
        with lake.transaction("R") as txn:
            txn.set_properties("t", RULE)
            write_deltalake(str(tmp_path / "lake" / "t"),
                            pa.table({"id": [2], "amount": [-1.0]}, schema=S), mode="append")
    assert lake.snapshot("t").metadata.configuration == {}


@pytest.mark.parametrize("prop, value", [("delta.feature.icebergCompatV2", "supported"),
                                         ("delta.feature.collations-preview", "enabled")])
def test_a_property_enabling_a_feature_lakevilla_does_not_write_is_refused(local_backend, prop,
                                                                           value):
    lake = local_backend.lake()
    lake.create_table("t", S)
    before = local_backend.all_keys()
    with pytest.raises(lv.UnsupportedTableFeatureError):
        with lake.transaction("R") as txn:
            txn.set_properties("t", {prop: value})
    with pytest.raises(lv.InvalidArgumentError, match="strings"):
        with lake.transaction("R") as txn:
            txn.set_properties("t", {"delta.appendOnly": True})
    assert [k for k in local_backend.all_keys() if k.startswith("t/")] == \
        [k for k in before if k.startswith("t/")]


def test_a_resumed_transaction_keeps_the_properties_it_set(local_backend):
    import time

    from lakevilla.recovery import sublog as sublogs
    from tests.helpers import entries_landed

    ttl = 5.0
    lake = local_backend.lake(marker_ttl=ttl)
    lake.create_table("t", S)
    crashed = lake.begin("R")
    crashed.set_properties("t", RULE)
    crashed.insert("t", {"id": [7], "amount": [1.0]})
    lake._client.heartbeats.forget(crashed)
    entries_landed(crashed)
    assert [e.kind for e in sublogs.read_all(lake.store, crashed.id)] == ["physical", "physical"]
    later = local_backend.lake(marker_ttl=ttl, clock=lambda: time.time() + 10_000.0)
    resumed = later.resume(crashed.id)
    with pytest.raises(lv.ConstraintViolationError):
        resumed.insert("t", {"id": [8], "amount": [-1.0]})
    resumed.commit()
    assert lake.snapshot("t").metadata.configuration == RULE
    assert lake.read("t").column("id").to_pylist() == [7]
