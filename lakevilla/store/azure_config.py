"""Where an Azure lake lives and who lakevilla is there: its URI and delta-rs' storage options.

URIs, as delta-rs takes them: ``az://container/prefix`` (also ``azure://``; the account comes
from ``azure_storage_account_name``) and ``abfs[s]://container@account.dfs.core.windows.net/
prefix`` (ADLS Gen2; the Blob endpoint of the same account serves it). Options take delta-rs'
names and aliases, so one dict serves lakevilla and deltalake: an account key, a SAS token, a
bearer token, or ``azure_skip_signature`` for public containers; a service principal, the Azure
CLI's login, a workload or managed identity through ``azure-identity`` (installed separately).
``azure_storage_use_emulator`` points at Azurite as delta-rs does: its well-known account and
key unless others are given, at ``AZURITE_BLOB_STORAGE_URL`` (default
``http://127.0.0.1:10000``). Without any credential every request is refused before it is sent
(``StorageCredentialsError``), as S3 refuses a client without keys: nothing falls back to a
metadata service unasked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from ..errors import InvalidArgumentError
from .options import flag, opt

SCHEMES = ("az", "azure", "abfs", "abfss")
# Azurite's published development account (Microsoft documents both; they grant nothing elsewhere)
EMULATOR_ACCOUNT = "devstoreaccount1"
EMULATOR_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
                "KBHBeksoGMGw==")
EMULATOR_URL_ENV = "AZURITE_BLOB_STORAGE_URL"
EMULATOR_URL = "http://127.0.0.1:10000"

ACCOUNT = ("azure_storage_account_name", "account_name")
KEY = ("azure_storage_account_key", "azure_storage_access_key", "azure_storage_master_key",
       "account_key", "access_key", "master_key")
SAS = ("azure_storage_sas_key", "azure_storage_sas_token", "sas_key", "sas_token")
TOKEN = ("azure_storage_token", "bearer_token", "token")
CLIENT_ID = ("azure_storage_client_id", "azure_client_id", "client_id")
CLIENT_SECRET = ("azure_storage_client_secret", "azure_client_secret", "client_secret")
TENANT = ("azure_storage_tenant_id", "azure_storage_authority_id", "azure_tenant_id",
          "azure_authority_id", "tenant_id", "authority_id")
EMULATOR = ("azure_storage_use_emulator", "use_emulator")
ENDPOINT = ("azure_storage_endpoint", "azure_endpoint", "endpoint")
SKIP_SIGNATURE = ("azure_skip_signature", "skip_signature")
USE_CLI = ("azure_use_azure_cli", "use_azure_cli")
MSI = ("azure_msi_endpoint", "azure_identity_endpoint", "identity_endpoint", "msi_endpoint",
       "azure_object_id", "object_id", "azure_msi_resource_id", "msi_resource_id")
FEDERATED_TOKEN = ("azure_federated_token_file", "federated_token_file")


@dataclass(frozen=True)
class AzureLocation:
    container: str
    prefix: str
    account: str
    account_url: str  # the Blob service endpoint of the account
    root_uri: str


def locate(uri: str, options: Mapping[str, str]) -> AzureLocation:
    """The container, prefix, account and Blob endpoint ``uri`` names."""
    parsed = urlparse(uri)
    if parsed.scheme not in SCHEMES or not parsed.netloc:
        raise InvalidArgumentError(f"not an Azure URI: {uri!r} (use az://container/prefix or "
                                   "abfss://container@account.dfs.core.windows.net/prefix)")
    prefix = parsed.path.strip("/")
    emulator = flag(options, *EMULATOR)
    named = opt(options, *ACCOUNT)
    suffix = None
    if "@" in parsed.netloc:  # abfss://container@account.dfs.core.windows.net
        container, _, host = parsed.netloc.partition("@")
        account, _, suffix = host.partition(".")
        if named is not None and named != account:
            raise InvalidArgumentError(f"{uri!r} names the account {account!r} but "
                                       f"storage_options name {named!r}: give one account")
    else:
        container, account = parsed.netloc, named or (EMULATOR_ACCOUNT if emulator else "")
    if not account:
        raise InvalidArgumentError(
            f"{uri!r} names no storage account: set azure_storage_account_name in storage_options "
            "(or use abfss://container@account.dfs.core.windows.net/prefix)")
    endpoint = opt(options, *ENDPOINT)
    if endpoint is not None:
        account_url = endpoint.rstrip("/")
    elif emulator:
        account_url = os.environ.get(EMULATOR_URL_ENV, EMULATOR_URL).rstrip("/") + "/" + account
    else:
        # ADLS Gen2's dfs endpoint and the Blob endpoint serve the same account
        host = (suffix or "dfs.core.windows.net").replace("dfs.", "blob.", 1)
        account_url = f"https://{account}.{host}"
    root = f"{parsed.scheme}://{parsed.netloc}" + (f"/{prefix}" if prefix else "")
    return AzureLocation(container, prefix, account, account_url, root)


class _StaticToken:
    """A bearer token given in the options (``azure_storage_token``), as a token credential."""

    def __init__(self, token: str) -> None:
        self.token = token

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken(self.token, 4102444800)  # 2100-01-01: the token is as given


def credential(options: Mapping[str, str], location: AzureLocation) -> tuple[Any, str | None]:
    """(the SDK credential, None), or (None, why none could be found): the store then refuses
    each request before sending it. ``None, None`` is anonymous access (skip_signature)."""
    key = opt(options, *KEY)
    if (key is None and flag(options, *EMULATOR) and location.account == EMULATOR_ACCOUNT
            and opt(options, *SAS, *TOKEN) is None):
        key = EMULATOR_KEY  # Azurite's own account, as delta-rs signs for it
    if key is not None:
        from azure.core.credentials import AzureNamedKeyCredential

        return AzureNamedKeyCredential(location.account, key), None
    if (sas := opt(options, *SAS)) is not None:
        from azure.core.credentials import AzureSasCredential

        return AzureSasCredential(sas.lstrip("?")), None
    if (token := opt(options, *TOKEN)) is not None:
        return _StaticToken(token), None
    if flag(options, *SKIP_SIGNATURE):
        return None, None
    client_id, secret = opt(options, *CLIENT_ID), opt(options, *CLIENT_SECRET)
    cli, msi = flag(options, *USE_CLI), opt(options, *MSI)
    if not ((client_id and secret) or cli or msi or opt(options, *FEDERATED_TOKEN)):
        return None, (f"no credentials for the storage account {location.account!r}: set "
                      "azure_storage_account_key, azure_storage_sas_token or "
                      "azure_storage_token in storage_options (or azure_client_id with "
                      "azure_client_secret, azure_use_azure_cli, a managed identity's "
                      "azure_msi_endpoint / azure_object_id, which need azure-identity)")
    try:
        import azure.identity as identity  # optional: service principals, managed identities
    except ImportError:
        return None, ("these storage_options need the azure-identity package "
                      "(pip install azure-identity), or give an account key or SAS token")
    tenant = opt(options, *TENANT)
    if client_id and secret:
        if tenant is None:
            raise InvalidArgumentError("azure_client_secret needs azure_tenant_id too")
        return identity.ClientSecretCredential(tenant, client_id, secret), None
    if cli:
        return identity.AzureCliCredential(), None
    if (token_file := opt(options, *FEDERATED_TOKEN)) is not None:
        return identity.WorkloadIdentityCredential(tenant_id=tenant, client_id=client_id,
                                                   token_file_path=token_file), None
    return identity.ManagedIdentityCredential(client_id=client_id), None
