"""What a table's schema can be given as, turned into the pyarrow schema lakevilla keeps, and
the one rule for which column types may be written into which (``assignable``).

Accepted: a ``pyarrow.Schema``, a dict ``{name: type}``, a list of fields, a Spark
``StructType``, or a frame whose schema is taken (Spark or pandas DataFrame, pyarrow
table). Spark types are read through ``StructType.json()``, which is exactly Delta's
``schemaString`` format, so no protocol module imports pyspark.

A frame that holds rows is data, not a schema (``rows_as_data``): ``create_table`` writes its
rows, as ``data=`` would, rather than drop them. A schema taken from a frame makes every column
nullable, as Spark does when it writes a
DataFrame to files: a frame's nullability describes that frame, not every row the table
will get. An explicit ``StructType`` keeps its nullability.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..delta.schema import arrow_type_to_delta, delta_type_to_arrow, schema_from_json
from ..errors import CorruptLogError, InvalidArgumentError, SchemaMismatchError


def _is_struct_type(obj: Any) -> bool:
    return callable(getattr(obj, "json", None)) and callable(getattr(obj, "fieldNames", None))


def _is_spark_frame(obj: Any) -> bool:
    return (hasattr(type(obj), "schema") and callable(getattr(obj, "toArrow", None))
            and not isinstance(obj, pa.Table))


def _is_polars_frame(obj: Any) -> bool:
    return (type(obj).__module__.split(".")[0] == "polars"
            and callable(getattr(obj, "to_arrow", None)))


def _is_pandas_frame(obj: Any) -> bool:
    return (type(obj).__name__ == "DataFrame" and hasattr(obj, "dtypes") and hasattr(obj, "to_dict")
            and not _is_polars_frame(obj))


def is_stream(obj: Any) -> bool:
    """Rows that arrive batch by batch (a ``pyarrow.RecordBatchReader``): written file by file."""
    return isinstance(obj, pa.RecordBatchReader)


# -- which types may be written into which ------------------------------------------------
_NUMERIC = {"integer", "floating", "decimal"}


def _family(t: pa.DataType) -> str:
    while pa.types.is_dictionary(t):
        t = t.value_type
    checks = (("null", pa.types.is_null), ("boolean", pa.types.is_boolean),
              ("integer", pa.types.is_integer), ("floating", pa.types.is_floating),
              ("decimal", pa.types.is_decimal), ("date", pa.types.is_date),
              ("timestamp", pa.types.is_timestamp), ("struct", pa.types.is_struct),
              ("map", pa.types.is_map))
    for name, test in checks:
        if test(t):
            return name
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)
            or pa.types.is_fixed_size_binary(t)):
        return "binary"
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
            or pa.types.is_list_view(t) or pa.types.is_large_list_view(t)):
        return "list"
    return str(t)


def _value(t: pa.DataType) -> pa.DataType:
    while pa.types.is_dictionary(t):
        t = t.value_type
    return t


def delta_typed(t: pa.DataType) -> pa.DataType:
    """``t`` as the table's log will say it (string for large_string or a categorical's
    dictionary, microseconds for pandas' nanoseconds)."""
    return delta_type_to_arrow(arrow_type_to_delta(_value(t)))


def assignable(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether a column of ``src`` may be written into a column of ``dst`` (insert, overwrite,
    ``create_table(data=)``, a merge's ``*_all`` clauses), by Delta's schema enforcement as
    the Spark engine applies it, so both engines refuse the same data: the same kind of value
    (any string type into a string, any timestamp unit or zone into a timestamp), nulls,
    numbers into numbers (narrowing or lossy conversions are then checked value by value by
    the cast) and dates into timestamps. Never text into numbers or dates, numbers or booleans
    into text, booleans into numbers: those would silently reinterpret the user's data."""
    src, dst = _value(src), _value(dst)
    if src.equals(dst):
        return True
    a, b = _family(src), _family(dst)
    if a == "null" or (a in _NUMERIC and b in _NUMERIC) or (a, b) == ("date", "timestamp"):
        return True
    if a != b:
        return False
    if a == "list":
        return assignable(src.value_type, dst.value_type)
    if a == "map":
        return assignable(src.key_type, dst.key_type) and assignable(src.item_type, dst.item_type)
    if a == "struct":
        have = {src.field(i).name.lower(): src.field(i).type for i in range(src.num_fields)}
        return all(assignable(have[dst.field(i).name.lower()], dst.field(i).type)
                   for i in range(dst.num_fields) if dst.field(i).name.lower() in have)
    return True


def type_refusal(what: str, column: str, src: pa.DataType, dst: pa.DataType) -> SchemaMismatchError:
    """The error for a column ``assignable`` refuses, naming it and both types."""
    return SchemaMismatchError(
        f"{what}: column {column!r} has type {src}, the table has {dst}; neither engine converts "
        f"{_family(src)} values into {_family(dst)} on write (Delta's schema enforcement): "
        "convert the column first, e.g. with pyarrow.compute.cast")


def _from_spark_json(text: str) -> pa.Schema:
    try:
        return schema_from_json(text)
    except CorruptLogError as e:  # a Spark type Delta has no name for (interval, variant, ...)
        raise SchemaMismatchError("the Spark schema has a type a Delta table "
                                  f"cannot hold: {e}") from None


def check_merge_source(table: str, spec: Any, source: pa.Schema, target: pa.Schema) -> None:
    """A merge's ``*_all`` clauses copy source columns whole, as an insert does: they follow
    ``assignable``. Values given as expressions are SQL, converted by its assignment cast."""
    by_lower = {f.name.lower(): f for f in source}
    for c in spec.clauses:
        if not getattr(c, "all_columns", False):
            continue
        for f in target:
            s = by_lower.get(f.name.lower())
            if s is not None and not assignable(s.type, f.type):
                clause = f"when_{'' if c.matched else 'not_'}matched_{c.kind}_all"
                raise type_refusal(f"merge into {table!r} ({clause}), source", f.name, s.type,
                                   f.type)


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_nullable(True) for f in schema])


def rows_to_table(rows: list) -> pa.Table:
    """Rows as dicts; a key any row has is a column (pyarrow's ``from_pylist`` takes the first
    row's keys and would silently drop a column only later rows carry). Missing keys are NULL."""
    bad = next((r for r in rows if not isinstance(r, dict)), None)
    if bad is not None:
        raise SchemaMismatchError("a list of rows must hold dicts (column -> value), got "
                                  f"a {type(bad).__name__}")
    names = list(dict.fromkeys(k for r in rows for k in r))
    try:
        return (pa.table({n: pa.array([r.get(n) for r in rows]) for n in names}) if names
                else pa.table({}))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SchemaMismatchError(f"rows do not form columns of one type each: {e}") from None


def _first(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def to_arrow_table(data: Any) -> pa.Table:
    """Rows in any shape Python users hold them, as one pyarrow table: pyarrow tables, record
    batches and ``RecordBatchReader`` streams (read whole: ``write`` streams them instead),
    pandas and polars DataFrames, dicts of columns, lists of row dicts, Spark DataFrames
    (collected to this process) and any object speaking the Arrow C stream interface."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if isinstance(data, dict):
        try:
            return pa.table(data)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
            raise SchemaMismatchError("a dict of columns must map names to equally long columns "
                                      f"of one type each: {_first(e)}") from e
    if isinstance(data, list):
        return rows_to_table(data)
    if _is_polars_frame(data):
        return data.to_arrow()
    # a Spark DataFrame (classic or Connect; Connect's looks like pandas'): collected here
    if type(data).__module__.startswith("pyspark") and callable(getattr(data, "toArrow", None)):
        return data.toArrow()
    if type(data).__name__ == "DataFrame" and hasattr(data, "to_dict") and hasattr(data, "columns"):
        try:
            return pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
            raise SchemaMismatchError(f"the pandas DataFrame does not convert to Arrow columns: "
                                      f"{_first(e)}") from e
    if callable(getattr(data, "toArrow", None)):  # another frame that speaks Spark's method
        return data.toArrow()
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data).read_all()
    raise SchemaMismatchError(f"cannot insert a {type(data).__name__}: pass a pyarrow.Table, "
                              "RecordBatch or RecordBatchReader, a pandas or polars DataFrame, a "
                              "dict of columns or a list of row dicts")


def as_stream(data: Any) -> pa.RecordBatchReader | None:
    """``data`` as a stream of batches, when it is one (a ``RecordBatchReader``, or an object
    that only speaks the Arrow C stream interface); None for rows already in memory."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if (hasattr(data, "__arrow_c_stream__") and not isinstance(data, pa.Table | pa.RecordBatch)
            and not _is_polars_frame(data) and not callable(getattr(data, "toArrow", None))
            and not (type(data).__name__ == "DataFrame" and hasattr(data, "to_dict"))):
        return pa.RecordBatchReader.from_stream(data)
    return None


def given_schema(data: Any) -> pa.Schema:
    """The schema rows come with, as given (a stream is not consumed)."""
    if isinstance(data, pa.Table | pa.RecordBatch | pa.RecordBatchReader):
        return data.schema
    if _is_spark_frame(data):
        return _from_spark_json(data.schema.json())
    if _is_polars_frame(data):
        return data.head(0).to_arrow().schema
    if _is_pandas_frame(data):
        try:
            return pa.Schema.from_pandas(data, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
            raise SchemaMismatchError(f"the pandas DataFrame does not convert to Arrow columns: "
                                      f"{_first(e)}") from e
    if isinstance(data, dict | list):
        return to_arrow_table(data).schema
    raise SchemaMismatchError(f"cannot take a schema from a {type(data).__name__}: pass a "
                              "Spark, pandas, polars or pyarrow frame, a "
                              "pyarrow.RecordBatchReader, a dict of columns or a list of row dicts")


def check_data_fits(what: str, data: Any, schema: pa.Schema) -> None:
    """Before anything is written: every column of ``data`` is in ``schema``, in a type
    ``assignable`` takes (values that do not fit are found later, by the cast)."""
    wanted = {f.name.lower(): f for f in schema}
    got = given_schema(data)
    extra = [f.name for f in got if f.name.lower() not in wanted]
    if extra:
        raise SchemaMismatchError(f"{what}: column(s) {extra} are not in the table schema "
                                  f"({', '.join(schema.names)})")
    for f in got:
        t = wanted[f.name.lower()]
        if not f.type.equals(t.type) and not assignable(f.type, t.type):
            raise type_refusal(what, t.name, f.type, t.type)


def schema_of_data(data: Any) -> pa.Schema:
    """The schema of rows given as a Spark, pandas, polars or pyarrow frame, a record batch
    stream (not consumed), a dict of columns or a list of row dicts (every column nullable)."""
    schema = given_schema(data)
    untyped = [f.name for f in schema if pa.types.is_null(f.type)]
    if untyped:
        raise SchemaMismatchError(f"column(s) {untyped} hold only nulls, so their type is "
                                  "unknown: pass schema=")
    # in the types the table's log will say, so the first snapshot matches the data
    return _nullable(pa.schema([f.with_type(delta_typed(f.type)) for f in schema]))


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
    if (isinstance(schema, pa.Table | pa.RecordBatch | pa.RecordBatchReader)
            or _is_spark_frame(schema) or _is_pandas_frame(schema) or _is_polars_frame(schema)):
        return schema_of_data(schema)
    raise SchemaMismatchError("schema must be a pyarrow.Schema, a dict or list of fields, a Spark "
                              f"StructType or a DataFrame, got {type(schema).__name__}")


def _holds_rows(obj: Any) -> bool:
    """Whether a frame given where a schema goes holds rows (a stream always counts: it cannot
    be looked into without being consumed, and nobody passes an empty one for its schema)."""
    if isinstance(obj, pa.Table | pa.RecordBatch):
        return obj.num_rows > 0
    if isinstance(obj, pa.RecordBatchReader):
        return True
    if _is_spark_frame(obj):  # first: a Connect frame answers hasattr for any name
        return not obj.isEmpty()  # one small job; the rows stay on the executors
    if _is_pandas_frame(obj) or _is_polars_frame(obj):
        return len(obj) > 0
    return False


def rows_as_data(name: str, schema: Any, data: Any) -> tuple[Any, Any]:
    """``create_table``'s (schema, data), with a frame of rows given as the schema taken as the
    data: a user who hands ``create_table`` rows means them to be written (an empty frame stays
    a schema). Rows given twice, as the schema and as ``data=``, are refused: which to write
    would be a guess."""
    if schema is None or not _holds_rows(schema):
        return schema, data
    if data is not None:
        raise InvalidArgumentError(
            f"create_table({name!r}, ...) got rows twice: the schema argument is a "
            f"{type(schema).__name__} holding rows, and data= is given too. Pass the rows once "
            "(as data=), with a schema that holds none (e.g. the frame's .schema) if it differs")
    return None, schema


def table_spec(name: str, schema: Any, partition_by: list[str] | str | None,
               data: Any) -> tuple[pa.Schema, list[str]]:
    """The checked schema and partition columns of a table to create (``create_table``'s
    arguments, in a lake or in a transaction)."""
    if schema is None and data is None:
        raise SchemaMismatchError(f"create_table({name!r}) needs a schema or data=")
    if schema is not None:
        schema = to_arrow_schema(schema)
        if data is not None:  # refused before a name is reserved or a file written
            check_data_fits(f"create_table({name!r}, data=...)", data, schema)
    else:
        schema = schema_of_data(data)
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
        raise SchemaMismatchError("a table needs at least one column that is not a "
                                  "partition column")
    return schema, parts
