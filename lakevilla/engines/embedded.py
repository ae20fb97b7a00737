"""The embedded engine: pyarrow for Parquet, DuckDB for ``where`` and ``set`` expressions.

A scan reads the surviving files in batches of pyarrow datasets (only the columns it
needs, partition values from the add actions, each file's footer bounds as a guarantee),
decoded side by side while the next batch is fetched (``parquet_read``), every byte a
ranged GET through the lake's store (``ranged``: counted, slowed, fault-injected). What
the scan may skip is pushed into Parquet
(``pushdown``: row groups and rows that provably cannot match); which rows match
is always decided by DuckDB evaluating the checked ``where``
(``lakevilla.scan.expressions``) over arrow data we hand it, on a locked-down
connection (``lakevilla.scan.duck``). Updates and deletes first find the files with a
matching row from the predicate's columns alone, then rewrite only those: masks
for ``where`` and new column values for ``set``, computed on the matching rows
only and converted to the column's type with SQL's assignment cast.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Collection, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ..data.schemas import (
    as_stream,
    assignable,
    to_arrow_table,
    type_refusal,
)
from ..delta import column_mapping, deletion_vectors
from ..delta.actions import AddFile, CdcFile
from ..delta.stats import stats_from_table
from ..errors import (
    CorruptLogError,
    InvalidArgumentError,
    InvalidExpressionError,
    SchemaMismatchError,
)
from ..parallel import pmap
from ..scan import duck
from ..scan import expressions as E
from ..scan.ordering import Ordering
from ..scan.pruning import partition_value
from . import change_data, dv_rewrite, generated, identity, mapped_read, parquet_read, ranged
from .api import (
    CommitFiles,
    MergeSource,
    RewriteResult,
    TableContext,
    data_file_key,
    new_data_file_path,
    now_ms,
    partition_value_string,
)
from .arrow_source import ArrowSource, source_table
from .arrow_source import staged as staged_source
from .change_rows import change_rows
from .duck_sql import assignment_cast, first_line, query_one
from .embedded_merge import merge as merge_rows
from .merge_plan import MergePlan, MergeResult
from .pushdown import pushdown
from .rules import checked_rules, violation

MAX_ROWS_PER_FILE = 1_000_000
STREAM_FILE_BYTES = 128 << 20  # a streamed insert starts a new file after this much Arrow memory
ROW_GROUP_ROWS = 1 << 20  # pyarrow's default; readers skip row groups by their statistics


def stream_chunks(table_name: str, reader: pa.RecordBatchReader, schema: pa.Schema,
                  computed: Collection[str] = ()) -> Iterator[pa.Table]:
    """The stream in pieces of at most one data file's worth (``MAX_ROWS_PER_FILE`` rows or
    ``STREAM_FILE_BYTES`` of Arrow memory), each conformed to ``schema``: a writer that writes
    each before asking for the next holds one file's rows at a time, whatever the stream's
    length. ``computed``: as ``conform``'s."""
    pending: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in reader:
        while batch.num_rows:
            room = MAX_ROWS_PER_FILE - rows
            piece, batch = batch.slice(0, room), batch.slice(room)
            pending.append(piece)
            rows += piece.num_rows
            size += piece.nbytes
            if rows >= MAX_ROWS_PER_FILE or size >= STREAM_FILE_BYTES:
                yield conform(table_name, pa.Table.from_batches(pending, reader.schema), schema,
                              computed)
                pending, rows, size = [], 0, 0
    if pending:
        yield conform(table_name, pa.Table.from_batches(pending, reader.schema), schema, computed)


def conform(table_name: str, data: pa.Table, schema: pa.Schema,
            computed: Collection[str] = ()) -> pa.Table:
    """``data`` cast to the table schema, or a SchemaMismatchError saying what differs. A column
    in ``computed`` (generated) that the data lacks is left NULL, even when non-nullable: the
    writer computes it next (``generated.fill``)."""
    by_lower = {n.lower(): n for n in data.column_names}
    if len(by_lower) != len(data.column_names):
        raise SchemaMismatchError(f"insert into {table_name!r}: duplicate column "
                                  f"names {data.column_names}")
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
            if not f.nullable and f.name not in computed:
                raise SchemaMismatchError(f"insert into {table_name!r}: missing non-nullable "
                                          f"column {f.name!r}")
            cols.append(pa.nulls(data.num_rows, f.type))
            continue
        col = data.column(src)
        if not col.type.equals(f.type):
            if not assignable(col.type, f.type):
                raise type_refusal(f"insert into {table_name!r}", f.name, col.type, f.type)
            try:
                col = pc.cast(col, f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise SchemaMismatchError(
                    f"insert into {table_name!r}: column {f.name!r} has type {col.type}, the table "
                    f"has {f.type} ({e})") from None
        if not f.nullable and col.null_count:
            raise SchemaMismatchError(f"insert into {table_name!r}: nulls in non-nullable "
                                      f"column {f.name!r}")
        cols.append(col)
    return pa.table(cols, schema=schema)


def conformed(ctx: TableContext, data: pa.Table) -> pa.Table:
    """``conform`` to ``ctx``'s schema, with the generated columns ``data`` lacks computed from
    each row (Delta's writer rule; a given one is checked with the table's rules)."""
    absent = generated.missing(ctx, data.column_names)
    ids = identity.absent(ctx, data.column_names)  # generated before the generated columns
    table = conform(ctx.name, data, ctx.schema, [*absent, *(c.name for c in ids)])
    if ids:
        table = identity.Numbering(ids).fill(ctx.schema, table)
    return generated.fill(ctx, table, absent)


class EmbeddedEngine:
    """The default engine, with no cluster: pyarrow reads and writes Parquet, DuckDB evaluates
    ``where`` and ``set`` (see the module docstring)."""

    name = "embedded"
    writes_change_data = True  # change data feed tables (``change_data.py``)

    _map = staticmethod(pmap)  # file reads and rewrites in the process-wide I/O pool

    # -- validation (the grammar both engines share) ---------------------------
    def validate_where(self, ctx: TableContext, where: str) -> None:
        E.check_where(where, ctx.schema, f"where={where!r} on {ctx.name!r}")

    def validate_set(self, ctx: TableContext, assignments: dict[str, str],
                     where: str | None) -> None:
        E.check_update(ctx.schema, ctx.name, where, assignments)

    # -- I/O -----------------------------------------------------------------
    def _partition_expr(self, ctx: TableContext, add: AddFile) -> Any:
        """The file's partition values as a dataset guarantee (pyarrow fills
        the columns from it)."""
        expr = None
        for c in ctx.partition_columns:
            f = ctx.schema.field(c)
            raw = add.partition_values.get(c)
            try:
                v = partition_value(raw, f.type)
                e = pc.field(c).is_null() if v is None else pc.field(c) == pa.scalar(v, f.type)
            except (TypeError, ValueError, ArithmeticError, OverflowError,
                    pa.ArrowException) as err:
                raise CorruptLogError(f"table {ctx.name!r}: file {add.path!r} has partition "
                                      f"value {raw!r} for column {c!r} of type {f.type}, which "
                                      f"cannot be read as that type ({err})") from None
            expr = e if expr is None else expr & e
        return expr

    def _sources(self, ctx: TableContext, files: list[AddFile],
                 fetched: dict[str, ranged.Source] | None = None) -> list[ranged.Source]:
        return [(fetched or {}).get(a.path)
                or ranged.Source(data_file_key(ctx.name, a.path, ctx.lake_uri),
                                 int(a.size or 0), self._partition_expr(ctx, a))
                for a in files]

    def _fragments(self, ctx: TableContext, batch: list[ranged.Source], columns: list[str],
                   pushed: Any, dictionary: tuple[str, ...] = ()) -> tuple[list, tuple[str, ...]]:
        """Fetch a batch of files' needed bytes through the store; their pyarrow fragments, and
        the ``dictionary`` columns they decode as dictionaries."""
        try:
            return ranged.prepare(ctx.store, batch, ctx.schema, columns, pushed, self._map,
                                  dictionary)
        except ranged.MissingDataFile as e:
            raise CorruptLogError(f"table {ctx.name!r} references data file {e.key!r}, which is "
                                  "missing from storage") from None
        except ranged.NotParquet as e:
            raise CorruptLogError(f"table {ctx.name!r}: data file {e.key!r} is not a readable "
                                  f"Parquet file ({e})") from None

    def _decode(self, ctx: TableContext, fn: Any) -> Any:
        try:
            return fn()
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError) as e:
            raise CorruptLogError(f"table {ctx.name!r}: a data file cannot be read as the table's "
                                  f"schema ({first_line(e)})") from None

    def _read(self, ctx: TableContext, files: list[AddFile], columns: list[str], filter: Any = None,
              filter_columns: set[str] | frozenset[str] = frozenset(),
              fetched: dict[str, ranged.Source] | None = None) -> pa.Table:
        """``columns`` of ``files`` in table types: fetched by ranged GETs, decoded by pyarrow's
        threads. ``filter`` names ``filter_columns`` (fetched too, never decoded as dictionaries:
        its constants have the table's types). ``fetched``: files an earlier scan
        holds whole, by path."""
        if column_mapping.mode_of(ctx.schema) != "none":  # physical names on disk
            return mapped_read.read(ctx, files, columns, filter, filter_columns, fetched,
                                    lambda b, cols: self._fragments(ctx, b, cols, None),
                                    lambda fn: self._decode(ctx, fn))
        schema = pa.schema([ctx.schema.field(c) for c in columns])
        fetch = [n for n in ctx.schema.names if n in set(columns) | set(filter_columns)]
        deleted = [a for a in files if a.deletion_vector is not None]
        if deleted:  # files with deleted rows are read apart, whole, and their rows dropped first
            files = [a for a in files if a.deletion_vector is None]
            out = ([self._read(ctx, files, columns, filter, filter_columns, fetched)]
                   if files else [])
            # one by one: each fans its fetches out over the I/O pool, which a task in it cannot
            out.extend(self._read_live(ctx, a, schema, fetch, filter, fetched) for a in deleted)
            return pa.concat_tables(out)
        strings = tuple(c for c in columns if pa.types.is_string(ctx.schema.field(c).type)
                        and c not in filter_columns and c not in ctx.partition_columns)
        # batch i+1 is fetched while the batches before it decode, side by side
        out = parquet_read.pipelined(
            ranged.batches(self._sources(ctx, files, fetched)),
            lambda batch: self._fragments(ctx, batch, fetch, filter, strings),
            lambda got: self._decode_batch(ctx, schema, columns, filter, *got))
        return pa.concat_tables(out) if out else schema.empty_table()

    def _read_live(self, ctx: TableContext, add: AddFile, schema: pa.Schema, fetch: list[str],
                   filter: Any, fetched: dict[str, ranged.Source] | None) -> pa.Table:
        """The rows of one file with a deletion vector that it does not delete, then ``filter``:
        read whole (no row group skipped, so a row's position is its index in the file)."""
        where = f"table {ctx.name!r}: file {add.path!r}"
        assert add.deletion_vector is not None
        gone = deletion_vectors.deleted_rows(ctx.store, ctx.name, ctx.lake_uri,
                                             add.deletion_vector, add.path)
        frags, _ = self._fragments(ctx, self._sources(ctx, [add], fetched), fetch, None)
        tables = self._decode_batch(ctx, pa.schema([ctx.schema.field(c) for c in fetch]), fetch,
                                    None, frags, ())
        t = tables[0] if tables else pa.schema([ctx.schema.field(c) for c in fetch]).empty_table()
        t = t.filter(pa.array(deletion_vectors.live_mask(t.num_rows, gone, where)))
        if filter is not None:
            t = self._decode(ctx, lambda: t.filter(filter))
        return t.select(schema.names)

    def _decode_batch(self, ctx: TableContext, schema: pa.Schema, columns: list[str], filter: Any,
                      frags: list, dictionary: tuple[str, ...]) -> list[pa.Table]:
        """One fetched batch as a table of ``schema`` (none when every file was skipped)."""
        if not frags:
            return []
        scan_schema = pa.schema([f.with_type(pa.dictionary(pa.int32(), f.type))
                                 if f.name in dictionary else f for f in ctx.schema])
        dataset = ds.FileSystemDataset(frags, scan_schema, ranged.file_format(dictionary), None)
        # dictionaries become strings in the scan's own threads, after the filter
        proj = {c: pc.field(c).cast(ctx.schema.field(c).type) if c in dictionary else pc.field(c)
                for c in columns} if dictionary else columns
        t = self._decode(ctx,
                         lambda: dataset.to_table(columns=proj, filter=filter, use_threads=True))
        return [t if t.schema.equals(schema) else t.cast(schema)]

    def read_file(self, ctx: TableContext, add: AddFile, columns: list[str] | None,
                   fetched: dict[str, ranged.Source] | None = None) -> pa.Table:
        return self._read(ctx, [add], list(columns) if columns is not None else ctx.schema.names,
                          fetched=fetched)

    def _write_partition(self, ctx: TableContext, part: pa.Table,
                         values: dict[str, str | None]) -> AddFile:
        part, parts, values = column_mapping.as_written(ctx, part, values)
        body = part.drop_columns(parts) if parts else part
        buf = io.BytesIO()
        pq.write_table(body, buf, compression="snappy", row_group_size=ROW_GROUP_ROWS)
        data = buf.getvalue()
        path = new_data_file_path(values, parts)
        ctx.store.put(data_file_key(ctx.name, path, ctx.lake_uri), data)
        return AddFile(path=path, size=len(data), partition_values=dict(values),
                       modification_time=now_ms(), data_change=True,
                       stats=stats_from_table(part, parts))

    def split_by_partition(self, ctx: TableContext,
                           table: pa.Table) -> list[tuple[pa.Table, dict[str, str | None]]]:
        if not ctx.partition_columns:
            chunks: list[tuple[pa.Table, dict[str, str | None]]] = [(table, {})]
        else:
            # the row numbers of each group, so a row lands in exactly one file whatever equality
            # means for its type (NaN, -0.0 and 0.0 group as pyarrow groups them)
            parts = list(ctx.partition_columns)
            rows = pa.array(np.arange(table.num_rows, dtype=np.int64))
            groups = table.select(parts).append_column("__lv_row", rows) \
                .group_by(parts, use_threads=False).aggregate([("__lv_row", "list")])
            chunks = []
            for i, row in enumerate(groups.select(parts).to_pylist()):
                idx = groups.column("__lv_row_list")[i].values
                chunks.append((table.take(idx),
                               {c: partition_value_string(row[c], c) for c in parts}))
        out = []
        for t, vals in chunks:
            for start in range(0, max(t.num_rows, 1), MAX_ROWS_PER_FILE):
                piece = t.slice(start, MAX_ROWS_PER_FILE)
                if piece.num_rows:
                    out.append((piece, vals))
        return out

    def write(self, ctx: TableContext, data: Any) -> list[AddFile]:
        stream = as_stream(data)
        if stream is not None:
            return self._write_stream(ctx, stream)
        table = conformed(ctx, to_arrow_table(data))
        if table.num_rows == 0:
            return []
        return self.write_all(ctx, self.split_by_partition(ctx, table))

    def _write_stream(self, ctx: TableContext, reader: pa.RecordBatchReader) -> list[AddFile]:
        """A stream, one file's worth at a time (``stream_chunks``): memory stays bounded by the
        file size. If a piece fails (bad data, the store), the files already written go too."""
        written: list[AddFile] = []
        try:
            absent = generated.missing(ctx, reader.schema.names)
            numbering = identity.Numbering(identity.absent(ctx, reader.schema.names))
            computed = [*absent, *(c.name for c in numbering.columns)]
            for table in stream_chunks(ctx.name, reader, ctx.schema, computed):
                table = generated.fill(ctx, numbering.fill(ctx.schema, table), absent)
                written.extend(self.write_all(ctx, self.split_by_partition(ctx, table)))
        except BaseException:
            for a in written:  # best effort: abandoned-file clean-up catches what is left
                try:
                    ctx.store.delete(data_file_key(ctx.name, a.path, ctx.lake_uri))
                except Exception:  # noqa: BLE001
                    pass
            raise
        return written

    # -- queries ---------------------------------------------------------------
    def _mask(self, ctx: TableContext, table: pa.Table, where: E.Checked | None) -> pa.Array:
        """Which rows ``where`` selects (NULL counts as no), as one boolean array."""
        if where is None:
            return pa.array([True] * table.num_rows, pa.bool_())
        pushed, exact = pushdown(where.text, ctx.schema)
        # the filter keeps exactly the selected rows: arrow decides, ~0.3 ms against ~3 ms
        if exact:
            cols = [n for n in table.column_names if n in where.columns()]
            rows = pa.array(np.arange(table.num_rows, dtype=np.int64))
            kept = (table.select(cols).append_column("__lv_row", rows).filter(pushed)
                    .column("__lv_row"))
            mask = np.zeros(table.num_rows, dtype=bool)
            mask[kept.to_numpy()] = True
            return pa.array(mask)
        try:
            out = query_one(table, f"coalesce(({where.sql}), false) AS __m")
        except Exception as e:  # noqa: BLE001 - a runtime error of the user's expression
            raise InvalidExpressionError(f"where={where.text!r} "
                                         f"on {ctx.name!r}: {first_line(e)}") from None
        return out.column("__m").combine_chunks()

    def _needed(self, ctx: TableContext, columns: list[str], where: E.Checked | None) -> list[str]:
        """``columns`` and the predicate's, in schema order."""
        want = set(columns) | (where.columns() if where is not None else set())
        return [n for n in ctx.schema.names if n in want]

    def scan(self, ctx: TableContext, files: list[AddFile], where: str | None,
             columns: list[str] | None, order: Ordering | None = None) -> pa.Table:
        checked = (E.check_where(where, ctx.schema, f"where={where!r} on {ctx.name!r}")
                   if where is not None else None)
        if columns is not None:
            unknown = [c for c in columns if c not in ctx.schema.names]
            if unknown:
                raise InvalidExpressionError(f"{ctx.name!r} has no column(s) {unknown}")
        out = list(columns) if columns is not None else list(ctx.schema.names)
        if order is not None:
            order.check(ctx.schema.names, ctx.name)
            wanted = out + [c for c in order.columns if c not in out]
            return order.apply(self.scan(ctx, files, where, wanted), out)
        pushed, exact = pushdown(where, ctx.schema) if where is not None else (None, False)
        if exact:  # the scan's filter is the predicate: nothing left for DuckDB to decide
            assert checked is not None  # exact only for a where
            return self._read(ctx, files, out, pushed, checked.columns())
        table = self._read(ctx, files, self._needed(ctx, out, checked), pushed,
                           checked.columns() if checked is not None else frozenset())
        if checked is not None and table.num_rows:
            table = table.filter(self._mask(ctx, table, checked))
        return table.select(out)

    def _hit_files(self, ctx: TableContext, files: list[AddFile], where: E.Checked,
                   fetched: dict[str, ranged.Source]) -> list[AddFile]:
        """The files holding a row ``where`` selects, from the predicate's columns alone. Small
        files are fetched whole for that: they go into ``fetched`` (by path), so that reading
        them whole next costs no second round trip."""
        cols = self._needed(ctx, [], where)
        pushed, exact = pushdown(where.text, ctx.schema)
        tables = []
        sources = self._sources(ctx, files)
        index = {id(s): i for i, s in enumerate(sources)}
        fetched.update((a.path, s) for a, s in zip(files, sources, strict=True)
                       if s.size <= ranged.WHOLE_FILE_BYTES)
        for batch in ranged.batches(sources):
            self._fragments(ctx, batch, cols, pushed)  # decoded per file below
            for src in batch:
                if src.fragment is None or not src.fragment.row_groups:
                    continue
                t = self._decode(ctx,
                                 lambda f=src.fragment: f.to_table(schema=ctx.schema, columns=cols,
                                                                   filter=pushed, use_threads=True))
                if t.num_rows:
                    tables.append(t.append_column("__lv_file",
                                                  pa.array(np.full(t.num_rows, index[id(src)],
                                                                   dtype=np.int32))))
        if not tables:
            return []
        if exact:  # the filter kept exactly the selected rows
            hit = {t.column("__lv_file")[0].as_py() for t in tables}
            return [a for i, a in enumerate(files) if i in hit]
        table = pa.concat_tables(tables)
        try:
            got = duck.query("SELECT DISTINCT __lv_file FROM __lv_rel0 WHERE "
                             f"coalesce(({where.sql}), false)", {"__lv_rel0": table})
        except Exception as e:  # noqa: BLE001 - a runtime error of the user's expression
            raise InvalidExpressionError(f"where={where.text!r} "
                                         f"on {ctx.name!r}: {first_line(e)}") from None
        hit = set(got.column("__lv_file").to_pylist())
        return [a for i, a in enumerate(files) if i in hit]

    def _selected(
        self, ctx: TableContext, add: AddFile, where: E.Checked | None,
        fetched: dict[str, ranged.Source],
    ) -> tuple[AddFile, pa.Table, pa.Array, int] | None:
        """One file's rows and which of them ``where`` selects (None: none)."""
        table = self.read_file(ctx, add, None, fetched)
        mask = self._mask(ctx, table, where)
        hits = pc.sum(mask).as_py() or 0
        return (add, table, mask, hits) if hits else None

    def _rewritten(self, ctx: TableContext, selected: list[tuple[AddFile, pa.Table, pa.Array, int]],
                   assignments: dict[str, E.Checked] | None) -> list[tuple[AddFile, pa.Table, int]]:
        """The new contents of the selected files, computed in memory (nothing written yet). SET
        is evaluated on the matching rows only, as SQL says, those of every file in one query:
        a query costs DuckDB ~3-10 ms whatever its rows, and a statement touches many files.
        Consumes ``selected``: a file's old rows are let go once its new ones are built."""
        values: dict[str, pa.Array] = {}
        if assignments is not None:
            matched = pa.concat_tables([table.filter(mask) for _, table, mask, _ in selected])
            values = self._assigned_all(ctx, matched, assignments)
            values = generated.reassigned(ctx, matched, values)  # generated columns follow
        out, at = [], 0
        selected.reverse()
        while selected:
            add, table, mask, hits = selected.pop()
            if assignments is None:
                out.append((add, table.filter(pc.invert(mask)), hits))
                continue
            cols = {f.name: table.column(f.name).combine_chunks() for f in ctx.schema}
            for name, v in values.items():
                cols[name] = pc.replace_with_mask(cols[name], mask, v.slice(at, hits))
            out.append((add, pa.table(list(cols.values()), schema=ctx.schema), hits))
            at += hits
        return out

    def _assigned_all(self, ctx: TableContext, matched: pa.Table,
                      assignments: dict[str, E.Checked]) -> dict[str, pa.Array]:
        """Every SET value on the matched rows, in one DuckDB query (each query costs ~3 ms
        whatever it computes). A failure is computed again column by column, so that the error
        names the assignment that failed, the first in order as before."""
        names = list(assignments)
        used = set().union(*(c.columns() for c in assignments.values()))
        matched = matched.select([n for n in matched.column_names if n in used]
                                 or matched.column_names[:1])
        select = ", ".join(f"{assignment_cast(assignments[n].sql, ctx.schema.field(n))} AS __v{i}"
                           for i, n in enumerate(names))
        try:
            out = query_one(matched, select)
        except Exception as e:  # noqa: BLE001 - overflow, an unparsable string, division by zero
            for n in names:
                self._assigned(ctx, matched, n, assignments[n], ctx.schema.field(n))
            raise InvalidExpressionError(f"set on {ctx.name!r}: {first_line(e)}") from None
        return {n: self._conformed(ctx, n, assignments[n], out.column(f"__v{i}").combine_chunks(),
                                   ctx.schema.field(n)) for i, n in enumerate(names)}

    def _assigned(self, ctx: TableContext, matched: pa.Table, name: str, value: E.Checked,
                  field: pa.Field) -> pa.Array:
        """``value`` on the matched rows, converted to the column's type by SQL's assignment cast
        (``CAST(value AS column type)``: rounds to integers, parses strings, fails on overflow)."""
        what = f"set {name}={value.text!r} on {ctx.name!r}"
        try:
            out = query_one(matched, f"{assignment_cast(value.sql, field)} AS __v")
        except Exception as e:  # noqa: BLE001 - overflow, an unparsable string, division by zero
            raise InvalidExpressionError(f"{what}: {first_line(e)}") from None
        return self._conformed(ctx, name, value, out.column("__v").combine_chunks(), field)

    def _conformed(self, ctx: TableContext, name: str, value: E.Checked, v: pa.Array,
                   field: pa.Field) -> pa.Array:
        what = f"set {name}={value.text!r} on {ctx.name!r}"
        if not v.type.equals(field.type):
            # same values, arrow's spelling of the type (e.g. the zone name)
            v = pc.cast(v, field.type)
        if not field.nullable and v.null_count:
            raise SchemaMismatchError(f"{what} writes NULL into non-nullable column {name!r}")
        return v

    def rewrite(self, ctx: TableContext, files: list[AddFile], where: str | None,
                assignments: dict[str, str] | None) -> RewriteResult:
        # checked here too: every path (a redo, a resumed sublog) runs the grammar before any row
        w, sets = E.check_update(ctx.schema, ctx.name, where, assignments)
        fetched: dict[str, ranged.Source] = {}
        if w is not None and column_mapping.mode_of(ctx.schema) == "none":  # (mapped: read all)
            files = self._hit_files(ctx, files, w, fetched)  # the rest is never read whole
        # compute every new file before writing any, so bad expressions leave storage untouched
        selected = [r for r in self._map(lambda a: self._selected(ctx, a, w, fetched), files) if r]
        if ctx.write_dvs and selected:  # mark rows deleted instead of rewriting their files
            res = dv_rewrite.rewrite(self, ctx, selected, sets)
        else:
            res = RewriteResult(changes=change_data.matched(ctx, selected, sets is not None))
            masks = [mask for _, _, mask, _ in selected]
            jobs = []
            for (add, new, hits), mask in zip(self._rewritten(ctx, selected, sets)
                                              if selected else [], masks, strict=True):
                res.removed.append(add)
                res.rows += hits
                jobs.extend(self.split_by_partition(ctx, new) if new.num_rows else [])
                if ctx.write_cdf and sets is not None:
                    res.changes.append((new.filter(mask), change_data.POSTIMAGE))
            res.added = self.write_all(ctx, jobs)
        return change_data.logged(self, ctx, res, update=sets is not None)

    def check_rules(self, ctx: TableContext, tables: list[pa.Table]) -> None:
        """``ConstraintViolationError`` for the first row that breaks a rule of the table (false
        or NULL breaks it, as in Delta), before anything is written."""
        for rule, checked in checked_rules(ctx):
            for t in tables:
                ok = self._mask(ctx, t, checked)  # NULL counts as no
                if not pc.all(ok).as_py():
                    i = int(pc.index(ok, False).as_py())
                    raise violation(ctx, rule, checked, t.slice(i, 1).to_pylist()[0])

    def check_rows(self, ctx: TableContext, files: list[AddFile]) -> None:
        self.check_rules(ctx, self._map(lambda a: self.read_file(ctx, a, None), files))

    def write_all(self, ctx: TableContext, jobs: list[tuple[pa.Table, dict]]) -> list[AddFile]:
        if ctx.constraints:
            self.check_rules(ctx, [t for t, _ in jobs])
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

    # -- MERGE -------------------------------------------------------------------
    def merge_source(self, data: Any) -> ArrowSource:
        return ArrowSource(source_table(data))

    def staged_merge_source(self, ctx: TableContext, keys: tuple[str, ...]) -> ArrowSource:
        return staged_source(ctx.store, keys)

    def merge(self, ctx: TableContext, files: list[AddFile], plan: MergePlan,
              source: MergeSource) -> tuple[RewriteResult, MergeResult]:
        """Join ``source`` with the rows of ``files`` in DuckDB, apply the clauses
        (``embedded_merge.py``)."""
        if not isinstance(source, ArrowSource):
            raise InvalidArgumentError(f"the embedded engine merges from rows in this process, "
                                       f"not from a {type(source).__name__}")
        res, metrics = merge_rows(self, ctx, files, plan, source.table)
        return change_data.logged(self, ctx, res, update=False), metrics

    def change_data(self, ctx: TableContext, removed: list[AddFile],
                    added: list[AddFile]) -> list[CdcFile]:
        return change_data.of_files(self, ctx, removed, added)

    def change_rows(self, ctx: TableContext, commits: list[CommitFiles]) -> pa.Table:
        return change_rows(self, ctx, commits)
