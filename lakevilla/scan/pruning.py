"""Predicates over file statistics: pruning for reads, precision locks for conflicts.

A ``where`` is checked by the grammar (``lakevilla.scan.expressions``) and turned into
a predicate over one row of statistics per file: its partition values, min/max
and null counts. DuckDB evaluates that predicate over all files in one query, so
every comparison means exactly what it means when DuckDB filters the rows (the
same implicit casts, NaN and NULL rules). A file is dropped only when that
evaluation says no row can match; the same test decides whether a concurrent
commit's new file may hold a row a transaction's read predicate selects
(TreeCat's precision locking), so a wrongly dropped file would be a missed
conflict as well as a missed row.

A table of at most ``statcols.PY_ROWS`` files is pruned in Python instead (``_Fast``), where
Python's comparison is DuckDB's (signed integers with integer literals, strings with string
literals, booleans): a DuckDB pass costs milliseconds however few its rows. Anything else
goes to DuckDB; the two are property-tested to agree file by file.

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

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

import numpy as np
import pyarrow as pa

from ..delta.actions import AddFile
from ..delta.column_mapping import physical_key
from ..delta.files import ActionTable, FileSet
from ..delta.snapshot import Snapshot
from ..delta.values import EXACT_DECIMAL_DIGITS, STRING_PREFIX_LIMIT, coerce, partition_value  # noqa: F401
from ..errors import InvalidExpressionError
from ..parallel import submit
from . import expressions as E
from . import statcols


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
    # the same predicate in Python (``_Fast``), where it decides exactly; else None
    fast: Any = None


class _Translate:
    """The checked ``where`` as SQL over one statistics row per file (columns c<k>_lo, _hi,
    _nullable, _valued), answering "may some row make it true (or false)"."""

    def __init__(self, chk: E.Checked, schema: pa.Schema,
                 partition_columns: tuple[str, ...]) -> None:
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
        check = {"<": f"{lo} < {c}", "<=": f"{lo} <= {c}", ">": f"{hi} > {c}",
                 ">=": f"{hi} >= {c}", "=": f"({lo} <= {c} AND {hi} >= {c})",
                 "<>": f"NOT ({lo} = {c} AND {hi} = {c})"}[op]
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
            sqls = cast("list[str]", consts)  # none of them is None (checked above)
            positive = want if typ == "COMPARE_IN" else not want
            if positive:
                return "(" + " OR ".join(self.atom(k, "=", c) for c in sqls) + ")"
            return "(" + " AND ".join(self.atom(k, "<>", c) for c in sqls) + ")"
        if cls == "BETWEEN":
            k = self.col(node["input"])
            lo, hi = self.const(node["lower"]), self.const(node["upper"])
            if (k is None or lo is None or hi is None
                    or not self.gate(k, [node["lower"], node["upper"]])):
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


# -- the same predicate in Python, for small tables ------------------------------------------

class _Undecided(Exception):
    """The Python path cannot promise DuckDB's answer for this predicate: use DuckDB."""


Row = Callable[[list, int], bool]  # (per column k: (lo, hi, nullable, valued) lists, row) -> may


class _Fast:
    """``_Translate.may`` as Python closures, only where Python's comparison is DuckDB's: a
    signed integer column with an integer literal, a string column with a string literal (code
    point order is UTF-8 byte order), a boolean column with TRUE/FALSE. Anything else (floats
    and NaN, decimals, dates and timestamps, casts of literals, NULL, constant conditions) is
    ``_Undecided``, and DuckDB evaluates the SQL. Every atom keeps the SQL's coalesces: an
    unknown bound, null count or row count may match."""

    def __init__(self, tr: _Translate) -> None:
        self.tr = tr

    def value(self, k: int, node: dict) -> Any:
        """The Python value of literal ``node`` compared with column ``k``, or ``_Undecided``."""
        t = self.tr.meta[k].type
        if node.get("class") != "CONSTANT":
            raise _Undecided
        kind, text = node["literal"]["kind"], node["literal"]["text"]
        if pa.types.is_signed_integer(t) and kind == "INTEGER" \
                and E.family(self.tr.chk.types[id(node)]) == "int":
            return int(text.replace("_", ""))
        if (pa.types.is_string(t) or pa.types.is_large_string(t)) and kind == "STRING":
            return text
        if pa.types.is_boolean(t) and kind == "BOOLEAN":
            return text.lower() == "true"
        raise _Undecided

    @staticmethod
    def atom(k: int, op: str, c: Any) -> Row:
        def check(lo: Any, hi: Any) -> bool:  # coalesce(<bound check>, TRUE)
            if op == "<":
                return lo is None or lo < c
            if op == "<=":
                return lo is None or lo <= c
            if op == ">":
                return hi is None or hi > c
            if op == ">=":
                return hi is None or hi >= c
            if op == "=":
                return not ((lo is not None and lo > c) or (hi is not None and hi < c))
            return not (lo is not None and hi is not None and lo == c and hi == c)  # <>

        def f(b: list, i: int) -> bool:
            lo, hi, _, valued = b[k]
            return valued[i] is not False and check(lo[i], hi[i])
        return f

    def may(self, node: dict, want: bool) -> Row:
        tr = self.tr
        cls, typ = node.get("class"), node.get("type")
        if E.is_constant(node) and E.family(tr.chk.types[id(node)]) in ("bool", "null"):
            raise _Undecided
        if cls == "CONJUNCTION":
            kids = [self.may(c, want) for c in node["children"]]
            if (typ == "CONJUNCTION_AND") == want:
                return lambda b, i: all(f(b, i) for f in kids)
            return lambda b, i: any(f(b, i) for f in kids)
        if cls == "OPERATOR" and typ == "OPERATOR_NOT":
            return self.may(node["children"][0], not want)
        if cls == "COMPARISON" and typ in E.COMPARISONS and "DISTINCT" not in typ:
            op = E.COMPARISONS[typ]
            k, c = tr.col(node["left"]), node["right"]
            if k is None:
                k, c, op = tr.col(node["right"]), node["left"], _FLIP[op]
            if k is None or tr.const(c) is None or not tr.gate(k, [c]):
                return _always
            return self.atom(k, op if want else _NEGATE[op], self.value(k, c))
        if cls == "OPERATOR" and typ in ("COMPARE_IN", "COMPARE_NOT_IN"):
            kids = node["children"]
            k = tr.col(kids[0])
            if k is None or any(tr.const(c) is None for c in kids[1:]) or not tr.gate(k, kids[1:]):
                return _always
            values = [self.value(k, c) for c in kids[1:]]
            if want == (typ == "COMPARE_IN"):
                eqs = [self.atom(k, "=", v) for v in values]
                return lambda b, i: any(f(b, i) for f in eqs)
            nes = [self.atom(k, "<>", v) for v in values]
            return lambda b, i: all(f(b, i) for f in nes)
        if cls == "BETWEEN":
            k = tr.col(node["input"])
            if k is None or tr.const(node["lower"]) is None or tr.const(node["upper"]) is None \
                    or not tr.gate(k, [node["lower"], node["upper"]]):
                return _always
            lo, hi = self.value(k, node["lower"]), self.value(k, node["upper"])
            if want:
                a, z = self.atom(k, ">=", lo), self.atom(k, "<=", hi)
                return lambda b, i: a(b, i) and z(b, i)
            a, z = self.atom(k, "<", lo), self.atom(k, ">", hi)
            return lambda b, i: a(b, i) or z(b, i)
        if cls == "OPERATOR" and typ in ("OPERATOR_IS_NULL", "OPERATOR_IS_NOT_NULL"):
            k = tr.col(node["children"][0])
            if k is None:
                return _always
            j = 2 if (typ == "OPERATOR_IS_NULL") == want else 3  # nullable / valued
            col: int = k  # what the lambda reads: ``k`` is assigned again below
            return lambda b, i: b[col][j][i] is not False
        if cls == "COLUMN_REF":
            k = tr.col(node)
            if k is None or E.family(E.duckdb_type(tr.meta[k].type)) != "bool":
                return _always
            return self.atom(k, "=", want)
        return _always


def _always(b: list, i: int) -> bool:
    return True


def _stat_columns(plan: _Plan, schema: pa.Schema) -> list[statcols.StatColumn]:
    """The plan's columns named as ``stats`` and ``partitionValues`` name them: physically in a
    column-mapped table (``delta.column_mapping``)."""
    return [statcols.StatColumn(physical_key(schema, c.name), c.type, c.partition)
            for c in plan.columns]


def _fast_mask(plan: _Plan, table: ActionTable, schema: pa.Schema) -> np.ndarray | None:
    """``plan`` evaluated in Python over a small ``table``; None when DuckDB must do it."""
    cols = _stat_columns(plan, schema)
    got = statcols.py_columns(table, cols)
    if got is None:
        return None
    b = [tuple(a.to_pylist() for a in bounds) for bounds in got]
    f = plan.fast
    return np.fromiter((f(b, i) for i in range(table.num_rows)), dtype=bool, count=table.num_rows)


@lru_cache(maxsize=1024)
def _plan(where: str, schema: pa.Schema, partition_columns: tuple[str, ...]) -> _Plan:
    try:
        chk = E.check_where(where, schema)
    except InvalidExpressionError:
        return _Plan(None, ())
    tr = _Translate(chk, schema, partition_columns)
    sql = tr.may(chk.node, True)
    if sql == "TRUE":
        return _Plan(None, ())
    try:
        fast = _Fast(tr).may(chk.node, True)
    except _Undecided:
        fast = None
    return _Plan(sql, tuple(tr.meta), fast)



def prune_mask(pred: Predicate, table: ActionTable, schema: pa.Schema,
               partition_columns: list[str] | tuple[str, ...]) -> np.ndarray | None:
    """Which rows of ``table`` (add actions) some row of which may satisfy ``pred``, as a
    boolean array; None when nothing prunes (keep every file)."""
    if pred.node is None or not table.num_rows:
        return None
    plan = _plan(pred.text, schema, tuple(partition_columns))
    if plan.sql is None:
        return None
    if plan.fast is not None and table.num_rows <= statcols.PY_ROWS:
        try:
            got = _fast_mask(plan, table, schema)
        except Exception:  # noqa: BLE001 - never guess: the DuckDB path decides (or keeps all)
            got = None
        if got is not None:
            return got
    cols = _stat_columns(plan, schema)
    try:
        return statcols.evaluate(table, cols, plan.sql)
    except Exception:  # noqa: BLE001 - e.g. a constant that fails to convert: the scan reports it
        return None


def cheap_to_prune(pred: Predicate, table: ActionTable, schema: pa.Schema,
                   partition_columns: list[str] | tuple[str, ...]) -> bool:
    """Whether ``prune_mask`` decides ``table`` without DuckDB (worth no thread of its own)."""
    if pred.node is None or not table.num_rows:
        return True
    plan = _plan(pred.text, schema, tuple(partition_columns))
    return plan.sql is None or (
        plan.fast is not None and table.num_rows <= statcols.PY_ROWS
        and all(statcols.py_parsable(c) for c in _stat_columns(plan, schema)))


def num_records(table: ActionTable) -> pa.Array:
    """``numRecords`` of every file of ``table`` (null where the statistics have none)."""
    return statcols.row_counts(table)


def prune(pred: Predicate, files: list[AddFile], schema: pa.Schema, partition_columns: list[str],
          table: ActionTable | None = None) -> list[AddFile]:
    """The files some row of which may satisfy ``pred`` (all of them when unsure). ``table``:
    ``files`` as an ActionTable already, whose parsed statistics callers share."""
    files = list(files)
    if pred.node is None or not files:
        return files
    table = table if table is not None else ActionTable.from_actions(files, AddFile)
    keep = prune_mask(pred, table, schema, partition_columns)
    if keep is None:
        return files
    return [a for a, k in zip(files, keep.tolist(), strict=True) if k]


def file_may_match(pred: Predicate, add: AddFile, schema: pa.Schema,
                   partition_columns: list[str]) -> bool:
    """False only when no row of ``add`` can satisfy ``pred``."""
    return bool(prune(pred, [add], schema, partition_columns))


def prune_files(files: FileSet, where: Predicate | str | None, schema: pa.Schema,
                partition_columns: list[str]) -> list[AddFile]:
    """The live files of ``files`` some row of which may satisfy ``where`` (a ``Predicate`` or
    text). Its checkpointed base is pruned in one pass; the overlay of files added since, on
    another thread when it needs DuckDB."""
    pred = where if isinstance(where, Predicate) else parse_predicate(where)
    extra = list(files.extra.values())
    k2, mask = None, None
    if extra:
        overlay = files.overlay()
        if cheap_to_prune(pred, overlay, schema, partition_columns):
            mask = prune_mask(pred, overlay, schema, partition_columns)  # in Python, no DuckDB pass
        else:
            # pruned on another thread meanwhile (a DuckDB pass costs its fixed planning
            # time, a few milliseconds, more than the overlay's few rows do)
            k2 = submit(lambda: prune_mask(pred, overlay, schema, partition_columns))
    keep = prune_mask(pred, files.base, schema, partition_columns) if files.base.num_rows else None
    # the rows the overlay hides are dropped by ``select`` among the kept ones: a point read of
    # a big checkpoint never decodes every path to find the few hidden rows
    base_idx = files.live_indices() if keep is None else np.flatnonzero(keep)
    if k2 is not None:
        mask = k2.result()
    if mask is not None:
        extra = [a for a, k in zip(extra, mask.tolist(), strict=True) if k]
    return files.select(base_idx, extra)


def candidates(snapshot: Snapshot, where: str | None) -> list[AddFile]:
    """The live files of ``snapshot`` some row of which may satisfy ``where`` (all when None)."""
    return prune_files(snapshot.files, where, snapshot.schema, snapshot.partition_columns)
