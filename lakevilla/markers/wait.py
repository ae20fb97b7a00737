"""The wait policy of markers: a commit waits until no running marker precedes ours.

Markers order writers (R): before it validates and commits, a transaction waits for
every running marker below one of its own. A predecessor whose marker expired is
recovered on the spot (``recovery/stalled.py``), so a crashed client never blocks
anyone for longer than its marker's ttl; waiting polls with a bounded backoff and
ends in an abort at ``wait_timeout``; the pause between rounds grows up to ``poll_max``
per transaction queued ahead of us (at most ``POLL_CAP``). With a DAG (CT, I) the waiter
also breaks cycles and shifts its markers instead (``complex_txn/wait.py``). The policies
see a ``WaitContext``, never the transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..errors import SelfWaitError, TransactionAborted

if TYPE_CHECKING:
    from .marker import HeldTable as TableWork
    from .marker import MarkerPayload

POLL_CAP = 0.1  # seconds: the longest pause a queue's length stretches polling to (see below)

# the caller's tables (``statements/view.py``): the hooks of a WaitContext take what wait() got
W = TypeVar("W", bound="TableWork")

Pending = list[tuple[W, int, "MarkerPayload"]]  # (our table, version of the marker, its payload)


def queue_length(pending: Pending[Any]) -> int:
    """How many transactions are queued ahead of us (one may precede us on several tables)."""
    return len({p.attempt for _, _, p in pending})


@dataclass
class WaitContext(Generic[W]):
    """What a wait policy may use: the transaction's settings and hooks, nothing else."""

    txn_id: str
    wait_timeout: float
    poll_max: float
    shift_timeout: float
    max_shifts: int
    now: Callable[[], float]  # the lake's clock (markers expire by it)
    heartbeat: Callable[[], None]  # keep our own markers alive while we wait
    check_held: Callable[[list[W]], None]  # claim again what recovery freed
    # running markers below ours
    predecessors: Callable[[list[W]], list[list[tuple[int, MarkerPayload]]]]
    recover: Callable[[str, int], str]  # resolve a stalled marker (table, version) -> outcome
    count: Callable[[str, int], None]
    waited: Callable[[set[str], float], None]  # the log event once the wait is over
    # tell followers what we touched, so that those that cannot conflict need not wait for us
    publish_footprint: Callable[[list[W]], None] = field(default=lambda tws: None)
    # abort now if a commit that landed while we wait conflicts beyond what a redo can fix
    abort_if_doomed: Callable[[list[W]], None] = field(default=lambda tws: None)
    # DAG only (complex_txn/wait.py)
    deps: Callable[[], Any] = field(default=lambda: None)  # the current attempt's Dependencies
    attempt: Callable[[], str] = field(default=lambda: "")
    # rule IV: free, re-claim our markers
    shift: Callable[[str, str], None] = field(default=lambda why, kind: None)
    publish_deps: Callable[[], None] = field(default=lambda: None)
    # the transaction is open further up this thread (a with-block around ours): waiting for
    # it would last until the timeout (core/context.py: open_above)
    open_above: Callable[[str], bool] = field(default=lambda txn: False)


@dataclass
class WaitState:
    """One wait's clocks and counters, which a DAG policy moves."""

    deadline: float
    stuck_since: float
    shifts: int = 0
    # tables whose markers this round read (the others: as cached)
    fresh: frozenset[str] = frozenset()


class MarkerWait:
    """Wait for every predecessor; recover the stalled ones; abort at the timeout."""

    def wait(self, ctx: WaitContext[W], tws: list[W]) -> None:
        start = time.monotonic()
        st = WaitState(deadline=start + ctx.wait_timeout, stuck_since=start)
        delay = 0.002
        waiting_on: frozenset = frozenset()
        waited_since, waited_for = start, set[str]()
        # table -> running predecessors, as last read
        known: dict[str, list[tuple[int, MarkerPayload]]] = {}
        held: tuple = ()
        while True:
            ctx.heartbeat()
            ctx.check_held(tws)
            # While one table still has a predecessor running we wait whatever the others show, so
            # a round reads that table alone (often the same transaction precedes us everywhere);
            # all tables once it clears, and after our markers moved (a shift, a re-claim).
            now_held = tuple(tw.marker.version if tw.marker is not None else None for tw in tws)
            blocked = [tw for tw in tws if known.get(tw.name)]
            polled = blocked[:1] if blocked and now_held == held else tws
            held = now_held
            known.update(zip((tw.name for tw in polled), ctx.predecessors(polled)))
            if len(polled) < len(tws) and not known[polled[0].name]:
                # the first one cleared: look at all
                rest = [tw for tw in tws if tw is not polled[0]]
                known.update(zip((tw.name for tw in rest), ctx.predecessors(rest)))
                polled = tws
            st.fresh = fresh = frozenset(tw.name for tw in polled)
            pending: Pending[W] = [(tw, v, p) for tw in tws for v, p in known.get(tw.name, [])]
            if not pending:
                ctx.waited(waited_for, time.monotonic() - waited_since)
                return
            self.refuse_self_wait(ctx, pending)
            waited_for.update(f"{p.attempt} at {tw.name}@{v}" for tw, v, p in pending)
            ctx.abort_if_doomed(tws)  # a predecessor's commit may already have sealed our fate
            # once per marker: we have to wait, others need not wait for us
            ctx.publish_footprint(tws)
            now_set = frozenset((tw.name, v, p.rev) for tw, v, p in pending)
            if now_set != waiting_on:  # progress: someone resolved, republished or heart-beat
                waiting_on, st.stuck_since = now_set, time.monotonic()
            ctx.count("wait_rounds", 1)
            now = ctx.now()
            for tw, v, p in pending:
                # a state read this round: others may be old
                if tw.name in fresh and p.expired(now):
                    outcome = ctx.recover(tw.name, v)
                    ctx.count("recovered_" + outcome, 1)
            if self.resolve_round(ctx, tws, pending, st):
                continue
            if time.monotonic() > st.deadline:
                if self.shift_on_timeout(ctx, st):
                    continue
                who = ", ".join(f"{p.attempt} at {tw.name}@{v}" for tw, v, p in pending[:3])
                raise TransactionAborted(f"timed out after {ctx.wait_timeout:.1f}s "
                                         f"waiting for {who}", txn_id=ctx.txn_id, reason="timeout")
            time.sleep(delay)  # bounded polling of the predecessors' markers
            # n transactions queued ahead of us hand over no sooner than n times: the pause grows
            # with the queue, so a long queue's waiters do not poll it flat out (and eat the CPU
            # and requests its head needs). But predecessors often resolve together (they hold
            # other partitions, or wait for the same head), so the cap stays short: at 1 s a
            # TPC-C Payment slept ~0.55 s on average through the handover it was waiting for
            queue = queue_length(pending)
            delay = min(delay * 1.5, max(ctx.poll_max, min(ctx.poll_max * queue, POLL_CAP)))

    @staticmethod
    def refuse_self_wait(ctx: WaitContext[W], pending: Pending[W]) -> None:
        """A predecessor open further up our own thread cannot finish while we wait for it:
        fail now, not at the timeout."""
        for tw, v, p in pending:
            if p.txn != ctx.txn_id and ctx.open_above(p.txn):
                raise SelfWaitError(
                    f"transaction {ctx.txn_id} would wait for transaction {p.txn}, whose marker "
                    f"on {tw.name!r} (version {v}) precedes its commit, but {p.txn} is open "
                    "further up this thread (a with-block around this one) and cannot "
                    "finish while this one waits: the wait would last until the timeout "
                    f"({ctx.wait_timeout:g}s). Nothing of {ctx.txn_id} was written. Finish the "
                    "outer transaction first, issue these statements in it, or use "
                    "commit_mode='tail', where a running transaction holds no marker",
                    txn_id=ctx.txn_id)

    def claimed(self, ctx: WaitContext[W], tws: list[W],
                found: list[list[tuple[int, MarkerPayload]]]) -> None:
        """Markers were just claimed on ``tws``, with these running predecessors each."""

    def resolve_round(self, ctx: WaitContext[W], tws: list[W], pending: Pending[W],
                      st: WaitState) -> bool:
        """After a round of recovery: True to look again at once (a DAG policy shifted)."""
        return False

    def shift_on_timeout(self, ctx: WaitContext[Any], st: WaitState) -> bool:
        """At the timeout: True if the policy shifted instead of aborting."""
        return False
