"""I's part of the commit path: the global version log decides, and reads come from one cut.

Reads: every table at the versions of one consistent cut of the global order (``cut.py``); a
table the global log does not know yet is checked against its newest snapshot first (joining
the log writes an entry, so bad input must fail before). Commit: markers are claimed at commit,
every table is prepared as under CT, and one put-if-absent of the next global-log entry
validates (R1-R3) and decides (``decide.py``); then the table commits are published. A
read-only transaction saw a prefix of the global order, so it needs no validation and never
aborts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..complex_txn import record as records
from ..core.deciding import CommitResult, Decider, Deciding
from ..delta.features import check_readable
from .cut import Cut
from .decide import GlobalDecider

if TYPE_CHECKING:
    from ..delta.log import DeltaLog
    from ..delta.snapshot import Snapshot
    from ..statements.view import TableWork


class CutReader:
    """Snapshots at the versions of the transaction's cut."""

    def __init__(self, cut: Cut) -> None:
        self.cut = cut

    def snapshot(self, name: str, log: DeltaLog, precheck: Callable[[Snapshot], None]) -> Snapshot:
        # joining the global log writes an entry: refuse bad input first
        if not self.cut.knows(name):
            newest = log.snapshot()
            check_readable(name, newest.protocol, newest.metadata)
            precheck(newest)
        return log.snapshot(self.cut.version_of(name), list_log=False)

    def report(self) -> dict[str, Any]:
        return {"cut_base": self.cut.base_seq, "cut_last": self.cut.last_seq,
                "cut_tables": dict(self.cut.finals), "cut_stats": dict(self.cut.stats)}


class ByGlobalLog(Decider):
    """``global_``: the global-log decider of this transaction (it keeps the first entry an
    abort of the current attempt can be in, which our markers carry)."""

    # the global log announces table commits; a table it does not know has none
    creates_tables = False

    def __init__(self, *parts: Any, global_: GlobalDecider) -> None:
        super().__init__(*parts)
        self.global_ = global_

    def finish_read_only(self) -> CommitResult:
        """Nothing to do: a transaction that only read saw one consistent cut, a prefix of the
        global order, so it needs no validation in any isolation mode and never aborts."""
        ctx = self.ctx
        for k, n in self.global_.cut.stats.items():
            ctx.stats["cut_" + k] += n
        return CommitResult(ctx.id, {}, dict(ctx.stats), self.global_.cut.last_seq)

    def decide(self, written: list[TableWork]) -> CommitResult:
        ctx = self.ctx
        unclaimed = [tw for tw in written if tw.marker is None]
        hint = self.global_.start_commit(claims_now=bool(unclaimed))
        if unclaimed:
            self.markers.claim(unclaimed)  # LV[I] alone reserves its tables now, all at once
        self.markers.watch()

        def prepare() -> dict[str, records.TableIntent]:
            self.prepare_all(written)
            return self.intents(written)

        entry = self.global_.decide(Deciding(ctx, self.markers, self.validator),
                                    {tw.name for tw in written}, prepare, hint,
                                    ctx.settings.max_retries * 4 + 1)
        ctx.decided = True
        versions = self.publish_all({tw.name: entry.pending[tw.name] for tw in written}, written)
        ctx.post_commit("announce", self.global_.after_commit, entry.seq, ctx.settings.gvl_keep,
                        ctx.settings.max_transaction_age)
        self.cleanup_after_commit()
        return CommitResult(ctx.id, versions, dict(ctx.stats), entry.seq)
