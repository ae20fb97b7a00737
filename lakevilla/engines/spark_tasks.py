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
from .spark_names import ROW_BITS, ROW_MASK


def _runs(places: np.ndarray) -> Iterator[tuple[int, int]]:
    """(start, end) of each run of equal values in ``places`` (rows come file by file)."""
    if not len(places):
        return
    cuts = np.flatnonzero(places[1:] != places[:-1]) + 1
    yield from zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(places)].tolist(), strict=True)


@dataclass(frozen=True)
class LiveRows:
    """Row ids (``RID_COL``: a file's place, and the row's index in it) -> whether no deletion
    vector deletes the row: a scalar Arrow UDF over that one column, so the rows' other columns
    never pass through Python. Each file's DV is decoded once per worker (inline from its
    descriptor, else read from its DV file): the bitmaps stay on the executors, and no row is
    shuffled to be dropped."""

    address: StoreAddress | None
    table: str
    lake_uri: str
    dvs: dict[int, tuple[str, str]]  # a file's place -> (DV descriptor JSON, the file's path)

    def __call__(self, rids_arr: pa.Array) -> pa.Array:
        rids = rids_arr.to_numpy(zero_copy_only=False)
        keep = np.ones(len(rids), dtype=bool)
        places = rids >> ROW_BITS
        for lo, hi in _runs(places):
            deleted = self._deleted(int(places[lo]))
            if deleted is not None and len(deleted):
                keep[lo:hi] = ~np.isin(rids[lo:hi] & ROW_MASK, deleted)
        return pa.array(keep)

    def _deleted(self, place: int) -> np.ndarray | None:
        got = self.dvs.get(place)
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
    """Row ids (``RID_COL``) of the rows a statement deletes, sorted -> one row per file (by its
    place): its new DV (the old one's rows and these), inline when small, else in this task's
    DV file (one PUT per task, named by a fresh UUID so no other writer names it), the count of
    rows it newly deletes, and whether no row of the file is left."""

    address: StoreAddress | None
    table: str
    lake_uri: str
    files: dict[int, FileMarks]  # by the file's place

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        store = open_address(self.address) if self.address is not None else None
        uid = uuid.uuid4()
        blob = bytearray([dvs.FILE_FORMAT_VERSION])
        out: dict[str, list] = {"file": [], "dv": [], "hits": [], "all": []}
        current: int | None = None
        pending: list[np.ndarray] = []

        def close(place: int, parts: list[np.ndarray]) -> None:
            info = self.files[place]
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
            out["file"].append(place)
            out["dv"].append(desc)
            out["hits"].append(len(hit))
            out["all"].append(gone_all)

        for b in batches:
            rids = b.column(0).to_numpy()
            places = rids >> ROW_BITS
            for lo, hi in _runs(places):
                place = int(places[lo])
                if place != current:
                    if current is not None:
                        close(current, pending)
                    current, pending = place, []
                pending.append(rids[lo:hi] & ROW_MASK)
        if current is not None:
            close(current, pending)
        if len(blob) > 1:
            if store is None:
                raise RuntimeError(f"{self.table}: a deletion vector too large to inline needs "
                                   "the lake's store, which cannot be opened on an executor")
            store.put(f"{self.table}/{dvs.FILE_PREFIX}{uid}.bin", bytes(blob))
        yield pa.RecordBatch.from_pydict(out, schema=MARKS_SCHEMA)


MARKS_SCHEMA = pa.schema([("file", pa.int64()), ("dv", pa.string()), ("hits", pa.int64()),
                          ("all", pa.bool_())])
MARKS_DDL = "file long, dv string, hits long, all boolean"
