"""Single-part Parquet checkpoints, classic or V2 (write); classic single/multi-part and V2
checkpoints (read).

A V2 checkpoint we write is the classic one plus a ``checkpointMetadata`` row (its version),
under a UUID name: every action stays in the one file (no sidecars), so it costs no request more.

Both directions stay columnar: the ``add`` and ``remove`` rows are read into
``ActionTable``s (no object per file) and written from them. Our checkpoints put the
few protocol/metadata/txn/domain rows in a row group of their own and the files in
row groups of ``ROWS_PER_GROUP``; a reader skips row groups whose statistics say an
action column is all null, so it finds the metadata without decoding a million
empty rows (other writers' checkpoints are read whole).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import CorruptLogError
from .actions import AddFile, Commit, Metadata, Protocol, RemoveFile, TxnAction
from .files import ADD_SCHEMA, DV_STRUCT, REMOVE_SCHEMA, ActionTable, LazyRows, conform_columns

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
        pa.field("tags", _STR_MAP), pa.field("deletionVector", DV_STRUCT),
        pa.field("baseRowId", pa.int64()), pa.field("defaultRowCommitVersion", pa.int64()),
        pa.field("clusteringProvider", pa.string()),
    ])),
    pa.field("remove", pa.struct([
        pa.field("path", pa.string(), False), pa.field("deletionTimestamp", pa.int64()),
        pa.field("dataChange", pa.bool_(), False), pa.field("extendedFileMetadata", pa.bool_()),
        pa.field("partitionValues", _STR_MAP), pa.field("size", pa.int64()),
        pa.field("deletionVector", DV_STRUCT),
    ])),
    pa.field("metaData", pa.struct([
        pa.field("id", pa.string(), False), pa.field("name", pa.string()),
        pa.field("description", pa.string()),
        pa.field("format", pa.struct([pa.field("provider", pa.string(), False),
                                      pa.field("options", _STR_MAP_NN, False)]), False),
        pa.field("schemaString", pa.string(), False),
        pa.field("partitionColumns", _STR_LIST, False), pa.field("createdTime", pa.int64()),
        pa.field("configuration", _STR_MAP_NN, False),
    ])),
    pa.field("protocol", pa.struct([
        pa.field("minReaderVersion", pa.int32(), False),
        pa.field("minWriterVersion", pa.int32(), False), pa.field("readerFeatures", _STR_LIST),
        pa.field("writerFeatures", _STR_LIST),
    ])),
    pa.field("domainMetadata", pa.struct([
        pa.field("domain", pa.string(), False), pa.field("configuration", pa.string(), False),
        pa.field("removed", pa.bool_(), False),
    ])),
])

# a V2 spec checkpoint: the same actions and exactly one ``checkpointMetadata``
V2_CHECKPOINT_SCHEMA = CHECKPOINT_SCHEMA.append(pa.field("checkpointMetadata", pa.struct([
    pa.field("version", pa.int64(), False), pa.field("tags", _STR_MAP)])))

A = TypeVar("A", AddFile, RemoveFile)

ROWS_PER_GROUP = 128 * 1024
_ADD_T = CHECKPOINT_SCHEMA.field("add").type
_REMOVE_T = CHECKPOINT_SCHEMA.field("remove").type


def _map_items(d: dict | None) -> list[tuple[str, Any]] | None:
    return None if d is None else list(d.items())


def _filled(t: pa.DataType, n: int) -> pa.Array:
    """``n`` non-null placeholder values of ``t`` (children of a null struct are never read, but
    Parquet refuses nulls in a non-nullable child)."""
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays([_filled(t.field(i).type, n)
                                           for i in range(t.num_fields)],
                                          fields=list(t))
    if pa.types.is_map(t):
        return pa.MapArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), _filled(t.key_type, 0),
                                       _filled(t.item_type, 0), type=t)
    if pa.types.is_list(t):
        return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)),
                                        _filled(t.value_type, 0), type=t)
    if pa.types.is_string(t):
        return pa.StringArray.from_buffers(n, pa.py_buffer(np.zeros(n + 1, np.int32).tobytes()),
                                           pa.py_buffer(b""))
    if pa.types.is_boolean(t):
        return pa.array(np.zeros(n, bool))
    return pa.array(np.zeros(n, np.int64)).cast(t)


def _absent(t: pa.DataType, n: int) -> pa.Array:
    """``n`` null rows of an action column."""
    if not pa.types.is_struct(t):
        return pa.nulls(n, t)
    return pa.StructArray.from_arrays([_filled(t.field(i).type, n) for i in range(t.num_fields)],
                                      fields=list(t), mask=pa.array(np.ones(n, bool)))


def _block(column: str, values: pa.StructArray, schema: pa.Schema) -> pa.Table:
    """Checkpoint rows holding ``values`` in ``column`` and nothing else."""
    n = len(values)
    return pa.table([values if f.name == column else _absent(f.type, n) for f in schema],
                    schema=schema)


def _struct(t: pa.Table, struct_type: pa.StructType) -> pa.StructArray:
    t = t.combine_chunks()
    return pa.StructArray.from_arrays([t.column(f.name).chunk(0) if t.num_rows
                                       else pa.array([], f.type) for f in struct_type],
                                      fields=list(struct_type))


def writes_v2_checkpoints(protocol: Protocol, metadata: Metadata) -> bool:
    """A table that asks for V2 checkpoints (``delta.checkpointPolicy=v2``) and has the feature."""
    cfg = {k.lower(): v for k, v in metadata.configuration.items()}
    return (cfg.get("delta.checkpointpolicy", "classic").lower() == "v2"
            and "v2Checkpoint" in (protocol.writer_features or []))


def write_checkpoint_table(
    protocol: Protocol,
    metadata: Metadata,
    files: pa.Table,
    tombstones: pa.Table,
    app_txns: dict[str, TxnAction],
    domains: dict[str, dict] | None = None,
    v2_version: int | None = None,
) -> tuple[bytes, int]:
    """The Parquet bytes of a checkpoint and its number of actions (rows). ``files`` and
    ``tombstones`` are tables in ``ADD_SCHEMA`` / ``REMOVE_SCHEMA`` (an ``ActionSet``'s table).
    ``v2_version``: a V2 spec checkpoint of that version (``checkpointMetadata`` first)."""
    schema = CHECKPOINT_SCHEMA if v2_version is None else V2_CHECKPOINT_SCHEMA
    rows: list[dict[str, Any]] = []
    if v2_version is not None:
        rows.append({"checkpointMetadata": {"version": v2_version, "tags": None}})
    p = protocol.to_json()
    rows.append({"protocol": {"minReaderVersion": p["minReaderVersion"],
                              "minWriterVersion": p["minWriterVersion"],
                              "readerFeatures": p.get("readerFeatures"),
                              "writerFeatures": p.get("writerFeatures")}})
    rows.append({"metaData": {
        "id": metadata.id, "name": metadata.name, "description": metadata.description,
        "format": {"provider": metadata.format_provider,
                   "options": list(metadata.format_options.items())},
        "schemaString": metadata.schema_string,
        "partitionColumns": list(metadata.partition_columns), "createdTime": metadata.created_time,
        "configuration": list(metadata.configuration.items()),
    }})
    for t in app_txns.values():
        rows.append({"txn": {"appId": t.app_id, "version": t.version,
                             "lastUpdated": t.last_updated}})
    for d in (domains or {}).values():
        rows.append({"domainMetadata": {"domain": d["domain"], "configuration": d["configuration"],
                                        "removed": bool(d.get("removed", False))}})
    head = pa.table({f.name: pa.array([row.get(f.name) for row in rows], f.type)
                     for f in schema},
                    schema=schema)
    files = conform_columns(files, ADD_SCHEMA)
    files = files.set_column(files.schema.get_field_index("dataChange"), "dataChange",
                             pa.array(np.zeros(files.num_rows, bool)))
    tombstones = conform_columns(tombstones, REMOVE_SCHEMA)
    tombstones = tombstones.set_column(tombstones.schema.get_field_index("dataChange"),
                                       "dataChange", pa.array(np.zeros(tombstones.num_rows, bool)))
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, schema, compression="snappy") as w:
        w.write_table(head)
        for column, t, st in (("add", files, _ADD_T), ("remove", tombstones, _REMOVE_T)):
            for start in range(0, t.num_rows, ROWS_PER_GROUP):
                w.write_table(_block(column, _struct(t.slice(start, ROWS_PER_GROUP), st), schema),
                              row_group_size=ROWS_PER_GROUP)
    return buf.getvalue(), head.num_rows + files.num_rows + tombstones.num_rows


def write_checkpoint_bytes(
    protocol: Protocol,
    metadata: Metadata,
    files: list[AddFile],
    tombstones: list[RemoveFile],
    app_txns: dict[str, TxnAction],
    domains: dict[str, dict] | None = None,
) -> tuple[bytes, int]:
    """``write_checkpoint_table`` for lists of actions."""
    return write_checkpoint_table(protocol, metadata,
                                  ActionTable.from_actions(files, AddFile).table,
                                  ActionTable.from_actions(tombstones, RemoveFile).table, app_txns,
                                  domains)


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
        self.adds: ActionTable[AddFile] = ActionTable.from_actions([], AddFile)
        self.removes: ActionTable[RemoveFile] = ActionTable.from_actions([], RemoveFile)
        self.txns: list[TxnAction] = []
        self.domains: list[dict] = []
        self.sidecars: list[str] = []  # V2: paths the ``sidecar`` actions name
        self.inline_adds: list[AddFile] = []  # V2 in JSON: file actions written in it
        self.inline_removes: list[RemoveFile] = []


def _leaf_index(pf: pq.ParquetFile, path: str) -> int | None:
    for i in range(pf.metadata.num_columns):
        if pf.metadata.schema.column(i).path == path:
            return i
    return None


def _groups_with(pf: pq.ParquetFile, leaf: str) -> list[int]:
    """Row groups where the action column whose required leaf is ``leaf`` may hold a row
    (all of them when the statistics cannot tell)."""
    ci = _leaf_index(pf, leaf)
    out = []
    for rg in range(pf.metadata.num_row_groups):
        meta = pf.metadata.row_group(rg)
        st = meta.column(ci).statistics if ci is not None else None
        if st is not None and st.has_null_count and st.null_count == meta.num_rows:
            continue
        out.append(rg)
    return out


def _read_rows(pf: pq.ParquetFile, column: str, leaf: str,
               fields: list[str] | None = None) -> pa.ChunkedArray | None:
    """The ``column`` struct over the row groups that may hold it (only ``fields`` of it)."""
    groups = _groups_with(pf, f"{column}.{leaf}")
    if not groups:
        return None
    if fields is None:
        cols = [column]
    else:
        t = pf.schema_arrow.field(column).type
        present = {t.field(i).name for i in range(t.num_fields)}
        cols = [f"{column}.{f}" for f in fields if f in present]
    return pf.read_row_groups(groups, columns=cols).column(column)


def _locate(pf: pq.ParquetFile, column: str, keys: tuple[str, ...], rows: LazyRows) -> int:
    """Record in ``rows`` which rows of each row group hold a ``column`` action, from the
    cheapest required field (its nulls are the action's nulls); returns how many."""
    t = pf.schema_arrow.field(column).type
    key = next((k for k in keys if t.get_field_index(k) >= 0), None)
    if key is None:
        return 0
    n = 0
    for rg in _groups_with(pf, f"{column}.{key}"):
        arr = pf.read_row_group(rg, columns=[f"{column}.{key}"]).column(column)
        n += rows.add(pf, rg,
                      pc.is_valid(arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)))
    return n


class _Parquet:
    """A ``ParquetFile`` whose arrow schema is converted once: pyarrow converts it again on
    every access, ~2 ms for a checkpoint's nested schema, several times per cold snapshot."""

    def __init__(self, pf: pq.ParquetFile) -> None:
        self._pf = pf
        self.schema_arrow = pf.schema_arrow

    def __getattr__(self, name: str):
        return getattr(self._pf, name)


def _small_actions(out: CheckpointContents, small: dict[str, pa.ChunkedArray | None]) -> None:
    """The non-file rows of a Parquet checkpoint into ``out`` (protocol, metaData, txn,
    domainMetadata, and the ``sidecar`` rows of a V2 one)."""
    for col, arr in small.items():
        if arr is None:
            continue
        for v in arr.to_pylist():
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
            elif col == "txn":
                out.txns.append(TxnAction.from_json(v))
            elif col == "domainMetadata":
                out.domains.append(v)
            elif col == "sidecar":
                out.sidecars.append(v["path"])


def _read_json_part(data: bytes, out: CheckpointContents, where: str) -> None:
    """A UUID-named V2 checkpoint in JSON: one action a line, as a commit is written."""
    c = Commit.from_bytes(data, where=where)
    out.protocol = c.protocol or out.protocol
    out.metadata = c.metadata or out.metadata
    out.txns.extend(c.txns)
    out.inline_adds.extend(c.adds)
    out.inline_removes.extend(c.removes)
    try:
        for o in c.other:
            if "domainMetadata" in o:
                out.domains.append(o["domainMetadata"])
            elif "sidecar" in o:
                out.sidecars.append(str(o["sidecar"]["path"]))
    except (KeyError, TypeError) as e:
        raise CorruptLogError(f"{where}: malformed sidecar action ({e})") from None


def _is_json(data: bytes) -> bool:
    return data[:4] != b"PAR1" and data.lstrip()[:1] == b"{"


def _with_inline(lazy: ActionTable[A], inline: list[A], kind: type[A]) -> ActionTable[A]:
    """A V2 checkpoint's rows: those of its sidecars (``lazy``) and those written in its JSON.
    The protocol puts them all in one place; both are kept if a writer mixed them."""
    if not inline:
        return lazy
    eager = ActionTable.from_actions(inline, kind)
    if not lazy.num_rows:
        return eager
    return ActionTable(pa.concat_tables([lazy.table, eager.table]), kind, conformed=True)


def _read_part(data: bytes, out: CheckpointContents, adds: LazyRows, removes: LazyRows,
               where: str, top: bool = True) -> tuple[int, int]:
    """One checkpoint file into ``out`` (``top``: the checkpoint itself, else a sidecar, which
    holds only file actions); returns how many add and remove rows it located."""
    if top and _is_json(data):
        _read_json_part(data, out, where)
        return 0, 0
    n_adds = n_removes = 0
    try:
        pf = _Parquet(pq.ParquetFile(pa.BufferReader(data)))
        names = set(pf.schema_arrow.names)
        small = {c: _read_rows(pf, c, leaf)
                 for c, leaf in (("protocol", "minReaderVersion"), ("metaData", "id"),
                                 ("txn", "appId"), ("domainMetadata", "domain"),
                                 ("sidecar", "path"))
                 if top and c in names}
        if "add" in names:
            n_adds = _locate(pf, "add", ("size", "modificationTime", "path"), adds)
        if "remove" in names:
            n_removes = _locate(pf, "remove", ("dataChange", "path"), removes)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError) as e:
        what = "checkpoint" if top else "checkpoint sidecar"
        raise CorruptLogError(f"{where} is not a readable Parquet {what}: {e}") from None
    try:
        _small_actions(out, small)
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptLogError(f"{where}: malformed action ({e})") from None
    return n_adds, n_removes


def read_checkpoint_bytes(parts: list[bytes], where: str = "checkpoint",
                          sidecars: Callable[[list[str]], list[bytes]] | None = None
                          ) -> CheckpointContents:
    """A checkpoint's contents: classic (one or several Parquet parts, V1 or V2 spec) or a
    UUID-named V2 one (Parquet or JSON). A V2 checkpoint's ``sidecar`` actions name Parquet
    files of add/remove rows; ``sidecars`` fetches them (by the names the actions give), and
    their rows join the checkpoint's own, located lazily like them."""
    out = CheckpointContents()
    adds, removes = LazyRows("add", ADD_SCHEMA), LazyRows("remove", REMOVE_SCHEMA)
    counts = [_read_part(data, out, adds, removes, where) for data in parts]
    if out.sidecars:
        if sidecars is None:
            raise CorruptLogError(f"{where} names sidecar files, which cannot be read here")
        counts += [_read_part(blob, out, adds, removes, where, top=False)
                   for blob in sidecars(list(out.sidecars))]
    n_adds, n_removes = sum(c[0] for c in counts), sum(c[1] for c in counts)
    out.adds = _with_inline(ActionTable(None, AddFile, lazy=adds, num_rows=n_adds),
                            out.inline_adds, AddFile)
    out.removes = _with_inline(ActionTable(None, RemoveFile, lazy=removes, num_rows=n_removes),
                               out.inline_removes, RemoveFile)
    return out


def last_checkpoint_json(version: int, size: int, size_in_bytes: int, num_add_files: int,
                         v2_name: str | None = None, now_ms: int = 0,
                         tags: dict[str, str] | None = None) -> bytes:
    """``_last_checkpoint``; ``v2_name`` names a UUID-named checkpoint (``v2Checkpoint``);
    ``tags``: Delta's string map for whatever else a writer tells (other clients ignore it)."""
    d: dict[str, Any] = {"version": version, "size": size, "sizeInBytes": size_in_bytes,
                         "numOfAddFiles": num_add_files}
    if v2_name is not None:
        d["v2Checkpoint"] = {"path": v2_name, "sizeInBytes": size_in_bytes,
                             "modificationTime": now_ms}
    if tags:
        d["tags"] = tags
    return json.dumps(d).encode()
