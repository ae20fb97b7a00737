"""Where a GCS lake lives and who lakevilla is there: its URI and delta-rs' storage options.

``gs://bucket/prefix``. Credentials, by delta-rs' names: a service account key given inline
(``google_service_account_key``) or as a file (``google_service_account``,
``google_application_credentials``, else the ``GOOGLE_APPLICATION_CREDENTIALS`` environment
variable), or ``google_skip_signature`` for public buckets. As in delta-rs, a key may carry
``gcs_base_url`` (another endpoint, such as an emulator) and ``disable_oauth`` (send no token):
one dict serves lakevilla and deltalake. Without any credential every request is refused
before it is sent (``StorageCredentialsError``): nothing falls back to a metadata service
unasked.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from ..errors import InvalidArgumentError
from .options import flag, opt

DEFAULT_ENDPOINT = "https://storage.googleapis.com"
SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
KEY = ("google_service_account_key", "service_account_key")
KEY_FILE = ("google_service_account", "service_account", "google_service_account_path",
            "service_account_path", "google_application_credentials")
SKIP_SIGNATURE = ("google_skip_signature", "skip_signature")


@dataclass(frozen=True)
class GcsLocation:
    bucket: str
    prefix: str
    root_uri: str


def locate(uri: str) -> GcsLocation:
    parsed = urlparse(uri)
    if parsed.scheme != "gs" or not parsed.netloc:
        raise InvalidArgumentError(f"not a GCS URI: {uri!r} (use gs://bucket/prefix)")
    prefix = parsed.path.strip("/")
    return GcsLocation(parsed.netloc, prefix,
                       f"gs://{parsed.netloc}" + (f"/{prefix}" if prefix else ""))


def _key_info(options: Mapping[str, str]) -> tuple[dict[str, Any] | None, str]:
    """The service account key (parsed) and where it came from."""
    inline = opt(options, *KEY)
    if inline is not None:
        where = "google_service_account_key"
        text = inline
    else:
        path = opt(options, *KEY_FILE) or os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
        if path is None:
            return None, ""
        where = path
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise InvalidArgumentError(f"cannot read the GCS credentials file {path}: "
                                       f"{e.strerror or e}") from e
    try:
        info = json.loads(text)
    except ValueError as e:
        raise InvalidArgumentError(f"the GCS credentials in {where} are not JSON: {e}") from e
    if not isinstance(info, dict):
        raise InvalidArgumentError(f"the GCS credentials in {where} are not a JSON object")
    return info, where


def connection(options: Mapping[str, str]) -> tuple[str, Any, str | None]:
    """(endpoint, credentials, None), or (endpoint, None, why no credentials could be had):
    the store then refuses every request before it is sent."""
    from google.auth.credentials import AnonymousCredentials

    info, where = _key_info(options)
    endpoint = str((info or {}).get("gcs_base_url") or DEFAULT_ENDPOINT).rstrip("/")
    if info is not None and info.get("disable_oauth"):
        return endpoint, AnonymousCredentials(), None
    if info is not None:
        kind = info.get("type")
        try:
            if kind == "service_account":
                from google.oauth2 import service_account

                return endpoint, service_account.Credentials.from_service_account_info(
                    info, scopes=[SCOPE]), None
            if kind == "authorized_user":  # what `gcloud auth application-default login` writes
                from google.oauth2 import credentials as user

                return endpoint, user.Credentials.from_authorized_user_info(info, [SCOPE]), None
        except (ValueError, KeyError) as e:
            raise InvalidArgumentError(f"the GCS credentials in {where} are incomplete: "
                                       f"{e}") from e
        raise InvalidArgumentError(f"the GCS credentials in {where} are of type {kind!r}: use a "
                                   "service account key or an authorized user's credentials")
    if flag(options, *SKIP_SIGNATURE):
        return endpoint, AnonymousCredentials(), None
    return endpoint, None, ("no credentials for GCS: set google_service_account_key (the key's "
                            "JSON) or google_service_account (its file) in storage_options, or "
                            "GOOGLE_APPLICATION_CREDENTIALS in the environment")
