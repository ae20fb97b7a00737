"""R's decision (and a one-table CT commit's): each table decides by its own commit.

At the tail the commit is one put-if-absent right after what we know, racing other writers
optimistically; a lost race costs a short random pause and a read forward to the first free
version (not a put per version others took), one lost to a commit that conflicts a redo, and after
``QUEUE_AFTER_CONFLICTS`` of those (or the whole retry budget) the transaction claims a
marker and queues, so that it cannot starve. In place, it fills the marker it claimed at its
first write, unless a checkpoint or a foreign commit lies above it. A table the transaction
creates decides by a transaction record of its own, which its name's reservation fences.
"""

from __future__ import annotations

import functools
import random
import time
from typing import TYPE_CHECKING, Any

from .. import parallel
from ..complex_txn import record as records
from ..complex_txn import reservations
from ..complex_txn.decide import decide_by_record
from ..delta.actions import Commit
from ..delta.log import VersionExists
from ..errors import LakeVillaError, TransactionAborted
from ..markers.marker import ENGINE_INFO, MarkerLost
from ..markers.marker import rewrite as rewrite_marker
from ..markers.overtake import BACK_OFF_LOSSES, QUEUE_AFTER_CONFLICTS, RELIST_AFTER_LOST
from ..markers.publish import publish_create
from ..store import NotFound
from ..vocab import CommitMode
from .deciding import CommitResult, Decider, Deciding
from .riding import Riding

if TYPE_CHECKING:
    from ..statements.view import TableWork


class PerTable(Decider):
    def __init__(self, *parts: Any) -> None:
        super().__init__(*parts)
        self.riding = Riding(self.ctx, self.overtake, self.journal)  # group commit

    def decide(self, written: list[TableWork]) -> CommitResult:
        # a failure after an earlier table committed becomes a PartialCommitError in commit()
        for tw in sorted(written, key=lambda w: w.name):
            if tw.creating is not None:
                self.journal.flush()  # a record decides a creation: every entry lands before it
                self.commit_create(tw)
            else:
                self.commit_one_table(tw)
        self.cleanup_after_commit()
        return CommitResult(self.ctx.id, dict(self.ctx.committed), dict(self.ctx.stats),
                            partial=len(written) > 1)

    def commit_create(self, tw: TableWork) -> int:
        """A created table outside a CT commit decides by a record of its own (one intent), so
        that the name's reservation can fence it like any other creating transaction."""
        ctx = self.ctx

        def prepare() -> dict[str, records.TableIntent]:
            self.markers.hold_name(tw)
            return self.intents([tw])

        decided = decide_by_record(ctx.client.store, Deciding(ctx, self.markers, self.validator),
                                   prepare, ctx.settings.max_retries)
        ctx.decided = True
        v = publish_create(tw.log, ctx.attempt,
                           Commit.from_bytes(decided.tables[tw.name].commit.encode()))
        ctx.decided = False  # landed: later tables of an R commit are decided on their own
        ctx.landed(tw, v)
        ctx.post_commit("record", records.finish, ctx.client.store, decided)
        ctx.post_commit("release", reservations.release, ctx.client.store, tw.name, ctx.attempt,
                        "committed")
        return v

    def commit_one_table(self, tw: TableWork) -> int:
        ctx = self.ctx
        lost, tries, conflicted = 0, 0, 0
        while True:
            tries += 1
            spent = tries > ctx.settings.max_retries + 1
            if spent and tw.marker is not None:
                raise TransactionAborted(f"{tw.name}: lost the commit race {lost} times",
                                         txn_id=ctx.id, reason="retries")
            if spent and tw.marker is None:
                self._queue(tw, "budget")
                tries = 1  # the queue's turn gets the whole budget: the races lost before it were
                # spent racing, and a writer that ignores markers can still take its versions
            self._wait(tw)
            if ctx.mode == CommitMode.IN_PLACE:
                self.validator.validate(tw)
            else:
                # no probe first: the commit's put-if-absent right after what we know is the probe
                with self.journal.deferred():  # a redo's entries go out beside the put below
                    upto = (max(tw.log.known_latest(), tw.marker.version) if tw.marker
                            else tw.waited_upto)
                    redone = self.validator.validate(tw, upto=upto)
                # the race we lost went to a commit that conflicted
                conflicted += bool(lost and redone)
                if tw.marker is None and conflicted >= QUEUE_AFTER_CONFLICTS:
                    self._queue(tw, "conflicts")
                    tries = 0  # as above; then wait for what precedes the marker, as any holder
                    continue
            if tw.marker is not None and tw.marker.lost:
                continue  # a recovering client freed it: the wait claims a new one
            commit = tw.build_commit({"timestamp": ctx.timestamp_ms(), "engineInfo": ENGINE_INFO,
                                      "lakevilla": ctx.commit_info(
                                          1, marker=tw.marker and tw.marker.version)})
            if self.overtake.revoked_by(tw, commit):
                continue  # a redo changed our commit: wait for that predecessor after all
            latest = tw.validated_upto
            if ctx.mode == CommitMode.IN_PLACE and self.fill_ok(tw, latest):
                assert tw.marker is not None
                ctx.check_age()
                ctx.in_doubt = f"the in-place commit to {tw.name}@{tw.marker.version}"
                try:
                    with ctx.mlock:
                        # marks the handle committed, under its lock
                        rewrite_marker(tw.log, tw.marker, commit)
                except MarkerLost:
                    ctx.in_doubt = None
                    ctx.stats["fill_lost"] += 1
                    continue
                ctx.landed(tw, tw.marker.version)
                ctx.post_commit("checkpoint", self.after_table_commit, tw, tw.marker.version)
                return tw.marker.version
            v, c = latest + 1, commit
            if self.riding.eligible(tw):  # a crowd on this table: lead version v, or ride in it
                if tw.log.probe_versions(latest) > latest:
                    # v is taken already (our first look at a crowded tail is mostly late):
                    # validate what landed first; a lead or a request for a decided version
                    # is a round trip or three for nothing
                    ctx.count("ride_caught_up")
                    tries -= 1
                    continue
                at = self.riding.commit(tw, v, c, functools.partial(self._revalidate, tw))
                if at is not None:
                    ctx.client.background(functools.partial(self._after_single_commit, tw, at))
                    return at
                # the versions went to others without us: a race lost, but not a turn to queue
                # for (a ride is no race: a version's leader takes riders oldest first)
                ctx.stats["retries"] += 1
                catch_up(tw, tw.log.known_latest() + 1)  # those versions were read already
                continue
            # a redo's entries
            flush = [self.journal.flush] if self.journal.has_deferred else []
            ctx.check_age()
            ctx.in_doubt = f"the commit to {tw.name}@{latest + 1}"
            put_at = time.monotonic()
            try:
                parallel.together(*flush, lambda: tw.log.write_commit(v, c))  # noqa: B023
            except VersionExists:
                ctx.in_doubt = None
                ctx.stats["retries"] += 1
                if tw.marker is None:
                    ctx.client.contention.met(tw.name)  # later commits here lead or ride
                # followers overtaking us must not starve us
                self.overtake.lost_race(tw, latest + 1)
                lost += 1
                if tw.marker is None:  # a queued turn backs off for nobody: followers wait for it
                    back_off(lost, time.monotonic() - put_at)
                catch_up(tw, v)
                continue
            ctx.landed(tw, latest + 1)
            ctx.client.background(functools.partial(self._after_single_commit, tw, latest + 1))
            return latest + 1

    def _revalidate(self, tw: TableWork, upto: int) -> Commit:
        """Our commit as it stands once validated up to ``upto`` (a rider that went on past
        versions it missed, and then took a lead: ``core/riding.py``)."""
        ctx = self.ctx
        with self.journal.deferred():  # a redo's entries go out beside the put
            self.validator.validate(tw, upto=upto)
        return tw.build_commit({"timestamp": ctx.timestamp_ms(), "engineInfo": ENGINE_INFO,
                                "lakevilla": ctx.commit_info(1)})

    def _wait(self, tw: TableWork) -> None:
        """Wait for the running markers below our commit. Without a marker of our own, our
        commit goes above every version we know of, so a marker claimed there while we waited
        (the log grew past what the last round looked at: a predecessor's commit probed, a
        peek) precedes us too: look again until the round saw the whole log we know."""
        while True:
            self.markers.wait([tw], self.validator.abort_if_doomed)
            if tw.marker is not None or tw.log.known_latest() <= tw.waited_upto:
                return

    def _queue(self, tw: TableWork, why: str) -> None:
        """Optimistic commit (R, or CT writing one table, at the tail) holds no marker: it waits
        for the running markers it cannot overtake, then races for the tail. Having lost
        ``QUEUE_AFTER_CONFLICTS`` races to conflicting commits, or its whole retry budget, it
        claims one: from then on followers that would conflict with it wait for it, so it cannot
        starve. Its statements are done, so the claim carries its footprints at once and
        followers that cannot conflict overtake it without a rewrite."""
        self.ctx.count("queued_at_commit")
        self.ctx.count(f"queued_for_{why}")
        self.markers.claim_first(tw, publish=True)

    def _after_single_commit(self, tw: TableWork, version: int) -> None:
        """Off the commit's latency path: the commit at the tail is the decision, and it names
        our marker, so a client that finds the marker still running sees that it committed
        (recovery closes it if we die first); the close only spares followers that look."""
        self.ctx.post_commit("close_marker", self.markers.close, tw, version)
        # after the close: a checkpoint is refused above an open marker
        self.ctx.post_commit("checkpoint", self.after_table_commit, tw, version)


def back_off(lost: int, put_took: float) -> None:
    """After a race lost without a marker: pause a random part of ``lost`` times what the lost put
    took. Every writer that lost the race learned the tail at once and would put at the next
    version together, all but one in vain (in YCSB A four puts in five lost); spread out, the
    next version mostly finds one writer, and the others find it taken when they read."""
    time.sleep(random.uniform(0, min(lost, BACK_OFF_LOSSES) * put_took))


def catch_up(tw: TableWork, lost_at: int) -> None:
    """After a race lost at ``lost_at``: read forward from there to the first free version, so
    that the next put goes there instead of one lost put per version taken meanwhile (each commit
    read is one the next validation needs; the free version costs one 404). A writer still
    finding versions taken after ``RELIST_AFTER_LOST`` reads is behind, not racing: one LIST
    finds the tail, and the validation reads the commits up to it in parallel."""
    for version in range(lost_at, lost_at + RELIST_AFTER_LOST):
        try:
            tw.log.read_commit_raw(version)
        except NotFound:
            return
        except LakeVillaError:
            return  # unreadable now: the next attempt's put finds out again
    tw.log.latest_version()
