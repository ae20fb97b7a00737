"""Object-store layer: every request lakevilla makes goes through here."""

from __future__ import annotations

import importlib
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
from .latency import CLOUD_PROFILES, S3_SAME_REGION, LatencyProfile, uniform_latency
from .local import LocalStore, is_local_uri
from .settle import OutcomeUnknown, settle_create, settle_replace
from .wrappers import (
    CountingStore,
    FaultInjectingStore,
    FaultPlan,
    LatencyStore,
    ReadOnlyStore,
    RetryingStore,
    SimulatedCrash,
)

CLOUD_SCHEMES = {"s3": "s3", "s3a": "s3", "az": "azure", "azure": "azure", "abfs": "azure",
                 "abfss": "azure", "gs": "gcs"}


_SDKS = {"azure": ("azure.storage.blob", "azure"), "gcs": ("google.cloud.storage", "gcs")}


def _need(module: str, extra: str) -> None:
    """The cloud's SDK, or an error that says how to install it."""
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise InvalidArgumentError(f"{extra} lakes need the {module} package: "
                                   f"pip install 'lakevilla[{extra}]'") from e


def open_store(uri: str, storage_options: dict[str, str] | None = None, **kwargs) -> ObjectStore:
    """The backend for ``uri``: ``file://`` (or a plain path), ``s3://``, Azure (``az://``,
    ``abfss://``) or ``gs://``.

    Cloud stores come wrapped in ``RetryingStore``; ``kwargs`` go to the backend
    (``conditional_writes=``).
    """
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise InvalidArgumentError("storage_options must be a dict of delta-rs keys to values, "
                                   f"got {type(storage_options).__name__}")
    if is_local_uri(uri):
        if storage_options:
            raise InvalidArgumentError("storage_options are only meaningful for cloud URIs "
                                       "(s3://, az://, abfss://, gs://)")
        return LocalStore(uri)
    cloud = CLOUD_SCHEMES.get(uri.partition("://")[0].lower())
    if cloud in _SDKS:
        _need(*_SDKS[cloud])
    if cloud == "s3":
        from .s3 import S3Store

        return RetryingStore(S3Store(uri, storage_options, **kwargs))
    if cloud == "azure":
        from .azure import AzureStore

        return RetryingStore(AzureStore(uri, storage_options, **kwargs))
    if cloud == "gcs":
        from .gcs import GcsStore

        return RetryingStore(GcsStore(uri, storage_options, **kwargs))
    raise InvalidArgumentError(f"unsupported lake URI {uri!r}: use file://, s3://, az:// (or "
                               "abfss://) or gs://")


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
    "ReadOnlyStore", "RetryingStore", "SimulatedCrash", "S3_SAME_REGION", "CLOUD_PROFILES",
    "uniform_latency",
    "open_store", "open_address", "StoreAddress", "OutcomeUnknown", "settle_create",
    "settle_replace",
]
