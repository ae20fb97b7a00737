"""Schema evolution: new nullable columns, as a metaData action in the table's commit.

Only additions are made (Delta's ``mergeSchema`` without type widening): a column that
exists with another type, or a new column that is not nullable, is refused before anything
is written. The new fields travel with the operation (``Statement.add_fields``, Delta
StructField JSON) so that the view, a redo on a newer snapshot and a resumed transaction
all rebuild the same schema from the base metadata. Files written before the change have
no such column; readers (ours and every Delta reader) read it as NULL there. On a column-mapped
table a new column's physical name (``col-<uuid>``) and id (the next after
``delta.columnMapping.maxColumnId``) are planned with it (``mapping_changes``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pyarrow as pa

from ..data.schemas import schema_of_data, to_arrow_schema
from ..delta import column_mapping, mapping_changes
from ..delta.actions import Metadata
from ..delta.features import protocol_for
from ..delta.schema import arrow_field_to_delta, delta_field_to_arrow, schema_from_json
from ..errors import SchemaEvolutionError


def requested_fields(table: str, spec: Any) -> list[pa.Field]:
    """``add_columns``' argument: a pyarrow schema, field or list of them, a dict name -> type."""
    if isinstance(spec, pa.Field):
        spec = [spec]
    try:
        fields = list(to_arrow_schema(spec))
    except (TypeError, ValueError, pa.ArrowException) as e:
        raise SchemaEvolutionError(f"add_columns on {table!r}: cannot read the "
                                   f"new fields ({e})") from None
    if not fields:
        raise SchemaEvolutionError(f"add_columns on {table!r}: no fields given")
    return fields


def data_fields(data: Any) -> list[pa.Field]:
    """The fields of rows to insert (every column nullable, as Delta's mergeSchema adds them)."""
    if isinstance(data, pa.Table | pa.RecordBatch):
        return [f.with_nullable(True) for f in data.schema]
    return list(schema_of_data(data))


def plan(table: str, schema: pa.Schema, fields: list[pa.Field], *, strict: bool,
         metadata: Metadata | None = None) -> list[dict]:
    """The fields to add to ``schema`` (as Delta JSON). ``strict``: a column that exists is an
    error (``add_columns``); otherwise one with the same type is skipped
    (``schema_mode="merge"``). On a column-mapped table (``metadata``: the view's) they are
    planned with their physical names and ids."""
    have = {f.name.lower(): f for f in schema}
    seen: set[str] = set()
    out = []
    for f in fields:
        key = f.name.lower()
        if key in seen:
            raise SchemaEvolutionError(f"{table!r}: column {f.name!r} is given twice")
        seen.add(key)
        old = have.get(key)
        if old is not None:
            if strict:
                raise SchemaEvolutionError(f"add_columns on {table!r}: "
                                           f"column {old.name!r} already exists")
            if not old.type.equals(f.type) and not _castable(f.type, old.type):
                raise SchemaEvolutionError(
                    f"{table!r}: column {old.name!r} is {old.type} in the table and {f.type} in "
                    "the data; schema evolution only adds columns (cast the data, or "
                    "overwrite the table)")
            continue
        if not f.nullable:
            raise SchemaEvolutionError(
                f"{table!r}: new column {f.name!r} must be nullable (rows already in the "
                "table have no value)")
        if pa.types.is_null(f.type):
            raise SchemaEvolutionError(f"{table!r}: new column {f.name!r} holds only nulls, so "
                                       "its type is unknown")
        out.append(arrow_field_to_delta(f))
    if column_mapping.mode_of(schema) != "none" and metadata is not None:
        out = mapping_changes.planned(out, metadata)
    return out


def _castable(src: pa.DataType, dst: pa.DataType) -> bool:
    """Data of type ``src`` may go into a column of ``dst`` (the insert's safe cast checks each
    value): the same family of types, as a narrower integer into a wider one. Anything else
    (text into a number, a number into text) is a type change, which evolution does not make."""
    t = pa.types
    families = [lambda x: t.is_integer(x), lambda x: t.is_floating(x) or t.is_integer(x),
                lambda x: t.is_string(x) or t.is_large_string(x),
                lambda x: t.is_binary(x) or t.is_large_binary(x), lambda x: t.is_timestamp(x),
                lambda x: t.is_decimal(x), lambda x: t.is_date(x)]
    return any(f(src) and f(dst)
               for f in families if not (t.is_floating(src) and t.is_integer(dst)))


def evolve(table: str, metadata: Metadata, protocol, add: list[dict]) -> Metadata:
    """``metadata`` with the fields of ``add`` not yet in it appended (existing fields' JSON,
    field metadata included, is kept byte for byte)."""
    doc = json.loads(metadata.schema_string)
    have = {f["name"].lower(): f for f in doc["fields"]}
    new = []
    for d in add:
        old = have.get(d["name"].lower())
        if old is None:
            new.append(d)
        elif not delta_field_to_arrow(old).type.equals(delta_field_to_arrow(d).type):
            raise SchemaEvolutionError(f"{table!r}: column {old['name']!r} changed type "
                                       f"concurrently ({old['type']!r}, ours {d['type']!r})")
    if not new:
        return metadata
    doc["fields"] = [*doc["fields"], *new]
    text = json.dumps(doc, separators=(",", ":"))
    mode = column_mapping.mode(table, protocol, metadata)
    if mode != "none":
        metadata = mapping_changes.with_columns(table, metadata, new, by_id=mode == "id")
        text = metadata.schema_string
    need = protocol_for(schema_from_json(text))
    if need.min_reader_version > protocol.min_reader_version \
            or not set(need.writer_features or []) <= set(protocol.writer_features or []):
        raise SchemaEvolutionError(
            f"{table!r}: the new column(s) need table features {need.writer_features} this table's "
            "protocol lacks (timestamp without time zone); lakevilla does not upgrade a "
            "table's protocol")
    return dataclasses.replace(metadata, schema_string=text)
