"""Folds (``delta/files.py``): every few dozen changes a snapshot's overlay becomes part of its
table. A fold copies nothing (``Pieces``): its rows are rows of the tables it was folded from,
and their parsed statistics are gathered, not parsed again. Whatever the order of changes and
folds, a folded table holds exactly the rows and statistics a table made afresh from the same
actions holds, and what it keeps of older tables stays bounded."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakevilla.delta import files as F
from lakevilla.delta.actions import AddFile
from lakevilla.delta.files import ActionTable, FileSet
from lakevilla.scan import statcols
from lakevilla.scan.statcols import StatColumn

COLS = [StatColumn("id", pa.int64(), False), StatColumn("name", pa.string(), False),
        StatColumn("score", pa.float64(), False), StatColumn("p", pa.int32(), True)]
PATHS = [f"part-{i:03d}.parquet" for i in range(40)]


def _add(path: str, n: int) -> AddFile:
    """A file whose statistics differ with ``n`` (a path written again gets new ones)."""
    stats = {"numRecords": n + 1,
             "minValues": {"id": n, "name": f"a{n}", "score": n / 2},
             "maxValues": {"id": n + 5, "name": f"z{n}", "score": n / 2 + 1},
             "nullCount": {"id": 0, "name": n % 2, "score": 0}}
    return AddFile(path=path, size=100 + n, partition_values={"p": str(n % 3)},
                   modification_time=n, data_change=True, stats=json.dumps(stats),
                   tags={"k": str(n)} if n % 4 == 0 else None)


def _fold(s: FileSet) -> ActionTable:
    return ActionTable.folded(s.base, s.live_indices(), s.overlay())


def _bounds(table: ActionTable) -> list:
    return [[a.to_pylist() for a in b] for b in statcols.columns(table, COLS)] + [
        statcols.row_counts(table).to_pylist()]


steps = st.lists(st.one_of(
    st.tuples(st.just("put"), st.sampled_from(PATHS)),
    st.tuples(st.just("drop"), st.sampled_from(PATHS)),
    st.tuples(st.just("fold")),
    st.tuples(st.just("parse")),
), max_size=80)


@settings(max_examples=60, deadline=None)
@given(steps, st.randoms(use_true_random=False))
def test_a_fold_of_folds_holds_what_a_fresh_table_holds(ops, rnd):
    base: ActionTable = ActionTable.from_actions([], AddFile)
    hidden: set[str] = set()
    extra: dict[str, AddFile] = {}
    model: dict[str, AddFile] = {}
    n = 0
    for op in ops:
        if op[0] == "put":
            n += 1
            a = _add(op[1], n)
            extra[a.path] = a
            hidden.add(a.path)
            model[a.path] = a
        elif op[0] == "drop":
            extra.pop(op[1], None)
            hidden.add(op[1])
            model.pop(op[1], None)
        elif op[0] == "parse":  # statistics parsed before a later fold: gathered by it
            _bounds(base)
        else:
            base = _fold(FileSet(base, frozenset(hidden), extra))
            hidden, extra = set(), {}
            if base.pieces is not None:  # what it keeps of older tables stays bounded
                assert len(base.pieces.parts) <= F.FOLD_PARTS
                assert base.pieces.rows <= F.FOLD_KEEPS * base.num_rows + F.FOLD_AT
    # first through the parts (no column made yet), then through the columns
    fresh = ActionTable.from_actions(base.actions(np.arange(base.num_rows)), AddFile)
    if base.num_rows:
        idx = np.array([rnd.randrange(base.num_rows) for _ in range(5)], dtype=np.int64)
        names = rnd.sample(list(F.ADD_SCHEMA.names), 3)
        back = np.arange(base.num_rows, dtype=np.int64)[::-1]  # across parts, last first
        for rows in (idx, back):
            assert base.take(rows, names).equals(fresh.take(rows, names))
            assert base.actions(rows) == fresh.actions(rows)
    s = FileSet(base, frozenset(hidden), extra)
    assert dict(s.items()) == model
    assert base.table.equals(fresh.table)
    assert _bounds(base) == _bounds(fresh)
    want = [PATHS[i] for i in range(0, 40, 3)]
    assert base.index_of(want) == fresh.index_of(want)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows whose statistics are parsed, by Python (``_py_parse``) or DuckDB (``_query_stats``)."""
    parsed: list[int] = []
    py, duck = statcols._py_parse, statcols._query_stats

    def py_parse(table, data):
        parsed.append(table.num_rows)
        return py(table, data)

    def query_stats(sql, table, inputs):
        parsed.append(table.num_rows)
        return duck(sql, table, inputs)

    monkeypatch.setattr(statcols, "_py_parse", py_parse)
    monkeypatch.setattr(statcols, "_query_stats", query_stats)
    return parsed


def test_a_fold_parses_only_the_files_it_adds(monkeypatch):
    """A table parsed once, folded with 30 new files again and again: each fold's prune parses
    the 30 new files' statistics (once in Python, once by DuckDB for the float column), never
    the table's again, also when the parts grew too many and the older ones are made one
    table. What it finds is what a fresh table of the same files finds."""
    parsed = _counting(monkeypatch)
    base = ActionTable.from_actions([_add(f"old-{i}", i) for i in range(200)], AddFile)
    _bounds(base)
    assert sum(parsed) >= 200
    parts = []
    for k in range(F.FOLD_PARTS + 3):
        overlay = {f"new-{k}-{i}": _add(f"new-{k}-{i}", i) for i in range(30)}
        base = _fold(FileSet(base, frozenset({f"old-{k}"}), overlay))
        parts.append(len(base.pieces.parts))
        fresh = ActionTable.from_actions(base.actions(np.arange(base.num_rows)), AddFile)
        back = np.arange(base.num_rows, dtype=np.int64)[::-3]  # across parts, last first
        assert base.take(back, ["path", "size"]).equals(fresh.take(back, ["path", "size"]))
        parsed.clear()
        ours = _bounds(base)
        assert parsed == [30, 30]
        assert ours == _bounds(fresh)
    assert max(parts) == F.FOLD_PARTS and parts[-1] < F.FOLD_PARTS  # the older parts made one


def test_a_fold_copies_no_column_but_the_paths(monkeypatch):
    """Folded every few dozen changes in every client that follows a busy table, a fold makes
    no column but the paths (which rows the overlay hides): not of the table's rows, not of the
    overlay's action objects, which a statement asking for a few files gets as they are. A
    column is made when asked for."""
    made: set[str] = set()

    def asked(names: object) -> None:
        made.update([names] if isinstance(names, str) else names)  # type: ignore[arg-type]

    for cls, name, at in ((F.ActionColumns, "fields", 1), (F.ActionColumns, "array", 1),
                          (F.Pieces, "take", 2), (F.LazyRows, "fields", 1)):
        real = getattr(cls, name)
        monkeypatch.setattr(cls, name, lambda *a, _r=real, _i=at: (asked(a[_i]), _r(*a))[1])
    base = ActionTable.from_actions([_add(f"old-{i}", i) for i in range(200)], AddFile)
    for k in range(3):
        overlay = {f"new-{k}-{i}": _add(f"new-{k}-{i}", i) for i in range(30)}
        base = _fold(FileSet(base, frozenset({f"old-{k}"}), overlay))
    assert made == {"path"} and base.num_rows == 200 - 3 + 90
    picked = base.actions(np.arange(0, base.num_rows, 7))  # the action objects themselves
    assert made == {"path"} and picked[-1] is overlay["new-2-23"]  # row 280
    assert base.column("stats").to_pylist()[-1] == overlay["new-2-29"].stats
    assert made == {"path", "stats"}
