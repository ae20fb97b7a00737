"""Row tracking (PROTOCOL.md, "Row Tracking"): fresh row ids and commit versions for new files.

When the ``rowTracking`` writer feature is supported (and not suspended), every new ``add``
carries ``baseRowId`` (its rows' ids are that plus their index in the file) and
``defaultRowCommitVersion`` (the version the add lands at), and the ``delta.rowTracking``
domain's ``rowIdHighWaterMark`` rises past every id given. Both depend on the version the commit
lands at and on the mark just below it, so they are decided where a commit is put at a version
(``DeltaLog.write_commit``): a commit that loses a race, is retried or redone at a later
version is assigned again there, from that version's predecessor. An add that recommits a file
(a deletion vector's re-add) keeps the ids it had; a remove carries the ids of its add.

A commit filled into a marker's version takes the mark below the marker, which a client
ignoring markers may have taken too by committing above it meanwhile, so no commit to such a
table is filled in place: it goes to the tail (``core/deciding.py``, ``fill_ok``). The commit
that enables tracking re-adds every file of the version below it that has no ids yet
(``dataChange: false``), as the protocol requires of that version. Ids of rewritten rows are
not preserved (no materialized row-id column is written, which the protocol allows: preserving
is a "should"); such commits say so with the ``delta.rowTracking.preserved`` tag set to false.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable

from ..errors import CorruptLogError
from .actions import AddFile, Commit, Metadata, Protocol
from .snapshot import Snapshot

DOMAIN = "delta.rowTracking"
ENABLE = "delta.enableRowTracking"
SUSPENDED = "delta.rowTrackingSuspended"
ROW_ID_COLUMN = "delta.rowTracking.materializedRowIdColumnName"
COMMIT_VERSION_COLUMN = "delta.rowTracking.materializedRowCommitVersionColumnName"
BASE_ROW_ID, COMMIT_VERSION = "baseRowId", "defaultRowCommitVersion"


def _true(config: dict[str, str], key: str) -> bool:
    return {k.lower(): v for k, v in config.items()}.get(key.lower(), "false").lower() == "true"


def assigns(protocol: Protocol, metadata: Metadata | None) -> bool:
    """Whether writers must assign row ids: the feature is supported and not suspended."""
    return (protocol.min_writer_version == 7 and "rowTracking" in (protocol.writer_features or [])
            and not (metadata is not None and _true(metadata.configuration, SUSPENDED)))


def enabled(metadata: Metadata) -> bool:
    return _true(metadata.configuration, ENABLE)


def with_column_names(config: dict[str, str]) -> dict[str, str]:
    """``config`` with the materialized columns named, as enabling row tracking requires (names
    no column of the table can have)."""
    if not _true(config, ENABLE):
        return config
    out = dict(config)
    out.setdefault(ROW_ID_COLUMN, f"_row-id-col-{uuid.uuid4()}")
    out.setdefault(COMMIT_VERSION_COLUMN, f"_row-commit-version-col-{uuid.uuid4()}")
    return out


def high_water_mark(domains: dict[str, dict]) -> int:
    """The highest row id assigned so far (-1 before any)."""
    dm = domains.get(DOMAIN)
    if dm is None:
        return -1
    try:
        return int(json.loads(dm["configuration"])["rowIdHighWaterMark"])
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptLogError(f"malformed {DOMAIN} domain metadata {dm!r} ({e})") from None


def fresh_adds(commit: Commit) -> bool:
    """Whether ``commit`` adds files that have no row ids yet."""
    return any(BASE_ROW_ID not in a.extra for a in commit.adds)


def may_assign(commit: Commit) -> bool:
    """Whether ``commit`` may be given row ids: it adds files without, or enables tracking."""
    return fresh_adds(commit) or (commit.metadata is not None and enabled(commit.metadata))


def _backfill(commit: Commit, before: Snapshot | None) -> list[AddFile]:
    """The enabling commit re-adds every file of the version below it that has no ids, so that
    every file of the version that enables tracking has them (taken from that version itself,
    so no concurrent append can slip past)."""
    if (before is None or commit.metadata is None or not enabled(commit.metadata)
            or enabled(before.metadata)):
        return []
    ours = {a.path for a in commit.adds} | {r.path for r in commit.removes}
    return [dataclasses.replace(a, data_change=False) for a in before.files.values()
            if BASE_ROW_ID not in a.extra and a.path not in ours]


def at_version(commit: Commit, version: int, base: Snapshot | None,
               before: Callable[[], Snapshot]) -> Commit:
    """``commit`` as put at ``version`` (``DeltaLog``): the snapshot of the version below
    (``before``) is built only for a commit that may get ids on a table that may track rows
    (``base``: the newest snapshot the log holds; a change of that conflicts with the commit)."""
    if not may_assign(commit):
        return commit
    if base is not None and not assigns(commit.protocol or base.protocol, None):
        return commit
    return assign(commit, version, before() if version > 0 else None)


def assign(commit: Commit, version: int, before: Snapshot | None) -> Commit:
    """``commit`` as written at ``version`` after ``before`` (None: a new table): its new adds
    numbered past the mark, the mark advanced, in a copy; unchanged when nothing is to assign."""
    protocol = commit.protocol or (before.protocol if before is not None else None)
    metadata = commit.metadata or (before.metadata if before is not None else None)
    if protocol is None or not assigns(protocol, metadata):
        return commit
    commit = dataclasses.replace(commit, adds=[*commit.adds, *_backfill(commit, before)])
    if not fresh_adds(commit):
        return commit
    mark = high_water_mark(before.domains) if before is not None else -1
    adds = []
    for a in commit.adds:
        if BASE_ROW_ID not in a.extra:
            n = a.num_records
            if n is None:
                raise CorruptLogError(f"cannot assign row ids to {a.path}: its add has no "
                                      "numRecords statistic")
            a = dataclasses.replace(a, extra={**a.extra, BASE_ROW_ID: mark + 1,
                                              COMMIT_VERSION: version})
            mark += n
        adds.append(a)
    other = [o for o in commit.other
             if (o.get("domainMetadata") or {}).get("domain") != DOMAIN]
    other.append({"domainMetadata": {"domain": DOMAIN, "removed": False,
                                     "configuration": json.dumps({"rowIdHighWaterMark": mark})}})
    info = commit.commit_info
    if info is not None and metadata is not None and enabled(metadata):
        # rows copied or updated into new files got new ids: not preserved
        preserved = not commit.removes
        tags = {**(info.get("tags") or {}), "delta.rowTracking.preserved": str(preserved).lower()}
        info = {**info, "tags": tags}
    return dataclasses.replace(commit, adds=adds, other=other, commit_info=info)
