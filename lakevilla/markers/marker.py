"""Module #1: markers, i.e. versions claimed in a table's Delta log by put-if-absent.

A marker is a commit holding only ``commitInfo``; to any Delta reader it is an
empty version. Its ``commitInfo.lakevilla`` object says which transaction holds
it, how that transaction decides (``decision``), its dependencies and when it
stops counting as alive. Every rewrite is a conditional overwrite on the etag we
last saw, so a marker freed by a recovering client cannot be overwritten by its
late owner, and vice versa.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from ..delta.actions import Commit
from ..delta.log import DeltaLog, VersionExists
from ..errors import CorruptLogError
from ..store import NotFound, OutcomeUnknown, PreconditionFailed
from ..vocab import ENGINE_INFO, CommitInfo, CommitMode, InfoKind, MarkerState

RUNNING, COMMITTED, ABORTED, FREED = (
    MarkerState.RUNNING, MarkerState.COMMITTED, MarkerState.ABORTED, MarkerState.FREED)


@dataclass
class MarkerPayload:
    txn: str
    attempt: str
    table: str
    decision: str  # a vocab.Decision: what decides this transaction
    mode: str  # a vocab.CommitMode
    features: str = ""
    state: str = RUNNING
    rev: int = 0
    deps: list[str] = field(default_factory=list)
    markers: dict[str, int] = field(default_factory=dict)
    started: float = 0.0
    heartbeat: float = 0.0
    expires: float = 0.0
    gvl_base: int | None = None
    commit_version: int | None = None
    reason: str | None = None
    # The owner's statements on this table (``Footprint.to_json`` each), published once it has
    # no more statements and must wait: a follower whose commit cannot invalidate any of them
    # commits before it instead of queueing (older clients ignore the field and wait).
    footprint: list[dict[str, Any]] | None = None
    # How often the owner has shifted its markers (rule IV): dependency lists name owners with it,
    # so a list written before a shift does not look like a cycle with the markers after it.
    epoch: int = 0
    # What the owner's commit here may change (``Change.to_json`` each, ``scan/conflicts.py``;
    # None: unknown, e.g. claimed at the first write): a follower's first read of rows it will
    # change waits for it rather than read them (older clients ignore the field).
    changes: list[dict[str, Any]] | None = None
    v: int = 1
    kind: str = InfoKind.MARKER

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MarkerPayload:
        if d.get("kind") != InfoKind.MARKER:
            raise CorruptLogError(f"not a lakevilla marker: {d!r}")
        if int(d.get("v", 1)) > 1:
            raise CorruptLogError(f"marker format version {d['v']} is newer than this "
                                  "lakevilla understands")
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})

    def to_commit(self) -> Commit:
        return Commit(commit_info={
            "timestamp": int(time.time() * 1000),
            "operation": "LAKEVILLA MARKER",
            "operationParameters": {"state": self.state},
            "isBlindAppend": True,
            "engineInfo": ENGINE_INFO,
            "lakevilla": self.to_json(),
        })

    def expired(self, now: float) -> bool:
        return self.state == RUNNING and now > self.expires


def marker_of(c: Commit) -> MarkerPayload | None:
    """The marker a commit holds, parsed once per commit read: callers must not change it."""
    try:
        return c.derived["marker"]
    except KeyError:
        pass
    lv = c.lakevilla
    m = None
    if lv is not None and lv.get("kind") == InfoKind.MARKER and c.is_empty:
        try:
            m = MarkerPayload.from_json(lv)
        except (TypeError, CorruptLogError):
            m = None
    c.derived["marker"] = m
    return m


def commit_txn(c: Commit) -> str | None:
    """The transaction attempt that wrote a table commit (tail commit or filled marker); kept on
    the commit, since waits ask it of the same cached commits every round."""
    if "txn" not in c.derived:
        info = CommitInfo.of(c.lakevilla)
        c.derived["txn"] = info.attempt if info is not None and info.is_commit else None
    got: str | None = c.derived["txn"]
    return got


def is_final(c: Commit) -> bool:
    """False for an open in-place marker: its version may still be filled."""
    m = marker_of(c)
    return not (m is not None and m.state == RUNNING and m.mode == CommitMode.IN_PLACE)


@dataclass
class MarkerHandle:
    """A marker we hold: where it is and the etag of our last write.

    ``lock`` orders our own rewrites of this one marker (the heartbeat thread and the
    commit path both rewrite it): two of them racing on one etag would make the loser
    believe a recovering client took the marker. Markers of different tables are
    rewritten in parallel."""

    table: str
    version: int
    etag: str
    payload: MarkerPayload
    lost: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    # a write whose reply was lost
    unsettled: bytes | None = field(default=None, repr=False, compare=False)


class HeldTable(Protocol):
    """What marker waiting and overtaking need of a table a transaction works on (its view,
    ``statements/view.py``): its log, its marker, its snapshot and what it did."""

    name: str
    log: DeltaLog
    marker: MarkerHandle | None
    base: Any  # the snapshot read: its version and partition columns

    @property
    def schema(self) -> Any: ...

    def footprints(self) -> list[Any]: ...

    def build_commit(self, commit_info: dict[str, Any]) -> Commit: ...


class MarkerLost(Exception):
    """Our marker changed under us (freed by a recovering client)."""


def claim(log: DeltaLog, start: int, payload: MarkerPayload, relist_after: int = 2) -> MarkerHandle:
    """Claim the first free version >= ``start``."""
    v = start
    misses = 0
    while True:
        try:
            etag = log.write_commit(v, payload.to_commit())
            return MarkerHandle(log.table, v, etag, payload)
        except VersionExists:
            misses += 1
            v += 1
            if misses >= relist_after:
                v = max(v, log.latest_version() + 1)
                misses = 0


def rewrite(log: DeltaLog, h: MarkerHandle, commit: Commit | None = None) -> None:
    """Conditional overwrite of our marker with ``h.payload`` (or ``commit``, an in-place fill).

    The write and the state it implies are one critical section under ``h.lock``: a fill
    marks the handle committed before the lock is released, so a heartbeat (which also
    takes ``h.lock`` and only rewrites running markers) can never write over it."""
    with h.lock:
        h.payload.rev += 1
        body = commit if commit is not None else h.payload.to_commit()
        try:
            h.etag = _rewrite_settled(log, h, body)
        except (PreconditionFailed, NotFound):
            h.lost = True
            raise MarkerLost(
                f"marker {h.table}@{h.version} was changed by another client") from None
        if commit is not None:
            h.payload.state = COMMITTED


def _rewrite_settled(log: DeltaLog, h: MarkerHandle, body: Commit) -> str:
    try:
        etag = log.rewrite_commit(h.version, body, h.etag)
    except OutcomeUnknown:
        # it may have landed: the next rewrite checks before giving up
        h.unsettled = log.stamp(h.version, body, rewrite=True).to_bytes()  # what was put
        raise
    except (PreconditionFailed, NotFound):
        if h.unsettled is None:
            raise
        got = log.store.get(log.commit_key(h.version))
        h.unsettled, mine = None, got.data == h.unsettled
        if not mine:
            raise
        # our earlier write did land: go on from it
        etag = log.rewrite_commit(h.version, body, got.etag)
    h.unsettled = None
    return etag


def free_stalled(log: DeltaLog, version: int, payload: MarkerPayload, etag: str, state: str,
                 reason: str, commit_version: int | None = None) -> bool:
    """Resolve someone else's marker by conditional overwrite; False if it moved meanwhile."""
    payload = replace(payload, state=state, reason=reason, commit_version=commit_version,
                      rev=payload.rev + 1)
    try:
        log.rewrite_commit(version, payload.to_commit(), etag)
        return True
    except (PreconditionFailed, NotFound):
        return False
