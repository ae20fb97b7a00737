"""Work the Spark engine ships to executors as Python code: what only our code can do with rows
(decode and build deletion vectors), run where the rows are.

Each task is a frozen dataclass called by ``mapInArrow``: its fields are what the driver
knows (the store's address, O(files) descriptors), pickled with the task; its input and output
are Arrow batches. A task opens the lake's store itself (``StoreAddress.open``), so every byte
it reads or writes goes through lakevilla's store layer. Nothing here imports pyspark: the
tasks run in Spark's Python workers.
"""

from __future__ import annotations

import json
import struct
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyroaring import BitMap64

from ..delta import deletion_vectors as dvs
from ..store import open_address
from ..store.address import StoreAddress
from .spark_paths import key_in

FILE_COL = "__lv_file"
ROW_COL = "__lv_ri"


@dataclass(frozen=True)
class LiveRows:
    """(file as Spark names it, row index in the file) -> whether no deletion vector deletes the
    row: a scalar Arrow UDF over those two columns only, so the rows' other columns never pass
    through Python. Each file's DV is decoded once per worker (inline from its descriptor, else
    read from its DV file): the bitmaps stay on the executors, and no row is shuffled to be
    dropped."""

    address: StoreAddress | None
    table: str
    lake_uri: str
    dvs: dict[str, tuple[str, str]]  # store key -> (DV descriptor JSON, the file's path)

    def __call__(self, names_arr: pa.Array, rows_arr: pa.Array) -> pa.Array:
        names = names_arr.to_numpy(zero_copy_only=False)
        rows = rows_arr.to_numpy(zero_copy_only=False)
        keep = np.ones(len(names), dtype=bool)
        if not len(names):
            return pa.array(keep)
        cuts = np.flatnonzero(names[1:] != names[:-1]) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(names)], strict=True):
            deleted = self._deleted(names[lo])
            if deleted is not None and len(deleted):
                keep[lo:hi] = ~np.isin(rows[lo:hi], deleted)
        return pa.array(keep)

    def _deleted(self, name: str) -> np.ndarray | None:
        got = self.dvs.get(key_in(self.lake_uri, name))
        if got is None:
            return None
        dv = dvs.DeletionVector.from_json(json.loads(got[0]))
        store = open_address(self.address) if self.address is not None else None
        if dv.storage_type != "i" and store is None:
            raise RuntimeError(f"{self.table}: the deletion vector of {got[1]} is in a file and "
                               "this lake's store cannot be opened on an executor")
        # decoded once per process (deletion_vectors keeps the recent ones)
        return dvs.deleted_rows(store, self.table, self.lake_uri, dv, got[1])  # type: ignore[arg-type]


@dataclass(frozen=True)
class FileMarks:
    """What the driver knows of a file a statement marks rows of."""

    path: str
    rows: int | None  # its physical rows (None: the statistics do not say)
    dv: str | None  # its current DV descriptor (JSON), None without one


@dataclass(frozen=True)
class BuildDeletionVectors:
    """(file, row index) of the rows a statement deletes, sorted by file -> one row per file (by
    its store key):
    its new DV (the old one's rows and these), inline when small, else in this task's DV file
    (one PUT per task, named by a fresh UUID so no other writer names it), the count of rows it
    newly deletes, and whether no row of the file is left."""

    address: StoreAddress | None
    table: str
    lake_uri: str
    files: dict[str, FileMarks]  # by the file's store key

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        store = open_address(self.address) if self.address is not None else None
        uid = uuid.uuid4()
        blob = bytearray([dvs.FILE_FORMAT_VERSION])
        out: dict[str, list] = {"file": [], "dv": [], "hits": [], "all": []}
        current: str | None = None
        pending: list[np.ndarray] = []

        def close(name: str, parts: list[np.ndarray]) -> None:
            key = key_in(self.lake_uri, name)
            info = self.files[key]
            hit = np.unique(np.concatenate(parts))
            bm = BitMap64(hit.astype(np.uint64))
            if info.dv is not None:
                old = dvs.DeletionVector.from_json(json.loads(info.dv))
                bm |= BitMap64(dvs.deleted_rows(store, self.table, self.lake_uri,  # type: ignore[arg-type]
                                                old, info.path).astype(np.uint64))
            bm.run_optimize()
            gone_all = info.rows is not None and len(bm) >= info.rows
            desc = None
            if not gone_all:
                raw = struct.pack("<I", dvs.MAGIC) + bm.serialize()
                top = int(bm.max())
                if len(raw) <= dvs.INLINE_MAX:
                    dv = dvs.DeletionVector("i", dvs.z85_encode(raw), len(raw), len(bm),
                                            max_row_index=top)
                else:
                    dv = dvs.DeletionVector("u", dvs.z85_encode(uid.bytes), len(raw), len(bm),
                                            offset=len(blob), max_row_index=top)
                    blob.extend(struct.pack(">i", len(raw)) + raw
                                + struct.pack(">I", zlib.crc32(raw)))
                desc = json.dumps(dv.to_json())
            out["file"].append(key)
            out["dv"].append(desc)
            out["hits"].append(len(hit))
            out["all"].append(gone_all)

        for b in batches:
            names = b.column(0).to_numpy(zero_copy_only=False)
            rows = b.column(1).to_numpy()
            if not len(names):
                continue
            cuts = np.flatnonzero(names[1:] != names[:-1]) + 1
            for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(names)], strict=True):
                name = names[lo]
                if name != current:
                    if current is not None:
                        close(current, pending)
                    current, pending = name, []
                pending.append(rows[lo:hi])
        if current is not None:
            close(current, pending)
        if len(blob) > 1:
            if store is None:
                raise RuntimeError(f"{self.table}: a deletion vector too large to inline needs "
                                   "the lake's store, which cannot be opened on an executor")
            store.put(f"{self.table}/{dvs.FILE_PREFIX}{uid}.bin", bytes(blob))
        yield pa.RecordBatch.from_pydict(out, schema=MARKS_SCHEMA)


MARKS_SCHEMA = pa.schema([("file", pa.string()), ("dv", pa.string()), ("hits", pa.int64()),
                          ("all", pa.bool_())])
MARKS_DDL = "file string, dv string, hits long, all boolean"
