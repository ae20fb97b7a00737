"""DELETE, UPDATE and MERGE by deletion vectors (on tables that ask for them); shared by both
engines, which only compute which rows go.

A file a statement changes is not rewritten: its matched rows are marked deleted by a new
deletion vector (the old one's rows and the new ones), logged as ``remove (path, old DV)`` and
``add (path, new DV)`` in the same commit; updated rows are written as new files. A file whose
live rows all go is removed outright. A DV is inline (in the log) up to
``deletion_vectors.INLINE_MAX`` bytes; the larger DVs of a statement go to one DV file of the
table (``deletion_vectors.build``), which the add names and which is accounted as the add's
written file (``AddFile.written_files``: undo, redo garbage and a dropped statement delete it,
never the marked data file). Statistics stay the file's (they count every physical row) and are
marked not tight, as Delta asks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from ..delta import deletion_vectors
from ..delta.actions import AddFile
from ..scan import expressions as E
from . import change_data
from .api import RewriteResult, TableContext, data_file_key

Selected = tuple[AddFile, pa.Table, pa.Array, int]  # a file, its live rows, the match, hits
Marks = tuple[AddFile, int, np.ndarray]  # a file, its live rows, the indexes in it that go


class Rewriter(Protocol):
    """What this needs of the embedded engine."""

    def _rewritten(self, ctx: TableContext, selected: list[Selected],
                   assignments: dict[str, E.Checked] | None) -> list[tuple[AddFile, pa.Table, int]]:
        ...

    def split_by_partition(self, ctx: TableContext,
                           table: pa.Table) -> list[tuple[pa.Table, dict[str, str | None]]]: ...

    def write_all(self, ctx: TableContext, jobs: list[tuple[pa.Table, dict]]) -> list[AddFile]: ...


def loose_stats(stats: str | None) -> str | None:
    """The file's statistics, marked as bounds that may be wider than its live rows."""
    if not stats:
        return stats
    try:
        d: dict[str, Any] = json.loads(stats)
    except ValueError:
        return stats
    d["tightBounds"] = False
    return json.dumps(d, separators=(",", ":"))


def _gone(ctx: TableContext, add: AddFile) -> np.ndarray:
    """The rows of ``add``'s file its DV deletes (none without one)."""
    if add.deletion_vector is None:
        return np.empty(0, np.int64)
    return deletion_vectors.deleted_rows(ctx.store, ctx.name, ctx.lake_uri,
                                         add.deletion_vector, add.path)


def in_file(ctx: TableContext, add: AddFile, live: int, places: np.ndarray) -> np.ndarray:
    """The indexes in ``add``'s file of the ``places``-th of its ``live`` rows (the live rows
    are the file's rows in order, less those its DV deletes)."""
    gone = _gone(ctx, add)
    keep = np.ones(live + len(gone), dtype=bool)
    keep[gone] = False
    return np.flatnonzero(keep)[places]


def mark(ctx: TableContext, marks: list[Marks],
         write: Callable[[], list[AddFile]]) -> RewriteResult:
    """Remove every file of ``marks`` (a file, its live rows, the indexes in the file of those
    that go); add back, with a new DV (the old one's rows and these), each that keeps live rows.
    ``write`` writes the statement's new rows first (it checks the table's rules before any
    write); the DV file follows, and if it fails the new files are deleted again."""
    res = RewriteResult()
    partial = [(add, hit) for add, live, hit in marks if len(np.unique(hit)) < live]
    res.removed = [add for add, _, _ in marks]
    rows = [np.concatenate([_gone(ctx, add), hit]) for add, hit in partial]  # a bitmap: the union
    res.added = write()
    try:
        built = deletion_vectors.build(ctx.store, ctx.name, rows)
    except BaseException:
        for a in res.added:  # best effort: no version references them
            with contextlib.suppress(Exception):
                ctx.store.delete(data_file_key(ctx.name, a.path, ctx.lake_uri))
        raise
    res.added += [dataclasses.replace(add, deletion_vector=dv, stats=loose_stats(add.stats),
                                      data_change=True)
                  for (add, _), dv in zip(partial, built.dvs, strict=True)]
    return res


def rewrite(engine: Rewriter, ctx: TableContext, selected: list[Selected],
            assignments: dict[str, E.Checked] | None) -> RewriteResult:
    """A DELETE or UPDATE of the ``selected`` files' matched rows, by DVs."""
    changes = change_data.matched(ctx, selected, assignments is not None)
    marks: list[Marks] = []
    updated: list[Selected] = []  # the updated rows, to write anew
    hits_total = 0
    for add, table, mask, hits in selected:
        places = np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool))
        marks.append((add, table.num_rows, in_file(ctx, add, table.num_rows, places)))
        hits_total += hits
        if assignments is not None:
            updated.append((add, table.filter(mask), pa.array(np.ones(hits, bool)), hits))
    post = ctx.write_cdf and assignments is not None  # the updated rows after, too

    def write() -> list[AddFile]:
        jobs = []
        for _add, new, _hits in engine._rewritten(ctx, updated, assignments) if updated else []:
            jobs.extend(engine.split_by_partition(ctx, new))
            changes.extend([(new, change_data.POSTIMAGE)] if post else [])
        return engine.write_all(ctx, jobs)

    res = mark(ctx, marks, write)
    res.rows = hits_total
    res.changes = changes
    return res
