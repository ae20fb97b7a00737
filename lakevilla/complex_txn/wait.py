"""The wait policy with a DAG (CT, I): markers carry dependency lists.

On top of waiting for predecessors (``recovery/wait.py``): a predecessor that depends
on us is a cycle, and the younger of the two shifts its markers (rule III); a wait
that makes no progress for ``shift_timeout`` per transaction queued ahead of us,
doubling with every shift already made, shifts too (rule IV), and so does the wait
timeout, up to ``max_shifts``; only then does the wait abort.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..markers.wait import MarkerWait, Pending, W, WaitContext, WaitState, queue_length
from .dag import younger

if TYPE_CHECKING:
    from ..markers.marker import MarkerPayload


class DagWait(MarkerWait):
    def wait(self, ctx: WaitContext[W], tws: list[W]) -> None:
        """A wait without markers of ours (a one-table commit at the tail, before it queues) is
        a plain one: nobody can wait for us, so no cycle runs through us and a shift would
        have no marker to move."""
        if all(tw.marker is None for tw in tws):
            _PLAIN.wait(ctx, tws)
        else:
            super().wait(ctx, tws)

    def claimed(self, ctx: WaitContext[W], tws: list[W],
                found: list[list[tuple[int, MarkerPayload]]]) -> None:
        """Rules II/III as soon as markers are claimed: learn the dependencies, break a cycle
        at once (the younger shifts), else publish our dependency list."""
        deps = ctx.deps()
        cyc = []
        for tw, preds in zip(tws, found):
            deps.observe(tw.name, [p for _, p in preds])
            cyc += [p for _, p in preds if deps.cycle_with(p) and younger(ctx.attempt(), p.attempt)]
        if cyc:
            deps.yield_to(cyc)
            ctx.shift(f"cycle with {cyc[0].attempt}", "cycle")
            return
        ctx.publish_deps()

    def resolve_round(self, ctx: WaitContext[W], tws: list[W], pending: Pending[W],
                      st: WaitState) -> bool:
        deps = ctx.deps()
        for tw in tws:
            deps.observe(tw.name, [q for t2, _, q in pending if t2 is tw])
        # only lists read this round: a cached one stays as it was when we yielded to it, and
        # would look like a new cycle once the cool-down passed
        cyc = [p for t, _, p in pending
               if t.name in st.fresh and deps.cycle_with(p) and younger(ctx.attempt(), p.attempt)]
        if cyc:
            deps.yield_to(cyc)
            ctx.shift(f"cycle with {cyc[0].attempt}", "cycle")
            st.shifts += 1
            st.deadline = time.monotonic() + ctx.wait_timeout
            return True
        ctx.publish_deps()
        # rule IV; a queue of n transactions ahead of us is not a deadlock, so the timeout
        # scales with it and doubles with every shift we already made
        queue = queue_length(pending)
        limit = ctx.shift_timeout * queue * (2 ** st.shifts)
        if time.monotonic() - st.stuck_since > limit and st.shifts < ctx.max_shifts:
            ctx.shift("no progress while waiting (rule IV)", "no_progress")
            st.shifts += 1
            st.stuck_since = time.monotonic()
            return True
        return False

    def shift_on_timeout(self, ctx: WaitContext[Any], st: WaitState) -> bool:
        if st.shifts >= ctx.max_shifts:
            return False
        ctx.shift("wait timed out", "timeout")
        st.shifts += 1
        st.deadline = time.monotonic() + ctx.wait_timeout
        return True


_PLAIN = MarkerWait()
