"""Random tables and predicates for the differential tests of pruning and of the engines.

Tables hold the values statistics get wrong: NaN, -0.0 and +0.0, nulls, empty and unicode
strings, strings past the 32-character prefix other writers keep, dates, UTC and naive
timestamps, narrow and wide decimals, structs, and string/int partition columns whose values
include '' (null to Delta), unicode and path characters. Predicates compare columns with
literals of their own and of other types, casts, IN lists, BETWEEN, LIKE, IS NULL,
AND/OR/NOT, arithmetic and struct fields.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json

import duckdb
import pyarrow as pa
from hypothesis import strategies as st

import lakevilla as lv
from lakevilla.delta.stats import stats_json
from lakevilla.scan import expressions as E

UTC = dt.UTC
SCHEMA = pa.schema([
    ("id", pa.int64()), ("i", pa.int64()), ("n", pa.int32()), ("f", pa.float64()),
    ("r", pa.float32()), ("dec", pa.decimal128(10, 2)), ("w", pa.decimal128(20, 4)),
    ("s", pa.string()), ("d", pa.date32()), ("ts", pa.timestamp("us")),
    ("tz", pa.timestamp("us", tz="UTC")), ("b", pa.bool_()),
    ("st", pa.struct([("x", pa.int64()), ("y", pa.string())])), ("x", pa.int64()),
    ("p", pa.string()), ("q", pa.int64()),
])
PARTITION = ["p", "q"]
LONG = "m" * 40

ints = st.one_of(st.none(), st.integers(-4, 4), st.sampled_from([2**53 + 1, -(2**53) - 1, 100]))
floats = st.one_of(st.none(), st.sampled_from([float("nan"), float("nan"), 0.0, -0.0, 1.0, -1.0,
                                               2.5, 1e300, -7.25, 0.1, float("inf"),
                                               float("-inf")]))
decs = st.one_of(st.none(), st.sampled_from([decimal.Decimal(x) for x in (
    "0.00", "-0.01", "1.25", "3.70", "99.99", "-2.50", "4.00")]))
wides = st.one_of(st.none(), st.sampled_from([decimal.Decimal(x) for x in (
    "1234567890123456.0001", "1234567890123456.0002", "0.0001", "-9999999999999999.9999",
    "3.7000")]))
strs = st.one_of(st.none(), st.sampled_from(["", "a", "ab", "b", "é", "😀", "Z", "1", "01", LONG,
                                             LONG + "z", "a_b", "%"]))
dates = st.one_of(st.none(), st.dates(dt.date(2024, 1, 1), dt.date(2024, 1, 4)))
times = st.one_of(st.none(), st.builds(
    lambda d, m, us: dt.datetime(2024, 1, d, 0, 0) + dt.timedelta(minutes=m, microseconds=us),
    st.integers(1, 5), st.sampled_from([0, 1, 180, 181, 1439]),
    st.sampled_from([0, 1, 999, 1000, 999_999])))
ptexts = st.one_of(st.none(), st.sampled_from(["", "", "x", "y", "é/=%", "a b", "1"]))
structs = st.one_of(st.none(), st.builds(lambda x, y: {"x": x, "y": y}, ints, strs))


@st.composite
def files(draw, max_files: int = 4, max_rows: int = 5):
    """Rows grouped into files; each file has one value per partition column, as Delta lays
    them out."""
    out = []
    next_id = 0
    for _ in range(draw(st.integers(1, max_files))):
        p, q = draw(ptexts), draw(st.one_of(st.none(), st.integers(-1, 2)))
        rows = []
        for _ in range(draw(st.integers(1, max_rows))):
            ts = draw(times)
            rows.append({"id": next_id, "i": draw(ints),
                         "n": draw(st.one_of(st.none(), st.integers(-3, 3))), "f": draw(floats),
                         "r": draw(floats), "dec": draw(decs), "w": draw(wides), "s": draw(strs),
                         "d": draw(dates), "ts": ts,
                         "tz": None if ts is None else ts.replace(tzinfo=UTC),
                         "b": draw(st.one_of(st.none(), st.booleans())), "st": draw(structs),
                         "x": draw(ints), "p": p, "q": q})
            next_id += 1
        out.append(rows)
    return out


def as_read(rows: list[dict]) -> list[dict]:
    """Rows as a Delta reader sees them: an empty partition string is null."""
    return [{**r, "p": None if r["p"] == "" else r["p"]} for r in rows]


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


# literals per column: of the column's type and of other types (DuckDB casts one side)
LITERALS = {
    "i": ["0", "1", "-4", "3", "100", "9007199254740993", "3.7", "-2.5", "1e0", "2.5e0", "'3'",
          "'3.7'", "CAST(3.7 AS INTEGER)", "CAST(-2.5 AS INTEGER)", "CAST(2.5 AS INTEGER)",
          "CAST(0.5 AS BIGINT)", "CAST('2' AS BIGINT)", "CAST('3.5' AS INTEGER)", "NULL",
          "CAST(2.5 AS DOUBLE)"],
    "n": ["0", "1", "-3", "2.5", "'2'", "CAST(1.5 AS INTEGER)", "3000000000"],
    "f": ["0", "-0.0", "0.0", "1", "2.5", "-7.25", "0.1", "1e300", "'NaN'::DOUBLE",
          "CAST('nan' AS DOUBLE)", "'-0.0'::DOUBLE", "'inf'::DOUBLE", "'-Infinity'::DOUBLE", "5",
          "CAST(0.1 AS FLOAT)", "NULL"],
    "r": ["0", "-0.0", "1", "0.1", "2.5", "'NaN'::FLOAT", "'NaN'::DOUBLE", "CAST(0.1 AS FLOAT)",
          "1e300"],
    "dec": ["0", "1.25", "3.7", "1.2", "99.99", "-2.5", "4", "'1.25'", "1.25e0",
            "CAST(3.695 AS DECIMAL(10,2))", "-0.01"],
    "w": ["0.0001", "1234567890123456.0001", "1234567890123456.00015", "1234567890123456", "3.7",
          "'0.0001'", "1.2345678901234560e15"],
    "s": ["''", "'a'", "'ab'", "'b'", "'é'", "'😀'", "'1'", "CAST(01 AS VARCHAR)",
          "CAST(1 AS VARCHAR)", "'Z'", _q(LONG), _q(LONG + "z"), _q(LONG[:32]), "'a' || 'b'",
          "upper('z')", "NULL"],
    "d": ["DATE '2024-01-02'", "'2024-01-03'", "TIMESTAMP '2024-01-02 03:00:00'",
          "TIMESTAMP '2024-01-02 00:00:00'", "TIMESTAMP '2024-01-01 12:00:00'",
          "TIMESTAMP '2024-01-03 00:00:00.000001'", "TIMESTAMPTZ '2024-01-02 03:00:00+00'",
          "'2024-01-02 03:00:00'", "DATE '2024-01-02' + 1",
          "CAST('2024-01-04 23:59:59' AS TIMESTAMP)"],
    "ts": ["TIMESTAMP '2024-01-02 00:00:00'", "TIMESTAMP '2024-01-02 03:00:00.000999'",
           "DATE '2024-01-03'", "'2024-01-02 00:03:00.000001'",
           "TIMESTAMPTZ '2024-01-02 03:00:00+02'", "TIMESTAMP '2024-01-01 00:00:00.000001'",
           "TIMESTAMP '2024-01-05 23:59:00.001'"],
    "tz": ["TIMESTAMPTZ '2024-01-02 00:00:00+00'", "TIMESTAMPTZ '2024-01-02 03:00:00.000999+00'",
           "TIMESTAMP '2024-01-02 00:03:00'", "DATE '2024-01-03'", "'2024-01-02 00:00:00.999+00'",
           "TIMESTAMPTZ '2024-01-01 23:00:00-01'"],
    "p": ["''", "'x'", "'y'", "'é/=%'", "'a b'", "'1'", "NULL"],
    "q": ["0", "1", "-1", "2", "'1'", "1.5", "NULL"],
    "b": ["TRUE", "FALSE", "'true'"],
    "st.x": ["0", "1", "3", "100"],
    "x": ["0", "1", "3", "100"],
    "st.y": ["'a'", "''", "'ab'"],
}
# the columns the old pruner got wrong come up more often
COLUMNS = [*LITERALS, "i", "f", "r", "d", "d", "s", "p", "p", "p", "st.x", "st.x", "ts", "w"]
OPS = ["=", "<>", "<", "<=", ">", ">="]
ARITH = {"i": ["i + 1", "i * 2", "-i", "i / 2", "i % 3"], "f": ["f + 0", "f * 2", "-f", "abs(f)"],
         "dec": ["dec + 0", "dec * 2"], "d": ["d + 1", "d + INTERVAL 1 DAY"],
         "s": ["s || ''", "lower(s)"], "n": ["n + i"], "q": ["q + 1"], "p": ["p || 'x'"],
         "ts": ["ts + INTERVAL '1 hour'"], "tz": ["CAST(tz AS DATE)"], "r": ["CAST(r AS DOUBLE)"],
         "w": ["w + 0"]}


@st.composite
def predicates(draw, depth: int = 0):
    col = draw(st.sampled_from(COLUMNS))
    lit = st.sampled_from(LITERALS[col])
    kinds = ["cmp"] * 6 + ["in", "in", "between", "between", "null", "null", "null", "arith",
                           "cast", "like"]
    if depth < 1:
        kinds += ["and", "or", "not"]
    kind = draw(st.sampled_from(kinds))
    if kind == "cmp":
        op = draw(st.sampled_from(OPS))
        v = draw(lit)
        return f"{v} {op} {col}" if draw(st.booleans()) else f"{col} {op} {v}"
    if kind == "in":
        vs = draw(st.lists(lit, min_size=1, max_size=3))
        neg = "NOT " if draw(st.booleans()) else ""
        return f"{col} {neg}IN ({', '.join(vs)})"
    if kind == "between":
        a, b = draw(lit), draw(lit)
        return f"{col} BETWEEN {a} AND {b}"
    if kind == "null":
        return f"{col} IS {'NOT ' if draw(st.booleans()) else ''}NULL"
    if kind == "arith":
        expr = draw(st.sampled_from(ARITH.get(col, [col])))
        return f"{expr} {draw(st.sampled_from(OPS))} {draw(lit)}"
    if kind == "cast":
        return draw(st.sampled_from([f"CAST({col} AS VARCHAR) = {_q('1')}",
                                     f"CAST(i AS DOUBLE) > {draw(lit)}", "CAST(s AS DATE) IS NULL",
                                     f"CAST(d AS TIMESTAMP) >= {draw(lit)}",
                                     "CAST(f AS DECIMAL(38, 2)) = 0"]))
    if kind == "like":
        pat = draw(st.sampled_from(["'a%'", "'%'", "''", "'_'", "'m%z'", "'a\\_b'", "'%é%'"]))
        s = draw(st.sampled_from(["s", "p", "st.y"]))
        return f"{s} {draw(st.sampled_from(['LIKE', 'NOT LIKE', 'ILIKE']))} {pat}"
    left, right = draw(predicates(depth + 1)), draw(predicates(depth + 1))
    if kind == "not":
        return f"NOT ({left})"
    return f"({left}) {kind.upper()} ({right})"


def foreign_stats(stats: str, style: str) -> str:
    """Our statistics as another writer would have written them. ``spark``: string bounds cut
    to a 32-character prefix (the max with a tie-breaker character), timestamps truncated to
    milliseconds. ``f64``: decimals through a double (rounded to nearest)."""
    d = json.loads(stats, parse_float=decimal.Decimal)

    def each(m: dict, upper: bool) -> dict:
        out = {}
        for k, v in m.items():
            if isinstance(v, dict):
                out[k] = each(v, upper)
            elif style == "spark" and isinstance(v, str) and len(v) > 32 and not v[:4].isdigit():
                out[k] = v[:32] + ("\ufffd" if upper else "")
            elif style == "spark" and isinstance(v, str) and v[:4].isdigit() and "T" in v:
                head, _, frac = v.partition(".")
                out[k] = head + "." + frac[:3] + ("Z" if v.endswith("Z") else "") if frac else v
            elif style == "f64" and isinstance(v, decimal.Decimal):
                out[k] = float(v)
            else:
                out[k] = v
        return out

    d["minValues"] = each(d.get("minValues", {}), False)
    d["maxValues"] = each(d.get("maxValues", {}), True)
    return stats_json(d)


# -- the reference: plain DuckDB, no lakevilla in between ------------------------------------------

_CON: list = []


def plain_duckdb():
    """One connection for the whole run (opening one is slow), in UTC like the engine."""
    if not _CON:
        con = duckdb.connect()
        con.execute("SET TimeZone='UTC'")
        _CON.append(con)
    return _CON[0]


def selected_ids(table: pa.Table, where: str) -> list[int] | None:
    """Ids of the rows DuckDB selects from ``table``, sorted (None when evaluating raises).

    Evaluated as a projection, as the engine evaluates it: in a ``WHERE`` DuckDB may skip the
    right side of ``a AND b`` on rows where ``a`` is NULL, in a projection it may not, so only
    the projection raises the same errors (``CAST(s AS DATE)`` on ``''``) as the engine."""
    con = plain_duckdb()
    con.register("t", table)
    try:
        rows = con.execute(f"SELECT id, coalesce(({where}), false) FROM t").fetchall()
        return sorted(i for i, hit in rows if hit)
    except duckdb.Error:
        return None
    finally:
        con.unregister("t")


def valid(where: str) -> bool:
    """The validator accepts ``where`` over SCHEMA (the generator also makes ill-typed ones)."""
    try:
        E.check_where(where, SCHEMA)
        return True
    except lv.InvalidExpressionError:
        return False
