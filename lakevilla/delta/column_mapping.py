"""Column mapping (PROTOCOL.md, "Column Mapping"): logical names in the API, physical ones on disk.

A column-mapped table names every column, nested struct fields included, twice: the logical
(display) name in the schema, which a rename changes, and a physical name plus a 32-bit id, fixed
when the column is added (field metadata ``delta.columnMapping.physicalName`` and
``delta.columnMapping.id``). Data files name their columns physically; ``partitionValues`` and
statistics are keyed by physical name. In ``name`` mode a reader finds a file's column by its
physical name, in ``id`` mode by its Parquet field id; a column a file lacks reads as nulls.

The table's Arrow schema (``logical_schema``, what ``Snapshot.schema`` returns) has the logical
names and carries the mapping with it: each mapped field's physical name and id in its Arrow
field metadata, the mode in the schema's metadata. So everything that already receives the
schema (pruning, the engines) can resolve physical names without a new parameter, and a table
without column mapping keeps exactly the schema it had.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from ..errors import CorruptLogError, UnsupportedTableFeatureError
from .actions import AddFile, Metadata, Protocol
from .schema import delta_type_to_arrow, schema_from_json

MODE_KEY = "delta.columnMapping.mode"
ID_KEY = "delta.columnMapping.id"
PHYSICAL_KEY = "delta.columnMapping.physicalName"
PARQUET_ID_KEY = b"PARQUET:field_id"  # how pyarrow reads and writes a Parquet field id
MODES = ("none", "name", "id")
_MODE = MODE_KEY.encode()
_ID = ID_KEY.encode()
_PHYSICAL = PHYSICAL_KEY.encode()


def mode(table: str, protocol: Protocol, metadata: Metadata) -> str:
    """``none``, ``name`` or ``id``. The property counts only where the protocol supports the
    feature (reader version 2, or 3 listing ``columnMapping``), as PROTOCOL.md says; an unknown
    mode is refused rather than read wrongly."""
    cfg = {k.lower(): v for k, v in metadata.configuration.items()}
    value = str(cfg.get(MODE_KEY.lower(), "none")).lower()
    supported = protocol.min_reader_version == 2 or (
        protocol.min_reader_version == 3 and "columnMapping" in (protocol.reader_features or []))
    if not supported:
        return "none"
    if value not in MODES:
        raise UnsupportedTableFeatureError(table, "columnMapping", f"{MODE_KEY}={value}")
    return value


# -- the logical schema -----------------------------------------------------------------------

def _mapped_type(t: Any) -> pa.DataType:
    """A Delta type as Arrow, every struct field carrying its physical name and id."""
    if isinstance(t, dict) and t.get("type") == "struct":
        return pa.struct([_mapped_field(f) for f in t["fields"]])
    if isinstance(t, dict) and t.get("type") == "array":
        return pa.list_(pa.field("element", _mapped_type(t["elementType"]),
                                 t.get("containsNull", True)))
    if isinstance(t, dict) and t.get("type") == "map":
        return pa.map_(_mapped_type(t["keyType"]),
                       pa.field("value", _mapped_type(t["valueType"]),
                                t.get("valueContainsNull", True)))
    return delta_type_to_arrow(t)


def _mapped_field(f: dict) -> pa.Field:
    """A field carrying its physical name and id. A field without them keeps its display name as
    physical name (as Delta on Spark reads it) and has no id (``id`` mode then reads nulls)."""
    md = f.get("metadata") or {}
    physical, fid = md.get(PHYSICAL_KEY, f["name"]), md.get(ID_KEY)
    if not isinstance(physical, str) or not physical or (
            fid is not None and (isinstance(fid, bool) or not isinstance(fid, int))):
        raise CorruptLogError(f"column {f.get('name')!r} of a column-mapped table has an invalid "
                              f"{PHYSICAL_KEY} or {ID_KEY} ({physical!r}, {fid!r})")
    meta = {_PHYSICAL: physical.encode()}
    if fid is not None:
        meta[_ID] = str(fid).encode()
    return pa.field(f["name"], _mapped_type(f["type"]), f.get("nullable", True), metadata=meta)


def logical_schema(table: str, protocol: Protocol, metadata: Metadata) -> pa.Schema:
    """The table's schema with logical names; mapped (``mode`` not none), its fields carry their
    physical names and ids, and the schema its mode."""
    m = mode(table, protocol, metadata)
    if m == "none":
        return schema_from_json(metadata.schema_string)
    try:
        fields = json.loads(metadata.schema_string)["fields"]
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptLogError(f"table {table!r}: schemaString is not a Delta schema "
                              f"({e})") from None
    return pa.schema([_mapped_field(f) for f in fields], metadata={_MODE: m.encode()})


# -- what readers ask of a logical schema ---------------------------------------------------------

def mode_of(schema: pa.Schema) -> str:
    """The mode a ``logical_schema`` carries (``none`` for any other schema)."""
    return (schema.metadata or {}).get(_MODE, b"none").decode()


def physical_name(field: pa.Field) -> str:
    """The name files, ``partitionValues`` and statistics use for ``field``."""
    md = field.metadata or {}
    return md[_PHYSICAL].decode() if _PHYSICAL in md else field.name


def field_id(field: pa.Field) -> int | None:
    md = field.metadata or {}
    return int(md[_ID]) if _ID in md else None


def physical_key(schema: pa.Schema, column: str) -> str:
    """The key of top-level ``column`` in ``partitionValues`` and statistics."""
    return physical_name(schema.field(column))


def plain(field: pa.Field) -> pa.Field:
    """``field`` as users see it: logical names, no mapping metadata at any depth."""
    return pa.field(field.name, _plain_type(field.type), field.nullable)


def _plain_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([plain(t.field(i)) for i in range(t.num_fields)])
    if pa.types.is_list(t):
        return pa.list_(plain(t.value_field))
    if pa.types.is_map(t):
        return pa.map_(plain(t.key_field), plain(t.item_field))
    return t


def physical_paths(schema: pa.Schema) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Logical -> physical path of every column and struct field at any depth (as statistics
    nest them); its inverse maps physical paths back."""
    out: dict[tuple[str, ...], tuple[str, ...]] = {}

    def walk(fields: list[pa.Field], logical: tuple[str, ...], physical: tuple[str, ...]) -> None:
        for f in fields:
            lp, pp = (*logical, f.name), (*physical, physical_name(f))
            out[lp] = pp
            if pa.types.is_struct(f.type):
                walk([f.type.field(i) for i in range(f.type.num_fields)], lp, pp)

    walk(list(schema), (), ())
    return out


# -- resolving a data file's columns ---------------------------------------------------------

def _file_id(f: pa.Field) -> int | None:
    raw = (f.metadata or {}).get(PARQUET_ID_KEY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _match(field: pa.Field, candidates: list[pa.Field], by_id: bool) -> pa.Field | None:
    if by_id:
        want = field_id(field)
        return next((c for c in candidates if want is not None and _file_id(c) == want), None)
    name = physical_name(field)
    return next((c for c in candidates if c.name == name), None)


def _file_fields(t: pa.DataType) -> list[pa.Field]:
    return [t.field(i) for i in range(t.num_fields)] if pa.types.is_struct(t) else []


def file_field(field: pa.Field, found: pa.Field | None, by_id: bool) -> pa.Field:
    """How to read logical ``field`` from a file: named as the file names it (``found``, the
    file's field resolved by ``_match``, or None when the file lacks it: then the physical name,
    read as nulls), in the table's type, struct fields in the table's order, resolved the same
    way below. Renaming the result back is positional (``relabel``)."""
    name = found.name if found is not None else physical_name(field)
    return pa.field(name, _file_type(field.type, found.type if found is not None else None, by_id),
                    field.nullable)


def _file_type(t: pa.DataType, ft: pa.DataType | None, by_id: bool) -> pa.DataType:
    if pa.types.is_struct(t):
        kids = _file_fields(ft) if ft is not None else []
        return pa.struct([file_field(t.field(i), _match(t.field(i), kids, by_id), by_id)
                          for i in range(t.num_fields)])
    if pa.types.is_list(t):
        inner = ft.value_type if ft is not None and pa.types.is_list(ft) else None
        return pa.list_(pa.field(t.value_field.name, _file_type(t.value_type, inner, by_id),
                                 t.value_field.nullable))
    if pa.types.is_map(t):
        fk = ft.key_type if ft is not None and pa.types.is_map(ft) else None
        fi = ft.item_type if ft is not None and pa.types.is_map(ft) else None
        return pa.map_(pa.field(t.key_field.name, _file_type(t.key_type, fk, by_id), False),
                       pa.field(t.item_field.name, _file_type(t.item_type, fi, by_id),
                                t.item_field.nullable))
    return t


def file_schema(schema: pa.Schema, columns: list[str], file: pa.Schema | None) -> pa.Schema:
    """The read schema for logical top-level ``columns`` of one data file whose own schema is
    ``file`` (None: not known, e.g. ``name`` mode before any footer is read; physical names are
    then used throughout, which is what ``name`` mode resolves to anyway)."""
    by_id = mode_of(schema) == "id"
    top = list(file) if file is not None else []
    out = []
    for c in columns:
        f = schema.field(c)
        out.append(pa.field(physical_name(f), _name_type(f.type), f.nullable) if file is None
                   else file_field(f, _match(f, top, by_id), by_id))
    return pa.schema(out)


def _nested(t: pa.DataType, struct_field: Callable[[pa.Field], pa.Field],
            again: Callable[[pa.DataType], pa.DataType]) -> pa.DataType:
    """``t`` with ``struct_field`` applied to its struct fields and ``again`` to the element,
    key and item types of its lists and maps (whose own field names Delta does not map)."""
    if pa.types.is_struct(t):
        return pa.struct([struct_field(t.field(i)) for i in range(t.num_fields)])
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, again(t.value_type), t.value_field.nullable))
    if pa.types.is_map(t):
        return pa.map_(pa.field(t.key_field.name, again(t.key_type), False),
                       pa.field(t.item_field.name, again(t.item_type), t.item_field.nullable))
    return t


def _name_type(t: pa.DataType) -> pa.DataType:
    """``t`` with physical names at every depth (``name`` mode, no file at hand)."""
    return _nested(t, lambda f: pa.field(physical_name(f), _name_type(f.type), f.nullable),
                   _name_type)


def relabel(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data``, read by a ``file_schema`` for ``schema``'s columns in the same order, with the
    logical names at every depth (positional and zero-copy: same layout, other names)."""
    target = pa.schema([plain(f) for f in schema])
    if not len(target):
        return data.select([])  # keeps the row count, which from_arrays would lose
    cols = [pa.chunked_array([c.view(f.type) for c in col.chunks], f.type)
            for col, f in zip(data.columns, target, strict=True)]
    return pa.Table.from_arrays(cols, schema=target)


def logical_partitions(schema: pa.Schema, partition_columns: tuple[str, ...] | list[str],
                       add: AddFile) -> AddFile:
    """``add`` with ``partitionValues`` keyed by logical name, as engines look them up (the log
    keys them by physical name)."""
    values = {c: add.partition_values.get(physical_key(schema, c)) for c in partition_columns}
    return dataclasses.replace(add, partition_values=values)


# -- writing a data file ----------------------------------------------------------------------

def _physical_field(field: pa.Field) -> pa.Field:
    """``field`` as a data file names it: its physical name, its id as Parquet field id (Delta
    writes ids in ``name`` mode too), struct fields the same below."""
    fid = field_id(field)
    meta = {PARQUET_ID_KEY: str(fid).encode()} if fid is not None else None
    return pa.field(physical_name(field), _physical_type(field.type), field.nullable,
                    metadata=meta)


def _physical_type(t: pa.DataType) -> pa.DataType:
    return _nested(t, _physical_field, _physical_type)


def physical_schema(schema: pa.Schema) -> pa.Schema:
    """A data file's schema for the logical ``schema``'s columns: physical names and ids."""
    return pa.schema([_physical_field(f) for f in schema])


def to_physical(schema: pa.Schema, data: pa.Table) -> pa.Table:
    """``data`` (columns of logical ``schema``, in any subset and order) as a data file holds it:
    every column and struct field under its physical name, with its Parquet field id
    (positional and zero-copy, the inverse of ``relabel``)."""
    target = physical_schema(pa.schema([schema.field(n) for n in data.column_names]))
    cols = [pa.chunked_array([c.view(f.type) for c in col.chunks], f.type)
            for col, f in zip(data.columns, target, strict=True)]
    return pa.Table.from_arrays(cols, schema=target)


def physical_values(schema: pa.Schema, values: dict[str, str | None]) -> dict[str, str | None]:
    """Partition values keyed by logical name, keyed as the log keys them (physical name)."""
    return {physical_key(schema, c): v for c, v in values.items()}


class _Table(typing.Protocol):
    """What ``as_written`` needs of a table (an engine's ``TableContext``)."""

    @property
    def schema(self) -> pa.Schema: ...

    @property
    def partition_columns(self) -> tuple[str, ...]: ...


def as_written(table: _Table, data: pa.Table, values: dict[str, str | None]
               ) -> tuple[pa.Table, list[str], dict[str, str | None]]:
    """One data file's rows (``table``'s logical columns), its partition columns and values,
    named as the file and the log name them: physically on a mapped table, as they are on any
    other."""
    schema, parts = table.schema, table.partition_columns
    if mode_of(schema) == "none":
        return data, list(parts), values
    return (to_physical(schema, data), [physical_key(schema, c) for c in parts],
            physical_values(schema, values))
