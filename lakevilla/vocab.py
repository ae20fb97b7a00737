"""The on-storage vocabulary: every word lakevilla writes into a log, marker or record.

One owner for the values other clients read back. The enums are ``StrEnum`` so they
compare equal to, and serialize exactly as, the bare strings written before they
existed: the JSON on storage stays byte-identical. ``CommitInfo`` is the
``commitInfo.lakevilla`` object of a table commit (tail commit, filled marker, or a
creation), built and parsed only here; markers have their own payload
(``markers.MarkerPayload``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .errors import CorruptLogError

FORMAT_VERSION = 1


class Decision(StrEnum):
    """What makes a transaction's commit durable (recorded in its markers and commits)."""

    TABLE = "table"  # each table commit decides on its own (features '' and R)
    RECORD = "record"  # one put-if-absent of the transaction record (CT)
    GVL = "gvl"  # one put-if-absent of the next global-log entry (I)


class MarkerState(StrEnum):
    RUNNING = "running"
    COMMITTED = "committed"
    ABORTED = "aborted"
    FREED = "freed"


class RecordState(StrEnum):
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"


ENGINE_INFO = "lakevilla/0.1"  # commitInfo.engineInfo of every commit lakevilla writes


class CommitMode(StrEnum):
    """Where a marker-holding commit goes: after the newest version, or into its marker's slot."""

    TAIL = "tail"
    IN_PLACE = "in_place"

    @classmethod
    def parse(cls, value: str) -> CommitMode:
        from .errors import InvalidArgumentError

        try:
            return cls(value)
        except ValueError:
            raise InvalidArgumentError("commit_mode must be 'tail' or 'in_place'") from None


class InfoKind(StrEnum):
    """``commitInfo.lakevilla.kind``: what wrote the version."""

    COMMIT = "commit"
    CREATE = "create"
    MARKER = "marker"


@dataclass
class CommitInfo:
    """``commitInfo.lakevilla`` of a table commit. Fields that are None are not written,
    so a plain creation stays ``{"v": 1, "kind": "create"}``; field order is key order."""

    kind: str = InfoKind.COMMIT
    txn: str | None = None
    attempt: str | None = None
    features: str | None = None
    decision: str | None = None
    tables: int | None = None
    marker: int | None = None  # the marker version this commit fills or follows
    txn_tables: list[str] | None = None  # every table of a multi-table CT commit
    # a commit of updates alone: every row it removes it adds back, changed in these columns
    # (lower case) alone, and it adds no other row; a read of none of them reads the same
    updated: list[str] | None = None
    # a group commit: every transaction it carries besides its leader's (txn, attempt, features)
    riders: list[dict[str, Any]] | None = None
    v: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"v": self.v, "kind": str(self.kind)}
        for k in ("txn", "attempt", "features", "decision", "tables", "marker", "txn_tables",
                  "updated", "riders"):
            x = getattr(self, k)
            if x is not None:
                out[k] = str(x) if isinstance(x, StrEnum) else x
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CommitInfo:
        if int(d.get("v", FORMAT_VERSION)) > FORMAT_VERSION:
            raise CorruptLogError(f"commit format version {d['v']} is newer than this "
                                  "lakevilla understands")
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known})

    @classmethod
    def of(cls, lv: dict[str, Any] | None) -> CommitInfo | None:
        """The parsed object of a commit's ``lakevilla`` dict; None for a marker, a foreign
        commit, or one this version cannot read."""
        if not lv or lv.get("kind") not in (InfoKind.COMMIT, InfoKind.CREATE):
            return None
        try:
            return cls.from_json(lv)
        except (TypeError, ValueError, CorruptLogError):
            return None

    def names_txn(self, txn: str) -> bool:
        """Whether this commit is ``txn``'s: its own, or a group commit that carried it."""
        return self.txn == txn or any(isinstance(r, dict) and r.get("txn") == txn
                                      for r in self.riders or [])

    @property
    def is_commit(self) -> bool:
        """A transaction's commit to a table; version 0 of a table a transaction created is one
        too (recovery must recognise its own create, or it takes it for a foreign creator)."""
        return self.kind in (InfoKind.COMMIT, InfoKind.CREATE)
