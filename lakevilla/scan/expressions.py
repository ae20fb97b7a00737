"""User expressions are data: parsed once, checked against one grammar, typed.

Every ``where``, ``set`` value and (for MERGE) condition or assignment is parsed
by DuckDB's parser into a tree (``json_serialize_sql``) and checked before
anything runs, for both engines: it must be one scalar expression over the
columns in scope, made of literals, column references, operators, ``CASE``,
``CAST`` and an allow-list of scalar functions, with the operand types the
grammar allows. Nothing else gets through: no subquery, table function,
file/network access, user-defined or engine-specific function, statement.

What runs is the checked tree, never the user's text: the embedded engine runs
our own rendering of it in DuckDB (``Checked.sql``); the Spark engine builds
Spark columns from it (``engines/spark_expr.py``) with DuckDB's types, so both
engines compute the same values. The checker fails closed: a tree shape it does
not know is refused. README, "Expressions", is the user-facing grammar.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import pyarrow as pa

from ..delta.by_identity import ByIdentity
from ..errors import InvalidExpressionError
from . import duck, literal_shapes

_PREFIX = "SELECT ("
_SUFFIX = ") AS __lv_expr"
_NOWHERE = 2**64 - 1  # DuckDB's "no query location"
RESERVED_PREFIX = "__lv"

# -- types -----------------------------------------------------------------------------

INTEGERS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT")
_DECIMAL = re.compile(r"DECIMAL\((\d+),(\d+)\)")
TEMPORAL = ("DATE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE")


def family(t: str) -> str:
    """int | float | decimal | string | bool | date | timestamp | timestamptz | interval |
    null | struct | other."""
    if t in INTEGERS:
        return "int"
    if t in ("FLOAT", "DOUBLE"):
        return "float"
    if _DECIMAL.fullmatch(t):
        return "decimal"
    if t == "VARCHAR":
        return "string"
    if t == "BOOLEAN":
        return "bool"
    if t == "DATE":
        return "date"
    if t == "TIMESTAMP":
        return "timestamp"
    if t == "TIMESTAMP WITH TIME ZONE":
        return "timestamptz"
    if t == "INTERVAL":
        return "interval"
    if t in ('"NULL"', "NULL"):
        return "null"
    if t.startswith("STRUCT("):
        return "struct"
    return "other"


NUMERIC = ("int", "float", "decimal")
TIME = ("date", "timestamp", "timestamptz")
VALUE_FAMILIES = (*NUMERIC, "string", "bool", *TIME, "null")


def decimal_params(t: str) -> tuple[int, int]:
    m = _DECIMAL.fullmatch(t)
    assert m is not None, t
    return int(m.group(1)), int(m.group(2))


def duckdb_type(t: pa.DataType) -> str:
    """The DuckDB type an arrow column of type ``t`` is seen as."""
    if pa.types.is_int8(t):
        return "TINYINT"
    if pa.types.is_int16(t):
        return "SMALLINT"
    if pa.types.is_int32(t):
        return "INTEGER"
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_float32(t):
        return "FLOAT"
    if pa.types.is_float64(t):
        return "DOUBLE"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "VARCHAR"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_date32(t):
        return "DATE"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP WITH TIME ZONE" if t.tz is not None else "TIMESTAMP"
    if pa.types.is_struct(t):
        inner = ", ".join(f"{quote_ident(t.field(i).name)} {duckdb_type(t.field(i).type)}"
                          for i in range(t.num_fields))
        return f"STRUCT({inner})"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "BLOB"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"{duckdb_type(t.value_type)}[]"
    if pa.types.is_map(t):
        return f"MAP({duckdb_type(t.key_type)}, {duckdb_type(t.item_type)})"
    raise InvalidExpressionError(f"no SQL type for arrow type {t}")


# -- casts both engines perform alike (explicit CAST and SET assignment) -----------------

_CASTS: dict[str, set[str]] = {
    "int": {"int", "float", "decimal", "string", "bool"},
    "decimal": {"int", "float", "decimal", "string", "bool"},
    # no float -> text: the engines format differently
    "float": {"int", "float", "decimal", "bool"},
    "string": {"int", "float", "decimal", "string", "bool", "date", "timestamp", "timestamptz"},
    "bool": {"int", "float", "decimal", "string", "bool"},
    "date": {"date", "timestamp", "timestamptz", "string"},
    "timestamp": {"date", "timestamp", "timestamptz", "string"},
    # no timestamptz -> text: zone suffix differs
    "timestamptz": {"date", "timestamp", "timestamptz"},
    "null": {"int", "float", "decimal", "string", "bool", "date", "timestamp", "timestamptz"},
}


def castable(src: str, dst: str) -> bool:
    """Whether a value of DuckDB type ``src`` may be converted to ``dst`` (CAST or assignment)."""
    s, d = family(src), family(dst)
    if src == dst:
        return s != "other"
    return d in _CASTS.get(s, set())


_CAST_TYPES = {
    "BOOLEAN": "BOOLEAN", "BOOL": "BOOLEAN",
    "TINYINT": "TINYINT", "INT1": "TINYINT", "SMALLINT": "SMALLINT", "INT2": "SMALLINT",
    "INTEGER": "INTEGER", "INT": "INTEGER", "INT4": "INTEGER", "BIGINT": "BIGINT", "INT8": "BIGINT",
    "LONG": "BIGINT", "FLOAT": "FLOAT", "REAL": "FLOAT", "FLOAT4": "FLOAT", "DOUBLE": "DOUBLE",
    "FLOAT8": "DOUBLE", "VARCHAR": "VARCHAR", "TEXT": "VARCHAR", "STRING": "VARCHAR",
    "DATE": "DATE", "TIMESTAMP": "TIMESTAMP", "DATETIME": "TIMESTAMP",
    "TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE",
    "TIMESTAMP WITH TIME ZONE": "TIMESTAMP WITH TIME ZONE", "INTERVAL": "INTERVAL",
    "DECIMAL": "DECIMAL", "NUMERIC": "DECIMAL",
}

# -- the function allow-list ---------------------------------------------------------------
# name -> (canonical name, min args, max args, argument families per position (last repeats))

_ANY = ("*",)
_NUM = NUMERIC
_STR = ("string",)
_TIME = TIME
_INTLIT = ("int",)
FUNCTIONS: dict[str, tuple[str, int, int, tuple[tuple[str, ...], ...]]] = {}


def _fn(names: str, lo: int, hi: int, *args: tuple[str, ...]) -> None:
    canon = names.split()[0]
    for n in names.split():
        FUNCTIONS[n] = (canon, lo, hi, args)


# arithmetic
_fn("abs", 1, 1, _NUM)
_fn("ceil ceiling", 1, 1, _NUM)
_fn("floor", 1, 1, _NUM)
_fn("round", 1, 2, _NUM, _INTLIT)
_fn("sqrt", 1, 1, _NUM)
_fn("trunc", 1, 1, _NUM)
_fn("power pow", 2, 2, _NUM, _NUM)
# comparison and null handling (coalesce/ifnull are parsed as an operator)
_fn("greatest", 1, 64, _ANY)
_fn("least", 1, 64, _ANY)
_fn("nullif", 2, 2, _ANY, _ANY)
# strings
_fn("lower lcase", 1, 1, _STR)
_fn("upper ucase", 1, 1, _STR)
_fn("length char_length character_length len", 1, 1, _STR)
_fn("trim", 1, 1, _STR)
_fn("ltrim", 1, 1, _STR)
_fn("rtrim", 1, 1, _STR)
_fn("substring substr", 2, 3, _STR, ("int",), ("int",))
_fn("concat", 1, 64, _STR)
_fn("replace", 3, 3, _STR, _STR, _STR)
_fn("starts_with prefix", 2, 2, _STR, _STR)
_fn("ends_with suffix", 2, 2, _STR, _STR)
_fn("contains", 2, 2, _STR, _STR)
_fn("strpos instr", 2, 2, _STR, _STR)
_fn("left", 2, 2, _STR, ("int",))
_fn("right", 2, 2, _STR, ("int",))
_fn("lpad", 3, 3, _STR, ("int",), _STR)
_fn("rpad", 3, 3, _STR, ("int",), _STR)
# dates and times
for _part in ("year", "month", "day dayofmonth", "hour", "minute", "second", "dayofweek",
              "dayofyear", "quarter", "week weekofyear"):
    _fn(_part, 1, 1, _TIME)
_fn("date_part datepart", 2, 2, _STR, _TIME)
_fn("date_trunc datetrunc", 2, 2, _STR, _TIME)
_fn("date_diff datediff", 3, 3, _STR, _TIME, _TIME)
_fn("make_date", 3, 3, ("int",), ("int",), ("int",))
_fn("last_day", 1, 1, _TIME)
_fn("current_date today", 0, 0)
_fn("current_timestamp now get_current_timestamp", 0, 0)
# what INTERVAL n UNIT parses to; intervals must be constants (checked with the types)
for _unit in ("years", "months", "weeks", "days", "hours", "minutes", "seconds", "milliseconds",
              "microseconds"):
    _fn(f"to_{_unit}", 1, 1, _NUM)

VOLATILE = {"current_date", "current_timestamp"}
# functions whose type does not depend on what their string arguments say (not date_part's kin)
STRING_BLIND = {"lower", "upper", "length", "trim", "ltrim", "rtrim", "substring", "concat",
                "replace", "starts_with", "ends_with", "contains", "strpos", "left", "right",
                "lpad", "rpad", "greatest", "least", "nullif"}
# parts date_part / date_trunc / date_diff accept (first argument, a string literal)
DATE_PARTS = {"year", "quarter", "month", "week", "day", "hour", "minute", "second", "dow",
              "dayofweek", "doy", "dayofyear"}
TRUNC_PARTS = {"year", "quarter", "month", "week", "day", "hour", "minute", "second"}
DIFF_PARTS = {"day"}

OPERATORS = {"+", "-", "*", "/", "%", "||", "~~", "!~~", "~~*", "!~~*", "like_escape",
             "not_like_escape", "ilike_escape", "not_ilike_escape"}
LIKE_FUNCTIONS = {"~~", "!~~", "~~*", "!~~*", "like_escape", "not_like_escape", "ilike_escape",
                  "not_ilike_escape"}
COMPARISONS = {"COMPARE_EQUAL": "=", "COMPARE_NOTEQUAL": "<>", "COMPARE_LESSTHAN": "<",
               "COMPARE_GREATERTHAN": ">", "COMPARE_LESSTHANOREQUALTO": "<=",
               "COMPARE_GREATERTHANOREQUALTO": ">=", "COMPARE_DISTINCT_FROM": "IS DISTINCT FROM",
               "COMPARE_NOT_DISTINCT_FROM": "IS NOT DISTINCT FROM"}
_NUMERIC_TEXT = re.compile(r"-?(\d[\d_]*(\.[\d_]*)?|\.\d[\d_]*)([eE][+-]?\d+)?")

# -- scope -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Relation:
    """One relation an expression may name. ``alias`` None: the table of a where/set,
    whose columns are named bare; MERGE names target and source by alias."""

    alias: str | None
    schema: pa.Schema
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # a schema's hash is worked out anew at each call (~25 us for twenty columns), and
        # every check of an expression looks its scope up
        object.__setattr__(self, "_hash", hash((self.alias, self.schema)))

    def __hash__(self) -> int:
        return self._hash


# the scope of each schema checked lately (a snapshot's statements share one schema object)
_TABLE_SCOPES: ByIdentity[Scope] = ByIdentity()


@dataclass(frozen=True)
class Scope:
    relations: tuple[Relation, ...]

    def __hash__(self) -> int:
        return hash(self.relations)  # the relations keep their hashes

    @classmethod
    def table(cls, schema: pa.Schema) -> Scope:
        """The scope of a table's where or SET: one per schema object, which a snapshot
        shares among its statements."""
        return _TABLE_SCOPES.get((schema,), lambda: cls((Relation(None, schema),)))

    @classmethod
    def merge(cls, target: pa.Schema, source: pa.Schema, target_alias: str = "target",
              source_alias: str = "source") -> Scope:
        """Target and source of a MERGE: ``target.col``, ``source.col``, or a bare name that
        only one of them has."""
        if target_alias.lower() == source_alias.lower():
            raise InvalidExpressionError("MERGE target and source need different aliases")
        return cls((Relation(target_alias, target), Relation(source_alias, source)))


@dataclass(frozen=True)
class ColumnRef:
    relation: int  # index into Scope.relations
    column: str  # the schema's spelling
    fields: tuple[str, ...] = ()  # struct field path, the schema's spelling


@dataclass
class Checked:
    """A checked expression: the tree, DuckDB's type for every node, resolved column refs."""

    text: str
    node: dict
    scope: Scope
    sql: str  # our DuckDB rendering of the tree (what the embedded engine runs)
    type: str  # DuckDB type of the whole expression
    types: dict[int, str] = field(default_factory=dict)  # id(node) -> DuckDB type
    # id(node) -> the type its operands compare in
    common: dict[int, str] = field(default_factory=dict)
    refs: dict[int, ColumnRef] = field(default_factory=dict)  # id(COLUMN_REF node) -> column
    volatile: bool = False  # uses the clock: its value changes between evaluations

    def type_of(self, node: dict) -> str:
        return self.types[id(node)]

    def columns(self) -> set[str]:
        """Top-level columns it reads (of every relation)."""
        return {r.column for r in self.refs.values()}


# -- parsing ------------------------------------------------------------------------------

def _fail(what: str, msg: str) -> InvalidExpressionError:
    return InvalidExpressionError(f"{what}: {msg}" if what else msg)


@lru_cache(maxsize=4096)
def _parse_tree(text: str) -> tuple[dict | None, str | None]:
    """(expression node, None) or (None, why not). Texts that differ only in their literals
    share one parse of their shape (``literal_shapes.py``); any other text is parsed itself."""
    shape = literal_shapes.shape_of(text, len(_PREFIX))
    if shape is not None:
        raw = _parsed_shape(shape.text)
        if raw is not None:
            node = literal_shapes.fill(json.loads(raw), shape)
            if node is not None:
                return node, None
    return _parse_text(text)


@lru_cache(maxsize=1024)
def _parsed_shape(shape: str) -> str | None:
    """The parse of a shape as JSON (each use loads its own copy), None if it does not parse:
    the text is then parsed itself, for its own error."""
    node, _ = _parse_text(shape)
    return None if node is None else json.dumps(node)


def _parse_text(text: str) -> tuple[dict | None, str | None]:
    """DuckDB's parser, inside a wrapper whose shape is then checked, so text that escapes the
    wrapper is refused, not run."""
    try:
        raw = duck.connection().execute("SELECT json_serialize_sql(?)",
                                        [_PREFIX + text + _SUFFIX]).fetchall()[0][0]
        tree = json.loads(raw)
    except Exception as e:  # noqa: BLE001 - the parser's own failure is the user's syntax error
        return None, str(e).splitlines()[0]
    if tree.get("error"):
        msg = tree.get("error_message") or "syntax error"
        if ";" in text:
            msg += " (one expression only: statements and ';' are not allowed)"
        return None, msg
    stmts = tree.get("statements") or []
    if len(stmts) != 1:
        return None, "more than one statement (';' is not allowed)"
    stmt = stmts[0]
    node = stmt.get("node") or {}
    sel = node.get("select_list") or []
    plain = (node.get("type") == "SELECT_NODE" and not node.get("modifiers")
             and not (node.get("cte_map") or {}).get("map") and len(sel) == 1
             and sel[0].get("alias") == "__lv_expr"
             and (node.get("from_table") or {}).get("type") == "EMPTY"
             and node.get("where_clause") is None and not node.get("group_expressions")
             and not node.get("group_sets") and node.get("having") is None
             and node.get("sample") is None and node.get("qualify") is None
             and node.get("aggregate_handling") == "STANDARD_HANDLING"
             and not stmt.get("named_param_map"))
    if not plain:
        return None, "not one expression (the text reaches outside it)"
    expr = sel[0]
    expr["alias"] = ""
    return expr, None


def _snippet(text: str, node: dict) -> str:
    """The part of the user's text a node came from (or a rendering of it)."""
    loc, n = node.get("query_location"), node.get("query_location_length")
    if isinstance(loc, int) and loc != _NOWHERE and isinstance(n, int) and n > 0:
        start = loc - len(_PREFIX)
        if 0 <= start < len(text):
            return text[start:start + n]
    try:
        return render(node)
    except InvalidExpressionError:
        return node.get("function_name") or node.get("class", "?").lower()


# -- the structural check -----------------------------------------------------------------

_CHILD_FREE = {"class", "type", "alias", "query_location", "query_location_length"}


class _Structure:
    """Walks the tree; refuses anything outside the grammar, naming the part."""

    def __init__(self, text: str, what: str) -> None:
        self.text, self.what = text, what

    def bad(self, node: dict, why: str) -> InvalidExpressionError:
        return _fail(self.what, f"{_snippet(self.text, node)!s} is not allowed: {why}")

    def keys(self, node: dict, allowed: set[str]) -> None:
        extra = set(node) - _CHILD_FREE - allowed
        if extra:
            raise self.bad(node, f"unsupported syntax ({', '.join(sorted(extra))})")

    def walk(self, node: Any) -> None:
        if not isinstance(node, dict):
            raise _fail(self.what, "unsupported syntax")
        cls = node.get("class")
        if node.get("alias"):
            raise self.bad(node, "aliases are not part of an expression")
        if cls == "CONSTANT":
            self.keys(node, {"literal"})
            lit = node.get("literal") or {}
            kind, text = lit.get("kind"), lit.get("text")
            if set(lit) != {"kind", "text"} or not isinstance(text, str):
                raise self.bad(node, "unsupported literal")
            if kind == "NUMERIC" and not _NUMERIC_TEXT.fullmatch(text):
                raise self.bad(node, "unsupported number syntax")
            if kind == "INTEGER" and not re.fullmatch(r"-?\d[\d_]*", text):
                raise self.bad(node, "unsupported number syntax")
            if kind not in ("INTEGER", "NUMERIC", "STRING", "BOOLEAN", "NULL_LITERAL"):
                raise self.bad(node, f"{str(kind).lower()} literals are not supported")
        elif cls == "COLUMN_REF":
            self.keys(node, {"column_names"})
            names = node.get("column_names")
            if not names or not all(isinstance(n, str) and n for n in names):
                raise self.bad(node, "unsupported column reference")
            if names[0].lower().startswith(RESERVED_PREFIX):
                raise self.bad(node, f"names starting with {RESERVED_PREFIX!r} are reserved")
        elif cls == "FUNCTION":
            self.function(node)
        elif cls == "OPERATOR":
            self.keys(node, {"children"})
            if node.get("type") not in ("OPERATOR_NOT", "OPERATOR_IS_NULL", "OPERATOR_IS_NOT_NULL",
                                        "COMPARE_IN", "COMPARE_NOT_IN", "OPERATOR_COALESCE"):
                raise self.bad(node, "only NOT, IS [NOT] NULL, IN (...) and COALESCE operators are "
                                     "supported (no [] subscripts)")
            for c in node.get("children") or []:
                self.walk(c)
        elif cls == "COMPARISON":
            self.keys(node, {"left", "right"})
            if node.get("type") not in COMPARISONS:
                raise self.bad(node, "unsupported comparison")
            self.walk(node.get("left"))
            self.walk(node.get("right"))
        elif cls == "CONJUNCTION":
            self.keys(node, {"children"})
            if node.get("type") not in ("CONJUNCTION_AND", "CONJUNCTION_OR"):
                raise self.bad(node, "unsupported conjunction")
            for c in node.get("children") or []:
                self.walk(c)
        elif cls == "CASE":
            self.keys(node, {"case_checks", "else_expr"})
            for chk in node.get("case_checks") or []:
                if set(chk) != {"when_expr", "then_expr"}:
                    raise self.bad(node, "unsupported CASE")
                self.walk(chk["when_expr"])
                self.walk(chk["then_expr"])
            if node.get("else_expr") is not None:
                self.walk(node["else_expr"])
        elif cls == "CAST":
            self.keys(node, {"child", "try_cast", "type_expr"})
            if node.get("try_cast"):
                raise self.bad(node, "TRY_CAST is not supported; use CAST")
            cast_type(node, self)
            self.walk(node.get("child"))
        elif cls == "BETWEEN":
            self.keys(node, {"input", "lower", "upper"})
            for k in ("input", "lower", "upper"):
                self.walk(node.get(k))
        elif cls == "SUBQUERY":
            raise self.bad(node, "subqueries are not allowed in an expression")
        elif cls == "WINDOW":
            raise self.bad(node, "window and aggregate functions are not allowed")
        elif cls == "STAR":
            raise self.bad(node, "* and COLUMNS(...) are not allowed")
        elif cls == "PARAMETER":
            raise self.bad(node, "parameters are not allowed; write the value")
        elif cls == "LAMBDA":
            raise self.bad(node, "lambdas are not allowed")
        else:
            raise self.bad(node, f"{str(cls).lower()} expressions are not supported")

    def function(self, node: dict) -> None:
        # is_legacy_function_call: DuckDB 2.0.1 names it on every function (false for the
        # forms our grammar allows); a true value is a form we never checked, so it fails closed
        self.keys(node,
                  {"function_name", "schema", "catalog", "filter", "order_bys", "distinct",
                   "is_operator", "export_state", "arguments", "qualified_name",
                   "is_legacy_function_call"})
        if node.get("is_legacy_function_call"):
            raise self.bad(node, "unsupported syntax (a legacy function call)")
        name = node.get("function_name")
        if not isinstance(name, str):
            raise self.bad(node, "unsupported function")
        if node.get("schema") or node.get("catalog"):
            raise self.bad(node, "functions are named without a schema")
        if (node.get("filter") is not None or (node.get("order_bys") or {}).get("orders")
                or node.get("distinct") or node.get("export_state")):
            raise self.bad(node, "aggregate syntax (FILTER, ORDER BY, DISTINCT) is not allowed")
        qn = (node.get("qualified_name") or {}).get("path")
        if qn is not None and qn != [name]:
            raise self.bad(node, "functions are named without a schema")
        lname = name.lower()
        if lname not in OPERATORS and lname not in FUNCTIONS:
            raise self.bad(node,
                           f"function {name!r} is not in lakevilla's list of scalar functions "
                           "(README, 'Expressions')")
        if node.get("is_operator") and lname not in OPERATORS:
            raise self.bad(node, "unsupported operator")
        args = node.get("arguments") or []
        for a in args:
            if not isinstance(a, dict) or set(a) != {"name", "expression"} or a["name"]:
                raise self.bad(node, "named arguments are not allowed")
            self.walk(a["expression"])
        if lname in FUNCTIONS:
            _, lo, hi, _ = FUNCTIONS[lname]
            if not lo <= len(args) <= hi:
                raise self.bad(node, f"{lname} takes {lo}" + (f" to {hi}" if hi != lo else "")
                               + " arguments")


def cast_type(node: dict, structure: _Structure | None = None) -> str:
    """The DuckDB type a CAST node names."""
    te = node.get("type_expr") or {}
    name = str(te.get("type_name", "")).upper()
    kids = te.get("children") or []
    bad = (structure.bad if structure else (lambda n, why: InvalidExpressionError(why)))
    if (te.get("class") != "TYPE" or te.get("catalog") or te.get("schema")
            or set(te) - _CHILD_FREE
            - {"catalog", "schema", "type_name", "children", "qualified_name"}):
        raise bad(node, "unsupported type")
    canon = _CAST_TYPES.get(name)
    if canon is None:
        raise bad(node, f"casts to {name} are not supported")
    if canon == "DECIMAL":
        vals = []
        for k in kids:
            lit = (k.get("literal") or {}) if isinstance(k, dict) else {}
            if k.get("class") != "CONSTANT" or lit.get("kind") != "INTEGER":
                raise bad(node, "DECIMAL takes integer precision and scale")
            vals.append(int(lit["text"]))
        p, s = (vals + [18, 3][len(vals):])[:2] if len(vals) <= 2 else (0, 0)
        if len(vals) > 2 or not (1 <= p <= 38 and 0 <= s <= p):
            raise bad(node, "DECIMAL(p, s) needs 1 <= p <= 38 and 0 <= s <= p")
        return f"DECIMAL({p},{s})"
    if kids:
        raise bad(node, f"{name} takes no parameters")
    return canon


def parse(text: str, what: str = "") -> dict:
    """The tree of ``text`` if it is one expression of the grammar's shapes (types unchecked);
    InvalidExpressionError otherwise. Safe to evaluate: it names no table, file or function
    outside the allow-list."""
    if not isinstance(text, str) or not text.strip():
        raise _fail(what, "expected one SQL expression as a string")
    node, why = _parse_tree(text)
    if node is None:
        raise _fail(what, f"does not parse as one SQL expression: {why}")
    _Structure(text, what).walk(node)
    return node


# -- rendering (what DuckDB runs) -------------------------------------------------------------

def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_string(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def render(node: dict, column=None) -> str:
    """DuckDB SQL for a checked tree. ``column(names) -> sql`` renders column refs
    (default: quoted names)."""
    def r(n: dict) -> str:
        return render(n, column)

    cls = node.get("class")
    if cls == "CONSTANT":
        lit = node["literal"]
        kind, text = lit["kind"], lit["text"]
        if kind == "INTEGER":
            return str(int(text.replace("_", "")))
        if kind == "NUMERIC":
            return text.replace("_", "")
        if kind == "STRING":
            return quote_string(text)
        if kind == "BOOLEAN":
            return "TRUE" if text.lower() == "true" else "FALSE"
        return "NULL"
    if cls == "COLUMN_REF":
        names = node["column_names"]
        return column(names) if column else ".".join(quote_ident(n) for n in names)
    if cls == "FUNCTION":
        name = node["function_name"].lower()
        args = [r(a["expression"]) for a in node.get("arguments") or []]
        if name in ("+", "-", "*", "/", "%", "||", "~~", "!~~", "~~*", "!~~*"):
            sym = {"~~": "LIKE", "!~~": "NOT LIKE", "~~*": "ILIKE",
                   "!~~*": "NOT ILIKE"}.get(name, name)
            if len(args) == 1:
                return f"({sym}({args[0]}))"
            return "(" + f" {sym} ".join(args) + ")"
        if name in ("like_escape", "not_like_escape", "ilike_escape", "not_ilike_escape"):
            sym = {"like_escape": "LIKE", "not_like_escape": "NOT LIKE", "ilike_escape": "ILIKE",
                   "not_ilike_escape": "NOT ILIKE"}[name]
            return f"({args[0]} {sym} {args[1]} ESCAPE {args[2]})"
        if name in ("current_date", "current_timestamp") and not args:
            return name
        return f"{name}({', '.join(args)})"
    if cls == "OPERATOR":
        t = node["type"]
        kids = [r(c) for c in node.get("children") or []]
        if t == "OPERATOR_NOT":
            return f"(NOT {kids[0]})"
        if t == "OPERATOR_IS_NULL":
            return f"({kids[0]} IS NULL)"
        if t == "OPERATOR_IS_NOT_NULL":
            return f"({kids[0]} IS NOT NULL)"
        if t in ("COMPARE_IN", "COMPARE_NOT_IN"):
            neg = " NOT" if t == "COMPARE_NOT_IN" else ""
            return f"({kids[0]}{neg} IN ({', '.join(kids[1:])}))"
        if t == "OPERATOR_COALESCE":
            return f"coalesce({', '.join(kids)})"
    if cls == "COMPARISON":
        return f"({r(node['left'])} {COMPARISONS[node['type']]} {r(node['right'])})"
    if cls == "CONJUNCTION":
        op = " AND " if node["type"] == "CONJUNCTION_AND" else " OR "
        return "(" + op.join(r(c) for c in node["children"]) + ")"
    if cls == "CASE":
        parts = ["CASE"]
        for chk in node["case_checks"]:
            parts.append(f"WHEN {r(chk['when_expr'])} THEN {r(chk['then_expr'])}")
        if node.get("else_expr") is not None:
            parts.append(f"ELSE {r(node['else_expr'])}")
        parts.append("END")
        return "(" + " ".join(parts) + ")"
    if cls == "CAST":
        return f"CAST({r(node['child'])} AS {cast_type(node)})"
    if cls == "BETWEEN":
        return f"({r(node['input'])} BETWEEN {r(node['lower'])} AND {r(node['upper'])})"
    raise InvalidExpressionError(f"cannot render a {cls} node")


# -- typing --------------------------------------------------------------------------------

def children(node: dict) -> list[dict]:
    cls = node.get("class")
    if cls == "FUNCTION":
        return [a["expression"] for a in node.get("arguments") or []]
    if cls in ("OPERATOR", "CONJUNCTION"):
        return list(node.get("children") or [])
    if cls == "COMPARISON":
        return [node["left"], node["right"]]
    if cls == "CASE":
        out = []
        for chk in node["case_checks"]:
            out += [chk["when_expr"], chk["then_expr"]]
        return out + ([node["else_expr"]] if node.get("else_expr") is not None else [])
    if cls == "CAST":
        return [node["child"]]
    if cls == "BETWEEN":
        return [node["input"], node["lower"], node["upper"]]
    return []


def walk(node: dict):
    yield node
    for c in children(node):
        yield from walk(c)


def is_string_literal(node: dict) -> bool:
    return node.get("class") == "CONSTANT" and node["literal"]["kind"] == "STRING"


def is_constant(node: dict) -> bool:
    """No column reference and no clock: the same value every time."""
    for n in walk(node):
        if n.get("class") == "COLUMN_REF":
            return False
        if n.get("class") == "FUNCTION" \
                and FUNCTIONS.get(n["function_name"].lower(), ("",))[0] in VOLATILE:
            return False
    return True


def operands(node: dict) -> list[dict] | None:
    """The operands a node brings to one common type, or None."""
    cls, t = node.get("class"), node.get("type")
    if cls == "COMPARISON":
        return [node["left"], node["right"]]
    if cls == "BETWEEN":
        return [node["input"], node["lower"], node["upper"]]
    if cls == "OPERATOR" and t in ("COMPARE_IN", "COMPARE_NOT_IN", "OPERATOR_COALESCE"):
        return list(node["children"])
    if cls == "CASE":
        return [c["then_expr"] for c in node["case_checks"]] + (
            [node["else_expr"]] if node.get("else_expr") is not None else [])
    if cls == "FUNCTION" and FUNCTIONS.get(node["function_name"].lower(), ("",))[0] in (
            "greatest", "least", "nullif"):
        return [a["expression"] for a in node["arguments"]]
    return None


class _Binder:
    """DuckDB's types for every node, by binding renderings against empty tables of the scope."""

    def __init__(self, text: str, scope: Scope, what: str) -> None:
        self.text, self.scope, self.what = text, scope, what

    def describe(self, items: list[str]) -> list[str]:
        if not items:
            return []
        rels = self.scope.relations
        from_sql = ", ".join(f"__lv_rel{i}" + (f" AS {quote_ident(r.alias)}" if r.alias else "")
                             for i, r in enumerate(rels))
        sql = ("DESCRIBE SELECT " + ", ".join(f"{s} AS c{i}" for i, s in enumerate(items))
               + " FROM " + from_sql)
        try:
            got = duck.rows(sql, _empty_tables(self.scope))
        except Exception as e:  # noqa: BLE001 - binder errors: unknown column, bad types
            raise _fail(self.what, _duck_message(e)) from None
        return [row[1] for row in got]

    def resolve(self, node: dict) -> ColumnRef:
        names = node["column_names"]
        rels = self.scope.relations
        if len(names) >= 2:
            for i, r in enumerate(rels):
                if r.alias is not None and r.alias.lower() == names[0].lower():
                    col = find_field(r.schema, names[1])
                    if col is not None:
                        return ColumnRef(i, col.name, self.path(col, names[2:], node))
        fields = [(i, find_field(r.schema, names[0])) for i, r in enumerate(rels)]
        hits = [(i, f) for i, f in fields if f is not None]
        if len(hits) != 1:
            why = "is ambiguous" if hits else "names no column in scope"
            raise _fail(self.what, f"{_snippet(self.text, node)} {why}")
        i, col = hits[0]
        return ColumnRef(i, col.name, self.path(col, names[1:], node))

    def path(self, col: pa.Field, names: list[str], node: dict) -> tuple[str, ...]:
        out = []
        t = col.type
        for n in names:
            f = None
            if pa.types.is_struct(t):
                f = next((t.field(i) for i in range(t.num_fields)
                          if t.field(i).name.lower() == n.lower()), None)
            if f is None:
                raise _fail(self.what,
                            f"{_snippet(self.text, node)} names no field of column {col.name!r}")
            out.append(f.name)
            t = f.type
        return tuple(out)


@lru_cache(maxsize=256)
def _empty_tables(scope: Scope) -> dict[str, pa.Table]:
    """The scope's relations as empty tables, to bind against (immutable, so shared)."""
    return {f"__lv_rel{i}": r.schema.empty_table() for i, r in enumerate(scope.relations)}


def find_field(schema: pa.Schema, name: str) -> pa.Field | None:
    """The field ``name`` names in ``schema``: SQL names columns case-insensitively."""
    for f in schema:
        if f.name.lower() == name.lower():
            return f
    return None


def _duck_message(e: BaseException) -> str:
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    return re.sub(r"\b__lv_rel\d+\b", "table", msg)


def _check_types(chk: Checked, what: str) -> None:
    """The typed part of the grammar: which operand types each construct accepts."""
    text = chk.text

    def bad(node: dict, why: str) -> InvalidExpressionError:
        return _fail(what, f"{_snippet(text, node)}: {why}")

    def fam(n: dict) -> str:
        return family(chk.types[id(n)])

    for node in walk(chk.node):
        t = chk.types[id(node)]
        f = family(t)
        cls = node.get("class")
        if f == "interval":
            if not is_constant(node):
                raise bad(node, "intervals are supported only as constants added to or subtracted "
                                "from a date or timestamp")
        elif f == "struct":
            if cls != "COLUMN_REF":
                raise bad(node, "struct values can only be read field by field (col.field)")
        elif f not in VALUE_FAMILIES:
            raise bad(node, f"values of type {t} are not supported; cast them")
        kids = children(node)
        for k in kids:
            kf = fam(k)
            if kf == "struct" and not (cls == "OPERATOR" and node["type"] in ("OPERATOR_IS_NULL",
                                                                               "OPERATOR_IS_NOT_NULL")):
                raise bad(k, "a struct column can only be tested with IS [NOT] NULL or read by "
                             "field (col.field)")
            if kf == "interval" and not (cls == "FUNCTION" and node["function_name"] in ("+", "-")):
                raise bad(k,
                          "intervals can only be added to or subtracted from a date or timestamp")
        ops = operands(node)
        if ops is not None:
            reps: dict[tuple[str, bool], dict] = {}
            for o in ops:
                reps.setdefault((fam(o), is_string_literal(o)), o)
            rs = list(reps.values())
            for i, a in enumerate(rs):
                for b in rs[i + 1:]:
                    _comparable(a, b, fam, bad, node)
        if cls == "CASE":
            for c in node["case_checks"]:
                if fam(c["when_expr"]) not in ("bool", "null"):
                    raise bad(c["when_expr"], "CASE WHEN needs a boolean condition")
        if cls == "CONJUNCTION" or (cls == "OPERATOR" and node["type"] == "OPERATOR_NOT"):
            for k in kids:
                if fam(k) not in ("bool", "null"):
                    raise bad(k, "AND, OR and NOT need boolean operands")
        if cls == "CAST":
            src = chk.types[id(node["child"])]
            if family(t) == "interval":
                if not is_string_literal(node["child"]):
                    raise bad(node, "INTERVAL is only supported as a literal (INTERVAL '1 day')")
            elif not castable(src, t):
                raise bad(node, f"CAST from {src} to {t} is not supported by both engines alike")
        if cls == "FUNCTION":
            _check_function(node, chk, fam, bad)


def _comparable(a: dict, b: dict, fam, bad, node: dict) -> None:
    fa, fb = fam(a), fam(b)
    if "null" in (fa, fb) or fa == fb:
        return
    groups = (set(NUMERIC), set(TIME))
    if any(fa in g and fb in g for g in groups):
        return
    if is_string_literal(a) and fb in (*NUMERIC, *TIME, "bool"):
        return
    if is_string_literal(b) and fa in (*NUMERIC, *TIME, "bool"):
        return
    raise bad(node, f"cannot compare or combine {fa} with {fb}; cast one side (CAST(x AS type))")


def _check_function(node: dict, chk: Checked, fam, bad) -> None:
    name = node["function_name"].lower()
    args = [a["expression"] for a in node.get("arguments") or []]
    fams = [fam(a) for a in args]
    if name in ("+", "-"):
        if len(args) == 1:
            if fams[0] not in (*NUMERIC, "null"):
                raise bad(node, "unary minus needs a number")
            return
        a, b = fams
        ok = (a in (*NUMERIC, "null") and b in (*NUMERIC, "null")
              or (a == "date" and b in ("int", "null"))
              or (name == "+" and b == "date" and a == "int")
              or (name == "-" and a == "date" and b == "date") or (a in TIME and b == "interval")
              or (name == "+" and a == "interval" and b in TIME))
        if not ok:
            raise bad(node,
                      f"{name} is defined for numbers, date {name} integer (days), date - date and "
                      "date/timestamp +/- INTERVAL constants")
        return
    if name in ("*", "/", "%"):
        if not all(f in (*NUMERIC, "null") for f in fams):
            raise bad(node, f"{name} needs numbers")
        return
    if name == "||":
        if not all(f in ("string", "null") for f in fams):
            raise bad(node, "|| joins strings; cast other values with CAST(x AS VARCHAR)")
        return
    if name in LIKE_FUNCTIONS:
        if not all(f in ("string", "null") for f in fams):
            raise bad(node, "LIKE and ILIKE compare strings")
        if len(args) == 3 and not (is_string_literal(args[2])
                                   and len(args[2]["literal"]["text"]) == 1):
            raise bad(node, "ESCAPE takes one character, written as a literal")
        return
    canon, _, _, spec = FUNCTIONS[name]
    for i, (a, f) in enumerate(zip(args, fams, strict=True)):
        want = spec[min(i, len(spec) - 1)] if spec else _ANY
        if want != _ANY and f not in (*want, "null"):
            raise bad(a, f"argument {i + 1} of {canon} must be {' or '.join(want)}, not {f}")
    if canon == "round" and len(args) == 2:
        if args[1].get("class") != "CONSTANT":
            raise bad(node, "round(x, n) needs a constant n")
        if fams[0] == "float" and int(args[1]["literal"]["text"].replace("_", "")) != 0:
            raise bad(node, "round(x, n) with n other than 0 is not supported for floating-point x "
                            "(the engines round halves differently); round a DECIMAL: round(CAST(x "
                            "AS DECIMAL(18, 6)), n)")
    if canon in ("date_part", "date_trunc", "date_diff"):
        allowed = {"date_part": DATE_PARTS, "date_trunc": TRUNC_PARTS,
                   "date_diff": DIFF_PARTS}[canon]
        if not is_string_literal(args[0]) or args[0]["literal"]["text"].lower() not in allowed:
            raise bad(node, f"{canon} takes one of {', '.join(sorted(allowed))} as a "
                            "literal first argument")


def _clock_names(node: dict, scope: Scope) -> None:
    """``current_date`` / ``current_timestamp`` written without parentheses parse as column names;
    like DuckDB, they mean the clock unless a column of that name is in scope."""
    for n in walk(node):
        names = n.get("column_names") if n.get("class") == "COLUMN_REF" else None
        if (names and len(names) == 1 and names[0].lower() in ("current_date", "current_timestamp")
                and not any(find_field(r.schema, names[0]) for r in scope.relations)):
            loc = {k: n[k] for k in ("query_location", "query_location_length") if k in n}
            n.clear()
            n.update({"class": "FUNCTION", "type": "FUNCTION", "alias": "", **loc,
                      "function_name": names[0].lower(), "schema": "", "catalog": "",
                      "filter": None, "order_bys": {"type": "ORDER_MODIFIER", "orders": []},
                      "distinct": False, "is_operator": False, "export_state": False,
                      "arguments": []})


# -- typing by shape ---------------------------------------------------------------------------
# DuckDB types a number literal by its layout alone: an integer by the ranges its value fits
# (INTEGER_LITERAL), a decimal by its digits before and after the point, an exponent as DOUBLE;
# binding folds no constant. So texts that differ only in such literals bind to the same types,
# and statements that embed their values (``c_id = 4711``) are described once per shape. Numbers
# under a function (``round(x, 2)``) and every string (``date_trunc('month', d)``) keep their value.
# An integer compared with an INTEGER or BIGINT column needs only to fit
# INTEGER (``_against_wide``).

_TYPINGS: OrderedDict[tuple[Scope, str], tuple[tuple[str, ...], tuple[str, ...]]] = OrderedDict()
_TYPINGS_SIZE = 4096
_typings_lock = threading.Lock()


# value bits of the integer types, signed and not
_UNSIGNED_BITS = (7, 8, 15, 16, 31, 32, 63, 64, 127, 128)
_SIGNED_BITS = (7, 15, 31, 63, 127)


def _representative(lit: dict) -> dict:
    """A literal that DuckDB types exactly as ``lit``: for an integer the largest one that fits
    the same integer types (their ranges are all DuckDB asks of it), for a
    decimal the same layout."""
    text = lit["text"].replace("_", "")
    if lit["kind"] == "INTEGER":
        v = int(text)
        if v >= 0:
            n = next((n for n in _UNSIGNED_BITS if v.bit_length() <= n), None)
            return lit if n is None else {"kind": "INTEGER", "text": str((1 << n) - 1)}
        n = next((n for n in _SIGNED_BITS if (~v).bit_length() <= n), None)
        return lit if n is None else {"kind": "INTEGER", "text": str(-(1 << n))}
    return {"kind": "NUMERIC", "text": re.sub(r"[0-9]", "9", text)}


_INT32 = (-(1 << 31), (1 << 31) - 1)
_ANY_STRING = {"kind": "STRING", "text": "s"}


def _against_wide(node: dict) -> dict:
    """An integer literal compared with a column of type INTEGER or BIGINT: any value that fits
    INTEGER gets INTEGER alone and the column's type in common with it, so one of its sign stands
    for all (``s_i_id IN (5, 500)``: one shape per list length, not one per mix of sizes)."""
    lit = node["literal"]
    v = int(lit["text"].replace("_", "")) if lit["kind"] == "INTEGER" else None
    if v is not None and _INT32[0] <= v <= _INT32[1]:
        return {**node, "literal": {"kind": "INTEGER", "text": str(_INT32[v >= 0])}}
    return {**node, "literal": _representative(lit)}


def _compared_with_wide(node: dict, wide: Callable[[dict], bool]) -> list[dict]:
    """The literals of a comparison or IN whose other side is a wide integer column."""
    if node.get("class") == "COMPARISON" and node.get("type") in COMPARISONS:
        left, right = node["left"], node["right"]
        if wide(left) and right.get("class") == "CONSTANT":
            return [right]
        if wide(right) and left.get("class") == "CONSTANT":
            return [left]
    elif node.get("class") == "OPERATOR" and node.get("type") in ("COMPARE_IN", "COMPARE_NOT_IN"):
        first, *rest = node["children"]
        if wide(first):
            return [c for c in rest if c.get("class") == "CONSTANT"]
    return []


def _typing_shape(node: dict, compared: frozenset[int] = frozenset(),
                  under_function: bool = False, strings_read: bool = False) -> dict:
    """A copy of the tree with each number literal outside a function, and each string literal
    outside a function that reads it, replaced by its representative; ``compared``: the ids of
    literals compared with an INTEGER or BIGINT column. DuckDB binds a string literal by where
    it stands, not by what it says (binding evaluates nothing: ``i = 'abc'`` binds), except as
    the part name of ``date_part`` and its kin, so one string stands for all elsewhere."""
    if node.get("class") == "CONSTANT":
        kind = node["literal"]["kind"]
        if kind == "STRING":
            return node if strings_read else {**node, "literal": _ANY_STRING}
        if under_function or kind not in ("INTEGER", "NUMERIC"):
            return node
        if id(node) in compared:
            return _against_wide(node)
        return {**node, "literal": _representative(node["literal"])}
    if node.get("class") == "FUNCTION":
        name = node["function_name"].lower()
        under_function = under_function or name not in OPERATORS
        strings_read = strings_read or (name not in OPERATORS
                                        and FUNCTIONS.get(name, ("",))[0] not in STRING_BLIND)
    out = {}
    for k, v in node.items():
        if k == "type_expr":  # a CAST's type: its numbers are the type (DECIMAL(10, 2))
            out[k] = v
        elif isinstance(v, dict):
            out[k] = _typing_shape(v, compared, under_function, strings_read)
        elif isinstance(v, list):
            out[k] = [_typing_shape(x, compared, under_function, strings_read)
                      if isinstance(x, dict) else x for x in v]
        else:
            out[k] = v
    return out


def _typed(scope: Scope, shape: str, bind) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(types of the nodes, common types of their operands) for a shape, bound on first use."""
    with _typings_lock:
        got = _TYPINGS.get((scope, shape))
        if got is not None:
            _TYPINGS.move_to_end((scope, shape))
            return got
    got = bind()  # outside the lock: a bad expression raises here and nothing is remembered
    with _typings_lock:
        _TYPINGS[(scope, shape)] = got
        while len(_TYPINGS) > _TYPINGS_SIZE:
            _TYPINGS.popitem(last=False)
    return got


def _common_sql(ops: list[dict], column) -> str:
    """The SQL that binds ``ops`` to one common type: a CASE over them, where a string literal
    next to a typed operand takes that operand's type (as in a comparison)."""
    return "CASE " + " ".join(f"WHEN FALSE THEN {render(o, column)}" for o in ops) + " END"


_SHOWN = {"~~": "LIKE", "!~~": "NOT LIKE", "~~*": "ILIKE", "!~~*": "NOT ILIKE"}  # DuckDB's names


def _post_order(node: dict):
    for c in children(node):
        yield from _post_order(c)
    yield node


def _mismatch(text: str, what: str, root: dict, binder: _Binder, column,
              refs: dict[int, ColumnRef]) -> InvalidExpressionError | None:
    """The binder refused the expression's types: the smallest part that does not bind, its
    operands and their types, in the user's terms (DuckDB names the CASE we bind comparisons
    through, which the user never wrote). None if no part alone fails."""
    def typed(sql: str) -> str | None:
        try:
            return binder.describe([sql])[0]
        except InvalidExpressionError:
            return None

    def say(n: dict, t: str | None) -> str:
        if n.get("class") == "COLUMN_REF":
            return f"column {'.'.join((refs[id(n)].column, *refs[id(n)].fields))} ({t})"
        kind = "the literal" if n.get("class") == "CONSTANT" else "the value"
        return f"{kind} {_snippet(text, n)} ({t})"

    for n in _post_order(root):
        kids = children(n)
        if not kids:
            continue
        kid_types = {id(k): typed(render(k, column)) for k in kids}
        if any(t is None for t in kid_types.values()):
            continue  # not the smallest part that fails (cannot happen in post order)
        ops = operands(n)
        if ops is not None:  # as multi_of: a string literal takes a typed operand's type
            typed_ops = [o for o in ops if not is_string_literal(o)
                         and family(kid_types[id(o)] or "") != "null"]
            if any(family(kid_types[id(o)] or "") != "string" for o in typed_ops):
                ops = typed_ops
        if typed(render(n, column)) is not None and (ops is None
                                                     or typed(_common_sql(ops, column))):
            continue
        if ops is None:
            name = str(n.get("function_name") or n.get("class", "?"))
            return _fail(what, f"{_SHOWN.get(name, name)} does not take "
                               + " and ".join(say(k, kid_types[id(k)]) for k in kids)
                               + "; cast the operand (CAST(x AS type))")
        firsts: dict[str, dict] = {}
        for o in ops:
            firsts.setdefault(family(kid_types[id(o)] or ""), o)
        a, b = (list(firsts.values()) + ops)[:2]
        hint = "cast one side (CAST(x AS type))"
        lit = a if a.get("class") == "CONSTANT" else b
        if (lit.get("class") == "CONSTANT" and not is_string_literal(lit)
                and "string" in {family(kid_types[id(a)] or ""), family(kid_types[id(b)] or "")}):
            hint += f", or write the literal as text ('{_snippet(text, lit)}')"
        compared = n.get("class") in ("COMPARISON", "BETWEEN") or n.get("type") in (
            "COMPARE_IN", "COMPARE_NOT_IN")
        pair = (f"{say(a, kid_types[id(a)])} is compared with {say(b, kid_types[id(b)])}"
                if compared else f"{_snippet(text, n)} mixes {say(a, kid_types[id(a)])} and "
                                 f"{say(b, kid_types[id(b)])}")
        return _fail(what, f"{pair}: numbers go with numbers, text with text, dates and "
                           f"timestamps with each other; {hint}")
    return None


def _check(text: str, scope: Scope, what: str) -> Checked:
    """Checked once per text and scope: a statement's where is checked when it is validated,
    planned and pruned, and each caller names it its own way in errors (``what``), which an
    error alone needs: a failure is checked again under the caller's name."""
    try:
        return _checked(text, scope)
    except InvalidExpressionError:
        pass
    return _check_as(text, scope, what)


@lru_cache(maxsize=4096)
def _checked(text: str, scope: Scope) -> Checked:
    return _check_as(text, scope, f"expression {text!r}")


def _check_as(text: str, scope: Scope, what: str) -> Checked:
    node = json.loads(json.dumps(parse(text, what)))  # our own copy: the parse is cached and shared
    binder = _Binder(text, scope, what)
    _clock_names(node, scope)
    refs = {id(n): binder.resolve(n) for n in walk(node) if n.get("class") == "COLUMN_REF"}

    def column(names: list[str]) -> str:
        return ".".join(quote_ident(n) for n in names)

    nodes = list(walk(node))
    sql = render(node, column)

    def multi_of(by_id: dict[int, str]) -> list[tuple[dict, list[dict]]]:
        # the type operands are compared or combined in: DuckDB's CASE over them, where a string
        # literal next to a typed operand takes that operand's type (as in a comparison)
        out = []
        for n in nodes:
            ops = operands(n)
            if ops:
                typed = [o for o in ops
                         if not is_string_literal(o) and family(by_id[id(o)]) != "null"]
                if any(family(by_id[id(o)]) != "string" for o in typed):
                    ops = typed
                out.append((n, ops))
        return out

    def bind() -> tuple[tuple[str, ...], tuple[str, ...]]:
        try:
            types = binder.describe([render(n, column) for n in nodes])
            by_id = {id(n): t for n, t in zip(nodes, types, strict=True)}
            common = binder.describe([_common_sql(ops, column) for _, ops in multi_of(by_id)])
        except InvalidExpressionError as e:  # in DuckDB's words, about the CASE we bind through
            raise _mismatch(text, what, node, binder, column, refs) or e from e
        return tuple(types), tuple(common)

    def wide(n: dict) -> bool:
        ref = refs.get(id(n))
        if ref is None or ref.fields:
            return False
        return (scope.relations[ref.relation].schema.field(ref.column).type
                in (pa.int32(), pa.int64()))

    compared = frozenset(id(c) for n in nodes for c in _compared_with_wide(n, wide))
    types, common = _typed(scope, render(_typing_shape(node, compared), column), bind)
    by_id = {id(n): t for n, t in zip(nodes, types, strict=True)}
    multi = multi_of(by_id)
    chk = Checked(text=text, node=node, scope=scope, sql=sql, type=types[0], refs=refs, types=by_id,
                  common={id(n): t for (n, _), t in zip(multi, common, strict=True)},
                  volatile=any(n.get("class") == "FUNCTION" and
                               FUNCTIONS.get(n["function_name"].lower(), ("",))[0] in VOLATILE
                               for n in nodes))
    _check_types(chk, what)
    return chk


def check_expression(text: str, scope: Scope | pa.Schema, what: str = "") -> Checked:
    """Any expression of the grammar over ``scope``, of whatever type it has."""
    scope = Scope.table(scope) if isinstance(scope, pa.Schema) else scope
    return _check(text, scope, what or f"expression {text!r}")


def check_where(text: str, scope: Scope | pa.Schema, what: str = "") -> Checked:
    """A filter or condition: a boolean expression of the grammar over ``scope``."""
    scope = Scope.table(scope) if isinstance(scope, pa.Schema) else scope
    what = what or f"where={text!r}"
    chk = _check(text, scope, what)
    if family(chk.type) not in ("bool", "null"):
        raise _fail(what, f"is {chk.type}, not a boolean")
    return chk


def check_value(text: str, scope: Scope | pa.Schema, target: pa.DataType,
                what: str = "") -> Checked:
    """A value assigned to a column of type ``target`` (SET, MERGE assignments): an expression of
    the grammar whose type converts to ``target`` by an assignment cast (``castable``)."""
    scope = Scope.table(scope) if isinstance(scope, pa.Schema) else scope
    what = what or f"value {text!r}"
    chk = _check(text, scope, what)
    dst = duckdb_type(target)
    if family(dst) not in VALUE_FAMILIES or not castable(chk.type, dst):
        raise _fail(what, f"the value is {chk.type}, the column is {dst}; no assignment "
                          "cast converts it")
    return chk


def check_assignments(assignments: dict[str, str], schema: pa.Schema,
                      table: str) -> dict[str, Checked]:
    """``set=`` of an update: {the schema's column name: checked value}."""
    if not isinstance(assignments, dict) or not assignments:
        raise InvalidExpressionError("update needs at least one column in set=")
    names = {f.name.lower(): f for f in schema}
    out: dict[str, Checked] = {}
    for col, expr in assignments.items():
        f = names.get(str(col).lower())
        if f is None:
            raise InvalidExpressionError(f"set: {table!r} has no column {col!r}")
        if f.name in out:
            raise InvalidExpressionError(f"set: column {f.name!r} is assigned twice")
        out[f.name] = check_value(expr, schema, f.type, what=f"set {col}={expr!r} on {table!r}")
    return out


def check_update(schema: pa.Schema, table: str, where: str | None,
                 assignments: dict[str, str] | None) -> tuple[Checked | None,
                                                              dict[str, Checked] | None]:
    """Everything an update/delete/read runs, checked: (where, set)."""
    w = check_where(where, schema, f"where={where!r} on {table!r}") if where is not None else None
    a = check_assignments(assignments, schema, table) if assignments is not None else None
    return w, a
