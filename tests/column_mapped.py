"""A column-mapped Delta table written by hand (data files, statistics, log), as Spark would write
one, for the read tests of both engines.

Columns (logical name, Delta id): ``id`` 1, ``name`` 2 (renamed ``label`` at version 2), ``info``
3, a struct of ``score`` 4 and ``tag`` 5, ``part`` 6, the partition column, and ``notes`` 7, a list
of structs of ``k`` 8. Every physical
name is ``col-<uuid>``, nested fields included. The files name their columns physically, as Spark
writes them, or (``renamed_files``, for ``id`` mode) otherwise still (``file_<id>``), so that only
the Parquet field ids match, which is all the protocol lets an ``id``-mode reader go by.
Versions: 0 adds a file of part ``x`` (ids 1-3), 1 a file of part ``y`` (ids 10-12), 2 renames
``name`` to ``label``.
"""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lakevilla.delta.column_mapping import ID_KEY, PHYSICAL_KEY
from lakevilla.engines.api import data_file_key

IDS = {"id": 1, "name": 2, "info": 3, "score": 4, "tag": 5, "part": 6, "notes": 7, "k": 8}
FILES = {"x": [1, 2, 3], "y": [10, 11, 12]}


def rows(part: str, name: str = "name") -> list[dict]:
    """The logical rows of ``part``'s file (``name``: that column's name at the version read)."""
    return [{"id": i, name: f"n{i}", "info": {"score": i * 10, "tag": f"t{i}"}, "part": part,
             "notes": [{"k": f"k{i}"}] * (i % 3)}
            for i in FILES[part]]


def _physical() -> dict[str, str]:
    return {k: f"col-{uuid.uuid4()}" for k in IDS}


def _meta(key: str, phys: dict[str, str]) -> dict:
    return {"delta.columnMapping.id": IDS[key], "delta.columnMapping.physicalName": phys[key]}


def _schema_string(phys: dict[str, str], name: str) -> str:
    def field(key: str, typ, shown: str | None = None) -> dict:
        return {"name": shown or key, "type": typ, "nullable": True, "metadata": _meta(key, phys)}

    info = {"type": "struct", "fields": [field("score", "long"), field("tag", "string")]}
    notes = {"type": "array", "containsNull": True,
             "elementType": {"type": "struct", "fields": [field("k", "string")]}}
    return json.dumps({"type": "struct", "fields": [
        field("id", "long"), field("name", "string", name), field("info", info),
        field("part", "string"), field("notes", notes)]})


def _file_name(key: str, phys: dict[str, str], renamed: bool) -> str:
    return f"file_{IDS[key]}" if renamed else phys[key]


def _write_file(root: Path, part: str, phys: dict[str, str], renamed: bool) -> dict:
    def f(key: str, t: pa.DataType) -> pa.Field:
        return pa.field(_file_name(key, phys, renamed), t,
                        metadata={b"PARQUET:field_id": str(IDS[key]).encode()})

    info_t = pa.struct([f("score", pa.int64()), f("tag", pa.string())])
    notes_t = pa.list_(pa.field("element", pa.struct([f("k", pa.string())])))
    schema = pa.schema([f("id", pa.int64()), f("name", pa.string()), f("info", info_t),
                        f("notes", notes_t)])
    data = rows(part)
    table = pa.table([pa.array([r["id"] for r in data], pa.int64()),
                      pa.array([r["name"] for r in data]),
                      pa.array([{_file_name("score", phys, renamed): r["info"]["score"],
                                 _file_name("tag", phys, renamed): r["info"]["tag"]} for r in data],
                               info_t),
                      pa.array([[{_file_name("k", phys, renamed): n["k"]} for n in r["notes"]]
                                for r in data], notes_t)], schema=schema)
    rel = f"{part}/part-00000-{uuid.uuid4()}.c000.snappy.parquet"  # no hive folder names
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, root / rel)
    ids = [r["id"] for r in data]
    stats = {"numRecords": len(data),
             "minValues": {phys["id"]: min(ids), phys["name"]: f"n{min(ids)}",
                           phys["info"]: {phys["score"]: min(ids) * 10}},
             "maxValues": {phys["id"]: max(ids), phys["name"]: f"n{max(ids)}",
                           phys["info"]: {phys["score"]: max(ids) * 10}},
             "nullCount": {phys["id"]: 0, phys["name"]: 0,
                           phys["info"]: {phys["score"]: 0, phys["tag"]: 0}}}
    return {"add": {"path": rel, "partitionValues": {phys["part"]: part},
                    "size": (root / rel).stat().st_size, "modificationTime": 1700000000000,
                    "dataChange": True, "stats": json.dumps(stats)}}


def write_table(root: Path, mode: str, renamed_files: bool = False) -> dict[str, str]:
    """The table at ``root`` in ``mode`` (``name`` or ``id``); its physical names by key."""
    phys = _physical()
    log = root / "_delta_log"
    log.mkdir(parents=True)

    def metadata(name: str) -> dict:
        return {"metaData": {
            "id": "6d8e1c1a-0000-4000-8000-000000000001", "format": {"provider": "parquet",
                                                                     "options": {}},
            "schemaString": _schema_string(phys, name), "partitionColumns": ["part"],
            "configuration": {"delta.columnMapping.mode": mode,
                              "delta.columnMapping.maxColumnId": str(max(IDS.values()))},
            "createdTime": 1700000000000}}

    def commit(version: int, op: str, *actions: dict) -> None:
        info = {"commitInfo": {"timestamp": 1700000000000 + version, "operation": op}}
        (log / f"{version:020d}.json").write_text(
            "\n".join(json.dumps(a) for a in (info, *actions)) + "\n")

    commit(0, "CREATE TABLE", {"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}},
           metadata("name"), _write_file(root, "x", phys, renamed_files))
    commit(1, "WRITE", _write_file(root, "y", phys, renamed_files))
    commit(2, "RENAME COLUMN", metadata("label"))
    return phys


# -- checking what lakevilla writes -------------------------------------------------------

def fields_of(metadata) -> list[dict]:
    return json.loads(metadata.schema_string)["fields"]


def physical(metadata) -> dict[str, str]:
    """Physical name by logical top-level name."""
    return {f["name"]: f["metadata"][PHYSICAL_KEY] for f in fields_of(metadata)}


def all_ids(fields: list[dict]) -> list[int]:
    out = []
    for f in fields:
        out.append(f["metadata"][ID_KEY])
        t = f["type"]
        if isinstance(t, dict) and t.get("type") == "struct":
            out.extend(all_ids(t["fields"]))
    return out


def assert_files_are_physical(store, uri: str, lake, table: str, part: str = "part",
                              struct: str = "info") -> None:
    """Every live data file of ``table`` (made by ``lake`` at ``uri``) names its columns
    physically with field ids; partition values (of column ``part``) and statistics (nested
    ones of ``struct`` too) are keyed by physical name."""
    snap = lake.snapshot(table)
    phys = physical(snap.metadata)
    logical = set(phys) - set(phys.values())
    assert snap.files
    for add in snap.files.values():
        assert set(add.partition_values) == {phys[part]}
        stats = json.loads(add.stats)
        for key in ("minValues", "maxValues", "nullCount"):
            assert not set(stats[key]) & logical, stats[key]
            assert set(stats[key]) <= set(phys.values())
        info = next(f for f in fields_of(snap.metadata) if f["name"] == struct)
        nested = {f["name"]: f["metadata"][PHYSICAL_KEY] for f in info["type"]["fields"]}
        for key in ("minValues", "maxValues", "nullCount"):  # struct fields nest physically too
            assert set(stats[key].get(phys[struct], {})) <= set(nested.values())
        file = pq.read_schema(io.BytesIO(
            store.get(data_file_key(table, add.path, uri)).data))
        assert not set(file.names) & logical
        assert set(file.names) <= set(phys.values())
        ids = {f["name"]: f["metadata"][ID_KEY] for f in fields_of(snap.metadata)}
        by_phys = {phys[n]: ids[n] for n in phys}
        for f in file:
            assert int(f.metadata[b"PARQUET:field_id"]) == by_phys[f.name]
