"""Expressions are data (issue 17): one grammar for both engines, checked before anything runs,
on every path that runs an expression; DuckDB locked down behind it. The Spark half of the
attacks and of the ordinary expressions is in interop/test_spark.py."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lakevilla as lv
from lakevilla.names import sublog_key
from lakevilla.recovery import sublog as sublogs
from lakevilla.scan import duck
from lakevilla.scan import expressions as E
from tests.conftest import rows
from tests.expression_cases import ATTACKS_SET, ATTACKS_WHERE, SCHEMA, VALUES, WHERE, same, table
from tests.helpers import entries_landed

ACC = pa.schema([("id", pa.int64()), ("s", pa.string()), ("value", pa.int64())])
SECRET = "secret-7f3a9c"


@pytest.fixture
def secret(tmp_path) -> Path:
    p = tmp_path / "outside" / "secret.txt"
    p.parent.mkdir()
    p.write_text(SECRET + "\n")
    return p


def _stored_bytes(lake_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(lake_dir.rglob("*")) if p.is_file())


# -- the grammar -------------------------------------------------------------------------

REFUSED = [  # (expression, what the message must name)
    ("id IN (SELECT 1 FROM read_text('/etc/passwd'))", "subqueries"),
    ("EXISTS (SELECT 1)", "subqueries"),
    ("read_text('/etc/passwd') IS NULL", "read_text"),
    ("s = read_csv('https://example.com/x.csv')", "read_csv"),
    ("reflect('java.lang.System', 'getProperty', 'user.home') = ''", "reflect"),
    ("java_method('java.lang.Runtime', 'getRuntime') IS NULL", "java_method"),
    ("s = getenv('HOME')", "getenv"),
    ("s = current_setting('TimeZone')", "current_setting"),
    ("my_udf(id) = 1", "my_udf"),
    ("main.upper(s) = 'A'", "schema"),
    ("true; DROP TABLE x", "';'"),
    ("id = 1) UNION SELECT 1 --", "outside"),
    ("sum(id) > 1", "sum"),
    ("count(*) > 0", "count_star"),
    ("sum(id) OVER () > 1", "window"),
    ("id = ?", "outside"),
    ("id = $1", "outside"),
    ("COLUMNS('i.*') = 1", "COLUMNS"),
    ("list_filter([1], x -> x > 0) IS NULL", "list_filter"),
    ("s = 'a' COLLATE nocase", "collate"),
    ("TRY_CAST(s AS INT) = 1", "TRY_CAST"),
    ("CAST(s AS BLOB) IS NULL", "BLOB"),
    ("upper(s := 'x') = 'X'", "named"),
    ("s = 1", "column s (VARCHAR) is compared with the literal 1 (INTEGER)"),
    ("s || id = 'x'", "||"),
    ("CAST(value AS DOUBLE)::VARCHAR = '1.0'", "DOUBLE to VARCHAR"),
    ("__lv_rel0.id = 1", "reserved"),
    ("nope = 1", "nope"),
    ("id + 1", "not a boolean"),
]


@pytest.mark.parametrize("text,names", REFUSED, ids=[r[0] for r in REFUSED])
def test_the_grammar_refuses_what_is_not_a_scalar_expression_and_names_it(text, names):
    with pytest.raises(lv.InvalidExpressionError) as info:
        E.check_where(text, ACC, f"where={text!r} on 'acc'")
    assert names.lower() in str(info.value).lower(), info.value


MIXED = [  # a new user's type mistakes: (expression, the message after the prefix)
    ("s = 5", "column s (VARCHAR) is compared with the literal 5 (INTEGER): numbers go with "
     "numbers, text with text, dates and timestamps with each other; cast one side (CAST(x AS "
     "type)), or write the literal as text ('5')"),
    ("5 <> s", "the literal 5 (INTEGER) is compared with column s (VARCHAR)"),
    ("s IN ('a', 2)", "column s (VARCHAR) is compared with the literal 2 (INTEGER)"),
    ("s BETWEEN 1 AND 5", "column s (VARCHAR) is compared with the literal 1 (INTEGER)"),
    ("s = id", "column s (VARCHAR) is compared with column id (BIGINT)"),
    ("coalesce(s, 0) = 'x'", "coalesce(s, 0) mixes column s (VARCHAR) and the literal 0 (INTEGER)"),
    ("CASE WHEN id > 0 THEN s ELSE 0 END = 'x'",
     "CASE WHEN id > 0 THEN s ELSE 0 END mixes column s (VARCHAR) and the literal 0 (INTEGER)"),
    ("s + 1 > 2", "+ does not take column s (VARCHAR) and the literal 1 (INTEGER); cast the "
     "operand (CAST(x AS type))"),
    ("s LIKE 5", "LIKE does not take column s (VARCHAR) and the literal 5 (INTEGER)"),
    ("upper(id) = 'A'", "upper does not take column id (BIGINT)"),
]


@pytest.mark.parametrize("text,message", MIXED, ids=[m[0] for m in MIXED])
def test_a_type_mistake_names_the_columns_and_literals_and_their_types(text, message):
    """DuckDB's binder speaks of what we bind a comparison through (a CASE the user never
    wrote, "INTEGER_LITERAL", "~~"): the message names the user's column, literal and types."""
    what = f"where={text!r} on 'acc'"
    with pytest.raises(lv.InvalidExpressionError) as info:
        E.check_where(text, ACC, what)
    got = str(info.value)
    assert got.startswith(f"{what}: {message}"), got
    assert not any(w in got for w in ("Binder", "CASE expression", "_LITERAL", "~~")), got


def _shape(node):
    """A parse tree without source positions (they change when the text is rendered anew) and
    with type names spelled one way (TIMESTAMPTZ = TIMESTAMP WITH TIME ZONE)."""
    if isinstance(node, dict):
        out = {k: _shape(v) for k, v in node.items()
               if k not in ("query_location", "query_location_length", "type_expr")}
        if node.get("class") == "CAST":
            out["type_expr"] = E.cast_type(node)
        if node.get("class") == "CONSTANT" and node["literal"]["kind"] in ("INTEGER", "NUMERIC"):
            text = node["literal"]["text"].replace("_", "")
            out["literal"] = {"kind": node["literal"]["kind"],
                              "text": (str(int(text)) if node["literal"]["kind"] == "INTEGER"
                                       else text)}
        return out
    if isinstance(node, list):
        return [_shape(v) for v in node]
    return node


def test_what_runs_is_the_tree_that_was_checked():
    """The embedded engine runs our rendering of the checked tree, never the user's text:
    the rendering parses back to the same tree, so nothing outside the check can run."""
    for text in WHERE + VALUES:
        node = E.parse(text)
        again = E.parse(E.render(node))
        assert _shape(again) == _shape(node), text


def test_an_expression_is_bound_once_whoever_checks_it_and_errors_keep_the_callers_name(
        monkeypatch):
    """A statement's where is checked when it is validated, planned and pruned, each caller
    naming it its own way: DuckDB binds it once (it was most of a contended update's CPU), and
    a bad expression still fails under the name of the caller that checked it."""
    described: list[list[str]] = []
    real = E._Binder.describe
    monkeypatch.setattr(E._Binder, "describe",
                        lambda self, items: described.append(items) or real(self, items))
    text = f"id = {time.time_ns()}"  # never checked before in this process
    first = E.check_where(text, ACC)
    bound = len(described)
    assert bound >= 1
    assert E.check_where(text, ACC, "update of 't'") is first
    assert E.check_where(text, pa.schema(list(ACC))) is first  # an equal schema, another object
    assert len(described) == bound
    for what in ("where of read", "update of 't'"):
        with pytest.raises(lv.InvalidExpressionError, match=f"^{re.escape(what)}: .*nope"):
            E.check_where("nope = 1", ACC, what)


NUMBERS = pa.schema([("t8", pa.int8()), ("u16", pa.int16()), ("n", pa.int32()), ("i", pa.int64()),
                     ("dec", pa.decimal128(10, 2)), ("f", pa.float64()), ("s", pa.string())])


def _typing(chk: E.Checked) -> tuple[list[str], list[str]]:
    nodes = list(E.walk(chk.node))
    return ([chk.types[id(n)] for n in nodes],
            [chk.common[id(n)] for n in nodes if id(n) in chk.common])


def _bound_afresh(text: str, scope: E.Scope) -> E.Checked:
    saved = dict(E._TYPINGS)
    E._TYPINGS.clear()
    try:
        return E._check_as(text, scope, "afresh")
    finally:
        E._TYPINGS.clear()
        E._TYPINGS.update(saved)


def _counting_binds(monkeypatch) -> list[list[str]]:
    """Every DuckDB binding from here on, the typings cache emptied first."""
    described: list[list[str]] = []
    real = E._Binder.describe
    monkeypatch.setattr(E._Binder, "describe",
                        lambda self, items: described.append(items) or real(self, items))
    E._TYPINGS.clear()
    return described


def _checked_counting(text: str, scope: E.Scope, binds: list) -> tuple[bool, E.Checked]:
    """``text`` checked, and whether DuckDB bound anything for it."""
    before = len(binds)
    chk = E.check_expression(text, scope)
    return len(binds) > before, chk


def _second_text_typed_as_duckdb_would(template: str, first: tuple, second: tuple) -> None:
    """Whatever text of ``template``'s shape bound it first (``first``), another (``second``)
    gets DuckDB's own types, or DuckDB's own refusal."""
    scope = E.Scope.table(NUMBERS)
    E._TYPINGS.clear()
    try:
        E.check_expression(template.format(*first), scope)
    except lv.InvalidExpressionError:
        return
    text = template.format(*second)
    try:
        cached = E._check_as(text, scope, "cached")
    except lv.InvalidExpressionError:
        with pytest.raises(lv.InvalidExpressionError):
            _bound_afresh(text, scope)
        return
    assert _typing(cached) == _typing(_bound_afresh(text, scope)), text


def test_texts_that_differ_only_in_their_numbers_are_bound_once_per_shape(monkeypatch):
    """Statements embed their values (``c_id = 4711``), so nearly every text is new; DuckDB
    types a number literal by the integer ranges it fits or its decimal layout, so it binds
    each shape once. A number that DuckDB types otherwise, or one under a function
    (``round(x, 2)``), is bound again and gets its own types."""
    binds = _counting_binds(monkeypatch)
    scope = E.Scope.table(NUMBERS)

    def bound(text: str) -> tuple[bool, tuple[list[str], list[str]]]:
        new, chk = _checked_counting(text, scope, binds)
        assert _typing(chk) == _typing(_bound_afresh(text, scope)), text
        return new, _typing(chk)

    shared = [("t8 + 5", "t8 + 100"),
              ("n = 7 AND i IN (1, -2, 3)", "n = 120 AND i IN (9, -128, 127)"),
              ("dec * 1.5", "dec * 7.0"), ("CASE WHEN n > 3 THEN dec + 0.25 ELSE 1 END",
                                           "CASE WHEN n > 90 THEN dec + 9.75 ELSE 2 END"),
              # compared with an INTEGER or BIGINT column, every value that fits INTEGER is one
              ("i IN (5, 500, -7)", "i IN (100000, 3, -70000)"),
              ("CASE n WHEN 5 THEN 1 ELSE 0 END", "CASE n WHEN 40000 THEN 1 ELSE 0 END"),
              ("2147483647 >= i", "12 >= i")]
    for first, second in shared:
        assert bound(first)[0], first
        assert not bound(second)[0], second  # same shape: no DuckDB call
    apart = [("t8 + 5", "t8 + 1000"),  # 1000 does not fit TINYINT
             ("u16 + 30000", "u16 + 40000"),  # 40000 fits only from USMALLINT up
             ("n + 2147483647", "n + 2147483648"),  # beyond INTEGER
             ("-5 + t8", "-129 + t8"),
             ("dec * 1.5", "dec * 10.255"), ("round(dec, 1)", "round(dec, 2)"),
             ("t8 IN (5, 6)", "t8 IN (5, 600)"),  # a narrow column: 600 does not fit its type
             ("n = 5", "n = 3000000000"), ("i + 5 = 1", "i + 5 = 3000000000")]
    for first, second in apart:
        new1, types1 = bound(first)
        new2, types2 = bound(second)
        assert new2, second
        assert types1 != types2, (first, second)


_INTS = st.one_of(st.integers(-2**70, 2**70),
                  st.sampled_from([b + d for e in (7, 8, 15, 16, 31, 32, 63, 64, 127, 128)
                                   for b in (2**e, -(2**e)) for d in (-1, 0, 1)]))
_DECIMALS = st.builds(lambda a, b, neg: ("-" if neg else "") + a + "." + b,
                      st.from_regex(r"[0-9]{1,20}", fullmatch=True),
                      st.from_regex(r"[0-9]{0,20}", fullmatch=True),
                      st.booleans())
_TEMPLATES = ["t8 + {0} > u16 - {1}", "CASE WHEN n > {0} THEN {1} ELSE i END", "dec * {0} + {1}",
              "coalesce(t8, {0}) BETWEEN {1} AND u16", "n IN ({0}, {1}, 3)", "f + {0} * {1}",
              "greatest(t8, {0}) = {1}", "round(dec, 2) * {0} < {1}",
              "CAST({0} AS DECIMAL(10, 2)) + {1} > dec", "CASE i WHEN {0} THEN {1} ELSE 0 END",
              "{0} <= n AND t8 <> {1}", "i NOT IN ({0}, {1}) OR u16 IN ({1}, {0})", "n + {0} = {1}"]


@settings(max_examples=60, deadline=None)
@given(template=st.sampled_from(_TEMPLATES), a=st.one_of(_INTS.map(str), _DECIMALS),
       b=st.one_of(_INTS.map(str), _DECIMALS), c=st.one_of(_INTS.map(str), _DECIMALS))
def test_a_shape_bound_before_types_each_text_as_duckdb_would(template, a, b, c):
    """Whatever text of the shape bound it first, another text gets DuckDB's own types for it."""
    _second_text_typed_as_duckdb_would(template, (a, b), (c, b))


def test_texts_that_differ_only_in_their_strings_are_bound_once_and_run_their_own(monkeypatch):
    """A statement's strings are values too (``c_last = 'BARBAR...'``, YCSB's ``field3 = '...'``):
    binding never reads them, so one binding serves every text of the shape, while what runs is
    each text's own string, also under the string functions (``substr``), whose types do not
    read their strings."""
    binds = _counting_binds(monkeypatch)
    scope = E.Scope.table(NUMBERS)
    pairs = [("s = 'abc'", "s = 'it''s a much longer one, 100 bytes or so'"),
             ("n = 7 AND s IN ('a', 'b')", "n = 8 AND s IN ('xyz', '')"),
             ("CASE WHEN s LIKE 'a%' THEN 'yes' ELSE s END",
              "CASE WHEN s LIKE '%q_' THEN 'no' ELSE s END"),
             ("coalesce(s, 'none') || '!'", "coalesce(s, '') || '?!'"),
             # a string function's type does not read its strings (Payment's c_data)
             ("substr('note 1' || s, 1, 500)", "substr('note 22 7' || s, 1, 500)"),
             ("replace(s, 'a', 'b') = nullif(s, 'c')", "replace(s, 'x', '') = nullif(s, 'yz')")]
    for first, second in pairs:
        assert _checked_counting(first, scope, binds)[0], first
        new, chk = _checked_counting(second, scope, binds)
        assert not new, second  # same shape: no DuckDB call
        assert _typing(chk) == _typing(_bound_afresh(second, scope)), second
        assert chk.sql == E._check_as(second, scope, "afresh").sql, second
    assert "'it''s a much longer one, 100 bytes or so'" in E.check_where(pairs[0][1], scope).sql


_STRINGS = st.text(max_size=12).map(E.quote_string)
_STRING_TEMPLATES = ["s = {0}", "CASE WHEN s > {0} THEN {1} ELSE s END", "n = {0} OR t8 <> {1}",
                     "coalesce(s, {0}) || {1}", "s NOT IN ({0}, {1})", "s LIKE {0}",
                     "CAST({0} AS VARCHAR) = s", "dec = {0}", "{0} BETWEEN s AND {1}",
                     "i + {0} > 1", "CASE s WHEN {0} THEN 1 ELSE {1} END",
                     "substr({0} || s, 1, 5) = {1}", "replace(s, {0}, {1}) < s",
                     "lpad(s, 3, {0}) = greatest(s, {1})",
                     "contains(s, {0}) = (nullif(s, {1}) > s)",
                     "length({0}) + strpos(s, {1}) > 2", "concat(s, {0}, left({1}, 2))"]


@settings(max_examples=60, deadline=None)
@given(template=st.sampled_from(_STRING_TEMPLATES), a=_STRINGS, b=_STRINGS, c=_STRINGS)
def test_a_shape_bound_before_types_each_strings_text_as_duckdb_would(template, a, b, c):
    """Whatever strings the text that bound a shape held, another text gets DuckDB's own types,
    or DuckDB's own refusal."""
    _second_text_typed_as_duckdb_would(template, (a, b), (c, b))


def _literal_texts() -> st.SearchStrategy[str]:
    """Expression texts with every kind of literal the shapes take out, and some they leave."""
    ws = st.sampled_from(["", " ", "  ", "\n\t"])
    ints = st.one_of(st.integers(0, 10**25).map(str), st.sampled_from(["0", "007", "00"]))
    decimals = st.builds(lambda a, b: a + "." + b, st.from_regex(r"[0-9]{1,12}", fullmatch=True),
                         st.from_regex(r"[0-9]{1,12}", fullmatch=True))
    strings = st.text(max_size=8).map(E.quote_string)
    odd = st.sampled_from(["DATE '2020-01-01'", "INTERVAL 5 DAY", "E'a\\n'", "1e5", ".5", "5.",
                           "1_000", "0x1f", "x'00'", "$1", "?", "n -- c", "/* c */ n", "'a' 'b'",
                           "TIMESTAMP '2020-01-01 00:00:00'", "-0", "- -0.0", "'caf\u00e9'"])
    leaf = st.one_of(ints, decimals, strings, odd,
                     st.sampled_from(["n", "s", "dec", '"Mixed ""q"" Col"', "t.n", "TRUE", "NULL"]))

    def grow(x: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        binary = st.sampled_from(["+", "-", "*", "/", "%", "||", "=", "<>", "!=", "<", "<=", ">",
                                  ">=", " AND ", " OR ", " LIKE "])
        return st.one_of(
            st.builds(lambda a, w: f"-{w}{a}", x, ws), st.builds(lambda a: f"-({a})", x),
            st.builds(lambda a: f"NOT {a}", x), st.builds(lambda a: f"({a})", x),
            st.builds(lambda a, o, b, w: f"{a}{w}{o}{w}{b}", x, binary, x, ws),
            st.builds(lambda a, b, c: f"{a} IN ({b}, {c})", x, x, x),
            st.builds(lambda a, b, c: f"{a} BETWEEN {b} AND {c}", x, x, x),
            st.builds(lambda a, b, c: f"CASE WHEN {a} THEN {b} ELSE {c} END", x, x, x),
            st.builds(lambda a, p, q: f"CAST({a} AS DECIMAL({p}, {q}))", x, ints, ints),
            st.builds(lambda a: f"{a}::VARCHAR", x),
            st.builds(lambda a, b: f"coalesce({a}, {b})", x, x),
            st.builds(lambda a, b: f"{a} LIKE {b} ESCAPE '\\'", x, x))
    return st.recursive(leaf, grow, max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(text=_literal_texts())
def test_a_text_parsed_through_its_shape_gets_the_tree_duckdb_gives_the_text(text):
    """Texts that differ only in their literals share one DuckDB parse of their shape, with each
    text's literals put back: the tree, query locations included (error messages quote the text
    by them), is the one DuckDB gives the text itself, or the same refusal."""
    got = E._parse_tree.__wrapped__(text)
    assert got == E._parse_text(text), text


def test_ordinary_statement_texts_are_parsed_through_their_shapes(monkeypatch):
    """A statement's values change from run to run, its shape does not: DuckDB parses each shape
    once and no text itself, and each text still gets its own literals back."""
    texts = ["c_w_id = 1 AND c_d_id = 7 AND c_id = 2231", "c_w_id = 1 AND c_d_id = 3 AND c_id = 9",
             "c_balance - 3021.55", "c_balance - 17.01", "c_last = 'BARBARABLE'",
             "c_last = 'it''s \u00e9'",
             "CASE WHEN s_i_id = 5 THEN s_quantity - 3 ELSE s_quantity END",
             "CASE WHEN s_i_id = 77 THEN s_quantity - 10 ELSE s_quantity END"]
    expected = {t: E._parse_text(t) for t in texts}
    parsed: list[str] = []
    real = E._parse_text
    monkeypatch.setattr(E, "_parse_text", lambda t: parsed.append(t) or real(t))
    E._parsed_shape.cache_clear()
    got = {t: E._parse_tree.__wrapped__(t) for t in texts}
    assert got == expected
    assert len(parsed) == 4 and not set(parsed) & set(texts), parsed


def test_the_embedded_engine_computes_what_duckdb_computes_from_the_text():
    """Rendering is faithful: each ordinary expression, evaluated from our rendering, gives what
    plain DuckDB gives for the user's text."""
    t = table()
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    con.register("t", t)
    for text in WHERE + VALUES:
        if "now()" in text or "current_date" in text:
            continue
        chk = E.check_expression(text, SCHEMA)
        ours = duck.query(f"SELECT ({chk.sql}) AS v FROM __lv_rel0 ORDER BY id",
                          {"__lv_rel0": t}).column("v")
        theirs = con.execute(f"SELECT ({text}) AS v FROM t ORDER BY id").fetchall()
        assert all(same(a, b[0]) for a, b in zip(ours.to_pylist(), theirs, strict=True)), text


def test_ordinary_expressions_work_through_the_api(local_backend):
    lake = local_backend.lake()
    lake.create_table("t", SCHEMA)
    with lake.transaction(features="") as txn:
        txn.insert("t", table())
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    con.register("t", table())
    for where in WHERE:
        want = sorted(r[0] for r in con.execute(f"SELECT id FROM t WHERE {where}").fetchall())
        assert sorted(lake.read("t", where=where).column("id").to_pylist()) == want, where


@pytest.mark.parametrize("thread", ["this", "another"])
def test_duckdb_runs_locked_down(thread):
    """Defence in depth: even SQL that got past the grammar could not reach a file, the
    network or an extension, nor switch that back on; in every thread (each has its own
    connection to the process's one database, and must inherit the settings and the lock)."""
    if thread == "another":
        got: list = []
        t = threading.Thread(target=lambda: got.append(duck.connection()))
        t.start()
        t.join()
        con = got[0]
        assert con is not duck.connection()
    else:
        con = duck.connection()
    for sql in ["SELECT * FROM read_text('/etc/hostname')",
                "SELECT * FROM read_csv('http://127.0.0.1:9/x.csv')",
                "COPY (SELECT 1) TO '/tmp/lakevilla-should-not-exist.csv'",
                "ATTACH '/tmp/lakevilla-x.db'",
                "INSTALL httpfs", "LOAD httpfs", "SET enable_external_access = true",
                "SET autoload_known_extensions = true", "SET TimeZone = 'America/New_York'",
                "RESET enable_external_access"]:
        with pytest.raises(duckdb.Error):
            con.execute(sql)
    assert con.execute("SELECT current_setting('TimeZone')").fetchall() == [("UTC",)]
    assert not Path("/tmp/lakevilla-should-not-exist.csv").exists()


def test_every_duckdb_connection_is_the_locked_one():
    """The embedded engine and the pruner open no DuckDB connection of their own."""
    root = Path(E.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if p.name != "duck.py"
                 and re.search(r"duckdb\.connect|import duckdb", p.read_text())]
    assert offenders == []


# -- attacks through the API (embedded engine) ----------------------------------------------------

@pytest.mark.parametrize("features", ["", "R", "R,CT,I"])
def test_attacks_are_refused_and_leave_storage_unchanged(local_backend, tmp_path, secret, features):
    lake = local_backend.lake()
    lake.create_table("acc", ACC)
    with lake.transaction(features="") as txn:
        txn.insert("acc", {"id": [1, 2], "s": ["a", "b"], "value": [10, 20]})
    before = local_backend.all_keys()
    lake_dir = tmp_path / "lake"
    tried = 0
    for attack in ATTACKS_WHERE:
        w = attack.format(secret=secret)
        for act in (lambda t, w=w: t.read("acc", where=w), lambda t, w=w: t.delete("acc", where=w),
                    lambda t, w=w: t.update("acc", set={"value": "0"}, where=w)):
            with pytest.raises(lv.InvalidExpressionError), \
                    lake.transaction(features=features) as txn:
                act(txn)
            tried += 1
        with pytest.raises(lv.InvalidExpressionError):
            lake.read("acc", where=w)
    for attack in ATTACKS_SET:
        v = attack.format(secret=secret)
        with pytest.raises(lv.InvalidExpressionError), lake.transaction(features=features) as txn:
            txn.update("acc", set={"s": v}, where="id = 1")
        tried += 1
    lake.flush()
    assert tried == 3 * len(ATTACKS_WHERE) + len(ATTACKS_SET)
    assert local_backend.all_keys() == before
    assert SECRET.encode() not in _stored_bytes(lake_dir)
    assert rows(lake.read("acc")) == [{"id": 1, "s": "a", "value": 10},
                                      {"id": 2, "s": "b", "value": 20}]


@pytest.mark.parametrize("field", ["set", "where"])
def test_a_tampered_sublog_cannot_run_code_when_it_is_redone(
        local_backend, tmp_path, secret, field):
    """A resuming client redoes a logical sublog entry; someone rewrote the entry's statement
    into an attack. The redo goes through the grammar like any new statement: refused."""
    lake = local_backend.lake(delete_sublogs=False)
    lake.create_table("acc", ACC)
    with lake.transaction(features="") as txn:
        txn.insert("acc", {"id": [1, 2, 3], "s": ["a", "b", "c"], "value": [10, 20, 30]})
    first = lake.begin("R")
    first.update("acc", set={"value": "value + 1"}, where="id = 1")
    victim = lake.begin("R")
    # logical: an update's entry at the tail
    victim.update("acc", set={"s": "upper(s)"}, where="id = 2")
    lake._client.heartbeats.forget(victim)  # the victim's client is gone
    entries_landed(victim)
    [entry] = [e for e in sublogs.read_all(lake.store, victim.id) if e.kind == "logical"]
    raw = json.loads(lake.store.get(sublog_key(victim.id, entry.seq)).data)
    if field == "set":
        raw["statement"]["set"] = {"s": f"(SELECT content FROM read_text('{secret}'))"}
    else:
        raw["statement"]["where"] = (f"id IN (SELECT 2 FROM read_text('{secret}') "
                                     "WHERE content LIKE 'secret%')")
    lake.store.put(sublog_key(victim.id, entry.seq), json.dumps(raw).encode())
    first.commit()  # the victim's read file is gone: resuming must redo its update
    later = local_backend.lake(clock=lambda: time.time() + 3600)  # the victim's marker has expired
    resumed = later.resume(victim.id)
    with pytest.raises(lv.InvalidExpressionError, match="read_text|subquer"):
        resumed.commit()
    lake.flush()
    assert SECRET.encode() not in _stored_bytes(tmp_path / "lake")
    assert rows(lake.read("acc")) == [{"id": 1, "s": "a", "value": 11},
                                      {"id": 2, "s": "b", "value": 20},
                                      {"id": 3, "s": "c", "value": 30}]


def test_merge_conditions_and_assignments_name_target_and_source():
    """The API a MERGE calls: one grammar over two relations."""
    target = pa.schema([("id", pa.int64()), ("value", pa.int64()), ("t_only", pa.string())])
    source = pa.schema([("id", pa.int64()), ("value", pa.decimal128(10, 2)),
                        ("s_only", pa.string())])
    scope = E.Scope.merge(target, source)
    on = E.check_where("target.id = source.id AND s_only IS NOT NULL AND t_only <> 'x'", scope)
    assert {(r.relation, r.column) for r in on.refs.values()} == {
        (0, "id"), (1, "id"), (1, "s_only"), (0, "t_only")}
    new = E.check_value("target.value + source.value", scope, pa.int64())
    assert new.type.startswith("DECIMAL") and new.columns() == {"value"}
    for text, why in [("id = 1", "ambiguous"), ("source.nope = 1", "nope"),
                      ("source.id IN (SELECT id FROM target)", "subqueries")]:
        with pytest.raises(lv.InvalidExpressionError, match=why):
            E.check_where(text, scope)
    with pytest.raises(lv.InvalidExpressionError, match="different aliases"):
        E.Scope.merge(target, source, "t", "T")


def test_a_function_node_of_a_form_never_checked_fails_closed():
    """DuckDB 2.0.1 added ``is_legacy_function_call`` to every function node: false is the form
    the grammar allows, anything else is refused rather than trusted."""
    import json

    import duckdb

    import lakevilla as lv
    from lakevilla.scan.expressions import _Structure

    tree = json.loads(duckdb.connect().execute(
        "SELECT json_serialize_sql('SELECT lower(''A'')')").fetchone()[0])
    node = tree["statements"][0]["node"]["select_list"][0]
    assert node["class"] == "FUNCTION"
    # allowed
    _Structure("lower('A')", "where").function({**node, "is_legacy_function_call": False})
    with pytest.raises(lv.InvalidExpressionError, match="legacy function call"):
        _Structure("lower('A')", "where").function({**node, "is_legacy_function_call": True})
