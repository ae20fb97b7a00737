"""File-level conflict detection, refined by statistics.

An operation's footprint is the files it read and removed and, when it searched
with a predicate, that predicate. A concurrent commit conflicts with it when it
removed a file in the footprint, or added a file whose partition values and
min/max statistics could satisfy the predicate (a phantom), or changed the
table's schema or protocol. Blind appends have no footprint: they never conflict.
A read that names the columns it depends on is not invalidated by a commit of updates
alone (``commitInfo.lakevilla.updated``) that changed none of them: every row stays, and
every value the read looked at with it.
A compaction's actions (``dataChange: false``) move rows without changing them: its
new files are no phantoms, and its removal of a file we only read loses us nothing;
only a file we removed too is a conflict.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..delta.actions import AddFile, Commit
from ..delta.files import ActionTable
from ..errors import CorruptLogError
from ..vocab import CommitInfo
from .pruning import parse_predicate, prune


@dataclass
class Footprint:
    read_files: set[str] = field(default_factory=set)
    removed_files: set[str] = field(default_factory=set)
    predicate: str | None = None
    full_scan: bool = False  # read with no predicate: any new row is a phantom
    blind: bool = False
    # a read's: every column (lower case) its rows depend on, filtered, ordered or returned;
    # None: any (a write's footprint, or a read of every column)
    columns: frozenset[str] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"read": sorted(self.read_files), "removed": sorted(self.removed_files),
               "predicate": self.predicate, "full_scan": self.full_scan, "blind": self.blind}
        if self.columns is not None:
            out["columns"] = sorted(self.columns)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Footprint:
        """A footprint another client published; malformed input is a ``CorruptLogError``. The
        predicate is only ever parsed by the expression grammar (``parse_predicate``)."""
        if d.get("columns") is not None and not isinstance(d["columns"], list):
            raise CorruptLogError(f"malformed footprint {d!r}")
        try:
            fp = cls(read_files={str(x) for x in d.get("read", [])},
                     removed_files={str(x) for x in d.get("removed", [])},
                     predicate=None if d.get("predicate") is None else str(d["predicate"]),
                     full_scan=bool(d.get("full_scan", False)), blind=bool(d.get("blind", False)),
                     columns=(None if d.get("columns") is None
                              else frozenset(str(x).lower() for x in d["columns"])))
        except (AttributeError, TypeError) as e:
            raise CorruptLogError(f"malformed footprint {d!r}") from e
        return fp

    @property
    def size(self) -> int:
        return len(self.read_files) + len(self.removed_files)

    def conflicts_with(self, c: Commit, schema: pa.Schema,
                       partition_columns: list[str]) -> str | None:
        """Why ``c`` invalidates this footprint, or None."""
        if c.metadata is not None:
            return "schema or table properties changed"
        if c.protocol is not None:
            return "table protocol changed"
        if self.blind:
            return None
        if self.columns is not None and not self.removed_files:
            changed = updated_columns(c)
            if changed is not None and changed.isdisjoint(self.columns):
                return None
        for r in c.removes:
            if r.path in self.read_files and (r.data_change or r.path in self.removed_files):
                return f"file {r.path} that we read was removed"
            if r.path in self.removed_files:
                return f"file {r.path} that we removed was removed concurrently"
        if self.full_scan:
            for a in c.adds:
                if a.num_records != 0 and a.data_change:
                    return f"new file {a.path} adds rows to a full scan"
        elif self.predicate is not None:
            hit = _phantom(c, self.predicate, schema, partition_columns)
            if hit is not None:
                return f"new file {hit} may hold rows matching {self.predicate!r}"
        return None


@dataclass(frozen=True)
class Change:
    """Rows a running writer may change by committing: those ``where`` may match (None: any
    row), in ``columns`` (lower case; None: any column). Published on its marker, it only
    decides whether a follower waits before reading; nothing is validated against it."""

    where: str | None = None
    columns: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"where": self.where,
                "columns": None if self.columns is None else list(self.columns)}

    @classmethod
    def from_json(cls, d: Any) -> Change:
        """Another client's; malformed input is a ``CorruptLogError``. ``where`` is only ever
        parsed by the expression grammar (``parse_predicate``)."""
        where = d.get("where") if isinstance(d, dict) else None
        cols = d.get("columns") if isinstance(d, dict) else None
        if (not isinstance(d, dict) or (where is not None and not isinstance(where, str))
                or (cols is not None and (not isinstance(cols, list)
                                          or not all(isinstance(c, str) for c in cols)))):
            raise CorruptLogError(f"malformed marker change {d!r}")
        return cls(where, None if cols is None else tuple(c.lower() for c in cols))

    def touches(self, columns: frozenset[str] | None) -> bool:
        """Whether it may change a column of ``columns`` (None: all)."""
        return self.columns is None or columns is None or not columns.isdisjoint(self.columns)

    def meets(self, files: list[AddFile], columns: frozenset[str] | None, schema: pa.Schema,
              partition_columns: list[str]) -> bool:
        """Whether it may change what a read of ``files`` depending on ``columns`` (None: all)
        returns."""
        if not files or not self.touches(columns):
            return False
        return self.where is None or bool(prune(parse_predicate(self.where), files, schema,
                                                partition_columns))


def updated_columns(c: Commit) -> frozenset[str] | None:
    """The columns ``c`` changed when it is a commit of updates alone (lower case), else None;
    kept on the commit, which every waiting statement checks."""
    if "updated" not in c.derived:
        info = CommitInfo.of((c.commit_info or {}).get("lakevilla"))
        names = info.updated if info is not None else None
        c.derived["updated"] = (
            frozenset(n.lower() for n in names)
            if isinstance(names, list) and all(isinstance(n, str) for n in names)
            and c.metadata is None and c.protocol is None else None)
    return c.derived["updated"]


def _phantom(c: Commit, predicate: str, schema: pa.Schema,
             partition_columns: list[str]) -> str | None:
    """The first file of ``c`` that may hold rows matching ``predicate`` (None: none), kept on
    the commit: a waiting transaction checks each landed commit in its wait rounds, again when
    it validates, and again for each read it may re-run."""
    cache = c.derived.setdefault("phantoms", {})
    key = (predicate, tuple(partition_columns))
    got = cache.get(key)
    if got is not None and (got[0] is schema or got[0].equals(schema, check_metadata=True)):
        return got[1]
    adds, table = _new_rows(c)
    hits = prune(parse_predicate(predicate), adds, schema, partition_columns, table) if adds else []
    cache[key] = (schema, hits[0].path if hits else None)
    return cache[key][1]


def _new_rows(c: Commit) -> tuple[list[AddFile], ActionTable]:
    """The files of ``c`` that may add rows, as an ActionTable kept on the commit: every
    footprint a commit is checked against (each statement of each waiting transaction, while
    it waits and when it validates) prunes the same table, whose statistics are parsed once."""
    got = c.derived.get("new_rows")
    if got is None:
        adds = [a for a in c.adds if a.num_records != 0 and a.data_change]
        got = c.derived["new_rows"] = (adds, ActionTable.from_actions(adds, AddFile))
    return got


def first_conflict(
    footprints: Sequence[Footprint], commits: Iterable[tuple[int, Commit]], schema: pa.Schema,
    partition_columns: list[str],
) -> tuple[int, int, str] | None:
    """(footprint index, version, reason) of the earliest footprint any commit invalidates."""
    best: tuple[int, int, str] | None = None
    for version, c in commits:
        for i, fp in enumerate(footprints):
            if best is not None and i >= best[0]:
                break
            why = fp.conflicts_with(c, schema, partition_columns)
            if why:
                best = (i, version, why)
                break
    return best
