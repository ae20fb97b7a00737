"""Module #2: transaction sublogs, one object per operation.

An entry is written after the operation's data files exist and before any
version references them, so a crashed transaction's files can always be found,
and the transaction can be finished or undone by anyone. Physical entries name
the files an operation added and removed; undoing one drops the added files and
restores the removed ones. Logical entries also carry the declarative statement,
so that redo can re-execute it on a newer snapshot. Entries are keyed by a
sequence number: undo walks them newest to oldest, redo oldest to newest.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ..delta.actions import AddFile, CdcFile, RemoveFile
from ..errors import CorruptLogError
from ..names import sublog_key, sublog_prefix
from ..store import ObjectStore


@dataclass
class ReadRecord:
    table: str
    version: int
    files: list[str]
    where: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SublogEntry:
    txn: str
    seq: int
    table: str
    op: str  # insert | update | delete
    kind: str  # physical | logical
    op_seq: int  # the operation this entry describes (a redo has a new seq, the same op_seq)
    added: list[dict[str, Any]] = field(default_factory=list)
    removed: list[dict[str, Any]] = field(default_factory=list)
    cdc: list[dict[str, Any]] = field(default_factory=list)  # its change data files
    read_files: list[str] = field(default_factory=list)
    # logical: {"where": ..., "set": ...} (overwrite: "inserted")
    statement: dict[str, Any] | None = None
    # the search predicate (conflict checks), also for physical entries
    predicate: str | None = None
    reads: list[dict[str, Any]] = field(default_factory=list)  # user reads since the previous entry
    base_version: int = -1
    read_version: int = -1
    redo: bool = False
    attempt: str = ""
    features: str = ""
    isolation: str = "serializable"
    mode: str = "tail"
    created: float = 0.0
    v: int = 1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SublogEntry:
        if int(d.get("v", 1)) > 1:
            raise CorruptLogError(f"sublog format version {d['v']} is newer than this "
                                  "lakevilla understands")
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})

    # compensation: the files undoing this entry drops
    def added_files(self) -> list[AddFile]:
        return [AddFile.from_json(a) for a in self.added]

    def cdc_files(self) -> list[CdcFile]:
        return [CdcFile.from_json(c) for c in self.cdc]


class Logged(Protocol):
    """What an entry records of a statement (``statements/base.py``)."""

    kind: str
    seq: int
    table: str
    where: str | None
    added: list[AddFile]
    removed: list[AddFile]
    cdc: list[CdcFile]
    read_files: set[str]

    def encode(self, logical: bool) -> dict[str, Any] | None: ...


def entry_for(txn: str, seq: int, op: Logged, *, logical: bool, base_version: int,
              read_version: int, reads: list[ReadRecord], redo: bool, attempt: str = "",
              features: str = "", isolation: str = "serializable",
              mode: str = "tail") -> SublogEntry:
    e = SublogEntry(
        txn=txn, seq=seq, table=op.table, op=op.kind,
        kind="logical" if logical else "physical",
        op_seq=op.seq,
        added=[a.to_json() for a in op.added],
        removed=[a.to_json() for a in op.removed],
        cdc=[c.to_json() for c in op.cdc],
        read_files=sorted(op.read_files),
        statement=op.encode(logical),
        reads=[r.to_json() for r in reads],
        predicate=op.where,
        base_version=base_version, read_version=read_version, redo=redo, attempt=attempt,
        features=features, isolation=isolation, mode=mode, created=time.time(),
    )
    return e


def write(store: ObjectStore, e: SublogEntry) -> None:
    store.put(sublog_key(e.txn, e.seq), json.dumps(e.to_json(), separators=(",", ":")).encode())


def read_all(store: ObjectStore, txn: str) -> list[SublogEntry]:
    out = []
    for meta in store.list(sublog_prefix(txn)):
        if not meta.key.endswith(".json"):
            continue
        try:
            out.append(SublogEntry.from_json(json.loads(store.get(meta.key).data)))
        except (ValueError, TypeError) as e:
            raise CorruptLogError(f"sublog {meta.key} is damaged: {e}") from None
    out.sort(key=lambda e: e.seq)
    return out


def current_ops(entries: list[SublogEntry]) -> list[SublogEntry]:
    """The latest entry per operation, in operation order (what redo replays)."""
    latest: dict[int, SublogEntry] = {}
    for e in entries:
        latest[e.op_seq] = e
    return [latest[k] for k in sorted(latest)]


__all__ = ["ReadRecord", "SublogEntry", "entry_for", "write", "read_all", "current_ops",
           "RemoveFile"]
