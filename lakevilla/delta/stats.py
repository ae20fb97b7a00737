"""Per-file Delta statistics (numRecords, minValues, maxValues, nullCount).

Two sources with one output format: an in-memory arrow table (files we write)
and a Parquet footer (files another engine, e.g. Spark, wrote). Values are
JSON-encoded the way Delta readers parse them: dates ``YYYY-MM-DD``, timestamps
RFC 3339 in UTC with microseconds, decimals as exact JSON numbers.

Parquet's statistics rules are followed, so that every reader's pruning stays
right: NaN never enters a min/max (a file of only NaN gets none), a zero minimum
is written -0.0 and a zero maximum +0.0 (-0.0 = +0.0 in SQL, so a reader
comparing bounds in IEEE total order would otherwise skip the file), and a
string longer than ``MAX_STRING_STAT`` gets no min/max rather than a truncated one.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# Longer strings get no min/max: truncating a max would make it wrong.
MAX_STRING_STAT = 64


def _jsonable(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, bool):
        return None  # Delta engines keep no min/max for booleans
    if isinstance(v, float):
        return None if (math.isnan(v) or math.isinf(v)) else v
    if isinstance(v, int):
        return v
    if isinstance(v, decimal.Decimal):
        return v if v.is_finite() else None  # written exactly by stats_json
    if isinstance(v, str):
        return v if len(v) <= MAX_STRING_STAT else None
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            return v.strftime("%Y-%m-%dT%H:%M:%S.%f")
        return v.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(v, dt.date):
        return v.isoformat()
    return None  # binary and anything else: no stats


def _supports_minmax(t: pa.DataType) -> bool:
    return not (pa.types.is_boolean(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)
                or pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t)
                or pa.types.is_struct(t) or pa.types.is_null(t))


def _column_stats(arr: pa.ChunkedArray | pa.Array, t: pa.DataType, mins: dict, maxs: dict,
                  nulls: dict, name: str):
    if pa.types.is_struct(t):
        sub_min: dict = {}
        sub_max: dict = {}
        sub_null: dict = {}
        combined = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
        for i in range(t.num_fields):
            f = t.field(i)
            _column_stats(pc.struct_field(combined, [i]), f.type, sub_min, sub_max, sub_null,
                          f.name)
        if sub_min:
            mins[name] = sub_min
        if sub_max:
            maxs[name] = sub_max
        nulls[name] = sub_null
        return
    nulls[name] = int(arr.null_count)
    if not _supports_minmax(t) or len(arr) == arr.null_count:
        return
    mm = pc.min_max(arr)  # skips NaN; NaN when there is nothing else
    lo, hi = _signed_zeros(_jsonable(mm["min"].as_py()), _jsonable(mm["max"].as_py()))
    if lo is not None and hi is not None:
        mins[name] = lo
        maxs[name] = hi


def _signed_zeros(lo: Any, hi: Any) -> tuple[Any, Any]:
    """Parquet's rule for floating-point bounds: a zero min is -0.0, a zero max is +0.0."""
    if isinstance(lo, float) and lo == 0.0:
        lo = -0.0
    if isinstance(hi, float) and hi == 0.0:
        hi = 0.0
    return lo, hi


def stats_json(stats: dict) -> str:
    """Compact JSON with decimals as exact numbers (json.dumps cannot write them)."""
    def enc(v: Any) -> str:
        if isinstance(v, dict):
            return "{" + ",".join(json.dumps(k) + ":" + enc(x) for k, x in v.items()) + "}"
        if isinstance(v, decimal.Decimal):
            return format(v, "f")
        return json.dumps(v)

    return enc(stats)


def stats_from_table(table: pa.Table, partition_columns: list[str] | tuple[str, ...] = ()) -> str:
    mins: dict = {}
    maxs: dict = {}
    nulls: dict = {}
    for f in table.schema:
        if f.name in partition_columns:
            continue
        _column_stats(table.column(f.name), f.type, mins, maxs, nulls, f.name)
    return stats_json({"numRecords": table.num_rows, "minValues": mins, "maxValues": maxs,
                       "nullCount": nulls})


def stats_from_parquet(meta: pq.FileMetaData,
                       partition_columns: list[str] | tuple[str, ...] = ()) -> str:
    """Statistics from a footer alone (no data read), for top-level primitive columns."""
    arrow_schema = meta.schema.to_arrow_schema()
    mins: dict = {}
    maxs: dict = {}
    nulls: dict = {}
    top = {f.name: f.type for f in arrow_schema}
    for ci in range(meta.num_columns):
        path = meta.schema.column(ci).path
        if "." in path or path in partition_columns or path not in top:
            continue
        lo: Any = None  # the file's bounds so far (set together)
        hi: Any = None
        nc = 0
        ok = True
        for rg in range(meta.num_row_groups):
            col = meta.row_group(rg).column(ci)
            st = col.statistics
            if st is None or not st.has_null_count:
                ok = False
                break
            nc += st.null_count
            if st.has_min_max:
                v_lo, v_hi = st.min, st.max
                if any(isinstance(v, float) and math.isnan(v) for v in (v_lo, v_hi)):
                    ok = False  # an old writer let NaN into the bounds: they are not bounds
                    break
                lo = v_lo if lo is None or v_lo < lo else lo
                hi = v_hi if hi is None or v_hi > hi else hi
            elif st.num_values > 0:
                ok = False
        if not ok:
            continue
        nulls[path] = nc
        if lo is not None and _supports_minmax(top[path]):
            t = top[path]
            if (pa.types.is_timestamp(t) and isinstance(lo, dt.datetime) and t.tz is not None
                    and lo.tzinfo is None):
                lo, hi = lo.replace(tzinfo=dt.UTC), hi.replace(tzinfo=dt.UTC)
            jl, jh = _signed_zeros(_jsonable(lo), _jsonable(hi))
            if jl is not None and jh is not None:
                mins[path] = jl
                maxs[path] = jh
    return stats_json({"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs,
                       "nullCount": nulls})
