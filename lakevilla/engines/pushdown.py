"""What Parquet scanning may skip for a checked ``where``: a pyarrow filter it implies.

pyarrow evaluates a dataset filter against each row group's statistics (skipping
groups that cannot match) and then against the rows. Its comparison semantics are
not DuckDB's everywhere (NaN, casts between types), so the filter is never the
predicate itself: it is a condition that holds for every row on which DuckDB would
find the ``where`` TRUE, built only from atoms whose meaning is the same in both
(a plain column of an integer, string, date, timestamp or boolean type against a
constant of exactly that type; IS [NOT] NULL). Everything else becomes TRUE (no
restriction). The engine then evaluates the checked ``where`` itself, in DuckDB,
on what the scan returns: pushdown only removes rows that cannot match. When no
part became TRUE the filter is exact (same atoms, Kleene AND/OR on both sides,
NULL dropped like FALSE) and that second evaluation is skipped.

``_may(node, want)`` is an expression that is TRUE whenever ``node`` evaluates to
``want`` (TRUE or FALSE) in DuckDB; NOT swaps the two, AND/OR combine them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidExpressionError
from ..scan import duck
from ..scan import expressions as E

_OPS = {"=": "__eq__", "<>": "__ne__", "<": "__lt__", "<=": "__le__", ">": "__gt__", ">=": "__ge__"}
_NEGATE = {"=": "<>", "<>": "=", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
_FLIP = {"=": "=", "<>": "<>", "<": ">", ">": "<", "<=": ">=", ">=": "<="}
TRUE = pc.scalar(True)
FALSE = pc.scalar(False)


def _pushable(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
            or pa.types.is_date32(t) or pa.types.is_timestamp(t) or pa.types.is_boolean(t))


def _is_true(e: Any) -> bool:
    return e is TRUE


def _and(parts: list) -> Any:
    parts = [p for p in parts if not _is_true(p)]
    if not parts:
        return TRUE
    out = parts[0]
    for p in parts[1:]:
        out = out & p
    return out


def _or(parts: list) -> Any:
    if not parts or any(_is_true(p) for p in parts):
        return TRUE
    out = parts[0]
    for p in parts[1:]:
        out = out | p
    return out


class _Push:
    def __init__(self, chk: E.Checked, schema: pa.Schema) -> None:
        self.chk, self.schema = chk, schema
        self.exact = True  # no part of the predicate was replaced by TRUE

    def loose(self) -> Any:
        """TRUE in place of a part that cannot be pushed: the filter is no longer exact."""
        self.exact = False
        return TRUE

    def column(self, node: dict) -> pa.Field | None:
        if node.get("class") != "COLUMN_REF":
            return None
        ref = self.chk.refs[id(node)]
        if ref.fields:
            return None
        f = self.schema.field(ref.column)
        return f if _pushable(f.type) else None

    def values(self, field: pa.Field, owner: dict, consts: list[dict]) -> list[Any] | None:
        """The constants as values of the column's type, when the operands compare in exactly
        that type (so DuckDB does not cast the column); None otherwise."""
        if self.chk.common.get(id(owner)) != E.duckdb_type(field.type):
            return None
        if not all(E.is_constant(c) for c in consts):
            return None
        sql = ", ".join(f"CAST(({E.render(c)}) AS {E.duckdb_type(field.type)})" for c in consts)
        try:
            row = duck.rows(f"SELECT {sql}")[0]
        except Exception:  # noqa: BLE001 - a constant that does not convert: the scan reports it
            return None
        return list(row)

    def scalar(self, v: Any, field: pa.Field) -> Any:
        return pa.scalar(v, field.type)

    def atom(self, field: pa.Field, op: str, v: Any) -> Any:
        if v is None:
            return FALSE  # a comparison with NULL is never TRUE nor FALSE
        return getattr(pc.field(field.name), _OPS[op])(self.scalar(v, field))

    def may(self, node: dict, want: bool) -> Any:
        cls, typ = node.get("class"), node.get("type")
        if cls == "CONJUNCTION":
            kids = [self.may(c, want) for c in node["children"]]
            return _and(kids) if (typ == "CONJUNCTION_AND") == want else _or(kids)
        if cls == "OPERATOR" and typ == "OPERATOR_NOT":
            return self.may(node["children"][0], not want)
        if cls == "COMPARISON" and typ in E.COMPARISONS and "DISTINCT" not in typ:
            op = E.COMPARISONS[typ]
            f, c = self.column(node["left"]), node["right"]
            if f is None:
                f, c, op = self.column(node["right"]), node["left"], _FLIP[op]
            vals = self.values(f, node, [c]) if f is not None else None
            if vals is None:
                return self.loose()
            return self.atom(f, op if want else _NEGATE[op], vals[0])
        if cls == "OPERATOR" and typ in ("COMPARE_IN", "COMPARE_NOT_IN"):
            kids = node["children"]
            f = self.column(kids[0])
            vals = self.values(f, node, kids[1:]) if f is not None else None
            if f is None or vals is None:
                return self.loose()
            if want == (typ == "COMPARE_IN"):  # the value is in the list
                present = [v for v in vals if v is not None]
                return pc.field(f.name).isin(pa.array(present, f.type)) if present else FALSE
            if any(v is None for v in vals):
                return FALSE  # x IN (..., NULL) is never FALSE
            return _and([self.atom(f, "<>", v) for v in vals])
        if cls == "BETWEEN":
            f = self.column(node["input"])
            vals = self.values(f, node, [node["lower"], node["upper"]]) if f is not None else None
            if vals is None:
                return self.loose()
            lo, hi = vals
            if want:
                return _and([self.atom(f, ">=", lo), self.atom(f, "<=", hi)])
            return _or([self.atom(f, "<", lo), self.atom(f, ">", hi)])
        if cls == "OPERATOR" and typ in ("OPERATOR_IS_NULL", "OPERATOR_IS_NOT_NULL"):
            child = node["children"][0]
            if child.get("class") != "COLUMN_REF" or self.chk.refs[id(child)].fields:
                return self.loose()
            name = self.chk.refs[id(child)].column
            nulls = (typ == "OPERATOR_IS_NULL") == want
            return pc.field(name).is_null() if nulls else pc.field(name).is_valid()
        if cls == "COLUMN_REF":
            f = self.column(node)
            if f is None or not pa.types.is_boolean(f.type):
                return self.loose()
            return pc.field(f.name) == pa.scalar(want)
        return self.loose()


@lru_cache(maxsize=1024)
def pushdown(where: str, schema: pa.Schema) -> tuple[Any, bool]:
    """A pyarrow dataset filter implied by ``where`` (None: nothing to push), and whether it is
    exact: built from pushable atoms alone, it keeps exactly the rows on which DuckDB finds
    ``where`` TRUE (pyarrow drops rows where the filter is NULL, as ``WHERE`` does), so the
    engine need not evaluate ``where`` again on what the scan returns."""
    try:
        chk = E.check_where(where, schema)
    except InvalidExpressionError:
        return None, False
    push = _Push(chk, schema)
    e = push.may(chk.node, True)
    return (None, False) if _is_true(e) else (e, push.exact)


def arrow_filter(where: str, schema: pa.Schema) -> Any:
    """A pyarrow dataset filter implied by ``where`` (None: nothing to push)."""
    return pushdown(where, schema)[0]
