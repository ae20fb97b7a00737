"""Delta's rules for the text of a partition value and the JSON of a min/max statistic.

Partition values are strings in the log (PROTOCOL.md, "Partition Value
Serialization"): ``''`` and null are null, binary is the UTF-8 text of the bytes
(as Spark casts binary to string; delta-rs reads it the same way). Statistics are
read as bounds only where they are bounds (see ``bounds``).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import pyarrow as pa

# string maxima this long may be truncated prefixes (Delta Spark's default)
STRING_PREFIX_LIMIT = 32
EXACT_DECIMAL_DIGITS = 15  # decimals up to this precision survive a double round trip exactly


def parse_ts(s: str, tz: bool) -> dt.datetime:
    s = s.strip().replace(" ", "T", 1)
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    v = dt.datetime.fromisoformat(s)
    if tz:
        v = v.replace(tzinfo=dt.UTC) if v.tzinfo is None else v.astimezone(dt.UTC)
    else:
        v = v.replace(tzinfo=None)
    return v


def coerce(value: Any, t: pa.DataType) -> Any:
    """``value`` (a statistic or a partition string) as a Python value of type ``t``."""
    if value is None:
        return None
    if pa.types.is_integer(t):
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError(f"{value} is not an integer")
            return int(value)
        return int(value)
    if pa.types.is_floating(t):
        return float(value)
    if pa.types.is_decimal(t):
        return decimal.Decimal(str(value))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return str(value)
    if pa.types.is_boolean(t):
        if isinstance(value, str):
            low = value.strip().lower()
            if low not in ("true", "false"):
                raise ValueError(f"{value!r} is not a boolean")
            return low == "true"
        return bool(value)
    if pa.types.is_date(t):
        return dt.date.fromisoformat(str(value)[:10])
    if pa.types.is_timestamp(t):
        return parse_ts(str(value), t.tz is not None)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return value.encode("utf-8") if isinstance(value, str) else bytes(value)
    raise TypeError(f"no coercion to {t}")


def partition_value(raw: str | None, t: pa.DataType) -> Any:
    """A ``partitionValues`` entry as a typed value: Delta reads null and ``''`` alike as null."""
    if raw is None or raw == "":
        return None
    return coerce(raw, t)


def fits(v: decimal.Decimal, t: pa.Decimal128Type) -> bool:
    # int(): a finite Decimal's exponent is an int (a letter only for NaN and infinities)
    return v.is_finite() and (len(v.as_tuple().digits) - max(0, -int(v.as_tuple().exponent))
                              <= t.precision - t.scale)


def bounds(lo: Any, hi: Any, t: pa.DataType) -> tuple[Any, Any]:
    """Delta min/max statistics as bounds every value of the file lies within (None: unknown)."""
    def one(v: Any, upper: bool) -> Any:
        if v is None or isinstance(v, bool | dict | list):
            return None
        try:
            if pa.types.is_floating(t):
                if not isinstance(v, int | float | decimal.Decimal) or not math.isfinite(float(v)):
                    return None
                f = float(v)
                if f == 0.0:
                    f = 0.0 if upper else -0.0  # Parquet: a zero min is -0.0, a zero max is +0.0
                return f
            if pa.types.is_integer(t):
                if not isinstance(v, int | float | decimal.Decimal):
                    return None
                return int(math.ceil(v)) if upper else int(math.floor(v))
            if pa.types.is_decimal(t):
                if not isinstance(v, int | float | decimal.Decimal):
                    return None
                d = decimal.Decimal(str(v)) if not isinstance(v, decimal.Decimal) else v
                if t.precision > EXACT_DECIMAL_DIGITS:  # the writer may have gone through a double
                    ulp = decimal.Decimal(math.ulp(float(d)))
                    d = d + ulp if upper else d - ulp
                q = decimal.Decimal(1).scaleb(-t.scale)
                d = d.quantize(q, rounding=decimal.ROUND_CEILING if upper else decimal.ROUND_FLOOR)
                return d if fits(d, t) else None
            if pa.types.is_string(t) or pa.types.is_large_string(t):
                if not isinstance(v, str):
                    return None
                if upper and len(v) >= STRING_PREFIX_LIMIT:
                    return None  # possibly a truncated prefix: no upper bound
                return v
            if pa.types.is_date(t):
                return dt.date.fromisoformat(str(v)[:10]) if isinstance(v, str) else None
            if pa.types.is_timestamp(t):
                if not isinstance(v, str):
                    return None
                ts = parse_ts(v, t.tz is not None)
                return ts + dt.timedelta(milliseconds=1) if upper else ts  # maxima truncated to ms
        except (TypeError, ValueError, ArithmeticError, OverflowError):
            return None
        return None

    return one(lo, False), one(hi, True)


# -- the statistics predicate ---------------------------------------------------------------


def stat_value(st: dict, key: str, name: str) -> Any:
    m = st.get(key)
    if not isinstance(m, dict):
        return None
    if name in m:
        return m[name]
    low = name.lower()
    return next((v for k2, v in m.items() if k2.lower() == low), None)


def typed_array(values: list, t: pa.DataType) -> pa.Array:
    try:
        return pa.array(values, t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        out = []
        for v in values:  # one bad value must not cost the others their bounds
            try:
                pa.array([v], t)
                out.append(v)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                out.append(None)
        return pa.array(out, t)
