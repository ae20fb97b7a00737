"""``LakeAt``: every table of a lake as of one consistent cut, read only.

``lake.at(when)`` with ``when`` a UTC datetime or ISO-8601 string (``past/cut.py``: the newest
consistent cut no later than that moment) or a global-log position, an int
(``past/position.py``: that entry's cut). Tables are resolved when first read (or named in
``cut``), consistently with every table resolved before; the view never moves. Inside a
transaction's function it is the same view: it reads beside the transaction, takes no part
in its reads, footprints or validation.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, Protocol

from ..delta.history import parse_moment
from ..errors import (
    InvalidArgumentError,
    InvalidExpressionError,
    MomentTooOldError,
    ReadOnlyLakeError,
)
from .cut import MomentCut, not_found


class CutSource(Protocol):
    def version(self, table: str) -> int: ...

    def describe(self) -> str: ...


# a read of one table at one version (Lake.read): name, where, version, columns, order_by, limit
Reader = Callable[..., Any]

FILE_RETENTION = "delta.deletedFileRetentionDuration"


class LakeAt:
    """A read-only view of every table at one consistent cut (``lake.at``)."""

    def __init__(self, source: CutSource, reader: Reader, lister: Callable[[], list[str]],
                 missing: Callable[[str, int], str | None]) -> None:
        self._source = source
        self._read = reader
        self._list = lister
        self._missing = missing

    @property
    def moment(self) -> dt.datetime | None:
        """The moment asked for (None for a global-log position)."""
        if isinstance(self._source, MomentCut):
            return dt.datetime.fromtimestamp(self._source.moment, dt.UTC)
        return None

    def __repr__(self) -> str:
        return f"LakeAt({self._source.describe()})"

    def version(self, table: str) -> int:
        """The table's version in this cut (``TableNotFoundError`` if it did not exist)."""
        v = self._source.version(table)
        if v < 0:
            raise not_found(table, self._source.describe())
        return v

    def cut(self, tables: list[str] | None = None) -> dict[str, int]:
        """Table -> version for ``tables`` (default: every table that existed then)."""
        if tables is None:
            return {t: v for t in self._list() if (v := self._source.version(t)) >= 0}
        return {t: self.version(t) for t in tables}

    def tables(self) -> list[str]:
        """The tables that existed at this cut."""
        return sorted(self.cut())

    def read(self, table: str, where: str | None = None, *, columns: list[str] | None = None,
             order_by: str | list[str] | None = None, limit: int | None = None) -> Any:
        """Rows of ``table`` at this cut (as ``Lake.read``)."""
        v = self.version(table)
        try:
            return self._read(table, where, version=v, columns=columns, order_by=order_by,
                              limit=limit)
        except (InvalidArgumentError, InvalidExpressionError):
            raise  # the question was wrong, not the files
        except Exception:
            # a data file gone? (each engine says so its own way) the files of the version tell
            try:
                gone = self._missing(table, v)
            except Exception:  # noqa: BLE001 - the read's own error is the one to report
                gone = None
            if gone is None:
                raise
            oldest = dt.datetime.now(dt.UTC) - dt.timedelta(days=7)
            raise MomentTooOldError(
                f"table {table!r} at version {v} ({self._source.describe()}) names a data file "
                f"that is gone ({gone}): files a later version removed are kept only for the "
                f"table's file retention ({FILE_RETENTION}, 7 days by default; VACUUM deletes "
                "them after it, so does lake.maintenance.delete_abandoned_files once their "
                "tombstones expired); moments older than that retention cannot be served",
                oldest=oldest) from None

    def _refuse(self, *_a: Any, **_k: Any) -> Any:
        raise ReadOnlyLakeError(f"{self!r} is a read-only view of the past; write through the "
                                "lake or a transaction")

    insert = update = delete = merge = overwrite = optimize = create_table = _refuse
    add_columns = set_properties = commit = _refuse


class FixedCut:
    """A cut given as table -> version, e.g. one a change consumer stored as its offset (taken
    from ``LakeAt.cut()``, so consistent). A table it does not name is not in it."""

    def __init__(self, cut: dict[str, int]) -> None:
        if not all(isinstance(t, str) and isinstance(v, int) and not isinstance(v, bool)
                   and v >= -1 for t, v in cut.items()):
            raise InvalidArgumentError(f"a cut maps table names to versions (int >= -1), got "
                                       f"{cut!r}")
        self._cut = dict(cut)

    def version(self, table: str) -> int:
        return self._cut.get(table, -1)

    def describe(self) -> str:
        return f"the cut {self._cut}"


def open_at(when: Any, *, moment_cut: Callable[[float], CutSource],
            position_cut: Callable[[int], CutSource], reader: Reader,
            lister: Callable[[], list[str]], missing: Callable[[str, int], str | None]) -> LakeAt:
    """The view for ``when``: a LakeAt as is, an int as a global-log position, else a moment."""
    if isinstance(when, LakeAt):
        return when
    if isinstance(when, dict):
        return LakeAt(FixedCut(when), reader, lister, missing)
    if isinstance(when, bool):
        raise InvalidArgumentError(f"when must be a datetime, an ISO-8601 string or a global-log "
                                   f"position, got {when!r}")
    if isinstance(when, int):
        return LakeAt(position_cut(when), reader, lister, missing)
    return LakeAt(moment_cut(round(parse_moment(when, "when").timestamp(), 6)), reader, lister,
                  missing)
