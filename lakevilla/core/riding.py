"""Group commit in a one-table commit at the tail: lead the next version, or ride in it.

A commit whose client met contention on the table lately (``contention.py``) does not race
for version v: it creates v's lead object. The winner leads: it pauses for what that put took
(requests in flight land), reads the version's requests, carries every rider it can
(``recovery/group.py``) and puts one commit at v, the decision of every transaction it names.
A loser rides: it writes its request for v and polls v; v names it, it committed there; v does
not, it lost a race; v does not appear within ``RIDE_TIMEOUT``, it puts its own commit at v,
which is valid alone and fences the leader off (``docs/protocol.md``, "Group commit").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import parallel
from ..delta.actions import Commit
from ..delta.log import VersionExists
from ..engines.api import data_file_key
from ..errors import LakeVillaError
from ..markers.marker import FREED, MarkerPayload
from ..markers.overtake import NeverOvertake
from ..names import lead_key, request_key
from ..recovery import group as groups
from ..recovery import rides
from ..recovery import sublog as sublogs
from ..recovery.journal import Journal
from ..store import NotFound
from ..vocab import CommitInfo, CommitMode
from .context import TxnContext

if TYPE_CHECKING:
    from ..statements.view import TableWork

RIDE_TIMEOUT = 2.0  # seconds a rider waits for its version before it puts its own commit there
RIDE_HOPS = 4  # versions a rider asks for in a row before it goes on as after a lost race
RIDERS_MAX = 64  # riders one version carries at most
LEAD_PAUSE_MAX = 0.05  # seconds a leader waits, at most, for requests in flight
FIRST_POLL_ROUNDS = 4  # a rider first looks after about this many of its request's round trips


def carried(c: Commit) -> set[str]:
    """The attempts a group commit carries besides its leader's (none for any other commit)."""
    if "riders" not in c.derived:
        lv = c.lakevilla or {}
        info = CommitInfo.of(lv)
        riders = lv.get("riders") if info is not None and info.is_commit else None
        c.derived["riders"] = frozenset(
            r["attempt"] for r in riders
            if isinstance(r, dict) and isinstance(r.get("attempt"), str)
        ) if isinstance(riders, list) else frozenset()
    got: set[str] = c.derived["riders"]
    return got


class Riding:
    """One transaction's part in group commits (its decider's, per table)."""

    def __init__(self, ctx: TxnContext, overtake: NeverOvertake, journal: Journal) -> None:
        self.ctx = ctx
        self.overtake = overtake
        self.journal = journal

    def eligible(self, tw: TableWork) -> bool:
        """A one-table commit at the tail without a marker, on a table where this client met
        contention lately, whose statements a leader can take or run again."""
        return (self.ctx.settings.group_commit and self.ctx.mode == CommitMode.TAIL
                and tw.marker is None and tw.creating is None
                and tw.metadata is None and tw.protocol is None and not tw.ctx.write_cdf
                and all(op.kind in groups.RIDING_KINDS for op in tw.ops)
                and not self.overtake.overtook(tw)
                and self.ctx.client.contention.active(tw.name))

    def commit(self, tw: TableWork, version: int, commit: Commit,
               revalidate: Callable[[int], Commit]) -> int | None:
        """Where our statements landed: a version at or above ``version`` (our own commit, or a
        leader's that carried us); None when the versions we asked for went to others without
        them (a lost race: validate and go on above them). ``revalidate(upto)`` validates us up
        to ``upto`` (redoing what conflicts) and returns our commit as it then stands.

        The request goes first, the lead after: a writer learns it lost the lead only once its
        request is there, so the leader's LIST, a round trip after its lead, finds it. A rider
        the version went to others without asks for the next one at once, with the same
        statements: its leader checks them against what it missed (``recovery/group.py``)."""
        ctx = self.ctx
        target = version
        for hop in range(RIDE_HOPS):
            req = self.request(tw, target)
            ctx.check_age()  # the request is a deciding write: a leader may carry it
            # from the request on, a leader may carry us: nothing is undone until v is decided
            ctx.in_doubt = f"its ride in {tw.name}@{target}"
            started = time.monotonic()
            flush = [self.journal.flush] if self.journal.has_deferred else []
            try:
                parallel.together(*flush, lambda: rides.ask(ctx.client.store, req))  # noqa: B023
            except LakeVillaError:
                return self._fence(tw, target, commit)  # the request may be there
            asked = time.monotonic()
            lead = rides.Lead(ctx.attempt, ctx.id, time.time())
            if rides.take_lead(ctx.client.store, tw.name, target, lead):
                if tw.validated_upto < target - 1:
                    # only v's leader carries v's requests, and the versions we asked for before
                    # are decided: nobody can carry us now, so a validation may abort us
                    ctx.in_doubt = None
                    commit = revalidate(target - 1)
                return self._lead(tw, target, commit, time.monotonic() - asked)
            ctx.count("rides")
            found = self._poll(tw, target, FIRST_POLL_ROUNDS * (time.monotonic() - started) / 2)
            if found is None:
                ctx.count("rides_timed_out")
                return self._fence(tw, target, commit)
            if self._outcome(tw, target, found) is not None:
                return target
            if hop + 1 < RIDE_HOPS:
                ctx.count("rides_on")
                target += 1
        return None

    # -- leading ---------------------------------------------------------------------------
    def _lead(self, tw: TableWork, version: int, commit: Commit, took: float) -> int | None:
        ctx, store = self.ctx, self.ctx.client.store
        time.sleep(min(took, LEAD_PAUSE_MAX))  # a request on its way lands meanwhile
        try:
            reqs = [r for r in rides.requests(store, tw.name, version) if r.attempt != ctx.attempt]
        except LakeVillaError:
            reqs = []  # nobody is carried: each rider puts its own after its timeout
        keys = [lead_key(tw.name, version), request_key(tw.name, version, ctx.attempt)] + [
            request_key(tw.name, version, r.attempt) for r in reqs]
        group = groups.Group(commit)
        if reqs:
            group = groups.build(tw, commit, version, reqs, ctx.client.engine, now=ctx.now(),
                                 max_age=ctx.settings.max_transaction_age,
                                 max_riders=RIDERS_MAX,
                                 deadline=time.monotonic() + RIDE_TIMEOUT / 2)
        ctx.check_age()
        ctx.in_doubt = f"the commit to {tw.name}@{version}"
        flush = [self.journal.flush] if self.journal.has_deferred else []  # a redo's entries
        try:
            parallel.together(*flush, lambda: tw.log.write_commit(version, group.commit))
        except VersionExists:
            ctx.client.deletes.add(sorted(group.written) + keys)
            ctx.count("leads_lost")
            # another leader of v (our lead object cleaned up too early) may have carried us
            return self._outcome(tw, version, tw.log.read_commit(version))
        ctx.landed(tw, version)
        ctx.count("leads")
        if group.riders:
            ctx.count("riders_carried", len(group.riders))
            ctx.count("riders_rerun", group.rerun)
            ctx.client.contention.met(tw.name)
            root = ctx.client.root_uri
            named = {data_file_key(tw.name, p, root) for p in groups.named_paths(group.commit)}
            # our own files a rider's re-run replaced inside the version, and the leftovers of
            # what we ran again for riders
            mine = {data_file_key(tw.name, p, root)
                    for op in tw.ops for a in op.added for p in a.written_files}
            ctx.client.deletes.add(sorted((group.written | mine) - named) + keys)
        else:
            ctx.client.contention.calm(tw.name)  # nobody asked: the crowd is gone
            ctx.client.deletes.add(keys)
        if group.left_out:
            ctx.count("riders_left_out", len(group.left_out))
        return version

    # -- riding ----------------------------------------------------------------------------
    def request(self, tw: TableWork, version: int) -> rides.RideRequest:
        """Our statements on ``tw`` in order: writes as sublog entries (an update or delete
        logical, so that a leader can run it again), reads as read records."""
        ctx = self.ctx
        ops = []
        op: Any
        for op in tw.ops:
            if op.is_write:
                e = sublogs.entry_for(ctx.id, 0, op, logical=op.can_be_logical,
                                      base_version=tw.base.version, read_version=tw.read_version,
                                      reads=[], redo=False, attempt=ctx.attempt,
                                      features=ctx.label, isolation=ctx.isolation, mode=ctx.mode)
                ops.append({"entry": e.to_json()})
            else:
                ops.append({"read": sublogs.ReadRecord(tw.name, tw.read_version,
                                                       sorted(op.read_files), op.where).to_json()})
        return rides.RideRequest(txn=ctx.id, attempt=ctx.attempt, table=tw.name, version=version,
                                 features=ctx.label, started=ctx.started, ops=ops,
                                 validated_upto=tw.validated_upto)

    def _poll(self, tw: TableWork, version: int, first: float) -> Commit | None:
        """Version ``version`` once it exists; None after ``RIDE_TIMEOUT``."""
        deadline = time.monotonic() + RIDE_TIMEOUT
        delay = min(max(first, 0.002), RIDE_TIMEOUT / 4)
        while True:
            time.sleep(min(delay, max(deadline - time.monotonic(), 0.0)))
            try:
                return tw.log.read_commit_raw(version)[0]
            except NotFound:
                pass
            except LakeVillaError:
                pass  # a failed look: the next one, or our own put, learns it
            self.ctx.count("ride_polls")
            if time.monotonic() >= deadline:
                return None
            delay = min(delay * 1.5, 0.1)

    def _fence(self, tw: TableWork, version: int, commit: Commit) -> int | None:
        """No leader put ``version`` in time (or our request may be there unseen): put there
        ourselves, so that no leader can carry us there any more. Our own commit when it is
        valid there (we validated up to the version before); otherwise an empty version (a
        freed marker: no Delta reader sees a change) that only fences. Taken: that version
        decides us."""
        ctx = self.ctx
        ctx.check_age()
        ctx.in_doubt = f"the commit to {tw.name}@{version}"
        ours = tw.validated_upto == version - 1
        body = commit if ours else self._fence_commit(tw)
        try:
            tw.log.write_commit(version, body)
        except VersionExists:
            return self._outcome(tw, version, tw.log.read_commit(version))
        if not ours:
            ctx.in_doubt = None
            ctx.count("rides_fenced")
            return None
        ctx.landed(tw, version)
        return version

    def _fence_commit(self, tw: TableWork) -> Commit:
        ctx = self.ctx
        now = ctx.now()
        return MarkerPayload(txn=ctx.id, attempt=ctx.attempt, table=tw.name,
                             decision=ctx.decision, mode=ctx.mode, features=ctx.label,
                             state=FREED, started=ctx.started, heartbeat=now, expires=now,
                             reason="a rider's fence").to_commit()

    def _outcome(self, tw: TableWork, version: int, c: Commit) -> int | None:
        ctx = self.ctx
        ctx.client.contention.met(tw.name)
        if ctx.attempt not in carried(c):
            ctx.in_doubt = None
            return None
        ctx.landed(tw, version)
        ctx.count("carried")
        # what the leader ran again replaced some of our files: they go with our sublogs
        tw.carried_in(groups.named_paths(c))
        return version

