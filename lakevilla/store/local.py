"""Local-filesystem store with the same conditional-write semantics as S3.

* put_if_absent: the bytes go to a temp file, then ``os.link`` publishes it; link
  fails with EEXIST when the key exists, atomically, across processes.
* put_if_match: an exclusive ``flock`` on the current file's inode, a check that
  the path still names that inode, an etag comparison, then ``os.replace``.
  Readers never lock: rename makes them see the old or the new file, whole.
* etags are MD5 of the content, like single-part S3 PUTs, so a rewrite with
  different bytes always changes the etag.

Atomicity across processes comes from link/rename. Durability across power loss
needs ``fsync=True`` (about 5 ms per write here); it is off by default, as in
delta-rs and Hadoop's local file system, since a process crash loses nothing
either way.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import uuid
from urllib.parse import unquote, urlparse

from .base import GetResult, ListPage, NotFound, ObjectMeta, ObjectStore, PreconditionFailed

TMP_PREFIX = ".lv-tmp-"


def _etag(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def local_path_from_uri(uri: str) -> str:
    if uri.startswith("file://"):
        return unquote(urlparse(uri).path)
    return uri


class LocalStore(ObjectStore):
    def __init__(self, root: str, *, fsync: bool = False) -> None:
        path = os.path.abspath(local_path_from_uri(root))
        os.makedirs(path, exist_ok=True)
        self.fsync = fsync
        self.root = path
        self.root_uri = "file://" + path

    # -- helpers -------------------------------------------------------------
    def _path(self, key: str) -> str:
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"invalid key {key!r}")
        return os.path.join(self.root, *key.split("/"))

    def _write_tmp(self, path: str, data: bytes) -> str:
        d = os.path.dirname(path)
        tmp = os.path.join(d, f"{TMP_PREFIX}{uuid.uuid4().hex}")
        for _ in range(100):
            try:
                os.makedirs(d, exist_ok=True)
                f = open(tmp, "wb")  # noqa: SIM115 - closed below
                break
            except (FileNotFoundError, FileExistsError):
                # a concurrent delete pruned a (then empty) directory, possibly between
                # makedirs' own mkdir and its isdir check: make it again
                continue
        else:
            raise OSError(f"cannot create {d}")
        with f:
            f.write(data)
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        return tmp

    # -- interface -----------------------------------------------------------
    def get(self, key: str) -> GetResult:
        try:
            with open(self._path(key), "rb") as f:
                data = f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise NotFound(key) from None
        return GetResult(data, _etag(data))

    def get_range(self, key: str, start: int, length: int | None = None) -> bytes:
        if start < 0 and length is not None:
            raise ValueError("a suffix range (negative start) takes no length")
        try:
            with open(self._path(key), "rb") as f:
                if start < 0:
                    f.seek(max(os.fstat(f.fileno()).st_size + start, 0))
                else:
                    f.seek(start)
                return f.read() if length is None else f.read(length)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise NotFound(key) from None

    def head(self, key: str) -> ObjectMeta:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                digest = hashlib.md5(usedforsecurity=False)
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise NotFound(key) from None
        return ObjectMeta(key, st.st_size, digest.hexdigest(), st.st_mtime)

    def put(self, key: str, data: bytes) -> str:
        path = self._path(key)
        tmp = self._write_tmp(path, data)
        os.replace(tmp, path)
        return _etag(data)

    def put_if_absent(self, key: str, data: bytes) -> str:
        path = self._path(key)
        tmp = self._write_tmp(path, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise PreconditionFailed(key) from None
        finally:
            os.unlink(tmp)
        return _etag(data)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        path = self._path(key)
        while True:
            try:
                fd = os.open(path, os.O_RDONLY)
            except (FileNotFoundError, NotADirectoryError):
                raise NotFound(key) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    st_path = os.stat(path)
                except FileNotFoundError:
                    raise NotFound(key) from None
                if os.fstat(fd).st_ino != st_path.st_ino:
                    continue  # replaced while we waited for the lock: lock the new inode
                with open(path, "rb") as f:
                    current = _etag(f.read())
                if current != etag:
                    raise PreconditionFailed(key)
                tmp = self._write_tmp(path, data)
                os.replace(tmp, path)
                return _etag(data)
            finally:
                os.close(fd)  # closing releases the flock

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except (FileNotFoundError, IsADirectoryError):
            return
        # S3 has no directories: drop the ones this delete left empty (never the root)
        parent = os.path.dirname(path)
        while parent != self.root and parent.startswith(self.root):
            try:
                os.rmdir(parent)
            except OSError:
                break
            parent = os.path.dirname(parent)

    def list_page(self, prefix, start_after=None, token=None, max_keys=1000) -> ListPage:
        after = token if token is not None else start_after
        keys = sorted(self._iter_keys(prefix), key=lambda k: k.encode())
        if after is not None:
            a = after.encode()
            keys = [k for k in keys if k.encode() > a]
        page = keys[:max_keys]
        items = []
        for k in page:
            try:
                st = os.stat(self._path(k))
            except FileNotFoundError:
                continue
            items.append(ObjectMeta(k, st.st_size, None, st.st_mtime))
        next_token = page[-1] if len(keys) > max_keys else None
        return ListPage(items, next_token)

    def _iter_keys(self, prefix: str):
        # Walk only the deepest directory the prefix names, as S3 would match by string prefix.
        head, _, _ = prefix.rpartition("/")
        base = self._path(head) if head else self.root
        if not os.path.isdir(base):
            return
        for dirpath, dirnames, filenames in os.walk(base):
            rel_dir = os.path.relpath(dirpath, self.root)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
            # prune directories that cannot contain the prefix
            dirnames[:] = [
                d for d in dirnames
                if (rel_dir + d + "/").startswith(prefix) or prefix.startswith(rel_dir + d + "/")
            ]
            for name in filenames:
                if name.startswith(TMP_PREFIX):
                    continue
                key = rel_dir + name
                if key.startswith(prefix):
                    yield key


def is_local_uri(uri: str) -> bool:
    return uri.startswith("file://") or "://" not in uri


__all__ = ["LocalStore", "is_local_uri", "local_path_from_uri"]
