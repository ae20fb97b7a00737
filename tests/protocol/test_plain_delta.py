"""LV[DL]: plain Delta semantics, honestly including its weaknesses."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lakevilla as lv
from tests.conftest import ON_AZURE, rows
from tests.helpers import HookStore, count_calls, crash_plans, crash_stride, run_crashing

ACC = pa.schema([("id", pa.int64()), ("balance", pa.int64())])


def _setup(backend, name="acc"):
    lake = backend.lake()
    lake.create_table(name, ACC)
    with lake.transaction(features="") as txn:
        txn.insert(name, {"id": [1], "balance": [100]})
    with lake.transaction(features="") as txn:
        txn.insert(name, {"id": [2], "balance": [200]})
    return lake


def _first_commit_put(kind, key):
    return kind == "put_if_absent" and "/_delta_log/" in key


def test_lost_race_without_conflict_rebases_and_commits(backend):
    _setup(backend)
    other = backend.lake()

    def append_first():
        with other.transaction(features="") as t:
            t.insert("acc", {"id": [3], "balance": [300]})

    lake = backend.lake(store=HookStore(backend.store(), _first_commit_put, append_first))
    with lake.transaction(features="") as txn:
        txn.update("acc", set={"balance": "balance + 1"}, where="id = 1")
    assert txn.stats["retries"] == 1
    assert rows(lake.read("acc")) == [{"id": 1, "balance": 101}, {"id": 2, "balance": 200},
                                      {"id": 3, "balance": 300}]


def test_lost_race_with_a_file_conflict_aborts(backend):
    _setup(backend)
    other = backend.lake()

    def update_first():
        with other.transaction(features="") as t:
            t.update("acc", set={"balance": "balance + 10"}, where="id = 1")

    lake = backend.lake(store=HookStore(backend.store(), _first_commit_put, update_first))
    with pytest.raises(lv.TransactionAborted, match="conflicts with version 3"):
        with lake.transaction(features="") as txn:
            txn.update("acc", set={"balance": "balance + 1"}, where="id = 1")
    lake.flush()
    assert rows(lake.read("acc")) == [{"id": 1, "balance": 110}, {"id": 2, "balance": 200}]
    # the loser's rewritten file was deleted
    assert lake.maintenance.abandoned_files(min_age=0, force=True) == []


def test_a_block_is_not_atomic(backend):
    """Delta's weakness that the later features fix: the first operation stays."""
    lake = _setup(backend)
    with pytest.raises(RuntimeError), lake.transaction(features="") as txn:
        txn.update("acc", set={"balance": "balance - 50"}, where="id = 1")
        raise RuntimeError("the deposit never happens")
    assert rows(lake.read("acc"))[0] == {"id": 1, "balance": 50}
    with pytest.raises(RuntimeError), lake.transaction(features="R") as txn:
        txn.update("acc", set={"balance": "balance - 50"}, where="id = 1")
        raise RuntimeError("the deposit never happens")
    assert rows(lake.read("acc"))[0] == {"id": 1, "balance": 50}  # with R nothing happened


@pytest.mark.parametrize("op", ["insert", "update", "delete"])
@ON_AZURE
def test_crash_at_every_store_call_of_a_commit(backend, op):
    """A client killed at any call leaves the table before or after the commit, for both readers."""

    def action_on(name):
        def action(lake):
            with lake.transaction(features="") as txn:
                if op == "insert":
                    txn.insert(name, {"id": [3], "balance": [300]})
                elif op == "update":
                    txn.update(name, set={"balance": "balance * 2"}, where="id = 2")
                else:
                    txn.delete(name, where="id = 1")
        return action

    base = backend.store()

    def make(store):
        return backend.lake(store=store)

    _setup(backend, "probe")
    before = backend.delta_rows("probe")
    n = count_calls(base, make, action_on("probe"))
    after = backend.delta_rows("probe")
    assert after != before
    outcomes = set()
    for i, (label, plan) in enumerate(crash_plans(n, every=crash_stride(backend, tables="one"))):
        name = f"t{i}"
        _setup(backend, name)  # identical history: call n is the same call in every run
        crashed = run_crashing(base, plan, make, action_on(name))
        assert crashed, label
        ours = rows(backend.lake().read(name))
        assert ours == backend.delta_rows(name), label
        assert ours in (before, after), f"{label}: table is in between: {ours}"
        outcomes.add("before" if ours == before else "after")
    assert outcomes == {"before", "after"}
