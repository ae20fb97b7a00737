"""DELETE and UPDATE by deletion vectors (the embedded engine, on tables that ask for them).

A file a statement changes is not rewritten: its matched rows are marked deleted by a new
deletion vector (the old one's rows and the new ones), logged as ``remove (path, old DV)`` and
``add (path, new DV)`` in the same commit; an UPDATE writes only its updated rows, as a new
file. A file whose live rows all go is removed outright. The DVs are inline (in the log): a DV
too large for that (``deletion_vectors.INLINE_MAX``) falls back to rewriting its file, so no
DV file of ours ever needs accounting. Statistics stay the file's (they count every physical
row) and are marked not tight, as Delta asks.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from ..delta import deletion_vectors
from ..delta.actions import AddFile
from ..scan import expressions as E
from . import change_data
from .api import RewriteResult, TableContext

Selected = tuple[AddFile, pa.Table, pa.Array, int]  # a file, its live rows, the match, hits


class Rewriter(Protocol):
    """What this needs of the embedded engine."""

    def _rewritten(self, ctx: TableContext, selected: list[Selected],
                   assignments: dict[str, E.Checked] | None) -> list[tuple[AddFile, pa.Table, int]]:
        ...

    def split_by_partition(self, ctx: TableContext,
                           table: pa.Table) -> list[tuple[pa.Table, dict[str, str | None]]]: ...

    def write_all(self, ctx: TableContext, jobs: list[tuple[pa.Table, dict]]) -> list[AddFile]: ...


def _loose(stats: str | None) -> str | None:
    """The file's statistics, marked as bounds that may be wider than its live rows."""
    if not stats:
        return stats
    try:
        d: dict[str, Any] = json.loads(stats)
    except ValueError:
        return stats
    d["tightBounds"] = False
    return json.dumps(d, separators=(",", ":"))


def _marked(ctx: TableContext, add: AddFile, table: pa.Table, mask: pa.Array) -> AddFile | None:
    """``add`` with its matched rows deleted too (None: the DV would not fit inline)."""
    gone = (deletion_vectors.deleted_rows(ctx.store, ctx.name, ctx.lake_uri,
                                          add.deletion_vector, add.path)
            if add.deletion_vector is not None else np.empty(0, np.int64))
    # the live rows are the file's rows in order, less the deleted: their indexes in the file
    keep = np.ones(table.num_rows + len(gone), dtype=bool)
    keep[gone] = False
    hit = np.flatnonzero(keep)[np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)]
    dv = deletion_vectors.inline(np.concatenate([gone, hit]))  # a bitmap: the union
    if dv is None:
        return None
    return dataclasses.replace(add, deletion_vector=dv, stats=_loose(add.stats), data_change=True)


def rewrite(engine: Rewriter, ctx: TableContext, selected: list[Selected],
            assignments: dict[str, E.Checked] | None) -> RewriteResult:
    res = RewriteResult(changes=change_data.matched(ctx, selected, assignments is not None))
    whole: list[Selected] = []  # files rewritten after all (their DV would not fit inline)
    updated: list[Selected] = []  # the updated rows of the files marked, to write anew
    for add, table, mask, hits in selected:
        if hits < table.num_rows:
            marked = _marked(ctx, add, table, mask)
            if marked is None:
                whole.append((add, table, mask, hits))
                continue
            res.added.append(marked)
        res.removed.append(add)
        res.rows += hits
        if assignments is not None:
            updated.append((add, table.filter(mask), pa.array(np.ones(hits, bool)), hits))
    jobs = []
    post = ctx.write_cdf and assignments is not None  # the updated rows after, too
    for _add, new, _hits in engine._rewritten(ctx, updated, assignments) if updated else []:
        jobs.extend(engine.split_by_partition(ctx, new))
        res.changes += [(new, change_data.POSTIMAGE)] if post else []
    masks = [mask for _, _, mask, _ in whole]
    for (add, new, hits), mask in zip(engine._rewritten(ctx, whole, assignments) if whole else [],
                                      masks, strict=True):
        res.removed.append(add)
        res.rows += hits
        jobs.extend(engine.split_by_partition(ctx, new) if new.num_rows else [])
        res.changes += [(new.filter(mask), change_data.POSTIMAGE)] if post else []
    res.added += engine.write_all(ctx, jobs)
    return res
