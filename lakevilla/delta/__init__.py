"""Delta Lake log I/O: actions, schema, statistics, checkpoints, replay."""

from .actions import AddFile, Commit, Metadata, Protocol, RemoveFile, TxnAction
from .log import DeltaLog, VersionExists
from .snapshot import Snapshot, SnapshotBuilder

__all__ = ["AddFile", "Commit", "Metadata", "Protocol", "RemoveFile", "TxnAction", "DeltaLog",
           "VersionExists", "Snapshot", "SnapshotBuilder"]
