"""Module #3: cross-table dependency tracking over markers (the paper's rules I-IV).

Each transaction knows the running transactions whose markers precede its own
in some table (its outgoing edges) and, transitively, what they depend on, as
published in their markers (rule II). A cycle exists when a predecessor depends
on us (rule III). Both ends may see it; the younger one (larger id: ids are
time-ordered) shifts its markers (rule IV), so two transactions never shift
against each other. Lists are recomputed from the predecessors still running,
so they shrink as transactions finish. Lists name a transaction with its shift
epoch: a shift frees every marker, so a list naming an older epoch of ours (the
partner's, or one passed on transitively by a third transaction that has not
republished yet) describes waits that no longer exist and is no cycle; without
the epoch such stale lists kept shifting the same transaction again and again
under load. A partner's list can still lag behind in another way (we yielded to
it and it has not republished); we remember the revision of its marker we
yielded to and ignore that list until the partner rewrites the marker or a short
cool-down passes.
A wait that makes no progress for ``shift_timeout`` also shifts: that breaks
cycles too large or too stale for the lists to show.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..markers.marker import MarkerPayload

EPOCH_SEP = "#"  # attempt ids never contain it
YIELD_COOLDOWN = 0.5  # seconds a yielded-to partner's unchanged list is presumed stale


def tag(attempt: str, epoch: int) -> str:
    """How dependency lists name a transaction: its attempt and how often it has shifted."""
    return f"{attempt}{EPOCH_SEP}{epoch}"


def tag_of(p: MarkerPayload) -> str:
    return tag(p.attempt, p.epoch)


@dataclass
class Dependencies:
    me: str  # our attempt id
    # our shifts so far: a list naming an older epoch of ours predates our last shift
    epoch: int = 0
    # table -> pred tag -> its deps
    preds: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    # -> (rev, when)
    yielded: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)
    published: frozenset[str] = frozenset()
    # table -> pred tag -> the list its deps were made from: a wait round reads the same lists
    # again and again, and each waiter observes every predecessor on every table each round
    lists: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict, repr=False)
    _transitive: frozenset[str] | None = field(default=None, repr=False)

    @property
    def tag(self) -> str:
        return tag(self.me, self.epoch)

    def shifted(self) -> None:
        """Our markers moved to the tails: nothing precedes us yet, and every list that names
        our old markers is stale (their owners waited for markers we freed)."""
        self.epoch += 1
        self.preds, self.lists, self._transitive = {}, {}, None
        self.published = frozenset()  # the new markers are claimed with an empty list

    def observe(self, table: str, preds: list[MarkerPayload]) -> None:
        """The running predecessors of our marker in ``table``, as just read."""
        old, old_lists = self.preds.get(table, {}), self.lists.get(table, {})
        new: dict[str, frozenset[str]] = {}
        lists: dict[str, tuple[str, ...]] = {}
        for p in preds:
            t, got = tag_of(p), tuple(p.deps)
            deps = old.get(t)
            new[t] = deps if deps is not None and old_lists.get(t) == got else frozenset(got)
            lists[t] = got
        if new != old:
            self._transitive = None
        self.preds[table], self.lists[table] = new, lists

    @property
    def transitive(self) -> frozenset[str]:
        """Every transaction we wait for, directly or through a predecessor's own list; worked
        out again only after a round found a list changed."""
        if self._transitive is None:
            out: set[str] = set()
            for by_pred in self.preds.values():
                for pred, deps in by_pred.items():
                    out.add(pred)
                    out.update(deps)
            own = self.me + EPOCH_SEP
            self._transitive = frozenset(d for d in out if d != self.me and not d.startswith(own))
        return self._transitive

    def needs_publish(self) -> bool:
        return self.transitive != self.published

    def mark_published(self) -> list[str]:
        self.published = self.transitive
        return sorted(self.published)

    def cycle_with(self, pred: MarkerPayload) -> bool:
        """Rule III: the predecessor (or something it waits for) waits for our current markers
        (a bare attempt id, from a client that does not tag epochs, counts as current)."""
        if self.tag not in pred.deps and self.me not in pred.deps:
            return False
        seen = self.yielded.get((pred.attempt, pred.table))
        if seen is None:
            return True
        rev, when = seen
        return pred.rev > rev or time.monotonic() - when > YIELD_COOLDOWN

    def yield_to(self, preds: list[MarkerPayload]) -> None:
        now = time.monotonic()
        for p in preds:
            self.yielded[(p.attempt, p.table)] = (p.rev, now)


def younger(a: str, b: str) -> bool:
    """True when attempt ``a`` started after ``b`` (ties broken by the random part)."""
    return a > b
