"""What one transaction's parts share: its names, its tables, its counters and its fate.

The parts a feature set chooses (decider, journal, waits, conflict policy, marker set) each
get this one object, not the transaction: the public ``Transaction`` stays the statement API,
and a part sees exactly the state the commit path needs. ``decided`` and ``in_doubt`` are the
two facts that forbid an undo (section "fault model" of docs/architecture.md): once a deciding
write was attempted, only the decision may undo anything.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..complex_txn import record as records
from ..errors import TransactionAborted
from ..names import attempt_id
from ..settings import LakeSettings
from ..statements.view import TableWork
from ..vocab import CommitInfo
from .client import LakeClient


class State(enum.StrEnum):
    """Where a transaction is. ``DECIDED`` and ``IN_DOUBT`` end a failed commit whose outcome
    only recovery may settle: nothing may be undone then. Compares equal to its text."""

    ACTIVE = "active"
    COMMITTING = "committing"
    COMMITTED = "committed"
    ABORTED = "aborted"
    DECIDED = "decided"
    IN_DOUBT = "in-doubt"


_BLOCKS = threading.local()  # .open: ids of the transactions whose with-block this thread is in


def open_above(txn_id: str) -> bool:
    """Whether this thread is inside the ``with`` block of transaction ``txn_id``: a wait of
    ours for it would last until the timeout, since it cannot finish while we wait."""
    return txn_id in getattr(_BLOCKS, "open", ())


def features_label(features: frozenset[str]) -> str:
    return ",".join(f for f in ("R", "CT", "I") if f in features)


class TxnContext:
    """One transaction's shared state (see the module docstring)."""

    def __init__(self, client: LakeClient, txn_id: str, features: frozenset[str], isolation: str,
                 slack: int, mode: str, decision: str, started: float, attempt_no: int) -> None:
        self.client = client
        self.id = txn_id
        self.features = features
        self.label = features_label(features)
        self.isolation = isolation
        self.slack = slack
        self.mode = mode
        self.decision = decision  # vocab.Decision: what makes a commit durable
        self.started = started
        self.attempt_no = attempt_no
        self.attempt = attempt_id(txn_id, attempt_no)
        self.state = State.ACTIVE
        self.tables: dict[str, TableWork] = {}
        self.stats: Counter[str] = Counter()
        self.mlock = threading.RLock()  # our markers: claims, shifts, heartbeats
        self._slock = threading.Lock()  # stats, touched from parallel table work
        self.decided = False  # a record or global log entry says COMMITTING: no undo any more
        # a deciding write (tail commit, fill, record, announcement) was attempted and its outcome
        # is not known yet: from here on only the decision may undo anything
        self.in_doubt: str | None = None
        # table -> version: commits that landed (R: table by table)
        self.committed: dict[str, int] = {}
        self.gvl_base: Callable[[], int | None] = lambda: None  # I: where an abort of ours can be
        # when its last write statement started (the lake's clock): how long its sublogs have
        # been still, at least, which recover(older_than=) judges it by
        self.last_write = started

    @property
    def settings(self) -> LakeSettings:
        """The client's settings, read live (a setting changed on the lake applies at once)."""
        return self.client.settings

    def now(self) -> float:
        return self.client.now()

    def block(self, inside: bool) -> None:
        """This thread enters (or leaves) the transaction's ``with`` block (``open_above``)."""
        opened: list[str] = _BLOCKS.__dict__.setdefault("open", [])
        if inside:
            opened.append(self.id)
        elif self.id in opened:  # the innermost block of that id
            del opened[len(opened) - 1 - opened[::-1].index(self.id)]

    def count(self, key: str, n: int = 1) -> None:
        with self._slock:
            self.stats[key] += n

    def next_attempt(self) -> None:
        """Recovery fenced off our attempt: go on under a new one (``TransactionAborted`` once
        that happened ``max_retries`` times)."""
        self.attempt_no += 1
        if self.attempt_no > self.settings.max_retries:
            raise TransactionAborted("our markers were freed by recovery too often", txn_id=self.id,
                                     reason="preempted")
        self.attempt = attempt_id(self.id, self.attempt_no)
        self.stats["attempts"] += 1

    def check_age(self, started: float | None = None) -> None:
        """Refuse a deciding write after ``max_transaction_age``: maintenance keeps files at least
        that long, so a transaction older than it may reference files already deleted."""
        self.check_fenced()
        age = self.now() - (self.started if started is None else started)
        if age > self.settings.max_transaction_age:
            raise TransactionAborted(
                f"transaction {self.id} has been open for {age:.0f}s, longer than the lake's "
                f"max_transaction_age ({self.settings.max_transaction_age:.0f}s); maintenance may "
                "have deleted its data files, so it cannot commit", txn_id=self.id,
                reason="too-old")

    def check_fenced(self) -> None:
        """Idle for half of ``idle_floor`` (no write statement), an operator's
        ``recover(older_than=)`` may have rolled this transaction back: look for that final
        ABORTED record before a deciding write (one LIST, never on a busy transaction). A
        multi-table CT commit learns it from its record's put-if-absent anyway."""
        if ("R" not in self.features
                or self.now() - self.last_write < self.settings.idle_floor / 2):
            return
        for rec in records.of_txn(self.client.store, self.id):
            if rec.state == records.ABORTED and rec.final:
                raise TransactionAborted(
                    f"transaction {self.id} was rolled back while it was idle ({rec.reason}): "
                    "an operator's recover(older_than=...) declared its client dead. Nothing of "
                    "it is visible; run it again if it is still wanted", txn_id=self.id,
                    reason="rolled-back")

    def landed(self, tw: TableWork, version: int) -> None:
        """Our commit is in ``tw`` at ``version``: nothing may undo it any more."""
        with self._slock:
            self.committed[tw.name] = version
        self.in_doubt = None

    def post_commit(self, what: str, fn: Callable[..., None], *args: Any) -> None:
        """A step after our commit landed (marker close, checkpoint, record close): a failure
        is counted, never raised; the commit stands and recovery or a later commit finishes it."""
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - whatever failed, the commit itself has landed
            self.count("post_commit_failures")
            self.count(f"post_commit_failures_{what}")

    def commit_info(self, ntables: int, **more: Any) -> dict[str, Any]:
        """The ``commitInfo.lakevilla`` object of a table commit of ours."""
        return CommitInfo(txn=self.id, attempt=self.attempt, features=self.label,
                          decision=self.decision, tables=ntables, **more).to_json()

    @staticmethod
    def timestamp_ms() -> int:
        return int(time.time() * 1000)
