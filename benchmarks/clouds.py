"""Benchmarks on Azure and GCS: the emulator, a container or bucket, and the storage options
that reach it, through the latency proxy when a profile is set.

On Azure the proxy stands where delta-rs finds Azurite (``AZURITE_BLOB_STORAGE_URL``, which
spawned clients inherit), so delta-rs pays the simulated latency and crosses the counting
proxy as lakevilla does. On GCS no emulator serves delta-rs (it speaks GCS' XML API): the
delta-rs system is not run there, and where a benchmark judges with delta-rs it reads a copy of
the table taken through our store into a local folder (``delta_rs_view``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from lakevilla.store import LocalStore, ObjectStore
from lakevilla.store.azure_config import EMULATOR_ACCOUNT, EMULATOR_URL_ENV

from . import emulators

CLOUDS = ("azure", "gcs")


def start(kind: str) -> tuple[str, Any]:
    """The emulator of ``kind``: (endpoint, stop)."""
    return emulators.start_azurite() if kind == "azure" else emulators.start_fake_gcs()


def new_root(kind: str, endpoint: str, name: str) -> str:
    """A fresh container (bucket) on the emulator, and a lake root under ``name`` in it."""
    if kind == "azure":
        return f"az://{emulators.make_container(endpoint)}/{name}"
    return f"gs://{emulators.make_bucket(endpoint)}/{name}"


def options(kind: str, endpoint: str) -> dict[str, str]:
    """The storage options through which lakevilla (and on Azure delta-rs) reach ``endpoint``:
    on Azure delta-rs' own emulator option, the URL set in the environment as delta-rs reads
    it; on GCS a key naming the endpoint."""
    if kind == "azure":
        os.environ[EMULATOR_URL_ENV] = endpoint
        return emulators.azure_options()
    return emulators.gcs_options(endpoint)


def direct_options(kind: str, endpoint: str) -> dict[str, str]:
    """Options that reach the emulator itself, whatever the environment says (lakevilla
    only): for fixtures that should not pay the simulated latency."""
    if kind == "azure":
        return {**emulators.azure_options(),
                "azure_storage_endpoint": f"{endpoint}/{EMULATOR_ACCOUNT}"}
    return emulators.gcs_options(endpoint)


def delta_rs_view(root: str, table: str, store: ObjectStore,
                  opts: dict[str, str] | None) -> tuple[str, dict[str, str] | None, Any]:
    """(uri, options, cleanup) at which delta-rs reads ``table`` of the lake at ``root``: the
    table itself, or on GCS a local copy of its objects (read through ``store``)."""
    if not root.startswith("gs://"):
        return f"{root}/{table}", opts, lambda: None
    folder = tempfile.mkdtemp(prefix="lakevilla-gcs-view-")
    return copy_table(store, table, folder), None, lambda: shutil.rmtree(folder, ignore_errors=True)


def copy_table(store: ObjectStore, table: str, folder: str) -> str:
    """Every object of ``table`` (its log, data and deletion-vector files, byte for byte) into
    the local ``folder``; the copy's path."""
    dst = LocalStore(folder)
    for meta in store.list(f"{table}/"):
        dst.put(meta.key, store.get(meta.key).data)
    return f"{folder}/{table}"
