"""The one object-store interface every lakevilla component talks to.

Keys are ``/``-separated and relative to the store's root (the lake root). The
seven primitives are exactly what S3 offers, so that the local backend cannot
quietly provide something S3 lacks; ``delete_many`` is S3's DeleteObjects (a
``delete`` request that names up to 1,000 keys), Azure's blob batch (256), a loop of
deletes elsewhere. What a store's calls cost in requests it says itself
(``deletes_per_request``, ``suffix_read_kinds``), so that the wrappers count and slow every
request a call makes, on any store.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import StorageError
from .address import StoreAddress

# Request kinds, as counted by CountingStore and slowed by LatencyStore.
KINDS = ("get", "head", "put", "put_if_absent", "put_if_match", "delete", "list")
READ_KINDS = ("get", "head", "list")
WRITE_KINDS = ("put", "put_if_absent", "put_if_match", "delete")


class NotFound(Exception):
    """The key does not exist."""


class PreconditionFailed(Exception):
    """A conditional write lost: the key exists (put_if_absent) or its etag moved (put_if_match)."""


class TransientStoreError(StorageError):
    """A retryable failure (throttling, 5xx, connection reset)."""


@dataclass(frozen=True)
class ObjectMeta:
    key: str
    size: int
    etag: str | None = None
    last_modified: float | None = None


@dataclass(frozen=True)
class GetResult:
    data: bytes
    etag: str


@dataclass(frozen=True)
class ListPage:
    items: list[ObjectMeta]
    next_token: str | None


def slice_range(data: bytes, start: int, length: int | None) -> bytes:
    """What ``get_range`` returns for an object holding ``data``."""
    if start < 0:
        if length is not None:
            raise ValueError("a suffix range (negative start) takes no length")
        return data[max(len(data) + start, 0):]
    return data[start:] if length is None else data[start:start + length]


DELETE_BATCH = 1000  # keys per delete_many request: S3's limit for one DeleteObjects


class ObjectStore(ABC):
    """Abstract store; see module docstring. Implementations must be thread-safe."""

    root_uri: str = ""

    def address(self) -> StoreAddress | None:
        """How another process (a Spark executor) opens this store; None if it cannot."""
        return None

    @abstractmethod
    def get(self, key: str) -> GetResult: ...

    @abstractmethod
    def head(self, key: str) -> ObjectMeta: ...

    @abstractmethod
    def put(self, key: str, data: bytes) -> str:
        """Unconditional write; returns the new etag."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> str:
        """Create ``key`` only if it does not exist (``If-None-Match: *``)."""

    @abstractmethod
    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        """Overwrite ``key`` only if its current etag is ``etag`` (``If-Match``). A missing key
        is NotFound on S3 and locally; Azure and GCS answer such a write 412, and so does the
        store (PreconditionFailed): callers treat both as a lost race."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing key is not an error (as on S3)."""

    def delete_many(self, keys: list[str]) -> None:
        """Delete every key, in as few requests as the store allows (S3: one DeleteObjects per
        1,000 keys); missing keys are not an error. Here, and in a wrapper that does not pass
        it on as one request, one ``delete`` per key."""
        for key in keys:
            self.delete(key)

    def deletes_per_request(self) -> int:
        """Keys one request of ``delete_many`` deletes (S3: 1,000; 1 without a batch request)."""
        return DELETE_BATCH

    def suffix_read_kinds(self) -> tuple[str, ...]:
        """The requests a suffix range (``get_range`` with a negative start) takes: one GET, or
        a HEAD for the size first where the store has no suffix ranges (Azure)."""
        return ("get",)

    @abstractmethod
    def list_page(
        self,
        prefix: str,
        start_after: str | None = None,
        token: str | None = None,
        max_keys: int = 1000,
    ) -> ListPage:
        """One LIST request: keys under ``prefix`` in byte order, after ``start_after``."""

    def list(self, prefix: str, start_after: str | None = None,
             max_keys: int = 1000) -> Iterator[ObjectMeta]:
        """All keys under ``prefix``, paging as needed (one LIST request per page)."""
        token = None
        while True:
            page = self.list_page(prefix, start_after=start_after, token=token, max_keys=max_keys)
            yield from page.items
            if page.next_token is None:
                return
            token = page.next_token

    def get_range(self, key: str, start: int, length: int | None = None) -> bytes:
        """Part of an object: ``length`` bytes from ``start`` (None: to the end), or with a
        negative ``start`` its last ``-start`` bytes (an S3 suffix range). One GET request;
        backends override this default, which reads the whole object."""
        data = self.get(key).data
        return slice_range(data, start, length)

    def exists(self, key: str) -> bool:
        try:
            self.head(key)
            return True
        except NotFound:
            return False

    def root_exists(self) -> bool:
        """Whether the lake root exists, without creating it. Only a local folder can be
        missing as such; on S3 an empty prefix is an empty lake (a missing bucket fails the
        first request), so this asks nothing of the store and says True."""
        return True

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; optional."""


class PrefixedStore(ObjectStore):
    """A cloud store: a bucket (container) whose lake lives under ``prefix``, keys relative to
    it; opened elsewhere from its ``_address``."""

    prefix: str = ""
    _address: StoreAddress

    def address(self) -> StoreAddress:
        return self._address

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _rel(self, full: str) -> str:
        return full[len(self.prefix) + 1:] if self.prefix else full


def empty_range(start: int, length: int | None) -> bool:
    """Whether ``get_range(key, start, length)`` asks for nothing (and a suffix range, a
    negative start, for no length)."""
    if start < 0 and length is not None:
        raise ValueError("a suffix range (negative start) takes no length")
    return length is not None and length <= 0


class StoreWrapper(ObjectStore):
    """Delegates everything to ``inner``; wrappers override what they change."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.root_uri = inner.root_uri

    def address(self) -> StoreAddress | None:
        return self.inner.address()

    def get(self, key: str) -> GetResult:
        return self.inner.get(key)

    def head(self, key: str) -> ObjectMeta:
        return self.inner.head(key)

    def put(self, key: str, data: bytes) -> str:
        return self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> str:
        return self.inner.put_if_absent(key, data)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return self.inner.put_if_match(key, data, etag)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def deletes_per_request(self) -> int:
        return self.inner.deletes_per_request()

    def suffix_read_kinds(self) -> tuple[str, ...]:
        return self.inner.suffix_read_kinds()

    def list_page(self, prefix, start_after=None, token=None, max_keys=1000) -> ListPage:
        return self.inner.list_page(prefix, start_after=start_after, token=token, max_keys=max_keys)

    def get_range(self, key: str, start: int, length: int | None = None) -> bytes:
        return self.inner.get_range(key, start, length)

    def root_exists(self) -> bool:
        return self.inner.root_exists()

    def close(self) -> None:
        self.inner.close()
