"""S3 (and S3-compatible) store on boto3, with real conditional writes.

put_if_absent sends ``If-None-Match: *`` and put_if_match sends ``If-Match``. Before
the first conditional write the store checks, once per endpoint and bucket, that
the endpoint honours them: an endpoint that silently ignores them would turn
every marker into a blind overwrite, so it is refused unless the caller opts into
the paper's HEAD-polling emulation (``conditional_writes="emulate"``).

Retries live in ``RetryingStore``; this class only maps errors: throttling, 5xx,
``409 ConditionalRequestConflict`` (AWS: a concurrent conditional request; retry
it), connection failures and timeouts (connecting, or reading a response body)
become ``TransientStoreError``.
"""

from __future__ import annotations

import threading
import time
import warnings
from urllib.parse import urlparse

from ..errors import (
    BucketNotFoundError,
    ConditionalWritesUnsupportedError,
    InvalidArgumentError,
    StorageCredentialsError,
    StorageError,
    StoragePermissionError,
)
from .address import StoreAddress
from .base import (
    DELETE_BATCH,
    GetResult,
    ListPage,
    NotFound,
    ObjectMeta,
    PreconditionFailed,
    PrefixedStore,
    TransientStoreError,
)
from .options import opt as _opt
from .options import seconds as _seconds
from .probe import ensure_conditional

_TRANSIENT_CODES = {
    "500", "502", "503", "504", "InternalError", "ServiceUnavailable", "SlowDown",
    "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeTooSkewed",
    "TooManyRequests", "RequestLimitExceeded",
}
# 409 means "a conflicting operation is in progress", not "the condition failed": AWS asks to retry
_RETRY_CODES = {"ConditionalRequestConflict", "409"}
# the store does not accept who we are (missing, wrong or expired keys): no retry helps
_CREDENTIAL_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
                     "TokenRefreshRequired", "InvalidClientTokenId"}
# One boto3 session for every store: a new session re-parses the S3 service model (~0.3 s of
# JSON); clients are thread-safe, making them from a shared session is not, hence the lock.
_session = None
_session_lock = threading.Lock()


def _client(**kwargs):
    import boto3

    global _session
    with _session_lock:
        if _session is None:
            _session = boto3.session.Session()
        return _session.client("s3", **kwargs)


class S3Store(PrefixedStore):
    """``s3://bucket/prefix``; ``storage_options`` takes delta-rs' keys."""

    def __init__(
        self,
        uri: str,
        storage_options: dict[str, str] | None = None,
        *,
        conditional_writes: str = "check",
    ) -> None:
        from botocore.config import Config

        parsed = urlparse(uri)
        if parsed.scheme not in ("s3", "s3a") or not parsed.netloc:
            raise InvalidArgumentError(f"not an s3:// URI: {uri!r}")
        if conditional_writes not in ("check", "trust", "emulate"):
            raise InvalidArgumentError("conditional_writes must be 'check', 'trust' or 'emulate'")
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.root_uri = f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        opts = dict(storage_options or {})
        self._address = StoreAddress(self.root_uri, tuple(sorted(opts.items())))
        self.endpoint = _opt(opts, "AWS_ENDPOINT_URL", "endpoint_url", "aws_endpoint", "endpoint")
        region = _opt(opts, "AWS_REGION", "region", "AWS_DEFAULT_REGION") or "us-east-1"
        cfg = Config(
            retries={"max_attempts": 1, "mode": "standard"},  # RetryingStore owns retries
            connect_timeout=_seconds(_opt(opts, "connect_timeout"), 10.0),
            read_timeout=_seconds(_opt(opts, "timeout", "read_timeout"), 60.0),
            max_pool_connections=64,
            s3={"addressing_style": "path"} if self.endpoint else {},
        )
        try:
            self.client = _client(
                endpoint_url=self.endpoint,
                region_name=region,
                aws_access_key_id=_opt(opts, "AWS_ACCESS_KEY_ID", "access_key_id"),
                aws_secret_access_key=_opt(opts, "AWS_SECRET_ACCESS_KEY", "secret_access_key"),
                aws_session_token=_opt(opts, "AWS_SESSION_TOKEN", "session_token"),
                config=cfg,
            )
        except ValueError as e:  # botocore: "Invalid endpoint: ..."
            raise InvalidArgumentError(f"storage_options: {e}") from e
        self.conditional_writes = conditional_writes
        if conditional_writes == "emulate":
            warnings.warn(
                "conditional_writes='emulate': put-if-absent is emulated by HEAD polling, which is "
                "not atomic; two writers can both believe they won. Use only on stores without "
                "conditional writes and a single writer per table.",
                stacklevel=2,
            )

    # -- helpers -------------------------------------------------------------
    def _call(self, fn, key: str, **kwargs):
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            CredentialRetrievalError,
            HTTPClientError,
            IncompleteReadError,
            NoCredentialsError,
            PartialCredentialsError,
        )
        from botocore.exceptions import ConnectionError as BotoConnectionError

        try:
            return fn(**kwargs)
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            status = str(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            if code == "NoSuchBucket":
                raise BucketNotFoundError(f"bucket {self.bucket!r} does not exist "
                                          f"at {self.endpoint or 'S3'}") from None
            if code in ("NoSuchKey", "404", "NotFound") or status == "404":
                raise NotFound(key) from None
            if code in _RETRY_CODES or status == "409":
                raise TransientStoreError(f"{code or status} on {key}: a conflicting "
                                          "request was in flight") from e
            if code in ("PreconditionFailed", "412") or status == "412":
                raise PreconditionFailed(key) from None
            if code in ("NotImplemented", "501") or status == "501":
                raise ConditionalWritesUnsupportedError(
                    f"{self.endpoint or 'S3'} rejected a conditional write (501 Not Implemented); "
                    "lakevilla needs If-None-Match/If-Match on PutObject"
                ) from None
            if code in _TRANSIENT_CODES or status in _TRANSIENT_CODES:
                raise TransientStoreError(f"{code or status} on {key}") from e
            if code in _CREDENTIAL_CODES:
                raise StorageCredentialsError(
                    f"{self.endpoint or 'S3'} rejected the credentials ({code}) on {key}: check "
                    "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (storage_options or "
                    "environment)") from e
            if code in ("AccessDenied", "403") or status == "403":
                raise StoragePermissionError(
                    f"access denied on {key} in bucket {self.bucket!r} ({code or status}): these "
                    "credentials may not use it") from e
            raise StorageError(f"S3 error {code or status} on {key}: {e}") from e
        except (BotoConnectionError, HTTPClientError, IncompleteReadError) as e:
            # connecting (refused, timed out), the connection dropping, a read timing out,
            # also while the body streams in (``get`` reads it inside this call)
            raise TransientStoreError(f"connection failure on {key}: {e}") from e
        except (NoCredentialsError, PartialCredentialsError, CredentialRetrievalError) as e:
            raise StorageCredentialsError(
                f"no usable credentials for {self.endpoint or 'S3'} (bucket {self.bucket!r}): {e}; "
                "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in storage_options or the "
                "environment") from e
        except BotoCoreError as e:  # anything else botocore raises before or around the request
            raise StorageError(f"S3 request on {key} failed: {e}") from e

    def _ensure_conditional(self) -> None:
        if self.conditional_writes != "check":
            return

        def put(key: str, data: bytes, **cond: str) -> None:
            self._call(self.client.put_object, key, Bucket=self.bucket, Key=self._key(key),
                       Body=data, **cond)

        ensure_conditional(
            ("s3", self.endpoint or "aws", self.bucket),
            create=lambda key, data: put(key, data, IfNoneMatch="*"),
            replace=lambda key, data: put(key, data, IfMatch='"0"'),
            delete=lambda key: self._call(self.client.delete_object, key, Bucket=self.bucket,
                                          Key=self._key(key)),
            refusal=(
                f"the endpoint {self.endpoint or 'S3'} ignores conditional writes (If-None-Match / "
                "If-Match) on bucket "
                f"{self.bucket!r}: markers and commits would silently overwrite each other. Use an "
                "endpoint that supports them, or pass conditional_writes='emulate' to accept the "
                "paper's non-atomic HEAD-polling fallback."))

    # -- interface -----------------------------------------------------------
    def get(self, key: str) -> GetResult:
        def get_and_read(**kw) -> GetResult:
            r = self.client.get_object(**kw)
            return GetResult(r["Body"].read(), r["ETag"].strip('"'))

        return self._call(get_and_read, key, Bucket=self.bucket, Key=self._key(key))

    def get_range(self, key: str, start: int, length: int | None = None) -> bytes:
        if start < 0:
            if length is not None:
                raise ValueError("a suffix range (negative start) takes no length")
            spec = f"bytes={start}"
        elif length is None:
            spec = f"bytes={start}-"
        elif length <= 0:
            return b""
        else:
            spec = f"bytes={start}-{start + length - 1}"
        def get_and_read(**kw) -> bytes:
            return self.client.get_object(**kw)["Body"].read()  # the body streams in inside _call

        try:
            return self._call(get_and_read, key, Bucket=self.bucket, Key=self._key(key), Range=spec)
        except StorageError as e:
            # start at or past the end (or an empty object)
            if "InvalidRange" in str(e) or "416" in str(e):
                return b""
            raise

    def head(self, key: str) -> ObjectMeta:
        r = self._call(self.client.head_object, key, Bucket=self.bucket, Key=self._key(key))
        return ObjectMeta(key, r["ContentLength"], r["ETag"].strip('"'),
                          r["LastModified"].timestamp())

    def put(self, key: str, data: bytes) -> str:
        r = self._call(self.client.put_object, key, Bucket=self.bucket, Key=self._key(key),
                       Body=data)
        return r["ETag"].strip('"')

    def put_if_absent(self, key: str, data: bytes) -> str:
        if self.conditional_writes == "emulate":
            return self._emulated_put_if_absent(key, data)
        self._ensure_conditional()
        r = self._call(
            self.client.put_object, key, Bucket=self.bucket, Key=self._key(key), Body=data,
            IfNoneMatch="*"
        )
        return r["ETag"].strip('"')

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        if self.conditional_writes == "emulate":
            return self._emulated_put_if_match(key, data, etag)
        self._ensure_conditional()
        r = self._call(
            self.client.put_object, key, Bucket=self.bucket, Key=self._key(key), Body=data,
            IfMatch=f'"{etag}"'
        )
        return r["ETag"].strip('"')

    def delete(self, key: str) -> None:
        self._call(self.client.delete_object, key, Bucket=self.bucket, Key=self._key(key))

    def deletes_per_request(self) -> int:
        return DELETE_BATCH

    def delete_many(self, keys: list[str]) -> None:
        for i in range(0, len(keys), DELETE_BATCH):
            batch = keys[i:i + DELETE_BATCH]
            r = self._call(self.client.delete_objects, batch[0], Bucket=self.bucket,
                           Delete={"Objects": [{"Key": self._key(k)} for k in batch],
                                   "Quiet": True})
            if errors := r.get("Errors"):
                e = errors[0]
                raise StorageError(f"S3 error {e.get('Code')} deleting {e.get('Key')} "
                                   f"({len(errors)} of {len(batch)} keys not "
                                   f"deleted): {e.get('Message')}")

    def list_page(self, prefix, start_after=None, token=None, max_keys=1000) -> ListPage:
        kwargs = {"Bucket": self.bucket, "Prefix": self._key(prefix), "MaxKeys": max_keys}
        if token:
            kwargs["ContinuationToken"] = token
        elif start_after:
            kwargs["StartAfter"] = self._key(start_after)
        r = self._call(self.client.list_objects_v2, prefix, **kwargs)
        items = [
            ObjectMeta(self._rel(o["Key"]), o["Size"], o.get("ETag", "").strip('"') or None,
                       o["LastModified"].timestamp())
            for o in r.get("Contents", [])
        ]
        return ListPage(items, r.get("NextContinuationToken") if r.get("IsTruncated") else None)

    # -- the paper's fallback for stores without conditional writes ---------
    def _emulated_put_if_absent(self, key: str, data: bytes, settle: float = 0.05) -> str:
        try:
            self.head(key)
            raise PreconditionFailed(key)
        except NotFound:
            pass
        etag = self.put(key, data)
        time.sleep(settle)  # the emulation's own polling interval, not test synchronisation
        if self.get(key).data != data:
            raise PreconditionFailed(key)
        return etag

    def _emulated_put_if_match(self, key: str, data: bytes, etag: str, settle: float = 0.05) -> str:
        if self.head(key).etag != etag:
            raise PreconditionFailed(key)
        new = self.put(key, data)
        time.sleep(settle)
        if self.get(key).data != data:
            raise PreconditionFailed(key)
        return new
