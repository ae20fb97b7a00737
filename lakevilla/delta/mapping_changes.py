"""Column mapping's changes to a table's metadata: ids and physical names for new columns,
enabling the mapping, renaming and dropping columns (PROTOCOL.md, "Column Mapping").

Every change here is metadata only, as in Delta: data files keep the physical names they were
written with, so a rename changes the display name alone and a dropped column stays in the files,
unread. A new column gets the next id (``delta.columnMapping.maxColumnId`` counts every struct
field at any depth) and a physical name ``col-<uuid>``; a column that already existed when the
mapping was switched on keeps its display name as physical name, which is what its files use.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import uuid
from collections.abc import Iterator
from typing import Any

from ..errors import SchemaEvolutionError
from .actions import Metadata
from .column_mapping import ID_KEY, MODE_KEY, PHYSICAL_KEY

MAX_ID_KEY = "delta.columnMapping.maxColumnId"


def requested_mode(configuration: dict[str, str]) -> str:
    """The mode the properties ask for (``none`` when unset), lower case."""
    cfg = {k.lower(): v for k, v in configuration.items()}
    return str(cfg.get(MODE_KEY.lower(), "none")).lower()


def _struct_fields(t: Any) -> Iterator[dict]:
    """Every struct field of Delta type ``t`` at any depth (through arrays and maps too)."""
    if not isinstance(t, dict):
        return
    if t.get("type") == "struct":
        for f in t.get("fields") or []:
            yield f
            yield from _struct_fields(f.get("type"))
    elif t.get("type") == "array":
        yield from _struct_fields(t.get("elementType"))
    elif t.get("type") == "map":
        yield from _struct_fields(t.get("keyType"))
        yield from _struct_fields(t.get("valueType"))


def all_fields(fields: list[dict]) -> Iterator[dict]:
    """``fields`` and every field nested in them."""
    return _struct_fields({"type": "struct", "fields": fields})


def new_physical_name() -> str:
    return f"col-{uuid.uuid4()}"


def planned(fields: list[dict], metadata: Metadata) -> list[dict]:
    """Copies of new ``fields`` mapped (at any depth): a ``col-<uuid>`` physical name and the
    next ids after ``metadata``'s. Decided once, when a statement plans its columns, so that
    every later run (a redo, a resume) writes and reads the same names and ids."""
    out = copy.deepcopy(fields)
    _number(out, max_column_id(metadata), keep_names=False)
    return out


def max_column_id(metadata: Metadata) -> int:
    """The greatest id the table has given out (the property, or the schema's own ids)."""
    doc = json.loads(metadata.schema_string)
    ids = [int(f.get("metadata", {}).get(ID_KEY, 0)) for f in all_fields(doc["fields"])]
    cfg = {k.lower(): v for k, v in metadata.configuration.items()}
    return max([int(cfg.get(MAX_ID_KEY.lower(), 0) or 0), *ids, 0])


def _number(fields: list[dict], last: int, keep_names: bool) -> int:
    """Give each field (at any depth) without an id the next one, and a physical name if it
    has none (its display name when ``keep_names``); the greatest id they have."""
    for f in all_fields(fields):
        md = f.setdefault("metadata", {})
        if ID_KEY not in md:
            last += 1
            md[ID_KEY] = last
        last = max(last, int(md[ID_KEY]))
        md.setdefault(PHYSICAL_KEY, f["name"] if keep_names else new_physical_name())
    return last


def _with(metadata: Metadata, fields: list[dict], last: int, **more: Any) -> Metadata:
    doc = json.loads(metadata.schema_string)
    doc["fields"] = fields
    config = {k: v for k, v in metadata.configuration.items() if k.lower() != MAX_ID_KEY.lower()}
    config[MAX_ID_KEY] = str(last)
    return dataclasses.replace(metadata, schema_string=json.dumps(doc, separators=(",", ":")),
                               configuration=config, **more)


def mapped(metadata: Metadata, keep_names: bool) -> Metadata:
    """``metadata`` (its mode property set) with every column mapped: a new table's columns get
    ``col-<uuid>`` names, an existing table's (``keep_names``) their display names, which is
    what their files already use."""
    fields = json.loads(metadata.schema_string)["fields"]
    last = _number(fields, max_column_id(metadata), keep_names)
    return _with(metadata, fields, last)


def with_columns(table: str, metadata: Metadata, new: list[dict], by_id: bool) -> Metadata:
    """``metadata`` with ``new`` fields (``planned``) appended. A planned id a concurrent change
    gave out meanwhile (a redo on a newer base) is given anew in ``name`` mode; in ``id`` mode
    files this transaction wrote already carry it, so the change is refused rather than let a
    reader take their values for another column's."""
    fields = json.loads(metadata.schema_string)["fields"]
    added = copy.deepcopy(new)
    top = max_column_id(metadata)
    taken = sorted(f["name"] for f in all_fields(added)
                   if int((f.get("metadata") or {}).get(ID_KEY, top + 1)) <= top)
    if taken and by_id:
        raise SchemaEvolutionError(
            f"{table!r}: a concurrent change of the schema took the column ids planned for "
            f"{taken}, which files of this transaction carry ({MODE_KEY}=id); run it again")
    for f in all_fields(added) if taken else ():
        f["metadata"].pop(ID_KEY, None)
    last = _number(added, top, keep_names=False)
    return _with(metadata, [*fields, *added], last)


def require_mapping(table: str, mode: str, what: str) -> None:
    """``what`` (a rename, a drop) needs column mapping: refused, naming the property."""
    if mode == "none":
        raise SchemaEvolutionError(
            f"{what} on {table!r} needs column mapping, as in Delta (the files name columns by "
            f"their first name): set {MODE_KEY} to 'name' first "
            f"(txn.set_properties({table!r}, {{{MODE_KEY!r}: 'name'}}))")


def _index(table: str, fields: list[dict], name: str) -> int:
    for i, f in enumerate(fields):
        if f["name"].lower() == name.lower():
            return i
    raise SchemaEvolutionError(f"{table!r} has no column {name!r}")


def renamed(table: str, metadata: Metadata, old: str, new: str) -> Metadata:
    """``metadata`` with top-level column ``old`` displayed as ``new`` (its physical name and id
    stay; a partition column is renamed in ``partitionColumns`` too)."""
    fields = json.loads(metadata.schema_string)["fields"]
    i = _index(table, fields, old)
    if any(f["name"].lower() == new.lower() for j, f in enumerate(fields) if j != i):
        raise SchemaEvolutionError(f"rename on {table!r}: column {new!r} already exists")
    was = fields[i]["name"]
    fields[i]["name"] = new
    parts = [new if p == was else p for p in metadata.partition_columns]
    return _with(metadata, fields, max_column_id(metadata), partition_columns=parts)


def dropped(table: str, metadata: Metadata, names: list[str]) -> Metadata:
    """``metadata`` without top-level columns ``names``. Delta refuses to drop a partition
    column or every column; the ids of dropped columns are never given out again."""
    fields = json.loads(metadata.schema_string)["fields"]
    gone = {fields[_index(table, fields, n)]["name"] for n in names}
    parts = [p for p in metadata.partition_columns if p in gone]
    if parts:
        raise SchemaEvolutionError(f"drop_columns on {table!r}: {parts} are partition columns, "
                                   "which Delta does not drop")
    kept = [f for f in fields if f["name"] not in gone]
    if not kept:
        raise SchemaEvolutionError(f"drop_columns on {table!r}: a table keeps at least one "
                                   "column")
    return _with(metadata, kept, max_column_id(metadata))
