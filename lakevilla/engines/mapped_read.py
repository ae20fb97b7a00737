"""The embedded engine's read of a column-mapped table (``delta.column_mapping``).

Data files name their columns physically (``name`` mode) or are matched by Parquet field id
(``id`` mode), so no one read schema fits every file: each file is read by the schema that
resolves its own columns, renamed to the logical names (nested fields too), given its partition
values (keyed by physical name in the log), and only then filtered, so ``where`` and
``columns`` see logical names as they do on any other table. Pruning by statistics happens
before, on physical keys (``scan.pruning``); the filter is not pushed into Parquet here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from ..delta import column_mapping as cm
from ..delta import deletion_vectors
from ..delta.actions import AddFile
from ..delta.values import partition_value
from ..errors import CorruptLogError
from . import ranged
from .api import TableContext, data_file_key

# (sources, physical top-level names) -> fetched fragments (``EmbeddedEngine._fragments``)
Fetch = Callable[[list[ranged.Source], list[str]], Any]
Decode = Callable[[Callable[[], pa.Table]], pa.Table]  # ``EmbeddedEngine._decode``


def _partition_column(ctx: TableContext, add: AddFile, name: str, rows: int) -> pa.Array:
    f = ctx.schema.field(name)
    raw = add.partition_values.get(cm.physical_key(ctx.schema, name))
    try:
        v = partition_value(raw, f.type)
        return pa.nulls(rows, f.type) if v is None else pa.repeat(pa.scalar(v, f.type), rows)
    except (TypeError, ValueError, ArithmeticError, OverflowError, pa.ArrowException) as err:
        raise CorruptLogError(f"table {ctx.name!r}: file {add.path!r} has partition value {raw!r} "
                              f"for column {name!r} of type {f.type}, which cannot be read as "
                              f"that type ({err})") from None


def _one_file(ctx: TableContext, add: AddFile, src: ranged.Source, data: list[str],
              parts: list[str], wanted: list[str], fetch: Fetch, decode: Decode) -> pa.Table | None:
    """One file's ``data`` and ``parts`` columns, logically named (None: nothing to read)."""
    frag = src.fragment
    if frag is None or not frag.row_groups:
        return None
    read = cm.file_schema(ctx.schema, data, frag.physical_schema)
    if not src.complete and not set(read.names) <= set(wanted):
        # ``id`` mode, a file naming a column otherwise than the metadata: fetch its chunks
        fetch([src], read.names)
        frag = src.fragment
    t = decode(lambda: frag.to_table(schema=read, columns=read.names, use_threads=True))
    t = cm.relabel(t, pa.schema([ctx.schema.field(c) for c in data]))
    for p in parts:
        t = t.append_column(cm.plain(ctx.schema.field(p)),
                            _partition_column(ctx, add, p, t.num_rows))
    return t


def _live(ctx: TableContext, add: AddFile, t: pa.Table) -> pa.Table:
    """The rows of one whole file (all its row groups, in order: a row's position is its index
    in the file) that its deletion vector does not delete."""
    assert add.deletion_vector is not None
    gone = deletion_vectors.deleted_rows(ctx.store, ctx.name, ctx.lake_uri,
                                         add.deletion_vector, add.path)
    where = f"table {ctx.name!r}: file {add.path!r}"
    return t.filter(pa.array(deletion_vectors.live_mask(t.num_rows, gone, where)))


def read(ctx: TableContext, files: list[AddFile], columns: list[str], filter: Any,
         filter_columns: set[str] | frozenset[str], fetched: dict[str, ranged.Source] | None,
         fetch: Fetch, decode: Decode) -> pa.Table:
    """``columns`` of ``files`` under ``filter`` (an Arrow expression over logical names naming
    ``filter_columns``), as ``EmbeddedEngine._read`` returns them for an unmapped table."""
    want = set(columns) | set(filter_columns)
    logical = [n for n in ctx.schema.names if n in want]
    parts = [c for c in logical if c in ctx.partition_columns]
    data = [c for c in logical if c not in ctx.partition_columns]
    wanted = cm.file_schema(ctx.schema, data, None).names  # the physical names, as written
    out_schema = pa.schema([cm.plain(ctx.schema.field(c)) for c in columns])
    sources = [(fetched or {}).get(a.path)
               or ranged.Source(data_file_key(ctx.name, a.path, ctx.lake_uri), int(a.size or 0))
               for a in files]
    tables = []
    at = 0
    for batch in ranged.batches(sources):
        fetch(batch, wanted)
        for src, add in zip(batch, files[at:at + len(batch)], strict=True):
            t = _one_file(ctx, add, src, data, parts, wanted, fetch, decode)
            if t is not None and add.deletion_vector is not None:
                t = _live(ctx, add, t)
            if t is not None and t.num_rows:
                t = t.select(logical)
                tables.append(t.filter(filter) if filter is not None else t)
        at += len(batch)
    if not tables:
        return out_schema.empty_table()
    return pa.concat_tables(tables).select(columns).cast(out_schema)
