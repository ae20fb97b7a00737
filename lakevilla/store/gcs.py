"""Google Cloud Storage store on google-cloud-storage, with real conditional writes.

An object's etag here is its generation, which every write changes. put_if_absent sends
``ifGenerationMatch=0``, put_if_match ``ifGenerationMatch=<generation>``, and every write is
a JSON API multipart upload built here: GCS honours the precondition on every upload kind, but
emulators honour it on multipart uploads only (fake-gcs-server ignores it on media and
resumable uploads), and the SDK would switch to a resumable upload above 8 MiB. One kind of
upload, the one the tests prove atomic, whatever the size. Before the first conditional write
the store checks, once per endpoint and bucket, that preconditions are honoured
(``probe.py``), and refuses the lake otherwise.

One call, one request, as the wrappers count: the SDK's retries are off (``retry=None``;
``RetryingStore`` owns them), downloads go to the configured endpoint (never to a media link
an emulator names), and a listing after a key sends it as ``startOffset`` (inclusive) and
keeps only the keys after it. ``delete_many`` is one DELETE per key: GCS' batch endpoint is
not served by the emulators this is tested on.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote

from ..errors import (
    BucketNotFoundError,
    InvalidArgumentError,
    StorageCredentialsError,
    StorageError,
    StoragePermissionError,
)
from .address import StoreAddress
from .base import (
    GetResult,
    ListPage,
    NotFound,
    ObjectMeta,
    PreconditionFailed,
    PrefixedStore,
    TransientStoreError,
    empty_range,
)
from .gcs_config import connection, locate
from .options import opt, seconds
from .probe import ensure_conditional

_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}
_LIST_FIELDS = "items(name,size,generation,updated),nextPageToken"
T = TypeVar("T")


class _Reply(Exception):  # noqa: N818 - an HTTP answer of an upload, mapped like the SDK's errors
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _generation(etag: str) -> int | None:
    try:
        g = int(etag)
    except ValueError:
        return None
    return g if g > 0 else None  # 0 would mean "absent": never a live object's generation


class GcsStore(PrefixedStore):
    """``gs://bucket/prefix``; ``storage_options`` takes delta-rs' keys (``gcs_config.py``)."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None, *,
                 conditional_writes: str = "check") -> None:
        if conditional_writes not in ("check", "trust"):
            raise InvalidArgumentError("conditional_writes must be 'check' or 'trust' on GCS "
                                       "(GCS honours generation preconditions)")
        opts = dict(storage_options or {})
        loc = locate(uri)
        self.bucket_name, self.prefix, self.root_uri = loc.bucket, loc.prefix, loc.root_uri
        self.conditional_writes = conditional_writes
        self._address = StoreAddress(self.root_uri, tuple(sorted(opts.items())))
        self.endpoint, credentials, self._no_credentials = connection(opts)
        self._timeout = (seconds(opt(opts, "connect_timeout"), 10.0),
                         seconds(opt(opts, "timeout", "read_timeout"), 60.0))
        import requests
        from google.auth.credentials import AnonymousCredentials
        from google.auth.transport.requests import AuthorizedSession
        from google.cloud import storage

        # one session for the SDK's requests and the uploads, pooled as wide as lakevilla's
        # parallel requests; a 401 is an answer, not a cue to refresh and send again unseen
        # (tokens are refreshed before they expire all the same)
        credentials = credentials or AnonymousCredentials()  # unused when refused (see _call)
        self.session = AuthorizedSession(credentials, refresh_status_codes=())
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=64)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.client = storage.Client(project=None, credentials=credentials, _http=self.session,
                                     client_options={"api_endpoint": self.endpoint})
        self.bucket = self.client.bucket(loc.bucket)

    def deletes_per_request(self) -> int:
        return 1

    # -- helpers -------------------------------------------------------------
    def _where(self) -> str:
        return f"bucket {self.bucket_name!r} at {self.endpoint}"

    def _call(self, key: str, fn: Callable[[], T], *, bucket_wide: bool = False) -> T:
        """``fn()``, its errors mapped; ``bucket_wide``: a 404 can only be the bucket's (a
        listing, an upload)."""
        import requests
        from google.api_core.exceptions import GoogleAPICallError
        from google.auth.exceptions import GoogleAuthError, TransportError

        if self._no_credentials is not None:
            raise StorageCredentialsError(self._no_credentials)
        try:
            return fn()
        except (GoogleAPICallError, _Reply) as e:
            mapped = self._mapped(int(e.code or 0), str(e.message), key, bucket_wide)
            if isinstance(mapped, NotFound | PreconditionFailed):
                raise mapped from None  # an answer, not a failure
            raise mapped from e
        except (requests.RequestException, TransportError, ConnectionError) as e:
            # connecting (refused, timed out), the connection dropping, a body cut short
            raise TransientStoreError(f"connection failure on {key}: {e}") from e
        except GoogleAuthError as e:  # no token could be had: the request was not sent
            raise StorageCredentialsError(f"no token for {self._where()}: {e}; check the "
                                          "service account key (storage_options)") from e

    def _mapped(self, code: int, message: str, key: str, bucket_wide: bool) -> Exception:
        first = (message.splitlines() or [""])[0]
        if code == 404 and (bucket_wide or "bucket" in first.lower()):
            return BucketNotFoundError(f"{self._where()} does not exist")
        if code == 404:
            return NotFound(key)
        if code == 412:
            return PreconditionFailed(key)
        if code == 401:
            return StorageCredentialsError(
                f"GCS rejected the credentials on {key} in {self._where()}: check "
                f"google_service_account_key (storage_options): {first}")
        if code == 403:
            return StoragePermissionError(
                f"access denied on {key} in {self._where()}: these credentials may not do this "
                f"(a read-only role?): {first}")
        if code in _TRANSIENT_STATUS:
            return TransientStoreError(f"{code} on {key}")
        return StorageError(f"GCS error {code} on {key}: {first}")

    def _upload(self, key: str, data: bytes, generation: int | None = None) -> str:
        """A JSON API multipart upload, with ``ifGenerationMatch`` when ``generation`` is given
        (0: the object must not exist). Multipart only: see the module's docstring."""
        boundary = f"lakevilla-{uuid.uuid4().hex}"
        meta = json.dumps({"name": self._key(key)})
        body = (f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{meta}"
                f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n").encode()
        body += data + f"\r\n--{boundary}--\r\n".encode()
        query = "uploadType=multipart&fields=generation"
        if generation is not None:
            query += f"&ifGenerationMatch={generation}"
        url = f"{self.endpoint}/upload/storage/v1/b/{quote(self.bucket_name, safe='')}/o?{query}"

        def send() -> str:
            r = self.session.post(url, data=body, timeout=self._timeout, headers={
                "Content-Type": f"multipart/related; boundary={boundary}"})
            if r.status_code >= 300:
                raise _Reply(r.status_code, _error_message(r))
            return str(r.json()["generation"])

        return self._call(key, send, bucket_wide=True)

    def _ensure_conditional(self) -> None:
        if self.conditional_writes != "check":
            return
        ensure_conditional(
            ("gcs", self.endpoint, self.bucket_name),
            create=lambda key, data: self._upload(key, data, 0),
            replace=lambda key, data: self._upload(key, data, 1),  # a generation none has had
            delete=self.delete,
            refusal=(f"{self._where()} ignores generation preconditions (ifGenerationMatch) on "
                     "multipart uploads: markers and commits would silently overwrite each "
                     "other. lakevilla needs an endpoint that honours them (GCS does)."))

    # -- interface -----------------------------------------------------------
    def get(self, key: str) -> GetResult:
        def read() -> GetResult:
            blob = self.bucket.blob(self._key(key))  # no media link: the configured endpoint
            data = blob.download_as_bytes(retry=None, timeout=self._timeout)
            if blob.generation is None:
                raise StorageError(f"GCS sent {key} without its generation")
            return GetResult(data, str(blob.generation))

        return self._call(key, read)

    def get_range(self, key: str, start: int, length: int | None = None) -> bytes:
        if empty_range(start, length):
            return b""
        end = None if length is None else start + length - 1
        try:
            return self._call(key, lambda: self.bucket.blob(self._key(key)).download_as_bytes(
                start=start, end=end, checksum=None, retry=None, timeout=self._timeout))
        except StorageError as e:
            if "416" in str(e):  # at or past the end
                return b""
            raise

    def head(self, key: str) -> ObjectMeta:
        blob = self._call(key, lambda: self.bucket.get_blob(self._key(key), retry=None,
                                                            timeout=self._timeout))
        if blob is None:
            raise NotFound(key)
        return ObjectMeta(key, int(blob.size or 0), str(blob.generation),
                          blob.updated.timestamp() if blob.updated else None)

    def put(self, key: str, data: bytes) -> str:
        return self._upload(key, data)

    def put_if_absent(self, key: str, data: bytes) -> str:
        self._ensure_conditional()
        return self._upload(key, data, 0)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        generation = _generation(etag)
        if generation is None:  # not a generation: no object of ours has it
            raise PreconditionFailed(key)
        self._ensure_conditional()
        return self._upload(key, data, generation)

    def delete(self, key: str) -> None:
        try:
            self._call(key, lambda: self.bucket.blob(self._key(key)).delete(
                retry=None, timeout=self._timeout))
        except NotFound:
            pass  # deleting a missing key is not an error (as on S3)

    def list_page(self, prefix, start_after=None, token=None, max_keys=1000) -> ListPage:
        after = start_after if start_after is not None and start_after >= prefix else None

        def one_page() -> tuple[list[Any], str | None]:
            pages: Any = self.client.list_blobs(
                self.bucket, prefix=self._key(prefix), page_size=max_keys, page_token=token,
                start_offset=self._key(after) if after is not None else None,
                fields=_LIST_FIELDS, retry=None, timeout=self._timeout)
            return list(next(pages.pages)), pages.next_page_token or None

        blobs, next_token = self._call(prefix, one_page, bucket_wide=True)
        items = [ObjectMeta(self._rel(b.name), int(b.size or 0), str(b.generation),
                            b.updated.timestamp() if b.updated else None)
                 for b in blobs if after is None or self._rel(b.name) > after]
        return ListPage(items, next_token)

    def close(self) -> None:
        self.session.close()


def _error_message(r: Any) -> str:
    """GCS' JSON error message of a reply, or its text."""
    try:
        return str(r.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return r.text[:200] or r.reason or str(r.status_code)
