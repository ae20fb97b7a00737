"""A table's past: which versions exist, when each was written, what each did.

Time travel by timestamp follows Delta: a version's time is when its commit file was written
(the store's last-modified time), made monotonic (a version is never older than the one
before it, 1 ms later at least), and the table "as of" a moment is its newest version at or
before that moment. delta-rs and Spark read the same file times, so the three agree. A marker
(an empty version) counts like any version; rewriting it (a heartbeat, its close) moves its
file time, and so the times of the versions after it, never backwards.

On a table with in-commit timestamps (``delta/ict.py``) a version's time is the one its commit
carries, from the version that enabled them on; time travel to a moment at or after that
version's finds the version by halving the range (a GET per step, the timestamps increase), and
to an earlier moment goes by file times among the versions before it, as Delta reads them.

Versions whose commit files a log clean-up deleted (Delta's log retention) can only be read
from a checkpoint at or after them: ``readable`` says which versions still can.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgumentError, VersionNotFoundError
from . import ict
from .log import DeltaLog, LogListing, not_found


@dataclass(frozen=True)
class HistoryEntry:
    """One version of a table (``Lake.history``), as Delta's history shows it, plus what
    lakevilla wrote into its commit: the transaction, its attempt and features."""

    version: int
    timestamp: dt.datetime  # UTC: when the version was written (what time travel resolves against)
    operation: str
    parameters: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    txn: str | None = None
    attempt: str | None = None
    features: str | None = None
    marker: bool = False  # an empty version: a lakevilla marker (no data change)
    engine: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON; ``timestamp`` in seconds since the epoch."""
        return {"version": self.version, "timestamp": self.timestamp.timestamp(),
                "operation": self.operation, "parameters": self.parameters, "metrics": self.metrics,
                "txn": self.txn, "attempt": self.attempt, "features": self.features,
                "marker": self.marker, "engine": self.engine}


def parse_moment(when: dt.datetime | str, what: str = "timestamp") -> dt.datetime:
    """A UTC datetime from a datetime (naive means UTC) or an ISO-8601 string."""
    if isinstance(when, str):
        text = when.strip()
        try:
            when = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z"))
                                             else text)
        except ValueError:
            raise InvalidArgumentError(f"{what} must be a datetime or an ISO-8601 string such as "
                                       f"'2026-11-27T09:00:00Z', got {text!r}") from None
    if not isinstance(when, dt.datetime):
        raise InvalidArgumentError(f"{what} must be a datetime or an ISO-8601 string, "
                                   f"got {type(when).__name__}")
    return when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)


def readable(listing: LogListing) -> list[int]:
    """The versions a snapshot can still be built at: from version 0 while every commit is
    there, else from the oldest complete checkpoint after the gap."""
    commits = listing.commits
    if not commits:
        return []
    lo = 0
    gaps = [b for a, b in zip(commits, commits[1:], strict=False) if b != a + 1]
    if commits[0] != 0 or gaps:
        start = gaps[-1] - 1 if gaps else commits[0] - 1
        cps = [c for c in listing.complete_checkpoints() if c >= start]
        lo = cps[0] if cps else commits[-1] + 1
    return [v for v in commits if v >= lo] if lo <= commits[-1] else []


def _span(table: str, versions: list[int]) -> str:
    if not versions:
        return f"table {table!r} has no readable version"
    return f"table {table!r} has versions {versions[0]}..{versions[-1]}"


def check_version(log: DeltaLog, version: int) -> None:
    """``VersionNotFoundError`` naming the versions that exist, unless ``version`` can be read."""
    if isinstance(version, bool) or not isinstance(version, int):
        raise InvalidArgumentError(f"version must be an integer, got {version!r}")
    listing = log.list_log()
    if not listing.commits and not listing.checkpoints:
        raise not_found(log)
    # a log whose commits were all cleaned up is read from its checkpoints
    ok = readable(listing) if listing.commits else listing.complete_checkpoints()
    if version not in ok:
        gone = " (older commits were removed by log clean-up)" if ok and version < ok[0] else ""
        raise VersionNotFoundError(f"{_span(log.table, ok)}{gone}; "
                                   f"version {version} cannot be read")


def version_times(listing: LogListing) -> dict[int, float]:
    """Each commit's time in seconds (to the millisecond), made monotonic as Delta does (1 ms
    after the one before at least)."""
    out: dict[int, float] = {}
    prev: int | None = None
    for v in listing.commits:
        t = listing.written.get(v)
        if t is None:
            continue
        ms = int(t * 1000)  # Delta's resolution: a datetime holds it exactly
        if prev is not None and ms <= prev:
            ms = prev + 1
        out[v] = ms / 1000
        prev = ms
    return out


def version_at(log: DeltaLog, when: dt.datetime | str) -> int:
    """The newest readable version written at or before ``when``."""
    moment = round(parse_moment(when).timestamp(), 6)
    listing = log.list_log()
    if not listing.commits:
        raise not_found(log)
    ok = set(readable(listing))
    stamped = _by_commit_time(log, sorted(ok), moment)
    if stamped is not None:
        return stamped
    times = version_times(listing)
    since = _ict_since(log, listing)
    at = [v for v, t in times.items() if t <= moment and v in ok
          and (since is None or v < since[0])]
    if not at:
        first = min((times[v] for v in ok if v in times), default=None)
        oldest = (f"; the oldest readable version is from "
                  f"{dt.datetime.fromtimestamp(first, dt.UTC).isoformat()}" if first is not None
                  else "")
        raise VersionNotFoundError(f"table {log.table!r} has no version written at or before "
                                   f"{parse_moment(when).isoformat()}{oldest}")
    return max(at)


def _ict_since(log: DeltaLog, listing: LogListing) -> tuple[int, int | None] | None:
    """(enablement version, timestamp) of a table whose newest version has in-commit timestamps
    on; None when it does not."""
    if not listing.commits:
        return None
    md = log.snapshot(listing.commits[-1]).metadata
    return ict.enablement(md) if ict.enabled(md) else None


def _by_commit_time(log: DeltaLog, ok: list[int], moment: float) -> int | None:
    """The newest version whose in-commit timestamp is at or before ``moment`` (s), found by
    halving; None when the table has no such timestamps, or ``moment`` is before they began
    (file times decide then)."""
    listing = LogListing(commits=ok)
    since = _ict_since(log, listing) if ok else None
    if since is None:
        return None
    stamped = [v for v in ok if v >= since[0]]
    if not stamped:
        return None

    def at(v: int) -> float:
        t = ict.of(log.read_commit(v))
        return t / 1000 if t is not None else float("inf")
    start = since[1] / 1000 if since[1] is not None else at(stamped[0])
    if moment < start:
        return None
    lo, hi = 0, len(stamped) - 1  # at(stamped[lo]) <= moment throughout
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if at(stamped[mid]) <= moment:
            lo = mid
        else:
            hi = mid - 1
    return stamped[lo]


def _metrics(c: Any, info: dict[str, Any]) -> dict[str, Any]:
    """The commit's ``operationMetrics`` (numbers as numbers); for a commit that wrote none
    (lakevilla's own, so far), what its actions show: files added and removed, rows added."""
    raw = info.get("operationMetrics")
    if isinstance(raw, dict) and raw:
        return {k: int(x) if isinstance(x, str) and x.lstrip("-").isdigit() else x
                for k, x in raw.items()}
    if c.is_empty:
        return {}
    rows = [a.num_records for a in c.adds]
    out = {"numAddedFiles": len(c.adds), "numRemovedFiles": len(c.removes)}
    if rows and all(r is not None for r in rows):
        out["numOutputRows"] = sum(rows)
    return out


def history(log: DeltaLog, limit: int | None = None) -> list[HistoryEntry]:
    """The readable versions, newest first (at most ``limit``)."""
    listing = log.list_log()
    if not listing.commits:
        raise not_found(log)
    ok = readable(listing)
    times = version_times(listing)
    chosen = list(reversed(ok))[:limit] if limit is not None else list(reversed(ok))
    if not chosen:
        return []
    commits = dict(log.commits_between(min(chosen) - 1, max(chosen)))
    out = []
    for v in chosen:
        info = commits[v].commit_info or {}
        lv = commits[v].lakevilla or {}
        stamp = ict.of(commits[v])  # a table's own time, once it has them, over the file's
        when = (stamp / 1000 if stamp is not None
                else times.get(v, (info.get("timestamp") or 0) / 1000))
        out.append(HistoryEntry(
            version=v, timestamp=dt.datetime.fromtimestamp(when, dt.UTC),
            operation=str(info.get("operation", "")),
            parameters=dict(info.get("operationParameters") or {}),
            metrics=_metrics(commits[v], info), txn=lv.get("txn"), attempt=lv.get("attempt"),
            features=lv.get("features"), marker=commits[v].is_empty and lv.get("kind") == "marker",
            engine=info.get("engineInfo")))
    return out
