"""Writing a decided transaction's commit to one table, exactly once, by anyone.

After a multi-table decision (transaction record or global log entry) the owner
and any number of recovering clients may race to write the same table commit.
Each writer only writes version v after reading every version between the
transaction's marker (or hint) and v and finding none of them is the
transaction's commit; versions are immutable once written, so two writers can
never both succeed. In-place mode fills the marker by conditional overwrite,
where one etag admits one winner, and falls back to the tail when a checkpoint
or a real commit lies above the marker.
"""

from __future__ import annotations

from collections.abc import Callable

from ..delta.actions import Commit
from ..delta.log import DeltaLog, VersionExists
from ..errors import CreateConflictError
from ..store import NotFound, PreconditionFailed
from ..vocab import CommitMode
from .marker import RUNNING, commit_txn, marker_of


def fill_is_safe(log: DeltaLog, marker_version: int, latest: int) -> bool:
    """In-place is safe only while nothing but markers lies above the marker and no
    checkpoint covers it (a checkpoint taken while it was empty would hide the fill).
    Only a LIST shows checkpoints another writer made, so in-place pays one."""
    listing = log.list_log(after=marker_version - 1)
    if any(v >= marker_version for v in listing.complete_checkpoints()):
        return False
    latest = max([latest, *listing.commits])
    return all(marker_of(c) is not None for _v, c in log.commits_between(marker_version, latest))


def find_commit(log: DeltaLog, attempt: str, after: int, latest: int) -> int | None:
    for v, c in log.commits_between(after, latest):
        if commit_txn(c) == attempt:
            return v
    return None


def publish_create(log: DeltaLog, attempt: str, commit: Commit) -> int:
    """Write version 0 of a table a decided transaction creates. Only version 0: a table that
    someone else created meanwhile (a client ignoring lakevilla's reservations) is never
    written over or appended to; that raises ``CreateConflictError``, loudly, every time."""
    try:
        log.write_commit(0, commit)
        return 0
    except VersionExists:
        c = log.read_commit(0)
        if commit_txn(c) == attempt:
            return 0
        raise CreateConflictError(
            f"table {log.table!r} was created by a client outside lakevilla's protocol (it ignored "
            f"the name's reservation) after transaction {attempt} decided to create it; that "
            "transaction's other tables are committed, its version 0 of this table can never be "
            "written. Nothing was overwritten") from None


def publish(
    log: DeltaLog,
    attempt: str,
    commit: Commit,
    *,
    marker_version: int | None,
    mode: str,
    hint: int | None = None,
    known_absent: bool = False,
    on_foreign: Callable[[int, Commit], None] | None = None,
) -> int:
    """Write ``commit`` (which names ``attempt``) to ``log`` once; returns its version.

    ``known_absent``: the caller knows it never wrote this commit (skips the scan).
    ``on_foreign`` sees each commit we had to step over, for post-decision checks.
    """
    latest = log.known_latest()  # anything newer shows up as a put-if-absent collision below
    if mode == CommitMode.IN_PLACE and marker_version is not None:
        try:
            current, etag = log.read_commit_raw(marker_version)
        except NotFound:
            current, etag = None, None
        if current is not None and commit_txn(current) == attempt:
            return marker_version
        m = marker_of(current) if current is not None else None
        if (m is not None and m.attempt == attempt and m.state == RUNNING
                and fill_is_safe(log, marker_version, latest)):
            assert etag is not None  # read with ``current``
            try:
                log.rewrite_commit(marker_version, commit, etag)
                return marker_version
            except (PreconditionFailed, NotFound):
                again, _ = log.read_commit_raw(marker_version)
                if commit_txn(again) == attempt:
                    return marker_version
    lower = (marker_version if marker_version is not None
             else hint - 1 if hint is not None else latest)
    if not known_absent:
        found = find_commit(log, attempt, lower, latest)
        if found is not None:
            return found
    v = max(latest, lower) + 1
    while True:
        try:
            log.write_commit(v, commit)
            return v
        except VersionExists:
            c = log.read_commit(v)
            if commit_txn(c) == attempt:
                return v
            if on_foreign is not None:
                on_foreign(v, c)
            v += 1
