"""Module #3: cross-table dependency tracking over markers (the paper's rules I-IV).

Each transaction knows the running transactions whose markers precede its own
in some table (its outgoing edges) and, transitively, what they depend on, as
published in their markers (rule II). A cycle exists when a predecessor depends
on us (rule III). Both ends may see it; the younger one (larger id: ids are
time-ordered) shifts its markers (rule IV), so two transactions never shift
against each other. Lists are recomputed from the predecessors still running,
so they shrink as transactions finish. A partner's list can lag behind our
shift (it has not republished yet); we remember the revision of its marker we
yielded to and ignore that list until the partner rewrites the marker or a short
cool-down passes (a stale list and a new, real cycle can look identical).
A wait that makes no progress for ``shift_timeout`` also shifts: that breaks
cycles too large or too stale for the lists to show.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..markers import MarkerPayload

YIELD_COOLDOWN = 0.5  # seconds a yielded-to partner's unchanged list is presumed stale


@dataclass
class Dependencies:
    me: str  # our attempt id
    preds: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)  # table -> pred -> its deps
    yielded: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)  # -> (rev, when)
    published: frozenset[str] = frozenset()

    def observe(self, table: str, preds: list[MarkerPayload]) -> None:
        """The running predecessors of our marker in ``table``, as just read."""
        self.preds[table] = {p.attempt: frozenset(p.deps) for p in preds}

    @property
    def transitive(self) -> set[str]:
        out: set[str] = set()
        for by_pred in self.preds.values():
            for pred, deps in by_pred.items():
                out.add(pred)
                out.update(deps)
        out.discard(self.me)
        return out

    def needs_publish(self) -> bool:
        return frozenset(self.transitive) != self.published

    def mark_published(self) -> list[str]:
        self.published = frozenset(self.transitive)
        return sorted(self.published)

    def cycle_with(self, pred: MarkerPayload) -> bool:
        """Rule III: the predecessor (or something it waits for) waits for us."""
        if self.me not in pred.deps:
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
