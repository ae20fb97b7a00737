"""Overtaking: a follower commits before a waiting predecessor it cannot conflict with.

Markers order writers, but order matters only between writers that conflict. A one-table
transaction that has to wait publishes its footprints (files read and removed, read predicate)
in its marker; a follower whose commit, as it stands, cannot invalidate any of them commits
first. The predecessor then validates against that commit and finds nothing, so it neither
redoes nor aborts because of it. The check is made again on the commit actually written (a
redo may have changed it): if that one conflicts, the follower waits after all. A published
transaction that loses ``WITHDRAW_AFTER`` commit races to followers that overtook it withdraws
its footprints, so that a stream of followers cannot starve it.

Only where both sides decide by their table and commit at the tail: a transaction record or
the global log orders multi-table transactions, and an in-place fill lands below commits it
never saw, so neither may be overtaken.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import CorruptLogError, LakeVillaError
from ..scan.conflicts import Footprint, first_conflict
from ..vocab import CommitInfo, CommitMode, Decision
from .marker import RUNNING, MarkerLost, marker_of
from .marker import rewrite as rewrite_marker

if TYPE_CHECKING:
    from ..delta.actions import Commit
    from .marker import HeldTable as TableWork
    from .marker import MarkerPayload

Running = list[tuple[int, "MarkerPayload"]]  # (marker version, its payload)

FOOTPRINT_MAX_FILES = 256  # files named in a published footprint, at most (every follower reads it)
# Races a published transaction may lose to followers that overtook it before it withdraws its
# footprints (then later followers wait for it): overtaking pays off while the predecessor still
# waits, and must not starve it once it is ready.
WITHDRAW_AFTER = 3
# Races an optimistic transaction (no marker yet) may lose to commits that conflicted with it (each
# cost a redo) before it claims a marker and queues. A race lost to a commit that did not conflict
# costs one put, and a queue's marker costs more (a claim, a close, and a GET of it in every commit
# attempt of every other writer while it runs): those losses queue only once ``max_retries`` is
# spent, so that the race still ends in a turn, not an abort. The queued turn then gets the whole
# ``max_retries`` budget of its own.
QUEUE_AFTER_CONFLICTS = 3
# Versions a commit that lost a race reads forward from the winner's before it LISTs the log
# instead: still finding them taken, it is behind (others committed while it waited), not racing.
RELIST_AFTER_LOST = 3
# A commit without a marker that lost a race pauses up to this many times (at most) what its lost
# put took, a random part of it: racers spread out instead of all putting at the next version.
BACK_OFF_LOSSES = 4


class NeverOvertake:
    """Multi-table decisions and in-place fills: every running predecessor is waited for, and
    nothing is published."""

    def must_wait(self, tw: TableWork, running: Running) -> Running:
        return running

    def publish(self, tws: Sequence[TableWork]) -> None:
        pass

    def claim_footprint(self, tw: TableWork) -> list[dict[str, Any]] | None:
        return None

    def revoked_by(self, tw: TableWork, commit: Commit) -> bool:
        return False

    def lost_race(self, tw: TableWork, version: int) -> None:
        pass

    def overtook(self, tw: TableWork) -> bool:
        """Whether our commit on ``tw`` goes before a running predecessor it does not wait for
        (then it may not carry others' statements there: they were never checked against it)."""
        return False


class Overtake(NeverOvertake):
    """One transaction's overtakes: per table, the predecessors it commits before."""

    def __init__(self, count: Callable[..., None], pmap: Callable[[Callable, list], list],
                 background: Callable[[Callable[[], object]], None] | None = None,
                 max_files: int = FOOTPRINT_MAX_FILES) -> None:
        self._count = count
        self._map = pmap
        self._background = background
        self._queued: set[tuple[str, int]] = set()  # (table, marker version) publishes sent off
        self._max_files = max_files
        # table -> {marker version: its owner's published footprints}
        self._skipped: dict[str, dict[int, list[Footprint]]] = {}
        self._withdrawn: set[str] = set()  # tables whose followers must wait for us again
        self._lost: dict[str, int] = {}  # table -> races lost to followers that overtook us

    def must_wait(self, tw: TableWork, running: Running) -> Running:
        """The running predecessors we must wait for (called each round: one that finished is
        forgotten, one that published since is considered)."""
        before = self._skipped.get(tw.name, {})
        skip: dict[int, list[Footprint]] = {}
        out = []
        # with our commit's own lakevilla object: a commit of updates alone names its columns
        ours = (tw.build_commit({"lakevilla": CommitInfo().to_json()})
                if any(p.footprint is not None for _, p in running) else None)
        for v, p in running:
            fps = published(p) if ours is not None else None
            if fps is not None and ours is not None and first_conflict(
                    fps, [(v, ours)], tw.schema, tw.base.partition_columns) is None:
                if v not in before:
                    self._count("predecessors_overtaken")
                skip[v] = fps
            else:
                out.append((v, p))
        self._skipped[tw.name] = skip
        return out

    def overtook(self, tw: TableWork) -> bool:
        return bool(self._skipped.get(tw.name))

    def revoked_by(self, tw: TableWork, commit: Commit) -> bool:
        """Whether ``commit`` (the one about to be written) invalidates a predecessor we meant to
        overtake; that one is then waited for (the caller waits again)."""
        skip = self._skipped.get(tw.name)
        if not skip:
            return False
        for v, fps in list(skip.items()):
            if first_conflict(fps, [(v, commit)], tw.schema, tw.base.partition_columns) is not None:
                del skip[v]
                self._count("overtakes_revoked")
                return True
        return False

    def claim_footprint(self, tw: TableWork) -> list[dict[str, Any]] | None:
        """The footprints a marker claimed after our last statement carries from the start
        (None: too large to be worth every follower's read)."""
        fps = tw.footprints()
        if tw.name in self._withdrawn or sum(fp.size for fp in fps) > self._max_files:
            return None
        return [fp.to_json() for fp in fps]

    def publish(self, tws: Sequence[TableWork]) -> None:
        """We have to wait and run no more statements: say what we touched (once per marker), so
        that followers whose commits cannot conflict with it need not wait for us."""
        todo = []
        for tw in tws:
            h = tw.marker
            if (h is None or h.lost or h.payload.footprint is not None or h.payload.state != RUNNING
                    or tw.name in self._withdrawn):
                continue
            fps = tw.footprints()
            if sum(fp.size for fp in fps) > self._max_files:
                # a marker is read by every follower: a large footprint is not worth its bytes
                continue
            todo.append((tw, [fp.to_json() for fp in fps]))
        todo = [(tw, body) for tw, body in todo if _marker_key(tw) not in self._queued]
        if not todo:
            return
        self._queued.update(_marker_key(tw) for tw, _ in todo)
        if self._background is None:
            self._map(self._publish_one, todo)
        else:  # off the wait loop: we keep polling our predecessors meanwhile
            self._background(lambda: self._map(self._publish_one, todo))

    def lost_race(self, tw: TableWork, version: int) -> None:
        """Our commit's put at ``version`` lost. If followers that overtook us took it
        ``WITHDRAW_AFTER`` times, more could follow and starve us: withdraw our footprints, so
        that from now on followers wait for us (one marker rewrite, only then)."""
        h = tw.marker
        if h is None or h.payload.footprint is None or tw.name in self._withdrawn:
            return
        try:
            c = tw.log.read_commit(version)
        except LakeVillaError:
            c = None  # unreadable now: withdraw, to be safe
        if c is not None and marker_of(c) is not None:
            return  # a marker claim: nobody overtook us
        winner = CommitInfo.of(c.lakevilla) if c is not None else None
        if winner is not None and not (
                winner.is_commit and (winner.marker is None or winner.marker > h.version)):
            return  # a predecessor's commit we had not seen: nobody overtook us
        # (a commit without a marker came from a follower that committed optimistically past us)
        self._lost[tw.name] = self._lost.get(tw.name, 0) + 1
        if self._lost[tw.name] < WITHDRAW_AFTER:
            return
        self._withdrawn.add(tw.name)
        self._set_footprint(tw, None, "footprints_withdrawn")

    def _publish_one(self, item: tuple[TableWork, list[dict[str, Any]]]) -> None:
        tw, body = item
        if (tw.name not in self._withdrawn and tw.marker is not None
                and tw.marker.payload.footprint is None):
            self._set_footprint(tw, body, "footprints_published")

    def _set_footprint(self, tw: TableWork, body: list[dict[str, Any]] | None, done: str) -> None:
        """Rewrite our running marker with ``body`` as its footprint. Advisory: a store failure
        is counted, never raised (the commit path must not abort over it); the in-memory payload
        keeps the new value, so the next heartbeat's rewrite carries it (and settles an unknown
        outcome)."""
        h = tw.marker
        assert h is not None
        with h.lock:
            if h.lost or h.payload.state != RUNNING or h.payload.footprint == body:
                return
            h.payload.footprint = body
            try:
                rewrite_marker(tw.log, h)
            except MarkerLost:
                self._count("markers_lost")
                return
            except LakeVillaError:
                self._count("footprint_write_failed")
                return
        self._count(done)


def _marker_key(tw: TableWork) -> tuple[str, int]:
    assert tw.marker is not None  # publish keeps only tables with a running marker
    return tw.name, tw.marker.version


def published(p: MarkerPayload) -> list[Footprint] | None:
    """A predecessor's published footprints, if it may be overtaken (None: wait for it)."""
    if p.footprint is None or p.decision != Decision.TABLE or p.mode != CommitMode.TAIL:
        return None
    try:
        return [Footprint.from_json(d) for d in p.footprint]
    except (CorruptLogError, AttributeError):
        return None  # unreadable: wait for it as for any marker


def overtake_policy(
    decision: str, mode: str, count: Callable[..., None], pmap: Callable[[Callable, list], list],
    background: Callable[[Callable[[], object]], None] | None = None,
) -> NeverOvertake:
    """Chosen once per transaction, from its decision and commit mode."""
    if decision == Decision.TABLE and mode == CommitMode.TAIL:
        return Overtake(count, pmap, background)
    return NeverOvertake()
