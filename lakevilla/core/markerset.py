"""The markers one transaction holds: claimed, heart-beaten, shifted, closed and released.

A marker orders a writer in one table's log (``markers/marker.py``). This part keeps a
transaction's markers and the names it reserved to create (``complex_txn/reservations.py``)
alive while it runs, learns who precedes it, waits for them (the wait policy its features
chose: ``markers/wait.py``, with a DAG ``complex_txn/wait.py``) and publishes its dependency
list (rule II) and, where it may be overtaken, its footprints. When recovery frees one of
its markers, the policy chosen once decides what follows: each table decides alone, so a
marker is claimed again; or a record or the global log decides, so the attempt may have been
aborted there and the transaction goes on under a new one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import logs
from ..complex_txn import reservations
from ..complex_txn.dag import Dependencies
from ..markers.floor import scan_start, scanned
from ..markers.marker import (
    ABORTED,
    COMMITTED,
    FREED,
    RUNNING,
    MarkerLost,
    MarkerPayload,
    commit_txn,
    marker_of,
)
from ..markers.marker import claim as claim_marker
from ..markers.marker import rewrite as rewrite_marker
from ..markers.wait import MarkerWait, WaitContext
from ..recovery.stalled import resolve_marker
from ..store import NotFound, PreconditionFailed
from ..vocab import Decision
from .context import TxnContext, open_above

if TYPE_CHECKING:
    from ..markers.overtake import NeverOvertake
    from ..statements.view import TableWork

MARKER_SCAN_WINDOW = 200
FULL_READ_EVERY = 0.25  # seconds between waits' re-reads of markers up to the lowest running one
WHOLE_READ_EVERY = 8  # a wait's full reads per re-read of every running predecessor's marker

Running = list[tuple[int, MarkerPayload]]


def _without_landed(running: Running, landed: set[str]) -> tuple[set[str], Running]:
    """(the attempts among ``running`` whose commits landed, the others)."""
    return ({p.attempt for _, p in running if p.attempt in landed},
            [(v, p) for v, p in running if p.attempt not in landed])


class MarkerSet:
    """``watch``: registers the transaction with the client's heartbeat service."""

    def __init__(self, ctx: TxnContext, waits: MarkerWait, overtake: NeverOvertake,
                 watch: Callable[[], None]) -> None:
        self.ctx = ctx
        self.waits = waits
        self.overtake = overtake
        self.watch = watch
        self.deps = Dependencies(ctx.attempt)
        self.says_changes = True  # our markers carry ``changes`` (chosen by ``txn/parts.py``)
        self._ended: set[tuple[str, str]] = set()  # (table, attempt): waits a commit ended
        self._last_beat = ctx.now()
        self.on_claim: Callable[[], None] = lambda: None  # I: note where an abort of ours can be
        # a marker recovery freed: claimed again where each table decides alone; where a record
        # or the global log decides, the attempt may be aborted there, so a new attempt
        self._on_lost: Callable[[list[TableWork]], None] = (
            self._reclaim if ctx.decision == Decision.TABLE else lambda lost: self.new_attempt())

    # -- claiming ------------------------------------------------------------------------
    def payload(self, table: str) -> MarkerPayload:
        ctx = self.ctx
        now = ctx.now()
        tw = ctx.tables.get(table)
        return MarkerPayload(
            txn=ctx.id, attempt=ctx.attempt, table=table, decision=ctx.decision, mode=ctx.mode,
            features=ctx.label, deps=sorted(self.deps.transitive), epoch=self.deps.epoch,
            markers={t: w.marker.version for t, w in ctx.tables.items() if w.marker is not None},
            started=ctx.started, heartbeat=now, expires=now + ctx.settings.marker_ttl,
            gvl_base=ctx.gvl_base(),
            changes=tw.changes() if tw is not None and self.says_changes else None,
        )

    def claim_first(self, tw: TableWork, publish: bool = False) -> None:
        self.on_claim()
        self.claim([tw], publish=publish)
        self.watch()

    def claim(self, tws: list[TableWork], start: int | None = None, publish: bool = False) -> None:
        """Claim markers on several tables at once (in parallel), then apply rules II/III once.
        ``publish``: our statements there are done, the markers carry our footprints at once."""

        def one(tw: TableWork) -> Running:
            with self.ctx.mlock:
                payload = self.payload(tw.name)
                if publish:
                    payload.footprint = self.overtake.claim_footprint(tw)
            first = start if start is not None else max(tw.log.known_latest(), tw.base.version) + 1
            h = claim_marker(tw.log, first, payload)  # collisions move us forward
            with self.ctx.mlock:
                tw.marker = h
            self.ctx.count("markers")
            # the first full read comes with the wait's rounds: a claim reads no marker it has
            # cached as running (those above it are new to us, and read)
            tw.markers_read_at = time.monotonic()
            preds = self.running_predecessors(tw)
            if preds:
                tw.logical = True
            return preds

        found = self.ctx.client.map(one, tws)
        # with a DAG: rules II/III now
        self.waits.claimed(self.wait_context(lambda tws: None), tws, found)

    def running_predecessors(self, tw: TableWork) -> Running:
        """Running markers below ours (without one: below the tail we know), excluding our own,
        and excluding those whose owner's commit to this table has landed: that commit is the
        owner's decision here (its marker closes after it, off the owner's latency path), and
        we validate against it."""
        ctx = self.ctx
        m = tw.marker.version if tw.marker is not None else tw.log.known_latest() + 1
        if tw.marker is None:
            tw.waited_upto = m - 1  # we commit above every version looked at here
        # from the last checkpoint known (a window at most), past what earlier scans cleared
        start = scan_start(tw.log, max(-1, m - MARKER_SCAN_WINDOW,
                                       tw.log.last_checkpoint_version() - 1))
        out = []
        candidates: Running = []  # running as we last read them
        ours: list[int] = []  # our own running markers: they keep the cleared range below them
        landed: set[str] = set()
        for v, c in tw.log.commits_between(start, m - 1):
            p = marker_of(c)
            if p is not None and p.state == RUNNING:
                if p.attempt != ctx.attempt and p.txn != ctx.id:
                    candidates.append((v, p))
                else:
                    ours.append(v)
            elif (a := commit_txn(c)) is not None:
                landed.add(a)
        # Predecessors resolve mostly in order, and while the lowest one that cannot be overtaken
        # runs we wait whatever the others do: a full read (every FULL_READ_EVERY seconds)
        # re-reads markers upwards up to that one and keeps the cached state of those above; a
        # whole read (the first full read on the table, every WHOLE_READ_EVERY-th after) reads
        # them all. A cached state that looks expired is read again (its owner may have beaten
        # since), so a live marker is never recovered for a stale copy. A stale "running" only
        # makes us wait longer; a commit of theirs is seen by the probe.
        # A marker holder probes first: most of those it saw running have committed since (above
        # their markers, below or above ours), and a landed commit is its owner's decision here,
        # so their markers need no GET; between full reads it re-reads none (an abort, a shift or
        # an expiry shows at the next one). Without a marker the probe stays last: it moves the
        # top this commit must stay below.
        holder = tw.marker is not None
        ended: set[str] = set()
        if candidates and holder:
            landed.update(self._landed_above(tw, m))
            ended, candidates = _without_landed(candidates, landed)
        now = time.monotonic()
        full = now - tw.markers_read_at >= min(FULL_READ_EVERY, ctx.settings.marker_ttl / 8)
        whole = full and tw.full_reads % WHOLE_READ_EVERY == 0
        if full:
            tw.markers_read_at = now
            tw.full_reads += 1
        blocked, clock = not full and holder, ctx.now()
        for v, cached in candidates:
            if blocked and not cached.expired(clock):
                out.append((v, cached))
                continue
            c, _ = tw.log.read_commit_raw(v)  # its state may have changed since we cached it
            p = marker_of(c)
            if p is not None and p.state == RUNNING:
                out.append((v, p))
                blocked = not whole and p.footprint is None
        if out and not holder:
            landed.update(self._landed_above(tw, m))
            ended, out = _without_landed(out, landed)
        scanned(tw.log, start, min([v for v, _ in out] + ours + [m]))
        new = {(tw.name, a) for a in ended} - self._ended
        if new:  # counted once: a landed commit's marker may stay cached as running
            self._ended |= new
            ctx.count("waits_ended_by_commit", len(new))
        return self.overtake.must_wait(tw, out)  # with none running, forgets those that finished

    @staticmethod
    def _landed_above(tw: TableWork, m: int) -> set[str]:
        """The attempts whose commits lie above our marker (or, without one, above the versions
        looked at), found by probing forward from the newest version known."""
        top = m if tw.marker is not None else m - 1
        newest = tw.log.probe_versions(max(top, tw.log.known_latest()))
        return {a for _, c in tw.log.commits_between(top, newest)
                if (a := commit_txn(c)) is not None}

    def own_versions(self, tw: TableWork) -> set[int]:
        vs = {h.version for h in tw.old_markers}
        if tw.marker is not None:
            vs.add(tw.marker.version)
        return vs

    # -- rules II and IV -------------------------------------------------------------------
    def publish_deps(self) -> None:
        if not self.deps.needs_publish():
            return
        deps = self.deps.mark_published()
        with self.ctx.mlock:
            held = [tw for tw in self.ctx.tables.values()
                    if tw.marker is not None and not tw.marker.lost]
            where = {t: w.marker.version for t, w in self.ctx.tables.items() if w.marker}

            def one(tw: TableWork) -> None:
                assert tw.marker is not None
                tw.marker.payload.deps = deps
                tw.marker.payload.markers = where
                try:
                    rewrite_marker(tw.log, tw.marker)
                    self.ctx.count("marker_rewrites")
                except MarkerLost:
                    pass

            self.ctx.client.map(one, held)  # each marker has its own etag: rewrites are independent

    def shift(self, why: str, kind: str) -> None:
        """Rule IV: free every marker and claim new ones at the tails; read versions stay.
        ``kind`` (cycle, no_progress, timeout, new_attempt) is counted as ``shifts_<kind>``."""
        ctx = self.ctx
        ctx.stats["shifts"] += 1
        ctx.stats["shifts_" + kind] += 1
        self.deps.shifted()  # the new markers carry the new epoch and no dependencies yet
        with ctx.mlock:
            old = {t: tw.marker for t, tw in ctx.tables.items() if tw.marker is not None}
            for t, h in old.items():
                tw = ctx.tables[t]
                tw.old_markers.append(h)
                h2 = claim_marker(tw.log, tw.log.known_latest() + 1, self.payload(t))
                tw.marker = h2
                ctx.stats["markers"] += 1
                if not h.lost:
                    h.payload.state = FREED
                    h.payload.reason = f"shift: {why}"
                    try:
                        rewrite_marker(tw.log, h)
                    except MarkerLost:
                        pass
        for tw in ctx.tables.values():
            if tw.marker is None:
                continue
            preds = self.running_predecessors(tw)
            if preds:
                tw.logical = True
            self.deps.observe(tw.name, [p for _, p in preds])
        self.publish_deps()
        logs.shifted(ctx, why)

    # -- markers recovery took ---------------------------------------------------------------
    def check_held(self, tws: list[TableWork]) -> None:
        """If a recovering client freed one of our markers, go on as the policy says."""
        lost = [tw for tw in tws if tw.marker is not None and tw.marker.lost]
        if not lost:
            return
        logs.marker_taken(self.ctx, [tw.name for tw in lost])
        self._on_lost(lost)

    def _reclaim(self, lost: list[TableWork]) -> None:
        """Each table decides on its own: nothing of ours can have been decided, claim again."""
        for tw in lost:
            assert tw.marker is not None
            tw.old_markers.append(tw.marker)
            self.claim([tw])

    def new_attempt(self) -> None:
        self.ctx.next_attempt()
        self.deps = Dependencies(self.ctx.attempt)
        self.shift("new attempt after our markers were freed", "new_attempt")

    # -- waiting ---------------------------------------------------------------------------
    def wait(self, tws: list[TableWork],
             abort_if_doomed: Callable[[list[TableWork]], None]) -> None:
        """Wait until no running marker precedes ours in any of ``tws``."""
        self.waits.wait(self.wait_context(abort_if_doomed), tws)

    def wait_context(self,
                     abort_if_doomed: Callable[[list[TableWork]], None]) -> WaitContext[TableWork]:
        ctx, client, s = self.ctx, self.ctx.client, self.ctx.settings
        return WaitContext(
            txn_id=ctx.id, wait_timeout=s.wait_limit, poll_max=s.poll_max,
            shift_timeout=s.shift_timeout, max_shifts=s.max_shifts, now=client.now,
            heartbeat=self.heartbeat, check_held=self.check_held,
            predecessors=lambda tws: client.map(self.running_predecessors, tws),
            recover=lambda table, v: resolve_marker(client.services(), table, v).outcome,
            count=ctx.count, waited=lambda who, secs: logs.waited(ctx, who, secs),
            deps=lambda: self.deps, attempt=lambda: ctx.attempt, shift=self.shift,
            publish_deps=self.publish_deps, publish_footprint=self.overtake.publish,
            abort_if_doomed=abort_if_doomed, open_above=open_above)

    # -- heartbeats ------------------------------------------------------------------------
    def heartbeat(self, force: bool = False) -> None:
        """Refresh every marker and name we hold (at most every third of a marker's ttl)."""
        ctx = self.ctx
        now = ctx.now()
        if not force and now - self._last_beat < ctx.settings.marker_ttl / 3:
            return
        if not ctx.mlock.acquire(blocking=False):
            return
        failed: Exception | None = None
        try:
            for tw in list(ctx.tables.values()):
                if tw.creating is not None and tw.reservation_etag is not None:
                    try:
                        self._refresh_name(tw, now)
                    except Exception as e:  # noqa: BLE001 - retried on the next beat
                        ctx.count("heartbeat_failures")
                        failed = e
                h = tw.marker
                if h is None:
                    continue
                # the state check and the rewrite are one critical section: the commit path
                # changes the state (close, fill) only while holding h.lock too
                with h.lock:
                    if h.lost or h.payload.state != RUNNING:
                        continue
                    h.payload.heartbeat = now
                    h.payload.expires = now + ctx.settings.marker_ttl
                    try:
                        rewrite_marker(tw.log, h)
                        ctx.count("heartbeats")
                    except MarkerLost:
                        ctx.count("markers_lost")
                    except Exception as e:  # noqa: BLE001 - retried on the next beat, other tables go on
                        ctx.count("heartbeat_failures")
                        failed = e
            if failed is None:
                # a failed beat is retried on the next round, not a third of a ttl later
                self._last_beat = now
        finally:
            ctx.mlock.release()

    # -- names we create (reservations.py) ---------------------------------------------------
    def _reservation(self, tw: TableWork, now: float) -> reservations.Reservation:
        ctx = self.ctx
        return reservations.Reservation(table=tw.name, holder=ctx.attempt, txn=ctx.id,
                                        kind="record", created=ctx.started,
                                        expires=now + ctx.settings.marker_ttl)

    def hold_name(self, tw: TableWork) -> None:
        """Hold (or confirm, under our current attempt) the reservation of a name we create,
        and check that the table does not exist yet."""
        now = self.ctx.now()
        tw.reservation_etag = reservations.hold(self.ctx.client.store, self._reservation(tw, now),
                                                lambda: tw.log.latest_version() >= 0, now=now,
                                                etag=tw.reservation_etag)

    def _refresh_name(self, tw: TableWork, now: float) -> None:
        assert tw.reservation_etag is not None  # only a name we hold is refreshed
        try:
            tw.reservation_etag = self.ctx.client.store.put_if_match(
                reservations.reservation_key(tw.name), self._reservation(tw, now).to_bytes(),
                tw.reservation_etag)
            self.ctx.count("heartbeats")
        except (PreconditionFailed, NotFound):
            # taken over (we were stalled): the commit finds out and aborts
            tw.reservation_etag = None

    def release_names(self, outcome: str) -> None:
        for tw in self.ctx.tables.values():
            if tw.creating is not None and tw.reservation_etag is not None:
                reservations.release(self.ctx.client.store, tw.name, self.ctx.attempt, outcome)

    # -- the end ---------------------------------------------------------------------------
    def close(self, tw: TableWork, version: int) -> None:
        """Say in our marker that we committed at ``version`` (followers that
        look need not wait)."""
        h = tw.marker
        if h is None or h.lost:
            return
        with h.lock:  # not the transaction's lock: the markers of all tables close in parallel
            h.payload.state = COMMITTED
            h.payload.commit_version = version
            try:
                rewrite_marker(tw.log, h)
            except MarkerLost:
                self.ctx.count("markers_lost")

    def release(self, tws: list[TableWork]) -> None:
        """The transaction aborted: mark every running marker of ``tws`` ABORTED."""
        with self.ctx.mlock:
            for tw in tws:
                h = tw.marker
                if h is None or h.lost or h.payload.state != RUNNING:
                    continue
                h.payload.state = ABORTED
                try:
                    rewrite_marker(tw.log, h)
                except MarkerLost:
                    pass
