"""A snapshot's live files (and tombstones) as columns, not Python objects.

A checkpoint already is a table: its ``add`` (``remove``) rows stay Arrow columns
(``ActionTable``), shared by every snapshot built on that checkpoint, and the few
commits after it are an overlay of Python actions. A snapshot's set is the table's
rows minus the paths the overlay hides, plus the overlay's own actions
(``ActionSet``). Nothing materialises one object per file unless asked to: pruning
runs over the columns (``lakevilla.scan.pruning``), lookups by path are vectorised, and
only the files an operation touches become ``AddFile`` objects.

A client that follows a busy table replays commit after commit onto the same checkpoint, so
every few dozen changes a snapshot folds its overlay into its table (``FOLD_AT``). A fold
copies nothing: the folded table's rows are rows of the tables it was folded from
(``Pieces``), its columns are gathered when asked for, and the statistics those tables
parsed are gathered too, so each file's are parsed once however often it is folded.

A big checkpoint (more than ``EAGER_ROWS`` files) keeps only its Parquet bytes: a prune
streams the ``stats`` column through in batches and keeps the bounds it parses, and the few
files it finds are read from their row groups (``ActionTable.take``); no column of a million
rows is decoded whole and kept unless it is asked for again and again (``LAZY_TAKES``) or
whole (``len``, iteration, a lookup by path).

``ActionSet`` is a read-only ``Mapping`` from path to action, so code that treats
``snapshot.files`` as a dict keeps working (iteration, ``in``, ``len``, ``values``),
at the price of materialising what it iterates.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .actions import AddFile, RemoveFile
from .deletion_vectors import DeletionVector

STR_MAP = pa.map_(pa.string(), pa.string())
# the deletion vector descriptor (PROTOCOL.md, "Deletion Vector Descriptor Schema")
DV_STRUCT = pa.struct([
    pa.field("storageType", pa.string()), pa.field("pathOrInlineDv", pa.string()),
    pa.field("offset", pa.int32()), pa.field("sizeInBytes", pa.int32()),
    pa.field("cardinality", pa.int64()), pa.field("maxRowIndex", pa.int64()),
])

ADD_SCHEMA = pa.schema([
    pa.field("path", pa.string(), False), pa.field("partitionValues", STR_MAP),
    pa.field("size", pa.int64()), pa.field("modificationTime", pa.int64()),
    pa.field("dataChange", pa.bool_()), pa.field("stats", pa.string()), pa.field("tags", STR_MAP),
    pa.field("deletionVector", DV_STRUCT), pa.field("baseRowId", pa.int64()),
    pa.field("defaultRowCommitVersion", pa.int64()), pa.field("clusteringProvider", pa.string()),
])
REMOVE_SCHEMA = pa.schema([
    pa.field("path", pa.string(), False), pa.field("deletionTimestamp", pa.int64()),
    pa.field("dataChange", pa.bool_()), pa.field("extendedFileMetadata", pa.bool_()),
    pa.field("partitionValues", STR_MAP), pa.field("size", pa.int64()),
    pa.field("deletionVector", DV_STRUCT),
])
# add fields lakevilla does not model: columns here, ``AddFile.extra`` as actions
ADD_EXTRA = ("baseRowId", "defaultRowCommitVersion", "clusteringProvider")

# Overlays larger than this are folded into a new table when a snapshot is built. Each new
# snapshot builds its overlay again, and a prune parses its statistics again, while the folded
# table (and its parsed statistics) is shared by the snapshots after it: under 16 TPC-C clients
# overlays of up to ~400 files, rebuilt for every read, were 7% of the clients' CPU at 4,096.
FOLD_AT = 64
# A fold gathers its rows from the tables it was folded from until they hold more than this many
# times the rows it serves (plus ``FOLD_AT``), or there are more than ``FOLD_PARTS`` of them.
FOLD_KEEPS = 2
FOLD_PARTS = 16
# Checkpoints of at most this many files are decoded whole on first use.
EAGER_ROWS = 1 << 16
# A bigger one's columns are streamed in batches of this many rows where a pass needs them once
# (the statistics a prune parses) and read row group by row group where a few rows are asked for.
BATCH_ROWS = 1 << 15
# Batches of a read of a few rows: every row before them in their row group is decoded too (no
# row selection in pyarrow's reader), a small batch at a time.
TAKE_BATCH = 4096
# After this many such reads of a few rows, the columns are decoded whole and kept instead.
LAZY_TAKES = 8

A = TypeVar("A", AddFile, RemoveFile)
S = TypeVar("S", bound="ActionSet[Any]")  # the set a builder makes: FileSet or RemoveSet


def release_memory() -> None:
    """Give the memory of a pass over a big checkpoint back to the system. Arrow's default
    allocator (mimalloc) keeps what a batch-by-batch read frees, ~2-3x the pass's largest
    batch, for the process's lifetime; the rows kept from the pass are far smaller."""
    pa.default_memory_pool().release_unused()


def _pairs(d: dict | None) -> list[tuple[str, Any]] | None:
    return None if d is None else list(d.items())


def _as_dict(v: Any) -> dict | None:
    return None if v is None else dict(v)


def _dv_json(dv: DeletionVector | None) -> dict | None:
    return dv.to_json() if dv is not None else None


def _dv_of(v: dict | None) -> DeletionVector | None:
    if v is None:
        return None
    return DeletionVector.from_json({k: x for k, x in v.items() if x is not None})


def conform(col: pa.ChunkedArray | pa.Array, t: pa.DataType) -> pa.ChunkedArray | pa.Array:
    """``col`` cast to ``t``; structs field by field, by name (a checkpoint another writer made
    may lack a field we know, e.g. ``maxRowIndex``, or hold one we do not)."""
    if col.type.equals(t):
        return col
    if pa.types.is_struct(t) and pa.types.is_struct(col.type):
        if isinstance(col, pa.ChunkedArray):
            return pa.chunked_array([conform(c, t) for c in col.chunks], t)
        have = dict(zip([col.type.field(i).name for i in range(col.type.num_fields)],
                        col.flatten(), strict=True))  # flatten: children at the struct's offset
        kids = [conform(have[f.name], f.type) if f.name in have else pa.nulls(len(col), f.type)
                for f in t]
        return pa.StructArray.from_arrays(kids, fields=list(t), mask=col.is_null())
    return col.cast(t)


def conform_columns(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s columns of ``schema`` (absent ones null), cast to its types: checkpoints other
    writers made may spell a type differently (large strings, non-nullable map values)."""
    cols = []
    for f in schema:
        if f.name in table.column_names:
            cols.append(conform(table.column(f.name), f.type))
        else:
            cols.append(pa.nulls(table.num_rows, f.type))
    return pa.table(cols, schema=schema)


class LazyRows:
    """Where the rows of an action column live in checkpoint Parquet files: per row group, the
    rows that hold the action. Fields are decoded one at a time, when first asked for."""

    whole_at = EAGER_ROWS  # a checkpoint this small is decoded whole on first use

    def __init__(self, column: str, schema: pa.Schema) -> None:
        self.column = column
        self.schema = schema
        self.parts: list[tuple[Any, int, Any]] = []  # (ParquetFile, row group, slice or indices)

    def add(self, pf: Any, group: int, valid: pa.Array) -> int:
        idx = pc.indices_nonzero(valid).to_numpy()
        if not len(idx):
            return 0
        sel: Any = slice(int(idx[0]), int(idx[-1]) + 1) if idx[-1] - idx[0] + 1 == len(idx) else idx
        self.parts.append((pf, group, sel))
        return len(idx)

    def fields(self, names: list[str]) -> dict[str, pa.ChunkedArray]:
        """The fields ``names`` of every located row, decoded by one read per row group."""
        chunks: dict[str, list[pa.Array]] = {n: [] for n in names}
        for pf, group, sel in self.parts:
            t = pf.schema_arrow.field(self.column).type
            present = [n for n in names if t.get_field_index(n) >= 0]
            count = sel.stop - sel.start if isinstance(sel, slice) else len(sel)
            got = {}
            if present:
                arr = pf.read_row_group(group, columns=[f"{self.column}.{n}"
                                                        for n in present]).column(self.column)
                for n in present:
                    i = arr.type.get_field_index(n)
                    kids = [c.field(i) for c in arr.chunks]
                    child = kids[0] if len(kids) == 1 else pa.chunked_array(
                        kids, arr.type.field(i).type).combine_chunks()
                    got[n] = (child.slice(sel.start, count) if isinstance(sel, slice)
                              else child.take(sel))
            for n in names:
                f = self.schema.field(n)
                child = got.get(n, pa.nulls(count, f.type))
                chunks[n].append(conform(child, f.type))
        return {n: pa.chunked_array(chunks[n], self.schema.field(n).type) for n in names}

    def counts(self) -> np.ndarray:
        """How many located rows each part holds."""
        return np.array([sel.stop - sel.start if isinstance(sel, slice) else len(sel)
                         for _, _, sel in self.parts], dtype=np.int64)

    def read(self, names: list[str], want: np.ndarray | None = None,
             batch_rows: int = BATCH_ROWS) -> Iterator[dict[str, pa.Array]]:
        """The fields ``names`` of the located rows (those at the sorted row numbers ``want``;
        all when None), in order, a Parquet batch at a time: nothing is kept, so a big column
        is never whole in memory."""
        ends = np.cumsum(self.counts())
        for part, (pf, group, sel) in enumerate(self.parts):
            start = int(ends[part - 1]) if part else 0
            if want is None:
                rows = (np.arange(sel.start, sel.stop, dtype=np.int64)
                        if isinstance(sel, slice) else np.asarray(sel, dtype=np.int64))
            else:
                lo, hi = np.searchsorted(want, [start, int(ends[part])])
                local = want[lo:hi] - start
                if not len(local):
                    continue
                rows = (local + sel.start if isinstance(sel, slice)
                        else np.asarray(sel, dtype=np.int64)[local])
            yield from self._read_group(pf, group, rows, names, batch_rows)

    def _read_group(self, pf: Any, group: int, rows: np.ndarray, names: list[str],
                    batch_rows: int) -> Iterator[dict[str, pa.Array]]:
        """The fields ``names`` of a row group's rows ``rows`` (sorted), batch by batch."""
        t = pf.schema_arrow.field(self.column).type
        present = [n for n in names if t.get_field_index(n) >= 0]

        def out(got: dict[str, pa.Array], count: int) -> dict[str, pa.Array]:
            return {n: conform(got[n], self.schema.field(n).type) if n in got
                    else pa.nulls(count, self.schema.field(n).type) for n in names}

        if not present:
            yield out({}, len(rows))
            return
        pos = 0
        for batch in pf.iter_batches(batch_size=batch_rows, row_groups=[group], use_threads=False,
                                     columns=[f"{self.column}.{n}" for n in present]):
            n = batch.num_rows
            lo, hi = np.searchsorted(rows, [pos, pos + n])
            if hi > lo:
                local = rows[lo:hi] - pos
                arr = batch.column(0)
                whole = int(local[-1] - local[0] + 1) == len(local)
                got = {}
                for name in present:
                    child = arr.field(arr.type.get_field_index(name))
                    got[name] = (child.slice(int(local[0]), len(local)) if whole
                                 else child.take(pa.array(local)))
                yield out(got, len(local))
            pos += n
            if hi >= len(rows):
                break


# each field of a row, from its action object (``ActionColumns``)
_ADD_FIELDS: dict[str, Callable[[Any], Any]] = {
    "path": lambda a: a.path,
    "partitionValues": lambda a: _pairs(a.partition_values),
    "size": lambda a: a.size,
    "modificationTime": lambda a: a.modification_time,
    "dataChange": lambda a: a.data_change,
    "stats": lambda a: a.stats,
    "tags": lambda a: _pairs(a.tags),
    "deletionVector": lambda a: _dv_json(a.deletion_vector),
    "baseRowId": lambda a: a.extra.get("baseRowId"),
    "defaultRowCommitVersion": lambda a: a.extra.get("defaultRowCommitVersion"),
    "clusteringProvider": lambda a: a.extra.get("clusteringProvider"),
}
_REMOVE_FIELDS: dict[str, Callable[[Any], Any]] = {
    "path": lambda r: r.path,
    "deletionTimestamp": lambda r: r.deletion_timestamp,
    "dataChange": lambda r: r.data_change,
    "extendedFileMetadata": lambda r: r.extended_file_metadata,
    "partitionValues": lambda r: _pairs(r.partition_values),
    "size": lambda r: r.size,
    "deletionVector": lambda r: _dv_json(r.deletion_vector),
}


class ActionColumns:
    """Rows given as action objects (a snapshot's overlay, a commit's files), each field made a
    column when first asked for: a prune needs two of eleven, and every new log version makes
    such a table in every client that reads it."""

    whole_at = 0  # field by field, always

    def __init__(self, rows: list[Any], kind: type[AddFile] | type[RemoveFile]) -> None:
        self.rows = rows
        self.schema = ADD_SCHEMA if kind is AddFile else REMOVE_SCHEMA
        self._get = _ADD_FIELDS if kind is AddFile else _REMOVE_FIELDS

    def values(self, name: str) -> list[Any]:
        get = self._get[name]
        return [get(a) for a in self.rows]

    def fields(self, names: list[str]) -> dict[str, pa.ChunkedArray]:
        return {n: pa.chunked_array([pa.array(self.values(n), self.schema.field(n).type)])
                for n in names}

    def array(self, name: str, idx: np.ndarray) -> pa.Array:
        """Field ``name`` of the rows at ``idx`` only."""
        get = self._get[name]
        return pa.array([get(self.rows[i]) for i in idx.tolist()], self.schema.field(name).type)


class Pieces:
    """A folded table's rows as rows of the tables it was folded from: ``parts`` laid end to
    end, its row ``i`` their row ``index[i]``. A fold copies nothing: a column is gathered when
    first asked for, a few rows from the parts that hold them, and what was derived from the
    parts' rows (their parsed statistics, ``ActionTable.cache``) is gathered, not derived again.
    The parts of a folded table's parts are its own: a fold of a fold adds one part, never a
    level."""

    whole_at = 0  # a column when asked for

    def __init__(self, parts: tuple[ActionTable[Any], ...], index: np.ndarray) -> None:
        self.parts = parts
        self.index = index
        self.starts = np.cumsum([0] + [p.num_rows for p in parts], dtype=np.int64)

    @property
    def rows(self) -> int:
        """Rows of the parts, the folded table's and those hidden since."""
        return int(self.starts[-1])

    def gather(self, values: list[Any]) -> Any:
        """What was derived per row of each part (an array, or a tuple of arrays: parsed
        bounds) as the folded table's, in the first part's types."""
        if isinstance(values[0], tuple):
            return tuple(self.gather(list(vs)) for vs in zip(*values, strict=True))
        t = values[0].type
        chunks = [c for a in values
                  for c in (a.chunks if isinstance(a, pa.ChunkedArray) else [a])]
        return pa.chunked_array([c.cast(t) for c in chunks], t).take(
            pa.array(self.index)).combine_chunks()

    def fields(self, names: list[str]) -> dict[str, pa.ChunkedArray]:
        return self.take(np.arange(len(self.index), dtype=np.int64), names)

    def values(self, name: str) -> list[Any]:
        got = [v for p in self.parts for v in p.values(name)]
        return [got[i] for i in self.index.tolist()]

    def actions(self, idx: np.ndarray) -> list[Any]:
        """The rows at ``idx`` as action objects, each part asked for the rows it holds."""
        at = self.index[idx]
        part = np.searchsorted(self.starts, at, side="right") - 1
        out: list[Any] = [None] * len(at)
        for k in np.unique(part).tolist():
            where = np.nonzero(part == k)[0]
            for i, a in zip(where.tolist(), self.parts[k].actions(at[where] - self.starts[k]),
                            strict=True):
                out[i] = a
        return out

    def take(self, idx: np.ndarray, names: list[str]) -> dict[str, pa.ChunkedArray]:
        """Fields ``names`` of the rows at ``idx``, each part asked for the rows it holds."""
        at = self.index[idx]
        part = np.searchsorted(self.starts, at, side="right") - 1
        order = np.argsort(part, kind="stable")
        tables = [self.parts[k].take(at[part == k] - self.starts[k], names)
                  for k in np.unique(part).tolist()]
        schema = pa.schema([self.parts[0].schema.field(n) for n in names])
        got = pa.concat_tables(tables) if tables else schema.empty_table()
        back = pa.array(np.argsort(order, kind="stable"))
        return {n: got.column(n).take(back) for n in names}


class ActionTable(Generic[A]):
    """Immutable rows of add (or remove) actions, one column per field, decoded lazily when
    they come from a checkpoint (a transaction that prunes nothing never decodes the paths
    or statistics of a million files).

    ``cache`` holds what is derived from the rows once and reused by every snapshot that
    shares the table (parsed statistics: ``lakevilla.scan.statcols``)."""

    def __init__(self, table: pa.Table | None, kind: type[A], *,
                 lazy: LazyRows | ActionColumns | Pieces | None = None,
                 num_rows: int | None = None, conformed: bool = False) -> None:
        # ``conformed``: ``table`` has exactly the schema's columns and types already (built
        # here or from tables that had); conforming costs more than building a few rows
        self.kind: type[A] = kind
        self.schema = ADD_SCHEMA if kind is AddFile else REMOVE_SCHEMA
        self._columns: dict[str, pa.ChunkedArray] = {}
        if table is not None:
            if not conformed:
                table = conform_columns(table, self.schema)
            self._columns = {n: table.column(n) for n in self.schema.names}
            num_rows = table.num_rows
        self._lazy = lazy
        # a folded table keeps what it was folded from after its columns are made: its parsed
        # statistics are gathered from theirs (``lakevilla.scan.statcols``)
        self.pieces = lazy if isinstance(lazy, Pieces) else None
        self._rows = int(num_rows or 0)
        self._takes = 0  # reads of a few rows from the checkpoint (``take``)
        self._taken: OrderedDict[tuple[bytes, tuple[str, ...]], dict[str, Any]] = OrderedDict()
        self.cache: dict[Any, Any] = {}
        self.lock = threading.RLock()

    @property
    def num_rows(self) -> int:
        return self._rows

    def column(self, name: str) -> pa.ChunkedArray:
        with self.lock:
            got = self._columns.get(name)
            if got is None:
                assert self._lazy is not None
                # a small table is decoded whole at once (one read per row group); a big one field
                # by field, as asked (pruning needs the statistics, not the paths, first)
                names = [n for n in self.schema.names if n not in self._columns] \
                    if self._rows <= self._lazy.whole_at else [name]
                self._columns.update(self._lazy.fields(names))
                got = self._columns[name]
                if isinstance(self._lazy, ActionColumns | Pieces) and len(self._columns) == len(
                        self.schema.names):
                    self._lazy = None  # every field is a column: the objects are not needed

            return got

    def values(self, name: str) -> list[Any]:
        """Column ``name`` as Python values: read from the objects themselves while the rows
        are objects and the column is not made yet (a prune of a small table wants the
        statistics texts, not an Arrow column of them)."""
        with self.lock:
            if name not in self._columns and isinstance(self._lazy, ActionColumns | Pieces):
                return self._lazy.values(name)
        return self.column(name).to_pylist()

    @property
    def table(self) -> pa.Table:
        return pa.table({n: self.column(n) for n in self.schema.names}, schema=self.schema)

    def _streams(self, name: str) -> bool:
        """Whether column ``name`` is read from the checkpoint as needed rather than kept."""
        return (isinstance(self._lazy, LazyRows) and self._rows > EAGER_ROWS
                and name not in self._columns)

    def batches(self, name: str, rows: int = BATCH_ROWS) -> Iterator[pa.Array | pa.ChunkedArray]:
        """Column ``name`` in row order, in batches of at most ``rows``. A big checkpoint's
        column not decoded yet is decoded a batch at a time and not kept: a prune keeps the
        bounds it parses from the statistics, not a million JSON strings."""
        with self.lock:
            streams = self._streams(name)
            it = (self._lazy.read([name], batch_rows=rows)
                  if streams and isinstance(self._lazy, LazyRows) else None)
        if it is None:
            col = self.column(name)
            for start in range(0, len(col), rows):
                yield col.slice(start, rows)
            return
        while True:
            with self.lock:  # one reader of the checkpoint's Parquet at a time
                got = next(it, None)
            if got is None:
                return
            yield got[name]

    def take(self, indices: Any, names: list[str] | None = None) -> pa.Table:
        """The rows at ``indices`` (fields ``names``, all when None). A big checkpoint reads
        only the row groups holding them, until asked ``LAZY_TAKES`` times; then it decodes
        the columns whole and keeps them. The last few such reads are kept: a statement
        prunes to the same files more than once (its scan, its update, its conflict check)."""
        idx = np.asarray(indices, dtype=np.int64)
        names = list(self.schema.names) if names is None else names
        got: dict[str, pa.Array | pa.ChunkedArray] = {}
        with self.lock:
            pieces = self._lazy if isinstance(self._lazy, Pieces) else None
            unmade = [n for n in names if n not in self._columns]
            if pieces is not None and unmade:  # columns not made yet: the few rows from the parts
                got.update(pieces.take(idx, unmade))
            lazy = [n for n in names if self._streams(n)]
            key = (idx.tobytes(), tuple(lazy))
            if lazy and key in self._taken:  # the same few rows again (a scan, then its update)
                self._taken.move_to_end(key)
                got.update(self._taken[key])
            elif lazy and self._takes < LAZY_TAKES and len(idx) <= BATCH_ROWS:
                assert isinstance(self._lazy, LazyRows)
                self._takes += 1
                order = np.argsort(idx, kind="stable")
                parts = list(self._lazy.read(lazy, idx[order], batch_rows=TAKE_BATCH))
                back = pa.array(np.argsort(order, kind="stable"))
                for n in lazy:
                    col = pa.chunked_array([p[n] for p in parts], self.schema.field(n).type)
                    got[n] = col.take(back)
                del parts
                release_memory()
                self._taken[key] = dict(got)
                if len(self._taken) > LAZY_TAKES:
                    self._taken.popitem(last=False)
            if isinstance(self._lazy, ActionColumns):  # the rows asked for, not whole columns
                got.update({n: self._lazy.array(n, idx) for n in unmade})
        for n in names:
            if n not in got:
                got[n] = self.column(n).take(idx)
        return pa.table(got, schema=pa.schema([self.schema.field(n) for n in names]))

    @property
    def paths(self) -> pa.ChunkedArray:
        return self.column("path")

    @classmethod
    def from_actions(cls, actions: Iterable[A], kind: type[A]) -> ActionTable[A]:
        rows = list(actions)
        if not rows:
            return cls(ADD_SCHEMA.empty_table() if kind is AddFile else REMOVE_SCHEMA.empty_table(),
                       kind, conformed=True)
        return cls(None, kind, lazy=ActionColumns(rows, kind), num_rows=len(rows))

    @classmethod
    def folded(cls, base: ActionTable[A], live: np.ndarray, overlay: ActionTable[A]
               ) -> ActionTable[A]:
        """The rows of ``base`` at ``live``, then those of ``overlay``, as one table. Nothing is
        copied (``Pieces``) until the parts would hold more than ``FOLD_KEEPS`` times the rows
        they serve, or more than ``FOLD_PARTS`` parts: then the rows of all but ``overlay`` are
        made one table first, with the parsed statistics every part of them has."""
        parts: tuple[ActionTable[Any], ...]
        if base.pieces is not None:
            parts, index = base.pieces.parts, base.pieces.index[live]
        else:
            parts, index = (base,), np.asarray(live, dtype=np.int64)
        old, new = Pieces(parts, index), overlay.num_rows
        if len(parts) >= FOLD_PARTS or old.rows + new > FOLD_KEEPS * (len(index) + new) + FOLD_AT:
            parts, index = (cls._made(old, base),), np.arange(len(index), dtype=np.int64)
        if new:
            start = sum(p.num_rows for p in parts)
            parts = (*parts, overlay)
            index = np.concatenate([index, np.arange(start, start + new, dtype=np.int64)])
        return cls(None, base.kind, lazy=Pieces(parts, index), num_rows=len(index))

    @classmethod
    def _made(cls, pieces: Pieces, like: ActionTable[A]) -> ActionTable[A]:
        """``pieces`` as a table of its own, with what every part derived from its rows."""
        out = cls(pa.table(pieces.fields(list(like.schema.names)), schema=like.schema), like.kind,
                  conformed=True)
        caches = []
        for p in pieces.parts:
            with p.lock:
                caches.append(dict(p.cache))
        shared = set.intersection(*[set(c) for c in caches])
        out.cache = {k: pieces.gather([c[k] for c in caches]) for k in shared}
        return out

    def actions(self, indices: Any = None) -> list[A]:
        """The rows at ``indices`` (all when None) as action objects."""
        with self.lock:
            lazy = self._lazy
        if isinstance(lazy, ActionColumns):  # the objects themselves, as an overlay hands out
            return list(lazy.rows) if indices is None else [
                lazy.rows[i] for i in np.asarray(indices, dtype=np.int64).tolist()]
        if isinstance(lazy, Pieces) and indices is not None:
            return lazy.actions(np.asarray(indices, dtype=np.int64))
        t = self.table if indices is None else self.take(indices)
        rows = t.to_pylist()
        out: list[Any]  # AddFile or RemoveFile as ``kind`` says (see ``from_actions``)
        if self.kind is AddFile:
            out = [AddFile(path=r["path"], size=int(r["size"] or 0),
                           partition_values=_as_dict(r["partitionValues"]) or {},
                           modification_time=int(r["modificationTime"] or 0),
                           data_change=(bool(r["dataChange"]) if r["dataChange"] is not None
                                        else True),
                           stats=r["stats"], tags=_as_dict(r["tags"]),
                           deletion_vector=_dv_of(r["deletionVector"]),
                           extra={k: r[k] for k in ADD_EXTRA if r[k] is not None})
                   for r in rows]
            return out
        out = [RemoveFile(path=r["path"], deletion_timestamp=r["deletionTimestamp"],
                          data_change=(bool(r["dataChange"]) if r["dataChange"] is not None
                                       else True),
                          partition_values=_as_dict(r["partitionValues"]), size=r["size"],
                          extended_file_metadata=r["extendedFileMetadata"],
                          deletion_vector=_dv_of(r["deletionVector"])) for r in rows]
        return out

    def index_of(self, paths: Iterable[str]) -> dict[str, int]:
        """Row index of each of ``paths`` that the table holds (one vectorised pass)."""
        want = pa.array(list(dict.fromkeys(paths)), pa.string())
        if not len(want) or not self.num_rows:
            return {}
        hit = pc.is_in(self.paths, value_set=want)
        idx = pc.indices_nonzero(hit).to_numpy()
        found = self.paths.take(idx).to_pylist()
        return dict(zip(found, idx.tolist(), strict=True))


def _empty(kind: type[A]) -> ActionTable[A]:
    return ActionTable.from_actions([], kind)


class ActionSet(Mapping[str, A]):
    """Live actions: the rows of ``base`` whose path ``hidden`` does not name, plus ``extra``."""

    def __init__(self, base: ActionTable[A] | None, hidden: frozenset[str], extra: dict[str, A],
                 kind: type[A]) -> None:
        self.base: ActionTable[A] = base if base is not None else _empty(kind)
        self.hidden = hidden
        self.extra: dict[str, A] = extra
        self.kind: type[A] = kind
        self._live: np.ndarray | None = None
        self._overlay: ActionTable[A] | None = None
        self._lock = threading.Lock()

    # -- the rows of the base that are live ------------------------------------------
    def live_indices(self) -> np.ndarray:
        """Indices of the base rows still live (one vectorised pass, cached)."""
        with self._lock:
            if self._live is None:
                n = self.base.num_rows
                if not self.hidden or not n:
                    self._live = np.arange(n, dtype=np.int64)
                else:
                    gone = pc.is_in(self.base.paths,
                                    value_set=pa.array(list(self.hidden), pa.string()))
                    self._live = pc.indices_nonzero(pc.invert(gone)).to_numpy().astype(np.int64)
            return self._live

    def overlay(self) -> ActionTable[A]:
        """``extra`` as a table (for vectorised work over the whole set)."""
        with self._lock:
            if self._overlay is None:
                self._overlay = ActionTable.from_actions(self.extra.values(), self.kind)
            return self._overlay

    def table(self) -> pa.Table:
        """Every live action as one table (the checkpoint writer's input)."""
        base = self.base.table
        if self.hidden:
            base = base.take(self.live_indices())
        return pa.concat_tables([base, self.overlay().table]) if self.extra else base

    def paths(self) -> list[str]:
        return self.table().column("path").to_pylist()

    def deletion_vectors(self) -> list[DeletionVector]:
        """The deletion vectors the live actions carry (one vectorised pass to find them)."""
        col = self.table().column("deletionVector")
        if col.null_count == len(col):
            return []
        got = col.filter(pc.is_valid(col)).to_pylist()
        return [dv for v in got if (dv := _dv_of(v)) is not None]

    def select(self, base_indices: Iterable[int], extra: Iterable[A] = ()) -> list[A]:
        """Actions of the base rows at ``base_indices`` (hidden ones dropped) and ``extra``."""
        idx = np.fromiter(base_indices, dtype=np.int64)
        out: list[A] = []
        if len(idx):
            got = self.base.actions(idx)
            out = [a for a in got if a.path not in self.hidden] if self.hidden else got
        out.extend(extra)
        return out

    def lookup(self, paths: Iterable[str]) -> dict[str, A]:
        """The live actions of ``paths`` (missing ones left out)."""
        paths = list(paths)
        out = {p: self.extra[p] for p in paths if p in self.extra}
        rest = [p for p in paths if p not in out and p not in self.hidden]
        if rest:
            idx = self.base.index_of(rest)
            if idx:
                for a in self.base.actions(np.fromiter(idx.values(), dtype=np.int64)):
                    out[a.path] = a
        return out

    # -- Mapping ------------------------------------------------------------------
    def __getitem__(self, path: str) -> A:
        got = self.lookup([path])
        if path not in got:
            raise KeyError(path)
        return got[path]

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and bool(self.lookup([path]))

    def __len__(self) -> int:
        return len(self.live_indices()) + len(self.extra)

    def __iter__(self) -> Iterator[str]:
        yield from self.base.paths.take(self.live_indices()).to_pylist()
        yield from self.extra

    def values(self) -> list[A]:  # type: ignore[override]  # a list, built in one pass
        return self.select(self.live_indices(), self.extra.values())

    def items(self) -> list[tuple[str, A]]:  # type: ignore[override]  # a list, as values()
        return [(a.path, a) for a in self.values()]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    # unhashable (it defines __eq__), said explicitly; typeshed declares __hash__ a method
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ActionSet({len(self)} {self.kind.__name__})"


class FileSet(ActionSet[AddFile]):
    """A snapshot's live data files."""

    def __init__(self, base: ActionTable[AddFile] | None = None,
                 hidden: frozenset[str] = frozenset(),
                 extra: dict[str, AddFile] | None = None) -> None:
        super().__init__(base, hidden, dict(extra or {}), AddFile)

    @classmethod
    def of(cls, adds: Iterable[AddFile]) -> FileSet:
        return cls(None, frozenset(), {a.path: a for a in adds})

class RemoveSet(ActionSet[RemoveFile]):
    """A snapshot's tombstones (removed files still within retention)."""

    def __init__(self, base: ActionTable[RemoveFile] | None = None,
                 hidden: frozenset[str] = frozenset(),
                 extra: dict[str, RemoveFile] | None = None) -> None:
        super().__init__(base, hidden, dict(extra or {}), RemoveFile)

    def table_kept(self, keep_after_ms: int, now_ms: int) -> pa.Table:
        """Tombstones deleted after ``keep_after_ms`` (those without a timestamp count as now)."""
        t = self.table()
        ts = t.column("deletionTimestamp")
        ts = pc.if_else(pc.fill_null(pc.equal(ts, 0), True), now_ms, ts)
        return t.filter(pc.greater(ts, keep_after_ms))


class SetBuilder(Generic[A, S]):
    """Mutable replay state of an ``ActionSet`` (``S``: the set class that ``make`` builds)."""

    def __init__(self, kind: type[A], start: ActionSet[A] | None, make: Callable[..., S]) -> None:
        self.kind: type[A] = kind
        self.make = make
        self.base: ActionTable[A] | None = start.base if start is not None else None
        self.hidden: set[str] = set(start.hidden) if start is not None else set()
        self.extra: dict[str, A] = dict(start.extra) if start is not None else {}

    def reset(self, base: ActionTable[A] | None) -> None:
        self.base, self.hidden, self.extra = base, set(), {}

    def put(self, action: A) -> None:
        self.extra[action.path] = action
        self.hidden.add(action.path)

    def drop(self, path: str) -> None:
        self.extra.pop(path, None)
        self.hidden.add(path)

    def get(self, path: str) -> A | None:
        """The live action of ``path`` (None: none)."""
        if path in self.extra:
            return self.extra[path]
        if path in self.hidden or self.base is None:
            return None
        idx = self.base.index_of([path])
        return self.base.actions(np.array([idx[path]], dtype=np.int64))[0] if idx else None

    def build(self) -> S:
        out = self.make(self.base, frozenset(self.hidden), dict(self.extra))
        if len(self.extra) + len(self.hidden) > max(FOLD_AT,
                                                    (self.base.num_rows if self.base else 0) // 8):
            # one table again: lookups stay vectorised
            folded = ActionTable.folded(out.base, out.live_indices(), out.overlay())
            self.reset(folded)
            out = self.make(folded, frozenset(), {})
        return out
