"""``lake.changes``: the change rows of several tables between two consistent cuts.

Each table's versions in (since, until] are read commit by commit, with Delta's rule for a
change data feed: a commit that has ``cdc`` actions is represented by those files alone (their
``_change_type`` column says insert, delete, update_preimage or update_postimage). Any other
commit is derived from its data-changing file actions: the live rows of the files it removed
that its added files do not hold (as a multiset) are deletes, the added files' rows the
removed ones did not hold are inserts (deletion vectors respected on both). So an update shows
as a delete of the old row and an insert of the new one, rows a rewrite carried over unchanged
do not show, and a file re-added with a larger deletion vector gives the rows it drops.
Compaction (``dataChange: false``) changes nothing.

One pyarrow Table per table (the tables' columns differ): the row's columns as of ``until``,
then ``_change_type``, ``_commit_version``, ``_commit_timestamp`` (the version's time, as
``lake.at`` reads it) and ``_lakevilla_txn`` (the lakevilla transaction that wrote it; null for
other writers). Because both ends are consistent cuts, a multi-table transaction's changes are
in the range on all of its tables or on none.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..delta import column_mapping
from ..delta.actions import AddFile, CdcFile, Commit, RemoveFile
from ..delta.log import DeltaLog
from ..delta.values import typed_array
from ..engines.api import TableContext, data_file_key
from ..errors import InvalidArgumentError, MomentTooOldError, TableNotFoundError
from ..scan import duck
from ..store import ObjectStore
from ..vocab import CommitInfo
from .cut import TableLog, load, moment_text
from .view import LakeAt

CHANGE_TYPE = "_change_type"
META = [(CHANGE_TYPE, pa.string()), ("_commit_version", pa.int64()),
        ("_commit_timestamp", pa.timestamp("ms", tz="UTC")), ("_lakevilla_txn", pa.string())]


def _version(view: LakeAt | None, table: str) -> int:
    if view is None:
        return -1
    try:
        return view.version(table)
    except TableNotFoundError:
        return -1




def _logical(ctx: TableContext, t: pa.Table, pv: dict[str, Any]
             ) -> tuple[pa.Table, dict[str, Any]]:
    """A column-mapped table's cdc file (``t``, read as written) under logical names, and its
    partition values keyed by logical name."""
    schema = ctx.schema
    data = [f.name for f in schema if f.name not in ctx.partition_columns]
    read = column_mapping.file_schema(schema, data, t.schema)
    cols = [t.column(n).cast(f.type) if n in t.column_names else pa.nulls(t.num_rows, f.type)
            for n, f in zip(read.names, read, strict=True)]
    rows = column_mapping.relabel(pa.Table.from_arrays(cols, schema=read),
                                  pa.schema([schema.field(c) for c in data]))
    rows = rows.append_column(CHANGE_TYPE, t.column(CHANGE_TYPE))
    return rows, {c: pv.get(column_mapping.physical_key(schema, c)) for c in
                  ctx.partition_columns}


class _TableChanges:
    """The change rows of one table's commits, read through the lake's engine."""

    def __init__(self, store: ObjectStore, root_uri: str, engine: Any, ctx: TableContext) -> None:
        self.store, self.root_uri, self.engine, self.ctx = store, root_uri, engine, ctx
        self.seen: dict[tuple[str, str | None], pa.Table] = {}

    def as_add(self, r: RemoveFile) -> AddFile:
        """The logical file a remove names, to read its rows (a remove need not say its size)."""
        size = r.size if r.size is not None else self.store.head(
            data_file_key(self.ctx.name, r.path, self.root_uri)).size
        return AddFile(path=r.path, size=int(size), partition_values=dict(r.partition_values
                                                                           or {}),
                       deletion_vector=r.deletion_vector)

    def rows(self, files: list[AddFile]) -> pa.Table:
        """The live rows of ``files``. A file added by one commit and removed by a later one
        in the range is read once (kept by path and deletion vector: a logical file)."""
        parts = []
        for f in files:
            key = (f.path, f.dv_id)
            if key not in self.seen:
                got = self.engine.scan(self.ctx, [f], None, None)
                self.seen[key] = got if isinstance(got, pa.Table) else got.toArrow()  # Spark
            parts.append(self.seen[key])
        return pa.concat_tables(parts, promote_options="permissive")

    def cdc(self, action: CdcFile) -> pa.Table:
        key = data_file_key(self.ctx.name, action.path, self.root_uri)
        t = pq.read_table(pa.BufferReader(self.store.get(key).data))
        pv = dict(action.partition_values or {})
        if column_mapping.mode_of(self.ctx.schema) != "none":  # physical names in the file
            t, pv = _logical(self.ctx, t, pv)
        for f in self.ctx.schema:
            if f.name not in t.column_names and f.name in pv:
                t = t.append_column(f.name, typed_array([pv[f.name]] * t.num_rows, f.type)
                                    if pv[f.name] is not None
                                    else pa.nulls(t.num_rows, f.type))
        return t

    def of_commit(self, c: Commit) -> tuple[list[pa.Table], pa.Table | None,
                                            pa.Table | None]:
        """A commit's ``cdc`` rows (typed), else the rows of the files it removed and added."""
        if c.cdc:
            return [self.cdc(a) for a in c.cdc], None, None
        old = [self.as_add(r) for r in c.removes if r.data_change]
        new = [a for a in c.adds if a.data_change]
        return [], self.rows(old) if old else None, self.rows(new) if new else None


def _typed(t: pa.Table, kind: str) -> pa.Table:
    return t.append_column(CHANGE_TYPE, pa.array([kind] * t.num_rows, pa.string()))


def _stamp(t: pa.Table, v: int, when: float, txn: str | None) -> pa.Table:
    n = t.num_rows
    t = t.append_column(META[1][0], pa.array([v] * n, pa.int64()))
    t = t.append_column(META[2][0], pa.array([int(when * 1000)] * n, pa.timestamp("ms", tz="UTC")))
    return t.append_column(META[3][0], pa.array([txn] * n, pa.string()))


def _conformed(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """``parts`` as one table of ``schema``: older files may lack columns added since (null
    there, as a read of them shows)."""
    if not parts:
        return schema.empty_table()
    got = pa.concat_tables([t.select([n for n in schema.names if n in t.column_names])
                            for t in parts], promote_options="permissive")
    for f in schema:
        if f.name not in got.column_names:
            got = got.append_column(f, pa.nulls(got.num_rows, f.type))
    return got.select(schema.names).cast(schema)


def table_changes(tl: TableLog, reader: _TableChanges, lo: int, hi: int) -> pa.Table:
    """The change rows of versions (lo, hi]. Removed and added rows of every commit are
    compared at once: one multiset difference each way over (row, commit), so a row a commit
    removed and added again unchanged cancels out within that commit only."""
    schema = pa.schema([*reader.ctx.schema, *META])
    plain = pa.schema([f for f in schema if f.name != CHANGE_TYPE])
    typed, before, after = [], [], []
    for v in range(lo + 1, hi + 1):
        c = tl.commits[v]
        info = CommitInfo.of(c.lakevilla)
        txn = info.txn if info is not None else None
        cdc, old, new = reader.of_commit(c)
        typed += [_stamp(t, v, tl.times[v], txn) for t in cdc]
        before += [_stamp(old, v, tl.times[v], txn)] if old is not None else []
        after += [_stamp(new, v, tl.times[v], txn)] if new is not None else []
    o, n = _conformed(before, plain), _conformed(after, plain)
    pair = {"o": o, "n": n}
    gone = duck.query("SELECT * FROM o EXCEPT ALL SELECT * FROM n", pair) if n.num_rows else o
    came = duck.query("SELECT * FROM n EXCEPT ALL SELECT * FROM o", pair) if o.num_rows else n
    out = [*typed, _typed(gone.cast(plain), "delete"), _typed(came.cast(plain), "insert")]
    return _conformed(out, schema).sort_by([("_commit_version", "ascending")])


def changes(log_for: Callable[[str], DeltaLog], store: ObjectStore, root_uri: str, engine: Any,
            tables: list[str], since: LakeAt | None, until: LakeAt,
            snapshot: Callable[..., Any]) -> dict[str, pa.Table]:
    """``Lake.changes``: see the module docstring."""
    if (since is not None and since.moment is not None and until.moment is not None
            and since.moment > until.moment):
        raise InvalidArgumentError(f"since is after until ({since.moment.isoformat()} > "
                                   f"{until.moment.isoformat()})")
    out: dict[str, pa.Table] = {}
    for name in tables:
        lo, hi = _version(since, name), _version(until, name)
        if hi < 0:
            raise TableNotFoundError(f"table {name!r} did not exist as of {until!r}")
        if lo > hi:
            raise InvalidArgumentError(f"since is after until for table {name!r} (version {lo} "
                                       f"> {hi})")
        log = log_for(name)
        tl = load(log)
        assert tl is not None
        if lo < tl.start:
            first = tl.times.get(tl.start + 1)
            raise MomentTooOldError(
                f"the changes of table {name!r} after version {lo} need commits that log clean-up "
                "removed; the oldest moment changes can be read from is "
                f"{moment_text(first) if first is not None else 'none'}",
                oldest=dt.datetime.fromtimestamp(first, dt.UTC) if first is not None else None)
        ctx = TableContext.of(name, store, root_uri, snapshot(name, hi))
        out[name] = table_changes(tl, _TableChanges(store, root_uri, engine, ctx), lo, hi)
    return out
