"""Shared fixtures: a moto S3 server, Azurite and fake-gcs-server on 127.0.0.1, and a backend
fixture that runs every storage test on the local filesystem and on S3, and the tests marked
``also_on("azure")`` / ``also_on("gcs")`` on those clouds too."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
# no credentials or endpoints from the developer's environment leak into tests
for _k in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
    os.environ.pop(_k, None)


# Property tests draw the same examples on every run (CI must not turn red on an example no
# one has seen); LV_HYPOTHESIS=explore draws new ones, to hunt for cases worth pinning with
# @example.
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
_hypothesis_settings.register_profile("explore", derandomize=False, print_blob=True)
_hypothesis_settings.load_profile(os.environ.get("LV_HYPOTHESIS", "ci"))

_exit_status = [0]


def pytest_sessionfinish(session, exitstatus):
    _exit_status[0] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """A test that failed before stopping its own background thread must not keep the run
    alive after the summary: name the threads left over and exit with pytest's status."""
    import sys
    import threading

    left = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon
            and not t.name.startswith(("ThreadPoolExecutor", "lakevilla"))]  # pools end at exit
    if left:
        sys.stdout.write(f"\nthreads left running after the tests: {[t.name for t in left]};"
                         " exiting\n")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status[0])


@pytest.fixture(scope="session")
def moto_endpoint():
    """moto's server in its own process: in the test process it would share one GIL with
    the clients it serves, and S3 tests would run at half speed on two cores."""
    from benchmarks.common import start_moto_process

    endpoint, stop = start_moto_process()
    yield endpoint
    stop()


@pytest.fixture(scope="session")
def azurite_endpoint():
    """Azurite's Blob service, one per worker; delta-rs finds it through the environment
    (``AZURITE_BLOB_STORAGE_URL``), which spawned clients inherit."""
    from benchmarks.emulators import start_azurite, use_azurite

    endpoint, stop = start_azurite()
    use_azurite(endpoint)
    yield endpoint
    stop()


@pytest.fixture(scope="session")
def gcs_endpoint():
    from benchmarks.emulators import start_fake_gcs

    endpoint, stop = start_fake_gcs()
    yield endpoint
    stop()


def s3_options(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }


def make_bucket(endpoint: str) -> str:
    import boto3

    name = f"lv-{uuid.uuid4().hex[:16]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=name)
    return name


@dataclass
class Backend:
    """Where a test's lake lives, and how to open it with lakevilla and with delta-rs."""

    kind: str
    uri: str
    storage_options: dict[str, str] = field(default_factory=dict)
    scratch: str = ""  # a folder of the test's, for the local copies delta-rs reads on GCS
    endpoint: str = ""  # the emulator's, on a cloud

    def fresh(self) -> Backend:
        """Another empty lake on the same store: a new bucket (container) on a cloud, whose
        LIST then scans only its own keys."""
        if self.kind == "local":
            path = self.uri[len("file://"):] + f"-{uuid.uuid4().hex[:8]}"
            return Backend("local", "file://" + path)
        make = {"s3": make_bucket, "azure": _emulators().make_container,
                "gcs": _emulators().make_bucket}[self.kind]
        scheme = self.uri.partition("://")[0]
        return Backend(self.kind, f"{scheme}://{make(self.endpoint)}/lake",
                       self.storage_options, self.scratch, self.endpoint)

    def lake(self, **kw):
        import lakevilla as lv

        return lv.Lake(self.uri, storage_options=self.storage_options or None, **kw)

    def store(self):
        from lakevilla.store import open_store

        return open_store(self.uri, self.storage_options or None)

    def table_uri(self, name: str) -> str:
        return f"{self.uri}/{name}"

    def delta(self, name: str, version: int | None = None):
        """delta-rs' view of a table. On GCS, where no emulator here serves delta-rs (it
        speaks GCS' XML API), it reads a copy of the table taken through our store into a
        local folder: the objects byte for byte, judged by delta-rs all the same."""
        from deltalake import DeltaTable

        if self.kind == "gcs":
            return DeltaTable(self.local_copy(name), version=version)
        return DeltaTable(self.table_uri(name), version=version,
                          storage_options=self.storage_options or None)

    def local_copy(self, name: str) -> str:
        from benchmarks.clouds import copy_table

        return copy_table(self.store(), name,
                          os.path.join(self.scratch, f"gcs-copy-{uuid.uuid4().hex[:8]}"))

    def delta_rows(self, name: str, version: int | None = None, sort_by: str = "id"):
        import pyarrow as pa
        from deltalake.exceptions import DeltaProtocolError

        try:
            t = pa.table(self.delta(name, version).to_pyarrow_table())
        except DeltaProtocolError:  # deletion vectors: only delta-rs' SQL reader applies them
            from tests.dv_tables import delta_rs_rows

            return sorted(delta_rs_rows(self.table_uri(name), version, self.storage_options),
                          key=lambda r: r[sort_by])
        return sorted(t.to_pylist(), key=lambda r: r[sort_by])

    def all_keys(self) -> list[str]:
        return sorted(m.key for m in self.store().list(""))


# Every storage test runs on the local store and on S3; ``@pytest.mark.also_on("azure")`` (or
# "gcs") adds a cloud: the samples tests/README.md lists, chosen for the suite's time.
BACKENDS = ("local", "s3")
ON_AZURE = pytest.mark.also_on("azure")
ON_AZURE_AND_GCS = pytest.mark.also_on("azure", "gcs")


def pytest_generate_tests(metafunc):
    """Parametrize ``backend`` by the stores a test runs on, unless it names them itself."""
    if "backend" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
        if "backend" in ([n.strip() for n in names.split(",")] if isinstance(names, str)
                         else names):
            return
    extra = [k for m in metafunc.definition.iter_markers("also_on") for k in m.args]
    metafunc.parametrize("backend", [*BACKENDS, *extra], indirect=True)


def _emulators():
    from benchmarks import emulators

    return emulators


def cloud_backend(request, kind: str) -> Backend:
    """A fresh bucket (or container) on ``kind``'s emulator, the lake under ``lake/``."""
    scratch = str(request.getfixturevalue("tmp_path"))
    if kind == "s3":
        endpoint = request.getfixturevalue("moto_endpoint")
        return Backend("s3", f"s3://{make_bucket(endpoint)}/lake", s3_options(endpoint),
                       scratch, endpoint)
    if kind == "azure":
        endpoint = request.getfixturevalue("azurite_endpoint")
        return Backend("azure", f"az://{_emulators().make_container(endpoint)}/lake",
                       _emulators().azure_options(), scratch, endpoint)
    if kind == "gcs":
        endpoint = request.getfixturevalue("gcs_endpoint")
        return Backend("gcs", f"gs://{_emulators().make_bucket(endpoint)}/lake",
                       _emulators().gcs_options(endpoint), scratch, endpoint)
    raise ValueError(f"no backend {kind!r}")


@pytest.fixture
def cloud(request) -> Backend:
    """A test's lake on the cloud it is parametrized with (indirect): "s3", "azure", "gcs"."""
    return cloud_backend(request, request.param)


@pytest.fixture
def backend(request, tmp_path) -> Backend:
    if request.param == "local":
        return Backend("local", "file://" + str(tmp_path / "lake"))
    return cloud_backend(request, request.param)


@pytest.fixture
def local_backend(tmp_path) -> Backend:
    return Backend("local", "file://" + str(tmp_path / "lake"))


def rows(table, sort_by: str = "id"):
    return sorted(table.to_pylist(), key=lambda r: r[sort_by])


# One local Spark for the whole run (a classic session whose driver also serves Spark Connect):
# every test that asks for ``spark`` runs on both kinds of session; conftest's grouping below
# keeps them on one worker, which starts the JVM once.
@pytest.fixture(scope="session")
def classic_spark():
    pytest.importorskip("pyspark")
    from tests.spark_session import start_local_spark

    return start_local_spark()


@pytest.fixture(scope="session")
def connect_spark(classic_spark):
    from tests.spark_session import connect_to

    return connect_to(classic_spark)


@pytest.fixture(params=["classic", "connect"])
def spark(request, monkeypatch):
    """Every Spark test runs on a classic session and on a Spark Connect session. pyspark
    builds Column objects for one kind per process (a flag its remote builder sets), so the
    flag is set only while a Connect test runs."""
    from tests.spark_session import CONNECT_FLAG

    if request.param == "connect":
        monkeypatch.setenv(CONNECT_FLAG, "1")
        return request.getfixturevalue("connect_spark")
    monkeypatch.delenv(CONNECT_FLAG, raising=False)
    return request.getfixturevalue("classic_spark")


# The suite runs on three workers (`make test`: pytest-xdist). Tests that take longest start
# first, so that the short ones fill in beside them instead of one long test ending the run
# alone; the Spark tests share one worker, whose JVM they share (measured: --durations).
_LONG_FIRST = (  # measured 2026-11-27 (--durations, two workers): longest first
    "test_upserts_quick", "test_incremental_quick",
    "test_contention_r_commits_everything_dl_aborts", "test_chaos_quick",
    "test_randomized_bank_with_a_crashing_process", "test_compaction_quick_run",
    "test_bank_with_ct_writers_and_isolated_auditors_in_processes",
    "test_mixed_lakevilla_and_delta_rs_writers",
    "test_conditional_races_have_one_winner",
    "test_isolated_readers_always_see_the_total_during_transfers",
    "test_quick_run_writes_results_for_every_system_and_client_count",
    "test_crash_at_every_store_call",
    "test_pushed_filter_keeps_every_matching_row",
    "test_pruning_never_skips_a_file_with_a_matching_row",
    "test_fault_matrix", "test_reads_quick",
    "test_python_pruning_of_small_tables_agrees_with_duckdb",
    "test_alternating_feature_sets_on_one_client_read_every_commit",
)


# Module fixtures that run a benchmark's quick mode once for several tests: split over both
# workers, or torn down between them, each ran it again (measured: 3 TPC-C setups of 64-72 s).
_SHARED_RUNS = {"quick_run", "ycsb_payload"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    if not (getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput")):
        return

    def weight(item) -> tuple[int, int]:
        name = item.name.split("[", 1)[0]
        rank = next((i for i, p in enumerate(_LONG_FIRST) if name.startswith(p)), None)
        if rank is None:
            return 2, 0
        return (1 if "[local" in item.name else 0), rank  # through moto first: the longest

    # `spark` asks for a session by name, at run time
    spark = {"spark", "classic_spark", "connect_spark"}
    # a module fixture's tests, on one worker and one after the other
    together: dict[str, list] = {}
    weights = {id(item): weight(item) for item in items}
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("spark") or spark & names:
            item.add_marker(pytest.mark.xdist_group("spark"))
            # the largest unit of all (~8 min on one worker): first, not last
            weights[id(item)] = (-1, 0)
        elif shared := sorted(_SHARED_RUNS & names):
            item.add_marker(pytest.mark.xdist_group(shared[0]))
            together.setdefault(shared[0], []).append(item)
    for group in together.values():
        first = min(weights[id(item)] for item in group)
        weights.update((id(item), first) for item in group)
    items.sort(key=lambda item: weights[id(item)])  # stable: within a weight, the files' own order
