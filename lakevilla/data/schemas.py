"""What a table's schema can be given as, turned into the pyarrow schema lakevilla keeps.

Accepted: a ``pyarrow.Schema``, a dict ``{name: type}``, a list of fields, a Spark
``StructType``, or a frame whose schema is taken (Spark or pandas DataFrame, pyarrow
table). Spark types are read through ``StructType.json()``, which is exactly Delta's
``schemaString`` format, so no protocol module imports pyspark.

A schema taken from a frame makes every column nullable, as Spark does when it writes a
DataFrame to files: a frame's nullability describes that frame, not every row the table
will get. An explicit ``StructType`` keeps its nullability.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..delta.schema import schema_from_json
from ..errors import CorruptLogError, SchemaMismatchError


def _is_struct_type(obj: Any) -> bool:
    return callable(getattr(obj, "json", None)) and callable(getattr(obj, "fieldNames", None))


def _is_spark_frame(obj: Any) -> bool:
    return hasattr(type(obj), "schema") and callable(getattr(obj, "toArrow", None)) and not isinstance(obj, pa.Table)


def _is_pandas_frame(obj: Any) -> bool:
    return type(obj).__name__ == "DataFrame" and hasattr(obj, "dtypes") and hasattr(obj, "to_dict")


def _from_spark_json(text: str) -> pa.Schema:
    try:
        return schema_from_json(text)
    except CorruptLogError as e:  # a Spark type Delta has no name for (interval, variant, ...)
        raise SchemaMismatchError(f"the Spark schema has a type a Delta table cannot hold: {e}") from None


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_nullable(True) for f in schema])


def rows_to_table(rows: list) -> pa.Table:
    """Rows as dicts; a key any row has is a column (pyarrow's ``from_pylist`` takes the first
    row's keys and would silently drop a column only later rows carry). Missing keys are NULL."""
    bad = next((r for r in rows if not isinstance(r, dict)), None)
    if bad is not None:
        raise SchemaMismatchError(f"a list of rows must hold dicts (column -> value), got a {type(bad).__name__}")
    names = list(dict.fromkeys(k for r in rows for k in r))
    try:
        return pa.table({n: pa.array([r.get(n) for r in rows]) for n in names}) if names else pa.table({})
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SchemaMismatchError(f"rows do not form columns of one type each: {e}") from None


def schema_of_data(data: Any) -> pa.Schema:
    """The schema of rows given as a Spark, pandas or pyarrow frame, a dict of columns or a
    list of row dicts (every column nullable)."""
    if isinstance(data, pa.Table | pa.RecordBatch):
        schema = data.schema
    elif _is_spark_frame(data):
        schema = _from_spark_json(data.schema.json())
    elif _is_pandas_frame(data):
        schema = pa.Schema.from_pandas(data, preserve_index=False)
    elif isinstance(data, dict):
        schema = pa.table(data).schema
    elif isinstance(data, list):
        schema = rows_to_table(data).schema
    else:
        raise SchemaMismatchError(f"cannot take a schema from a {type(data).__name__}: pass a Spark, pandas or "
                                  "pyarrow frame, a dict of columns or a list of row dicts")
    untyped = [f.name for f in schema if pa.types.is_null(f.type)]
    if untyped:
        raise SchemaMismatchError(f"column(s) {untyped} hold only nulls, so their type is unknown: pass schema=")
    return _nullable(schema.remove_metadata())


def to_arrow_schema(schema: Any) -> pa.Schema:
    """A table schema from any of the forms in the module docstring."""
    if isinstance(schema, pa.Schema):
        return schema
    if isinstance(schema, dict):
        return pa.schema(list(schema.items()))
    if isinstance(schema, list | tuple):
        return pa.schema(schema)
    if _is_struct_type(schema):
        return _from_spark_json(schema.json())
    if isinstance(schema, pa.Table | pa.RecordBatch) or _is_spark_frame(schema) or _is_pandas_frame(schema):
        return schema_of_data(schema)
    raise SchemaMismatchError(f"schema must be a pyarrow.Schema, a dict or list of fields, a Spark StructType or "
                              f"a DataFrame, got {type(schema).__name__}")


def table_spec(name: str, schema: Any, partition_by: list[str] | str | None, data: Any) -> tuple[pa.Schema, list[str]]:
    """The checked schema and partition columns of a table to create (``create_table``'s
    arguments, in a lake or in a transaction)."""
    if schema is None and data is None:
        raise SchemaMismatchError(f"create_table({name!r}) needs a schema or data=")
    schema = to_arrow_schema(schema) if schema is not None else schema_of_data(data)
    if len(schema) == 0:
        raise SchemaMismatchError("a table needs at least one column")
    names = [f.name for f in schema]
    if len({n.lower() for n in names}) != len(names):
        raise SchemaMismatchError(f"duplicate column names in {names}")
    parts = [partition_by] if isinstance(partition_by, str) else list(partition_by or [])
    for p in parts:
        if p not in names:
            raise SchemaMismatchError(f"partition column {p!r} is not in the schema {names}")
    if parts and len(parts) == len(names):
        raise SchemaMismatchError("a table needs at least one column that is not a partition column")
    return schema, parts
