"""Deletion vectors: the descriptor an add carries, and the deleted row indices it names.

A deletion vector (DV) marks rows of a data file as deleted without rewriting it (Delta
PROTOCOL.md, "Deletion Vectors"). Its descriptor says where the bitmap lives: inline in the log
(``i``, Z85 text), in a file whose name is a Z85-encoded UUID under the table (``u``), or at an
absolute path (``p``). A stored DV is framed by a big-endian size and a CRC-32; the bitmap is a
magic number and a portable 64-bit RoaringBitmap, decoded by pyroaring. A damaged DV is a
``CorruptLogError``: returning rows a writer deleted would be silently wrong.

Every byte is read and written through the store layer (``ObjectStore.get_range``, ``put``),
so DV requests are counted, slowed and fault-injected like any other. ``build`` writes the DVs of
a statement: inline up to ``INLINE_MAX``, the larger ones in one new ``u`` file.
"""

from __future__ import annotations

import base64
import struct
import threading
import uuid
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import numpy as np
from pyroaring import BitMap64

from ..errors import CorruptLogError
from ..store import NotFound, ObjectStore

MAGIC = 1681511377  # little-endian, before the portable bitmap
# the older "native" RoaringBitmapArray format (big-endian magic; PROTOCOL.md's inline example):
# Delta writers use the portable one, delta-rs reads only that
NATIVE_MAGIC = 1681511376
FILE_FORMAT_VERSION = 1
FILE_PREFIX = "deletion_vector_"
_UUID_CHARS = 20  # a UUID's 16 bytes in Z85

# Z85 and Python's base85 differ only in which character stands for which digit
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_B85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
_TO_B85 = str.maketrans(_Z85, _B85)
_FROM_B85 = str.maketrans(_B85, _Z85)


def z85_decode(text: str) -> bytes:
    """The bytes of Z85 ``text`` (a multiple of 5 characters)."""
    if len(text) % 5 or any(c not in _Z85 for c in text):
        raise ValueError(f"not Z85 text: {text!r}")
    return base64.b85decode(text.translate(_TO_B85))


def z85_encode(data: bytes) -> str:
    """Z85 text of ``data``, padded with zero bytes to a multiple of 4 (as Delta pads; the
    descriptor's ``sizeInBytes`` keeps the unpadded length)."""
    data += b"\0" * (-len(data) % 4)
    return base64.b85encode(data).decode().translate(_FROM_B85)


# Deletion vectors we write are inline (in the log) up to this size; larger ones go to a DV file
# (one per statement and table, all its large DVs at their offsets, as Spark writes them).
INLINE_MAX = 8 * 1024


def encoded(rows: np.ndarray) -> tuple[bytes, int, int | None]:
    """A DV's bytes (magic number, portable bitmap) deleting ``rows`` (row indexes in the file,
    duplicates allowed): with its cardinality and largest row index."""
    bm = BitMap64(rows.astype(np.uint64))
    bm.run_optimize()
    return struct.pack("<I", MAGIC) + bm.serialize(), len(bm), int(bm.max()) if len(bm) else None


@dataclass(frozen=True)
class Built:
    """The DVs a statement marks (in the order asked), and the DV file it wrote for the large
    ones (its key under the store; None when all were inline)."""

    dvs: list[DeletionVector]
    file_key: str | None


def build(store: ObjectStore, table: str, rows: list[np.ndarray]) -> Built:
    """One DV per ``rows`` entry: inline when small, else in one new DV file of ``table`` (the
    format version byte, then per DV its big-endian size, bytes and CRC-32), written here with
    one PUT. The file is named by a fresh UUID, so no other writer ever names it."""
    out: list[DeletionVector] = []
    blob = bytearray([FILE_FORMAT_VERSION])
    uid = uuid.uuid4()
    for r in rows:
        raw, card, top = encoded(r)
        if len(raw) <= INLINE_MAX:
            out.append(DeletionVector("i", z85_encode(raw), len(raw), card, max_row_index=top))
            continue
        out.append(DeletionVector("u", z85_encode(uid.bytes), len(raw), card, offset=len(blob),
                                  max_row_index=top))
        blob += struct.pack(">i", len(raw)) + raw + struct.pack(">I", zlib.crc32(raw))
    if len(blob) == 1:
        return Built(out, None)
    key = f"{table}/{FILE_PREFIX}{uid}.bin"
    store.put(key, bytes(blob))
    return Built(out, key)


@dataclass(frozen=True)
class DeletionVector:
    """A DV descriptor (the ``deletionVector`` of an add or remove), exactly as logged."""

    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None
    max_row_index: int | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"storageType": self.storage_type,
                             "pathOrInlineDv": self.path_or_inline_dv}
        if self.offset is not None:
            d["offset"] = self.offset
        d["sizeInBytes"] = self.size_in_bytes
        d["cardinality"] = self.cardinality
        if self.max_row_index is not None:
            d["maxRowIndex"] = self.max_row_index
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DeletionVector:
        st = d["storageType"]
        if st not in ("u", "i", "p"):
            raise ValueError(f"unknown deletion vector storageType {st!r}")
        return cls(storage_type=st, path_or_inline_dv=str(d["pathOrInlineDv"]),
                   size_in_bytes=int(d["sizeInBytes"]), cardinality=int(d["cardinality"]),
                   offset=int(d["offset"]) if d.get("offset") is not None else None,
                   max_row_index=(int(d["maxRowIndex"]) if d.get("maxRowIndex") is not None
                                  else None))

    @property
    def unique_id(self) -> str:
        """With the file's path, the key of a logical file in Delta's replay."""
        base = f"{self.storage_type}{self.path_or_inline_dv}"
        return base if self.offset is None else f"{base}@{self.offset}"

    def relative_file(self) -> str | None:
        """For ``u``: the DV file's path under the table root (``<prefix>/deletion_vector_
        <uuid>.bin``); None for the other storage types."""
        if self.storage_type != "u":
            return None
        encoded = self.path_or_inline_dv
        if len(encoded) < _UUID_CHARS:
            raise ValueError(f"deletion vector path {encoded!r} is shorter than a UUID")
        prefix, code = encoded[:-_UUID_CHARS], encoded[-_UUID_CHARS:]
        name = f"{FILE_PREFIX}{uuid.UUID(bytes=z85_decode(code))}.bin"
        return f"{prefix}/{name}" if prefix else name


def is_dv_file(path: str) -> bool:
    """Whether ``path`` (under a table) names a deletion vector file."""
    name = path.rsplit("/", 1)[-1]
    return name.startswith(FILE_PREFIX) and name.endswith(".bin")


def file_key(table: str, dv: DeletionVector, lake_uri: str) -> str | None:
    """The store key of the file holding ``dv`` (None when it is inline)."""
    if dv.storage_type == "i":
        return None
    if dv.storage_type == "u":
        return f"{table}/{dv.relative_file()}"
    path = dv.path_or_inline_dv
    if "://" not in path:
        return f"{table}/{unquote(path)}"
    root = lake_uri.rstrip("/") + "/"
    if not path.startswith(root):
        raise ValueError(f"deletion vector {path!r} lies outside the lake root {lake_uri!r}")
    return unquote(path[len(root):])


def _bitmap(data: bytes, where: str) -> BitMap64:
    if len(data) >= 4 and struct.unpack_from(">I", data)[0] == NATIVE_MAGIC:
        raise CorruptLogError(f"{where}: the deletion vector uses the legacy native bitmap "
                              "format, which lakevilla does not read (delta-rs neither)")
    if len(data) < 4 or struct.unpack_from("<I", data)[0] != MAGIC:
        raise CorruptLogError(f"{where}: not a deletion vector (bad magic number)")
    try:
        return BitMap64.deserialize(data[4:])
    except (ValueError, OverflowError) as e:
        raise CorruptLogError(f"{where}: the deletion vector's bitmap is damaged ({e})") from None


def _stored(store: ObjectStore, key: str, dv: DeletionVector, where: str) -> bytes:
    """The bitmap bytes of a DV kept in a file, its frame and checksum checked (and the file's
    format version, when the DV is the first in the file: the same GET, one byte longer)."""
    start = dv.offset or 0
    head = 1 if start == 1 else 0
    try:
        framed = store.get_range(key, start - head, dv.size_in_bytes + 8 + head)
    except NotFound:
        raise CorruptLogError(f"{where}: deletion vector file {key!r} is missing") from None
    if len(framed) != dv.size_in_bytes + 8 + head:
        raise CorruptLogError(f"{where}: deletion vector file {key!r} ends early")
    if head and framed[0] != FILE_FORMAT_VERSION:
        raise CorruptLogError(f"{where}: deletion vector file {key!r} has format version "
                              f"{framed[0]}, lakevilla reads version {FILE_FORMAT_VERSION}")
    framed = framed[head:]
    size, = struct.unpack_from(">i", framed)
    if size != dv.size_in_bytes:
        raise CorruptLogError(f"{where}: deletion vector in {key!r} at {start} holds {size} "
                              f"bytes, the log says {dv.size_in_bytes}")
    data = framed[4:4 + size]
    crc, = struct.unpack_from(">I", framed, 4 + size)
    if zlib.crc32(data) != crc:
        raise CorruptLogError(f"{where}: deletion vector in {key!r} at {start} fails its "
                              "checksum")
    return data


# Decoded DVs by (lake, table, unique id): a DV never changes once logged (its file is named by
# a UUID), and a statement reads a file's DV where it reads the file's rows and again where it
# marks more of them; a stored DV costs a GET each time without this.
_DECODED: OrderedDict[tuple[str, str, str], np.ndarray] = OrderedDict()
_DECODED_LOCK = threading.Lock()
_DECODED_MAX = 128
_DECODED_ROWS_MAX = 1 << 20  # larger DVs are decoded each time rather than held


def deleted_rows(store: ObjectStore, table: str, lake_uri: str, dv: DeletionVector,
                 path: str = "") -> np.ndarray:
    """The sorted row indices (within the data file ``path``) that ``dv`` deletes (read-only)."""
    key = (lake_uri, table, dv.unique_id)
    with _DECODED_LOCK:
        rows = _DECODED.get(key)
        if rows is not None:
            _DECODED.move_to_end(key)
            return rows
    rows = _decode(store, table, lake_uri, dv, path)
    rows.setflags(write=False)
    if len(rows) <= _DECODED_ROWS_MAX:
        with _DECODED_LOCK:
            _DECODED[key] = rows
            while len(_DECODED) > _DECODED_MAX:
                _DECODED.popitem(last=False)
    return rows


def _decode(store: ObjectStore, table: str, lake_uri: str, dv: DeletionVector,
            path: str) -> np.ndarray:
    where = f"table {table!r}: file {path!r}"
    if dv.storage_type == "i":
        try:
            data = z85_decode(dv.path_or_inline_dv)[:dv.size_in_bytes]
        except ValueError as e:
            raise CorruptLogError(f"{where}: inline deletion vector is damaged ({e})") from None
    else:
        try:
            key = file_key(table, dv, lake_uri)
        except ValueError as e:
            raise CorruptLogError(f"{where}: {e}") from None
        assert key is not None
        data = _stored(store, key, dv, where)
    bitmap = _bitmap(data, where)
    if len(bitmap) != dv.cardinality:
        raise CorruptLogError(f"{where}: deletion vector holds {len(bitmap)} rows, the log "
                              f"says {dv.cardinality}")
    return np.frombuffer(bitmap.to_array(), dtype=np.uint64).astype(np.int64)


def live_mask(num_rows: int, deleted: np.ndarray, where: str = "") -> np.ndarray:
    """A boolean mask over a file's ``num_rows`` rows: False where ``deleted`` names it."""
    if len(deleted) and int(deleted[-1]) >= num_rows:
        raise CorruptLogError(f"{where}: deletion vector names row {int(deleted[-1])} of a "
                              f"file of {num_rows} rows")
    mask = np.ones(num_rows, dtype=bool)
    mask[deleted] = False
    return mask
