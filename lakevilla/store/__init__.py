"""Object-store layer: every request lakevilla makes goes through here."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import InvalidArgumentError
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
    S3_CONDITIONAL,
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


__all__ = [
    "KINDS", "READ_KINDS", "WRITE_KINDS", "GetResult", "ListPage", "NotFound", "ObjectMeta",
    "ObjectStore", "PreconditionFailed", "StoreWrapper", "TransientStoreError", "LocalStore",
    "CountingStore", "FaultInjectingStore", "FaultPlan", "LatencyProfile", "LatencyStore",
    "ReadOnlyStore", "RetryingStore", "SimulatedCrash", "S3_CONDITIONAL", "S3_SAME_REGION",
    "uniform_latency",
    "open_store", "OutcomeUnknown", "settle_create", "settle_replace",
]
