"""Store wrappers: retries, request counting, fault injection, simulated latency.

They compose in any order around any store, e.g.
``CountingStore(LatencyStore(open_store(uri), S3_SAME_REGION))``.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import ReadOnlyLakeError, StorageError
from .address import StoreAddress
from .base import (
    GetResult,
    ListPage,
    NotFound,
    ObjectMeta,
    ObjectStore,
    PreconditionFailed,
    StoreWrapper,
    TransientStoreError,
)
from .latency import S3_SAME_REGION, LatencyProfile


class RetryingStore(StoreWrapper):
    """Retries transient failures with jittered exponential backoff.

    A conditional write whose first attempt timed out may have been applied; the
    retry then loses with PreconditionFailed against our own bytes. We resolve the
    ambiguity by reading the object back: identical bytes mean the write was ours
    (lakevilla's conditional payloads are unique: they carry ids and revisions).
    """

    def __init__(self, inner: ObjectStore, attempts: int = 6, base_delay: float = 0.05,
                 max_delay: float = 2.0) -> None:
        super().__init__(inner)
        self.attempts = attempts
        self.base_delay = base_delay
        self.max_delay = max_delay

    def _retry(self, fn: Callable, *args, ambiguous_data: bytes | None = None):
        delay = self.base_delay
        failed_once = False
        for attempt in range(self.attempts):
            try:
                return fn(*args)
            except TransientStoreError:
                failed_once = True
                if attempt == self.attempts - 1:
                    raise
                time.sleep(random.uniform(0, delay))  # backoff between real retries
                delay = min(delay * 2, self.max_delay)
            except PreconditionFailed:
                if failed_once and ambiguous_data is not None:
                    try:
                        got = self.inner.get(args[0])
                    except NotFound:
                        raise PreconditionFailed(args[0]) from None
                    if got.data == ambiguous_data:
                        return got.etag
                raise
        raise AssertionError("unreachable")

    def get(self, key):
        return self._retry(self.inner.get, key)

    def get_range(self, key, start, length=None):
        return self._retry(self.inner.get_range, key, start, length)

    def head(self, key):
        return self._retry(self.inner.head, key)

    def put(self, key, data):
        return self._retry(self.inner.put, key, data)

    def put_if_absent(self, key, data):
        return self._retry(self.inner.put_if_absent, key, data, ambiguous_data=data)

    def put_if_match(self, key, data, etag):
        return self._retry(self.inner.put_if_match, key, data, etag, ambiguous_data=data)

    def delete(self, key):
        return self._retry(self.inner.delete, key)

    def delete_many(self, keys):
        return self._retry(self.inner.delete_many, keys)  # idempotent: a retry deletes what is left

    def list_page(self, prefix, start_after=None, token=None, max_keys=1000):
        return self._retry(lambda: self.inner.list_page(prefix, start_after=start_after,
                                                        token=token, max_keys=max_keys))


class ReadOnlyStore(StoreWrapper):
    """Refuses every write before it is sent (``Lake(read_only=True)``): an auditor's client
    never changes the lake, whatever a bug above would try."""

    def address(self) -> StoreAddress | None:
        inner = self.inner.address()  # another process opens it read-only too
        return dataclasses.replace(inner, read_only=True) if inner is not None else None

    def _refuse(self, what: str, key: str) -> ReadOnlyLakeError:
        return ReadOnlyLakeError(f"this lake was opened read-only: {what} of {key!r} was not sent")

    def put(self, key, data):
        raise self._refuse("a write", key)

    def put_if_absent(self, key, data):
        raise self._refuse("a write", key)

    def put_if_match(self, key, data, etag):
        raise self._refuse("a write", key)

    def delete(self, key):
        raise self._refuse("a delete", key)

    def delete_many(self, keys):
        if keys:
            raise self._refuse("a delete", keys[0])


class CountingStore(StoreWrapper):
    """Counts requests by kind (``.counts``) and bytes moved; thread-safe."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.counts: Counter[str] = Counter()
        self.bytes_read = 0
        self.bytes_written = 0
        self._lock = threading.Lock()

    def _count(self, kind: str, key: str, rd: int = 0, wr: int = 0) -> None:
        with self._lock:
            self.counts[kind] += 1
            self.bytes_read += rd
            self.bytes_written += wr
            self._tally(kind, key)

    def _tally(self, kind: str, key: str) -> None:
        """Called under the lock once per request counted (a LIST: its prefix; a batch delete:
        its first key): where a subclass counts more than the kind."""

    def reset(self) -> Counter[str]:
        with self._lock:
            old = self.counts
            self.counts = Counter()
            self.bytes_read = self.bytes_written = 0
        return old

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)

    @property
    def reads(self) -> int:
        c = self.snapshot()
        return c["get"] + c["head"] + c["list"]

    @property
    def writes(self) -> int:
        c = self.snapshot()
        return c["put"] + c["put_if_absent"] + c["put_if_match"] + c["delete"]

    def get(self, key):
        try:
            r = self.inner.get(key)
        except BaseException:
            self._count("get", key)
            raise
        self._count("get", key, rd=len(r.data))
        return r

    def get_range(self, key, start, length=None):
        # a suffix read is a HEAD and a GET where the store has no suffix ranges (Azure)
        before = self.inner.suffix_read_kinds()[:-1] if start < 0 else ()
        for kind in before:
            self._count(kind, key)
        try:
            data = self.inner.get_range(key, start, length)
        except BaseException:
            self._count("get", key)
            raise
        self._count("get", key, rd=len(data))
        return data

    def head(self, key):
        self._count("head", key)
        return self.inner.head(key)

    def put(self, key, data):
        self._count("put", key, wr=len(data))
        return self.inner.put(key, data)

    def put_if_absent(self, key, data):
        self._count("put_if_absent", key, wr=len(data))
        return self.inner.put_if_absent(key, data)

    def put_if_match(self, key, data, etag):
        self._count("put_if_match", key, wr=len(data))
        return self.inner.put_if_match(key, data, etag)

    def delete(self, key):
        self._count("delete", key)
        return self.inner.delete(key)

    def delete_many(self, keys):
        # one request per batch, as the store sends them (S3: 1,000 keys; GCS: one each)
        for i in range(0, len(keys), self.inner.deletes_per_request()):
            self._count("delete", keys[i])
        return self.inner.delete_many(keys)

    def list_page(self, prefix, start_after=None, token=None, max_keys=1000):
        self._count("list", prefix)
        return self.inner.list_page(prefix, start_after=start_after, token=token, max_keys=max_keys)


class SimulatedCrash(BaseException):  # noqa: N818 - it models a process death, not an error
    """The client 'dies': raised at the planned call and at every call after it.

    A BaseException, like KeyboardInterrupt, so ordinary ``except Exception``
    clean-up code cannot swallow it and keep acting as a live client.
    """


@dataclass
class FaultPlan:
    """When to fail. Calls are numbered from 1 in the order they reach the wrapper.

    ``crash_before=n``: call n never happens; ``crash_after=n``: call n happens, then
    the client dies. ``transient``: call numbers that raise a retryable error instead
    of happening; ``transient_after``: ones that happen and still report a retryable
    error (a timeout after the server applied the write). ``fail_before``: calls that
    fail with a non-retryable ``StorageError`` and are not applied (a 403, a full disk);
    ``fail_after``: calls that are applied and then fail that way; ``exhaust_after``:
    calls that are applied and then fail with a retryable error, after which every
    request on that key fails too (the client's retries run out; the key stays
    unreachable for this client). ``kinds`` restricts which request kinds are numbered
    (None: all). ``predicate(kind, key)`` restricts further (e.g. only keys under a table).
    """

    crash_before: int | None = None
    crash_after: int | None = None
    transient: set[int] = field(default_factory=set)
    # the call happens, then reports a failure
    transient_after: set[int] = field(default_factory=set)
    fail_before: set[int] = field(default_factory=set)
    fail_after: set[int] = field(default_factory=set)
    exhaust_after: set[int] = field(default_factory=set)
    transient_rate: float = 0.0
    kinds: tuple[str, ...] | None = None
    predicate: Callable[[str, str], bool] | None = None
    seed: int = 0


class FaultInjectingStore(StoreWrapper):
    def __init__(self, inner: ObjectStore, plan: FaultPlan | None = None) -> None:
        super().__init__(inner)
        self.plan = plan or FaultPlan()
        self.calls = 0
        self.crashed = False
        self.log: list[tuple[int, str, str]] = []
        self.injected: list[tuple[int, str, str, str]] = []  # (call, fault, kind, key)
        self.unreachable: set[str] = set()
        self._rng = random.Random(self.plan.seed)
        self._lock = threading.Lock()

    def _around(self, kind: str, key: str, fn: Callable):
        with self._lock:
            if self.crashed:
                raise SimulatedCrash(f"client is dead (call {kind} {key})")
            if key in self.unreachable:
                raise TransientStoreError(f"injected: {key} is unreachable ({kind})")
            counted = (self.plan.kinds is None or kind in self.plan.kinds) and (
                self.plan.predicate is None or self.plan.predicate(kind, key)
            )
            n = 0
            if counted:
                self.calls += 1
                n = self.calls
                self.log.append((n, kind, key))
                if self.plan.crash_before is not None and n >= self.plan.crash_before:
                    self.crashed = True
                    raise SimulatedCrash(f"crash before call {n}: {kind} {key}")
                if n in self.plan.transient or (
                    self.plan.transient_rate and self._rng.random() < self.plan.transient_rate
                ):
                    raise TransientStoreError(f"injected transient error at call {n}: {kind} {key}")
                if n in self.plan.fail_before:
                    self.injected.append((n, "fail_before", kind, key))
                    raise StorageError(f"injected failure before call {n}: {kind} {key}")
        try:
            result = fn()
        except (NotFound, PreconditionFailed):
            if counted:
                self._after(n, kind, key)  # the reply (here a refusal) is lost just the same
            raise
        if counted:
            self._after(n, kind, key)
        if counted and self.plan.crash_after is not None and n >= self.plan.crash_after:
            with self._lock:
                self.crashed = True
            raise SimulatedCrash(f"crash after call {n}: {kind} {key}")
        return result

    def _after(self, n: int, kind: str, key: str) -> None:
        """Faults that hit after the request reached the store: the client loses the reply."""
        if n in self.plan.transient_after:
            raise TransientStoreError(f"injected ambiguous failure after call {n}: {kind} {key}")
        if n in self.plan.fail_after:
            with self._lock:
                self.injected.append((n, "fail_after", kind, key))
            raise StorageError(f"injected failure after call {n} was applied: {kind} {key}")
        if n in self.plan.exhaust_after:
            with self._lock:
                self.injected.append((n, "exhaust_after", kind, key))
                self.unreachable.add(key)
            raise TransientStoreError(f"injected failure after call {n} was applied; {key} "
                                      "stays unreachable")

    def get(self, key):
        return self._around("get", key, lambda: self.inner.get(key))

    def get_range(self, key, start, length=None):
        return self._around("get", key, lambda: self.inner.get_range(key, start, length))

    def head(self, key):
        return self._around("head", key, lambda: self.inner.head(key))

    def put(self, key, data):
        return self._around("put", key, lambda: self.inner.put(key, data))

    def put_if_absent(self, key, data):
        return self._around("put_if_absent", key, lambda: self.inner.put_if_absent(key, data))

    def put_if_match(self, key, data, etag):
        return self._around("put_if_match", key, lambda: self.inner.put_if_match(key, data, etag))

    def delete(self, key):
        return self._around("delete", key, lambda: self.inner.delete(key))

    def delete_many(self, keys):
        if not keys:
            return None
        # one call, one fate
        return self._around("delete", keys[0], lambda: self.inner.delete_many(keys))

    def list_page(self, prefix, start_after=None, token=None, max_keys=1000):
        return self._around(
            "list", prefix,
            lambda: self.inner.list_page(prefix, start_after=start_after, token=token,
                                         max_keys=max_keys),
        )


class LatencyStore(StoreWrapper):
    """Sleeps per request to simulate a remote store (the sleep is the simulation itself)."""

    def __init__(self, inner: ObjectStore, profile: LatencyProfile = S3_SAME_REGION,
                 seed: int = 0) -> None:
        super().__init__(inner)
        self.profile = profile
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def _wait(self, kind: str, nbytes: int = 0) -> None:
        with self._lock:
            d = self.profile.delay(kind, nbytes, self._rng)
        if d:
            time.sleep(d)

    def get(self, key) -> GetResult:
        try:
            r = self.inner.get(key)
        except NotFound:
            self._wait("get")  # a 404 is a round trip too (version probes end in one)
            raise
        self._wait("get", len(r.data))
        return r

    def get_range(self, key, start, length=None) -> bytes:
        for kind in self.inner.suffix_read_kinds()[:-1] if start < 0 else ():
            self._wait(kind)  # the HEAD before a suffix read where the store needs one (Azure)
        try:
            data = self.inner.get_range(key, start, length)
        except NotFound:
            self._wait("get")
            raise
        self._wait("get", len(data))
        return data

    def head(self, key) -> ObjectMeta:
        self._wait("head")
        return self.inner.head(key)

    def put(self, key, data):
        self._wait("put", len(data))
        return self.inner.put(key, data)

    def put_if_absent(self, key, data):
        self._wait("put_if_absent", len(data))
        return self.inner.put_if_absent(key, data)

    def put_if_match(self, key, data, etag):
        self._wait("put_if_match", len(data))
        return self.inner.put_if_match(key, data, etag)

    def delete(self, key):
        self._wait("delete")
        return self.inner.delete(key)

    def delete_many(self, keys):
        per = self.inner.deletes_per_request()
        for _ in range(0, len(keys), per):  # one round trip per batch request
            self._wait("delete")
        return self.inner.delete_many(keys)

    def list_page(self, prefix, start_after=None, token=None, max_keys=1000) -> ListPage:
        self._wait("list")
        return self.inner.list_page(prefix, start_after=start_after, token=token, max_keys=max_keys)
