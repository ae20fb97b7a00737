"""The embedded engine: pyarrow for Parquet, DuckDB for ``where`` and ``set`` expressions.

Every byte goes through the lake's store (so requests are counted and faults
injected). DuckDB only evaluates expressions over arrow data we hand it: masks
for ``where`` and new column values for ``set``; arrow keeps the exact types.
"""

from __future__ import annotations

import io
import threading
from concurrent.futures import Executor
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..delta.actions import AddFile
from ..delta.stats import stats_from_table
from ..engine_api import (
    RewriteResult,
    TableContext,
    data_file_key,
    new_data_file_path,
    now_ms,
    partition_value_string,
)
from ..errors import CorruptLogError, InvalidExpressionError, SchemaMismatchError
from ..expr import coerce, parse_predicate
from ..store import NotFound

_local = threading.local()
MAX_ROWS_PER_FILE = 1_000_000


def _con():
    import duckdb

    con = getattr(_local, "con", None)
    if con is None:
        con = duckdb.connect()
        con.execute("SET TimeZone='UTC'")
        con.execute("SET threads=1")
        _local.con = con
    return con


def _to_arrow(rel_or_cur) -> pa.Table:
    for name in ("to_arrow_table", "fetch_arrow_table", "arrow"):
        fn = getattr(rel_or_cur, name, None)
        if fn is not None:
            out = fn()
            return out.read_all() if isinstance(out, pa.RecordBatchReader) else out
    raise RuntimeError("unsupported duckdb version")


def _query(table: pa.Table, select: str) -> pa.Table:
    con = _con()
    con.register("__t", table)
    try:
        return _to_arrow(con.sql(f"SELECT {select} FROM __t"))
    finally:
        con.unregister("__t")


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def to_arrow_table(data: Any) -> pa.Table:
    """Accept pyarrow tables/batches, pandas DataFrames, dicts of columns and lists of rows."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, dict):
        return pa.table(data)
    if isinstance(data, list):
        return pa.Table.from_pylist(data)
    if type(data).__name__ == "DataFrame" and hasattr(data, "to_dict") and hasattr(data, "columns"):
        return pa.Table.from_pandas(data, preserve_index=False)
    if callable(getattr(data, "toArrow", None)):  # a Spark DataFrame: its rows come to this process
        return data.toArrow()
    raise SchemaMismatchError(f"cannot insert a {type(data).__name__}: pass a pyarrow.Table, a pandas "
                              "DataFrame, a dict of columns or a list of row dicts")


def conform(table_name: str, data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` cast to the table schema, or a SchemaMismatchError saying what differs."""
    by_lower = {n.lower(): n for n in data.column_names}
    if len(by_lower) != len(data.column_names):
        raise SchemaMismatchError(f"insert into {table_name!r}: duplicate column names {data.column_names}")
    wanted = {f.name.lower() for f in schema}
    extra = [n for n in data.column_names if n.lower() not in wanted]
    if extra:
        raise SchemaMismatchError(
            f"insert into {table_name!r}: column(s) {extra} are not in the table schema "
            f"({', '.join(f.name for f in schema)})")
    cols = []
    for f in schema:
        src = by_lower.get(f.name.lower())
        if src is None:
            if not f.nullable:
                raise SchemaMismatchError(f"insert into {table_name!r}: missing non-nullable column {f.name!r}")
            cols.append(pa.nulls(data.num_rows, f.type))
            continue
        col = data.column(src)
        if not col.type.equals(f.type):
            try:
                col = pc.cast(col, f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise SchemaMismatchError(
                    f"insert into {table_name!r}: column {f.name!r} has type {col.type}, the table has "
                    f"{f.type} ({e})") from None
        if not f.nullable and col.null_count:
            raise SchemaMismatchError(f"insert into {table_name!r}: nulls in non-nullable column {f.name!r}")
        cols.append(col)
    return pa.table(cols, schema=schema)


class EmbeddedEngine:
    name = "embedded"

    def __init__(self, executor: Executor | None = None) -> None:
        self.executor = executor

    def _map(self, fn, items):
        items = list(items)
        if self.executor is None or len(items) <= 1:
            return [fn(i) for i in items]
        return list(self.executor.map(fn, items))

    # -- validation ----------------------------------------------------------
    def _empty(self, ctx: TableContext) -> pa.Table:
        return ctx.schema.empty_table()

    def validate_where(self, ctx: TableContext, where: str) -> None:
        if parse_predicate(where).node is None:
            raise InvalidExpressionError(f"where={where!r} on {ctx.name!r} does not parse as one SQL expression")
        try:
            out = _query(self._empty(ctx), f"({where}) AS __m")
        except Exception as e:  # duckdb.Error and friends
            raise InvalidExpressionError(f"where={where!r} on {ctx.name!r}: {str(e).splitlines()[0]}") from None
        t = out.schema.field("__m").type
        if not (pa.types.is_boolean(t) or pa.types.is_null(t)):
            raise InvalidExpressionError(f"where={where!r} on {ctx.name!r} is {t}, not a boolean")

    def validate_set(self, ctx: TableContext, assignments: dict[str, str], where: str | None) -> None:
        if not assignments:
            raise InvalidExpressionError("update needs at least one column in set=")
        names = {f.name.lower(): f.name for f in ctx.schema}
        for col, expr in assignments.items():
            if col.lower() not in names:
                raise InvalidExpressionError(f"set: {ctx.name!r} has no column {col!r}")
            if names[col.lower()] in ctx.partition_columns:
                pass  # allowed: rows move to another partition
            if not isinstance(expr, str) or not expr.strip() or ";" in expr:
                raise InvalidExpressionError(f"set {col}={expr!r}: expected one SQL expression as a string")
            if parse_predicate(f"({expr}) IS NULL").node is None:
                raise InvalidExpressionError(f"set {col}={expr!r} on {ctx.name!r} does not parse")
            try:
                _query(self._empty(ctx), f"({expr}) AS __v")
            except Exception as e:
                raise InvalidExpressionError(f"set {col}={expr!r} on {ctx.name!r}: {str(e).splitlines()[0]}") from None
        if where is not None:
            self.validate_where(ctx, where)

    # -- I/O -----------------------------------------------------------------
    def _read_file(self, ctx: TableContext, add: AddFile, columns: list[str] | None) -> pa.Table:
        key = data_file_key(ctx.name, add.path, ctx.lake_uri)
        try:
            data = ctx.store.get(key).data
        except NotFound:
            raise CorruptLogError(f"table {ctx.name!r} references data file {add.path!r}, which is missing "
                                  "from storage") from None
        pf = pq.ParquetFile(io.BytesIO(data))
        present = set(pf.schema_arrow.names)
        want = [f.name for f in ctx.schema if f.name not in ctx.partition_columns and
                (columns is None or f.name in columns)]
        t = pf.read(columns=[c for c in want if c in present])
        out = []
        for f in ctx.schema:
            if columns is not None and f.name not in columns:
                continue
            if f.name in ctx.partition_columns:
                raw = add.partition_values.get(f.name)
                v = None if raw is None else coerce(raw, f.type)
                out.append(pa.array([v] * t.num_rows, f.type))
            elif f.name in present:
                col = t.column(f.name)
                out.append(col if col.type.equals(f.type) else pc.cast(col, f.type))
            else:
                out.append(pa.nulls(t.num_rows, f.type))
        schema = pa.schema([f for f in ctx.schema if columns is None or f.name in columns])
        return pa.table(out, schema=schema)

    def _write_partition(self, ctx: TableContext, part: pa.Table, values: dict[str, str | None]) -> AddFile:
        body = part.drop_columns(list(ctx.partition_columns)) if ctx.partition_columns else part
        buf = io.BytesIO()
        pq.write_table(body, buf, compression="snappy")
        data = buf.getvalue()
        path = new_data_file_path(values, ctx.partition_columns)
        ctx.store.put(data_file_key(ctx.name, path, ctx.lake_uri), data)
        return AddFile(path=path, size=len(data), partition_values=dict(values), modification_time=now_ms(),
                       data_change=True, stats=stats_from_table(part, ctx.partition_columns))

    def _split(self, ctx: TableContext, table: pa.Table) -> list[tuple[pa.Table, dict[str, str | None]]]:
        if not ctx.partition_columns:
            chunks = [(table, {})]
        else:
            keys = table.select(list(ctx.partition_columns)).group_by(list(ctx.partition_columns)).aggregate([])
            chunks = []
            for row in keys.to_pylist():
                mask = None
                for c in ctx.partition_columns:
                    v = row[c]
                    m = pc.is_null(table.column(c)) if v is None else pc.fill_null(pc.equal(table.column(c), v), False)
                    mask = m if mask is None else pc.and_(mask, m)
                chunks.append((table.filter(mask), {c: partition_value_string(row[c]) for c in ctx.partition_columns}))
        out = []
        for t, vals in chunks:
            for start in range(0, max(t.num_rows, 1), MAX_ROWS_PER_FILE):
                piece = t.slice(start, MAX_ROWS_PER_FILE)
                if piece.num_rows:
                    out.append((piece, vals))
        return out

    def write(self, ctx: TableContext, data: Any) -> list[AddFile]:
        table = conform(ctx.name, to_arrow_table(data), ctx.schema)
        if table.num_rows == 0:
            return []
        return self._write_all(ctx, self._split(ctx, table))

    # -- queries ---------------------------------------------------------------
    def _mask(self, table: pa.Table, where: str | None) -> pa.ChunkedArray | pa.Array:
        if where is None:
            return pa.array([True] * table.num_rows, pa.bool_())
        out = _query(table, f"coalesce(({where}), false) AS __m")
        return out.column("__m")

    def scan(self, ctx: TableContext, files: list[AddFile], where: str | None, columns: list[str] | None) -> pa.Table:
        cols_needed = None
        if columns is not None:
            unknown = [c for c in columns if c not in ctx.schema.names]
            if unknown:
                raise InvalidExpressionError(f"{ctx.name!r} has no column(s) {unknown}")
            cols_needed = list(columns)
            if where is not None:
                cols_needed = [f.name for f in ctx.schema]  # the predicate may use any column
        parts = self._map(lambda a: self._read_file(ctx, a, cols_needed), files)
        schema = pa.schema([f for f in ctx.schema if cols_needed is None or f.name in cols_needed])
        table = pa.concat_tables(parts) if parts else schema.empty_table()
        if where is not None and table.num_rows:
            try:
                table = table.filter(self._mask(table, where))
            except Exception as e:
                raise InvalidExpressionError(f"where={where!r} on {ctx.name!r}: {str(e).splitlines()[0]}") from None
        if columns is not None:
            table = table.select(columns)
        return table

    def _rewrite_one(self, ctx: TableContext, add: AddFile, where: str | None,
                     assignments: dict[str, str] | None) -> tuple[AddFile, pa.Table, int] | None:
        """The new contents of one file, computed in memory (nothing written yet)."""
        table = self._read_file(ctx, add, None)
        try:
            mask = self._mask(table, where)
        except Exception as e:
            raise InvalidExpressionError(f"where={where!r} on {ctx.name!r}: {str(e).splitlines()[0]}") from None
        hits = pc.sum(mask).as_py() or 0
        if hits == 0:
            return None
        if assignments is None:
            return add, table.filter(pc.invert(mask)), hits
        names = {f.name.lower(): f.name for f in ctx.schema}
        select = ", ".join(f"({expr}) AS {_quote_ident('__v' + str(i))}" for i, expr in enumerate(assignments.values()))
        try:
            vals = _query(table, select)
        except Exception as e:
            raise InvalidExpressionError(f"set on {ctx.name!r}: {str(e).splitlines()[0]}") from None
        cols = {f.name: table.column(f.name) for f in ctx.schema}
        for i, col in enumerate(assignments):
            name = names[col.lower()]
            t = ctx.schema.field(name).type
            v = vals.column(f"__v{i}")
            try:
                v = v if v.type.equals(t) else pc.cast(v, t)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise InvalidExpressionError(
                    f"set {col}={assignments[col]!r}: the value has type {v.type}, column is {t} ({e})") from None
            cols[name] = pc.if_else(mask, v, cols[name])
            if not ctx.schema.field(name).nullable and cols[name].null_count:
                raise SchemaMismatchError(f"set {col}={assignments[col]!r} writes NULL into non-nullable {name!r}")
        return add, pa.table(list(cols.values()), schema=ctx.schema), hits

    def rewrite(self, ctx: TableContext, files: list[AddFile], where: str | None,
                assignments: dict[str, str] | None) -> RewriteResult:
        # compute every new file before writing any, so bad expressions leave storage untouched
        computed = [r for r in self._map(lambda a: self._rewrite_one(ctx, a, where, assignments), files) if r]
        res = RewriteResult()
        jobs = []
        for add, new, hits in computed:
            res.removed.append(add)
            res.rows += hits
            jobs.extend(self._split(ctx, new) if new.num_rows else [])
        res.added = self._write_all(ctx, jobs)
        return res

    def _write_all(self, ctx: TableContext, jobs: list[tuple[pa.Table, dict]]) -> list[AddFile]:
        written: list[AddFile] = []
        lock = threading.Lock()

        def one(job):
            a = self._write_partition(ctx, job[0], job[1])
            with lock:
                written.append(a)
            return a

        try:
            return self._map(one, jobs)
        except Exception:
            for a in written:  # best effort: do not leave files of a failed write behind
                try:
                    ctx.store.delete(data_file_key(ctx.name, a.path, ctx.lake_uri))
                except Exception:
                    pass
            raise

    def num_rows(self, result: Any) -> int:
        return result.num_rows
