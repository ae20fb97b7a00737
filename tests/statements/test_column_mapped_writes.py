"""Writing column-mapped tables: every statement writes data files under physical names (with
Parquet field ids, in ``name`` mode too), ``partitionValues`` and statistics keyed by physical
name, while the API stays logical; ``add_columns`` gives new ids and ``col-<uuid>`` names;
``rename_column`` and ``drop_columns`` change metadata only. delta-rs' SQL reader is the judge
(``to_pyarrow_table`` reads every column of a column-mapped table as NULL)."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakevilla as lv
from lakevilla.delta.column_mapping import ID_KEY, PHYSICAL_KEY
from tests.column_mapped import all_ids, assert_files_are_physical, fields_of, physical

MODE = "delta.columnMapping.mode"
MAX_ID = "delta.columnMapping.maxColumnId"
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()),
                    ("info", pa.struct([("score", pa.int64()), ("tag", pa.string())])),
                    ("part", pa.string())])


def data(ids, part="a"):
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids],
                     "info": [{"score": i * 10, "tag": f"t{i}"} for i in ids],
                     "part": [part] * len(ids)}, schema=SCHEMA)


def by_id(rows) -> list[dict]:
    return sorted(rows, key=lambda r: r["id"] if r.get("id") is not None else -1)


def delta_rs_rows(backend, table: str) -> list[dict]:
    from deltalake import QueryBuilder

    got = QueryBuilder().register("t", backend.delta(table)).execute("SELECT * FROM t").read_all()
    return by_id(pa.table(got).to_pylist())


@pytest.mark.parametrize("mode", ["name", "id"])
def test_every_statement_writes_physical_names_and_delta_rs_reads_the_logical_rows(backend, mode):
    lake = backend.lake()
    lake.create_table("t", SCHEMA, partition_by=["part"], properties={MODE: mode})
    snap = lake.snapshot("t")
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (2, 5)
    assert all(p.startswith("col-") for p in physical(snap.metadata).values())
    assert snap.metadata.configuration[MAX_ID] == "6"  # 4 columns and 2 struct fields
    with lake.transaction("R") as txn:
        txn.insert("t", data([1, 2, 3]))
        txn.insert("t", data([4, 5], "b"))
    with lake.transaction("R") as txn:
        txn.update("t", where="info.score = 20", set={"name": "'two'"})
        txn.delete("t", where="id = 3")
        # (a merge does not assign struct values yet, mapped or not: the source has none)
        txn.merge("t", data([5, 6], "b").drop_columns(["info"]), on=["id"]).when_matched_update(
            {"name": "'five'"}).when_not_matched_insert(
            {"id": "source.id", "name": "source.name", "part": "source.part"}).execute()
    with lake.transaction("R") as txn:
        txn.overwrite("t", data([7], "b"), where="part = 'b' AND id >= 6")
        txn.optimize("t", where="part = 'a'")
    expected = [{"id": 1, "name": "n1", "info": {"score": 10, "tag": "t1"}, "part": "a"},
                {"id": 2, "name": "two", "info": {"score": 20, "tag": "t2"}, "part": "a"},
                {"id": 4, "name": "n4", "info": {"score": 40, "tag": "t4"}, "part": "b"},
                {"id": 5, "name": "five", "info": {"score": 50, "tag": "t5"}, "part": "b"},
                {"id": 7, "name": "n7", "info": {"score": 70, "tag": "t7"}, "part": "b"}]
    assert by_id(lake.read("t").to_pylist()) == expected
    assert delta_rs_rows(backend, "t") == expected
    assert lake.read("t", where="part = 'b' AND info.tag > 't4'", columns=["id"]).to_pylist() \
        in ([{"id": 5}, {"id": 7}], [{"id": 7}, {"id": 5}])
    assert_files_are_physical(backend.store(), backend.uri, lake, "t")


@pytest.mark.parametrize("mode", ["name", "id"])
def test_add_columns_gives_new_ids_after_the_greatest_and_col_uuid_names(local_backend, mode):
    lake = local_backend.lake()
    lake.create_table("t", SCHEMA, partition_by=["part"], properties={MODE: mode})
    with lake.transaction("R") as txn:
        txn.insert("t", data([1]))
        txn.add_columns("t", {"extra": pa.struct([("x", pa.int32()), ("y", pa.string())])})
        txn.insert("t", {"id": [2], "part": ["a"], "extra": [{"x": 1, "y": "q"}]})
    with lake.transaction("R") as txn:  # schema evolution by an insert maps its column too
        txn.insert("t", {"id": [3], "part": ["a"], "more": [3.5]}, schema_mode="merge")
    md = lake.snapshot("t").metadata
    fields = fields_of(md)
    assert [f["name"] for f in fields] == ["id", "name", "info", "part", "extra", "more"]
    assert all_ids(fields) == list(range(1, 11))  # extra 7, its x 8 and y 9, more 10
    assert md.configuration[MAX_ID] == "10"
    assert all(p.startswith("col-") for p in physical(md).values())
    assert len(set(physical(md).values())) == 6
    got = {r["id"]: (r["extra"], r["more"]) for r in lake.read("t").to_pylist()}
    assert got == {1: (None, None), 2: ({"x": 1, "y": "q"}, None), 3: (None, 3.5)}
    assert by_id(delta_rs_rows(local_backend, "t")) == by_id(lake.read("t").to_pylist())
    assert_files_are_physical(local_backend.store(), local_backend.uri, lake, "t")


def test_enabling_name_mapping_keeps_the_files_and_maps_the_columns_by_their_names(backend):
    lake = backend.lake()
    lake.create_table("t", SCHEMA, partition_by=["part"])
    with lake.transaction("R") as txn:
        txn.insert("t", data([1, 2]))
    files = set(lake.snapshot("t").files)
    with lake.transaction("R") as txn:
        txn.set_properties("t", {MODE: "name"})
    snap = lake.snapshot("t")
    assert set(snap.files) == files  # nothing rewritten
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (2, 5)
    assert physical(snap.metadata) == {"id": "id", "name": "name", "info": "info", "part": "part"}
    assert snap.metadata.configuration[MAX_ID] == "6"
    with lake.transaction("R") as txn:
        txn.rename_column("t", "name", "label")
        txn.insert("t", {"id": [3], "label": ["n3"], "part": ["b"]})
        txn.update("t", where="id = 1", set={"label": "'one'"})
    got = by_id(lake.read("t").to_pylist())
    assert [(r["id"], r["label"]) for r in got] == [(1, "one"), (2, "n2"), (3, "n3")]
    assert delta_rs_rows(backend, "t") == got


def test_enabling_mapping_on_a_table_with_table_features_adds_the_column_mapping_feature(
        local_backend):
    lake = local_backend.lake()
    lake.create_table("t", SCHEMA, properties={"delta.enableDeletionVectors": "true"})
    with lake.transaction("R") as txn:
        txn.insert("t", data([1, 2, 3]))
        txn.set_properties("t", {MODE: "name"})
        txn.delete("t", where="id = 2")  # marks the row in a deletion vector
    snap = lake.snapshot("t")
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (3, 7)
    assert "columnMapping" in snap.protocol.reader_features
    assert "columnMapping" in snap.protocol.writer_features
    assert any(a.deletion_vector is not None for a in snap.files.values())
    assert [r["id"] for r in by_id(lake.read("t").to_pylist())] == [1, 3]
    assert delta_rs_rows(local_backend, "t") == by_id(lake.read("t").to_pylist())


def test_id_mode_is_set_only_at_creation_and_a_mode_never_changes_after(local_backend):
    lake = local_backend.lake()
    lake.create_table("plain", SCHEMA)
    lake.create_table("named", SCHEMA, properties={MODE: "name"})
    for table, mode in (("plain", "id"), ("named", "none"), ("named", "id")):
        with pytest.raises(lv.UnsupportedTableFeatureError, match=MODE):
            with lake.transaction("R") as txn:
                txn.set_properties(table, {MODE: mode})


def test_rename_and_drop_change_metadata_only_and_every_reader_sees_the_new_names(backend):
    lake = backend.lake()
    lake.create_table("t", SCHEMA, partition_by=["part"], properties={MODE: "name"})
    with lake.transaction("R") as txn:
        txn.insert("t", data([1, 2]))
    files = set(lake.snapshot("t").files)
    keys = backend.all_keys()
    with lake.transaction("R") as txn:
        txn.rename_column("t", "name", "label")
        txn.rename_column("t", "part", "region")  # a partition column may be renamed
        txn.drop_columns("t", ["info"])
    snap = lake.snapshot("t")
    assert set(snap.files) == files
    commit = backend.store().get(f"t/_delta_log/{snap.version:020d}.json").data.decode()
    kinds = {k for line in commit.splitlines() if line for k in json.loads(line)}
    assert "metaData" in kinds and not kinds & {"add", "remove"}
    data_keys = [k for k in backend.all_keys() if "/_delta_log/" not in k and "_lakevilla" not in k]
    assert data_keys == [k for k in keys if "/_delta_log/" not in k and "_lakevilla" not in k]
    assert snap.metadata.partition_columns == ["region"]
    expected = [{"id": 1, "label": "n1", "region": "a"}, {"id": 2, "label": "n2", "region": "a"}]
    assert by_id(lake.read("t").to_pylist()) == expected
    assert lake.read("t", where="region = 'a' AND label = 'n2'").to_pylist() == expected[1:]
    assert delta_rs_rows(backend, "t") == expected
    # a new column of a dropped one's name is another column: the old values stay unread
    with lake.transaction("R") as txn:
        txn.add_columns("t", {"info": pa.string()})
        txn.insert("t", {"id": [3], "label": ["n3"], "region": ["b"], "info": ["new"]})
    got = by_id(lake.read("t").to_pylist())
    assert [r["info"] for r in got] == [None, None, "new"]
    assert delta_rs_rows(backend, "t") == got


def test_rename_and_drop_are_refused_without_column_mapping_naming_the_property(local_backend):
    lake = local_backend.lake()
    lake.create_table("t", SCHEMA)
    before = local_backend.all_keys()
    with pytest.raises(lv.SchemaEvolutionError, match=MODE):
        with lake.transaction("R") as txn:
            txn.rename_column("t", "name", "label")
    with pytest.raises(lv.SchemaEvolutionError, match=MODE):
        with lake.transaction("R") as txn:
            txn.drop_columns("t", "name")
    assert local_backend.all_keys() == before


def test_drop_refuses_partition_columns_the_last_column_and_unknown_ones(local_backend):
    lake = local_backend.lake()
    lake.create_table("t", SCHEMA, partition_by=["part"], properties={MODE: "name"})
    lake.create_table("one", pa.schema([("id", pa.int64())]), properties={MODE: "name"})
    for table, names, why in (("t", ["part"], "partition"), ("one", ["id"], "at least one"),
                              ("t", ["nope"], "no column"), ("t", ["id", "ID"], "twice")):
        with pytest.raises((lv.SchemaEvolutionError, lv.InvalidArgumentError), match=why):
            with lake.transaction("R") as txn:
                txn.drop_columns(table, names)
    with pytest.raises(lv.SchemaEvolutionError, match="already exists"):
        with lake.transaction("R") as txn:
            txn.rename_column("t", "id", "Name")


def test_columns_a_check_constraint_reads_are_refused(local_backend):
    lake = local_backend.lake()
    lake.create_table("t", pa.schema([("id", pa.int64()), ("price", pa.int64()),
                                      ("note", pa.string())]),
                      properties={MODE: "name", "delta.constraints.pos": "id > 0"})
    with pytest.raises(lv.SchemaEvolutionError, match="pos"):
        with lake.transaction("R") as txn:
            txn.rename_column("t", "id", "key")
    with pytest.raises(lv.SchemaEvolutionError, match="pos"):
        with lake.transaction("R") as txn:
            txn.drop_columns("t", ["id"])
    with lake.transaction("R") as txn:  # a column no rule reads is free
        txn.rename_column("t", "note", "remark")
        txn.drop_columns("t", ["remark"])
    assert lake.snapshot("t").schema.names == ["id", "price"]


def test_generated_column_inputs_are_refused_and_the_generated_column_itself_drops(tmp_path):
    lake = lv.Lake(str(tmp_path))
    lake.create_table("g", pa.schema([("price", pa.int64())]), properties={MODE: "name"})
    # a generated column added by hand-written metadata, as Delta would write it
    snap = lake.snapshot("g")
    md = snap.metadata.to_json()
    fields = json.loads(md["schemaString"])["fields"]
    fields.append({"name": "doubled", "type": "long", "nullable": True, "metadata": {
        "delta.generationExpression": "price * 2", ID_KEY: 2, PHYSICAL_KEY: "col-doubled"}})
    md["schemaString"] = json.dumps({"type": "struct", "fields": fields})
    md["configuration"] = {**md["configuration"], MAX_ID: "2"}
    proto = {"minReaderVersion": 2, "minWriterVersion": 5}
    (tmp_path / "g" / "_delta_log" / f"{1:020d}.json").write_text(
        "\n".join(json.dumps(x) for x in ({"commitInfo": {"operation": "ADD COLUMNS"}},
                                          {"protocol": proto}, {"metaData": md})) + "\n")
    lake = lv.Lake(str(tmp_path))
    with lake.transaction("R") as txn:
        txn.insert("g", {"price": [4]})
    with pytest.raises(lv.SchemaEvolutionError, match="generation expression"):
        with lake.transaction("R") as txn:
            txn.drop_columns("g", ["price"])
    with pytest.raises(lv.SchemaEvolutionError, match="generation expression"):
        with lake.transaction("R") as txn:
            txn.rename_column("g", "price", "cost")
    with lake.transaction("R") as txn:
        txn.drop_columns("g", ["doubled"])
    assert lake.read("g").to_pylist() == [{"price": 4}]


@pytest.mark.parametrize("features, redone", [("R", True), ("R,CT,I", True), ("CT", False)])
def test_a_writer_that_started_before_a_rename_conflicts_with_it(local_backend, features,
                                                                 redone):
    """Two writers: an insert that started before a rename committed. As for any metadata change,
    the insert does not commit over it blindly: under R it is redone on the renamed table (its
    rows read under the new name, by us and by delta-rs), without R it aborts."""
    lake = local_backend.lake()
    lake.create_table("t", SCHEMA, partition_by=["part"], properties={MODE: "name"})
    with lake.transaction("R") as txn:
        txn.insert("t", data([1]))
    writer = lake.transaction(features)
    writer.__enter__()
    writer.insert("t", data([2]))
    with local_backend.lake().transaction("R") as other:
        other.rename_column("t", "name", "label")
    if redone:
        writer.__exit__(None, None, None)
        assert writer.stats["conflicts"] == 1 and writer.stats["redos"] == 1
    else:
        with pytest.raises(lv.TransactionAborted, match="schema or table properties changed"):
            writer.__exit__(None, None, None)
    got = by_id(lake.read("t").to_pylist())
    assert [(r["id"], r["label"]) for r in got] == [(1, "n1"), (2, "n2")][:2 if redone else 1]
    assert set(got[0]) == {"id", "label", "info", "part"}
    assert delta_rs_rows(local_backend, "t") == got


@pytest.mark.parametrize("features", ["R", "CT"])
def test_a_drop_after_a_concurrent_insert_leaves_the_inserted_rows_without_the_column(
        local_backend, features):
    """The other order: the insert commits while the drop waits. The drop commits (as an
    ``add_columns`` would: it read nothing), and the rows inserted meanwhile, written under
    physical names, read without the dropped column."""
    lake = local_backend.lake()
    lake.create_table("t", SCHEMA, partition_by=["part"], properties={MODE: "name"})
    dropper = lake.transaction(features)
    dropper.__enter__()
    dropper.drop_columns("t", ["name"])
    with local_backend.lake().transaction("R") as other:
        other.insert("t", data([3]))
    dropper.__exit__(None, None, None)
    expected = [{"id": 3, "info": {"score": 30, "tag": "t3"}, "part": "a"}]
    assert lake.read("t").to_pylist() == expected
    assert delta_rs_rows(local_backend, "t") == expected


@pytest.mark.parametrize("features", ["", "R", "R,CT", "R,CT,I"])
def test_every_feature_set_writes_a_mapped_table_delta_rs_reads(local_backend, features):
    """A table created column-mapped (inside the transaction where the feature set can), a
    streamed insert, an update, a rename and a delete, in each feature set."""
    lake = local_backend.lake()
    with lake.transaction(features) as txn:
        if "I" in features:  # I creates no table inside a transaction (yet)
            lake.create_table("t", SCHEMA, partition_by=["part"], properties={MODE: "id"})
        else:
            txn.create_table("t", SCHEMA, partition_by=["part"], properties={MODE: "id"})
        txn.insert("t", data([1, 2]))
        txn.insert("t", pa.RecordBatchReader.from_batches(SCHEMA, data([3, 4], "b").to_batches()))
        txn.update("t", where="id = 1", set={"name": "'x'"})
        txn.rename_column("t", "name", "label")
        txn.delete("t", where="label = 'n2'")
    got = by_id(lake.read("t").to_pylist())
    assert [(r["id"], r["label"]) for r in got] == [(1, "x"), (3, "n3"), (4, "n4")]
    assert delta_rs_rows(local_backend, "t") == got
    assert_files_are_physical(local_backend.store(), local_backend.uri, lake, "t")


@pytest.mark.parametrize("mode", ["name", "id"])
def test_columns_added_by_two_writers_never_share_an_id(local_backend, mode):
    """Two writers add a column each and write values to it; the second commits after the
    first. Its files already carry the ids it planned, which the first took: in ``name`` mode
    (files resolve by physical name) the redo numbers its column anew and every value reads
    back; in ``id`` mode it is refused rather than let a reader take its values for the other
    column's."""
    lake = local_backend.lake()
    lake.create_table("t", SCHEMA, partition_by=["part"], properties={MODE: mode})
    second = lake.transaction("R")
    second.__enter__()
    second.add_columns("t", {"b": pa.string()})
    second.insert("t", {"id": [2], "part": ["a"], "b": ["bee"]})
    with local_backend.lake().transaction("R") as first:
        first.add_columns("t", {"a": pa.int64()})
        first.insert("t", {"id": [1], "part": ["a"], "a": [7]})
    if mode == "id":
        with pytest.raises(lv.SchemaEvolutionError, match="ids planned"):
            second.__exit__(None, None, None)
        expected = [{"id": 1, "a": 7}]
    else:
        second.__exit__(None, None, None)
        expected = [{"id": 1, "a": 7, "b": None}, {"id": 2, "a": None, "b": "bee"}]
    md = lake.snapshot("t").metadata
    ids = all_ids(fields_of(md))
    assert len(ids) == len(set(ids)) and md.configuration[MAX_ID] == str(max(ids))
    got = by_id(lake.read("t", columns=list(expected[0])).to_pylist())
    assert got == expected
    assert [{k: r[k] for k in expected[0]} for r in delta_rs_rows(local_backend, "t")] == expected


def test_change_data_files_of_a_mapped_table_name_columns_physically(local_backend):
    """A column-mapped table with a change data feed: its ``_change_data/`` files name columns
    physically as its data files do (delta-rs does not read the feed of a mapped table yet), and
    ``lake.changes`` reads them as the same changes as on the same table without mapping."""
    changes = {}
    for mode in ("none", "name"):
        lake = local_backend.lake()
        table = f"t_{mode}"
        lake.create_table(table, SCHEMA, partition_by=["part"],
                          properties={MODE: mode, "delta.enableChangeDataFeed": "true"})
        with lake.transaction("R") as txn:
            txn.insert(table, data([1, 2, 3]))
        with lake.transaction("R") as txn:
            txn.update(table, where="id = 2", set={"name": "'two'"})
            txn.delete(table, where="id = 3")
        got = lake.changes(table)[table]
        changes[mode] = sorted((r["id"], r["name"], r["info"]["score"], r["part"],
                                r["_change_type"], r["_commit_version"]) for r in got.to_pylist())
    assert changes["name"] == changes["none"]
    assert {c[1:5] for c in changes["name"] if c[5] == 2} == {  # read from the cdc files
        ("n2", 20, "a", "update_preimage"), ("two", 20, "a", "update_postimage"),
        ("n3", 30, "a", "delete")}
    phys = physical(lake.snapshot("t_name").metadata)
    store = local_backend.store()
    cdc = [m.key for m in store.list("t_name/_change_data/")]
    assert cdc
    for key in cdc:
        names = set(pq.read_schema(io.BytesIO(store.get(key).data)).names)
        assert names == {phys["id"], phys["name"], phys["info"], "_change_type"}
