"""Version 0 of a new table: protocol, metadata and the rows it is created with."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pyarrow as pa

from ..vocab import ENGINE_INFO, CommitInfo, InfoKind
from . import mapping_changes, row_tracking
from .actions import AddFile, Commit, Metadata
from .features import protocol_for
from .schema import field_metadata_keys, schema_from_json, schema_to_json


def new_metadata(schema: pa.Schema, parts: list[str], properties: dict[str, str] | None,
                 description: str | None) -> Metadata:
    """A fresh table id; ``schema_to_json`` raises ``SchemaMismatchError`` for types Delta lacks.
    Properties asking for column mapping map every column (``col-<uuid>`` names, ids from 1)."""
    md = Metadata(id=str(uuid.uuid4()), schema_string=schema_to_json(schema),
                  partition_columns=list(parts),
                  configuration=row_tracking.with_column_names(
                      {str(k): str(v) for k, v in (properties or {}).items()}),
                  created_time=int(time.time() * 1000), name=None, description=description)
    if mapping_changes.requested_mode(md.configuration) in ("name", "id"):
        md = mapping_changes.mapped(md, keep_names=False)
    return md


def creation_commit(metadata: Metadata, adds: list[AddFile], *, with_data: bool,
                    lakevilla: dict[str, Any] | None = None) -> Commit:
    """Version 0: ``CREATE TABLE`` or ``CREATE TABLE AS SELECT`` (protocol 1/2, or reader 3 / writer
    7 with ``timestampNtz`` when a column is a timestamp without time zone)."""
    rows = sum(a.num_records or 0 for a in adds)
    info: dict[str, Any] = {"timestamp": int(time.time() * 1000),
                            "operation": "CREATE TABLE AS SELECT" if with_data else "CREATE TABLE",
                            "operationParameters": {
                                "partitionBy": str(list(metadata.partition_columns))},
                            "isBlindAppend": True, "engineInfo": ENGINE_INFO,
                            "lakevilla": lakevilla or CommitInfo(kind=InfoKind.CREATE).to_json()}
    if with_data:
        info["operationMetrics"] = {"numFiles": str(len(adds)), "numOutputRows": str(rows)}
    identity = any(k.startswith("delta.identity.")
                   for k in field_metadata_keys(metadata.schema_string))
    return Commit(commit_info=info, protocol=protocol_for(schema_from_json(metadata.schema_string),
                                                        metadata.configuration, identity),
                  metadata=metadata, adds=list(adds))
