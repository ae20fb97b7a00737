"""Overwrite: replace the whole table, or the rows a predicate selects (Delta's ``replaceWhere``).

With a predicate, every new row must satisfy it (a row where it is false or NULL is an
error, as in Delta and delta-rs), and only the rows it selects go: a file holding some
of them is rewritten with the others, a file holding none stays. The new rows are written
once, as the table's own data files, before anything is removed; a redo on a newer
snapshot keeps them and re-runs only the removal, so the statement's source never has to
be held anywhere else (the sublog names the files, ``Op.inserted``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..engines.api import Engine, data_file_key
from ..errors import DataOutsidePredicateError

if TYPE_CHECKING:
    from .view import Op, TableWork


def outside(where: str) -> str:
    """The rows ``where`` does not select (NULL counts as not selected)."""
    return f"NOT coalesce(({where}), false)"


def run(tw: TableWork, engine: Engine, op: Op, data: Any) -> None:
    if data is not None:
        op.inserted = engine.write(tw.ctx, data)
        if op.where is not None and op.inserted:
            found = engine.scan(tw.ctx, op.inserted, outside(op.where), None)
            bad = engine.num_rows(found)
            if bad < 0:  # a lazy frame (Spark): count it
                bad = found.count()
            if bad:
                for a in op.inserted:
                    try:
                        tw.ctx.store.delete(data_file_key(tw.ctx.name, a.path, tw.ctx.lake_uri))
                    except Exception:  # noqa: BLE001 - best effort: no version references them
                        pass
                op.inserted = []
                raise DataOutsidePredicateError(
                    f"overwrite of {tw.name!r} where {op.where!r}: {bad} row(s) of the new data do not satisfy "
                    "the predicate (false or NULL); replaceWhere only writes rows it replaces. Nothing was written")
    cands = tw.candidates(op.where)
    op.read_files = {a.path for a in cands}
    if op.where is None:  # the whole table goes: no file needs reading
        op.removed, rewritten = list(cands), []
    else:
        rr = engine.rewrite(tw.ctx, cands, op.where, None)
        op.removed, rewritten = rr.removed, rr.added
    op.added = [*rewritten, *op.inserted]
    op.rows = sum(a.num_records or 0 for a in op.inserted)
