"""``lake.changes``: the change rows of several tables between two consistent cuts.

Each table's versions in (since, until] are walked commit by commit and handed to the lake's
engine as files (``engines.api.CommitFiles``), which reads the rows where it keeps rows
(``Engine.change_rows``: a pyarrow Table on the embedded engine, a DataFrame on Spark), by
Delta's rule for a change data feed: a commit that has ``cdc`` actions is represented by those
files alone; any other commit is derived from its data-changing file actions (the live rows of
the files it removed that its added files do not hold are deletes, and the reverse inserts).
Compaction (``dataChange: false``) changes nothing.

One result per table (the tables' columns differ): the row's columns as of ``until``, then
``_change_type``, ``_commit_version``, ``_commit_timestamp`` (the version's time, as
``lake.at`` reads it) and ``_lakevilla_txn`` (the lakevilla transaction that wrote it; null for
other writers). Because both ends are consistent cuts, a multi-table transaction's changes are
in the range on all of its tables or on none.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from ..delta.actions import AddFile, Commit, RemoveFile
from ..delta.log import DeltaLog
from ..engines.api import CHANGE_META, CommitFiles, TableContext, data_file_key
from ..errors import InvalidArgumentError, MomentTooOldError, TableNotFoundError
from ..store import ObjectStore
from ..vocab import CommitInfo
from .cut import TableLog, load, moment_text
from .view import LakeAt

CHANGE_TYPE = CHANGE_META[0][0]
META = CHANGE_META


def _version(view: LakeAt | None, table: str) -> int:
    if view is None:
        return -1
    try:
        return view.version(table)
    except TableNotFoundError:
        return -1


def _as_add(store: ObjectStore, ctx: TableContext, r: RemoveFile) -> AddFile:
    """The logical file a remove names, to read its rows (a remove need not say its size)."""
    size = r.size if r.size is not None else store.head(
        data_file_key(ctx.name, r.path, ctx.lake_uri)).size
    return AddFile(path=r.path, size=int(size), partition_values=dict(r.partition_values or {}),
                   deletion_vector=r.deletion_vector)


def commit_files(store: ObjectStore, ctx: TableContext, tl: TableLog, lo: int,
                 hi: int) -> list[CommitFiles]:
    """The files of versions (lo, hi] a change feed reads, each with its version's stamp."""
    out = []
    for v in range(lo + 1, hi + 1):
        c: Commit = tl.commits[v]
        info = CommitInfo.of(c.lakevilla)
        txn = info.txn if info is not None else None
        if c.cdc:
            out.append(CommitFiles(v, tl.times[v], txn, cdc=tuple(c.cdc)))
            continue
        out.append(CommitFiles(v, tl.times[v], txn,
                               removed=tuple(_as_add(store, ctx, r) for r in c.removes
                                             if r.data_change),
                               added=tuple(a for a in c.adds if a.data_change)))
    return out


def changes(log_for: Callable[[str], DeltaLog], store: ObjectStore, root_uri: str, engine: Any,
            tables: list[str], since: LakeAt | None, until: LakeAt,
            snapshot: Callable[..., Any]) -> dict[str, Any]:
    """``Lake.changes``: see the module docstring."""
    if (since is not None and since.moment is not None and until.moment is not None
            and since.moment > until.moment):
        raise InvalidArgumentError(f"since is after until ({since.moment.isoformat()} > "
                                   f"{until.moment.isoformat()})")
    out: dict[str, Any] = {}
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
        out[name] = engine.change_rows(ctx, commit_files(store, ctx, tl, lo, hi))
    return out
