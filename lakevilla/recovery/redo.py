"""The conflict policy: what a transaction does when a commit since its read conflicts.

Without R a conflict aborts (``AbortOnConflict``). With R (``RedoOnConflict``) the
operations from the first conflicting one on are undone and re-executed on the new
snapshot, and each redone operation is logged again; the files it replaced are deleted
once the transaction is decided. A read among them that already returned its rows to the client must
return the same rows again (``read_results.py``: validation by value), else the transaction aborts;
so does one whose rows could not be kept for that comparison, and one resumed from a
physical sublog entry. The policies see a ``RedoContext``, never the transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import TransactionAborted
from ..statements.read_results import ReadChanged

if TYPE_CHECKING:
    from ..statements.view import Recorded, TableWork


@dataclass
class RedoContext:
    """What a conflict policy may use: the engine and the transaction's bookkeeping hooks."""

    txn_id: str
    engine: Any
    write_sublog: Callable[[TableWork, Recorded, bool], None]  # (table work, op, redo)
    count: Callable[[str, int], None]
    # (table, version, why, ops): the log event
    redone: Callable[[str, int, str, list[Recorded]], None]


class ConflictPolicy(Protocol):
    redoes: bool  # a conflict is redone (R), so a kept read that changed dooms a waiting commit

    def on_conflict(self, ctx: RedoContext, tw: TableWork, k: int, version: int, why: str,
                    latest: int) -> None:
        """``tw.ops[k]`` conflicts with ``version`` (``why``); return once ``tw`` is valid
        up to ``latest``, or raise ``TransactionAborted``."""

    def doomed(self, tw: TableWork, k: int) -> bool:
        """Whether a conflict at ``tw.ops[k]`` can only end in an abort, whatever else
        commits: then a waiting transaction aborts at once instead of after its wait."""


class AbortOnConflict:
    redoes = False

    def on_conflict(self, ctx: RedoContext, tw: TableWork, k: int, version: int, why: str,
                    latest: int) -> None:
        raise TransactionAborted(f"{tw.name}: conflict with version {version}: {why}",
                                 txn_id=ctx.txn_id)

    def doomed(self, tw: TableWork, k: int) -> bool:
        return True


class RedoOnConflict:
    redoes = True

    def doomed(self, tw: TableWork, k: int) -> bool:
        # a redo replaces ops[k:] only; an op before k keeps its footprint, so its conflict
        # stays, and a read at or after k has returned rows a redo would change
        return any(op.consumed or not op.redoable for op in tw.ops[k:])

    def on_conflict(self, ctx: RedoContext, tw: TableWork, k: int, version: int, why: str,
                    latest: int) -> None:
        consumed = [op for op in tw.ops[k:] if op.consumed]
        stuck = [op for op in tw.ops[k:] if not op.redoable]
        if stuck and not consumed:
            raise TransactionAborted(
                f"{tw.name}: version {version} conflicts with a resumed operation whose sublog is "
                f"physical ({why}); it cannot be redone", txn_id=ctx.txn_id,
                reason="physical-conflict")
        if consumed:
            raise TransactionAborted(
                f"{tw.name}: version {version} invalidates a read whose result this transaction "
                f"already returned ({why}); re-run it (lake.run does)", txn_id=ctx.txn_id,
                reason="consumed-read")
        snap = tw.log.snapshot(latest)
        try:
            redone = tw.redo(ctx.engine, k, snap)
        except ReadChanged as e:  # the rows the client consumed are not there any more
            raise TransactionAborted(
                f"{tw.name}: version {version} invalidates a read whose result this transaction "
                f"already returned ({why}; {e}); re-run it (lake.run does)", txn_id=ctx.txn_id,
                reason="consumed-read") from None
        for op in redone:
            if not op.is_write:  # it returned the same rows: nothing to log (a resumed run still
                continue  # validates it from its first version, and aborts where it cannot tell)
            op.logical = True
            ctx.write_sublog(tw, op, True)
        # the files the undone operations wrote (tw.garbage) are deleted after the decision, off
        # the commit's path (commit clean-up or abort), never before the entries above replace
        # the ones naming them
        ctx.count("redos", len(redone))
        ctx.redone(tw.name, version, why, redone)
        tw.validated_upto = latest


def conflict_policy(redo: bool) -> ConflictPolicy:
    """The policy of a feature set: redo with R, abort without."""
    return RedoOnConflict() if redo else AbortOnConflict()
