"""A read-only pyarrow file system over lakevilla's object store.

pyarrow's dataset layer reads Parquet footers and column chunks by ranged reads
(coalesced, in parallel on its I/O threads); here every one of them is a
``store.get_range``, so data reads are counted, slowed and fault-injected like
every other request. File sizes come from the add actions (no HEAD). A file small
enough that one GET costs no more than a round trip is fetched whole on its first
read and served from memory.

A missing file raises ``MissingDataFile`` (a ``FileNotFoundError``); any exception of
the store (a ``SimulatedCrash`` included) reaches the caller of the scan unchanged.
"""

from __future__ import annotations

import io
import threading
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from ..store import NotFound, ObjectStore

# one GET of a file this small costs about what a ranged read costs (a round trip)
WHOLE_FILE_BYTES = 1 << 20


class MissingDataFile(FileNotFoundError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class StoreFile(io.RawIOBase):
    """Random access to one object by ranged GETs."""

    def __init__(self, store: ObjectStore, key: str, size: int) -> None:
        super().__init__()
        self.store, self.key, self._size, self.pos = store, key, size, 0
        self._whole: bytes | None = None
        self._lock = threading.Lock()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = 0 if whence == 0 else self.pos if whence == 1 else self._size
        self.pos = max(0, base + offset)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def size(self) -> int:
        return self._size

    def _range(self, start: int, length: int) -> bytes:
        if length <= 0 or start >= self._size:
            return b""
        try:
            if self._size <= WHOLE_FILE_BYTES:
                with self._lock:
                    if self._whole is None:
                        self._whole = self.store.get_range(self.key, 0)
                return self._whole[start:start + length]
            return self.store.get_range(self.key, start, min(length, self._size - start))
        except NotFound:
            raise MissingDataFile(self.key) from None

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self._size - self.pos
        data = self._range(self.pos, n)
        self.pos += len(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def read_at(self, n: int, offset: int) -> bytes:  # pyarrow uses it for random-access reads
        return self._range(offset, n)


class _Handler(pafs.FileSystemHandler):
    def __init__(self, store: ObjectStore, sizes: dict[str, int]) -> None:
        self.store, self.sizes = store, sizes

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def get_type_name(self) -> str:
        return "lakevilla-store"

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        out = []
        for p in paths:
            size = self.sizes.get(p)
            if size is None:
                try:
                    size = self.store.head(p).size
                except NotFound:
                    out.append(pafs.FileInfo(p, pafs.FileType.NotFound))
                    continue
                self.sizes[p] = size
            out.append(pafs.FileInfo(p, pafs.FileType.File, size=size))
        return out

    def _open(self, path: str) -> pa.PythonFile:
        size = self.sizes.get(path)
        if size is None:
            size = self.get_file_info([path])[0].size
            if size is None:
                raise MissingDataFile(path)
        return pa.PythonFile(StoreFile(self.store, path, size), mode="r")

    def open_input_file(self, path: str) -> pa.PythonFile:
        return self._open(path)

    def open_input_stream(self, path: str) -> pa.PythonFile:
        return self._open(path)

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("lakevilla's store file system is read-only")

    get_file_info_selector = create_dir = delete_dir = delete_dir_contents = _read_only
    delete_root_dir_contents = delete_file = move = copy_file = _read_only
    open_output_stream = open_append_stream = _read_only


def store_filesystem(store: ObjectStore, sizes: dict[str, int]) -> pafs.PyFileSystem:
    """A pyarrow file system whose paths are store keys of known ``sizes``."""
    return pafs.PyFileSystem(_Handler(store, dict(sizes)))
