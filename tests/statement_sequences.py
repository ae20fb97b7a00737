"""Random sequences of statements (insert, update, delete, merge, overwrite with a predicate)
that lakevilla and delta-rs both run, for the differential tests of tables with Delta
features (``statements/test_feature_differential.py``, ``interop/test_spark_features.py``).

A statement is data (``Statement``), applied to a lakevilla table (``apply_lakevilla``, one
transaction) or to a delta-rs table (``apply_delta_rs``): each returns ``None`` when the
statement was accepted and the refusal (the exception) when it was not. The predicates and
expressions are the SQL both dialects (DuckDB's and DataFusion's) read alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

import lakevilla as lv

S = pa.schema([("id", pa.int64()), ("part", pa.string()), ("v", pa.int64())])

ROW = st.fixed_dictionaries({"id": st.integers(0, 12),
                             "part": st.sampled_from(["a", "b", None]),
                             "v": st.one_of(st.none(), st.integers(-5, 5))})
# a NULL id: refused where id is NOT NULL, a key that never matches otherwise
ROW_ANY_ID = ROW | st.fixed_dictionaries({"id": st.none(), "part": st.just("a"),
                                          "v": st.integers(-5, 5)})

WHERES = ["id < 4", "v > 0", "v IS NULL", "id % 2 = 0", "part = 'a'", "part IS NULL",
          "v BETWEEN -1 AND 2 OR part = 'b'", "NOT (id = 3)", "id >= 8", "v < -2 AND id > 2"]
SETS = [{"v": "v + 1"}, {"v": "coalesce(v, 0) - 3"}, {"v": "v * -1", "part": "'b'"},
        {"part": "'a'"}, {"v": "id - 6"}]
# overwrite's predicate and the same test in Python (rows outside it are refused by both)
OVERWRITES = {"id < 4": lambda r: r["id"] is not None and r["id"] < 4,
              "part = 'a'": lambda r: r["part"] == "a",
              "id >= 8": lambda r: r["id"] is not None and r["id"] >= 8}
# merge clauses on the key id: (builder method, its arguments)
MERGES: dict[str, list[tuple[str, tuple]]] = {
    "upsert": [("when_matched_update", ({"v": "source.v", "part": "source.part"},)),
               ("when_not_matched_insert_all", ())],
    "conditional": [("when_matched_delete", ("source.v < 0",)),
                    ("when_matched_update", ({"v": "coalesce(target.v, 0) + source.v"},
                                             "source.v > 1")),
                    ("when_not_matched_insert", ({"id": "source.id", "part": "source.part",
                                                  "v": "source.v - 4"},))],
    "delete": [("when_matched_delete", ())],
}


@dataclass(frozen=True)
class Statement:
    """One statement: ``kind`` and what it needs (rows for insert, merge and overwrite; a
    predicate for update, delete and overwrite; assignments; merge clauses by name)."""

    kind: str
    rows: tuple[tuple[Any, ...], ...] = ()
    where: str | None = None
    set: tuple[tuple[str, str], ...] = ()
    clauses: str = ""

    def table(self) -> pa.Table:
        return pa.Table.from_pylist([dict(zip(S.names, r, strict=True)) for r in self.rows],
                                    schema=S)

    def __repr__(self) -> str:  # what a failing example shows
        parts = [self.kind]
        if self.rows:
            parts.append(repr([tuple(r) for r in self.rows]))
        if self.set:
            parts.append(repr(dict(self.set)))
        if self.where:
            parts.append(f"where {self.where!r}")
        if self.clauses:
            parts.append(self.clauses)
        return f"<{' '.join(parts)}>"


def _as_rows(rows: list[dict]) -> tuple[tuple[Any, ...], ...]:
    return tuple(tuple(r[c] for c in S.names) for r in rows)


def _unique(rows: list[dict]) -> list[dict]:
    seen: set[Any] = set()
    out = []
    for r in rows:
        if r["id"] is None or r["id"] not in seen:
            seen.add(r["id"])
            out.append(r)
    return out


@st.composite
def statements(draw, row=ROW) -> Statement:
    kind = draw(st.sampled_from(["insert", "update", "delete", "merge", "overwrite"]))
    if kind == "insert":
        return Statement(kind, rows=_as_rows(draw(st.lists(row, min_size=1, max_size=4))))
    if kind == "update":
        return Statement(kind, where=draw(st.sampled_from(WHERES)),
                         set=tuple(draw(st.sampled_from(SETS)).items()))
    if kind == "delete":
        return Statement(kind, where=draw(st.sampled_from(WHERES)))
    if kind == "merge":
        source = _unique(draw(st.lists(row, min_size=1, max_size=5)))
        return Statement(kind, rows=_as_rows(source),
                         clauses=draw(st.sampled_from(sorted(MERGES))))
    where = draw(st.sampled_from(sorted(OVERWRITES)))
    rows = draw(st.lists(row, max_size=3))
    if draw(st.integers(0, 3)):  # mostly rows inside the predicate: the replace happens
        rows = [r for r in rows if OVERWRITES[where](r)]
    return Statement(kind, rows=_as_rows(rows), where=where)


def initial_files(row=ROW):
    """The table's first rows, as 1-3 appends (so statements meet several files)."""
    return st.lists(st.lists(row, min_size=1, max_size=5), min_size=1, max_size=3).map(
        lambda files: [_as_rows(f) for f in files])


def _merge_clauses(builder: Any, clauses: str) -> Any:
    for name, args in MERGES[clauses]:
        builder = getattr(builder, name)(*args)
    return builder.execute()


def apply_lakevilla(lake: lv.Lake, name: str, s: Statement,
                    features: str = "") -> lv.LakeVillaError | None:
    """``s`` in one lakevilla transaction; the refusal (a ``LakeVillaError``), or None."""
    try:
        with lake.transaction(features) as txn:
            if s.kind == "insert":
                txn.insert(name, s.table())
            elif s.kind == "update":
                txn.update(name, dict(s.set), where=s.where)
            elif s.kind == "delete":
                txn.delete(name, where=s.where)
            elif s.kind == "merge":
                _merge_clauses(txn.merge(name, s.table(), on="target.id = source.id"),
                               s.clauses)
            else:
                txn.overwrite(name, s.table(), where=s.where)
    except lv.LakeVillaError as e:
        return e
    return None


def apply_delta_rs(path: str, s: Statement) -> Exception | None:
    """``s`` through delta-rs on the table at ``path``; its refusal, or None."""
    from deltalake import DeltaTable, write_deltalake

    try:
        if s.kind == "insert":
            write_deltalake(path, s.table(), mode="append")
        elif s.kind == "update":
            DeltaTable(path).update(updates=dict(s.set), predicate=s.where)
        elif s.kind == "delete":
            DeltaTable(path).delete(s.where)
        elif s.kind == "merge":
            _merge_clauses(DeltaTable(path).merge(s.table(), predicate="target.id = source.id",
                                                  source_alias="source", target_alias="target"),
                           s.clauses)
        else:
            write_deltalake(path, s.table(), mode="overwrite", predicate=s.where)
    except Exception as e:  # delta-rs' errors share no base class we could name
        return e
    return None


def delta_rs_rows(path: str) -> list[dict]:
    """The table as delta-rs' SQL reader reads it (it applies deletion vectors and column
    mapping; ``to_pyarrow_table`` does neither), in a fixed order."""
    from deltalake import DeltaTable, QueryBuilder

    t = pa.table(QueryBuilder().register("t", DeltaTable(path)).execute("SELECT * FROM t"))
    return ordered(t.to_pylist())


def ordered(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: tuple((k, v is None, repr(v)) for k, v in sorted(r.items())))
