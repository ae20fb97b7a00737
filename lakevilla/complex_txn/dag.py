"""Module #3: cross-table dependency tracking over markers (the paper's rules I-IV).

Each transaction knows the running transactions whose markers precede its own
in some table (its outgoing edges) and, transitively, what they depend on, as
published in their markers (rule II). A cycle exists when a predecessor depends
on us. Both ends may see it; the younger one (larger id: ids are time-ordered)
shifts its markers (rule IV), so two transactions never shift against each
other forever. A wait that times out also shifts: larger cycles, or stale
dependency lists, are broken that way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..markers import MarkerPayload


@dataclass
class Dependencies:
    me: str  # our attempt id
    direct: dict[str, set[str]] = field(default_factory=dict)  # table -> predecessor attempts
    transitive: set[str] = field(default_factory=set)
    published: frozenset[str] = frozenset()

    def observe(self, table: str, preds: list[MarkerPayload]) -> None:
        self.direct[table] = {p.attempt for p in preds}
        for p in preds:
            self.transitive.add(p.attempt)
            self.transitive.update(d for d in p.deps if d != self.me)

    def forget(self, finished: set[str]) -> None:
        """Resolved transactions are no longer edges."""
        self.transitive -= finished
        for s in self.direct.values():
            s -= finished

    def reset_table(self, table: str) -> None:
        self.direct.pop(table, None)
        self.transitive = set().union(*self.direct.values()) if self.direct else set()

    def needs_publish(self) -> bool:
        return frozenset(self.transitive) != self.published

    def mark_published(self) -> list[str]:
        self.published = frozenset(self.transitive)
        return sorted(self.published)

    def cycle_with(self, pred: MarkerPayload) -> bool:
        """Rule III: the predecessor (or something it waits for) waits for us."""
        return self.me in pred.deps


def younger(a: str, b: str) -> bool:
    """True when attempt ``a`` started after ``b`` (ties broken by the random part)."""
    return a > b
