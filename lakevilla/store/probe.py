"""The once-per-container check that a store honours conditional writes.

An endpoint that silently ignores ``If-None-Match`` / ``If-Match`` (or GCS' generation
preconditions) would turn every marker into a blind overwrite and let two commits land at one
version. Before its first conditional write a store asks, once per endpoint and bucket (or
account and container) per process: a second put-if-absent of a fresh probe key must lose, and
so must a put-if-match on an etag the probe never had. Then the probe is deleted.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Hashable

from ..errors import ConditionalWritesUnsupportedError
from .base import NotFound, PreconditionFailed

PROBE_DIR = "_lakevilla/probe"
_checked: set[Hashable] = set()
_lock = threading.Lock()


def checked(ident: Hashable) -> bool:
    with _lock:
        return ident in _checked


def ensure_conditional(ident: Hashable, *, create: Callable[[str, bytes], object],
                       replace: Callable[[str, bytes], object],
                       delete: Callable[[str], object], refusal: str) -> None:
    """Check (once per ``ident``) that conditions hold, with the store's own requests:
    ``create(key, data)`` is its put-if-absent, ``replace(key, data)`` a put-if-match on an
    etag the key never had; ``ConditionalWritesUnsupportedError(refusal)`` if one is ignored."""
    if checked(ident):
        return
    key = f"{PROBE_DIR}/{uuid.uuid4().hex}"
    create(key, b"1")
    honoured = True
    try:
        create(key, b"2")
        honoured = False
    except PreconditionFailed:
        pass
    if honoured:
        try:
            replace(key, b"3")
            honoured = False
        except (PreconditionFailed, NotFound):
            pass
    delete(key)
    if not honoured:
        raise ConditionalWritesUnsupportedError(refusal)
    with _lock:
        _checked.add(ident)
