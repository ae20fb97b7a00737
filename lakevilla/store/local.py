"""Local-filesystem store with the same conditional-write semantics as S3.

* put_if_absent: the bytes go to a temp file, then ``os.link`` publishes it; link
  fails with EEXIST when the key exists, atomically, across processes.
* put_if_match: an exclusive ``flock`` on the current file's inode, a check that
  the path still names that inode, an etag comparison, then ``os.replace``.
  Readers never lock: rename makes them see the old or the new file, whole.
* etags are MD5 of the content, like single-part S3 PUTs, so a rewrite with
  different bytes always changes the etag.
* LIST answers as S3 does (keys under a string prefix, after ``start_after``, in UTF-8
  byte order) by reading only the folders that can hold such keys, comparing names before
  it builds any key: a snapshot's refresh lists a long log from its newest known version,
  and that must cost one pass over the folder's names, not a sort of every key in it.

The root folder is created by the first write, never by opening the store: looking at a lake
that does not exist must not make one. Operating-system failures other than "not found"
(a read-only file system, a folder this process may not write, a file where a folder should
be) become ``StorageError`` / ``StoragePermissionError`` naming the key and the cause.

Atomicity across processes comes from link/rename. Durability across power loss
needs ``fsync=True`` (about 5 ms per write here); it is off by default, as in
delta-rs and Hadoop's local file system, since a process crash loses nothing
either way.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import heapq
import os
import stat
import uuid
from collections.abc import Callable
from typing import Any, TypeVar, cast
from urllib.parse import unquote, urlparse

from ..errors import StorageError, StoragePermissionError
from .address import StoreAddress
from .base import GetResult, ListPage, NotFound, ObjectMeta, ObjectStore, PreconditionFailed

TMP_PREFIX = ".lv-tmp-"


def _etag(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def local_path_from_uri(uri: str) -> str:
    if uri.startswith("file://"):
        return unquote(urlparse(uri).path)
    return uri


_DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)
F = TypeVar("F", bound=Callable[..., Any])


def storage_error(e: OSError, action: str, key: str) -> StorageError:
    """``e`` (an OS failure of ``action`` on ``key``) as the lakevilla error a user can act on."""
    what = f"cannot {action} {key!r}: {e.strerror or e}"
    if e.filename:
        what += f" ({e.filename})"
    if isinstance(e, PermissionError) or e.errno in _DENIED:
        return StoragePermissionError(what + "; the lake needs a folder this process may write")
    return StorageError(what)


def _os_errors(action: str) -> Callable[[F], F]:
    """Methods whose OS failures (other than the NotFound they report themselves) are mapped."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(self: LocalStore, key: str, *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(self, key, *args, **kwargs)
            except OSError as e:
                raise storage_error(e, action, key) from e
        return cast(F, inner)  # functools.wraps keeps fn's signature; mypy cannot see that
    return wrap


def non_folder(path: str) -> str | None:
    """The first existing ancestor of ``path`` (itself included) that is not a folder, if any:
    what stops a folder from being made there."""
    p = path
    while True:
        try:  # one stat: a folder pruned between two checks must not look like a file
            return None if stat.S_ISDIR(os.stat(p).st_mode) else p
        except (FileNotFoundError, NotADirectoryError):  # absent, or below a file: look up
            pass
        parent = os.path.dirname(p)
        if parent == p:
            return None
        p = parent


class LocalStore(ObjectStore):
    def __init__(self, root: str, *, fsync: bool = False) -> None:
        path = os.path.abspath(local_path_from_uri(root))
        blocker = non_folder(path)
        if blocker is not None:
            raise StorageError(f"the lake root {path} is a file, not a folder" if blocker == path
                               else f"the lake root {path} cannot be a folder: {blocker} is a file")
        self.fsync = fsync
        self.root = path
        self.root_uri = "file://" + path

    def root_exists(self) -> bool:
        return os.path.isdir(self.root)

    def address(self) -> StoreAddress:
        return StoreAddress(self.root_uri)

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
            except (FileNotFoundError, FileExistsError, NotADirectoryError) as e:
                blocker = non_folder(d)
                if blocker is not None:
                    key = os.path.relpath(path, self.root)
                    raise StorageError(f"cannot write {key!r}: {blocker} is a file, "
                                       "not a folder") from e
                # a concurrent delete pruned a (then empty) directory, possibly between
                # makedirs' own mkdir and its isdir check: make it again
                continue
        else:
            raise StorageError(f"cannot create the folder {d}: it keeps disappearing")
        with f:
            f.write(data)
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        return tmp

    # -- interface -----------------------------------------------------------
    @_os_errors("read")
    def get(self, key: str) -> GetResult:
        try:
            with open(self._path(key), "rb") as f:
                data = f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise NotFound(key) from None
        return GetResult(data, _etag(data))

    @_os_errors("read")
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

    @_os_errors("read")
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

    @_os_errors("write")
    def put(self, key: str, data: bytes) -> str:
        path = self._path(key)
        tmp = self._write_tmp(path, data)
        os.replace(tmp, path)
        return _etag(data)

    @_os_errors("write")
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

    @_os_errors("write")
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

    @_os_errors("delete")
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

    @_os_errors("list")
    def list_page(self, prefix, start_after=None, token=None, max_keys=1000) -> ListPage:
        after = token if token is not None else start_after
        keys = self._keys_after(prefix, after)
        more = len(keys) > max_keys
        # code point order is UTF-8 byte order (S3's), so the strings sort as they are
        page = heapq.nsmallest(max_keys, keys) if more else sorted(keys)
        items = []
        for k in page:
            try:
                st = os.stat(self._path(k))
            except FileNotFoundError:
                continue
            items.append(ObjectMeta(k, st.st_size, None, st.st_mtime))
        return ListPage(items, page[-1] if more else None)

    def _keys_after(self, prefix: str, after: str | None) -> list[str]:
        """The keys under ``prefix`` that sort after ``after``, unsorted. Only the deepest folder
        the prefix names is read, as S3 matches by string prefix, and names are compared before
        any key is built: a LIST from a recent version of a long log (the usual snapshot
        refresh) costs one pass over the folder's names, not a sort of every key in it."""
        head, _, partial = prefix.rpartition("/")
        if head and {"", "."} & set(head.split("/")):
            return []  # a folder no key can name (the file system folds '//' and '/./')
        rel = head + "/" if head else ""
        if after is not None and not after.startswith(rel):
            if after > rel:
                return []  # it sorts past every key in the folder, at a character both have
            after = None  # every key in the folder sorts after it
        out: list[str] = []
        self._collect(self._path(head) if head else self.root, rel, partial, after, out)
        return out

    def _collect(self, path: str, rel: str, partial: str, after: str | None,
                 out: list[str]) -> None:
        """Keys in the folder ``path`` (key prefix ``rel``) whose names start with ``partial``
        and that sort after ``after`` (None: every one), into ``out``. With ``after``, the names
        are compared as the folder lists them (``os.listdir``, no call per name), and only
        those that pass are looked at: only they can be folders whose keys count."""
        # ``after`` is rel + a (a caller passes it only so): a name's key sorts after it when the
        # name does, and so do all the keys of a folder whose name does
        a = after[len(rel):] if after is not None else None
        if a is not None:
            try:
                names = os.listdir(path)
            except (FileNotFoundError, NotADirectoryError):
                return
            picked = [n for n in names if n > a and n.startswith(partial)]
            # a folder whose name sorts at or before ``a`` still holds later keys if it holds
            # ``after`` itself, or if its name is ``a`` cut before a character that sorts before
            # '/' ('.', '-', ...): "0/x" sorts after "0.json"
            first = a.partition("/")[0]  # the name here that ``after`` lies under, or is
            picked += [c for i, ch in enumerate(first + "/") if ch <= "/" and (c := first[:i])
                       and c.startswith(partial) and os.path.isdir(os.path.join(path, c))]
            if len(picked) <= _STAT_EACH_UP_TO:
                for n in dict.fromkeys(picked):  # the folder holding ``after`` may come twice
                    self._take(path, rel, n, _kind(os.path.join(path, n)), a, after, out)
                return
        try:
            with os.scandir(path) as it:  # every name (or most): their types come with them
                entries = list(it)
        except (FileNotFoundError, NotADirectoryError):
            return
        for e in entries:
            n = e.name
            if not n.startswith(partial):
                continue
            if a is not None and n <= a:
                if not a.startswith(n):
                    continue  # it sorts before ``after`` at a character both have, as all in it
                if not e.is_dir() or (n + "/" <= a and not a.startswith(n + "/")):
                    continue  # a file that is ``a`` or sorts before it; see above for folders
            kind = ((None if e.is_symlink() else "folder") if e.is_dir() else "file")
            self._take(path, rel, n, kind, a, after, out)

    def _take(self, path: str, rel: str, name: str, kind: str | None, a: str | None,
              after: str | None, out: list[str]) -> None:
        """A name that passed: a file's key, or a folder's keys after ``after``."""
        if name.startswith(TMP_PREFIX):
            return
        if kind == "file":
            out.append(rel + name)
        elif kind == "folder":
            sub = name + "/"
            self._collect(os.path.join(path, name), rel + sub, "",
                          after if a is not None and a.startswith(sub) else None, out)


_STAT_EACH_UP_TO = 64  # passing names looked at by a stat each; more: the folder's own types


def _kind(path: str) -> str | None:
    """'file', 'folder' or None (gone, or a link to a folder, which is not followed: os.walk's
    default)."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return None if os.path.isdir(path) else "file" if os.path.exists(path) else None
    except FileNotFoundError:
        return None
    return "folder" if stat.S_ISDIR(st.st_mode) else "file"


def is_local_uri(uri: str) -> bool:
    return uri.startswith("file://") or "://" not in uri


__all__ = ["LocalStore", "is_local_uri", "local_path_from_uri"]
