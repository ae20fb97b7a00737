"""Pruning by statistics never skips a file that holds a matching row (property test).

The same predicate evaluator decides conflicts (precision locks), so a false
"cannot match" would be a missed conflict, not just a wrong read.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakevilla.delta.actions import AddFile
from lakevilla.delta.stats import stats_from_table
from lakevilla.expr import file_may_match, parse_predicate

SCHEMA = pa.schema([("i", pa.int64()), ("s", pa.string()), ("d", pa.date32()), ("p", pa.string())])
PARTITION = ["p"]

ints = st.one_of(st.none(), st.integers(-20, 20))
strs = st.one_of(st.none(), st.sampled_from(["", "a", "ab", "b", "zz", "é"]))
dates = st.one_of(st.none(), st.dates(dt.date(2024, 1, 1), dt.date(2024, 1, 20)))
parts = st.sampled_from(["x", "y"])
row = st.fixed_dictionaries({"i": ints, "s": strs, "d": dates, "p": parts})


def _lit(col: str, v) -> str:
    if col == "i":
        return str(v)
    if col == "d":
        return f"DATE '{v.isoformat()}'"
    return "'" + str(v).replace("'", "''") + "'"


@st.composite
def predicates(draw, depth=0):
    col = draw(st.sampled_from(["i", "s", "d", "p"]))
    value = {"i": st.integers(-25, 25), "s": st.sampled_from(["", "a", "ab", "b", "c", "zz"]),
             "d": st.dates(dt.date(2023, 12, 25), dt.date(2024, 1, 25)), "p": st.sampled_from(["x", "y", "z"])}[col]
    kind = draw(st.sampled_from(["cmp", "in", "between", "null", "notnull"] + (["and", "or", "not"] if depth < 2 else [])))
    if kind == "cmp":
        op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]))
        v = draw(value)
        return f"{_lit(col, v)} {op} {col}" if draw(st.booleans()) else f"{col} {op} {_lit(col, v)}"
    if kind == "in":
        vs = draw(st.lists(value, min_size=1, max_size=3))
        return f"{col} IN ({', '.join(_lit(col, v) for v in vs)})"
    if kind == "between":
        a, b = sorted([draw(value), draw(value)])
        return f"{col} BETWEEN {_lit(col, a)} AND {_lit(col, b)}"
    if kind == "null":
        return f"{col} IS NULL"
    if kind == "notnull":
        return f"{col} IS NOT NULL"
    left, right = draw(predicates(depth + 1)), draw(predicates(depth + 1))
    if kind == "not":
        return f"NOT ({left})"
    return f"({left}) {kind.upper()} ({right})"


def _file(rows: list[dict]) -> tuple[AddFile, pa.Table]:
    t = pa.Table.from_pylist(rows, SCHEMA)
    p = rows[0]["p"]
    add = AddFile(path="f.parquet", size=1, partition_values={"p": p}, stats=stats_from_table(t, PARTITION))
    return add, t


def _matches(t: pa.Table, where: str) -> int:
    con = duckdb.connect()
    con.register("t", t)
    return con.execute(f"SELECT count(*) FROM t WHERE {where}").fetchone()[0]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=st.lists(st.lists(row, min_size=1, max_size=6), min_size=1, max_size=4), where=predicates())
def test_pruning_never_skips_a_matching_file(files, where):
    pred = parse_predicate(where)
    assert pred.node is not None, where
    for rs in files:
        p = rs[0]["p"]
        rs = [{**r, "p": p} for r in rs]  # one partition value per file, as Delta lays them out
        add, t = _file(rs)
        if _matches(t, where) > 0:
            assert file_may_match(pred, add, SCHEMA, PARTITION), (where, rs)


def test_pruning_does_prune():
    add, _ = _file([{"i": 1, "s": "a", "d": dt.date(2024, 1, 1), "p": "x"},
                    {"i": 5, "s": "b", "d": dt.date(2024, 1, 3), "p": "x"}])
    for where, may in [("i = 3", True), ("i = 6", False), ("i > 5", False), ("i >= 5", True),
                       ("p = 'y'", False), ("s IN ('c', 'd')", False), ("i BETWEEN 6 AND 9", False),
                       ("i IS NULL", False), ("i = 6 OR p = 'x'", True), ("d < DATE '2024-01-01'", False),
                       ("unknown_fn(i) = 1", True)]:
        assert file_may_match(parse_predicate(where), add, SCHEMA, PARTITION) is may, where
