"""lakevilla's log records, on Python's ``logging``; silent unless the application configures
logging (``lakevilla`` carries a ``NullHandler``, so nothing reaches stderr by default).

Loggers and what they say:

* ``lakevilla.transaction``: INFO when a commit waited for other transactions' markers (on
  whom, how long), when it redid statements after a conflict, when it shifted its markers,
  when an isolated transaction reads a table new to the global log over its whole log;
  WARNING when a recovering client took one of its markers (it goes on with a new attempt).
* ``lakevilla.recovery``: WARNING whenever this client finishes or undoes another client's
  transaction (a marker closed or freed, a record rolled forward, an abort announced in the
  global log): each one means some client died or stalled.
* ``lakevilla.maintenance``: INFO for what ``recover``, ``cleanup`` and abandoned-file
  deletion did; DEBUG for checkpoints.

Every record carries ``record.lakevilla``, a dict with the event name and its fields, for
handlers that emit structured logs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

transaction_log = logging.getLogger("lakevilla.transaction")
recovery_log = logging.getLogger("lakevilla.recovery")
maintenance_log = logging.getLogger("lakevilla.maintenance")


def _emit(logger: logging.Logger, level: int, event: str, msg: str, *args: Any,
          **fields: Any) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, msg, *args, extra={"lakevilla": {"event": event, **fields}})


def waited(txn: Any, on: Iterable[str], seconds: float) -> None:
    """``on``: "<attempt> at <table>@<version>" of every marker the commit waited for."""
    on = sorted(set(on))
    if on:
        _emit(transaction_log, logging.INFO, "wait", "transaction %s waited %.3fs for %s", txn.id,
              seconds, ", ".join(on), txn=txn.id, attempt=txn.attempt, seconds=round(seconds, 6),
              on=on)


def redone(txn: Any, table: str, version: int, why: str, ops: list) -> None:
    _emit(transaction_log, logging.INFO, "redo",
          "transaction %s redid %d statement(s) on %s after a conflict with version %d (%s)",
          txn.id, len(ops), table, version, why, txn=txn.id, attempt=txn.attempt, table=table,
          version=version, reason=why, statements=[op.kind for op in ops])


def shifted(txn: Any, why: str) -> None:
    where = {t: tw.marker.version for t, tw in txn.tables.items() if tw.marker is not None}
    _emit(transaction_log, logging.INFO, "shift", "transaction %s shifted its markers to %s (%s)",
          txn.id, ", ".join(f"{t}@{v}" for t, v in sorted(where.items())), why, txn=txn.id,
          attempt=txn.attempt, markers=where, reason=why)


def marker_taken(txn: Any, tables: list[str]) -> None:
    _emit(transaction_log, logging.WARNING, "preempted",
          "transaction %s: a recovering client took its marker(s) on %s (it was slower than "
          "marker_ttl); going on with new markers", txn.id, ", ".join(tables),
          txn=txn.id, attempt=txn.attempt, tables=tables)


def recovered(table: str, version: int, attempt: str, outcome: str,
              commit_version: int | None) -> None:
    what = "closed as committed" if outcome == "committed" else "freed (rolled back)"
    _emit(recovery_log, logging.WARNING, "recover", "stalled transaction %s at %s@%d: marker %s%s",
          attempt, table, version, what,
          f", commit at version {commit_version}" if commit_version is not None else "",
          table=table, version=version, attempt=attempt, outcome=outcome,
          commit_version=commit_version)


def record_rolled_forward(attempt: str, landed: dict[str, int]) -> None:
    _emit(recovery_log, logging.WARNING, "roll_forward",
          "decided transaction %s rolled forward: %s", attempt,
          ", ".join(f"{t}@{v}" for t, v in sorted(landed.items())), attempt=attempt,
          versions=landed)


def gvl_abort(attempt: str, seq: int) -> None:
    _emit(recovery_log, logging.WARNING, "gvl_abort",
          "stalled transaction %s aborted by global log entry %d", attempt, seq, attempt=attempt,
          seq=seq)


def joining(table: str, commits: int, start: int) -> None:
    """A table new to the global log is examined from where its checkpoint's promise ends, or
    over its whole log without one (until an entry knows it): on a long log without a promise
    this is the slow part of the first isolated transaction that reads it."""
    _emit(transaction_log, logging.INFO, "join",
          "table %s is new to the global log: reading the %d commits of its log after version %d",
          table, commits, start, table=table, commits=commits, start=start)


def maintenance(event: str, msg: str, *args: Any, level: int = logging.INFO, **fields: Any) -> None:
    _emit(maintenance_log, level, event, msg, *args, **fields)
