"""Checked expressions (``lakevilla.scan.expressions``) as Spark columns, with DuckDB's meaning.

Spark never parses the user's text: the tree the grammar checked is rebuilt with
the Column API (no ``F.expr``, so nothing reaches Spark's SQL parser), every
node computed in the type DuckDB gives it, so both engines return the same
values. Where Spark's own function differs from DuckDB's (division by zero,
ceil of a double, dayofweek, substring positions, LIKE's escape character,
rounding casts, ...) the difference is spelled out here. Constant parts are
evaluated by DuckDB itself and enter Spark as typed literals.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import InvalidExpressionError
from ..scan import duck
from ..scan import expressions as E

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_INTS = {"TINYINT": T.ByteType(), "SMALLINT": T.ShortType(), "INTEGER": T.IntegerType(),
         "BIGINT": T.LongType()}
_EXACT_DOUBLE = 2.0**52  # doubles at least this large are integers


def spark_type(t: str) -> T.DataType:
    """The Spark type of a DuckDB type of the grammar."""
    if t in _INTS:
        return _INTS[t]
    fam = E.family(t)
    if fam == "decimal":
        return T.DecimalType(*E.decimal_params(t))
    simple = {"FLOAT": T.FloatType(), "DOUBLE": T.DoubleType(), "VARCHAR": T.StringType(),
              "BOOLEAN": T.BooleanType(), "DATE": T.DateType(), "TIMESTAMP": T.TimestampNTZType(),
              "TIMESTAMP WITH TIME ZONE": T.TimestampType()}
    if t in simple:
        return simple[t]
    if fam == "null":
        return T.NullType()
    raise InvalidExpressionError(f"no Spark type for {t}")


def literal(value, t: str) -> Column:
    """A typed Spark literal of DuckDB type ``t``."""
    fam = E.family(t)
    if value is None:
        return F.lit(None) if fam == "null" else F.lit(None).cast(spark_type(t))
    if fam == "timestamptz":
        micros = (value.astimezone(dt.UTC) - _EPOCH) // dt.timedelta(microseconds=1)
        return F.timestamp_micros(F.lit(micros))
    if fam == "timestamp":
        return F.lit(value.isoformat(sep=" ")).cast(T.TimestampNTZType())
    if fam == "decimal":
        return F.lit(decimal.Decimal(value)).cast(spark_type(t))
    return F.lit(value).cast(spark_type(t))


def _fold(sql: str) -> object:
    """DuckDB's value of a constant expression (our rendering of a checked tree)."""
    try:
        return duck.rows(f"SELECT {sql}")[0][0]
    except Exception as e:  # noqa: BLE001 - e.g. a constant that does not convert
        raise InvalidExpressionError(f"{sql}: {str(e).splitlines()[0]}") from None


class Builder:
    """Builds the Spark column of one checked expression; ``column(ref)`` gives a
    column ref's Column."""

    def __init__(self, chk: E.Checked, column: Callable[[E.ColumnRef], Column]) -> None:
        self.chk = chk
        self.column = column

    # -- types ---------------------------------------------------------------------
    def t(self, node: dict) -> str:
        return self.chk.types[id(node)]

    def as_types(self, nodes: list[dict], t: str) -> list[Column]:
        """``as_type`` for many nodes; their constants folded by DuckDB in one query (IN lists)."""
        consts = [n for n in nodes if E.is_constant(n) and E.family(self.t(n)) != "interval"]
        if len(consts) < 2 or E.family(t) == "null":
            return [self.as_type(n, t) for n in nodes]
        sql = ", ".join(f"CAST(({E.render(n)}) AS {t})" for n in consts)
        try:
            values = dict(zip((id(n) for n in consts), duck.rows(f"SELECT {sql}")[0], strict=True))
        except Exception as e:  # noqa: BLE001 - e.g. a constant that does not convert
            raise InvalidExpressionError(f"{sql[:200]}: {str(e).splitlines()[0]}") from None
        return [literal(values[id(n)], t) if id(n) in values else self.as_type(n, t) for n in nodes]

    def as_type(self, node: dict, t: str) -> Column:
        """``node`` converted to DuckDB type ``t`` the way DuckDB converts it."""
        src = self.t(node)
        if E.is_constant(node) and E.family(src) != "interval":
            sql = E.render(node)
            return literal(_fold(f"CAST(({sql}) AS {t})" if src != t
                                 and E.family(t) != "null" else sql), t)
        return cast(self.build(node), src, t)

    # -- nodes ---------------------------------------------------------------------
    def build(self, node: dict) -> Column:
        cls: str | None = node.get("class")
        typ: Any = node.get("type")  # a str on every node the grammar checked
        t = self.t(node)
        if E.is_constant(node) and E.family(t) != "interval":
            return literal(_fold(E.render(node)), t)
        if cls == "COLUMN_REF":
            return self.column(self.chk.refs[id(node)])
        if cls == "CONJUNCTION":
            out = None
            for k in node["children"]:
                c = self.build(k)
                out = c if out is None else (out & c if typ == "CONJUNCTION_AND" else out | c)
            assert out is not None  # a conjunction has children
            return out
        if cls == "COMPARISON":
            common = self.chk.common[id(node)]
            a, b = self.as_type(node["left"], common), self.as_type(node["right"], common)
            op = E.COMPARISONS[typ]
            if op == "IS DISTINCT FROM":
                return ~a.eqNullSafe(b)
            if op == "IS NOT DISTINCT FROM":
                return a.eqNullSafe(b)
            return {"=": a == b, "<>": a != b, "<": a < b, ">": a > b, "<=": a <= b,
                    ">=": a >= b}[op]
        if cls == "BETWEEN":
            common = self.chk.common[id(node)]
            x = self.as_type(node["input"], common)
            return ((x >= self.as_type(node["lower"], common))
                    & (x <= self.as_type(node["upper"], common)))
        if cls == "OPERATOR":
            kids = node["children"]
            if typ == "OPERATOR_NOT":
                return ~self.build(kids[0])
            if typ == "OPERATOR_IS_NULL":
                return self.build(kids[0]).isNull()
            if typ == "OPERATOR_IS_NOT_NULL":
                return self.build(kids[0]).isNotNull()
            if typ in ("COMPARE_IN", "COMPARE_NOT_IN"):
                common = self.chk.common[id(node)]
                x = self.as_type(kids[0], common)
                inn = x.isin(*self.as_types(kids[1:], common))
                return ~inn if typ == "COMPARE_NOT_IN" else inn
            if typ == "OPERATOR_COALESCE":
                return F.coalesce(*[self.as_type(k, t) for k in kids])
        if cls == "CASE":
            out = None
            for chk in node["case_checks"]:
                cond, val = self.build(chk["when_expr"]), self.as_type(chk["then_expr"], t)
                out = F.when(cond, val) if out is None else out.when(cond, val)
            other = node.get("else_expr")
            assert out is not None  # a CASE has a WHEN
            return out.otherwise(self.as_type(other, t) if other is not None else literal(None, t))
        if cls == "CAST":
            return self.as_type(node["child"], t)
        if cls == "FUNCTION":
            return self.function(node, t)
        raise InvalidExpressionError(f"{E.render(node)}: no Spark form")

    def args(self, node: dict) -> list[dict]:
        return [a["expression"] for a in node.get("arguments") or []]

    def function(self, node: dict, t: str) -> Column:
        name = node["function_name"].lower()
        args = self.args(node)
        fam = E.family(t)
        if name in ("+", "-", "*") and len(args) == 2:
            return self.arith(name, args, t)
        if name == "-":
            return -self.as_type(args[0], t)
        if name == "+":
            return self.as_type(args[0], t)
        if name == "/":
            return _divide(self.as_type(args[0], t), self.as_type(args[1], t), spark_type(t))
        if name == "%":
            a, b = self.as_type(args[0], t), self.as_type(args[1], t)
            if fam == "float":  # DuckDB: fmod, NaN for a zero divisor; Spark raises
                return F.when(b == 0, F.lit(float("nan")).cast(spark_type(t))).otherwise(a % b)
            return a % b
        if name == "||":
            return F.concat(*[self.as_type(a, "VARCHAR") for a in args])
        if name in E.LIKE_FUNCTIONS:
            return self.like(name, args)
        canon = E.FUNCTIONS[name][0]
        fn = getattr(self, "fn_" + canon, None)
        if fn is None:
            raise InvalidExpressionError(f"{canon}: no Spark form")
        return fn(args, t, node)

    def arith(self, op: str, args: list[dict], t: str) -> Column:
        a, b = args
        fa, fb = E.family(self.t(a)), E.family(self.t(b))
        if "interval" in (fa, fb):
            base, iv = (a, b) if fb == "interval" else (b, a)
            x = self.as_type(base, t)
            months, days, micros = _interval(E.render(iv))
            if op == "-":
                months, days, micros = -months, -days, -micros
            return x + F.make_interval(
                F.lit(0), F.lit(months), F.lit(0), F.lit(days), F.lit(0), F.lit(0),
                F.lit(decimal.Decimal(micros).scaleb(-6)).cast(T.DecimalType(18, 6)))
        if fa == "date" and fb == "date":
            return F.datediff(self.build(a), self.build(b)).cast(spark_type(t))
        if fa == "date" or fb == "date":
            d, n = (a, b) if fa == "date" else (b, a)
            count = self.as_type(n, "INTEGER")
            return (F.date_add(self.build(d), count) if op == "+"
                    else F.date_sub(self.build(d), count))
        # exact in Spark's decimal arithmetic, then DuckDB's result type
        if E.family(t) == "decimal":
            x, y = self.build(a), self.build(b)
        else:
            x, y = self.as_type(a, t), self.as_type(b, t)
        out = {"+": x + y, "-": x - y, "*": x * y}[op]
        return out.cast(spark_type(t))

    def like(self, name: str, args: list[dict]) -> Column:
        s = self.as_type(args[0], "VARCHAR")
        neg = name.startswith(("!", "not_"))
        ci = "~~*" in name or "ilike" in name
        if len(args) == 3:
            pattern, esc = self.as_type(args[1], "VARCHAR"), F.lit(args[2]["literal"]["text"])
        else:  # DuckDB's LIKE has no escape character; Spark's default is '\\': escape it
            p = args[1]
            if E.is_constant(p):
                v = _fold(E.render(p))
                pattern = (F.lit(None).cast("string") if v is None
                           else F.lit(str(v).replace("\\", "\\\\")))
            else:
                pattern = F.replace(self.as_type(p, "VARCHAR"), F.lit("\\"), F.lit("\\\\"))
            esc = F.lit("\\")
        out = F.ilike(s, pattern, esc) if ci else F.like(s, pattern, esc)
        return ~out if neg else out

    # -- functions: each returns DuckDB's value in DuckDB's type t -----------------------
    def fn_abs(self, args, t, node):
        return F.abs(self.as_type(args[0], t))

    def _integral(self, fn, args, t):
        x = self.build(args[0])
        src = E.family(self.t(args[0]))
        if src == "int":
            return self.as_type(args[0], t)
        # Spark's ceil/floor of a double is a BIGINT (and overflows); DuckDB keeps a double
        if src == "float":
            d = x.cast("double")
            return (F.when(F.abs(d) < _EXACT_DOUBLE, fn(d).cast("double")).otherwise(d)
                    .cast(spark_type(t)))
        return fn(x).cast(spark_type(t))

    def fn_ceil(self, args, t, node):
        return self._integral(F.ceil, args, t)

    def fn_floor(self, args, t, node):
        return self._integral(F.floor, args, t)

    def fn_trunc(self, args, t, node):
        def trunc(c: Column) -> Column:
            return F.when(c >= 0, F.floor(c)).otherwise(F.ceil(c))
        return self._integral(trunc, args, t)

    def fn_round(self, args, t, node):
        n = int(args[1]["literal"]["text"].replace("_", "")) if len(args) == 2 else 0
        x = self.build(args[0])
        # n == 0 (the grammar): half away from zero, like Spark's
        if E.family(self.t(args[0])) == "float":
            d = x.cast("double")
            return F.when(F.abs(d) < _EXACT_DOUBLE, F.round(d, 0)).otherwise(d).cast(spark_type(t))
        return F.round(x, n).cast(spark_type(t))

    def fn_sqrt(self, args, t, node):
        return F.sqrt(self.as_type(args[0], "DOUBLE")).cast(spark_type(t))

    def fn_power(self, args, t, node):
        return F.pow(self.as_type(args[0], "DOUBLE"), self.as_type(args[1],
                                                                   "DOUBLE")).cast(spark_type(t))

    def fn_greatest(self, args, t, node):
        cols = [self.as_type(a, t) for a in args]
        return cols[0] if len(cols) == 1 else F.greatest(*cols)

    def fn_least(self, args, t, node):
        cols = [self.as_type(a, t) for a in args]
        return cols[0] if len(cols) == 1 else F.least(*cols)

    def fn_nullif(self, args, t, node):
        common = self.chk.common[id(node)]
        same = self.as_type(args[0], common) == self.as_type(args[1], common)
        return F.when(same, literal(None, t)).otherwise(self.as_type(args[0], t))

    def _s(self, args, i=0) -> Column:
        return self.as_type(args[i], "VARCHAR")

    def fn_lower(self, args, t, node):
        return F.lower(self._s(args))

    def fn_upper(self, args, t, node):
        return F.upper(self._s(args))

    def fn_length(self, args, t, node):
        return F.char_length(self._s(args)).cast(spark_type(t))

    def fn_trim(self, args, t, node):
        return F.trim(self._s(args))

    def fn_ltrim(self, args, t, node):
        return F.ltrim(self._s(args))

    def fn_rtrim(self, args, t, node):
        return F.rtrim(self._s(args))

    def fn_substring(self, args, t, node):
        """DuckDB: 1-based start, 0 and negatives count as in SQL (negative: from the end), a
        negative length takes the characters before the start; all clipped to the string."""
        s = self._s(args)
        n = F.char_length(s).cast("long")
        start = self.as_type(args[1], "BIGINT")
        first = F.when(start > 0, start).when(start == 0, F.lit(0).cast("long")) \
            .otherwise(n + 1 + start)
        if len(args) == 3:
            length = self.as_type(args[2], "BIGINT")
            lo = F.when(length >= 0, first).otherwise(first + length)
            hi = F.when(length >= 0, first + length).otherwise(first)
        else:
            lo, hi = first, n + 1
        lo2 = F.greatest(lo, F.lit(1).cast("long"))
        count = F.greatest(F.least(hi, n + 1) - lo2, F.lit(0).cast("long"))
        return F.when(lo2 > n, F.lit("")).otherwise(
            F.substring(s, lo2.cast("int"), count.cast("int")))

    def fn_concat(self, args, t, node):
        # skips NULLs, as DuckDB
        return F.concat_ws("", *[self._s(args, i) for i in range(len(args))])

    def fn_replace(self, args, t, node):
        return F.replace(self._s(args, 0), self._s(args, 1), self._s(args, 2))

    def fn_starts_with(self, args, t, node):
        return F.startswith(self._s(args, 0), self._s(args, 1))

    def fn_ends_with(self, args, t, node):
        return F.endswith(self._s(args, 0), self._s(args, 1))

    def fn_contains(self, args, t, node):
        return F.contains(self._s(args, 0), self._s(args, 1))

    def fn_strpos(self, args, t, node):
        return F.position(self._s(args, 1), self._s(args, 0)).cast(spark_type(t))

    def _side(self, fn, args, t):
        s, k = self._s(args, 0), self.as_type(args[1], "BIGINT")
        # negative: all but |k|
        keep = F.when(k >= 0, k).otherwise(F.greatest(F.char_length(s) + k, F.lit(0)))
        return fn(s, keep.cast("int"))

    def fn_left(self, args, t, node):
        return self._side(F.left, args, t)

    def fn_right(self, args, t, node):
        return self._side(F.right, args, t)

    def _pad(self, fn, args, t):
        s, k, pad = self._s(args, 0), self.as_type(args[1], "INTEGER"), self._s(args, 2)
        short = (pad == "") & (k > F.char_length(s))
        fail = F.raise_error(F.lit("lakevilla-check[expr]: insufficient "
                                   "padding in LPAD/RPAD")).cast("string")
        return F.when(short, fail).otherwise(fn(s, k, pad))

    def fn_lpad(self, args, t, node):
        return self._pad(F.lpad, args, t)

    def fn_rpad(self, args, t, node):
        return self._pad(F.rpad, args, t)

    # dates and times (the session time zone is UTC, as DuckDB's)
    def _part(self, part: str, x: Column, t: str) -> Column:
        if part in ("dayofweek", "dow"):
            return (F.dayofweek(x) - 1).cast(spark_type(t))  # DuckDB: Sunday is 0
        fn = {"year": F.year, "month": F.month, "day": F.dayofmonth, "hour": F.hour,
              "minute": F.minute, "second": F.second, "dayofyear": F.dayofyear, "doy": F.dayofyear,
              "quarter": F.quarter, "week": F.weekofyear}[part]
        return fn(x).cast(spark_type(t))

    def _time(self, args, i=0) -> Column:
        return self.build(args[i])

    def fn_year(self, args, t, node):
        return self._part("year", self._time(args), t)

    def fn_month(self, args, t, node):
        return self._part("month", self._time(args), t)

    def fn_day(self, args, t, node):
        return self._part("day", self._time(args), t)

    def fn_hour(self, args, t, node):
        return self._part("hour", self._time(args), t)

    def fn_minute(self, args, t, node):
        return self._part("minute", self._time(args), t)

    def fn_second(self, args, t, node):
        return self._part("second", self._time(args), t)

    def fn_dayofweek(self, args, t, node):
        return self._part("dayofweek", self._time(args), t)

    def fn_dayofyear(self, args, t, node):
        return self._part("dayofyear", self._time(args), t)

    def fn_quarter(self, args, t, node):
        return self._part("quarter", self._time(args), t)

    def fn_week(self, args, t, node):
        return self._part("week", self._time(args), t)

    def fn_date_part(self, args, t, node):
        return self._part(args[0]["literal"]["text"].lower(), self._time(args, 1), t)

    def fn_date_trunc(self, args, t, node):
        part = args[0]["literal"]["text"].lower()
        # DuckDB truncates in its result type (a date becomes a timestamp)
        x = self.as_type(args[1], t)
        return F.date_trunc(part, x).cast(spark_type(t))

    def fn_date_diff(self, args, t, node):
        return F.datediff(self.as_type(args[2], "DATE"), self.as_type(args[1],
                                                                      "DATE")).cast(spark_type(t))

    def fn_make_date(self, args, t, node):
        return F.make_date(*[self.as_type(a, "INTEGER") for a in args])

    def fn_last_day(self, args, t, node):
        return F.last_day(self._time(args))

    def fn_current_date(self, args, t, node):
        return F.current_date()

    def fn_current_timestamp(self, args, t, node):
        return F.current_timestamp()


def _divide(a: Column, b: Column, t: T.DataType) -> Column:
    """IEEE division, as DuckDB divides: x/0 is +-inf (NaN for 0/0 and NaN/0); Spark raises."""
    nan, inf = F.lit(float("nan")), F.lit(float("inf"))
    positive_zero = b.cast("string") != F.lit("-0.0")
    signed = F.when((a > 0) == positive_zero, inf).otherwise(-inf)
    at_zero = F.when(F.isnan(a) | (a == 0), nan).otherwise(signed)
    return F.when(b == 0, at_zero.cast(t)).otherwise(a / b)


def _interval(sql: str) -> tuple[int, int, int]:
    """(months, days, microseconds) of a constant DuckDB interval."""
    iv = f"({sql})"
    try:
        y, m, d, h, mi, us = duck.rows(
            f"SELECT datepart('year', {iv}), datepart('month', {iv}), datepart('day', {iv}), "
            f"datepart('hour', {iv}), datepart('minute', {iv}), datepart('microseconds', {iv})")[0]
    except Exception as e:  # noqa: BLE001
        raise InvalidExpressionError(f"{sql}: {str(e).splitlines()[0]}") from None
    return int(y) * 12 + int(m), int(d), (int(h) * 3600 + int(mi) * 60) * 1_000_000 + int(us)


def cast(c: Column, src: str, dst: str) -> Column:
    """A Spark column of DuckDB type ``src`` converted to ``dst`` as DuckDB's CAST converts it
    (the pairs ``expressions.castable`` allows)."""
    if src == dst:
        return c
    fs, fd = E.family(src), E.family(dst)
    st = spark_type(dst)
    if fs == "null":
        return c.cast(st)
    if fd == "int":
        if fs == "float":  # DuckDB rounds half to even (nearbyint)
            return F.bround(c.cast("double"), 0).cast(st)
        if fs == "decimal":  # DuckDB rounds half away from zero
            return F.round(c, 0).cast(st)
        if fs == "string":  # DuckDB accepts a fraction and rounds it; Spark's int parser does not
            plain = c.rlike(r"^\s*[+-]?[0-9]+\s*$")
            return F.when(plain | c.isNull(), c.cast(st)).otherwise(
                F.round(c.cast(T.DecimalType(38, 10)), 0).cast(st))
        return c.cast(st)
    if fd == "bool" and fs in E.NUMERIC:
        return c != 0
    if fd == "timestamptz" and fs == "date":
        return c.cast(T.TimestampNTZType()).cast(st)
    return c.cast(st)


def assigned(chk: E.Checked, target: pa.DataType,
             column: Callable[[E.ColumnRef], Column]) -> Column:
    """A SET value converted to its column's type by the assignment cast (CAST
    to the column type)."""
    b = Builder(chk, column)
    return b.as_type(chk.node, E.duckdb_type(target))


def condition(chk: E.Checked, column: Callable[[E.ColumnRef], Column]) -> Column:
    return Builder(chk, column).build(chk.node)


def first_broken(df: Any, rules: list[E.Checked],
                 column: Callable[[E.ColumnRef], Column]) -> tuple[int, dict] | None:
    """The first row of ``df`` that breaks one of ``rules`` (false or NULL breaks it, as in
    Delta), with the index of the rule it breaks; one Spark job that stops at that row."""
    flags = [F.coalesce(condition(chk, column), F.lit(False)).alias(f"__lv_ok{i}")
             for i, chk in enumerate(rules)]
    everything = F.lit(True)
    for i in range(len(rules)):
        everything = everything & F.col(f"__lv_ok{i}")
    found = df.select("*", *flags).filter(~everything).limit(1).collect()
    if not found:
        return None
    row = found[0].asDict(recursive=True)
    first = next(i for i in range(len(rules)) if not row[f"__lv_ok{i}"])
    return first, {k: v for k, v in row.items() if not k.startswith("__lv_ok")}
