"""Validation: a transaction's statements against the commits that landed since it read.

Every commit another transaction made to a table since we last validated it is checked
against our statements' footprints (``scan/conflicts.py``). A conflict goes to the conflict
policy the features chose (``recovery/redo.py``: redo with R, abort without). Two refinements:
a read whose rows were kept is re-run and compared (validation by value: the same rows mean no
conflict for a table we only read), and while a commit waits for its predecessors, a landed
commit that can only end in an abort aborts it at once instead of after the wait.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import TransactionAborted
from ..markers.marker import RUNNING, commit_txn, marker_of
from ..recovery.redo import ConflictPolicy, RedoContext
from ..scan.conflicts import Footprint, first_conflict
from .context import TxnContext
from .markerset import MarkerSet

if TYPE_CHECKING:
    from ..delta.actions import Commit
    from ..statements.view import TableWork

Commits = list[tuple[int, "Commit"]]


class Validator:
    def __init__(self, ctx: TxnContext, markers: MarkerSet, conflicts: ConflictPolicy,
                 redo: RedoContext) -> None:
        self.ctx = ctx
        self.markers = markers
        self.conflicts = conflicts
        self.redo = redo

    def _foreign_commits(self, tw: TableWork, upto: int) -> Commits:
        own = self.markers.own_versions(tw)
        out = []
        for v in sorted(tw.recheck - own):
            if v > tw.validated_upto:
                continue  # in the range below anyway
            c = tw.log.read_commit(v)  # unstable versions are re-read
            m = marker_of(c)
            if m is None:
                out.append((v, c))  # filled in place after we read it as empty
                tw.recheck.discard(v)
            elif m.state != RUNNING:
                tw.recheck.discard(v)
        return out + self.landed_since(tw, tw.validated_upto, upto, own)

    def landed_since(self, tw: TableWork, lo: int, upto: int, own: set[int]) -> Commits:
        """Other transactions' commits in (lo, upto] (markers and our own versions left out)."""
        return [(v, c) for v, c in tw.log.commits_between(lo, upto)
                if v not in own and commit_txn(c) != self.ctx.attempt and marker_of(c) is None]

    def abort_if_doomed(self, tws: list[TableWork]) -> None:
        """While we wait: a commit that landed since we validated and that conflicts beyond what
        a redo can fix (without R any conflict; with R a read whose rows the client holds and
        that returns other rows now, or one that cannot be compared) aborts us now, not after
        the wait; our markers close sooner and hold up nobody. Redoable conflicts wait for the
        full validation after the wait, so a redo runs once against all predecessors. The
        commits were just read by the wait round; only a kept read's re-run costs requests."""
        for tw in tws:
            upto = tw.log.known_latest()
            lo = max(tw.validated_upto, tw.doom_checked)
            if upto <= lo:
                continue
            landed = self.landed_since(tw, lo, upto, self.markers.own_versions(tw))
            tw.doom_checked = upto
            fps = tw.footprints()
            hit = first_conflict(fps, landed, tw.schema, tw.base.partition_columns)
            if hit is None:
                continue
            k, version, why = hit
            doomed = self.conflicts.doomed(tw, k)
            if not doomed and not (self.conflicts.redoes
                                   and self._read_changed(tw, k, fps, landed, upto)):
                continue
            self.ctx.count("conflicts", 1)
            self.ctx.count("aborted_while_waiting", 1)
            if doomed:
                self.conflicts.on_conflict(self.redo, tw, k, version, why, upto)  # raises
            raise TransactionAborted(f"{tw.name}: a commit up to version {upto} invalidates a read "
                                     "whose result this transaction already returned (its rows "
                                     "differ now); re-run it (lake.run does)", txn_id=self.ctx.id,
                                     reason="consumed-read")

    def _reread(self, tw: TableWork, k: int, fps: list[Footprint], commits: Commits,
                upto: int) -> Iterator[bool | None]:
        """For each statement at or after ``ops[k]`` that ``commits`` conflict with: whether it is
        a kept read that returns other rows at ``upto`` (None: it cannot be told). Lazy, so a
        caller that has its answer stops re-running reads."""
        snap = None
        for i in range(k, len(tw.ops)):
            if first_conflict([fps[i]], commits, tw.schema, tw.base.partition_columns) is None:
                continue
            if not tw.ops[i].comparable:
                yield None
                continue
            snap = snap or tw.log.snapshot(upto)
            yield tw.ops[i].would_change(tw, self.ctx.client.engine, snap)

    def _read_changed(self, tw: TableWork, k: int, fps: list[Footprint], landed: Commits,
                      upto: int) -> bool:
        """A kept read at or after ``ops[k]`` that a landed commit conflicts with and that would
        return other rows at ``upto``: its redo after the wait would abort, so abort now."""
        return any(changed is True for changed in self._reread(tw, k, fps, landed, upto))

    def reads_hold(self, tw: TableWork, commits: Commits, version: int) -> bool:
        """R1 by value, for a table we only read: every statement that ``commits`` conflict with
        is a kept read that returns the same rows at ``version`` (as a redo's read must,
        ``read_results.py``), so we may be serialized after those commits."""
        if any(o.is_write for o in tw.ops):
            return False
        return all(changed is False
                   for changed in self._reread(tw, 0, tw.footprints(), commits, version))

    def validate(self, tw: TableWork, upto: int | None = None) -> bool:
        """Check our statements against every commit since we last validated; redo (R) or abort.
        True if a commit conflicted (and we redid)."""
        conflicted = False
        for _ in range(self.ctx.settings.max_retries + 1):
            latest = tw.log.newest() if upto is None else upto
            if latest <= tw.validated_upto:
                return conflicted
            hit = first_conflict(tw.footprints(), self._foreign_commits(tw, latest), tw.schema,
                                 tw.base.partition_columns)
            if hit is None:
                tw.validated_upto = latest
                return conflicted
            k, version, why = hit
            self.ctx.count("conflicts", 1)
            self.conflicts.on_conflict(self.redo, tw, k, version, why, latest)  # redo (R) or abort
            conflicted = True
            if upto is None:
                continue
            return conflicted
        raise TransactionAborted(f"{tw.name}: conflicts kept recurring", txn_id=self.ctx.id,
                                 reason="retries")
