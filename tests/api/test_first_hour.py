"""The edges a new user meets first: every failure is a ``LakeVillaError`` with its cause
chained and a message naming what was wrong, and nothing is written by a failure or by
looking at a lake that does not exist."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

import lakevilla as lv
from tests.conftest import make_bucket, s3_options

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])
REPO = Path(__file__).resolve().parents[2]


def tree(path: Path) -> dict[str, bytes | None]:
    """Every file (with its bytes) and folder (None) under ``path``: equal before and after
    means nothing was written, moved or created there."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(path):
        rel = os.path.relpath(dirpath, path)
        for d in dirnames:
            out[os.path.join(rel, d)] = None
        for f in filenames:
            out[os.path.join(rel, f)] = Path(dirpath, f).read_bytes()
    return out


# -- a lake root that is a file, or lies under one ------------------------------------------

@pytest.mark.parametrize("where", ["file", "under-file"])
def test_a_lake_root_that_cannot_be_a_folder_is_a_storage_error(tmp_path, where):
    blocker = tmp_path / "notes.txt"
    blocker.write_bytes(b"not a lake")
    root = blocker if where == "file" else blocker / "lake"
    before = tree(tmp_path)
    with pytest.raises(lv.StorageError, match="notes.txt is a file") as err:
        lv.Lake(str(root))
    assert not isinstance(err.value, lv.StoragePermissionError)
    assert tree(tmp_path) == before


def test_a_table_path_that_is_a_file_fails_create_table_with_a_storage_error(tmp_path):
    root = tmp_path / "lake"
    lake = lv.Lake(str(root))
    lake.create_table("ok", T)
    (root / "accounts").write_bytes(b"a file where the table's folder would go")
    with pytest.raises(lv.StorageError, match="accounts is a file, not a folder") as err:
        lake.create_table("accounts", T)
    cause = err.value
    while cause.__cause__ is not None:
        cause = cause.__cause__
    assert isinstance(cause, OSError)  # the operating system's error, chained
    assert lake.tables() == ["ok"]
    assert (root / "accounts").read_bytes().startswith(b"a file")


# -- nothing is created by looking ----------------------------------------------------------

def test_looking_at_a_lake_that_does_not_exist_creates_nothing(tmp_path):
    root = tmp_path / "no" / "such" / "lake"
    lake = lv.Lake(str(root))
    with pytest.raises(lv.LakeNotFoundError, match="no lake at .*does not exist"):
        lake.tables()
    with pytest.raises(lv.LakeNotFoundError):
        lake.status()
    # as README says: a root that does not exist is named as such, whatever looks at it (and
    # code that handles a missing table, TableNotFoundError, handles it too)
    looks = {"read": lambda: lake.read("orders"), "history": lambda: lake.history("orders"),
             "version": lambda: lake.version("orders"), "schema": lambda: lake.schema("orders"),
             "read at a version": lambda: lake.read("orders", version=0),
             "status of a table": lambda: lake.status(["orders"]),
             "a transaction's read": lambda: lake.run(lambda txn: txn.read("orders"), "R"),
             "an isolated read": lambda: lake.run(lambda txn: txn.read("orders"), "I")}
    for what, look in looks.items():
        with pytest.raises(lv.LakeNotFoundError, match=r"no lake at .*so there is no table "
                                                        "'orders'") as err:
            look()
        assert isinstance(err.value, lv.TableNotFoundError), what
    lake.close()
    assert not (tmp_path / "no").exists()
    lake = lv.Lake(str(root))
    lake.create_table("orders", T)  # the first write makes the folder
    assert lake.tables() == ["orders"]


def test_a_missing_table_in_an_existing_lake_is_named(tmp_path):
    lake = lv.Lake(str(tmp_path / "lake"))
    lake.create_table("a", T)
    before = tree(tmp_path)
    with pytest.raises(lv.TableNotFoundError, match="'nosuch'"):
        lake.history("nosuch")
    with pytest.raises(lv.TableNotFoundError, match="nosuch"):
        lake.status(["a", "nosuch"])
    assert tree(tmp_path) == before


# -- S3 without credentials ------------------------------------------------------------------

@pytest.fixture
def no_aws_credentials(monkeypatch, tmp_path):
    """A process in which boto3 finds no credentials anywhere (environment, files, metadata)."""
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_s3_without_credentials_is_a_credentials_error_everywhere(moto_endpoint,
                                                                  no_aws_credentials):
    import boto3

    bucket = make_bucket(moto_endpoint)
    opts = {k: v for k, v in s3_options(moto_endpoint).items() if "KEY" not in k}
    lake = lv.Lake(f"s3://{bucket}/lake", storage_options=opts)  # no request yet: fine
    with pytest.raises(lv.StorageCredentialsError,
                       match="no usable credentials .*AWS_ACCESS_KEY_ID") as err:
        lake.create_table("accounts", T)
    assert type(err.value.__cause__).__name__ == "NoCredentialsError"
    with pytest.raises(lv.StorageCredentialsError):
        lake.read("accounts")
    with pytest.raises(lv.StorageCredentialsError):
        lake.tables()
    with pytest.raises(lv.TransactionAborted) as err:
        with lake.transaction("R,CT") as txn:
            txn.insert("accounts", {"id": [1], "value": [1]})
    assert err.value.reason == "storage"
    assert isinstance(err.value.__cause__, lv.StorageCredentialsError)
    lake.close()
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0  # nothing was written


# -- a lake this process may not write -------------------------------------------------------

READ_ONLY_CHILD = textwrap.dedent("""
    import json, sys
    import lakevilla as lv
    from lakevilla.store import LocalStore

    root = sys.argv[1]
    out = {}

    def attempt(name, fn):
        try:
            fn()
            out[name] = None
        except Exception as e:
            cause = e.__cause__
            out[name] = [type(e).__name__, str(e), getattr(e, "reason", None),
                         type(cause).__name__ if cause is not None else None,
                         isinstance(e, lv.LakeVillaError)]

    lake = lv.Lake(root)
    out["read"] = lake.read("accounts").num_rows
    attempt("put", lambda: LocalStore(root).put("x/y.json", b"{}"))
    attempt("create_table", lambda: lake.create_table("more", lake.schema("accounts")))

    def txn():
        with lake.transaction("R") as t:
            t.insert("accounts", {"id": [9], "value": [9]})
    attempt("transaction", txn)
    lake.close()
    print(json.dumps(out))
""")


def test_a_read_only_lake_refuses_writes_with_a_permission_error(tmp_path):
    """Simulates a lake the user cannot write: the child process sees the lake's folder
    through a read-only bind mount of its own (``unshare -m``), so every write fails with
    EROFS from the kernel, as it would for a folder without write permission (the tests run
    as root, whom file modes do not stop)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to make a read-only mount")
    root = tmp_path / "lake"
    lake = lv.Lake(str(root))
    lake.create_table("accounts", T)
    with lake.transaction("R") as txn:
        txn.insert("accounts", {"id": [1, 2], "value": [10, 20]})
    lake.close()
    script = tmp_path / "child.py"
    script.write_text(READ_ONLY_CHILD)
    before = tree(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = (f"mount --bind {root} {root} && mount -o remount,bind,ro {root} && "
           f"exec {sys.executable} {script} {root}")
    proc = subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True,
                          env=env, timeout=300)
    if proc.returncode != 0 and "mount" in proc.stderr and "{" not in proc.stdout:
        pytest.skip(f"cannot make a read-only mount here: {proc.stderr.strip()}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["read"] == 2  # reading needs no write
    kind, msg, _, cause, ours = out["put"]
    assert (kind, cause, ours) == ("StoragePermissionError", "OSError", True)
    assert "Read-only file system" in msg and "x/y.json" in msg
    kind, msg, _, cause, ours = out["create_table"]
    assert kind == "StoragePermissionError" and ours and "Read-only file system" in msg
    kind, msg, reason, cause, ours = out["transaction"]
    assert (kind, reason, cause, ours) == (
        "TransactionAborted", "storage", "StoragePermissionError", True)
    assert "Read-only file system" in msg
    assert tree(tmp_path) == before  # nothing was written


# -- the demo ------------------------------------------------------------------------------------

def test_the_demo_counts_every_transfer_it_starts(tmp_path, monkeypatch, capsys):
    """Plain Delta's transfers fail half-way under conflicts (PartialCommitError in the client
    threads): each is counted, none escapes its thread as a traceback."""
    import threading

    from lakevilla.demo import story as demo

    escaped: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value))
    root = f"file://{tmp_path / 'bank'}"
    demo.setup(root)
    stats, why = demo.run_clients(root, "", clients=4, per_client=8, fail_every=4)
    assert escaped == [] and "Traceback" not in capsys.readouterr().err
    assert sum(stats.values()) == 32 and set(stats) <= {demo.COMMITTED, demo.HALF, demo.ABORTED}
    assert why["gave up after the withdrawal"] == 8  # every 4th of 32
    line = demo.outcomes_line(stats, why, 32)
    assert line.startswith("32 transfers started: ") and "NOT COUNTED" not in line


@pytest.mark.parametrize("error, outcome", [
    (None, "committed"),
    (lv.PartialCommitError("deposit lost its race", committed={"bank_eu": 3}), "failed half-way"),
    (lv.TransactionAborted("conflict"), "aborted"),
    (lv.CommitPendingError("unknown"), "aborted"),
])
def test_the_demo_names_how_each_transfer_ended(error, outcome):
    from lakevilla.demo import story as demo

    def transfer() -> None:
        if error is not None:
            raise error

    assert demo.outcome_of(transfer, "")[0] == outcome
    if isinstance(error, lv.PartialCommitError):
        assert demo.outcome_of(transfer, "") == (demo.HALF, "lost a conflict after the withdrawal")


def test_storage_options_that_are_not_a_dict_are_named(tmp_path):
    with pytest.raises(lv.InvalidArgumentError, match="storage_options must be a dict .* got str"):
        lv.Lake("s3://bucket/lake", storage_options='{"AWS_REGION": "x"}')
    with pytest.raises(lv.InvalidArgumentError, match="only meaningful for cloud URIs"):
        lv.Lake(str(tmp_path / "lake"), storage_options={"AWS_REGION": "x"})
    assert list(tmp_path.iterdir()) == []
