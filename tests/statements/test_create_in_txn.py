"""``txn.create_table``: a table created inside a transaction appears only if the transaction
commits (with CT, atomically with the other tables), and one name is never created twice."""

from __future__ import annotations

import threading
import time

import pytest

import lakevilla as lv
from tests.conftest import rows
from tests.helpers import HookStore, count_calls, crash_plans, crash_stride, run_crashing

NEW = {"id": [1, 2, 3], "v": [1.0, 2.0, 3.0]}


def _acc(lake, name: str = "acc") -> None:
    lake.create_table(name, data={"id": [1, 2], "bal": [100, 200]})


def _bal(lake, name: str = "acc") -> int:
    return sum(lake.read(name).column("bal").to_pylist())


def _parquet(backend, table: str) -> set[str]:
    return {k for k in backend.all_keys() if k.startswith(f"{table}/") and k.endswith(".parquet")}


@pytest.mark.parametrize("features", ["R", "CT", "R,CT"])
def test_created_table_appears_only_when_the_transaction_commits(backend, features):
    lake = backend.lake()
    _acc(lake)
    for commit in (False, True):
        txn = lake.begin(features)
        assert txn.create_table("n", data=NEW, partition_by=None) == 3
        txn.insert("n", {"id": [4], "v": [4.0]})
        txn.update("n", {"v": "v * 10"}, where="id = 1")
        txn.update("acc", {"bal": "bal + 1"}, where="id = 1")
        assert txn.read("n").num_rows == 4  # its own writes on an empty table
        assert not lake.table_exists("n")  # nobody else sees it before the commit
        if commit:
            res = txn.commit()
            assert res.versions["n"] == 0
        else:
            txn.abort()
            assert not lake.table_exists("n") and _parquet(backend, "n") == set()
            assert _bal(lake) == 300
    assert backend.delta_rows("n") == [{"id": 1, "v": 10.0}, {"id": 2, "v": 2.0},
                                       {"id": 3, "v": 3.0}, {"id": 4, "v": 4.0}]
    assert _bal(lake) == 301 and rows(lake.read("acc")) == backend.delta_rows("acc")
    with pytest.raises(lv.TableExistsError):
        lake.begin(features).create_table("n", {"id": "int64"})


def test_without_features_the_create_commits_at_once_and_i_is_refused(local_backend):
    lake = local_backend.lake()
    txn = lake.begin("")
    txn.create_table("n", data=NEW)
    assert lake.table_exists("n")  # features="": every statement commits when it runs
    txn.abort()
    assert local_backend.delta_rows("n")[0] == {"id": 1, "v": 1.0}
    with pytest.raises(lv.InvalidArgumentError, match="not supported yet"):
        lake.begin("R,CT,I").create_table("m", data=NEW)


@pytest.mark.parametrize("other", ["lake", "txn"])
def test_a_concurrent_creator_loses_with_a_clear_error(backend, other):
    """The second creator acts (in its own thread, with its own client) at the exact moment the
    first is about to decide: it must get TableExistsError, and exactly one table exists."""
    _acc(backend.lake())
    seen: list[BaseException | None] = []

    def second() -> None:
        lake2 = backend.lake()
        try:
            if other == "lake":
                lake2.create_table("n", data={"id": [9], "v": [9.0]})
            else:
                with lake2.transaction("R,CT") as t2:
                    t2.create_table("n", data={"id": [9], "v": [9.0]})
                    t2.update("acc", {"bal": "bal + 1000"})
            seen.append(None)
        except lv.LakeVillaError as e:
            seen.append(e)

    def at_decision() -> None:
        th = threading.Thread(target=second)
        th.start()
        th.join(60)

    decide = HookStore(backend.store(),
                       lambda kind, key: (kind == "put_if_absent"
                                          and key.startswith("_lakevilla/txns/")
                                          and key.count("/") == 2),
                       at_decision)
    lake = backend.lake(store=decide)
    with lake.transaction("R,CT") as txn:
        txn.create_table("n", data=NEW)
        txn.update("acc", {"bal": "bal + 1"}, where="id = 1")
    assert decide.fired == 1
    assert len(seen) == 1 and isinstance(seen[0], lv.TableExistsError), seen
    assert "being created" in str(seen[0])
    assert [r["id"] for r in backend.delta_rows("n")] == [1, 2, 3]
    assert _bal(backend.lake()) == 301
    assert _parquet(backend, "n") == {f"n/{p}" for p in backend.lake().snapshot("n").files}


def _later_clock() -> float:
    return time.time() + 3600.0


def test_crash_at_every_store_call_of_a_create_in_a_ct_commit(backend):
    """After a crash anywhere and recover(), the new table exists with all its rows and the
    other table shows the update, or neither; a never-created table's files become abandoned."""
    base = backend.store()

    def action_on(acc: str, new: str):
        def action(lake):
            txn = lake.begin("R,CT")
            txn.create_table(new, data=NEW)
            txn.update(acc, {"bal": "bal + 1"}, where="id = 1")
            txn.commit()
        return action

    def make(store):
        return backend.lake(store=store, marker_ttl=5.0)

    _acc(backend.lake(), "pacc")
    n = count_calls(base, make, action_on("pacc", "pnew"))
    outcomes = set()
    for i, (label, plan) in enumerate(crash_plans(n, every=crash_stride(backend))):
        acc, new = f"acc{i}", f"new{i}"
        _acc(backend.lake(), acc)
        run_crashing(base, plan, make, action_on(acc, new))
        rec = backend.lake(marker_ttl=5.0, clock=_later_clock)
        rec.recover(tables=[acc, new])
        updated = _bal(rec, acc) == 301
        assert rec.table_exists(new) == updated, label
        if updated:
            assert rows(rec.read(new)) == backend.delta_rows(new), label
            assert [r["id"] for r in backend.delta_rows(new)] == [1, 2, 3], label
        outcomes.add(updated)
        # nobody holds the name any more: a new creator either finds the table or creates it
        again = backend.lake()
        again.create_table(new, {"id": "int64", "v": "double"}, if_not_exists=True)
        if not updated:
            gone = rec.maintenance.abandoned_files(new, min_age=0, force=True)
            assert {k for _t, k in gone} <= _parquet(backend, new), label
    assert outcomes == {True, False}


def test_status_shows_a_pending_create_until_the_transaction_ends(local_backend):
    lake = local_backend.lake()
    txn = lake.begin("R,CT")
    txn.create_table("n", data=NEW)
    held = lake.status().to_json()["creating"]
    assert [(c["table"], c["txn"], c["expired"]) for c in held] == [("n", txn.id, False)]
    txn.abort()
    assert lake.status().creating == []
    # the abort deleted its files
    assert lake.maintenance.abandoned_files("n", min_age=0, force=True) == []
