"""A table's state at one version, and log replay that produces it.

The files and tombstones are columnar (``files.FileSet`` / ``RemoveSet``): a
checkpoint's rows stay Arrow columns shared by every snapshot built on it, the
commits after it are a small overlay. ``Snapshot.files`` is still a read-only
mapping path -> ``AddFile``; code that must not pay for the whole table uses
``files.prune``, ``files.lookup`` and ``files.table``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import pyarrow as pa

from ..errors import CorruptLogError
from . import column_mapping
from .actions import AddFile, Commit, Metadata, Protocol, RemoveFile, TxnAction
from .by_identity import ByIdentity
from .checkpoint import CheckpointContents
from .files import FileSet, RemoveSet, SetBuilder

# The logical schema of each (protocol, metadata) pair met lately: a snapshot built on another
# keeps both objects until a commit changes one, so its versions share one schema object, and
# what is cached by schema (expression checks, prune plans) is found without hashing a new one.
_SCHEMAS: ByIdentity[pa.Schema] = ByIdentity()


@dataclass(frozen=True)
class Snapshot:
    table: str
    version: int
    protocol: Protocol
    metadata: Metadata
    files: FileSet
    tombstones: RemoveSet = field(default_factory=RemoveSet)
    app_txns: dict[str, TxnAction] = field(default_factory=dict)
    domains: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # a plain dict of AddFiles (tests, hand-built snapshots)
        if not isinstance(self.files, FileSet):
            object.__setattr__(self, "files", FileSet.of(dict(self.files).values()))
        if not isinstance(self.tombstones, RemoveSet):
            object.__setattr__(self, "tombstones",
                               RemoveSet(None, frozenset(), dict(self.tombstones)))

    @cached_property
    def schema(self) -> pa.Schema:
        return _SCHEMAS.get((self.protocol, self.metadata), lambda: column_mapping.logical_schema(
            self.table, self.protocol, self.metadata))

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.partition_columns)



class SnapshotBuilder:
    """Mutable replay state; ``build`` freezes it (copying, so the builder can go on)."""

    def __init__(self, table: str, base: Snapshot | None = None) -> None:
        self.table = table
        self.version = base.version if base else -1
        self.protocol = base.protocol if base else None
        self.metadata = base.metadata if base else None
        self.files: SetBuilder[AddFile, FileSet] = SetBuilder(
            AddFile, base.files if base else None, FileSet)
        self.tombstones: SetBuilder[RemoveFile, RemoveSet] = SetBuilder(
            RemoveFile, base.tombstones if base else None, RemoveSet)
        self.app_txns: dict[str, TxnAction] = dict(base.app_txns) if base else {}
        self.domains: dict[str, dict] = dict(base.domains) if base else {}

    def apply_checkpoint(self, version: int, cp: CheckpointContents) -> None:
        self.version = version
        self.protocol = cp.protocol
        self.metadata = cp.metadata
        self.files.reset(cp.adds)
        self.tombstones.reset(cp.removes)
        self.app_txns = {t.app_id: t for t in cp.txns}
        self.domains = {d["domain"]: d for d in cp.domains if not d.get("removed")}

    def apply(self, version: int, c: Commit) -> None:
        if version != self.version + 1:
            raise CorruptLogError(f"table {self.table!r}: log replay expected "
                                  f"version {self.version + 1}, got {version}")
        self.version = version
        if c.protocol is not None:
            self.protocol = c.protocol
        if c.metadata is not None:
            self.metadata = c.metadata
        for t in c.txns:
            self.app_txns[t.app_id] = t
        # A logical file is (path, DV id): a remove cancels only the add it names, whichever
        # order the commit lists them in (removes first, so a commit replacing (p, dv1) by
        # (p, dv2) leaves the new one live). A remove without a DV cancels the path, as before.
        for r in c.removes:
            if r.deletion_vector is not None:
                live = self.files.get(r.path)
                if live is not None and live.dv_id != r.dv_id:
                    self.tombstones.put(r)
                    continue
            self.files.drop(r.path)
            self.tombstones.put(r)
        for a in c.adds:
            self.files.put(a)
            gone = self.tombstones.extra.get(a.path)
            if gone is None or gone.dv_id == a.dv_id:  # (p, dv1) stays a tombstone beside (p, dv2)
                self.tombstones.drop(a.path)
        for o in c.other:
            dm = o.get("domainMetadata")
            if dm:
                if dm.get("removed"):
                    self.domains.pop(dm["domain"], None)
                else:
                    self.domains[dm["domain"]] = dm

    def build(self) -> Snapshot:
        if self.protocol is None or self.metadata is None:
            raise CorruptLogError(f"table {self.table!r}: no protocol/metaData action up to "
                                  f"version {self.version}")
        return Snapshot(self.table, self.version, self.protocol, self.metadata, self.files.build(),
                        self.tombstones.build(), dict(self.app_txns), dict(self.domains))
