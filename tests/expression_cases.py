"""Expressions users write, on one small table with the awkward values (nulls, NaN, -0.0,
empty and unicode strings, negative numbers, month ends), shared by the embedded and the
Spark tests: both engines must accept them and compute the same values."""

from __future__ import annotations

import datetime as dt
import decimal
import math

import pyarrow as pa

UTC = dt.UTC
SCHEMA = pa.schema([
    ("id", pa.int64()), ("i", pa.int64()), ("n", pa.int32()), ("f", pa.float64()),
    ("g", pa.float64()), ("dec", pa.decimal128(10, 2)), ("s", pa.string()), ("d", pa.date32()),
    ("ts", pa.timestamp("us")), ("tz", pa.timestamp("us", tz="UTC")), ("b", pa.bool_()),
    ("st", pa.struct([("x", pa.int64()), ("y", pa.string())])),
])

ROWS = [
    {"id": 1, "i": 1, "n": 10, "f": 1.0, "g": 2.5, "dec": decimal.Decimal("1.25"), "s": "abc",
     "d": dt.date(2024, 1, 31), "ts": dt.datetime(2024, 1, 1, 0, 30),
     "tz": dt.datetime(2024, 1, 1, 9, 0, tzinfo=UTC), "b": True, "st": {"x": 1, "y": "p"}},
    {"id": 2, "i": 2, "n": -3, "f": float("nan"), "g": -2.5, "dec": decimal.Decimal("-2.50"),
     "s": "ÉtÉ été", "d": dt.date(2024, 2, 29), "ts": dt.datetime(2024, 2, 29, 23, 59, 59, 999999),
     "tz": dt.datetime(2024, 2, 29, 23, 0, tzinfo=UTC), "b": False, "st": {"x": 2, "y": None}},
    {"id": 3, "i": -4, "n": 0, "f": -0.0, "g": 0.5, "dec": decimal.Decimal("0.00"), "s": "",
     "d": dt.date(2023, 12, 31), "ts": dt.datetime(2023, 12, 31, 12, 0, 0, 500000),
     "tz": dt.datetime(2024, 3, 10, 2, 30, tzinfo=UTC), "b": None, "st": None},
    {"id": 4, "i": None, "n": 7, "f": 2.5, "g": 1.5, "dec": None, "s": None, "d": None, "ts": None,
     "tz": None, "b": True, "st": {"x": None, "y": "q"}},
    {"id": 5, "i": 5, "n": 2, "f": -7.25, "g": None, "dec": decimal.Decimal("99.99"),
     "s": "a_b%c\\d", "d": dt.date(2024, 7, 4), "ts": dt.datetime(2024, 7, 4, 12, 0),
     "tz": dt.datetime(2024, 11, 3, 5, 30, tzinfo=UTC), "b": False, "st": {"x": 5, "y": "p"}},
    {"id": 6, "i": 3, "n": 3, "f": 0.0, "g": 1e10, "dec": decimal.Decimal("-0.01"),
     "s": " hello world ", "d": dt.date(2024, 12, 31), "ts": dt.datetime(2024, 12, 31, 23, 59),
     "tz": dt.datetime(2024, 12, 31, 23, 59, tzinfo=UTC), "b": True, "st": {"x": 3, "y": "r"}},
]


def table() -> pa.Table:
    return pa.Table.from_pylist(ROWS, SCHEMA)


# Conditions (where / merge conditions): the ids each selects must agree.
WHERE = [
    "i > 2", "i BETWEEN -1 AND 3", "i NOT BETWEEN -1 AND 3", "i IN (1, 3, 5)", "i NOT IN (1, 2)",
    "i IN (1, NULL)", "id = '3'", "s LIKE 'a%'", "s LIKE 'a\\_b%'", "s LIKE '%\\%'",
    "s LIKE 'a!_b%' ESCAPE '!'", "s ILIKE 'été%'", "s NOT LIKE '%o%'", "s IS NULL", "s = ''",
    "coalesce(s, 'x') = 'x'", "f > 1", "f = 'NaN'::DOUBLE", "f < 0", "f = 0", "f = -0.0",
    "f <= 'NaN'::DOUBLE", "f IS DISTINCT FROM 1.0", "dec >= 1.5", "dec = 1.25",
    "d >= DATE '2024-02-01'", "d < TIMESTAMP '2024-01-31 03:00:00'", "d = '2024-02-29 10:00:00'",
    "ts > '2024-01-01 12:00:00'", "ts >= DATE '2024-02-29'",
    "tz >= TIMESTAMPTZ '2024-01-01 10:00:00+02'", "tz < ts", "d = tz",
    "year(d) = 2024 AND month(d) = 2", "CASE WHEN i > 2 THEN 'big' ELSE 'small' END = 'big'",
    "CASE i WHEN 1 THEN TRUE WHEN 2 THEN NULL ELSE FALSE END", "b", "NOT b", "b IS NULL",
    "b = 'true'", "st.x > 1", "st.y = 'p'", "st IS NULL", "st.y IS NULL", "i % 2 = 1", "i / 2 > 1",
    "id = CAST(3.7 AS INTEGER)", "s = CAST(01 AS VARCHAR)", "length(s) > 3", "upper(s) = 'ABC'",
    "date_diff('day', d, DATE '2024-03-01') < 30",
    "d + INTERVAL 1 DAY > TIMESTAMP '2024-02-01 00:00:00'",
    "ts - INTERVAL '1 hour' < TIMESTAMP '2024-01-01 00:00:00'", "dayofweek(d) = 0",
    "date_trunc('month', ts) = TIMESTAMP '2024-01-01 00:00:00'", "i IS DISTINCT FROM 2",
    "nullif(i, 2) IS NULL", "greatest(i, 2) = 2", "i + n > 10", "-i > 0", "abs(i) = 4",
    "round(dec) = 2", "ceil(f) = 3", "trunc(g) = 2", "n * 2.5 > 7", "f / 0 > 0",
    "i > 2 OR s IS NULL", "NOT (i > 2 AND s IS NOT NULL)", "d <= current_date", "tz < now()",
    "f * 0 = 0", "starts_with(s, 'a')", "contains(s, 'o')", "s || '!' = 'abc!'",
]

# Values (set values, merge assignments): (expression, expected DuckDB type).
VALUES = [
    "i * 2", "i / 4", "i % 3", "n - i", "f / 0", "-f / 0", "0 / f", "f + g", "g * 3", "dec * 2",
    "dec + 1", "dec / 3", "i * 1.5", "round(dec, 1)", "round(g)", "round(dec)", "ceil(g)",
    "floor(g)", "ceil(dec)", "trunc(dec)", "trunc(g)", "abs(i)", "abs(dec)", "sqrt(abs(g))",
    "power(2, n)", "greatest(i, n)", "least(g, 1.0)", "greatest(d, DATE '2024-02-01')",
    "coalesce(i, -1)", "coalesce(s, 'none')", "nullif(s, '')",
    "CASE WHEN i > 2 THEN 'big' WHEN i IS NULL THEN 'none' ELSE 'small' END",
    "CASE WHEN b THEN dec ELSE i END", "upper(s)", "lower(s)", "s || '!'",
    "concat(s, '-', CAST(i AS VARCHAR))", "substring(s, 2, 2)", "substring(s, 0, 2)",
    "substring(s, -2)", "substring(s, 3, -2)", "substring(s, -20, 22)", "substr(s, 2)",
    "left(s, 2)", "left(s, -1)", "right(s, 2)", "right(s, -3)", "lpad(s, 6, '*')",
    "rpad(s, 2, '*')", "replace(s, 'l', 'L')", "trim(s)", "ltrim(s)", "rtrim(s)", "strpos(s, 'l')",
    "ends_with(s, 'c')", "length(s)", "year(d)", "month(ts)", "day(tz)", "hour(ts)", "minute(tz)",
    "second(ts)", "dayofweek(d)", "dayofyear(d)", "quarter(d)", "week(d)", "extract(year FROM ts)",
    "date_part('dow', tz)", "date_trunc('month', d)", "date_trunc('week', ts)",
    "date_trunc('day', tz)", "date_trunc('quarter', ts)", "date_diff('day', d, DATE '2024-12-31')",
    "date_diff('day', ts, tz)", "d + 30", "d - 1", "30 + d", "DATE '2024-12-31' - d",
    "d + INTERVAL 1 MONTH", "ts + INTERVAL '1 day 2 hours'", "tz - INTERVAL 90 MINUTES",
    "d - INTERVAL '1 year'", "make_date(2024, 2, 29)", "last_day(d)", "last_day(ts)",
    "CAST(i AS VARCHAR)", "CAST(dec AS VARCHAR)", "CAST(d AS VARCHAR)", "CAST(ts AS VARCHAR)",
    "CAST(b AS VARCHAR)", "CAST(g AS BIGINT)", "CAST(dec AS INTEGER)", "CAST(2.5 AS INTEGER)",
    "CAST(-2.5 AS INTEGER)", "CAST(i AS DECIMAL(6, 1))", "CAST(dec AS DECIMAL(4, 1))",
    "CAST(d AS TIMESTAMP)", "CAST(ts AS DATE)", "CAST(tz AS DATE)", "CAST(tz AS TIMESTAMP)",
    "CAST(ts AS TIMESTAMPTZ)", "CAST(d AS TIMESTAMPTZ)", "CAST(i AS DOUBLE)", "CAST(b AS INTEGER)",
    "CAST(i AS BOOLEAN)", "CAST('2024-05-01 10:00:00' AS DATE)", "CAST(' 12 ' AS INTEGER)",
    "CAST('3.5' AS INTEGER)", "CAST('-2.5' AS BIGINT)", "CAST('7.125' AS DECIMAL(6, 2))",
    "CAST('1e3' AS DOUBLE)", "CAST('t' AS BOOLEAN)", "st.x + 1", "st.y",
    "TIMESTAMP '2024-01-02 03:04:05.678'", "TIMESTAMPTZ '2024-01-02 03:04:05+02'", "'it''s'",
    "NULL", "1e3", "-0.0", "'NaN'::DOUBLE", "1.5",
]

# Refused by the grammar on both engines, before anything runs.
ATTACKS_WHERE = [
    "id IN (SELECT 1 FROM read_text('{secret}') WHERE content LIKE 'secret%')",
    "(SELECT content FROM read_text('{secret}')) LIKE 'secret%'",
    "EXISTS (SELECT * FROM read_csv('https://127.0.0.1:9/x.csv'))",
    "read_text('{secret}') IS NOT NULL",
    "reflect('java.lang.System', 'getProperty', 'user.home') IS NOT NULL",
    "java_method('java.lang.System', 'getenv', 'HOME') IS NOT NULL",
    "id = 1; COPY (SELECT 1) TO '{secret}.out'",
    "id = 1) OR id IN (SELECT 1 FROM read_text('{secret}')",
    "getenv('HOME') IS NOT NULL",
    "current_setting('TimeZone') = 'UTC'",
    "sum(id) > 0",
    "id = (SELECT max(id) FROM __lv_rel0)",
]
ATTACKS_SET = [
    "(SELECT content FROM read_text('{secret}'))",
    "(SELECT first(value) FROM text.`{secret}`)",
    "reflect('java.lang.System', 'getProperty', 'user.home')",
    "java_method('java.lang.System', 'getProperty', 'user.home')",
    "read_text('{secret}')",
    "s; INSTALL httpfs",
    "s || (SELECT string_agg(content, '') FROM read_text('{secret}'))",
]


def same(a, b) -> bool:
    """Equal values, NaN equal to NaN, timestamps compared as instants."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        a = a.astimezone(UTC).replace(tzinfo=None) if a.tzinfo else a
        b = b.astimezone(UTC).replace(tzinfo=None) if b.tzinfo else b
        return a == b
    if isinstance(a, decimal.Decimal) and isinstance(b, decimal.Decimal):
        return a == b
    return a == b and type(a) is type(b) or (a is None and b is None)
