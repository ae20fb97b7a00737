"""What only a cloud store has: conditional-write races decided for one writer, the check that
an endpoint honours conditions, requests counted as they cross the wire, URIs and credentials,
and what a user meets with a missing bucket, wrong keys or a read-only credential. Each runs
against the emulator the tests start (moto, Azurite, fake-gcs-server) on 127.0.0.1; a proxy
stands in front of it where a test needs an endpoint that misbehaves (answers 401, drops a
condition)."""

from __future__ import annotations

import json
import re
import socket
import threading
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

import lakevilla as lv
from benchmarks import emulators
from benchmarks.common import CountingLatencyProxy, LatencyProxy, QuietHTTPServer
from lakevilla.store import (
    CountingStore,
    PreconditionFailed,
    StoreAddress,
    open_address,
    open_store,
)
from lakevilla.store.azure_config import EMULATOR_ACCOUNT, EMULATOR_KEY, EMULATOR_URL_ENV, locate
from lakevilla.store.gcs_config import locate as gcs_locate
from tests.conftest import Backend, rows

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])
CLOUDS = pytest.mark.parametrize("cloud", ["s3", "azure", "gcs"], indirect=True)
AZURE_GCS = pytest.mark.parametrize("cloud", ["azure", "gcs"], indirect=True)


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch):
    """No request of these tests leaves the machine: a connection (or a name lookup) to
    anything but loopback fails at once, so a client that fell back to a cloud's metadata
    service or public endpoint shows as a failure, not as a request sent."""
    real_connect, real_lookup = socket.socket.connect, socket.getaddrinfo

    def loopback(host) -> bool:
        return str(host) in ("127.0.0.1", "::1", "localhost")

    def connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not loopback(address[0]):
            raise OSError(f"test guard: no connection to {address[0]} (loopback only)")
        return real_connect(sock, address)

    def getaddrinfo(host, *args, **kwargs):
        if host is not None and not loopback(host if isinstance(host, str) else host.decode()):
            raise socket.gaierror(f"test guard: no lookup of {host} (loopback only)")
        return real_lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def _keys(backend: Backend) -> list[str]:
    return sorted(m.key for m in backend.store().list(""))


def _bank(backend: Backend) -> lv.Lake:
    lake = backend.lake()
    lake.create_table("a", T)
    with lake.transaction("R") as t:
        t.insert("a", {"id": [1, 2], "value": [10, 20]})
    return lake


# -- races ---------------------------------------------------------------------------------

@CLOUDS
def test_conditional_races_have_one_winner(cloud):
    """Every protocol here rests on the store deciding a put-if-absent race for exactly one
    writer, and an If-Match race too. 8 threads race on each of 300 keys (S3: stock moto let 4
    of 300 such rounds have two winners, hence benchmarks/moto_server.py) or 100 (Azurite,
    fake-gcs-server), then 6 threads make 30 compare-and-swap increments of one counter."""
    s = cloud.store()
    rounds = 300 if cloud.kind == "s3" else 100
    bad, losers = [], 0
    with ThreadPoolExecutor(8) as ex:
        for rnd in range(rounds):
            key = f"race/{rnd}"
            start = threading.Barrier(8)

            def attempt(i, key=key, start=start):
                start.wait()  # all eight requests leave together
                try:
                    s.put_if_absent(key, str(i).encode())
                    return i
                except PreconditionFailed:
                    return -1

            winners = [r for r in ex.map(attempt, range(8)) if r >= 0]
            losers += 8 - len(winners)
            if len(winners) != 1 or s.get(key).data != str(winners[0]).encode():
                bad.append((rnd, winners))
    assert bad == [], f"rounds without exactly one winner: {bad}"
    s.put("ctr", b"0")
    conflicts = []

    def incr(_):
        while True:
            g = s.get("ctr")
            try:
                s.put_if_match("ctr", str(int(g.data) + 1).encode(), g.etag)
                return
            except PreconditionFailed:
                conflicts.append(1)

    with ThreadPoolExecutor(6) as ex:
        list(ex.map(incr, range(30)))
    assert s.get("ctr").data == b"30"
    print(f"\n{cloud.kind}: {rounds} put-if-absent races of 8, one winner each "
          f"({losers} losers refused); 30 CAS increments, {len(conflicts)} lost a race")


# -- endpoints that ignore conditions ---------------------------------------------------

def _sas(container: str, **permissions: bool) -> str:
    from datetime import UTC, datetime, timedelta

    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    return generate_container_sas(EMULATOR_ACCOUNT, container, account_key=EMULATOR_KEY,
                                  permission=ContainerSasPermissions(**permissions),
                                  expiry=datetime.now(UTC) + timedelta(hours=1))


def _through(cloud: Backend, proxy_url: str, sas: str | None = None) -> Backend:
    """``cloud``'s lake through a proxy at ``proxy_url`` (Azure: signed by a SAS token, which
    signs no headers, so that the proxy may drop some)."""
    if cloud.kind == "azure":
        container = urllib.parse.urlparse(cloud.uri).netloc
        opts = {"azure_storage_account_name": EMULATOR_ACCOUNT,
                "azure_storage_endpoint": f"{proxy_url}/{EMULATOR_ACCOUNT}",
                "azure_storage_sas_token": sas or _sas(container, read=True, write=True,
                                                       delete=True, list=True, create=True)}
        return Backend("azure", cloud.uri, opts)
    return Backend("gcs", cloud.uri, emulators.gcs_options(proxy_url))


@AZURE_GCS
def test_a_store_that_ignores_conditional_writes_is_refused(cloud):
    """An endpoint that drops the conditions (Azure's If-None-Match / If-Match headers, GCS'
    ifGenerationMatch) is found out by the first conditional write and refused, before any
    lakevilla object is written; straight at the emulator the same container works."""
    proxy = LatencyProxy(cloud.endpoint, drop_headers=("if-none-match", "if-match"),
                         drop_query=("ifGenerationMatch",))
    try:
        careless = _through(cloud, proxy.url).store()
        careless.put("plain", b"ok")  # ordinary requests pass
        with pytest.raises(lv.ConditionalWritesUnsupportedError, match="ignores"):
            careless.put_if_absent("x", b"1")
        assert _keys(cloud) == ["plain"]  # the probe was deleted; x was never written
        cloud.store().put_if_absent("x", b"1")
    finally:
        proxy.close()


# -- every request counted ---------------------------------------------------------------

@CLOUDS
def test_the_wrappers_count_every_request_a_call_sends(cloud):
    """CountingStore counts what crosses the wire, on every cloud: the same kinds and numbers
    as a proxy in front of the emulator sees (a suffix read on Azure is a HEAD and a GET;
    a batch delete one request per batch; GCS one DELETE a key)."""
    proxy = CountingLatencyProxy(cloud.endpoint)
    try:
        if cloud.kind == "s3":
            b = Backend("s3", cloud.uri, {**cloud.storage_options,
                                          "AWS_ENDPOINT_URL": proxy.url})
        else:
            b = _through(cloud, proxy.url)
        s = CountingStore(b.store())
        s.put_if_absent("k/probe", b"p")  # the one-off check that conditions hold, not counted
        proxy.reset()
        s.reset()
        etag = s.put_if_absent("k/a", b"x" * 100)
        s.put_if_match("k/a", b"y" * 100, etag)
        with pytest.raises(PreconditionFailed):
            s.put_if_match("k/a", b"z", etag)
        s.put("k/b", b"b")
        s.get("k/a")
        s.head("k/a")
        s.get_range("k/a", 3, 4)
        s.get_range("k/a", -10)
        for i in range(5):
            s.put(f"k/c{i}", b"c")
        list(s.list("k/", max_keys=3))
        list(s.list("k/", start_after="k/c2", max_keys=3))
        s.delete("k/b")
        s.delete_many([f"k/c{i}" for i in range(5)])
        assert dict(s.counts) == {k: v for k, v in proxy.snapshot().items() if v}
    finally:
        proxy.close()


# -- what a user meets -------------------------------------------------------------------

@CLOUDS
def test_a_missing_bucket_or_container_is_named_and_nothing_is_made(cloud):
    b = Backend(cloud.kind, cloud.uri.replace(urllib.parse.urlparse(cloud.uri).netloc,
                                              "lv-no-such-bucket", 1), cloud.storage_options)
    lake = b.lake()  # no request yet: fine
    for look in (lake.tables, lambda: lake.read("a")):
        with pytest.raises(lv.BucketNotFoundError, match="lv-no-such-bucket.* does not exist"):
            look()
    with pytest.raises(lv.BucketNotFoundError):
        lake.create_table("a", T)
    with pytest.raises(lv.TransactionAborted) as err:
        with lake.transaction("R,CT") as txn:
            txn.insert("a", {"id": [1], "value": [1]})
    assert err.value.reason == "storage"
    assert isinstance(err.value.__cause__, lv.BucketNotFoundError)
    with pytest.raises(lv.BucketNotFoundError):  # lakevilla never makes one
        b.store().put("x", b"1")


def _refusing(status: int, message: str, methods: tuple[str, ...] | None = None):
    """A proxy action: answer ``status`` (with GCS' JSON error) to ``methods`` (None: all)."""
    body = json.dumps({"error": {"code": status, "message": message}}).encode()
    return lambda method, path, headers: (
        (status, body) if methods is None or method in methods else None)


@AZURE_GCS
def test_wrong_credentials_are_a_credentials_error_and_nothing_is_written(cloud):
    """Azure: a wrong account key (Azurite checks the signature: 403 AuthenticationFailed);
    GCS: an endpoint that answers 401, as GCS does to a bad token (fake-gcs-server checks no
    credentials)."""
    proxy = None
    if cloud.kind == "azure":
        import base64

        other_key = base64.b64encode(b"not the account's key" * 3).decode()
        wrong = {**cloud.storage_options, "azure_storage_account_key": other_key}
        b = Backend("azure", cloud.uri, wrong)
    else:
        proxy = LatencyProxy(cloud.endpoint, faults=_refusing(401, "Invalid Credentials"))
        b = _through(cloud, proxy.url)
    try:
        lake = b.lake()
        with pytest.raises(lv.StorageCredentialsError, match="rejected the credentials"):
            lake.create_table("a", T)
        with pytest.raises(lv.StorageCredentialsError):
            lake.tables()
        with pytest.raises(lv.TransactionAborted) as err:
            with lake.transaction("R") as txn:
                txn.insert("a", {"id": [1], "value": [1]})
        assert isinstance(err.value.__cause__, lv.StorageCredentialsError)
        assert _keys(cloud) == []
    finally:
        if proxy is not None:
            proxy.close()


@AZURE_GCS
def test_no_credentials_are_refused_before_any_request(cloud):
    """Options that name no credential: every request is refused before it is sent (nothing
    falls back to a cloud metadata service off this machine), naming the options to set."""
    proxy = CountingLatencyProxy(cloud.endpoint)  # what reaches the emulator crosses it
    try:
        if cloud.kind == "azure":
            opts = {"azure_storage_account_name": EMULATOR_ACCOUNT,
                    "azure_storage_endpoint": f"{proxy.url}/{EMULATOR_ACCOUNT}"}
            hint = "azure_storage_account_key"
        else:  # no endpoint without a key: a request would go to GCS and meet the guard
            opts, hint = {}, "google_service_account_key"
        lake = Backend(cloud.kind, cloud.uri, opts).lake()
        with pytest.raises(lv.StorageCredentialsError, match=hint):
            lake.create_table("a", T)
        with pytest.raises(lv.StorageCredentialsError):
            lake.read("a")
        assert proxy.snapshot() == {}
    finally:
        proxy.close()
    assert _keys(cloud) == []


@AZURE_GCS
def test_a_read_only_credential_reads_and_refuses_every_write(cloud):
    """A read-only credential (Azure: a container SAS with read and list; GCS: an endpoint that
    answers 403 to writes, as GCS does to a viewer role) serves reads as a read-only lake does
    on S3: reads, history and an isolated read work; a write is a StoragePermissionError and
    leaves nothing behind. With ``read_only=True`` nothing is even tried."""
    _bank(cloud).close()
    before = _keys(cloud)
    proxy = None
    if cloud.kind == "azure":
        container = urllib.parse.urlparse(cloud.uri).netloc
        opts = {"azure_storage_use_emulator": "true",
                "azure_storage_sas_token": _sas(container, read=True, list=True)}
        b = Backend("azure", cloud.uri, opts)
    else:
        proxy = LatencyProxy(cloud.endpoint, faults=_refusing(
            403, "viewer does not have storage.objects.create access", ("POST", "DELETE")))
        b = _through(cloud, proxy.url)
    try:
        lake = b.lake()
        assert rows(lake.read("a")) == [{"id": 1, "value": 10}, {"id": 2, "value": 20}]
        assert [e.version for e in lake.history("a")] == [1, 0]
        with pytest.raises(lv.StoragePermissionError, match="access denied"):
            lake.create_table("b", T)
        with pytest.raises(lv.TransactionAborted) as err:
            with lake.transaction("R") as txn:
                txn.update("a", set={"value": "value + 1"}, where="id = 1")
        assert err.value.reason == "storage"
        assert isinstance(err.value.__cause__, lv.StoragePermissionError)
        auditor = b.lake(read_only=True)
        with auditor.transaction("I") as txn:
            assert sum(txn.read("a").column("value").to_pylist()) == 30
        assert _keys(cloud) == before
    finally:
        if proxy is not None:
            proxy.close()


# -- URIs, addresses, emulators ------------------------------------------------------------

def test_azure_uris_name_the_container_account_and_endpoint(monkeypatch):
    monkeypatch.setenv(EMULATOR_URL_ENV, "http://127.0.0.1:9")
    loc = locate("az://cont/a/b", {"azure_storage_account_name": "acct"})
    assert (loc.container, loc.prefix, loc.account, loc.account_url) == (
        "cont", "a/b", "acct", "https://acct.blob.core.windows.net")
    loc = locate("abfss://cont@acct.dfs.core.windows.net/p", {})
    assert (loc.container, loc.prefix, loc.account, loc.account_url) == (
        "cont", "p", "acct", "https://acct.blob.core.windows.net")
    loc = locate("abfss://cont@acct.dfs.core.chinacloudapi.cn/p", {})
    assert loc.account_url == "https://acct.blob.core.chinacloudapi.cn"
    loc = locate("az://cont", {"azure_storage_use_emulator": "true"})
    assert (loc.account, loc.account_url, loc.prefix) == (
        EMULATOR_ACCOUNT, f"http://127.0.0.1:9/{EMULATOR_ACCOUNT}", "")
    assert locate("az://c/p", {"account_name": "x", "endpoint": "http://h:1/x/"}).account_url \
        == "http://h:1/x"
    with pytest.raises(lv.InvalidArgumentError, match="azure_storage_account_name"):
        locate("az://cont/p", {})
    with pytest.raises(lv.InvalidArgumentError, match="give one account"):
        locate("abfss://cont@acct.dfs.core.windows.net/p", {"azure_storage_account_name": "b"})
    assert gcs_locate("gs://bkt/x/y/").prefix == "x/y"
    with pytest.raises(lv.InvalidArgumentError, match="gs://bucket"):
        gcs_locate("gs:///x")


def test_an_abfss_lake_is_the_az_lake_of_the_same_account(azurite_endpoint):
    """ADLS Gen2's URI and the Blob one open the same lake: written through ``az://``, read
    through ``abfss://`` by lakevilla and delta-rs (Azurite serves the Blob endpoint)."""
    from deltalake import DeltaTable

    container = emulators.make_container(azurite_endpoint)
    opts = emulators.azure_options()
    _bank(Backend("azure", f"az://{container}/lake", opts)).close()
    abfss = f"abfss://{container}@{EMULATOR_ACCOUNT}.dfs.core.windows.net/lake"
    assert rows(lv.Lake(abfss, storage_options=opts).read("a")) == [
        {"id": 1, "value": 10}, {"id": 2, "value": 20}]
    got = DeltaTable(f"{abfss}/a", storage_options=opts).to_pyarrow_table().to_pylist()
    assert sorted(got, key=lambda r: r["id"]) == [{"id": 1, "value": 10}, {"id": 2, "value": 20}]


@AZURE_GCS
def test_another_process_opens_the_store_from_its_address(cloud, monkeypatch):
    """A Spark executor opens the lake's store from its address alone: the emulator's URL is
    pinned in it (the executor's environment need not name Azurite)."""
    store = cloud.store()
    store.put("k", b"v")
    address = store.address()
    assert isinstance(address, StoreAddress) and address.uri == cloud.uri
    monkeypatch.delenv(EMULATOR_URL_ENV, raising=False)
    assert open_address(address).get("k").data == b"v"


@AZURE_GCS
def test_a_missing_sdk_is_named_with_its_install_command(cloud, monkeypatch):
    import sys

    module = {"azure": "azure.storage.blob", "gcs": "google.cloud.storage"}[cloud.kind]
    monkeypatch.setitem(sys.modules, module, None)  # as if the package were not installed
    with pytest.raises(lv.InvalidArgumentError, match=rf"pip install 'lakevilla\[{cloud.kind}\]'"):
        open_store(cloud.uri, cloud.storage_options)


class OpaqueMarkers:
    """A proxy that gives Azurite's listing markers (its last name) the shape of Azure's (an
    opaque token): NextMarker is sealed in replies, and a request's marker must be one it
    sealed, else 400 as Azure answers a marker it never issued."""

    def __init__(self, target: str) -> None:
        import http.client
        from http.server import BaseHTTPRequestHandler

        self.issued: dict[str, str] = {}
        self.refused: list[str] = []
        self.starts: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                u = urllib.parse.urlparse(self.path)
                query = urllib.parse.parse_qsl(u.query, keep_blank_values=True)
                if any(k == "startfrom" or k == "startFrom" for k, _ in query):
                    outer.starts += [v for k, v in query if k.lower() == "startfrom"]
                kept = []
                for k, v in query:
                    if k == "marker":
                        if v not in outer.issued:
                            outer.refused.append(v)
                            return self._reply(400, b"<Error><Code>OutOfRangeInput</Code></Error>")
                        v = outer.issued[v]
                    kept.append((k, v))
                path = u.path + ("?" + urllib.parse.urlencode(kept) if kept else "")
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                conn = http.client.HTTPConnection(urllib.parse.urlparse(target).hostname,
                                                  urllib.parse.urlparse(target).port)
                conn.request(self.command, path, body=body or None,
                             headers={k: v for k, v in self.headers.items()
                                      if k.lower() not in ("host", "connection")})
                r = conn.getresponse()
                data = r.read()
                conn.close()
                data = re.sub(rb"<NextMarker>([^<]+)</NextMarker>", outer._seal, data)
                self._reply(r.status, data, [(k, v) for k, v in r.getheaders() if k.lower() not in
                                             ("content-length", "transfer-encoding", "connection")])

            def _reply(self, status, data, headers=()):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

            def log_message(self, *args):
                pass

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _seal(self, m: re.Match) -> bytes:
        token = f"opaque-{uuid.uuid4().hex}"
        self.issued[token] = m.group(1).decode()
        return f"<NextMarker>{token}</NextMarker>".encode()

    def close(self) -> None:
        self.server.shutdown()


def test_azure_listing_pages_on_with_the_services_own_markers(azurite_endpoint):
    """A listing continues with the marker the service gave, never one built from a key:
    behind a proxy whose markers are opaque (as Azure's are; Azurite's are the last name, so a
    store that made its own would pass against Azurite alone), every page after a start comes
    in order, and the start goes once, as Azure's ``startFrom``."""
    container = emulators.make_container(azurite_endpoint)
    proxy = OpaqueMarkers(azurite_endpoint)
    try:
        sas = _sas(container, read=True, write=True, list=True, create=True, delete=True)
        s = _through(Backend("azure", f"az://{container}/lake", {}), proxy.url, sas).store()
        keys = [f"t/_delta_log/{i:020d}.json" for i in range(9)]
        for k in keys:
            s.put(k, b"x")
        assert [m.key for m in s.list("t/_delta_log/", max_keys=2)] == keys
        after = [m.key for m in s.list("t/_delta_log/", start_after=keys[2], max_keys=2)]
        assert after == keys[3:]
        assert proxy.refused == [] and len(proxy.issued) >= 8
        assert proxy.starts == [f"lake/{keys[2]}"]
    finally:
        proxy.close()


def test_gcs_writes_are_json_multipart_uploads_of_any_size(gcs_endpoint):
    """Every write, conditional or not, of 1 byte or 9 MiB (above the SDK's 8 MiB switch to
    resumable uploads, whose preconditions emulators ignore), is one JSON API multipart upload
    carrying its precondition."""
    uploads: list[dict] = []

    def record(method, path, headers):
        u = urllib.parse.urlparse(path)
        if method == "POST":
            uploads.append({"path": u.path, **urllib.parse.parse_qs(u.query)})

    b = Backend("gcs", f"gs://{emulators.make_bucket(gcs_endpoint)}/lake", {})
    proxy = LatencyProxy(gcs_endpoint, faults=record)
    try:
        s = _through(b, proxy.url).store()
        big = b"x" * (9 * 1024 * 1024)
        etag = s.put_if_absent("big", big)
        with pytest.raises(PreconditionFailed):
            s.put_if_absent("big", big + b"!")
        s.put_if_match("big", big + b"?", etag)
        s.put("small", b"1")
        assert s.get("big").data == big + b"?"
        assert all(u["uploadType"] == ["multipart"] and u["path"].startswith("/upload/")
                   for u in uploads), uploads
        conditions = [u.get("ifGenerationMatch", [None])[0] for u in uploads[-4:]]
        assert conditions == ["0", "0", etag, None]
    finally:
        proxy.close()
