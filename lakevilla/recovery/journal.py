"""What a transaction writes to its sublogs before commit, as a part the features choose.

With R every write statement leaves one entry (sublog.py), so that a recovering client
can finish, undo or redo the transaction; the reads since the last entry ride along with
the next one (redo needs them). Where a record, the global log or an in-place fill decides,
the entries land before the decision; a one-table commit at the tail is its own decision
and needs none, so there they may land beside it (``deferred``, ``behind``). Without R
nothing is logged: ``NoJournal`` keeps the same surface.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import LakeVillaError
from ..names import staged_prefix, sublog_key
from ..store import ObjectStore
from . import sublog as sublogs


@dataclass(frozen=True)
class JournalContext:
    """What the journal needs from its transaction: names and the store, nothing else."""

    txn_id: str
    store: ObjectStore
    attempt: Callable[[], str]  # the current attempt (it changes when recovery fences one off)
    features: str
    isolation: str
    mode: str
    count: Callable[[str], None]


class Journal:
    """LV[R]'s sublogs: one entry per write statement; numbering continues a resumed run.

    ``behind``: a statement's entry goes out behind it, on a thread of its own, while the client
    goes on (at the tail without I: a one-table commit there is its own decision and needs no
    entry; a CT record waits for them all before its markers are claimed).
    The entries land one after another, in statement order, so that what a crash leaves is a
    prefix, as when each was written before its statement returned: a resumed run continues
    from the last that landed. The commit's put waits for them beside it (``flush``)."""

    def __init__(self, ctx: JournalContext, seq: int = 0, behind: bool = False) -> None:
        self.ctx = ctx
        self.seq = seq
        self.keys: list[str] = []  # what goes when the transaction ends: entries, staged sources
        self._reads: list[sublogs.ReadRecord] = []
        self._lock = threading.Lock()  # tables are written in parallel
        self._deferring = False
        self._deferred: list[sublogs.SublogEntry] = []
        self._behind = behind
        self._last: threading.Thread | None = None  # the newest entry on its way
        self._held = False  # an entry behind failed: later ones wait for the flush, in order
        self._death: BaseException | None = None  # the process died under an entry (fault tests)

    def read(self, table: str, version: int, files: list[str], where: str | None) -> None:
        with self._lock:
            self._reads.append(sublogs.ReadRecord(table, version, files, where))

    def prepare(self, tw: Any, op: Any, engine: Any) -> None:
        """Before a statement runs: what it stages to fix its input (a merge's source on an
        engine that stages there) goes beside the sublogs, and with them when they go."""
        for key in op.prepare(tw, engine, staged_prefix(self.ctx.txn_id, op.seq)):
            self.keep(key)

    def together_with_claim(self, op: Any) -> bool:
        """Can the first write's entry go out with the marker claim (one round trip, not two)?
        Not a MERGE's: it stages its source first, so it keeps the order."""
        return bool(op.claims_with_entry)

    def statement(self, tw: Any, op: Any, preds_unknown: bool) -> None:
        """Log a write statement. Sent with the claim, or before a marker claimed at commit,
        whether a running predecessor makes the entry logical is not known yet
        (``preds_unknown``), so an update or delete carries its statement anyway."""
        op.logical = op.can_be_logical and (preds_unknown or tw.logical)
        self.write(tw, op, redo=False)

    def keep(self, key: str) -> None:
        """``key`` is deleted with the sublogs."""
        with self._lock:
            self.keys.append(key)

    def write(self, tw: Any, op: Any, redo: bool) -> None:
        for key in op.stage(self.ctx.store, self.ctx.txn_id):  # what a recovering client needs
            self.keep(key)
        with self._lock:
            self.seq += 1
            seq = self.seq
            reads, self._reads = self._reads, []
        e = sublogs.entry_for(self.ctx.txn_id, seq, op, logical=op.logical,
                              base_version=tw.base.version, read_version=tw.read_version,
                              reads=reads, redo=redo, attempt=self.ctx.attempt(),
                              features=self.ctx.features, isolation=self.ctx.isolation,
                              mode=self.ctx.mode)
        with self._lock:
            if self._deferring or self._held or self._death is not None:
                self._deferred.append(e)
                return
            if self._behind:
                t = threading.Thread(target=self._put_behind, args=(self._last, e),
                                     name="lakevilla-sublog", daemon=True)
                self._last = t
                t.start()
                return
        self._put(e)

    def _put_behind(self, before: threading.Thread | None, e: sublogs.SublogEntry) -> None:
        if before is not None:
            before.join()  # in statement order
        with self._lock:
            if self._held or self._death is not None:
                self._deferred.append(e)
                return
        try:
            self._put(e)
        except LakeVillaError:
            with self._lock:
                self._held = True
                self._deferred.append(e)
        except BaseException as death:  # noqa: BLE001 - re-raised by the flush, on the committing thread
            with self._lock:
                self._death = death

    def settle(self) -> None:
        """Wait until the entries on their way have landed or failed (before
        an undo deletes them)."""
        with self._lock:
            last = self._last
        if last is not None:
            last.join()

    def _put(self, e: sublogs.SublogEntry) -> None:
        sublogs.write(self.ctx.store, e)
        self.keep(sublog_key(self.ctx.txn_id, e.seq))
        self.ctx.count("sublogs")

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Redo entries written meanwhile wait for ``flush``: a one-table commit at the tail is
        its own decision and needs none of them, so they go out beside its put. Safe because
        the files the entries they replace name are deleted only after the decision: until
        the new entries land, the old ones still describe files that exist (a resumed run
        redoes from them, an undo deletes them; the redo's own files are left to abandoned-
        file deletion, as after a crash between a redo's data and its entry)."""
        with self._lock:
            self._deferring = True
        try:
            yield
        finally:
            with self._lock:
                self._deferring = False

    @property
    def has_deferred(self) -> bool:
        with self._lock:
            return bool(self._deferred) or self._death is not None or (
                self._last is not None and self._last.is_alive())

    def flush(self, must_land: bool = False) -> None:
        """Wait for the entries on their way, then write the deferred ones; one that fails waits
        for the next flush (see ``deferred``), or, ``must_land`` (a record or markers follow),
        raises."""
        self.settle()
        with self._lock:
            if self._death is not None:
                raise self._death
            pending, self._deferred = self._deferred, []
            self._held = False
        for i, e in enumerate(pending):
            try:
                self._put(e)
            except LakeVillaError:
                with self._lock:
                    self._deferred[:0] = pending[i:]
                    self._held = True
                if must_land:
                    raise
                return


class NoJournal(Journal):
    """Without R: nothing is logged (recovery can only undo what a marker names)."""

    def read(self, table: str, version: int, files: list[str], where: str | None) -> None:
        pass

    def prepare(self, tw: Any, op: Any, engine: Any) -> None:
        op.prepare(tw, engine, None)  # no sublogs to stage beside: the engine holds it

    def together_with_claim(self, op: Any) -> bool:
        return False

    def statement(self, tw: Any, op: Any, preds_unknown: bool) -> None:
        pass

    def write(self, tw: Any, op: Any, redo: bool) -> None:
        pass
