"""Predicates over file statistics: pruning for reads, precision locks for conflicts.

DuckDB parses the ``where`` text (``json_serialize_sql``); we walk the parse tree
and decide, per data file, whether any row *may* satisfy it, from partition
values and min/max/nullCount statistics. The answer is conservative: anything we
do not understand may match. The same test decides whether a concurrent commit's
new file can satisfy a transaction's read predicate (TreeCat's precision locking).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import threading
from functools import lru_cache
from typing import Any

import pyarrow as pa

from .delta.actions import AddFile

_local = threading.local()


def _con():
    import duckdb

    con = getattr(_local, "con", None)
    if con is None:
        con = duckdb.connect()
        _local.con = con
    return con


class Predicate:
    """A parsed ``where``; ``node`` is None when the text could not be parsed (no pruning)."""

    def __init__(self, text: str | None, node: dict | None) -> None:
        self.text = text
        self.node = node

    def __repr__(self) -> str:
        return f"Predicate({self.text!r})"

    def columns(self) -> set[str]:
        out: set[str] = set()

        def walk(o: Any) -> None:
            if isinstance(o, dict):
                if o.get("class") == "COLUMN_REF":
                    out.add(o["column_names"][-1].lower())
                for v in o.values():
                    walk(v)
            elif isinstance(o, list):
                for v in o:
                    walk(v)

        walk(self.node)
        return out


@lru_cache(maxsize=4096)
def parse_predicate(where: str | None) -> Predicate:
    if where is None or not where.strip():
        return Predicate(None, None)
    try:
        raw = _con().execute("SELECT json_serialize_sql(?)", ["SELECT * FROM __t WHERE " + where]).fetchone()[0]
        tree = json.loads(raw)
    except Exception:
        return Predicate(where, None)
    if tree.get("error") or len(tree.get("statements", [])) != 1:
        return Predicate(where, None)
    return Predicate(where, tree["statements"][0]["node"].get("where_clause"))


# -- typed values ------------------------------------------------------------

_FLIP = {
    "COMPARE_LESSTHAN": "COMPARE_GREATERTHAN",
    "COMPARE_GREATERTHAN": "COMPARE_LESSTHAN",
    "COMPARE_LESSTHANOREQUALTO": "COMPARE_GREATERTHANOREQUALTO",
    "COMPARE_GREATERTHANOREQUALTO": "COMPARE_LESSTHANOREQUALTO",
    "COMPARE_EQUAL": "COMPARE_EQUAL",
    "COMPARE_NOTEQUAL": "COMPARE_NOTEQUAL",
}
_NO_VALUE = object()


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
    """``value`` (stat JSON, partition string or literal text) as a Python value of type ``t``."""
    if value is None:
        return None
    if pa.types.is_integer(t):
        if isinstance(value, str) and not value.lstrip("-").isdigit():
            f = float(value)
            return f  # compare 1.5 against ints numerically
        return int(value)
    if pa.types.is_floating(t):
        return float(value)
    if pa.types.is_decimal(t):
        return decimal.Decimal(str(value))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return str(value)
    if pa.types.is_boolean(t):
        if isinstance(value, str):
            return value.strip().lower() == "true"
        return bool(value)
    if pa.types.is_date(t):
        return dt.date.fromisoformat(str(value)[:10])
    if pa.types.is_timestamp(t):
        return _parse_ts(str(value), t.tz is not None)
    raise TypeError(f"no coercion to {t}")


def _literal(node: dict) -> Any:
    """The constant a node denotes, as text/number; _NO_VALUE if not a constant."""
    cls = node.get("class")
    if cls == "CAST":
        return _literal(node.get("child", {}))
    if cls != "CONSTANT":
        return _NO_VALUE
    lit = node.get("literal")
    if lit is not None:
        if lit.get("kind") == "NULL_LITERAL":
            return None
        return lit.get("text")
    val = node.get("value", {})
    if val.get("is_null"):
        return None
    return val.get("value", _NO_VALUE)


def _column(node: dict) -> str | None:
    if node.get("class") == "COLUMN_REF":
        return node["column_names"][-1].lower()
    return None


class FileStats:
    """Typed min/max/null facts about one file, for the columns a predicate names."""

    def __init__(self, add: AddFile, schema: pa.Schema, partition_columns: list[str]) -> None:
        self.add = add
        self.types = {f.name.lower(): f.type for f in schema}
        self.partition = {c.lower(): c for c in partition_columns}
        st = add.parsed_stats
        self.num_records = st.get("numRecords")
        self.mins = {k.lower(): v for k, v in (st.get("minValues") or {}).items()}
        self.maxs = {k.lower(): v for k, v in (st.get("maxValues") or {}).items()}
        self.nulls = {k.lower(): v for k, v in (st.get("nullCount") or {}).items()}

    def bounds(self, col: str) -> tuple[Any, Any, int | None, bool] | None:
        """(min, max, null_count, max_is_exact) for ``col``; None if unknown."""
        t = self.types.get(col)
        if t is None:
            return None
        try:
            if col in self.partition:
                raw = self.add.partition_values.get(self.partition[col])
                if raw is None:
                    return (None, None, self.num_records if self.num_records is not None else 1, True)
                v = coerce(raw, t)
                return (v, v, 0, True)
            lo, hi = self.mins.get(col), self.maxs.get(col)
            nulls = self.nulls.get(col)
            if isinstance(nulls, dict):
                return None  # struct column
            lo = coerce(lo, t) if lo is not None else None
            hi = coerce(hi, t) if hi is not None else None
        except (TypeError, ValueError, decimal.InvalidOperation):
            return None
        exact = True
        if isinstance(hi, str) and len(hi) >= 32:
            exact = False  # other writers truncate long string maxima
        if isinstance(hi, dt.datetime):
            hi = hi + dt.timedelta(milliseconds=1)  # Spark truncates timestamp maxima to ms
            exact = False
        return (lo, hi, nulls if isinstance(nulls, int) else None, exact)


def _cmp_may_match(op: str, b, c) -> bool:
    lo, hi, _nulls, exact = b
    if lo is None or hi is None:
        return True
    try:
        if op == "COMPARE_EQUAL":
            return lo <= c <= hi
        if op == "COMPARE_NOTEQUAL":
            return not (exact and lo == hi == c)
        if op == "COMPARE_LESSTHAN":
            return lo < c
        if op == "COMPARE_LESSTHANOREQUALTO":
            return lo <= c
        if op == "COMPARE_GREATERTHAN":
            return hi > c or not exact
        if op == "COMPARE_GREATERTHANOREQUALTO":
            return hi >= c or not exact
    except TypeError:
        return True
    return True


class _Evaluator:
    def __init__(self, stats: FileStats) -> None:
        self.s = stats

    def may(self, n: dict | None) -> bool:
        if n is None:
            return True
        cls, typ = n.get("class"), n.get("type")
        if cls == "CONJUNCTION":
            kids = n.get("children", [])
            if typ == "CONJUNCTION_AND":
                return all(self.may(k) for k in kids)
            if typ == "CONJUNCTION_OR":
                return any(self.may(k) for k in kids)
            return True
        if cls == "CONSTANT":
            v = _literal(n)
            return not (v is None or str(v).lower() == "false")
        if cls == "COMPARISON" and typ in _FLIP:
            left, right = n["left"], n["right"]
            col, lit, op = _column(left), _literal(right), typ
            if col is None:
                col, lit, op = _column(right), _literal(left), _FLIP[typ]
            if col is None or lit is _NO_VALUE:
                return True
            if lit is None:
                return False  # comparison with NULL is never true
            b = self.s.bounds(col)
            if b is None:
                return True
            if b[0] is None and b[1] is None:
                return not (b[2] is not None and self.s.num_records is not None and b[2] >= self.s.num_records)
            try:
                c = coerce(lit, self.s.types[col])
            except (TypeError, ValueError, decimal.InvalidOperation):
                return True
            return _cmp_may_match(op, b, c)
        if cls == "BETWEEN":
            col = _column(n.get("input", {}))
            lo_l, hi_l = _literal(n.get("lower", {})), _literal(n.get("upper", {}))
            if col is None or lo_l is _NO_VALUE or hi_l is _NO_VALUE or lo_l is None or hi_l is None:
                return True
            b = self.s.bounds(col)
            if b is None or b[0] is None or b[1] is None:
                return True
            try:
                t = self.s.types[col]
                return _cmp_may_match("COMPARE_GREATERTHANOREQUALTO", b, coerce(lo_l, t)) and _cmp_may_match(
                    "COMPARE_LESSTHANOREQUALTO", b, coerce(hi_l, t))
            except (TypeError, ValueError, decimal.InvalidOperation):
                return True
        if cls == "OPERATOR" and typ == "COMPARE_IN":
            kids = n.get("children", [])
            col = _column(kids[0]) if kids else None
            lits = [_literal(k) for k in kids[1:]]
            if col is None or any(v is _NO_VALUE for v in lits):
                return True
            b = self.s.bounds(col)
            if b is None or b[0] is None or b[1] is None:
                return True
            try:
                t = self.s.types[col]
                return any(v is not None and _cmp_may_match("COMPARE_EQUAL", b, coerce(v, t)) for v in lits)
            except (TypeError, ValueError, decimal.InvalidOperation):
                return True
        if cls == "OPERATOR" and typ in ("OPERATOR_IS_NULL", "OPERATOR_IS_NOT_NULL"):
            kids = n.get("children", [])
            col = _column(kids[0]) if kids else None
            b = self.s.bounds(col) if col else None
            if b is None or b[2] is None:
                return True
            if typ == "OPERATOR_IS_NULL":
                return b[2] > 0
            return self.s.num_records is None or b[2] < self.s.num_records
        return True


def file_may_match(pred: Predicate, add: AddFile, schema: pa.Schema, partition_columns: list[str]) -> bool:
    """False only when no row of ``add`` can satisfy ``pred``."""
    if pred.node is None:
        return True
    return _Evaluator(FileStats(add, schema, partition_columns)).may(pred.node)


def prune(pred: Predicate, files: list[AddFile], schema: pa.Schema, partition_columns: list[str]) -> list[AddFile]:
    if pred.node is None:
        return list(files)
    return [a for a in files if file_may_match(pred, a, schema, partition_columns)]
