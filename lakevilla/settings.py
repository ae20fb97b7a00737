"""A lake client's settings: one value object, checked once when it is made.

``Lake`` owns one and hands it to what it builds (transactions, waits, maintenance), so the
rules that read a setting do not reach into the facade for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from .errors import InvalidArgumentError
from .vocab import CommitMode

DEFAULT_MAX_TRANSACTION_AGE = 24 * 3600.0  # seconds a transaction may take from start to commit
# the shortest idle time after which an operator may roll a transaction back (recover(older_than=)):
# shorter pauses are a client thinking between two statements
MIN_IDLE = 60.0


def _positive(name: str, value: Any, *, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{name} must be a number, got {value!r}") from None
    if math.isnan(v) or v < 0 or (v == 0 and not allow_zero):
        raise InvalidArgumentError(
            f"{name} must be {'non-negative' if allow_zero else 'positive'}, got {value!r}")
    return v


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{name} must be a non-negative integer, got {value!r}")
    return value


@dataclass(frozen=True)
class LakeSettings:
    """``marker_ttl``: seconds after which an unrefreshed marker counts as stalled.
    ``commit_mode``: ``"tail"`` or ``"in_place"``. ``wait_timeout``: how long a commit waits
    for earlier markers before aborting (None: ``2 * marker_ttl``). ``shift_timeout`` /
    ``max_shifts``: rule IV's patience and its limit. ``poll_max``: the longest pause between
    two looks at a predecessor, per transaction queued ahead (at most 0.2 s in all).
    ``max_retries``: lost commit races (and redos) before an abort. ``gvl_keep``: global-log entries
    clean-up keeps. ``delete_sublogs``: remove a finished transaction's sublogs right away.
    ``max_transaction_age``: seconds after its start a transaction may still commit (maintenance
    keeps what a transaction needs that long). ``group_commit``: one-table commits to a table
    where this client met a crowd lead or ride in one version (``core/riding.py``) instead of
    racing for it."""

    marker_ttl: float = 30.0
    commit_mode: CommitMode | str = CommitMode.TAIL  # a CommitMode once built (__post_init__)
    wait_timeout: float | None = None
    shift_timeout: float = 2.0
    max_retries: int = 10
    max_shifts: int = 8
    poll_max: float = 0.05
    gvl_keep: int = 1000
    delete_sublogs: bool = True
    max_transaction_age: float = DEFAULT_MAX_TRANSACTION_AGE
    group_commit: bool = True

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise once, here
        set_(self, "commit_mode", CommitMode.parse(str(self.commit_mode)))
        set_(self, "marker_ttl", _positive("marker_ttl", self.marker_ttl))
        if self.wait_timeout is not None:
            set_(self, "wait_timeout", _positive("wait_timeout", self.wait_timeout))
        set_(self, "shift_timeout", _positive("shift_timeout", self.shift_timeout))
        set_(self, "poll_max", _positive("poll_max", self.poll_max))
        set_(self, "max_transaction_age",
             _positive("max_transaction_age", self.max_transaction_age))
        for name in ("max_retries", "max_shifts", "gvl_keep"):
            _count(name, getattr(self, name))
        set_(self, "delete_sublogs", bool(self.delete_sublogs))
        set_(self, "group_commit", bool(self.group_commit))

    @property
    def wait_limit(self) -> float:
        """Seconds a commit waits for earlier markers (``wait_timeout``, or twice the TTL)."""
        return 2 * self.marker_ttl if self.wait_timeout is None else self.wait_timeout

    @property
    def idle_floor(self) -> float:
        """The shortest ``recover(older_than=)`` allowed without ``force`` (``MIN_IDLE``, or the
        marker ttl if longer). A transaction idle (no write statement) for half of it looks for
        an operator's rollback before its deciding write: half, for the clocks' skew."""
        return max(self.marker_ttl, MIN_IDLE)

    def with_(self, **changes: Any) -> LakeSettings:
        """A copy with ``changes``, checked like the original."""
        return replace(self, **changes)
