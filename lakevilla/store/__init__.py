"""Object-store layer: every request lakevilla makes goes through here."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from ..errors import InvalidArgumentError
from .address import StoreAddress
from .base import (
    KINDS,
    READ_KINDS,
    WRITE_KINDS,
    GetResult,
    ListPage,
    NotFound,
    ObjectMeta,
    ObjectStore,
    PreconditionFailed,
    StoreWrapper,
    TransientStoreError,
)
from .local import LocalStore, is_local_uri
from .settle import OutcomeUnknown, settle_create, settle_replace
from .wrappers import (
    S3_SAME_REGION,
    CountingStore,
    FaultInjectingStore,
    FaultPlan,
    LatencyProfile,
    LatencyStore,
    ReadOnlyStore,
    RetryingStore,
    SimulatedCrash,
    uniform_latency,
)


def open_store(uri: str, storage_options: dict[str, str] | None = None, **kwargs) -> ObjectStore:
    """The backend for ``uri``: ``file://`` (or a plain path) or ``s3://``.

    S3 stores come wrapped in ``RetryingStore``; ``kwargs`` go to the backend
    (``conditional_writes=`` for S3).
    """
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise InvalidArgumentError("storage_options must be a dict of delta-rs keys to values, "
                                   f"got {type(storage_options).__name__}")
    if is_local_uri(uri):
        if storage_options:
            raise InvalidArgumentError("storage_options are only meaningful for s3:// URIs")
        return LocalStore(uri)
    if uri.startswith(("s3://", "s3a://")):
        from .s3 import S3Store

        return RetryingStore(S3Store(uri, storage_options, **kwargs))
    raise InvalidArgumentError(f"unsupported lake URI {uri!r}: use file:// or s3://")


_OPENED: dict[StoreAddress, ObjectStore] = {}
_OPENED_LOCK = threading.Lock()


def open_address(address: StoreAddress) -> ObjectStore:
    """The store at ``address`` (``ObjectStore.address``), opened once per process: an
    executor's tasks share it."""
    with _OPENED_LOCK:
        store = _OPENED.get(address)
        if store is None:
            store = open_store(address.uri, dict(address.options) or None,
                               **({"conditional_writes": "trust"} if address.options else {}))
            if address.read_only:
                store = ReadOnlyStore(store)
            _OPENED[address] = store
        return store


__all__ = [
    "KINDS", "READ_KINDS", "WRITE_KINDS", "GetResult", "ListPage", "NotFound", "ObjectMeta",
    "ObjectStore", "PreconditionFailed", "StoreWrapper", "TransientStoreError", "LocalStore",
    "CountingStore", "FaultInjectingStore", "FaultPlan", "LatencyProfile", "LatencyStore",
    "ReadOnlyStore", "RetryingStore", "SimulatedCrash", "S3_SAME_REGION", "uniform_latency",
    "open_store", "open_address", "StoreAddress", "OutcomeUnknown", "settle_create",
    "settle_replace",
]
