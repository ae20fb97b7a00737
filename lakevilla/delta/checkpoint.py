"""Single-part Parquet checkpoints (write) and classic single/multi-part checkpoints (read)."""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import CorruptLogError
from .actions import AddFile, Metadata, Protocol, RemoveFile, TxnAction

_STR_MAP = pa.map_(pa.string(), pa.string())
_STR_MAP_NN = pa.map_(pa.string(), pa.field("value", pa.string(), nullable=False))
_STR_LIST = pa.list_(pa.field("element", pa.string(), nullable=False))

CHECKPOINT_SCHEMA = pa.schema([
    pa.field("txn", pa.struct([
        pa.field("appId", pa.string(), False), pa.field("version", pa.int64(), False),
        pa.field("lastUpdated", pa.int64()),
    ])),
    pa.field("add", pa.struct([
        pa.field("path", pa.string(), False), pa.field("partitionValues", _STR_MAP, False),
        pa.field("size", pa.int64(), False), pa.field("modificationTime", pa.int64(), False),
        pa.field("dataChange", pa.bool_(), False), pa.field("stats", pa.string()),
        pa.field("tags", _STR_MAP),
    ])),
    pa.field("remove", pa.struct([
        pa.field("path", pa.string(), False), pa.field("deletionTimestamp", pa.int64()),
        pa.field("dataChange", pa.bool_(), False), pa.field("extendedFileMetadata", pa.bool_()),
        pa.field("partitionValues", _STR_MAP), pa.field("size", pa.int64()),
    ])),
    pa.field("metaData", pa.struct([
        pa.field("id", pa.string(), False), pa.field("name", pa.string()), pa.field("description", pa.string()),
        pa.field("format", pa.struct([pa.field("provider", pa.string(), False),
                                      pa.field("options", _STR_MAP_NN, False)]), False),
        pa.field("schemaString", pa.string(), False), pa.field("partitionColumns", _STR_LIST, False),
        pa.field("createdTime", pa.int64()), pa.field("configuration", _STR_MAP_NN, False),
    ])),
    pa.field("protocol", pa.struct([
        pa.field("minReaderVersion", pa.int32(), False), pa.field("minWriterVersion", pa.int32(), False),
        pa.field("readerFeatures", _STR_LIST), pa.field("writerFeatures", _STR_LIST),
    ])),
    pa.field("domainMetadata", pa.struct([
        pa.field("domain", pa.string(), False), pa.field("configuration", pa.string(), False),
        pa.field("removed", pa.bool_(), False),
    ])),
])


def _map_items(d: dict | None) -> list[tuple[str, Any]] | None:
    return None if d is None else list(d.items())


def write_checkpoint_bytes(
    protocol: Protocol,
    metadata: Metadata,
    files: list[AddFile],
    tombstones: list[RemoveFile],
    app_txns: dict[str, TxnAction],
    domains: dict[str, dict] | None = None,
) -> tuple[bytes, int]:
    """The Parquet bytes of a checkpoint and its number of actions (rows)."""
    rows: list[dict[str, Any]] = []
    p = protocol.to_json()
    rows.append({"protocol": {"minReaderVersion": p["minReaderVersion"], "minWriterVersion": p["minWriterVersion"],
                              "readerFeatures": p.get("readerFeatures"), "writerFeatures": p.get("writerFeatures")}})
    rows.append({"metaData": {
        "id": metadata.id, "name": metadata.name, "description": metadata.description,
        "format": {"provider": metadata.format_provider, "options": list(metadata.format_options.items())},
        "schemaString": metadata.schema_string, "partitionColumns": list(metadata.partition_columns),
        "createdTime": metadata.created_time, "configuration": list(metadata.configuration.items()),
    }})
    for t in app_txns.values():
        rows.append({"txn": {"appId": t.app_id, "version": t.version, "lastUpdated": t.last_updated}})
    for d in (domains or {}).values():
        rows.append({"domainMetadata": {"domain": d["domain"], "configuration": d["configuration"],
                                        "removed": bool(d.get("removed", False))}})
    for a in files:
        rows.append({"add": {
            "path": a.path, "partitionValues": _map_items(a.partition_values), "size": a.size,
            "modificationTime": a.modification_time, "dataChange": False, "stats": a.stats,
            "tags": _map_items(a.tags),
        }})
    for r in tombstones:
        rows.append({"remove": {
            "path": r.path, "deletionTimestamp": r.deletion_timestamp, "dataChange": False,
            "extendedFileMetadata": r.extended_file_metadata, "partitionValues": _map_items(r.partition_values),
            "size": r.size,
        }})
    cols = {f.name: pa.array([row.get(f.name) for row in rows], f.type) for f in CHECKPOINT_SCHEMA}
    table = pa.table(cols, schema=CHECKPOINT_SCHEMA)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="snappy")
    return buf.getvalue(), len(rows)


def _as_dict(v: Any) -> dict | None:
    if v is None:
        return None
    if isinstance(v, dict):
        return v
    return dict(v)  # arrow maps come back as lists of (key, value)


class CheckpointContents:
    def __init__(self) -> None:
        self.protocol: Protocol | None = None
        self.metadata: Metadata | None = None
        self.adds: list[AddFile] = []
        self.removes: list[RemoveFile] = []
        self.txns: list[TxnAction] = []
        self.domains: list[dict] = []


def read_checkpoint_bytes(parts: list[bytes], where: str = "checkpoint") -> CheckpointContents:
    out = CheckpointContents()
    for data in parts:
        try:
            pf = pq.ParquetFile(io.BytesIO(data))
            names = set(pf.schema_arrow.names)
            wanted = [c for c in ("protocol", "metaData", "add", "remove", "txn", "domainMetadata", "sidecar")
                      if c in names]
            table = pf.read(columns=wanted)
        except (pa.ArrowInvalid, OSError) as e:
            raise CorruptLogError(f"{where} is not a readable Parquet checkpoint: {e}") from None
        if "sidecar" in wanted and table.column("sidecar").null_count < table.num_rows:
            raise CorruptLogError(f"{where} uses sidecar files (V2 checkpoints), which lakevilla does not read")
        for col in wanted:
            for v in table.column(col).to_pylist():
                if v is None:
                    continue
                if col == "protocol":
                    out.protocol = Protocol.from_json(v)
                elif col == "metaData":
                    fmt = v.get("format") or {}
                    out.metadata = Metadata.from_json({
                        **v, "configuration": _as_dict(v.get("configuration")) or {},
                        "format": {"provider": fmt.get("provider", "parquet"),
                                   "options": _as_dict(fmt.get("options")) or {}},
                    })
                elif col == "add":
                    d = {k: x for k, x in v.items() if x is not None}
                    d["partitionValues"] = _as_dict(v.get("partitionValues")) or {}
                    if v.get("tags") is not None:
                        d["tags"] = _as_dict(v["tags"])
                    d.pop("stats_parsed", None)
                    d.pop("partitionValues_parsed", None)
                    out.adds.append(AddFile.from_json(d))
                elif col == "remove":
                    d = {k: x for k, x in v.items() if x is not None}
                    if v.get("partitionValues") is not None:
                        d["partitionValues"] = _as_dict(v["partitionValues"])
                    d.pop("tags", None)
                    out.removes.append(RemoveFile.from_json(d))
                elif col == "txn":
                    out.txns.append(TxnAction.from_json(v))
                elif col == "domainMetadata":
                    out.domains.append(v)
    return out


def last_checkpoint_json(version: int, size: int, size_in_bytes: int, num_add_files: int) -> bytes:
    return json.dumps({"version": version, "size": size, "sizeInBytes": size_in_bytes,
                       "numOfAddFiles": num_add_files}).encode()
