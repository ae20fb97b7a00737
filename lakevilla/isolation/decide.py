"""LV[I]'s commit point: decide a transaction by appending one entry to the global log.

Kept apart from the transaction core, beside CT's record decider
(``complex_txn/decide.py``), so that it can be read and tested alone. Each try:
prepare (wait, validate, build every table's commit); validate against the log's head
and build the entry that announces us (module 4.2: the entry takes in, whole, every
commit made since on the tables we touch; serializable reads are checked against
them, R1; a commit below our write that we never validated makes us validate again,
R3); append it. An entry lost to another appender is tried again on the new head.
Clean-up of the log may pass the slot we appended to: then we learn from the log
whether ours is in it, and if even that cannot be told the outcome is in doubt.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, Protocol

from ..complex_txn import record as records
from ..delta.log import DeltaLog
from ..errors import CommitPendingError, CorruptLogError, TransactionAborted
from ..markers.marker import commit_txn, marker_of
from ..parallel import submit
from ..vocab import CommitMode
from . import resolve as gvl_resolve
from .closure import Closure
from .cut import LONG_TRANSACTION, Cut
from .gvl import APPENDED, FORKED, TAKEN, GlobalVersionLog, GvlEntry, PendingWrite, first_entry
from .units import RecordCache
from .validation import r1_stale_reads, r3_unvalidated_write


class TableRead(Protocol):
    """What the decider needs of one table the transaction touched."""

    log: DeltaLog
    validated_upto: int
    base: Any  # the snapshot read: its partition columns

    @property
    def schema(self) -> Any: ...

    def footprints(self) -> Any: ...


class Announcing(Protocol):
    """What the global-log decider needs from a transaction: names, settings and hooks."""

    # read-only: the transaction's own state, which the decider never sets
    @property
    def id(self) -> str: ...

    @property
    def attempt(self) -> str: ...

    @property
    def isolation(self) -> str: ...

    @property
    def slack(self) -> int: ...

    @property
    def tables(self) -> Mapping[str, TableRead]: ...

    def check_age(self) -> None:
        """Raise if the transaction is too old to decide now."""

    def in_doubt(self, what: str | None) -> None:
        """A deciding write (``what``) is under way (None: its outcome is known)."""

    def decided(self) -> None:
        """The announcement may be in the log: from here on only recovery may undo anything."""

    def count(self, key: str, n: int = 1) -> None: ...

    def revalidate(self, table: str) -> None:
        """Validate (and redo) ``table`` against what committed since (R3 moved us)."""

    def reads_hold(self, table: str, commits: list, version: int) -> bool:
        """Whether every read of ``table`` that ``commits`` conflict with returns, run at
        ``version``, the rows it returned (False where that cannot be told)."""


class GlobalDecider:
    """The services the global log's decision uses; one per transaction (it keeps ``base``,
    the first entry an abort of the current attempt can be in)."""

    def __init__(self, gvl: GlobalVersionLog, log_for: Callable[[str], DeltaLog], recs: RecordCache,
                 cut: Cut) -> None:
        self.gvl = gvl
        self.log_for = log_for
        self.recs = recs
        self.cut = cut
        self.base: int | None = None

    def note_claim(self) -> None:
        """A marker is claimed: an abort of ours can only come after the entry our cut stands at."""
        if self.base is None:
            self.base = self.cut.last_seq

    def start_commit(self, claims_now: bool) -> Future | None:
        """Fix ``base`` before the commit claims its markers (``claims_now``: it has not yet).
        A transaction that read long ago starts from the log's head: the entries from its first
        read on may be cleaned up by now. Otherwise the hint is read in the background (returned:
        wait for it before reading the head), hidden behind the claims."""
        if claims_now and self.base is None and self.cut.age() > LONG_TRANSACTION:
            head0 = self.gvl.head()
            self.base = head0.seq if head0 is not None else -1
            return None
        if self.base is None:
            self.base = self.cut.last_seq
        return submit(self.gvl.read_hint)  # never build on an entry clean-up removed meanwhile

    # -- the decision ------------------------------------------------------------------------
    def decide(self, txn: Announcing, written: set[str],
               prepare: Callable[[], dict[str, records.TableIntent]], hint: Future | None,
               tries: int) -> GvlEntry:
        """The entry, appended, that decides ``txn`` (``prepare`` runs before each try and returns
        the table intents). ``TransactionAborted`` if it cannot be decided,
        ``CommitPendingError`` if whether the log kept it cannot be told."""
        for _ in range(tries):
            intents = prepare()
            if hint is not None:
                hint.result()  # the head below starts at the horizon it read, or later
                hint = None
            head = self.gvl.head(fresh=False)
            entry = self.entry_for(txn, head, written, intents)
            if entry is None:
                continue  # a table moved while we validated: again
            outcome = self._announce(txn, entry)
            if outcome not in (APPENDED, TAKEN, FORKED):
                outcome = self._settle_announcement(txn, entry)
            if outcome == APPENDED:
                return entry
            if outcome == TAKEN:
                txn.count("gvl_races")
                continue
            if outcome == FORKED:
                raise TransactionAborted(
                    "clean-up of the global log deleted the slot this commit was announced in "
                    "while it validated (the announcement is not part of the log); nothing of it "
                    "is visible, re-run it", txn_id=txn.id, reason="gvl-horizon")
            txn.decided()
            raise CommitPendingError(
                f"transaction {txn.id} announced its commit as global-log entry {entry.seq}, but "
                "clean-up passed that entry at the same time, so whether the log kept it cannot be "
                "told here; lake.recover() settles it (commit or abort)", txn_id=txn.id)
        raise TransactionAborted("lost the global log race too often", txn_id=txn.id,
                                 reason="retries")

    def _announce(self, txn: Announcing, entry: GvlEntry) -> str:
        """The deciding append (``gvl.append`` settles an error from the put by reading the
        slot back; if even that fails the exception leaves us in doubt: CommitPendingError)."""
        txn.check_age()
        txn.in_doubt(f"its global log announcement {entry.seq}")
        outcome = self.gvl.append(entry, self.gvl.last_hint)
        txn.in_doubt(None)
        return outcome

    def _settle_announcement(self, txn: Announcing, entry: GvlEntry) -> str:
        """Clean-up passed the slot we just took and deleted the entries after it, so the
        chain cannot show whether we extended it or wrote into a slot it had already freed.
        An entry built on ours carries our writes until they land, so: named by an entry
        the log still has, or landed on a table, means ours is in the log; neither means it
        is a fork nobody reads."""
        try:
            state, _, _ = self.gvl.find_decision(txn.attempt, entry.seq - 1)
            if state is None:
                for name, p in entry.own_writes().items():
                    if gvl_resolve.find_pending(self.log_for(name), p) is not None:
                        state = "committed"
                        break
        except Exception:  # noqa: BLE001 - still cannot tell: recovery settles it
            return "unsure"
        if state == "committed":
            return APPENDED
        return FORKED

    # -- module 4.2: validation and the entry -------------------------------------------------
    def entry_for(self, txn: Announcing, head: GvlEntry | None, written: set[str],
                  intents: dict[str, records.TableIntent] | None = None) -> GvlEntry | None:
        """Validate against ``head`` and build the entry that announces ``txn``.

        The entry takes in every commit made since on the tables we touch (written ones up
        to where our commit goes, read ones up to their newest), whole (closure.py);
        serializable reads are checked (R1) against everything between the version read and
        the entry's; a commit below our write that we did not validate moves us (R3, None:
        plan again)."""
        intents = intents or {}
        self._check_not_aborted(txn, head)
        head_map: dict[str, int | PendingWrite] = dict(head.tables) if head is not None else {}
        if head is not None:
            head_map.update(head.pending)
        resolved: dict[str, int | None] = {}

        def base_of(t: str) -> int | None:
            if t not in resolved:
                x = head_map.get(t)
                if isinstance(x, PendingWrite):
                    x = gvl_resolve.resolve_write(self.log_for(t), x)
                resolved[t] = x
            return resolved[t]

        moved = r3_unvalidated_write(written, base_of, lambda t: txn.tables[t].validated_upto)
        if moved is not None:
            txn.revalidate(moved)  # check (and redo) against it, then plan again
            return None
        limits: dict[str, int] = {}
        for name in written:
            it = intents.get(name)
            if it is not None and it.mode == CommitMode.IN_PLACE:
                assert it.marker is not None  # an in-place commit fills its marker
                hint = it.marker
            else:
                hint = txn.tables[name].validated_upto + 1
            limits[name] = hint - 1
        check_reads = txn.isolation != "snapshot"
        targets = set(written) | {n for n in txn.tables if check_reads or base_of(n) is None}
        growth = Closure(self.log_for, self.recs, base_of, limits=limits, pull=True,
                         below_commit=set(written)).grow(targets)
        for name in written:
            if growth.caps.get(name, -1) < limits[name]:
                txn.count("gvl_not_yet")  # a commit below ours cannot be taken whole yet
                time.sleep(0.01)  # protocol backoff: its owner is finishing it
                return None
        if check_reads:
            self._check_reads(txn, written, growth.caps)
        entry = head.successor(txn.attempt) if head is not None else first_entry()
        entry.txn = txn.attempt
        delta = {t: v for t, v in growth.caps.items()
                 if v >= 0 and ((b := base_of(t)) is None or v > b)}
        for t, v in delta.items():
            entry.tables[t] = v
            entry.pending.pop(t, None)  # resolved: the table moved past it
        entry.grown = delta
        entry.groups = [g for g in growth.groups if all(t in delta for t in g)]
        entry.reads = sorted(n for n in txn.tables if n not in written) if check_reads else []
        for name, it in intents.items():
            entry.pending[name] = PendingWrite(attempt=txn.attempt, hint=limits[name] + 1,
                                               commit=it.commit, marker=it.marker, mode=it.mode)
        self._resolve_known_pending(txn, entry)
        return entry

    def _check_not_aborted(self, txn: Announcing, head: GvlEntry | None) -> None:
        """A recovering client that found our markers expired aborts our attempt by an entry
        after ``base``: look for it (and refuse if clean-up removed where it could be)."""
        scan_from = self.base if self.base is not None else -1
        if head is None or scan_from >= head.seq:
            return
        gone = TransactionAborted(
            "the global log was cleaned up past the start of this transaction's commit, so whether "
            "a recovering client aborted it cannot be checked; re-run it", txn_id=txn.id,
            reason="gvl-horizon")
        if scan_from < self.gvl.horizon - 1:
            raise gone
        try:
            after = self.gvl.entries_after(scan_from, head.seq)
        except CorruptLogError:
            raise gone from None
        for e in after:
            if txn.attempt in e.aborts:
                raise TransactionAborted("aborted by a recovering client (our markers had expired)",
                                         txn_id=txn.id, reason="preempted")

    @staticmethod
    def _check_reads(txn: Announcing, written: set[str], caps: dict[str, int]) -> None:
        """R1: no commit the entry takes in may invalidate what ``txn`` read."""
        for name, tw in txn.tables.items():
            hidden = caps.get(name)
            if name in written or hidden is None or hidden <= tw.validated_upto:
                continue
            commits = [(v, c) for v, c in tw.log.commits_between(tw.validated_upto, hidden)
                       if marker_of(c) is None and commit_txn(c) != txn.attempt]
            viol = r1_stale_reads(name, tw.footprints(), commits, hidden, txn.slack, tw.schema,
                                  tw.base.partition_columns)
            if viol is not None and txn.reads_hold(name, commits, hidden):
                # validation by value: what we read is what `hidden` holds
                txn.count("r1_same_rows")
                viol = None
            if viol is not None:
                txn.count("r1")
                raise TransactionAborted(f"stale read: {viol}", txn_id=txn.id, reason="R1")
            tw.validated_upto = max(tw.validated_upto, hidden - txn.slack)

    def _resolve_known_pending(self, txn: Announcing, entry: GvlEntry) -> None:
        """Pending writes of earlier transactions on tables we touched are resolved by now:
        replace them with their versions so the log stays small."""
        for name in list(entry.pending):
            p = entry.pending[name]
            if p.attempt == txn.attempt:
                continue
            v = gvl_resolve.find_pending(self.log_for(name), p)  # one GET per announced write, once
            if v is not None:
                entry.tables[name] = v
                del entry.pending[name]

    def after_commit(self, seq: int, keep: int, min_age: float) -> None:
        """Every ``keep // 10`` entries, a committer trims the log to its newest ``keep`` (none
        younger than ``min_age``: the clients' max_transaction_age)."""
        if keep and seq % max(keep // 10, 1) == 0 and seq > keep:
            self.gvl.cleanup(keep, min_age=min_age)
