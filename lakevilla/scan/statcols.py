"""Per-file statistics as typed columns, parsed once per table of files and kept.

Pruning (``lakevilla.scan.pruning``) needs, for each column a predicate names, four values
per file: ``lo`` and ``hi`` (bounds every value of the file lies within; null when
unknown), ``nullable`` (the file may hold a null) and ``valued`` (it may hold a
non-null). A snapshot's files are an Arrow table (``delta.files``), so these are
computed for all files at once and cached on the table, which every snapshot built
on the same checkpoint shares: a table of a million files parses its statistics
once, not per query.

Data columns: DuckDB parses each file's ``stats`` JSON once for every column asked
for (``json_extract`` with a list of paths) and applies Delta's rules
(``delta.values.bounds``) as SQL over the JSON values: numbers only where numbers
belong, floor/ceil of fractional integer bounds, non-finite floats unknown, zero
floating bounds signed as Parquet writes them, strings of ``STRING_PREFIX_LIMIT``
characters or more without an upper bound, timestamp maxima +1 ms. Decimals are
read exactly (``json_transform`` keeps the digits) and bounded row by row in
Python, and so is the rare file whose statistics name the column in another case.
Partition columns: each distinct partition string is parsed once in Python
(``partition_value``) and spread over the files holding it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..delta import files as delta_files
from ..delta.files import ActionTable
from ..delta.values import STRING_PREFIX_LIMIT, bounds, partition_value, stat_value, typed_array
from . import duck
from . import expressions as E

MAX_SLICES = 8
MIN_SLICE = 50_000  # rows: below this, one query beats the threads' overhead
_NUM = "('BIGINT', 'UBIGINT', 'DOUBLE')"
_INT = "('BIGINT', 'UBIGINT')"
# a timestamp's UTC offset, after its time of day (what a timestamp_ntz bound ignores)
_OFFSET = r"(\d:\d\d(?::\d\d(?:\.\d*)?)?)\s*(?:Z|[+-]\d\d(?::?\d\d)?)$"


@dataclass(frozen=True)
class StatColumn:
    name: str  # the key in ``stats`` and ``partitionValues``: physical in a column-mapped table
    type: pa.DataType
    partition: bool


Bounds = tuple[pa.Array, pa.Array, pa.Array, pa.Array]  # lo, hi, nullable, valued


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _path(section: str, name: str) -> str:
    return f'$.{section}."' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _count(v: str) -> str:
    return f"CASE WHEN json_type({v}) IN {_INT} THEN TRY_CAST({v} AS BIGINT) END"


def _bound(c: StatColumn, v: str, upper: bool, k: int) -> str:
    """SQL for one bound of column ``c`` from the JSON value ``v`` (NULL: unknown)."""
    t = c.type
    dt = E.duckdb_type(t)
    text = f"({v} ->> '$')"
    if pa.types.is_integer(t):
        rnd = "ceil" if upper else "floor"
        return (f"CASE WHEN json_type({v}) IN {_INT} THEN TRY_CAST({v} AS {dt}) "
                f"WHEN json_type({v}) = 'DOUBLE' THEN TRY_CAST({rnd}(CAST({v} AS "
                f"DOUBLE)) AS {dt}) END")
    if pa.types.is_floating(t):
        f = f"CAST({v} AS DOUBLE)"
        zero = "CAST('0.0' AS DOUBLE)" if upper else "CAST('-0.0' AS DOUBLE)"
        return (f"TRY_CAST(CASE WHEN json_type({v}) IN {_NUM} AND isfinite({f}) THEN "
                f"(CASE WHEN {f} = 0 THEN {zero} ELSE {f} END) END AS {dt})")
    if pa.types.is_decimal(t):
        return f"CASE WHEN json_type({v}) IN {_NUM} THEN dj{k}_{'hi' if upper else 'lo'} END"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        s = f"CASE WHEN json_type({v}) = 'VARCHAR' THEN {text} END"
        return (f"CASE WHEN length({s}) >= {STRING_PREFIX_LIMIT} THEN NULL ELSE {s} END" if upper
                else s)
    if pa.types.is_date(t):
        return (f"CASE WHEN json_type({v}) = 'VARCHAR' "
                f"THEN TRY_CAST(substr({text}, 1, 10) AS DATE) END")
    if pa.types.is_timestamp(t):
        if t.tz is not None:
            ts = f"TRY_CAST(trim({text}) AS TIMESTAMPTZ)"
        else:  # the wall-clock time, whatever offset the writer appended
            ts = f"TRY_CAST(regexp_replace(trim({text}), {_lit(_OFFSET)}, '\\1') AS TIMESTAMP)"
        ts = f"CASE WHEN json_type({v}) = 'VARCHAR' THEN {ts} END"
        # maxima may be truncated to ms
        return f"TRY({ts} + INTERVAL 1 MILLISECOND)" if upper else ts
    return f"CAST(NULL AS {dt})"  # booleans and the rest: no bounds


def _decimal_scale(t: pa.Decimal128Type) -> int:
    return max(t.scale, min(37 - (t.precision - t.scale), t.scale + 18))


def _parse_sql(cols: list[tuple[int, StatColumn]], passthrough: list[str],
               keep_sql: str | None = None) -> str:
    """SQL over ``__lv_files`` (``stats`` and ``passthrough`` columns): ``rows`` and, for each
    (index k, data column), ``c{k}_lo``, ``c{k}_hi``, ``c{k}_nc``, ``c{k}_nullable``,
    ``c{k}_valued`` and ``c{k}_ci`` (the statistics may name the column in another case);
    with ``keep_sql``, also ``keep``, evaluated over those columns and the passthrough ones."""
    paths = ["$.numRecords"]
    for _, c in cols:
        paths += [_path("minValues", c.name), _path("maxValues", c.name),
                  _path("nullCount", c.name)]
    sel = [f"{_count('j[1]')} AS rows"]
    decs = []
    for i, (k, c) in enumerate(cols):
        lo, hi, nc = f"j[{2 + 3 * i}]", f"j[{3 + 3 * i}]", f"j[{4 + 3 * i}]"
        sel += [f"{_bound(c, lo, False, k)} AS c{k}_lo", f"{_bound(c, hi, True, k)} AS c{k}_hi",
                f"{_count(nc)} AS c{k}_nc",
                # CASE, not AND: only a file without the name's statistics lower-cases its JSON
                # (AND evaluated it for every file, a fifth of a cold prune's time)
                f"CASE WHEN {lo} IS NULL AND {hi} IS NULL AND {nc} IS NULL THEN "
                f"contains(lower(stats), {_lit(json.dumps(c.name.lower(), ensure_ascii=False))}) "
                f"ELSE FALSE END AS c{k}_ci"]
        if pa.types.is_decimal(c.type):
            decs.append((k, c))
    inner = [f"TRY(json_extract(stats, [{', '.join(_lit(p) for p in paths)}])) AS j"]
    for k, c in decs:
        struct = json.dumps({s: {c.name: f"DECIMAL(38,{_decimal_scale(c.type)})"}
                             for s in ("minValues", "maxValues")})
        inner.append(f"TRY(json_transform(stats, {_lit(struct)})) AS dj{k}")
    outer_dec = []
    for k, c in decs:
        name = _lit(c.name)
        outer_dec += [f"dj{k}['minValues'][{name}] AS dj{k}_lo",
                      f"dj{k}['maxValues'][{name}] AS dj{k}_hi"]
    keep = "".join(f", {q}" for q in passthrough)
    mid = f"SELECT stats{keep}, j{''.join(f', dj{k}' for k, _ in decs)}" \
          f"{''.join(', ' + x for x in outer_dec)} " \
          f"FROM (SELECT stats{keep}, {', '.join(inner)} FROM __lv_files)"
    parsed = f"SELECT {', '.join(sel)}{keep} FROM ({mid})"
    derived = "".join(f", c{k}_lo, c{k}_hi, c{k}_nc, c{k}_ci, (c{k}_nc > 0) AS c{k}_nullable, "
                      f"(c{k}_nc < rows) AS c{k}_valued" for k, _ in cols)
    sql = f"SELECT rows{derived}{keep} FROM ({parsed})"
    return sql if keep_sql is None else f"SELECT *, ({keep_sql}) AS keep FROM ({sql})"


def _bounds_of(table: ActionTable, res: pa.Table,
               cols: list[tuple[int, StatColumn]]) -> dict[StatColumn, Bounds]:
    """The parsed columns of a ``_parse_sql`` result, with decimals and other-case names fixed."""
    rows = res.column("rows").combine_chunks()
    out: dict[StatColumn, Bounds] = {}
    for k, c in cols:
        lo = res.column(f"c{k}_lo").combine_chunks()
        hi = res.column(f"c{k}_hi").combine_chunks()
        nc = res.column(f"c{k}_nc").combine_chunks()
        if pa.types.is_decimal(c.type):
            lo, hi = _decimal_bounds(lo, hi, c.type)
        lo, hi = lo.cast(c.type), hi.cast(c.type)
        ci = np.asarray(pc.fill_null(res.column(f"c{k}_ci"), False).to_numpy(zero_copy_only=False),
                        dtype=bool)
        if ci.any():
            lo, hi, nc = _other_case(table, c, np.nonzero(ci)[0], lo, hi, nc)
            out[c] = (lo, hi, pc.greater(nc, 0), pc.less(nc, rows))
        else:
            out[c] = (lo, hi, res.column(f"c{k}_nullable").combine_chunks(),
                      res.column(f"c{k}_valued").combine_chunks())
    return out


def _data_columns(table: ActionTable,
                  cols: list[StatColumn]) -> tuple[pa.Array, dict[StatColumn, Bounds]]:
    indexed = list(enumerate(cols))
    res = _query_stats(_parse_sql(indexed, []), table, {})
    return res.column("rows").combine_chunks(), _bounds_of(table, res, indexed)


def _query_stats(sql: str, table: ActionTable, inputs: dict[str, pa.Array]) -> pa.Table:
    """``sql`` over ``__lv_files``: the ``stats`` of ``table`` beside ``inputs`` (columns of as
    many rows). Parsing a million JSON documents is the cost of a cold prune: the statistics
    go through in batches, a core each in parallel (DuckDB connections are per thread and run
    one thread each), and a big checkpoint's strings are decoded batch by batch and dropped
    once parsed."""
    n = table.num_rows
    k = max(1, min(os.cpu_count() or 1, MAX_SLICES, n // MIN_SLICE))
    step = min(-(-n // k), delta_files.BATCH_ROWS) if n else 1

    def one(start: int, stats: pa.Array | pa.ChunkedArray) -> pa.Table:
        cols = {"stats": stats, **{q: a.slice(start, len(stats)) for q, a in inputs.items()}}
        return duck.query(sql, {"__lv_files": pa.table(cols)})

    if not n:
        return one(0, table.column("stats"))
    if k == 1:
        out = pa.concat_tables([one(start, b) for start, b in _offsets(table, step)])
    else:
        parts: list[Future[pa.Table]] = []
        with ThreadPoolExecutor(max_workers=k, thread_name_prefix="lakevilla-stats") as pool:
            for start, b in _offsets(table, step):
                if len(parts) >= k:  # at most k batches in flight beside the one being decoded
                    parts[-k].result()
                parts.append(pool.submit(one, start, b))
            out = pa.concat_tables([f.result() for f in parts])
    if n > delta_files.BATCH_ROWS:
        delta_files.release_memory()  # the bounds kept are a tenth of the strings parsed
    return out


def _offsets(table: ActionTable, rows: int) -> Iterator[tuple[int, pa.Array | pa.ChunkedArray]]:
    """The ``stats`` column in batches of at most ``rows``, with the row each starts at."""
    start = 0
    for b in table.batches("stats", rows):
        yield start, b
        start += len(b)


def _decimal_bounds(lo: pa.Array, hi: pa.Array, t: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """Exact decimals (read with every digit) bounded by ``delta.values.bounds``, row by row."""
    los, his = [], []
    for a, b in zip(lo.to_pylist(), hi.to_pylist(), strict=True):
        x, y = bounds(a, b, t)
        los.append(x)
        his.append(y)
    return typed_array(los, t), typed_array(his, t)


def _other_case(table: ActionTable, c: StatColumn, idx: np.ndarray, lo: pa.Array, hi: pa.Array,
                nc: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Statistics that name the column in another case: read in Python (rare)."""
    import decimal

    los, his, ncs = lo.to_pylist(), hi.to_pylist(), nc.to_pylist()
    texts = table.take(idx, ["stats"]).column("stats").to_pylist()
    for i, text in zip(idx.tolist(), texts, strict=True):
        try:
            st = (json.loads(text, parse_float=decimal.Decimal) if pa.types.is_decimal(c.type)
                  else json.loads(text))
        except (TypeError, ValueError):
            continue
        if not isinstance(st, dict):
            continue
        x, y = bounds(stat_value(st, "minValues", c.name), stat_value(st, "maxValues", c.name),
                      c.type)
        n = stat_value(st, "nullCount", c.name)
        los[i], his[i] = x, y
        ncs[i] = (n if isinstance(n, int) and not isinstance(n, bool) and -2**63 <= n < 2**63
                  else None)
    return typed_array(los, c.type), typed_array(his, c.type), pa.array(ncs, pa.int64())


def _partition_column(table: ActionTable, c: StatColumn, rows: pa.Array) -> Bounds:
    """Bounds from the partition values: each distinct string parsed once."""
    raw = pc.map_lookup(table.column("partitionValues"), pa.scalar(c.name), "first")
    enc = pc.dictionary_encode(raw).combine_chunks()
    values, bad, none = [], [], []
    for text in enc.dictionary.to_pylist():
        try:
            v = partition_value(text, c.type)
            values.append(v)
            bad.append(False)
            none.append(v is None)
        except (TypeError, ValueError, ArithmeticError):
            values.append(None)
            bad.append(True)
            none.append(False)
    idx = enc.indices

    def spread(xs: list, t: pa.DataType, missing: Any) -> pa.Array:
        """Per-row values of the per-distinct ``xs``; ``missing`` where the key is absent (null)."""
        arr = typed_array(xs, t) if t != pa.bool_() else pa.array(xs, pa.bool_())
        out = arr.take(idx) if len(arr) else pa.nulls(len(idx), t)
        return pc.fill_null(out, missing) if missing is not None else out

    value = spread(values, c.type, None)  # a value that does not fit the type: unknown bounds
    err = spread(bad, pa.bool_(), False)
    # a missing key is a null value, as partition_value(None)
    is_null = spread(none, pa.bool_(), True)
    has_rows = pc.fill_null(pc.not_equal(rows, 0), True)
    nullable = pc.and_(is_null, has_rows)
    valued = pc.and_(pc.invert(is_null), has_rows)
    none_b = pa.nulls(len(idx), pa.bool_())
    return (value, value, pc.if_else(err, none_b, nullable), pc.if_else(err, none_b, valued))


def _from_pieces(table: ActionTable, cols: list[StatColumn]) -> None:
    """A folded table's row counts and the bounds of ``cols``, gathered from the tables it was
    folded from (``delta.files.Pieces``), each of which parses its own rows once: folded anew
    every few dozen changes, a table would otherwise parse every file's statistics again."""
    pieces = table.pieces
    if pieces is None:
        return
    with table.lock:
        missing = [c for c in dict.fromkeys(cols) if _key(c) not in table.cache]
        rows = table.cache.get(("rows",))
    if not missing and rows is not None:
        return
    found: dict[Any, Any] = {}
    per = [_part_bounds(p, missing) for p in pieces.parts]  # first: a parse keeps the counts
    if rows is None:
        found[("rows",)] = pieces.gather([row_counts(p) for p in pieces.parts])
    for k, c in enumerate(missing):
        found[_key(c)] = pieces.gather([b[k] for b in per])
    with table.lock:
        for key, v in found.items():
            table.cache.setdefault(key, v)


def _part_bounds(part: ActionTable, cols: list[StatColumn]) -> list[Bounds]:
    """The bounds of ``cols`` over a part: in Python where it can, the rest by DuckDB."""
    py = [c for c in cols if py_parsable(c)]
    got = dict(zip(py, py_columns(part, py) or [], strict=False))
    rest = [c for c in cols if c not in got]
    got.update(zip(rest, columns(part, rest) if rest else [], strict=True))
    return [got[c] for c in cols]


def row_counts(table: ActionTable) -> pa.Array:
    """``numRecords`` of every row (null where unknown)."""
    _from_pieces(table, [])
    small = py_row_counts(table)
    if small is not None:
        return small
    with table.lock:
        got = table.cache.get(("rows",))
    if got is None:
        got = _data_columns(table, [])[0]
        with table.lock:
            table.cache[("rows",)] = got
    return got


def columns(table: ActionTable, cols: list[StatColumn]) -> list[Bounds]:
    """The bounds of ``cols`` over every row of ``table`` (computed once, then cached)."""
    _from_pieces(table, cols)
    key = _key
    with table.lock:
        missing = [c for c in cols if key(c) not in table.cache]
        rows = table.cache.get(("rows",))
    data = [c for c in dict.fromkeys(missing) if not c.partition]
    found: dict[Any, Bounds] = {}
    if data or rows is None:
        rows, got = _data_columns(table, data)
        for c, b in got.items():
            found[key(c)] = b
    for c in dict.fromkeys(missing):
        if c.partition:
            found[key(c)] = _partition_column(table, c, rows)
    with table.lock:
        table.cache[("rows",)] = table.cache.get(("rows",), rows)
        table.cache.update(found)
        return [table.cache[key(c)] for c in cols]


def _key(c: StatColumn) -> tuple:
    return (c.name, str(c.type), c.partition)


def evaluate(table: ActionTable, cols: list[StatColumn], keep_sql: str) -> np.ndarray:
    """``keep_sql`` (over ``c{k}_lo/_hi/_nullable/_valued`` for ``cols[k]``) for every row of
    ``table``, as a boolean array (NULL: keep). Statistics not parsed yet are parsed by the same
    query that evaluates the predicate, and cached."""
    _from_pieces(table, cols)
    n = table.num_rows
    with table.lock:
        missing = [(k, c) for k, c in enumerate(cols) if _key(c) not in table.cache]
        rows = table.cache.get(("rows",))
    data = [(k, c) for k, c in missing if not c.partition]
    one_query = bool(data) and not any(pa.types.is_decimal(c.type) for _, c in data)
    if not one_query:
        got = columns(table, cols)
        arrays: dict[str, Any] = {"file": pa.array(np.arange(n, dtype=np.int64))}
        for k, (lo, hi, nullable, valued) in enumerate(got):
            arrays[f"c{k}_lo"], arrays[f"c{k}_hi"] = lo, hi
            arrays[f"c{k}_nullable"], arrays[f"c{k}_valued"] = nullable, valued
        res = duck.query(f"SELECT file, ({keep_sql}) AS keep FROM __lv_stats",
                         {"__lv_stats": pa.table(arrays)})
        return _keep(n, res)
    inputs: dict[str, Any] = {"file": pa.array(np.arange(n, dtype=np.int64))}
    parts = [(k, c) for k, c in missing if c.partition]
    done = {k for k, _ in data}
    if parts:
        if rows is None:
            rows = row_counts(table)
        found = {_key(c): _partition_column(table, c, rows) for _, c in parts}
        with table.lock:
            table.cache.update(found)
    with table.lock:
        cached = {k: table.cache[_key(c)] for k, c in enumerate(cols) if k not in done}
    for k, (lo, hi, nullable, valued) in cached.items():
        inputs[f"c{k}_lo"], inputs[f"c{k}_hi"] = lo, hi
        inputs[f"c{k}_nullable"], inputs[f"c{k}_valued"] = nullable, valued
    res = _query_stats(_parse_sql(data, list(inputs), keep_sql), table, inputs)
    parsed = _bounds_of(table, res, data)
    with table.lock:
        table.cache.setdefault(("rows",), res.column("rows").combine_chunks())
        table.cache.update({_key(c): b for c, b in parsed.items()})
    if any(pc.any(pc.fill_null(res.column(f"c{k}_ci"), False)).as_py() for k, _ in data):
        # other-case names were read in Python: evaluate again
        return evaluate(table, cols, keep_sql)
    return _keep(n, res)


def _keep(n: int, res: pa.Table) -> np.ndarray:
    keep = np.ones(n, dtype=bool)
    keep[res.column("file").to_numpy()] = (
        pc.fill_null(res.column("keep"), True).to_numpy(zero_copy_only=False))
    return keep


# -- small tables: statistics read in Python -------------------------------------------------
#
# A DuckDB pass costs a few milliseconds however few its rows (planning, and a connection per
# thread that first asks), more than Python's json takes for a few thousand files. Below
# PY_ROWS rows the statistics of the columns the fast predicate path handles (signed integers,
# strings, booleans: ``expr._Fast``) are read here by the same rules (``delta.values.bounds``,
# exact integer counts) and cached exactly as the DuckDB pass caches them.

PY_ROWS = 4096
_I64 = (-(2 ** 63), 2 ** 63)


def _py_count(v: Any) -> int | None:
    """What ``_count`` reads: a JSON integer that fits a BIGINT, else unknown."""
    return v if isinstance(v, int) and not isinstance(v, bool) and _I64[0] <= v < _I64[1] else None


def py_parsable(c: StatColumn) -> bool:
    """Columns whose bounds ``py_columns`` reads (partition columns of any type: their strings
    are parsed in Python by every path)."""
    t = c.type
    return c.partition or pa.types.is_signed_integer(t) or pa.types.is_string(t) \
        or pa.types.is_large_string(t) or pa.types.is_boolean(t)


@lru_cache(maxsize=PY_ROWS)
def _parsed(text: str) -> Any:
    """One file's statistics, parsed once however many tables hold it (read, never changed): a
    snapshot's files added since its checkpoint are a new small table each time the log moves,
    and a landed commit's new files are pruned by every waiting statement. As many as one table
    parsed here holds: a wide table's parsed statistics run to kilobytes a file."""
    return json.loads(text)


def _py_parse(table: ActionTable,
              data: list[StatColumn]) -> tuple[pa.Array, dict[StatColumn, Bounds]]:
    texts = table.values("stats")
    n = len(texts)
    rows: list[int | None] = [None] * n
    cols: dict[StatColumn, tuple[list[Any], list[Any], list[Any]]] = {
        c: ([None] * n, [None] * n, [None] * n) for c in data}
    # the common case, taken as is: integer bounds of integer columns, short strings of strings
    fast: dict[StatColumn, Any] = {
        c: int if pa.types.is_integer(c.type)
        else str if pa.types.is_string(c.type) or pa.types.is_large_string(c.type) else None
        for c in data}
    for i, text in enumerate(texts):
        if text is None:
            continue
        try:
            st = _parsed(text)
        except (TypeError, ValueError):
            continue
        if not isinstance(st, dict):
            continue
        rows[i] = _py_count(st.get("numRecords"))
        mins, maxs, nulls = st.get("minValues"), st.get("maxValues"), st.get("nullCount")
        for c, (los, his, ncs) in cols.items():
            name = c.name
            lo: Any = (mins.get(name) if type(mins) is dict and name in mins
                       else stat_value(st, "minValues", name))
            hi: Any = (maxs.get(name) if type(maxs) is dict and name in maxs
                       else stat_value(st, "maxValues", name))
            ok = fast[c]
            if type(lo) is ok and type(hi) is ok \
                    and (ok is str or (_I64[0] <= lo < _I64[1] and _I64[0] <= hi < _I64[1])) \
                    and (ok is not str or len(hi) < STRING_PREFIX_LIMIT):
                # what ``bounds`` returns for them (typed_array checks the width)
                los[i], his[i] = lo, hi
            else:
                los[i], his[i] = bounds(lo, hi, c.type)
            nc = (nulls.get(name) if type(nulls) is dict and name in nulls
                  else stat_value(st, "nullCount", name))
            ncs[i] = _py_count(nc)
    rows_a = pa.array(rows, pa.int64())
    out: dict[StatColumn, Bounds] = {}
    for c, (los, his, ncs) in cols.items():
        nc = pa.array(ncs, pa.int64())
        out[c] = (typed_array(los, c.type), typed_array(his, c.type), pc.greater(nc, 0),
                  pc.less(nc, rows_a))
    return rows_a, out


def py_columns(table: ActionTable, cols: list[StatColumn]) -> list[Bounds] | None:
    """``columns`` for a table of at most ``PY_ROWS`` rows without DuckDB; None when a column
    needs the DuckDB pass (decimals, floats, dates, timestamps) or the table is larger."""
    if table.num_rows > PY_ROWS:
        return None
    if all(py_parsable(c) for c in cols):
        _from_pieces(table, cols)
    with table.lock:
        missing = [c for c in dict.fromkeys(cols) if _key(c) not in table.cache]
        rows = table.cache.get(("rows",))
    if any(not py_parsable(c) for c in missing):
        return None
    data = [c for c in missing if not c.partition]
    found: dict[Any, Bounds] = {}
    if data or (rows is None and missing):
        rows, got = _py_parse(table, data)
        found.update({_key(c): b for c, b in got.items()})
    for c in missing:
        if c.partition:
            found[_key(c)] = _partition_column(table, c, rows)
    with table.lock:
        if rows is not None:
            table.cache.setdefault(("rows",), rows)
        table.cache.update(found)
        return [table.cache[_key(c)] for c in cols]


def py_row_counts(table: ActionTable) -> pa.Array | None:
    """``row_counts`` of a small table without DuckDB (None: too large)."""
    if table.num_rows > PY_ROWS:
        return None
    with table.lock:
        got = table.cache.get(("rows",))
    if got is None:
        got = _py_parse(table, [])[0]
        with table.lock:
            got = table.cache.setdefault(("rows",), got)
    return got
