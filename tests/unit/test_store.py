"""The store layer: semantics on every backend (the conformance tests run on the local store,
S3, Azure and GCS), atomicity across processes, wrappers. What only a cloud store has
(conditional-write races, credentials, endpoints) is in ``test_cloud_stores.py``."""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import threading
import unittest.mock

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import lakevilla as lv
from benchmarks.common import LatencyProxy
from lakevilla.errors import ConditionalWritesUnsupportedError, InvalidArgumentError
from lakevilla.store import (
    CountingStore,
    FaultInjectingStore,
    FaultPlan,
    LatencyProfile,
    LatencyStore,
    LocalStore,
    NotFound,
    PreconditionFailed,
    RetryingStore,
    SimulatedCrash,
    TransientStoreError,
    open_store,
)
from lakevilla.store import local as local_store
from tests.conftest import make_bucket, rows, s3_options

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])
EVERY_CLOUD = pytest.mark.also_on("azure", "gcs")


@EVERY_CLOUD
def test_basic_semantics(backend):
    s = backend.store()
    with pytest.raises(NotFound):
        s.get("a/b.json")
    with pytest.raises(NotFound):
        s.head("a/b.json")
    e1 = s.put_if_absent("a/b.json", b"one")
    assert s.get("a/b.json").data == b"one" and s.get("a/b.json").etag == e1
    assert s.head("a/b.json").size == 3 and s.head("a/b.json").etag == e1
    with pytest.raises(PreconditionFailed):
        s.put_if_absent("a/b.json", b"two")
    assert s.get("a/b.json").data == b"one"
    with pytest.raises(PreconditionFailed):
        s.put_if_match("a/b.json", b"three", "0" * 32)
    e2 = s.put_if_match("a/b.json", b"four", e1)
    assert e2 != e1 and s.get("a/b.json").data == b"four"
    with pytest.raises(PreconditionFailed):
        s.put_if_match("a/b.json", b"five", e1)  # stale etag loses
    with pytest.raises(NotFound if backend.kind in ("local", "s3") else PreconditionFailed):
        s.put_if_match("a/missing.json", b"x", e1)  # Azure and GCS answer 412 (base.py)
    assert not s.exists("a/missing.json")
    s.put("a/b.json", b"six")
    assert s.get("a/b.json").data == b"six"
    s.delete("a/b.json")
    s.delete("a/b.json")  # deleting a missing key is fine, as on S3
    assert not s.exists("a/b.json")


@EVERY_CLOUD
def test_ranged_reads_are_one_counted_get(backend):
    """Footers of data files are read by range, through the wrappers like every other request:
    one GET each, and a HEAD before a suffix read where the store has no suffix ranges
    (Azure), counted as such."""
    s = CountingStore(FaultInjectingStore(backend.store()))
    data = bytes(range(256)) * 4
    s.put("r/f.parquet", data)
    s.reset()
    assert s.get_range("r/f.parquet", 10, 5) == data[10:15]
    assert s.get_range("r/f.parquet", 1000) == data[1000:]
    assert s.get_range("r/f.parquet", -8) == data[-8:]
    assert s.get_range("r/f.parquet", -5000) == data  # a suffix longer than the object: all of it
    assert s.get_range("r/f.parquet", 5000) == b""  # from past the end: nothing
    heads = 2 if backend.kind == "azure" else 0
    assert s.counts == ({"get": 5, "head": heads} if heads else {"get": 5})
    assert s.bytes_read == 5 + 24 + 8 + len(data)
    with pytest.raises(NotFound):
        s.get_range("r/missing", -8)
    dying = FaultInjectingStore(backend.store(), FaultPlan(crash_before=1))
    with pytest.raises(SimulatedCrash):
        dying.get_range("r/f.parquet", -8)


@EVERY_CLOUD
def test_the_fault_kinds_are_settled_alike_on_every_store(backend):
    """The faults every protocol test injects, on each backend's own etags and errors: a
    request that fails before it is applied is retried once it passes; one applied whose reply
    is lost (a conditional write included) is recognised by reading our bytes back, under the
    etag the store now has; a non-retryable failure before or after the write is settled by
    ``settle_create`` / ``settle_replace`` as not applied or applied; a key left unreachable
    stays so for that client while a healthy one sees the write; a crash stops the client
    before or after its call."""
    from lakevilla.errors import StorageError
    from lakevilla.store import settle_create, settle_replace

    base = backend.store()
    healthy = base.inner if isinstance(base, RetryingStore) else base

    def client(**plan):
        faults = FaultInjectingStore(healthy, FaultPlan(**plan))
        return RetryingStore(faults, attempts=3, base_delay=0.001), faults

    s, _ = client(transient={1})  # fails before it is applied, then passes
    etag = s.put_if_absent("f/a", b"a1")
    assert base.get("f/a").data == b"a1" and base.head("f/a").etag == etag
    s, _ = client(transient_after={1, 2})  # applied, replies lost: read back, ours
    etag = s.put_if_absent("f/b", b"b1")
    assert base.head("f/b").etag == etag and base.get("f/b").data == b"b1"
    etag = s.put_if_match("f/b", b"b2", etag)
    assert base.head("f/b").etag == etag and base.get("f/b").data == b"b2"
    s, _ = client(fail_before={1}, fail_after={2})
    with pytest.raises(StorageError):
        s.put_if_absent("f/c", b"c1")  # not applied
    assert not base.exists("f/c")
    assert settle_create(base, "f/c", b"c1") == base.head("f/c").etag  # a retry of it lands
    c_etag = base.head("f/c").etag
    with pytest.raises(StorageError):
        s.put_if_match("f/c", b"c2", c_etag)  # applied, then reported failed
    assert settle_replace(base, "f/c", b"c2", c_etag) == base.head("f/c").etag
    assert base.get("f/c").data == b"c2"
    s, faults = client(exhaust_after={1})
    with pytest.raises(TransientStoreError):
        s.put_if_absent("f/d", b"d1")  # applied; then every request on it fails here
    with pytest.raises(TransientStoreError):
        s.get("f/d")
    assert base.get("f/d").data == b"d1" and faults.injected[0][1] == "exhaust_after"
    s, _ = client(crash_before=1)
    with pytest.raises(SimulatedCrash):
        s.put_if_absent("f/e", b"e1")
    assert not base.exists("f/e")
    s, _ = client(crash_after=1)
    with pytest.raises(SimulatedCrash):
        s.put_if_absent("f/e", b"e1")
    assert base.get("f/e").data == b"e1"


@EVERY_CLOUD
def test_delete_many_is_one_request_per_batch_through_every_wrapper(backend, monkeypatch):
    """What a transaction leaves behind (sublogs, redone files) goes in as few requests as the
    store allows: S3's DeleteObjects, up to 1,000 keys each, Azure's blob batch, up to 256
    (3 here); GCS one DELETE a key. Counted, fault-injected and retried as one call; missing
    keys are not an error."""
    import lakevilla.store.azure as azure_module
    import lakevilla.store.base as base_module
    import lakevilla.store.s3 as s3_module

    for module in (base_module, s3_module):
        monkeypatch.setattr(module, "DELETE_BATCH", 3)
    monkeypatch.setattr(azure_module, "BATCH", 3)
    inner = backend.store()
    bottom = inner
    while hasattr(bottom, "inner"):
        bottom = bottom.inner
    if backend.kind == "s3":  # the batch must be one DeleteObjects, never a DELETE per key
        def no_single_deletes(**kw):
            raise AssertionError(f"DeleteObject {kw.get('Key')}")
        monkeypatch.setattr(bottom.client, "delete_object", no_single_deletes)
    faults = FaultInjectingStore(inner)
    s = CountingStore(RetryingStore(faults))
    keys = [f"d/{i}" for i in range(7)]
    for k in keys:
        s.put(k, b"x")
    dying = FaultInjectingStore(inner, FaultPlan(crash_before=1))
    with pytest.raises(SimulatedCrash):
        dying.delete_many(keys)
    assert len(list(s.list("d/"))) == 7  # one call, one fate: a crash before it deletes nothing
    s.reset()
    before = faults.calls
    s.delete_many(keys + ["d/missing"])
    # 8 keys, batches of 3 (GCS: one a key); one call
    requests = 8 if backend.kind == "gcs" else 3
    assert s.counts == {"delete": requests} and faults.calls - before == 1
    assert list(s.list("d/")) == []
    s.delete_many([])
    assert s.counts["delete"] == requests  # nothing to delete: no request


@EVERY_CLOUD
def test_list_prefix_start_after_and_pages(backend):
    s = backend.store()
    keys = [f"t/_delta_log/{i:020d}.json" for i in range(25)] + ["t/data/x.parquet", "tt/y", "u/z"]
    for k in keys:
        s.put(k, b"x")
    got = [m.key for m in s.list("t/_delta_log/")]
    assert got == sorted(k for k in keys if k.startswith("t/_delta_log/"))
    after = [m.key for m in s.list("t/_delta_log/",
                                   start_after="t/_delta_log/00000000000000000019.json")]
    assert after == [f"t/_delta_log/{i:020d}.json" for i in range(20, 25)]
    page = s.list_page("t/_delta_log/", max_keys=10)
    assert len(page.items) == 10 and page.next_token is not None
    paged = [m.key for m in s.list("t/_delta_log/", max_keys=7)]
    assert paged == got
    assert [m.key for m in s.list("t")] == sorted(k for k in keys if k.startswith("t"))
    counting = CountingStore(s)
    list(counting.list("t/_delta_log/", max_keys=10))
    assert counting.counts["list"] == 3  # 25 keys, 10 per page


@EVERY_CLOUD
def test_listing_after_a_key_is_in_byte_order_across_pages(backend):
    """A log's refresh lists from its newest known version: every key after the start, in
    UTF-8 byte order, whatever sorts around '/' ('.', '-' before it; '0', '_', 'a', 'é' after),
    with one page after another. On Azure the start is sent as a listing offset and the store
    drops what precedes it (Azurite ignores the offset)."""
    s = backend.store()
    keys = ["t/0.json", "t/0-1", "t/0/a", "t/0/b", "t/00", "t/A", "t/_x", "t/a", "t/a.b", "t/ab",
            "t/é/x", "t/éa", "u/0"]  # (no key is a folder of another: the local store's rule)
    for k in keys:
        s.put(k, b"x")
    want = sorted((k for k in keys if k.startswith("t/")), key=lambda k: k.encode())
    assert [m.key for m in s.list("t/", max_keys=2)] == want
    for start in ["t/", "t/0", "t/0/", "t/0/a", "t/00", "t/a", "t/az", "t/é", "t/é/x", "a", "v",
                  "t/0.json"]:
        got = [m.key for m in s.list("t/", start_after=start, max_keys=2)]
        assert got == [k for k in want if k.encode() > start.encode()], start
    sub = [m.key for m in s.list("t/0", start_after="t/0.json", max_keys=2)]
    assert sub == [k for k in want if k.startswith("t/0") and k > "t/0.json"]


# names whose order around '/' matters: '.' and '-' sort before it, '0' and '_' after
_NAMES = ["0", "00", "0.json", "0-1", "0/", "a", "a.b", "a-", "ab", "_x", "b", "é"]


@st.composite
def _trees(draw):
    """Keys that can coexist as files (no key is a folder of another), a prefix, a start."""
    keys: set[str] = set()
    for parts in draw(st.lists(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=3),
                                max_size=25)):
        key = "/".join(p.rstrip("/") for p in parts)
        if all(not (o.startswith(key + "/") or key.startswith(o + "/")) for o in keys):
            keys.add(key)
    texts = st.lists(st.sampled_from(_NAMES), max_size=3).map("/".join)
    if keys:  # cuts of the keys themselves: folders, names half typed
        texts = texts | st.tuples(st.sampled_from(sorted(keys)), st.integers(0, 8)).map(
            lambda ki: ki[0][:ki[1]])
    return sorted(keys), draw(texts), draw(st.none() | texts), draw(st.integers(1, 6))


@settings(max_examples=150, deadline=None)
@given(_trees())
@example((["0/0"], "0//0", None, 1))  # folders the file system folds: no key names them
@example((["0/0"], "./0", None, 1))
@example((["0/0", "0.json", "0-1/a"], "", "0", 1))  # '.' and '-' sort before '/'
@example((["0/0"], "0/", "00", 1))  # a start past the prefix's folder
def test_a_local_listing_is_the_keys_after_its_start_in_byte_order(tmp_path_factory, tree):
    """The local LIST compares names folder by folder instead of sorting every key: it must
    still give exactly S3's answer, every key under the prefix after ``start_after`` in UTF-8
    byte order, page by page, whatever '/' sorts against."""
    keys, prefix, start, page = tree
    s = LocalStore(str(tmp_path_factory.mktemp("tree")))
    for k in keys:
        s.put(k, b"x")
    folder = next((k.rpartition("/")[0] for k in keys if "/" in k), "")
    open(os.path.join(s.root, folder, ".lv-tmp-unpublished"), "wb").close()  # a write under way
    want = sorted((k for k in keys if k.startswith(prefix) and (start is None or k > start)),
                  key=lambda k: k.encode())
    for each_up_to in (0, local_store._STAT_EACH_UP_TO):  # both ways of telling folders apart
        with unittest.mock.patch.object(local_store, "_STAT_EACH_UP_TO", each_up_to):
            listed = itertools.islice(s.list(prefix, start_after=start, max_keys=page),
                                      len(want) + 1)  # a page that repeats one fails, not hangs
            assert [m.key for m in listed] == want


def _race_put_if_absent(root: str, keys: list[str], me: int, barrier, out) -> None:
    s = LocalStore(root)
    for key in keys:
        barrier.wait()  # every round starts together, so the puts really race
        try:
            s.put_if_absent(key, f"writer {me}".encode())
            out.put((key, me))
        except PreconditionFailed:
            out.put((key, -1))


def test_local_put_if_absent_one_winner_across_processes(tmp_path):
    ctx = mp.get_context("spawn")
    root = str(tmp_path / "lake")
    LocalStore(root)
    n, keys = 6, [f"race/{rnd}.json" for rnd in range(5)]
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_race_put_if_absent, args=(root, keys, i, barrier, out))
             for i in range(n)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in range(n * len(keys))]
    for p in procs:
        p.join(60)
    for key in keys:
        winners = [me for k, me in results if k == key and me >= 0]
        assert len(winners) == 1, (key, results)
        assert LocalStore(root).get(key).data == f"writer {winners[0]}".encode()


def _cas_increment(root: str, key: str, times: int, barrier, out) -> None:
    s = LocalStore(root)
    barrier.wait()  # start together, so the increments really race
    conflicts, first = 0, True
    for _ in range(times):
        while True:
            got = s.get(key)
            if first:  # every process holds the same etag once: a collision however they run
                barrier.wait()
                first = False
            try:
                s.put_if_match(key, str(int(got.data) + 1).encode(), got.etag)
                break
            except PreconditionFailed:
                conflicts += 1
    out.put(conflicts)


def test_local_put_if_match_is_compare_and_swap_across_processes(tmp_path):
    """4 processes x 50 CAS increments: any lost update would show as a smaller total."""
    ctx = mp.get_context("spawn")
    root = str(tmp_path / "lake")
    LocalStore(root).put("counter", b"0")
    out, barrier = ctx.Queue(), ctx.Barrier(4)
    procs = [ctx.Process(target=_cas_increment, args=(root, "counter", 50, barrier, out))
             for _ in range(4)]
    for p in procs:
        p.start()
    conflicts = sum(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
    assert int(LocalStore(root).get("counter").data) == 200
    assert conflicts > 0  # the processes really did collide


def test_endpoint_without_conditional_writes_is_refused(moto_endpoint):
    bucket = make_bucket(moto_endpoint)
    # an endpoint that ignores conditional headers: moto behind a proxy that drops them
    proxy = LatencyProxy(moto_endpoint, drop_headers=("if-none-match", "if-match"))
    try:
        s = open_store(f"s3://{bucket}/p", s3_options(proxy.url))
        s.put("plain", b"ok")  # ordinary requests pass
        with pytest.raises(ConditionalWritesUnsupportedError, match="ignores conditional writes"):
            s.put_if_absent("x", b"1")
        assert not s.exists("x")
        # the same bucket straight at moto honours them
        open_store(f"s3://{bucket}/p", s3_options(moto_endpoint)).put_if_absent("x", b"1")
    finally:
        proxy.close()


def test_open_store_backends(tmp_path, moto_endpoint):
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    assert isinstance(open_store("file://" + str(tmp_path)), LocalStore)
    assert isinstance(open_store(f"s3://{make_bucket(moto_endpoint)}", s3_options(moto_endpoint)),
                      RetryingStore)
    with pytest.raises(InvalidArgumentError, match="unsupported lake URI"):
        open_store("hdfs://namenode/x")
    with pytest.raises(InvalidArgumentError):
        open_store(str(tmp_path), {"AWS_REGION": "x"})


def test_counting_store_counts_by_kind(tmp_path):
    s = CountingStore(LocalStore(str(tmp_path)))
    s.put("a", b"1")
    s.put_if_absent("b", b"2")
    etag = s.get("a").etag
    s.put_if_match("a", b"3", etag)
    s.head("a")
    list(s.list(""))
    s.delete("b")
    with pytest.raises(NotFound):
        s.get("missing")
    assert dict(s.counts) == {"put": 1, "put_if_absent": 1, "get": 2, "put_if_match": 1, "head": 1,
                              "list": 1, "delete": 1}
    assert s.reads == 4 and s.writes == 4


def test_fault_injection_crash_before_and_after(tmp_path):
    inner = LocalStore(str(tmp_path))
    before = FaultInjectingStore(inner, FaultPlan(crash_before=2))
    before.put("k1", b"1")
    with pytest.raises(SimulatedCrash):
        before.put("k2", b"2")
    assert not inner.exists("k2")  # call 2 never happened
    with pytest.raises(SimulatedCrash):
        before.get("k1")  # a dead client stays dead
    after = FaultInjectingStore(inner, FaultPlan(crash_after=1))
    with pytest.raises(SimulatedCrash):
        after.put("k3", b"3")
    assert inner.get("k3").data == b"3"  # call 1 happened, then the client died


def test_retries_absorb_transient_errors_and_resolve_ambiguous_writes(tmp_path):
    inner = LocalStore(str(tmp_path))
    flaky = FaultInjectingStore(inner, FaultPlan(transient={1, 2}, transient_after={4, 7}))
    s = RetryingStore(flaky, base_delay=0.001)
    s.put("a", b"x")  # calls 1, 2 fail, call 3 succeeds
    assert inner.get("a").data == b"x"
    # call 4 writes then "times out"; retry 5 gets 412; call 6 reads back: ours
    etag = s.put_if_absent("b", b"y")
    assert inner.get("b").data == b"y" and etag == inner.get("b").etag
    s.put_if_match("b", b"z", etag)  # call 7 applies and fails; retry sees 412 and its own bytes
    assert inner.get("b").data == b"z"
    with pytest.raises(PreconditionFailed):
        s.put_if_absent("b", b"other")  # a real conflict stays a conflict
    always = RetryingStore(FaultInjectingStore(inner, FaultPlan(transient_rate=1.0)), attempts=3,
                           base_delay=0.001)
    with pytest.raises(TransientStoreError):
        always.get("a")


def test_latency_profile_and_passthrough(tmp_path):
    p = LatencyProfile(get=0.01, put=0.02, list=0.03, head=0.005, delete=0.004,
                       bytes_per_second=1e6)
    assert p.delay("get") == 0.01
    assert p.delay("put_if_absent", 1000) == pytest.approx(0.021)
    assert p.delay("list") == 0.03
    s = CountingStore(LatencyStore(LocalStore(str(tmp_path)), LatencyProfile()))
    s.put("a", b"1")
    assert s.get("a").data == b"1" and s.counts["get"] == 1


def test_local_writes_survive_concurrent_pruning_of_empty_directories(tmp_path):
    """A delete drops the directories it leaves empty (S3 has none); a write racing it into
    the same directory tree must still land, never fail with FileNotFoundError."""
    store = LocalStore(str(tmp_path))
    rounds = 400
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def churn(tag: str) -> None:
        start.wait()
        try:
            for i in range(rounds):
                key = f"a/b/c/{tag}-{i}"
                store.put(key, b"x")
                store.delete(key)  # leaves a/b/c empty: pruned up to the root
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def deeper() -> None:
        start.wait()
        try:
            for i in range(rounds):
                store.put_if_absent(f"a/b/c/d/deep-{i}", b"k")
                store.delete(f"a/b/c/d/deep-{i}")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=churn, args=("p",)),
               threading.Thread(target=churn, args=("q",)), threading.Thread(target=deeper)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    store.put("a/b/c/last", b"z")
    assert store.get("a/b/c/last").data == b"z"


def test_conditional_writes_emulate_works_where_the_endpoint_ignores_them(moto_endpoint):
    from benchmarks.common import LatencyProxy
    from lakevilla.store import PreconditionFailed, open_store
    from tests.conftest import make_bucket, s3_options

    bucket = make_bucket(moto_endpoint)
    proxy = LatencyProxy(moto_endpoint, drop_headers=("if-none-match", "if-match"))
    try:
        opts = s3_options(proxy.url)
        with pytest.warns(UserWarning, match="not atomic"):  # the README's caveat, said at open
            s = open_store(f"s3://{bucket}/lake", opts, conditional_writes="emulate")
        etag = s.put_if_absent("k", b"1")
        with pytest.raises(PreconditionFailed):
            s.put_if_absent("k", b"2")
        with pytest.raises(PreconditionFailed):
            s.put_if_match("k", b"3", "not-the-etag")
        s.put_if_match("k", b"4", etag)
        assert s.get("k").data == b"4"
        lake = lv.Lake(f"s3://{bucket}/lake", storage_options=opts, store=s)
        lake.create_table("a", T)
        with pytest.raises(lv.TableExistsError):
            lake.create_table("a", T)
        with lake.transaction("R") as t:
            t.insert("a", {"id": [1], "value": [7]})
        with lake.transaction("R") as t:
            t.update("a", set={"value": "value + 1"}, where="id = 1")
        assert rows(lake.read("a")) == [{"id": 1, "value": 8}]
    finally:
        proxy.close()


def test_local_store_fsync_syncs_every_write(tmp_path, monkeypatch):
    from lakevilla.store import local

    synced = []
    real = os.fsync
    monkeypatch.setattr(local.os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    plain = lv.Lake(str(tmp_path / "plain"))
    plain.create_table("a", T)
    assert synced == []  # off by default
    lake = lv.Lake(str(tmp_path / "synced"),
                   store=local.LocalStore(str(tmp_path / "synced"), fsync=True))
    lake.create_table("a", T)
    n = len(synced)
    assert n >= 1
    with lake.transaction("R") as t:
        t.insert("a", {"id": [1], "value": [1]})
    lake.flush()
    assert len(synced) >= n + 3  # data file, marker, commit (at least)
    assert rows(lake.read("a")) == [{"id": 1, "value": 1}]
