"""A change consumer that sees each change of its tables exactly once, crashes and races
included.

Its offset is a row of an offsets table (consumer name -> the cut it has consumed up to, as
JSON). One transaction reads that row, takes the change rows from the offset's cut to the
lake's newest consistent cut (``lake.changes``), lets the caller write its outputs, and writes
the new cut: one commit, so a crash anywhere before it leaves offset and outputs as they were,
and after it both have moved. Two runs at once (a restarted client beside a slow one) read the
same offset row; the second to commit conflicts on it, and its redo reads a different offset,
so it aborts instead of writing outputs for changes the first already consumed (a read's redo
must see the rows it saw: ``statements/read.py``). Because the two cuts are consistent, a
multi-table transaction's changes land in one run whole.

It needs a transaction whose tables commit together with its read checked: features with CT
(several tables at once) and R (the read redone), or I.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any, Protocol

import pyarrow as pa

from ..errors import InvalidArgumentError, TableExistsError, TableNotFoundError
from ..names import check_table_name
from .view import LakeAt

OFFSETS_SCHEMA = pa.schema([pa.field("consumer", pa.string(), nullable=False),
                            pa.field("cut", pa.string(), nullable=False)])


class _Lake(Protocol):
    """What the consumer needs of a ``Lake`` (kept structural: the lake imports this module)."""

    def at(self, when: Any) -> LakeAt: ...

    def changes(self, tables: str | list[str], since: Any = None,
                until: Any = None) -> dict[str, Any]: ...

    def run(self, fn: Callable[[Any], Any], features: Any = "R", *, retries: int = 5) -> Any: ...

    def create_table(self, name: str, schema: Any = None, *,
                     if_not_exists: bool = False) -> Any: ...

    def read(self, name: str, where: str | None = None) -> Any: ...

    def table_exists(self, name: str) -> bool: ...


@dataclasses.dataclass(frozen=True)
class Consumed:
    """One run: what ``fn`` returned, the cuts the changes lay between (``since`` None on the
    first run) and how many change rows each table had."""

    value: Any
    since: dict[str, int] | None
    until: dict[str, int]
    rows: dict[str, int]


class ChangeConsumer:
    """``lake.consumer(name, tables)``: ``run(fn)`` calls ``fn(txn, changes)`` with the change
    rows of ``tables`` since the last run, in the transaction that stores the new offset."""

    def __init__(self, lake: _Lake, name: str, tables: list[str], offsets: str) -> None:
        if not isinstance(name, str) or not name or "'" in name:
            raise InvalidArgumentError(f"a consumer name is a non-empty string without quotes, "
                                       f"got {name!r}")
        if not tables or not all(isinstance(t, str) for t in tables):
            raise InvalidArgumentError("a consumer reads one or more tables, by name")
        check_table_name(offsets)
        self._lake, self.name, self.tables, self.offsets = lake, name, list(tables), offsets
        self._offsets_ready = False  # the offsets table is known to exist: no check per run
        self._where = f"consumer = '{name}'"

    def __repr__(self) -> str:
        return f"ChangeConsumer({self.name!r}, tables={self.tables}, offsets={self.offsets!r})"

    def offset(self) -> dict[str, int] | None:
        """The cut consumed up to (table -> version), None before the first run."""
        try:
            rows = self._lake.read(self.offsets, where=self._where)
        except TableNotFoundError:
            return None
        return _cut_of(rows)

    def run(self, fn: Callable[[Any, dict[str, Any]], Any], *, features: str = "R,CT",
            retries: int = 5) -> Consumed:
        """One step: ``fn(txn, changes)`` writes the outputs of ``changes`` (table -> change
        rows as ``lake.changes`` returns them: pyarrow, or DataFrames on Spark) through ``txn``;
        its return value comes back in ``Consumed.value``. Retried as ``lake.run`` retries (a
        run that lost a race reads the new offset and consumes what is left)."""
        feats = {f.strip() for f in features.split(",") if f.strip()}
        if not ({"R", "CT"} <= feats or "I" in feats):
            raise InvalidArgumentError(
                f"a consumer needs features with R and CT (or I), got {features!r}: without "
                "them a crash or a second run can write its outputs twice or lose them")
        if not self._offsets_ready:
            self._ensure_offsets()
            self._offsets_ready = True

        def step(txn: Any) -> Consumed:
            mine = txn.read(self.offsets, where=self._where)  # kept: a redo must see the same
            since = _cut_of(mine)
            until = self._lake.at(_now()).cut(self.tables)
            changes = self._lake.changes(self.tables, since=since, until=until)
            value = fn(txn, changes)
            row = json.dumps(until, sort_keys=True)
            if until == since:
                pass  # nothing committed since: the offset stands
            elif since is None:
                txn.insert(self.offsets, pa.table({"consumer": [self.name], "cut": [row]},
                                                  schema=OFFSETS_SCHEMA))
            else:
                txn.update(self.offsets, set={"cut": _sql_string(row)}, where=self._where)
            return Consumed(value, since, until, {t: _rows(c) for t, c in changes.items()})

        out: Consumed = self._lake.run(step, features=features, retries=retries)
        return out


    def _ensure_offsets(self, attempts: int = 40) -> None:
        """Create the offsets table unless it exists. Two consumers starting at once race for
        the name: the loser waits (backing off) until the winner's table is there."""
        for attempt in range(attempts):
            try:
                self._lake.create_table(self.offsets, OFFSETS_SCHEMA, if_not_exists=True)
                return
            except TableExistsError:  # being created by another client right now
                if self._lake.table_exists(self.offsets):
                    return
                if attempt == attempts - 1:
                    raise
                time.sleep(min(0.02 * 2 ** attempt, 1.0))  # back off: the other creation lands


def _rows(t: Any) -> int:
    """Rows of a change table: a pyarrow Table's, or a DataFrame's by a count on the cluster."""
    return int(t.num_rows) if isinstance(t, pa.Table) else int(t.count())


def _cut_of(rows: Any) -> dict[str, int] | None:
    if not isinstance(rows, pa.Table):  # a DataFrame (Spark): the consumer's row, at most two
        rows = rows.select("cut").limit(2).toArrow()
    cuts = rows.column("cut").to_pylist() if rows.num_rows else []
    if len(cuts) > 1:
        raise InvalidArgumentError(f"the offsets table holds {len(cuts)} rows for one consumer: "
                                   "it was written outside the consumer")
    return {str(t): int(v) for t, v in json.loads(cuts[0]).items()} if cuts else None


def _sql_string(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _now() -> Any:
    import datetime as dt

    return dt.datetime.now(dt.UTC)
