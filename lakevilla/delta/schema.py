"""Delta schema JSON <-> pyarrow schema."""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa

from ..errors import CorruptLogError, SchemaMismatchError

_PRIMITIVE_TO_ARROW = {
    "string": pa.string(),
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
# A Variant column reads as its Parquet encoding, the binary ``metadata`` and ``value`` of the
# Variant binary format, uninterpreted: a documented shape, never a guess at the value.
VARIANT = pa.struct([pa.field("metadata", pa.binary(), False),
                     pa.field("value", pa.binary(), False)])
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


def delta_type_to_arrow(t: Any) -> pa.DataType:
    if isinstance(t, str):
        if t in _PRIMITIVE_TO_ARROW:
            return _PRIMITIVE_TO_ARROW[t]
        if t == "variant":  # as Parquet stores an unshredded Variant: its two binary parts
            return VARIANT
        m = _DECIMAL.fullmatch(t)
        if m:
            return pa.decimal128(int(m.group(1)), int(m.group(2)))
        raise CorruptLogError(f"unknown Delta type {t!r}")
    kind = t.get("type")
    if kind == "struct":
        return pa.struct([delta_field_to_arrow(f) for f in t["fields"]])
    if kind == "array":
        return pa.list_(pa.field("element", delta_type_to_arrow(t["elementType"]),
                                 t.get("containsNull", True)))
    if kind == "map":
        return pa.map_(delta_type_to_arrow(t["keyType"]),
                       pa.field("value", delta_type_to_arrow(t["valueType"]),
                                t.get("valueContainsNull", True)))
    raise CorruptLogError(f"unknown Delta type {t!r}")


def delta_field_to_arrow(f: dict) -> pa.Field:
    return pa.field(f["name"], delta_type_to_arrow(f["type"]), f.get("nullable", True))


def schema_from_json(schema_string: str) -> pa.Schema:
    try:
        d = json.loads(schema_string)
    except ValueError as e:
        raise CorruptLogError(f"schemaString is not JSON: {e}") from None
    return pa.schema([delta_field_to_arrow(f) for f in d["fields"]])


def arrow_type_to_delta(t: pa.DataType) -> Any:
    if pa.types.is_large_string(t) or pa.types.is_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return "long"
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return "integer"
    if pa.types.is_int16(t) or pa.types.is_uint8(t):
        return "short"
    if pa.types.is_int8(t):
        return "byte"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_date32(t) or pa.types.is_date64(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_struct(t):
        return {"type": "struct",
                "fields": [arrow_field_to_delta(t.field(i)) for i in range(t.num_fields)]}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"type": "array", "elementType": arrow_type_to_delta(t.value_type),
                "containsNull": t.value_field.nullable}
    if pa.types.is_map(t):
        return {"type": "map", "keyType": arrow_type_to_delta(t.key_type),
                "valueType": arrow_type_to_delta(t.item_type),
                "valueContainsNull": t.item_field.nullable}
    raise SchemaMismatchError(f"arrow type {t} has no Delta equivalent")


def arrow_field_to_delta(f: pa.Field) -> dict:
    return {"name": f.name, "type": arrow_type_to_delta(f.type), "nullable": f.nullable,
            "metadata": _delta_field_metadata(f)}


# Field metadata whose values Delta writes as JSON numbers or booleans, not strings.
_TYPED_KEYS = {"delta.identity.start", "delta.identity.step", "delta.identity.highWaterMark",
               "delta.identity.allowExplicitInsert"}


def _delta_field_metadata(f: pa.Field) -> dict[str, Any]:
    """The ``delta.*`` keys of an Arrow field's metadata (identity columns, generated columns,
    invariants), so that a table can be created with them; other keys (Parquet's field ids,
    pandas') are not Delta's and stay out of the log."""
    out: dict[str, Any] = {}
    for k, v in (f.metadata or {}).items():
        key, value = k.decode(), v.decode()
        if not key.startswith("delta."):
            continue
        out[key] = json.loads(value.lower() if value.lower() in ("true", "false") else value) \
            if key in _TYPED_KEYS else value
    return out


def schema_to_json(schema: pa.Schema) -> str:
    return json.dumps({"type": "struct", "fields": [arrow_field_to_delta(f) for f in schema]},
                      separators=(",", ":"))


def field_metadata_keys(schema_string: str) -> set[str]:
    """All metadata keys on any field: invariants, generated columns, identity and
    column mapping live there."""
    keys: set[str] = set()

    def walk(t: Any) -> None:
        if isinstance(t, dict):
            for f in t.get("fields", []):
                keys.update((f.get("metadata") or {}).keys())
                walk(f.get("type"))
            for k in ("elementType", "keyType", "valueType"):
                if k in t:
                    walk(t[k])

    walk(json.loads(schema_string))
    return keys
