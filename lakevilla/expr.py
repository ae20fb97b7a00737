"""Predicates over file statistics: pruning for reads, precision locks for conflicts.

A ``where`` is checked by the grammar (``lakevilla.expressions``) and turned into
a predicate over one row of statistics per file: its partition values, min/max
and null counts. DuckDB evaluates that predicate over all files in one query, so
every comparison means exactly what it means when DuckDB filters the rows (the
same implicit casts, NaN and NULL rules). A file is dropped only when that
evaluation says no row can match; the same test decides whether a concurrent
commit's new file may hold a row a transaction's read predicate selects
(TreeCat's precision locking), so a wrongly dropped file would be a missed
conflict as well as a missed row.

The exact rules (carry them over when this moves to a columnar snapshot):

* Modelled atoms: ``col <op> constant`` (either side), ``col [NOT] IN (constants)``,
  ``col BETWEEN c1 AND c2``, ``col IS [NOT] NULL``, a boolean column, constant
  conditions, and AND / OR / NOT over them (NOT swaps "may be true" with "may be
  false"; the complement of a comparison is exact because DuckDB orders NaN
  above every number and NULLs are handled apart). Everything else (functions,
  arithmetic on the column, casts of the column, struct fields, column vs column,
  IS DISTINCT FROM, the clock) may match.
* ``col`` is a top-level column; the constant has no column and no clock in it.
  Its DuckDB type must not make DuckDB cast the column to something whose order
  differs from the statistics' order: numbers with numbers, strings with
  strings, dates/timestamps with dates/timestamps, and a plain string literal
  with anything (DuckDB casts the literal to the column's type). Otherwise: may match.
  IN lists and BETWEEN bounds need one type among their constants (their common
  type then equals the single comparison's).
* With the column's implicit cast monotone, ``exists v in [min, max]: v op c`` is
  decided on the bounds alone: ``<``/``<=`` on min, ``>``/``>=`` on max, ``=`` on
  both, ``<>`` false only when min = max = c. Unknown bounds may match.
* Floating-point files may hold NaN whatever min/max say (writers leave NaN out of
  them), so a float atom also holds when it holds for NaN (``f > 5``: yes).
* A comparison needs a non-null value: a file whose null count equals its row
  count (or whose partition value is null) matches no comparison.
* Statistics are read by Delta's rules (``_bounds``): string maxima of 32 or more
  characters may be truncated prefixes (no upper bound); timestamp maxima may be
  truncated to milliseconds (+1 ms); decimals wider than 15 digits may have gone
  through a double (widened by one ulp); a float min of 0 is -0.0 and a max of 0
  is +0.0; non-finite or mistyped bounds are unknown; ``''`` in partitionValues
  is null.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pyarrow as pa

from . import duck
from . import expressions as E
from .delta.actions import AddFile
from .errors import InvalidExpressionError

STRING_PREFIX_LIMIT = 32  # string maxima this long may be truncated prefixes (Delta Spark's default)
EXACT_DECIMAL_DIGITS = 15  # decimals up to this precision survive a double round trip exactly


class Predicate:
    """A ``where`` as the grammar parsed it; ``node`` is None when it is not one (no pruning)."""

    def __init__(self, text: str | None, node: dict | None) -> None:
        self.text = text
        self.node = node

    def __repr__(self) -> str:
        return f"Predicate({self.text!r})"

    def columns(self) -> set[str]:
        out: set[str] = set()
        if self.node is not None:
            for n in E.walk(self.node):
                if n.get("class") == "COLUMN_REF":
                    out.add(n["column_names"][0].lower())
        return out


@lru_cache(maxsize=4096)
def parse_predicate(where: str | None) -> Predicate:
    """The grammar's tree of ``where`` (no types: the schema is not known here). Text the
    grammar refuses is never evaluated, not even against statistics: it prunes nothing."""
    if where is None or not str(where).strip():
        return Predicate(None, None)
    try:
        return Predicate(where, E.parse(where))
    except InvalidExpressionError:
        return Predicate(where, None)


# -- typed values from the log -------------------------------------------------------------

def _parse_ts(s: str, tz: bool) -> dt.datetime:
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
        return _parse_ts(str(value), t.tz is not None)
    raise TypeError(f"no coercion to {t}")


def partition_value(raw: str | None, t: pa.DataType) -> Any:
    """A ``partitionValues`` entry as a typed value: Delta reads null and ``''`` alike as null."""
    if raw is None or raw == "":
        return None
    return coerce(raw, t)


def _fits(v: decimal.Decimal, t: pa.Decimal128Type) -> bool:
    return v.is_finite() and len(v.as_tuple().digits) - max(0, -v.as_tuple().exponent) <= t.precision - t.scale


def _bounds(lo: Any, hi: Any, t: pa.DataType) -> tuple[Any, Any]:
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
                return d if _fits(d, t) else None
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
                ts = _parse_ts(v, t.tz is not None)
                return ts + dt.timedelta(milliseconds=1) if upper else ts  # maxima truncated to ms
        except (TypeError, ValueError, ArithmeticError, OverflowError):
            return None
        return None

    return one(lo, False), one(hi, True)


# -- the statistics predicate ---------------------------------------------------------------

_NEGATE = {"=": "<>", "<>": "=", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
_FLIP = {"=": "=", "<>": "<>", "<": ">", ">": "<", "<=": ">=", ">=": "<="}
_STAT_FAMILIES = (*E.NUMERIC, "string", "bool", *E.TIME)


@dataclass(frozen=True)
class _Col:
    name: str
    type: pa.DataType
    partition: bool
    nan: bool  # floating-point data column: may hold NaN outside min/max


@dataclass(frozen=True)
class _Plan:
    sql: str | None  # None: nothing prunes
    columns: tuple[_Col, ...]
    decimals: bool  # reparse stats with exact decimals


class _Translate:
    """The checked ``where`` as SQL over one statistics row per file (columns c<k>_lo, _hi,
    _nullable, _valued), answering "may some row make it true (or false)"."""

    def __init__(self, chk: E.Checked, schema: pa.Schema, partition_columns: tuple[str, ...]) -> None:
        self.chk = chk
        self.schema = schema
        self.parts = {c.lower() for c in partition_columns}
        self.cols: dict[str, int] = {}
        self.meta: list[_Col] = []

    def col(self, node: dict) -> int | None:
        """Index of the stats columns of a plain top-level column node, or None."""
        if node.get("class") != "COLUMN_REF":
            return None
        ref = self.chk.refs[id(node)]
        if ref.fields:
            return None  # struct fields: not modelled
        f = self.schema.field(ref.column)
        fam = E.family(E.duckdb_type(f.type))
        if fam not in _STAT_FAMILIES:
            return None
        if ref.column not in self.cols:
            part = ref.column.lower() in self.parts
            self.cols[ref.column] = len(self.meta)
            self.meta.append(_Col(ref.column, f.type, part, fam == "float" and not part))
        return self.cols[ref.column]

    def const(self, node: dict) -> str | None:
        if not E.is_constant(node):
            return None
        return "(" + E.render(node) + ")"

    def gate(self, k: int, const_nodes: list[dict]) -> bool:
        """Whether comparing the column with these constants keeps the column uncast (or
        monotonically cast), so that its bounds decide."""
        cf = E.family(E.duckdb_type(self.meta[k].type))
        typed = {self.chk.types[id(c)] for c in const_nodes if not E.is_string_literal(c)
                 and E.family(self.chk.types[id(c)]) != "null"}
        if len(typed) > 1:
            return False  # the common type of several constants may differ from each pairwise one
        if len({E.is_string_literal(c) for c in const_nodes}) > 1:
            return False
        for c in const_nodes:
            kf = E.family(self.chk.types[id(c)])
            if kf == "null":
                continue
            if E.is_string_literal(c):
                if cf == "string" or cf in (*E.NUMERIC, *E.TIME, "bool"):
                    continue
                return False
            ok = ((cf in E.NUMERIC and kf in E.NUMERIC) or (cf == "string" and kf == "string")
                  or (cf in E.TIME and kf in E.TIME) or (cf == "bool" and kf == "bool"))
            if not ok:
                return False
        return True

    def atom(self, k: int, op: str, c: str) -> str:
        """May some row of the file satisfy ``col op c``?"""
        lo, hi = f"c{k}_lo", f"c{k}_hi"
        check = {"<": f"{lo} < {c}", "<=": f"{lo} <= {c}", ">": f"{hi} > {c}", ">=": f"{hi} >= {c}",
                 "=": f"({lo} <= {c} AND {hi} >= {c})", "<>": f"NOT ({lo} = {c} AND {hi} = {c})"}[op]
        out = f"coalesce({check}, TRUE)"
        m = self.meta[k]
        if m.nan:
            out = f"({out} OR coalesce(CAST('NaN' AS {E.duckdb_type(m.type)}) {op} {c}, FALSE))"
        return f"(coalesce(c{k}_valued, TRUE) AND {out})"

    def may(self, node: dict, want: bool) -> str:
        """SQL: may some row make ``node`` evaluate to ``want`` (TRUE or FALSE)?"""
        cls, typ = node.get("class"), node.get("type")
        if E.is_constant(node) and E.family(self.chk.types[id(node)]) in ("bool", "null"):
            sql = E.render(node)
            return f"coalesce(({sql}), FALSE)" if want else f"coalesce(NOT ({sql}), FALSE)"
        if cls == "CONJUNCTION":
            kids = [self.may(c, want) for c in node["children"]]
            joiner = " AND " if (typ == "CONJUNCTION_AND") == want else " OR "
            return "(" + joiner.join(kids) + ")"
        if cls == "OPERATOR" and typ == "OPERATOR_NOT":
            return self.may(node["children"][0], not want)
        if cls == "COMPARISON" and typ in E.COMPARISONS and "DISTINCT" not in typ:
            op = E.COMPARISONS[typ]
            left, right = node["left"], node["right"]
            k, c = self.col(left), right
            if k is None:
                k, c, op = self.col(right), left, _FLIP[op]
            csql = self.const(c) if k is not None else None
            if k is None or csql is None or not self.gate(k, [c]):
                return "TRUE"
            return self.atom(k, op if want else _NEGATE[op], csql)
        if cls == "OPERATOR" and typ in ("COMPARE_IN", "COMPARE_NOT_IN"):
            kids = node["children"]
            k = self.col(kids[0])
            consts = [self.const(c) for c in kids[1:]]
            if k is None or any(c is None for c in consts) or not self.gate(k, kids[1:]):
                return "TRUE"
            positive = want if typ == "COMPARE_IN" else not want
            if positive:
                return "(" + " OR ".join(self.atom(k, "=", c) for c in consts) + ")"
            return "(" + " AND ".join(self.atom(k, "<>", c) for c in consts) + ")"
        if cls == "BETWEEN":
            k = self.col(node["input"])
            lo, hi = self.const(node["lower"]), self.const(node["upper"])
            if k is None or lo is None or hi is None or not self.gate(k, [node["lower"], node["upper"]]):
                return "TRUE"
            if want:
                return f"({self.atom(k, '>=', lo)} AND {self.atom(k, '<=', hi)})"
            return f"({self.atom(k, '<', lo)} OR {self.atom(k, '>', hi)})"
        if cls == "OPERATOR" and typ in ("OPERATOR_IS_NULL", "OPERATOR_IS_NOT_NULL"):
            k = self.col(node["children"][0])
            if k is None:
                return "TRUE"
            nulls = (typ == "OPERATOR_IS_NULL") == want
            return f"coalesce(c{k}_nullable, TRUE)" if nulls else f"coalesce(c{k}_valued, TRUE)"
        if cls == "COLUMN_REF":
            k = self.col(node)
            if k is None or E.family(E.duckdb_type(self.meta[k].type)) != "bool":
                return "TRUE"
            return self.atom(k, "=", "TRUE" if want else "FALSE")
        return "TRUE"


@lru_cache(maxsize=1024)
def _plan(where: str, schema: pa.Schema, partition_columns: tuple[str, ...]) -> _Plan:
    try:
        chk = E.check_where(where, schema)
    except InvalidExpressionError:
        return _Plan(None, (), False)
    tr = _Translate(chk, schema, partition_columns)
    sql = tr.may(chk.node, True)
    if sql == "TRUE":
        return _Plan(None, (), False)
    cols = tuple(tr.meta)
    return _Plan(sql, cols, any(pa.types.is_decimal(c.type) and not c.partition for c in cols))


def _stats_table(plan: _Plan, files: list[AddFile]) -> pa.Table:
    arrays: dict[str, pa.Array] = {"file": pa.array(range(len(files)), pa.int64())}
    parsed = []
    for a in files:
        st = a.parsed_stats
        if plan.decimals and a.stats:
            try:
                st = json.loads(a.stats, parse_float=decimal.Decimal)
            except ValueError:
                st = {}
        parsed.append(st if isinstance(st, dict) else {})
    for k, c in enumerate(plan.columns):
        los, his, nullable, valued = [], [], [], []
        for a, st in zip(files, parsed, strict=True):
            rows = st.get("numRecords")
            rows = rows if isinstance(rows, int) and not isinstance(rows, bool) else None
            if c.partition:
                try:
                    v = partition_value(a.partition_values.get(c.name), c.type)
                except (TypeError, ValueError, ArithmeticError):
                    los.append(None), his.append(None), nullable.append(None), valued.append(None)
                    continue
                los.append(v), his.append(v)
                nullable.append(v is None and rows != 0)
                valued.append(v is not None and rows != 0)
                continue
            lo, hi = _bounds(_get(st, "minValues", c.name), _get(st, "maxValues", c.name), c.type)
            los.append(lo), his.append(hi)
            nc = _get(st, "nullCount", c.name)
            nc = nc if isinstance(nc, int) and not isinstance(nc, bool) else None
            nullable.append(None if nc is None else nc > 0)
            valued.append(None if nc is None or rows is None else nc < rows)
        arrays[f"c{k}_lo"] = _typed(los, c.type)
        arrays[f"c{k}_hi"] = _typed(his, c.type)
        arrays[f"c{k}_nullable"] = pa.array(nullable, pa.bool_())
        arrays[f"c{k}_valued"] = pa.array(valued, pa.bool_())
    return pa.table(arrays)


def _get(st: dict, key: str, name: str) -> Any:
    m = st.get(key)
    if not isinstance(m, dict):
        return None
    if name in m:
        return m[name]
    low = name.lower()
    return next((v for k2, v in m.items() if k2.lower() == low), None)


def _typed(values: list, t: pa.DataType) -> pa.Array:
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


def prune(pred: Predicate, files: list[AddFile], schema: pa.Schema, partition_columns: list[str]) -> list[AddFile]:
    """The files some row of which may satisfy ``pred`` (all of them when unsure)."""
    files = list(files)
    if pred.node is None or not files:
        return files
    plan = _plan(pred.text, schema, tuple(partition_columns))
    if plan.sql is None:
        return files
    try:
        table = _stats_table(plan, files)
        keep = duck.query(f"SELECT {plan.sql} AS keep FROM __lv_stats ORDER BY file",
                          {"__lv_stats": table}).column("keep")
    except Exception:  # noqa: BLE001 - e.g. a constant that fails to convert: the scan reports it
        return files
    return [a for a, k in zip(files, keep.to_pylist(), strict=True) if k is not False]


def file_may_match(pred: Predicate, add: AddFile, schema: pa.Schema, partition_columns: list[str]) -> bool:
    """False only when no row of ``add`` can satisfy ``pred``."""
    return bool(prune(pred, [add], schema, partition_columns))
