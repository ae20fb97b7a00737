"""Delta log actions as dataclasses, with exact JSON round-trips.

Fields we do not model are kept in ``extra`` and written back unchanged, so a
commit we rewrite or checkpoint loses nothing another writer put there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..errors import CorruptLogError
from .deletion_vectors import DeletionVector


def _pop(d: dict, key: str, default=None):
    return d.pop(key, default)


def _dv(d: dict | None) -> DeletionVector | None:
    return DeletionVector.from_json(d) if d is not None else None


@dataclass
class Protocol:
    min_reader_version: int = 1
    min_writer_version: int = 2
    reader_features: list[str] | None = None
    writer_features: list[str] | None = None

    def to_json(self) -> dict:
        d: dict[str, Any] = {"minReaderVersion": self.min_reader_version,
                             "minWriterVersion": self.min_writer_version}
        if self.reader_features is not None:
            d["readerFeatures"] = list(self.reader_features)
        if self.writer_features is not None:
            d["writerFeatures"] = list(self.writer_features)
        return d

    @classmethod
    def from_json(cls, d: dict) -> Protocol:
        return cls(
            int(d["minReaderVersion"]), int(d["minWriterVersion"]),
            list(d["readerFeatures"]) if d.get("readerFeatures") is not None else None,
            list(d["writerFeatures"]) if d.get("writerFeatures") is not None else None,
        )


EMPTY_SCHEMA_STRING = '{"type":"struct","fields":[]}'


@dataclass
class Metadata:
    id: str
    schema_string: str
    partition_columns: list[str] = field(default_factory=list)
    configuration: dict[str, str] = field(default_factory=dict)
    created_time: int | None = None
    name: str | None = None
    description: str | None = None
    format_provider: str = "parquet"
    format_options: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "format": {"provider": self.format_provider, "options": dict(self.format_options)},
            "schemaString": self.schema_string,
            "partitionColumns": list(self.partition_columns),
            "configuration": dict(self.configuration),
            "createdTime": self.created_time,
        }

    @classmethod
    def from_json(cls, d: dict) -> Metadata:
        fmt = d.get("format") or {}
        return cls(
            id=d["id"],
            # required by the protocol, yet absent from a Delta Live Tables placeholder (its
            # version 0); Delta on Spark reads no schemaString as a schema without columns
            schema_string=(d["schemaString"] if d.get("schemaString") is not None
                           else EMPTY_SCHEMA_STRING),
            partition_columns=list(d.get("partitionColumns") or []),
            configuration=dict(d.get("configuration") or {}),
            created_time=d.get("createdTime"),
            name=d.get("name"),
            description=d.get("description"),
            format_provider=fmt.get("provider", "parquet"),
            format_options=dict(fmt.get("options") or {}),
        )


@dataclass
class AddFile:
    path: str
    size: int
    partition_values: dict[str, str | None] = field(default_factory=dict)
    modification_time: int = 0
    data_change: bool = True
    stats: str | None = None
    tags: dict[str, str] | None = None
    deletion_vector: DeletionVector | None = None  # rows of the file that are deleted
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        d: dict[str, Any] = {
            "path": self.path,
            "partitionValues": dict(self.partition_values),
            "size": self.size,
            "modificationTime": self.modification_time,
            "dataChange": self.data_change,
            "stats": self.stats,
        }
        if self.tags is not None:
            d["tags"] = dict(self.tags)
        if self.deletion_vector is not None:
            d["deletionVector"] = self.deletion_vector.to_json()
        d.update(self.extra)
        return d

    @classmethod
    def from_json(cls, d: dict) -> AddFile:
        d = dict(d)
        return cls(
            path=_pop(d, "path"),
            size=int(_pop(d, "size", 0) or 0),
            partition_values=dict(_pop(d, "partitionValues") or {}),
            modification_time=int(_pop(d, "modificationTime", 0) or 0),
            data_change=bool(_pop(d, "dataChange", True)),
            stats=_pop(d, "stats"),
            tags=_pop(d, "tags"),
            deletion_vector=_dv(_pop(d, "deletionVector")),
            extra={k: v for k, v in d.items() if v is not None},
        )

    @property
    def dv_id(self) -> str | None:
        """The DV's unique id: with ``path``, what names this logical file in Delta's replay."""
        return self.deletion_vector.unique_id if self.deletion_vector is not None else None

    @cached_property
    def parsed_stats(self) -> dict[str, Any]:
        if not self.stats:
            return {}
        try:
            return json.loads(self.stats)
        except ValueError:
            return {}

    @property
    def num_records(self) -> int | None:
        n = self.parsed_stats.get("numRecords")
        return int(n) if n is not None else None

    @property
    def written_files(self) -> tuple[str, ...]:
        """The files written for this add, as paths under the table (like ``path``): its data
        file; or, for an add whose deletion vector marks rows of a file an earlier add wrote,
        the DV's own file if it is not inline. Undoing the add deletes these, never the marked
        data file."""
        dv = self.deletion_vector
        if dv is None:
            return (self.path,)
        dv_file = dv.relative_file()
        return (dv_file,) if dv_file is not None else ()

    def remove(self, timestamp_ms: int, data_change: bool = True) -> RemoveFile:
        return RemoveFile(
            path=self.path, deletion_timestamp=timestamp_ms, data_change=data_change,
            partition_values=dict(self.partition_values), size=self.size,
            extended_file_metadata=True, deletion_vector=self.deletion_vector,
            # row tracking: a remove carries its add's ids (PROTOCOL.md, "Row Tracking")
            extra={k: self.extra[k] for k in ("baseRowId", "defaultRowCommitVersion")
                   if k in self.extra},
        )


@dataclass
class RemoveFile:
    path: str
    deletion_timestamp: int | None = None
    data_change: bool = True
    partition_values: dict[str, str | None] | None = None
    size: int | None = None
    extended_file_metadata: bool | None = None
    deletion_vector: DeletionVector | None = None  # names, with the path, the file removed
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        d: dict[str, Any] = {"path": self.path, "deletionTimestamp": self.deletion_timestamp,
                             "dataChange": self.data_change}
        if self.extended_file_metadata is not None:
            d["extendedFileMetadata"] = self.extended_file_metadata
        if self.partition_values is not None:
            d["partitionValues"] = dict(self.partition_values)
        if self.size is not None:
            d["size"] = self.size
        if self.deletion_vector is not None:
            d["deletionVector"] = self.deletion_vector.to_json()
        d.update(self.extra)
        return d

    @classmethod
    def from_json(cls, d: dict) -> RemoveFile:
        d = dict(d)
        return cls(
            path=_pop(d, "path"),
            deletion_timestamp=_pop(d, "deletionTimestamp"),
            data_change=bool(_pop(d, "dataChange", True)),
            partition_values=_pop(d, "partitionValues"),
            size=_pop(d, "size"),
            extended_file_metadata=_pop(d, "extendedFileMetadata"),
            deletion_vector=_dv(_pop(d, "deletionVector")),
            extra={k: v for k, v in d.items() if v is not None},
        )

    @property
    def dv_id(self) -> str | None:
        return self.deletion_vector.unique_id if self.deletion_vector is not None else None


@dataclass
class CdcFile:
    """A ``cdc`` action: a ``_change_data/`` file holding a commit's change rows (each with its
    ``_change_type``). Only its commit names it: checkpoints and snapshots never carry it."""

    path: str
    size: int
    partition_values: dict[str, str | None] = field(default_factory=dict)
    data_change: bool = False
    tags: dict[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        d: dict[str, Any] = {"path": self.path, "partitionValues": dict(self.partition_values),
                             "size": self.size, "dataChange": self.data_change}
        if self.tags is not None:
            d["tags"] = dict(self.tags)
        d.update(self.extra)
        return d

    @classmethod
    def from_json(cls, d: dict) -> CdcFile:
        d = dict(d)
        return cls(path=_pop(d, "path"), size=int(_pop(d, "size", 0) or 0),
                   partition_values=dict(_pop(d, "partitionValues") or {}),
                   data_change=bool(_pop(d, "dataChange", False)), tags=_pop(d, "tags"),
                   extra={k: v for k, v in d.items() if v is not None})


@dataclass
class TxnAction:
    app_id: str
    version: int
    last_updated: int | None = None

    def to_json(self) -> dict:
        d: dict[str, Any] = {"appId": self.app_id, "version": self.version}
        if self.last_updated is not None:
            d["lastUpdated"] = self.last_updated
        return d

    @classmethod
    def from_json(cls, d: dict) -> TxnAction:
        return cls(d["appId"], int(d["version"]), d.get("lastUpdated"))


# Actions a commit may hold; the value is the class that models it (None: kept raw).
_KNOWN = {"protocol": Protocol, "metaData": Metadata, "add": AddFile, "remove": RemoveFile,
          "txn": TxnAction, "cdc": CdcFile}
_RAW_OK = {"commitInfo", "domainMetadata", "checkpointMetadata", "sidecar"}


@dataclass
class Commit:
    """One parsed commit file. ``commit_info`` stays a plain dict (it carries lakevilla's data)."""

    protocol: Protocol | None = None
    metadata: Metadata | None = None
    adds: list[AddFile] = field(default_factory=list)
    removes: list[RemoveFile] = field(default_factory=list)
    txns: list[TxnAction] = field(default_factory=list)
    commit_info: dict[str, Any] | None = None
    other: list[dict[str, Any]] = field(default_factory=list)  # domainMetadata, unknown
    cdc: list[CdcFile] = field(default_factory=list)
    # What upper layers derived from this commit once read (a marker's parsed payload): a commit
    # read from storage is never changed, and waiters re-examine the same cached commits often.
    derived: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def is_empty(self) -> bool:
        """True when a Delta reader sees no change: a marker, to them."""
        return not (self.protocol or self.metadata or self.adds or self.removes or self.txns or
                    self.cdc or any(k != "commitInfo" for o in self.other for k in o))

    @property
    def lakevilla(self) -> dict[str, Any] | None:
        if self.commit_info:
            lv = self.commit_info.get("lakevilla")
            if isinstance(lv, dict):
                return lv
        return None

    def to_bytes(self) -> bytes:
        lines = []
        if self.commit_info is not None:
            lines.append({"commitInfo": self.commit_info})
        if self.protocol is not None:
            lines.append({"protocol": self.protocol.to_json()})
        if self.metadata is not None:
            lines.append({"metaData": self.metadata.to_json()})
        lines.extend({"txn": t.to_json()} for t in self.txns)
        lines.extend({"remove": r.to_json()} for r in self.removes)
        lines.extend({"add": a.to_json()} for a in self.adds)
        lines.extend({"cdc": c.to_json()} for c in self.cdc)
        lines.extend(self.other)
        return ("\n".join(json.dumps(line, separators=(",", ":"))
                          for line in lines) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "commit") -> Commit:
        c = cls()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptLogError(f"{where} is not UTF-8 text: {e}") from None
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise CorruptLogError(f"{where}: line {n} is not JSON ({e})") from None
            if not isinstance(obj, dict) or len(obj) != 1:
                raise CorruptLogError(f"{where}: line {n} is not a single Delta action")
            (kind, body), = obj.items()
            try:
                if kind == "protocol":
                    c.protocol = Protocol.from_json(body)
                elif kind == "metaData":
                    c.metadata = Metadata.from_json(body)
                elif kind == "add":
                    c.adds.append(AddFile.from_json(body))
                elif kind == "remove":
                    c.removes.append(RemoveFile.from_json(body))
                elif kind == "txn":
                    c.txns.append(TxnAction.from_json(body))
                elif kind == "cdc":
                    c.cdc.append(CdcFile.from_json(body))
                elif kind == "commitInfo":
                    c.commit_info = body
                else:
                    c.other.append(obj)
            except (KeyError, TypeError, ValueError) as e:
                raise CorruptLogError(f"{where}: malformed {kind} action "
                                      f"on line {n} ({e})") from None
        return c
