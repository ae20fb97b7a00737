"""Compaction (Delta's OPTIMIZE): bin-pack a partition's small files into larger ones.

Only files smaller than the target are candidates; within each partition they are packed,
in the order the view holds them, into bins no larger than the target, and every bin of two
or more files becomes one new file. The rows do not change, so the actions say
``dataChange: false`` (unless a bin holds rows this transaction wrote: those are new data to
everyone else). Its footprint is the files it removed and nothing else, so a concurrent blind
append or a change to other files never conflicts with it; a concurrent change to one of its
files does, and under R the compaction is redone on what is left.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..delta.actions import AddFile
from ..engines.api import data_file_key
from ..errors import InvalidArgumentError
from ..scan import expressions as E
from ..scan.conflicts import Change, Footprint
from .base import Statement

if TYPE_CHECKING:
    from ..engines.api import Engine
    from ..store import ObjectStore
    from .view import TableWork

DEFAULT_TARGET = 100 * 1024 * 1024  # delta-rs' default; a table's delta.targetFileSize wins
MIN_TARGET = 1


def target_size(configuration: dict[str, str] | None, requested: int | None) -> int:
    if requested is None:
        raw = (configuration or {}).get("delta.targetFileSize")
        try:
            requested = int(raw) if raw is not None else DEFAULT_TARGET
        except ValueError:
            requested = DEFAULT_TARGET
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < MIN_TARGET:
        raise InvalidArgumentError(f"target_file_size must be a positive number of bytes, "
                                   f"got {requested!r}")
    return requested


def check_where(name: str, where: str | None, schema, partition_columns) -> None:
    """OPTIMIZE ... WHERE selects partitions, as in Delta: only partition columns may appear."""
    if where is None:
        return
    cols = E.check_where(where, schema, f"optimize where={where!r} on {name!r}").columns()
    other = sorted(set(cols) - set(partition_columns))
    if other:
        raise InvalidArgumentError(f"optimize of {name!r}: where={where!r} uses non-partition "
                                   f"column(s) {other}; compaction selects whole partitions "
                                   f"(partition columns: {list(partition_columns) or 'none'})")


def bins(files: list[AddFile], target: int) -> list[list[AddFile]]:
    """Greedy, per partition: small files in view order, a new bin when the next would overflow.
    A file with a deletion vector is rewritten whatever its size, alone if need be: compaction
    purges deleted rows from storage, as Delta's OPTIMIZE does."""
    by_part: dict[tuple, list[AddFile]] = {}
    alone: list[list[AddFile]] = []
    for a in files:
        if (a.size or 0) < target:
            by_part.setdefault(tuple(sorted(a.partition_values.items())), []).append(a)
        elif a.deletion_vector is not None:
            alone.append([a])
    out: list[list[AddFile]] = []
    for part in by_part.values():
        cur: list[AddFile] = []
        size = 0
        for a in part:
            if cur and size + (a.size or 0) > target:
                out.append(cur)
                cur, size = [], 0
            cur.append(a)
            size += a.size or 0
        out.append(cur)
    return [b for b in out if len(b) > 1 or b[0].deletion_vector is not None] + alone


@dataclass(eq=False, kw_only=True)
class Optimize(Statement):
    kind: ClassVar[str] = "optimize"
    operation: ClassVar[str] = "OPTIMIZE"
    append_only_ok: ClassVar[bool] = True
    compacts: ClassVar[bool] = True

    # bytes; None: the table's delta.targetFileSize, else 100 MiB
    target_file_size: int | None = None

    def check_input(self, tw: TableWork, engine: Engine, store: ObjectStore) -> None:
        check_where(tw.name, self.where, tw.schema, tw.base.partition_columns)

    def execute(self, tw: TableWork, engine: Engine, data: Any, redo: bool) -> Any:
        target = target_size(tw.base.metadata.configuration, self.target_file_size)
        check_where(tw.name, self.where, tw.schema, tw.base.partition_columns)
        cands = tw.candidates(self.where)
        own = set(tw.added)
        removed: list[AddFile] = []
        added: list[AddFile] = []
        try:
            for b in bins(cands, target):
                rows = engine.scan(tw.ctx, b, None, None)
                # a Spark frame writes a file per partition
                if callable(getattr(rows, "coalesce", None)):
                    rows = rows.coalesce(1)
                new = engine.write(tw.ctx, rows)
                # our own new rows: a data change to everyone else
                fresh = any(a.path in own for a in b)
                added += [dataclasses.replace(a, data_change=fresh) for a in new]
                removed += b
        except BaseException:
            _drop(tw, added)
            raise
        self.read_files = {a.path for a in removed}
        self.removed, self.added = removed, added
        self.rows = sum(a.num_records or 0 for a in added)
        return None

    def footprint(self) -> Footprint:
        """Its files, nothing else: it changes no row."""
        return Footprint(read_files={a.path for a in self.removed},
                         removed_files={a.path for a in self.removed})

    def change(self) -> Change | None:
        return None  # it changes no row

    def options(self) -> dict[str, Any]:
        return {**({"target_file_size": self.target_file_size} if self.target_file_size is not None
                   else {}),
                **super().options()}

    @classmethod
    def decode_more(cls, statement: dict[str, Any], added: list[AddFile]) -> dict[str, Any]:
        return {"target_file_size": (statement.get("options") or {}).get("target_file_size")}

    def result(self, out: Any) -> dict[str, Any]:
        """Metrics: files and bytes removed and added, rows, partitions optimized."""
        return {"files_removed": len(self.removed), "files_added": len(self.added),
                "bytes_removed": sum(a.size or 0 for a in self.removed),
                "bytes_added": sum(a.size or 0 for a in self.added), "rows": self.rows,
                "partitions_optimized": len({tuple(sorted(a.partition_values.items()))
                                             for a in self.added})}


def _drop(tw: TableWork, files: list[AddFile]) -> None:
    for a in files:
        try:
            tw.ctx.store.delete(data_file_key(tw.ctx.name, a.path, tw.ctx.lake_uri))
        except Exception:  # noqa: BLE001 - best effort: no version references them
            pass
