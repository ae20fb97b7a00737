"""CT's part of the commit path: several tables decide by one transaction record.

Markers are claimed at commit, all at once (claimed statement by statement, two transactions
that write two tables meet in opposite orders whenever the gap between their statements
differs, and a marker held while statements run holds every follower up). Then every table is
prepared (wait, validate, redo) and one put-if-absent of the record decides them all
(``decide.py``); after it, the table commits are published from the record. A transaction that
wrote one table decides by that table's commit, as R does, and at the tail it also commits as R
does: optimistically, with a marker only to queue. A marker there would order it behind every
running writer of the table, conflicting or not, while nobody can wait for a transaction that
holds none, so it cannot be part of a cycle either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.deciding import CommitResult, Deciding
from ..core.per_table import PerTable
from ..vocab import CommitMode
from . import record as records
from .decide import decide_by_record

if TYPE_CHECKING:
    from ..statements.view import TableWork


class ByRecord(PerTable):
    def decide(self, written: list[TableWork]) -> CommitResult:
        if len(written) == 1 and self.ctx.mode == CommitMode.TAIL:
            return super().decide(written)
        # the entries went out behind the statements: all land before a marker says we commit
        self.journal.flush(must_land=True)
        unclaimed = [tw for tw in written if tw.marker is None and tw.creating is None]
        if unclaimed:
            # all at once: the window in which a cycle can form is one round trip
            self.markers.claim(unclaimed)
            self.markers.watch()
        return self._commit_record(written) if len(written) > 1 else super().decide(written)

    def _commit_record(self, written: list[TableWork]) -> CommitResult:
        ctx = self.ctx

        def prepare() -> dict[str, records.TableIntent]:
            self.prepare_all(written)
            return self.intents(written)

        decided = decide_by_record(ctx.client.store, Deciding(ctx, self.markers, self.validator),
                                   prepare, ctx.settings.max_retries)
        ctx.decided = True
        versions = self.publish_all(decided.tables, written)
        ctx.post_commit("record", records.finish, ctx.client.store, decided)
        ctx.post_commit("release", self.markers.release_names, "committed")
        self.cleanup_after_commit()
        return CommitResult(ctx.id, versions, dict(ctx.stats))
