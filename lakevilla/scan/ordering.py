"""A read's ORDER BY ... LIMIT: the first rows of a read, the way TPC-C's Delivery asks for
the oldest new order of a district.

The read's footprint stays its ``where``: any commit that could change which rows come
first matches it. But the client consumes only the first ``limit`` rows, so a redo (or the
by-value check) that finds the same first rows passes although other matching rows came or
went: an insert of a newer order does not abort a reader of the oldest one. Ties are broken
by the returned columns, so a snapshot always yields the same rows and that comparison means
something. Nulls sort last in both directions, on every engine.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError, InvalidExpressionError


@dataclass(frozen=True)
class Ordering:
    keys: tuple[tuple[str, bool], ...]  # (column, descending)
    limit: int | None = None

    @classmethod
    def parse(cls, order_by: str | list[str] | None, limit: int | None) -> Ordering | None:
        """From ``read(order_by="col DESC" | ["a", "b desc"], limit=n)``; None for neither."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            raise InvalidArgumentError(f"limit must be a non-negative integer, got {limit!r}")
        if order_by is None:
            if limit is not None:
                raise InvalidArgumentError("limit needs order_by: without an order, which rows "
                                           "come first is up to the engine, and a redo could not "
                                           "tell whether it read the same")
            return None
        items = [order_by] if isinstance(order_by, str) else order_by
        if (not isinstance(items, (list, tuple)) or not items
                or not all(isinstance(i, str) for i in items)):
            raise InvalidArgumentError("order_by must be a column name or a non-empty list of "
                                       f"them, got {order_by!r}")
        keys = []
        for item in items:
            parts = item.split()
            if len(parts) == 1 or (len(parts) == 2 and parts[1].lower() in ("asc", "desc")):
                keys.append((parts[0], len(parts) == 2 and parts[1].lower() == "desc"))
            else:
                raise InvalidArgumentError(f"order_by item {item!r}: expected 'column', 'column "
                                           "ASC' or 'column DESC'")
        return cls(tuple(keys), limit)

    @property
    def columns(self) -> list[str]:
        return [c for c, _ in self.keys]

    def check(self, names: list[str], table: str) -> None:
        unknown = [c for c in self.columns if c not in names]
        if unknown:
            raise InvalidExpressionError(f"{table!r} has no column(s) {unknown} to order by")

    def tie_breaks(self, out: list[str]) -> list[tuple[str, bool]]:
        """The keys, then every returned column not among them (ascending)."""
        return list(self.keys) + [(c, False) for c in out if c not in self.columns]

    def apply(self, table: pa.Table, out: list[str]) -> pa.Table:
        """The first ``limit`` rows of ``table`` in this order, with the columns ``out``."""
        for keys in (self.tie_breaks(out), list(self.keys)):
            try:
                idx = pc.sort_indices(table,
                                      sort_keys=[(c, "descending" if d else "ascending", "at_end")
                                                 for c, d in keys])
                break
            except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
                continue  # a returned column Arrow cannot sort by: ties stay in scan order
        else:
            raise InvalidExpressionError(f"cannot order by {self.columns}: Arrow cannot "
                                         "sort these types")
        if self.limit is not None:
            idx = idx[: self.limit]
        return table.take(idx).select(out)
