"""MERGE: the statement, its checks, its pruning predicate and its staged source.

A merge is declarative (target, source, ``on``, ordered clauses), so under R it is
redone on a newer snapshot instead of aborted. What it reads is the candidate target
files; which files those are comes from the source's join-key values (partition
values, min/max of the keys), written as an ordinary ``where`` over the target
(``prune_predicate``). That predicate is also the merge's precision lock: a
concurrent commit adding a file that could hold one of the keys is a conflict, so
a not-matched insert cannot miss a row another writer inserted meanwhile.

The engines run the join (``Engine.merge``); this module only says what to run.
For a recovering client to redo the merge, the source is staged as a Parquet file
under ``_lakevilla/txns/<txn>/`` (``stage_source``) and named by the logical sublog entry.
"""

from __future__ import annotations

import datetime as dt
import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..data.schemas import to_arrow_table
from ..delta.constraints import generated_columns
from ..engines.identity import refuse_updates
from ..errors import (
    InvalidArgumentError,
    InvalidExpressionError,
    LakeVillaError,
    SchemaMismatchError,
)
from ..names import sublog_prefix
from ..scan import expressions as E
from .identity import Marks

if TYPE_CHECKING:
    from ..delta.actions import AddFile
    from ..engines.api import Engine
    from ..store import ObjectStore
    from .view import TableWork

IN_LIST_LIMIT = 200  # partition keys: list the values up to this many, else a range
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class DuplicateMatchError(LakeVillaError):
    """Several source rows match one target row of a merge that updates or
    deletes (Delta's rule)."""


@dataclass
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


@dataclass
class MergeSpec:
    """The statement as a sublog entry carries it (``source_key``: the staged source)."""

    on: str | list[str]  # a list of key columns until the statement is checked against the target
    clauses: list[MergeClause]
    source_alias: str = "source"
    target_alias: str = "target"
    source_key: str | None = None
    v: int = 1
    # runtime only: the source rows, and what the last execution did
    source: pa.Table | None = field(default=None, repr=False, compare=False)
    metrics: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"v": self.v, "on": self.on, "clauses": [c.to_json() for c in self.clauses],
                "source_alias": self.source_alias, "target_alias": self.target_alias,
                "source_key": self.source_key}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MergeSpec:
        if int(d.get("v", 1)) > 1:
            raise InvalidArgumentError(f"merge statement format {d['v']} is newer than this "
                                       "lakevilla understands")
        return cls(on=d["on"], clauses=[MergeClause.from_json(c) for c in d["clauses"]],
                   source_alias=d.get("source_alias", "source"),
                   target_alias=d.get("target_alias", "target"), source_key=d.get("source_key"))

    def source_table(self, store: ObjectStore | None = None) -> pa.Table:
        if self.source is None:
            if self.source_key is None or store is None:
                raise InvalidArgumentError("this merge's source was not staged: it "
                                           "cannot be re-executed")
            self.source = pq.read_table(io.BytesIO(store.get(self.source_key).data))
        return self.source


# -- checking --------------------------------------------------------------------------

@dataclass
class CheckedMerge:
    """Everything a merge runs, checked against target and source schemas."""

    on: E.Checked
    keys: list[tuple[str, str]]  # equi-join pairs (target column, source column)
    conditions: list[E.Checked | None]  # per clause
    values: list[dict[str, E.Checked] | None]  # per clause: target column -> value (update/insert)
    target: pa.Schema
    source: pa.Schema


def source_arrow(data: Any) -> pa.Table:
    """The source as a pyarrow table (what is joined, and what is staged for recovery): any shape
    ``data.schemas.to_arrow_table`` takes; a stream is read whole, since the source is staged."""
    if isinstance(data, list) and not data:
        raise SchemaMismatchError("merge source is an empty list: its columns are unknown; pass a "
                                  "pyarrow.Table or a DataFrame with the columns")
    t = to_arrow_table(data)
    names = [n.lower() for n in t.column_names]
    if len(set(names)) != len(names):
        raise SchemaMismatchError(f"merge source has duplicate column names {t.column_names}")
    bad = [n for n in t.column_names if n.lower().startswith(E.RESERVED_PREFIX)]
    if bad:
        raise SchemaMismatchError(f"merge source columns {bad}: names starting "
                                  f"with {E.RESERVED_PREFIX!r} are reserved")
    return t


def on_predicate(on: str | list[str] | tuple[str, ...], target: pa.Schema, source: pa.Schema,
                 target_alias: str, source_alias: str) -> str:
    """``on`` as a predicate: a column name or list of names (equal in target and source) becomes
    ``target.k = source.k AND ...``; any other string is the predicate itself."""
    def both(n: str) -> bool:
        return E._field(target, n) is not None and E._field(source, n) is not None

    if isinstance(on, list | tuple):
        if not on or not all(isinstance(k, str) for k in on):
            raise InvalidArgumentError("merge on= needs a predicate string or a non-empty "
                                       "list of key columns")
        for k in on:
            where = [w for w, s in (("target", target), ("source", source))
                     if E._field(s, k) is None]
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


def _computed(tw: TableWork) -> frozenset[str]:
    """Columns an insert clause may leave out: generated and identity columns."""
    return frozenset(generated_columns(tw.ctx.constraints)) | {c.name for c in tw.ctx.identity}


def check(spec: MergeSpec, table: str, target: pa.Schema, source: pa.Schema,
          computed: frozenset[str] = frozenset()) -> CheckedMerge:
    """Check the statement (grammar, scopes, columns, clause order); raise before anything runs.
    ``computed``: generated columns, which a clause may leave out (the engine computes them)."""
    if not spec.clauses:
        raise InvalidArgumentError(f"merge into {table!r} has no clause: add when_matched_update/"
                                   "when_matched_delete/when_not_matched_insert (or "
                                   "their *_all forms)")
    both = E.Scope.merge(target, source, spec.target_alias, spec.source_alias)
    src_only = E.Scope((E.Relation(spec.source_alias, source),))
    assert isinstance(spec.on, str)  # a predicate by now (``Merge.check_input``)
    on = E.check_where(spec.on, both, f"merge on={spec.on!r} into {table!r}")
    conds: list[E.Checked | None] = []
    vals: list[dict[str, E.Checked] | None] = []
    for i, c in enumerate(spec.clauses):
        what = (f"merge into {table!r}, clause {i + 1} "
                f"(when_{'' if c.matched else 'not_'}matched_{c.kind})")
        scope = both if c.matched else src_only
        if c.kind not in ("update", "delete", "insert"):
            raise InvalidArgumentError(f"{what}: unknown clause kind {c.kind!r}")
        for earlier in spec.clauses[:i]:
            if earlier.matched == c.matched and earlier.predicate is None:
                raise InvalidArgumentError(f"{what} can never apply: an earlier clause of the same "
                                           "kind has no condition (only the last clause of a "
                                           "kind may omit it)")
        conds.append(E.check_where(c.predicate, scope, f"{what} predicate={c.predicate!r}")
                     if c.predicate is not None else None)
        if c.kind == "delete":
            vals.append(None)
            continue
        if c.all_columns:
            found = {f.name: E._field(source, f.name) for f in target}
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
            f = E._field(target, str(col))
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
        vals.append(out)
    return CheckedMerge(on=on, keys=_equi_keys(on), conditions=conds, values=vals, target=target,
                        source=source)


# -- pruning -------------------------------------------------------------------------------

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


def prune_predicate(cm: CheckedMerge, source: pa.Table,
                    partition_columns: tuple[str, ...]) -> str | None:
    """A ``where`` over the target that every row a source row can match satisfies (None: no
    such bound; the merge reads the whole table). ``FALSE`` when no source row can match."""
    parts = []
    for tcol, scol in cm.keys:
        tf, sf = cm.target.field(tcol), cm.source.field(scol)
        fam = E.family(E.duckdb_type(tf.type))
        if (fam != E.family(E.duckdb_type(sf.type))
                or fam not in ("int", "string", "date", "timestamp")):
            continue
        col = source.column(scol)
        if fam == "timestamp" and (tf.type.tz is not None or sf.type.tz is not None):
            continue
        if col.null_count == len(col):
            return "FALSE"  # NULL equals nothing: no source row can match
        name = E.quote_ident(tcol)
        if tcol in partition_columns:
            distinct = pc.unique(col.drop_null()).to_pylist()
            if len(distinct) <= IN_LIST_LIMIT:
                lits = [_literal(v, fam) for v in distinct]
                if all(lit is not None for lit in lits):
                    parts.append(f"{name} IN ({', '.join(sorted(cast('list[str]', lits)))})")
                    continue
        mm = pc.min_max(col)
        lo, hi = _literal(mm["min"].as_py(), fam), _literal(mm["max"].as_py(), fam)
        if lo is None or hi is None:
            continue
        parts.append(f"{name} BETWEEN {lo} AND {hi}")
    return " AND ".join(parts) if parts else None


# -- staging ---------------------------------------------------------------------------------

def staged_key(txn_id: str, op_seq: int) -> str:
    """Beside the transaction's sublogs: maintenance (``lake.cleanup``) deletes them together, and
    readers of that folder only parse its ``.json`` entries."""
    return f"{sublog_prefix(txn_id)}merge-source-{op_seq:08d}.parquet"


def stage_source(store: ObjectStore, spec: MergeSpec, table: str, txn_id: str,
                 op_seq: int) -> str | None:
    """Write the source where a recovering client can read it (once per statement); its key."""
    if spec.source_key is not None:
        return None
    buf = io.BytesIO()
    pq.write_table(spec.source_table(), buf, compression="snappy")
    key = staged_key(txn_id, op_seq)
    store.put(key, buf.getvalue())
    spec.source_key = key
    return key


# -- the public builder ------------------------------------------------------------------------

class MergeBuilder:
    """``txn.merge(table, source, on=...)``: add clauses in order, then ``execute()``.

    Clauses of one kind (matched / not matched) are tried in the order given; the first whose
    predicate holds applies to a row. Names follow delta-rs' ``TableMerger``."""

    def __init__(self, execute: Callable[[list[MergeClause]], dict[str, int]]) -> None:
        self._execute = execute  # runs the statement in its transaction
        self._clauses: list[MergeClause] = []
        self._done = False

    def _add(self, c: MergeClause) -> MergeBuilder:
        if self._done:
            raise InvalidArgumentError("this merge has already been executed")
        self._clauses.append(c)
        return self

    def when_matched_update(self, updates: dict[str, str],
                            predicate: str | None = None) -> MergeBuilder:
        """Matched rows (``predicate`` true, if given) take ``updates`` (column -> SQL
        over target and source)."""
        return self._add(MergeClause("update", predicate,
                                     dict(updates) if isinstance(updates, dict) else updates))

    def when_matched_update_all(self, predicate: str | None = None) -> MergeBuilder:
        """Matched rows take every column from the source row."""
        return self._add(MergeClause("update", predicate, None, all_columns=True))

    def when_matched_delete(self, predicate: str | None = None) -> MergeBuilder:
        """Matched rows (``predicate`` true, if given) are deleted."""
        return self._add(MergeClause("delete", predicate))

    def when_not_matched_insert(self, values: dict[str, str],
                                predicate: str | None = None) -> MergeBuilder:
        """Source rows that match nothing are inserted with ``values`` (column ->
        SQL over the source)."""
        return self._add(MergeClause("insert", predicate,
                                     dict(values) if isinstance(values, dict) else values))

    def when_not_matched_insert_all(self, predicate: str | None = None) -> MergeBuilder:
        """Source rows that match nothing are inserted with every column from the source."""
        return self._add(MergeClause("insert", predicate, None, all_columns=True))

    def execute(self) -> dict[str, int]:
        """Run the merge inside the transaction; returns its metrics (rows updated, deleted,
        inserted, files added and removed)."""
        if self._done:
            raise InvalidArgumentError("this merge has already been executed")
        self._done = True
        return self._execute(list(self._clauses))


def metrics(source_rows: int, updated: int, deleted: int, inserted: int, files_added: int,
            files_removed: int) -> dict[str, int]:
    return {"num_source_rows": source_rows, "num_target_rows_updated": updated,
            "num_target_rows_deleted": deleted, "num_target_rows_inserted": inserted,
            "num_target_files_added": files_added, "num_target_files_removed": files_removed}


@dataclass(eq=False, kw_only=True)
class Merge(Marks):
    """The statement; ``where`` is its pruning predicate over the target (``prune_predicate``),
    derived from the source's keys when it is checked: its read, and its precision lock."""

    kind: ClassVar[str] = "merge"
    operation: ClassVar[str] = "MERGE"
    logs_changes: ClassVar[bool] = True

    spec: MergeSpec

    def check_input(self, tw: TableWork, engine: Engine, store: ObjectStore) -> None:
        src = self.spec.source_table(store)
        self.spec.on = on_predicate(self.spec.on, tw.schema, src.schema, self.spec.target_alias,
                                    self.spec.source_alias)
        cm = check(self.spec, tw.name, tw.schema, src.schema, _computed(tw))
        refuse_updates(tw.ctx, [col for clause, v in zip(self.spec.clauses, cm.values,
                                                         strict=True)
                                if clause.kind == "update" for col in (v or {})], "merge")
        self.where = prune_predicate(cm, src, tuple(tw.base.partition_columns))

    def execute(self, tw: TableWork, engine: Engine, data: Any, redo: bool) -> Any:
        """It reads the files that can hold a match (``where``, from the source's keys)."""
        source = self.spec.source_table(tw.ctx.store)
        cm = check(self.spec, tw.name, tw.schema, source.schema, _computed(tw))
        cands = tw.candidates(self.where)
        self.read_files = {a.path for a in cands}
        rr, self.spec.metrics = engine.merge(tw.ctx, cands, cm, self.spec, source)
        self.removed, self.added, self.rows = rr.removed, rr.added, rr.rows
        self.cdc = rr.cdc
        self.marks = rr.marks  # the view takes them with the statement's effects (change_view)
        return dict(self.spec.metrics)

    def stage(self, store: ObjectStore, txn_id: str) -> str | None:
        return (stage_source(store, self.spec, self.table, txn_id, self.seq) if self.logical
                else None)

    def staged_key(self) -> str | None:
        return self.spec.source_key

    def encode(self, logical: bool) -> dict[str, Any] | None:
        st = super().encode(logical)
        if st is not None:
            st["merge"] = self.spec.to_json()  # on, clauses, aliases, the staged source
        return st

    @classmethod
    def decode_more(cls, statement: dict[str, Any], added: list[AddFile]) -> dict[str, Any]:
        if not statement.get("merge"):
            return {"spec": MergeSpec(on="", clauses=[])}  # physical: never redone
        return {"spec": MergeSpec.from_json(statement["merge"])}

    def result(self, out: Any) -> Any:
        return out
