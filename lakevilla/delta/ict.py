"""In-commit timestamps (writer feature ``inCommitTimestamp``): a commit's time kept in the commit.

A table with ``delta.enableInCommitTimestamps=true`` carries, in every commit's ``commitInfo``
(its first action), an ``inCommitTimestamp`` strictly greater than the previous commit's: the
time it was attempted, or the previous one plus 1 ms. The time therefore depends on the
version a commit lands at, so the log stamps a commit as it writes it (``DeltaLog``), never the
statement that built it: a commit retried at another version is stamped again. Enabled on an
existing table, the enabling commit also records its version and timestamp in the table
properties, so readers know which older versions still go by file time.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from ..store import NotFound
from .actions import Commit, Metadata

ENABLE = "delta.enableInCommitTimestamps"
ENABLEMENT_VERSION = "delta.inCommitTimestampEnablementVersion"
ENABLEMENT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"
FIELD = "inCommitTimestamp"


def enabled(metadata: Metadata | None) -> bool:
    if metadata is None:
        return False
    cfg = {k.lower(): v for k, v in metadata.configuration.items()}
    return cfg.get(ENABLE.lower(), "false").lower() == "true"


def of(commit: Commit | None) -> int | None:
    """The commit's in-commit timestamp (ms), if it has one."""
    if commit is None or not commit.commit_info:
        return None
    t = commit.commit_info.get(FIELD)
    return int(t) if isinstance(t, int) and not isinstance(t, bool) else None


def active_after(commit: Commit | None) -> bool:
    """Whether the table has the timestamps on after ``commit``: it carries one and does not
    switch them off (a commit of a table that has them always carries one)."""
    if of(commit) is None:
        return False
    assert commit is not None
    return commit.metadata is None or enabled(commit.metadata)


def enablement(metadata: Metadata) -> tuple[int, int | None]:
    """(first version with timestamps, its timestamp): (0, None) for a table created with them."""
    cfg = metadata.configuration
    try:
        return (int(cfg.get(ENABLEMENT_VERSION, 0)),
                int(cfg[ENABLEMENT_TIMESTAMP]) if ENABLEMENT_TIMESTAMP in cfg else None)
    except ValueError:
        return 0, None


def stamped(commit: Commit, ict: int, enabled_at: int | None = None) -> Commit:
    """``commit`` carrying ``ict`` (``Commit.to_bytes`` writes ``commitInfo`` first); with
    ``enabled_at``, its metadata records that this version enabled the timestamps."""
    info = {**(commit.commit_info or {}), FIELD: ict}
    md = commit.metadata
    if enabled_at is not None and md is not None:
        md = dataclasses.replace(md, configuration={**md.configuration,
                                                    ENABLEMENT_VERSION: str(enabled_at),
                                                    ENABLEMENT_TIMESTAMP: str(ict)})
    return dataclasses.replace(commit, commit_info=info, metadata=md)


def stamp(version: int, commit: Commit, *, rewrite: bool,
          known: Callable[[int], Commit | None], fetch: Callable[[int], Commit | None],
          off_at: int, file_time: Callable[[int], float | None]) -> Commit:
    """``commit`` as put at ``version``: stamped max(now, previous + 1 ms) when the table has
    the timestamps after it; a ``rewrite`` keeps the one the version has. Whether the table has
    them comes from the previous commit: ``known`` (a cached commit, a marker's too: neither
    its timestamp nor the table's having them changes), else none when ``off_at`` is that
    version (the newest snapshot there has them off), else ``fetch``. A commit enabling them
    on an existing table is stamped later than the previous commit's ``file_time`` too."""
    if commit.metadata is not None and not enabled(commit.metadata):
        return commit  # switched off (or never on) by this very commit
    if rewrite:
        kept = of(known(version) or fetch(version))
        if kept is not None:
            return stamped(commit, kept)
    prev = None
    if version > 0:
        prev = known(version - 1)
        if prev is None and off_at != version - 1:
            prev = fetch(version - 1)
    now = int(time.time() * 1000)
    if prev is not None and active_after(prev):
        return stamped(commit, max(now, (of(prev) or 0) + 1))
    if commit.metadata is None:
        return commit  # the table does not have them at ``version - 1``
    if version == 0:
        return stamped(commit, now)
    try:  # enabled on an existing table: later than the previous commit's file, and recorded
        before = file_time(version - 1)
    except NotFound:
        before = None
    floor = int(before * 1000) + 1 if before is not None else now
    return stamped(commit, max(now, floor), enabled_at=version)
