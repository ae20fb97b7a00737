"""CT's commit point: decide a transaction by one put-if-absent of its record.

The rule lives here, apart from the transaction core, so that it can be read and
tested alone: prepare (wait, validate, build every table's commit), write the record
COMMITTING; if a recovering client wrote ABORTED first, our attempt is fenced off and
we go again under a new one. Between the write and its answer the outcome is in
doubt: the caller must not undo anything then (``Deciding.in_doubt``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..errors import TransactionAborted
from ..store import ObjectStore
from . import record as records


class Deciding(Protocol):
    """What the record decider needs from a transaction: its names and three hooks."""

    @property
    def id(self) -> str: ...

    @property
    def attempt(self) -> str: ...

    def check_age(self) -> None:
        """Raise if the transaction is too old to decide now."""

    def in_doubt(self, what: str | None) -> None:
        """A deciding write (``what``) is under way (None: its outcome is known)."""

    def preempted(self) -> None:
        """Recovery decided ABORTED for this attempt: move to a new attempt (or raise)."""


def decide_by_record(store: ObjectStore, txn: Deciding,
                     prepare: Callable[[], dict[str, records.TableIntent]],
                     max_retries: int) -> records.TxnRecord:
    """The COMMITTING record that decides ``txn`` (``prepare`` runs before each try and
    returns the table intents); ``TransactionAborted`` if recovery keeps preempting it."""
    for _ in range(max_retries + 1):
        intents = prepare()
        rec = records.TxnRecord(attempt=txn.attempt, txn=txn.id, state=records.COMMITTING,
                                tables=intents)
        txn.check_age()
        txn.in_doubt(f"its transaction record {txn.attempt}")
        decided = records.decide(store, rec)  # OutcomeUnknown: in doubt, CommitPendingError
        txn.in_doubt(None)
        if decided.state == records.ABORTED:
            if decided.final:  # an operator rolled the idle transaction back: not this attempt
                raise TransactionAborted(  # alone, the transaction (recovery/idle.py)
                    f"transaction {txn.id} was rolled back while it was idle ({decided.reason})",
                    txn_id=txn.id, reason="rolled-back")
            txn.preempted()
            continue
        return decided
    raise TransactionAborted("preempted by recovery too often", txn_id=txn.id, reason="preempted")
