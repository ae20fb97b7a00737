"""Azure Blob Storage and ADLS Gen2 store on azure-storage-blob, with real conditional writes.

put_if_absent is a Put Blob with ``If-None-Match: *`` (a loser hears 409 BlobAlreadyExists),
put_if_match one with ``If-Match: <etag>`` (412 ConditionNotMet, also when the blob is gone).
Before the first conditional write the store checks, once per account endpoint and container,
that both are honoured (``probe.py``), and refuses the lake otherwise.

One call, the requests the wrappers count: the SDK's retries are off (``RetryingStore`` owns
them) and whole blobs move in one Put Blob or Get Blob, never in blocks or chunks (up to
``SINGLE_TRANSFER`` bytes). Where Azure differs from S3, the store says so to the wrappers:

* Azure has no suffix ranges: a read of an object's last bytes is a HEAD for its size, then a
  ranged GET (``suffix_read_kinds``).
* A listing after a key sends it as ``startFrom`` (Azure's only listing offset, inclusive) on
  the first page and keeps only keys after it on every page: Azurite ignores ``startFrom``, and
  the continuation marker of each page is passed back as the service gave it (Azure's markers
  are opaque: one is never built from a key).
* ``delete_many`` is a blob batch: up to 256 deletes in one request.
* A GET of an empty blob is two requests in the SDK (a ranged one the service refuses, then a
  plain one); lakevilla writes no empty objects of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import (
    BucketNotFoundError,
    InvalidArgumentError,
    StorageCredentialsError,
    StorageError,
    StoragePermissionError,
)
from .address import StoreAddress
from .azure_config import EMULATOR, ENDPOINT, credential, locate
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
from .options import flag, opt, seconds
from .probe import ensure_conditional

BATCH = 256  # deletes per blob batch request (Azure's limit)
SINGLE_TRANSFER = 4 * 1024 ** 3  # Put Blob takes up to ~5,000 MiB in one request
_CREDENTIAL_CODES = {"AuthenticationFailed", "InvalidAuthenticationInfo",
                     "NoAuthenticationInformation", "InvalidAuthenticationToken"}
_TRANSIENT_CODES = {"ServerBusy", "OperationTimedOut", "InternalError"}
_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}
T = TypeVar("T")


def _etag(raw: str | None) -> str:
    return (raw or "").strip('"')


def _code(e: Any) -> str:
    code = getattr(e, "error_code", None)
    return str(getattr(code, "value", code) or "")


class AzureStore(PrefixedStore):
    """``az://container/prefix`` or ``abfss://container@account.dfs.core.windows.net/prefix``;
    ``storage_options`` takes delta-rs' keys (``azure_config.py``)."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None, *,
                 conditional_writes: str = "check") -> None:
        if conditional_writes not in ("check", "trust"):
            raise InvalidArgumentError("conditional_writes must be 'check' or 'trust' on Azure "
                                       "(Azure honours If-None-Match and If-Match)")
        opts = dict(storage_options or {})
        self.location = loc = locate(uri, opts)
        self.container, self.prefix, self.root_uri = loc.container, loc.prefix, loc.root_uri
        self.conditional_writes = conditional_writes
        pinned = dict(opts)
        if flag(opts, *EMULATOR) and opt(opts, *ENDPOINT) is None:
            pinned["azure_storage_endpoint"] = loc.account_url  # another process finds it too
        self._address = StoreAddress(self.root_uri, tuple(sorted(pinned.items())))
        cred, self._no_credentials = credential(opts, loc)
        import requests
        from azure.core.pipeline.transport import RequestsTransport
        from azure.storage.blob import BlobServiceClient

        session = requests.Session()  # a pool as wide as lakevilla's parallel requests
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=64)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        service = BlobServiceClient(
            loc.account_url, credential=cred, retry_total=0,
            transport=RequestsTransport(session=session),
            connection_timeout=seconds(opt(opts, "connect_timeout"), 10.0),
            read_timeout=seconds(opt(opts, "timeout", "read_timeout"), 60.0),
            max_single_put_size=SINGLE_TRANSFER, max_single_get_size=SINGLE_TRANSFER)
        self.client = service.get_container_client(loc.container)

    def deletes_per_request(self) -> int:
        return BATCH

    def suffix_read_kinds(self) -> tuple[str, ...]:
        return ("head", "get")

    # -- helpers -------------------------------------------------------------
    def _blob(self, key: str) -> Any:
        return self.client.get_blob_client(self._key(key))

    def _where(self) -> str:
        return f"container {self.container!r} of {self.location.account_url}"

    def _call(self, key: str, fn: Callable[[], T]) -> T:
        from azure.core.exceptions import (
            AzureError,
            ClientAuthenticationError,
            DecodeError,
            HttpResponseError,
            ServiceRequestError,
            ServiceResponseError,
        )

        if self._no_credentials is not None:
            raise StorageCredentialsError(self._no_credentials)
        try:
            return fn()
        except HttpResponseError as e:
            if e.status_code is None and isinstance(e, ClientAuthenticationError):
                raise StorageCredentialsError(  # no signature or token: no request was sent
                    f"the credentials for {self._where()} cannot be used: {e.message}") from e
            mapped = self._mapped(e, key)
            if isinstance(mapped, NotFound | PreconditionFailed):
                raise mapped from None  # an answer, not a failure
            raise mapped from e
        except (ServiceRequestError, ServiceResponseError, DecodeError) as e:
            # connecting (refused, timed out), the connection dropping, a body cut short
            raise TransientStoreError(f"connection failure on {key}: {e}") from e
        except AzureError as e:
            raise StorageError(f"Azure request on {key} failed: {e}") from e

    def _mapped(self, e: Any, key: str) -> Exception:
        status, code = e.status_code, _code(e)
        message = (str(e.message or getattr(e, "reason", "") or "").splitlines() or [""])[0]
        if code == "ContainerNotFound":
            return BucketNotFoundError(f"{self._where()} does not exist")
        if status == 404:
            return NotFound(key)
        if status == 412 or code in ("ConditionNotMet", "BlobAlreadyExists"):
            return PreconditionFailed(key)
        # Azure's words for a bad signature (Azurite says them with AuthorizationFailure)
        if status == 401 or code in _CREDENTIAL_CODES or message.startswith(
                "Server failed to authenticate"):
            return StorageCredentialsError(
                f"Azure rejected the credentials ({code or status}) on {key} in "
                f"{self._where()}: check azure_storage_account_key / azure_storage_sas_token "
                f"(storage_options): {message}")
        if status == 403:
            return StoragePermissionError(
                f"access denied on {key} in {self._where()} ({code or status}): these "
                f"credentials may not do this (a read-only SAS token or role?): {message}")
        if status in _TRANSIENT_STATUS or code in _TRANSIENT_CODES:
            return TransientStoreError(f"{code or status} on {key}")
        return StorageError(f"Azure error {code or status} on {key}: {message}")

    def _upload(self, key: str, data: bytes, **conditions: Any) -> str:
        r = self._call(key, lambda: self._blob(key).upload_blob(
            data, length=len(data), overwrite=True, max_concurrency=1, **conditions))
        return _etag(r["etag"])

    def _ensure_conditional(self) -> None:
        if self.conditional_writes != "check":
            return
        from azure.core import MatchConditions

        ensure_conditional(
            ("azure", self.location.account_url, self.container),
            create=lambda key, data: self._upload(key, data,
                                                  match_condition=MatchConditions.IfMissing),
            replace=lambda key, data: self._upload(key, data, etag='"0x0"',
                                                   match_condition=MatchConditions.IfNotModified),
            delete=self.delete,
            refusal=(f"{self._where()} ignores conditional writes (If-None-Match / If-Match): "
                     "markers and commits would silently overwrite each other. lakevilla needs "
                     "an endpoint that honours them (Azure Blob Storage and Azurite do)."))

    # -- interface -----------------------------------------------------------
    def get(self, key: str) -> GetResult:
        def read() -> GetResult:
            d = self._blob(key).download_blob(max_concurrency=1)
            return GetResult(d.readall(), _etag(d.properties.etag))

        return self._call(key, read)

    def get_range(self, key: str, start: int, length: int | None = None) -> bytes:
        if empty_range(start, length):
            return b""

        def read() -> bytes:
            offset = start
            if start < 0:  # no suffix ranges on Azure: the size first (suffix_read_kinds)
                size = self._blob(key).get_blob_properties().size
                offset = max(size + start, 0)
                if size == 0:
                    return b""
            return self._blob(key).download_blob(offset=offset, length=length,
                                                 max_concurrency=1).readall()

        try:
            return self._call(key, read)
        except StorageError as e:
            if "InvalidRange" in str(e) or "416" in str(e):  # at or past the end
                return b""
            raise

    def head(self, key: str) -> ObjectMeta:
        p = self._call(key, lambda: self._blob(key).get_blob_properties())
        return ObjectMeta(key, p.size, _etag(p.etag), p.last_modified.timestamp())

    def put(self, key: str, data: bytes) -> str:
        return self._upload(key, data)

    def put_if_absent(self, key: str, data: bytes) -> str:
        from azure.core import MatchConditions

        self._ensure_conditional()
        return self._upload(key, data, match_condition=MatchConditions.IfMissing)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        from azure.core import MatchConditions

        self._ensure_conditional()
        return self._upload(key, data, etag=f'"{etag}"',
                            match_condition=MatchConditions.IfNotModified)

    def delete(self, key: str) -> None:
        try:
            self._call(key, lambda: self._blob(key).delete_blob())
        except NotFound:
            pass  # deleting a missing key is not an error (as on S3)

    def delete_many(self, keys: list[str]) -> None:
        for i in range(0, len(keys), BATCH):
            batch = keys[i:i + BATCH]
            names = [self._key(k) for k in batch]
            replies = self._call(batch[0], lambda: list(
                self.client.delete_blobs(*names, raise_on_any_failure=False)))  # noqa: B023
            failed = [(k, r.status_code) for k, r in zip(batch, replies)
                      if r.status_code not in (200, 202, 404)]
            if failed:
                raise StorageError(f"Azure blob batch: {len(failed)} of {len(batch)} keys not "
                                   f"deleted (first: {failed[0][0]}, status {failed[0][1]})")

    def list_page(self, prefix, start_after=None, token=None, max_keys=1000) -> ListPage:
        after = start_after if start_after is not None and start_after >= prefix else None
        kwargs: dict[str, Any] = {"name_starts_with": self._key(prefix),
                                  "results_per_page": max_keys, "include": ["metadata"]}
        if (after is not None and token is None and after.startswith(prefix)
                and "/" not in after[len(prefix):]):
            kwargs["start_from"] = self._key(after)  # one level below the prefix (Azure's rule)

        def one_page() -> tuple[list[Any], str | None]:
            pages: Any = self.client.list_blobs(**kwargs).by_page(continuation_token=token)
            return list(next(pages)), pages.continuation_token or None

        blobs, next_token = self._call(prefix, one_page)
        items = [ObjectMeta(self._rel(b.name), b.size, _etag(b.etag),
                            b.last_modified.timestamp())
                 for b in blobs
                 # ADLS Gen2 lists folders as empty blobs marked hdi_isfolder: no keys of ours
                 if (b.metadata or {}).get("hdi_isfolder") != "true"
                 and (after is None or self._rel(b.name) > after)]
        return ListPage(items, next_token)

    def close(self) -> None:
        self.client.close()
