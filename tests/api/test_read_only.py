"""A read-only lake (``Lake(root, read_only=True)``, and any client whose credentials cannot
write): reads, time travel, history, status and isolated read-only transactions, without a
single write; every write refused before any request; isolated reads still one consistent
cut, never half of a multi-table transaction."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.store import CountingStore, open_store
from tests.helpers import HalfPublished

T = pa.schema([("id", pa.int64()), ("balance", pa.int64())])
REPO = Path(__file__).resolve().parent.parent


def _bank(root: str) -> None:
    lake = lv.Lake(root)
    for t in ("x", "y"):
        lake.create_table(t, T)
        with lake.transaction("") as txn:
            txn.insert(t, {"id": [1, 2], "balance": [50, 50]})
    with lake.transaction("R,CT") as txn:  # a multi-table transfer
        txn.update("x", set={"balance": "balance - 10"}, where="id = 1")
        txn.update("y", set={"balance": "balance + 10"}, where="id = 1")
    lake.close()


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _total(reader, tables=("x", "y")) -> int:
    return sum(sum(reader.read(t, columns=["balance"]).column("balance").to_pylist())
               for t in tables)


def test_a_read_only_lake_reads_everything_and_writes_nothing(tmp_path):
    root = tmp_path / "lake"
    _bank(str(root))
    before = _tree(root)
    counted = CountingStore(open_store(str(root)))
    lake = lv.Lake(str(root), store=counted, read_only=True)
    assert _total(lake) == 200
    assert lake.tables() == ["x", "y"]
    assert lake.read("x", version=2).num_rows == 2 and lake.history("x")[-1].version == 0
    assert lake.status().to_json()["tables"]
    assert lake.maintenance.delete_abandoned_files(min_age=0, force=True, dry_run=True) == []
    for features in ("I", "R,CT,I", "R"):  # read-only transactions of every kind
        with lake.transaction(features) as txn:
            assert _total(txn) == 200
    with lake.transaction("I", isolation="snapshot") as txn:
        txn.read("x")
    assert counted.writes == 0
    assert _tree(root) == before


@pytest.mark.parametrize("write", [
    lambda lake: lake.create_table("z", T),
    lambda lake: lake.transaction("R").__enter__().insert("x", {"id": [3], "balance": [1]}),
    lambda lake: lake.transaction("").__enter__().update("x", set={"balance": "0"}),
    lambda lake: lake.transaction("R,CT").__enter__().delete("x", where="id = 1"),
    lambda lake: lake.transaction("I").__enter__().overwrite("x", {"id": [1], "balance": [1]}),
    lambda lake: lake.transaction("R").__enter__().merge("x", {"id": [1], "balance": [1]}, on="id")
    .when_matched_update_all().execute(),
    lambda lake: lake.transaction("R").__enter__().optimize("x"),
    lambda lake: lake.transaction("R").__enter__().add_columns("x", {"note": pa.string()}),
    lambda lake: lake.transaction("R,CT").__enter__().create_table("z", T),
    lambda lake: lake.recover(),
    lambda lake: lake.maintenance.cleanup(),
    lambda lake: lake.maintenance.checkpoint("x"),
    lambda lake: lake.maintenance.delete_abandoned_files(min_age=0, force=True),
], ids=["create_table", "insert", "update", "delete", "overwrite", "merge", "optimize",
        "add_columns", "create_in_txn", "recover", "cleanup", "checkpoint", "abandoned"])
def test_a_write_through_a_read_only_lake_is_refused_before_any_request(tmp_path, write):
    root = tmp_path / "lake"
    _bank(str(root))
    before = _tree(root)
    counted = CountingStore(open_store(str(root)))
    lake = lv.Lake(str(root), store=counted, read_only=True)
    with pytest.raises(lv.ReadOnlyLakeError, match="read_only=True"):
        write(lake)
    assert counted.writes == 0
    assert _tree(root) == before


def test_a_read_only_isolated_read_never_sees_half_a_transfer(tmp_path):
    """A R,CT transfer decided and published on x but not yet on y: a reader that cannot write
    cannot finish it, so its cut leaves the transfer out on both tables."""
    root = str(tmp_path / "lake")
    _bank(root)
    seen: list[int] = []

    def audit() -> None:
        with lv.Lake(root, read_only=True).transaction("I") as txn:
            seen.append(_total(txn))

    half = HalfPublished(open_store(root), "x", "y", audit)
    writer = lv.Lake(root, store=half)
    half.armed = True
    with writer.transaction("R,CT") as txn:
        txn.update("x", set={"balance": "balance - 7"}, where="id = 2")
        txn.update("y", set={"balance": "balance + 7"}, where="id = 2")
    assert half.fired == 1 and seen == [200]
    assert _total(lv.Lake(root, read_only=True)) == 200


def test_read_only_auditors_beside_transfers_always_see_the_total(tmp_path):
    root = str(tmp_path / "lake")
    _bank(root)
    done = threading.Event()
    errors: list[BaseException] = []

    def transfers() -> None:
        try:
            lake = lv.Lake(root)
            for i in range(30):
                with lake.transaction("R,CT") as txn:
                    txn.update("x", set={"balance": f"balance - {i % 5 + 1}"},
                               where=f"id = {i % 2 + 1}")
                    txn.update("y", set={"balance": f"balance + {i % 5 + 1}"},
                               where=f"id = {2 - i % 2}")
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
        finally:
            done.set()

    writer = threading.Thread(target=transfers)
    writer.start()
    auditor = lv.Lake(root, read_only=True)
    totals = []
    while not done.is_set() or len(totals) < 5:
        with auditor.transaction("I") as txn:
            totals.append(_total(txn))
    writer.join()
    assert errors == [] and len(totals) >= 5 and set(totals) == {200}


READ_ONLY_CHILD = r"""
import json, sys
import lakevilla as lv
root = sys.argv[1]
lake = lv.Lake(root)  # not opened read-only: its credentials (the mount) cannot write
out = {}
with lake.transaction("I") as txn:
    out["total"] = sum(sum(txn.read(t).column("balance").to_pylist()) for t in ("x", "y"))
out["stats"] = dict(txn.stats)
print(json.dumps(out))
"""


def test_an_isolated_read_with_credentials_that_cannot_write_keeps_its_cut_to_itself(tmp_path):
    """A real folder the reading process cannot write (a read-only bind mount of its own:
    the tests run as root, whom file modes do not stop): the reader's cut takes in the tables
    the global log does not know yet without appending an entry, and reads the whole total."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to make a read-only mount")
    root = tmp_path / "lake"
    _bank(str(root))  # the global log knows neither table yet: an I read would append an entry
    script = tmp_path / "child.py"
    script.write_text(READ_ONLY_CHILD)
    before = _tree(root)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = (f"mount --bind {root} {root} && mount -o remount,bind,ro {root} && "
           f"exec {sys.executable} {script} {root}")
    proc = subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True,
                          env=env, timeout=300)
    if proc.returncode != 0 and "mount" in proc.stderr and "{" not in proc.stdout:
        pytest.skip(f"cannot make a read-only mount here: {proc.stderr.strip()}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["total"] == 200 and out["stats"]["cut_unannounced"] >= 1
    assert _tree(root) == before
