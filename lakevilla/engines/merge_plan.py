"""A MERGE as the engines run it, below the statement that asks for it.

``MergeSpec`` is the statement as a sublog entry carries it (``on``, the ordered clauses, the
aliases and, once staged, the source's files); ``plan`` checks it once against the target and
source schemas and gives the ``MergePlan`` an engine executes; ``prune_predicate`` turns the
source's join-key bounds (``KeyBound``, which each engine computes where its rows are) into a
``where`` over the target: the candidate files, and the merge's precision lock. ``MergeResult``
is what a merge did. Nothing here reads rows or touches storage.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..data.schemas import check_merge_source
from ..errors import InvalidArgumentError, InvalidExpressionError, SchemaMismatchError
from ..scan import expressions as E

IN_LIST_LIMIT = 200  # partition keys: list the values up to this many, else a range
SPEC_VERSION = 2  # 2: the staged source may be several files (``source_files``)
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CLAUSE_KINDS = ("update", "delete", "insert")


@dataclass(frozen=True)
class MergeClause:
    kind: str  # "update" | "delete" | "insert"
    predicate: str | None = None
    values: dict[str, str] | None = None  # update: set; insert: values; None with all_columns
    all_columns: bool = False  # update_all / insert_all: every target column from the source

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "predicate": self.predicate, "values": self.values,
                "all": self.all_columns}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MergeClause:
        return cls(kind=d["kind"], predicate=d.get("predicate"), values=d.get("values"),
                   all_columns=bool(d.get("all")))

    @property
    def matched(self) -> bool:
        return self.kind in ("update", "delete")

    @property
    def name(self) -> str:
        return f"when_{'' if self.matched else 'not_'}matched_{self.kind}" + (
            "_all" if self.all_columns else "")


@dataclass(frozen=True)
class MergeSpec:
    """The statement: ``on`` is a predicate, or key columns until it is planned (the entry
    carries the predicate); ``source_files``: the staged source, once written."""

    on: str | tuple[str, ...]
    clauses: tuple[MergeClause, ...]
    source_alias: str = "source"
    target_alias: str = "target"
    source_files: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"on": self.on if isinstance(self.on, str) else list(self.on),
                             "clauses": [c.to_json() for c in self.clauses],
                             "source_alias": self.source_alias, "target_alias": self.target_alias}
        if len(self.source_files) > 1:  # a reader of version 1 knows one staged file only
            return {"v": SPEC_VERSION, **d, "source_files": list(self.source_files)}
        return {"v": 1, **d, "source_key": self.source_files[0] if self.source_files else None}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MergeSpec:
        if int(d.get("v", 1)) > SPEC_VERSION:
            raise InvalidArgumentError(f"merge statement format {d['v']} is newer than this "
                                       "lakevilla understands")
        files = d.get("source_files") or ([d["source_key"]] if d.get("source_key") else [])
        on = d["on"]
        return cls(on=on if isinstance(on, str) else tuple(on),
                   clauses=tuple(MergeClause.from_json(c) for c in d["clauses"]),
                   source_alias=d.get("source_alias", "source"),
                   target_alias=d.get("target_alias", "target"), source_files=tuple(files))


@dataclass(frozen=True, eq=False)
class MergeResult(Mapping[str, int]):
    """What a merge did; also readable as a mapping of these names (delta-rs' metric names)."""

    num_source_rows: int = 0
    num_target_rows_updated: int = 0
    num_target_rows_deleted: int = 0
    num_target_rows_inserted: int = 0
    num_target_files_added: int = 0
    num_target_files_removed: int = 0

    def __getitem__(self, key: str) -> int:
        if key not in _RESULT_FIELDS:
            raise KeyError(key)
        return int(getattr(self, key))

    def __iter__(self) -> Iterator[str]:
        return iter(_RESULT_FIELDS)

    def __len__(self) -> int:
        return len(_RESULT_FIELDS)

    @property
    def rows_changed(self) -> int:
        return (self.num_target_rows_updated + self.num_target_rows_deleted
                + self.num_target_rows_inserted)


_RESULT_FIELDS = tuple(f.name for f in dataclasses.fields(MergeResult))


def check_source_schema(schema: pa.Schema) -> None:
    """Names a merge source may not have: two that differ only in case, or our reserved ones."""
    names = [n.lower() for n in schema.names]
    if len(set(names)) != len(names):
        raise SchemaMismatchError(f"merge source has duplicate column names {schema.names}")
    bad = [n for n in schema.names if n.lower().startswith(E.RESERVED_PREFIX)]
    if bad:
        raise SchemaMismatchError(f"merge source columns {bad}: names starting "
                                  f"with {E.RESERVED_PREFIX!r} are reserved")


def on_predicate(on: str | list[str] | tuple[str, ...], target: pa.Schema, source: pa.Schema,
                 target_alias: str, source_alias: str) -> str:
    """``on`` as a predicate: a column name or list of names (equal in target and source) becomes
    ``target.k = source.k AND ...``; any other string is the predicate itself."""
    def both(n: str) -> bool:
        return E.find_field(target, n) is not None and E.find_field(source, n) is not None

    if isinstance(on, list | tuple):
        if not on or not all(isinstance(k, str) for k in on):
            raise InvalidArgumentError("merge on= needs a predicate string or a non-empty "
                                       "list of key columns")
        for k in on:
            where = [w for w, s in (("target", target), ("source", source))
                     if E.find_field(s, k) is None]
            if where:
                raise InvalidExpressionError(f"merge on: key column {k!r} is not in "
                                             f"the {' and '.join(where)}")
        keys = list(on)
    elif isinstance(on, str) and _IDENT.match(on.strip()) and both(on.strip()):
        keys = [on.strip()]
    elif isinstance(on, str) and on.strip():
        return on
    else:
        raise InvalidArgumentError("merge on= needs a predicate string or a non-empty "
                                   "list of key columns")
    return " AND ".join(f"{E.quote_ident(target_alias)}.{E.quote_ident(k)} "
                        f"= {E.quote_ident(source_alias)}.{E.quote_ident(k)}" for k in keys)


@dataclass(frozen=True)
class MergePlan:
    """A merge checked against its target and source schemas: what an engine executes."""

    spec: MergeSpec  # ``on`` as its predicate
    on: E.Checked
    keys: tuple[tuple[str, str], ...]  # equi-join pairs (target column, source column)
    conditions: tuple[E.Checked | None, ...]  # per clause
    values: tuple[dict[str, E.Checked] | None, ...]  # per clause: target column -> value
    target: pa.Schema
    source: pa.Schema

    @property
    def clauses(self) -> tuple[MergeClause, ...]:
        return self.spec.clauses

    def ids(self, matched: bool) -> list[int]:
        """The clauses of one kind (matched or not), in the order they are tried."""
        return [i for i, c in enumerate(self.clauses) if c.matched == matched]

    @property
    def only_deletes(self) -> bool:
        """Its one matched clause deletes unconditionally: duplicate matches do no harm."""
        return [self.clauses[i] for i in self.ids(True)] == [MergeClause("delete")]

    def deleting(self) -> list[int]:
        return [i for i in self.ids(True) if self.clauses[i].kind == "delete"]


def _equi_keys(chk: E.Checked) -> list[tuple[str, str]]:
    """``target.a = source.b`` conjuncts at the top of ``on`` (what pruning can use)."""
    out = []
    stack = [chk.node]
    while stack:
        n = stack.pop()
        if n.get("class") == "CONJUNCTION" and n.get("type") == "CONJUNCTION_AND":
            stack.extend(n["children"])
        elif n.get("class") == "COMPARISON" and n.get("type") == "COMPARE_EQUAL":
            left, right = n["left"], n["right"]
            if left.get("class") == "COLUMN_REF" and right.get("class") == "COLUMN_REF":
                a, b = chk.refs[id(left)], chk.refs[id(right)]
                if a.fields or b.fields or a.relation == b.relation:
                    continue
                t, s = (a, b) if a.relation == 0 else (b, a)
                out.append((t.column, s.column))
    return out


def plan(spec: MergeSpec, table: str, target: pa.Schema, source: pa.Schema,
         computed: frozenset[str] = frozenset()) -> MergePlan:
    """Check the statement (grammar, scopes, columns, clause order); raise before anything runs.
    ``computed``: generated and identity columns, which an insert may leave out."""
    if not spec.clauses:
        raise InvalidArgumentError(f"merge into {table!r} has no clause: add when_matched_update/"
                                   "when_matched_delete/when_not_matched_insert (or "
                                   "their *_all forms)")
    check_source_schema(source)
    check_merge_source(table, spec, source, target)  # *_all copies columns as an insert does
    spec = dataclasses.replace(spec, on=on_predicate(spec.on, target, source, spec.target_alias,
                                                     spec.source_alias))
    assert isinstance(spec.on, str)
    both = E.Scope.merge(target, source, spec.target_alias, spec.source_alias)
    src_only = E.Scope((E.Relation(spec.source_alias, source),))
    on = E.check_where(spec.on, both, f"merge on={spec.on!r} into {table!r}")
    conds: list[E.Checked | None] = []
    vals: list[dict[str, E.Checked] | None] = []
    for i, c in enumerate(spec.clauses):
        what = f"merge into {table!r}, clause {i + 1} ({c.name.removesuffix('_all')})"
        scope = both if c.matched else src_only
        if c.kind not in CLAUSE_KINDS:
            raise InvalidArgumentError(f"{what}: unknown clause kind {c.kind!r}")
        for earlier in spec.clauses[:i]:
            if earlier.matched == c.matched and earlier.predicate is None:
                raise InvalidArgumentError(f"{what} can never apply: an earlier clause of the same "
                                           "kind has no condition (only the last clause of a "
                                           "kind may omit it)")
        conds.append(E.check_where(c.predicate, scope, f"{what} predicate={c.predicate!r}")
                     if c.predicate is not None else None)
        vals.append(None if c.kind == "delete"
                    else _values(c, what, spec, table, target, source, scope, computed))
    return MergePlan(spec=spec, on=on, keys=tuple(_equi_keys(on)), conditions=tuple(conds),
                     values=tuple(vals), target=target, source=source)


def _values(c: MergeClause, what: str, spec: MergeSpec, table: str, target: pa.Schema,
            source: pa.Schema, scope: E.Scope, computed: frozenset[str]) -> dict[str, E.Checked]:
    """An update's or insert's values, checked as assignments to the target's columns."""
    if c.all_columns:
        found = {f.name: E.find_field(source, f.name) for f in target}
        missing = [n for n, sf in found.items() if sf is None and n not in computed]
        if missing:
            raise SchemaMismatchError(f"{what}: the source has no column(s) {missing} "
                                      f"of {table!r}; name the values explicitly "
                                      "instead of *_all")
        assign = {n: f"{E.quote_ident(spec.source_alias)}.{E.quote_ident(sf.name)}"
                  for n, sf in found.items() if sf is not None}
    else:
        assign = c.values or {}
        if not isinstance(assign, dict) or not assign:
            raise InvalidArgumentError(
                f"{what}: needs at least one column "
                f"({'updates' if c.kind == 'update' else 'values'}={{column: expr}})")
    out: dict[str, E.Checked] = {}
    for col, expr in assign.items():
        f = E.find_field(target, str(col))
        if f is None:
            raise InvalidExpressionError(f"{what}: {table!r} has no column {col!r}")
        if f.name in out:
            raise InvalidExpressionError(f"{what}: column {f.name!r} is assigned twice")
        out[f.name] = E.check_value(expr if isinstance(expr, str) else str(expr), scope, f.type,
                                    f"{what}: {col}={expr!r}")
    if c.kind == "insert":
        for f in target:
            if f.name not in out and not f.nullable and f.name not in computed:
                raise SchemaMismatchError(f"{what}: no value for non-nullable "
                                          f"column {f.name!r}")
    return out


# -- pruning -------------------------------------------------------------------------------

@dataclass(frozen=True)
class KeyBound:
    """What the source's values of one join key allow a matching target row to hold."""

    all_null: bool  # no source row has a value: NULL equals nothing
    low: Any = None
    high: Any = None
    values: tuple[Any, ...] | None = None  # every distinct value, when asked and few enough


@dataclass(frozen=True)
class BoundedKey:
    """A join key whose source values bound the target's (``listed``: its distinct values are
    wanted, a partition column of the target)."""

    target: str
    source: str
    family: str
    listed: bool


def bounded_keys(p: MergePlan, partition_columns: tuple[str, ...]) -> list[BoundedKey]:
    """The join keys whose values can bound the target rows a source row can match: equal
    families that compare exactly (integers, strings, dates, timestamps without a zone)."""
    out = []
    for tcol, scol in p.keys:
        tf, sf = p.target.field(tcol), p.source.field(scol)
        fam = E.family(E.duckdb_type(tf.type))
        if (fam != E.family(E.duckdb_type(sf.type))
                or fam not in ("int", "string", "date", "timestamp")):
            continue
        if fam == "timestamp" and (tf.type.tz is not None or sf.type.tz is not None):
            continue
        out.append(BoundedKey(tcol, scol, fam, tcol in partition_columns))
    return out


def _literal(v: Any, fam: str) -> str | None:
    if v is None:
        return None
    if fam == "int":
        return str(int(v))
    if fam == "string":
        return E.quote_string(v)
    if fam == "date" and isinstance(v, dt.date):
        return E.quote_string(v.isoformat())
    if fam == "timestamp" and isinstance(v, dt.datetime) and v.tzinfo is None:
        return E.quote_string(v.isoformat(sep=" "))
    return None


def prune_predicate(keys: list[BoundedKey], bounds: Mapping[str, KeyBound]) -> str | None:
    """A ``where`` over the target that every row a source row can match satisfies (None: no
    such bound; the merge reads the whole table). ``FALSE`` when no source row can match.
    ``bounds``: each key's bound, by source column."""
    parts = []
    for k in keys:
        b = bounds[k.source]
        if b.all_null:
            return "FALSE"  # NULL equals nothing: no source row can match
        name = E.quote_ident(k.target)
        if k.listed and b.values is not None:
            lits = [_literal(v, k.family) for v in b.values]
            if all(lit is not None for lit in lits):
                parts.append(f"{name} IN ({', '.join(sorted(lit for lit in lits if lit))})")
                continue
        lo, hi = _literal(b.low, k.family), _literal(b.high, k.family)
        if lo is None or hi is None:
            continue
        parts.append(f"{name} BETWEEN {lo} AND {hi}")
    return " AND ".join(parts) if parts else None
