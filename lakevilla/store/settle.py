"""Learning the outcome of a conditional write whose reply was lost.

A write can be applied by the store and still report an error (a timeout, a reset
connection, retries exhausted): the client does not know which happened. For
lakevilla's conditional writes the question has an answer on storage. Reading the
key back tells us: our bytes are there (we won), another writer's bytes are there
(we lost), or the key is as we left it, and then repeating the very same
conditional write is safe, because its condition only admits it in the state the
first attempt expected. Every payload lakevilla writes conditionally is unique (it
carries ids, revisions, timestamps), so equal bytes mean our write.

A write the store refused (no permission, no credentials) was not applied: there is nothing
to learn, and that error is raised as it is. When the outcome cannot be learned,
``OutcomeUnknown`` is raised; where the write was a transaction's decision, the transaction
reports ``CommitPendingError`` and deletes nothing.
"""

from __future__ import annotations

import time

from ..errors import StorageCredentialsError, StorageError, StoragePermissionError
from .base import NotFound, ObjectStore, PreconditionFailed

ATTEMPTS = 5
FIRST_DELAY = 0.02
MAX_DELAY = 0.5


class OutcomeUnknown(StorageError):
    """A write reported an error and reading it back failed too: applied or not is unknown."""


def _refused(error: BaseException | None) -> None:
    """A refusal (permissions, credentials) means the write was not applied: raise it."""
    if isinstance(error, StoragePermissionError | StorageCredentialsError):
        raise error


def _pause(i: int) -> None:
    # backoff between rounds against a failing store
    time.sleep(min(FIRST_DELAY * (2 ** i), MAX_DELAY))


def settle_create(store: ObjectStore, key: str, data: bytes,
                  error: BaseException | None = None) -> str | None:
    """After ``put_if_absent(key, data)`` reported an error: the etag if our bytes are at
    ``key``, None if another writer's are. Raises ``OutcomeUnknown`` if neither is learned."""
    _refused(error)
    last: BaseException | None = error
    for i in range(ATTEMPTS):
        try:
            got = store.get(key)
            return got.etag if got.data == data else None
        except NotFound:
            try:
                return store.put_if_absent(key, data)
            except PreconditionFailed:
                # created meanwhile (perhaps by our first attempt, landing late): read again
                continue
            except StorageError as e:
                last = e
        except StorageError as e:
            last = e
        _pause(i)
    raise OutcomeUnknown(f"could not learn whether the write of {key} was "
                         f"applied ({last})") from last


def settle_replace(store: ObjectStore, key: str, data: bytes, etag: str,
                   error: BaseException | None = None) -> str | None:
    """After ``put_if_match(key, data, etag)`` reported an error: the new etag if our bytes
    are at ``key``, None if the object moved on without them (another writer won).
    Raises ``OutcomeUnknown`` if neither is learned."""
    _refused(error)
    last: BaseException | None = error
    for i in range(ATTEMPTS):
        try:
            got = store.get(key)
        except NotFound:
            return None
        except StorageError as e:
            last = e
            _pause(i)
            continue
        if got.data == data:
            return got.etag
        if got.etag != etag:
            return None
        try:
            return store.put_if_match(key, data, etag)
        except (PreconditionFailed, NotFound):
            continue
        except StorageError as e:
            last = e
        _pause(i)
    raise OutcomeUnknown(f"could not learn whether the rewrite of {key} was "
                         f"applied ({last})") from last
