"""Two writers marking rows of one file by deletion vectors, at once. Each commit removes the
same add (the file with its old DV) and adds it with its own DV, so they conflict, as Delta
says: under R the loser is redone on the winner's snapshot and its DV holds both sets of rows;
LV[DL] aborts it. No deleted row comes back, and no DV file is left that no commit names."""

from __future__ import annotations

import threading

import pytest

import lakevilla as lv
from tests.statements.test_deletion_vector_writes import (
    BIG,
    ROWS,
    dv_lake,
    files_of,
    judged,
    logged_dv_files,
    ours,
)

SMALL = "id % 3 = 1 AND id < 3000"  # 1,000 rows: an inline DV


def run_both(writers: list) -> list:
    """Run each writer on a thread of its own; their results (or what they raised)."""
    out: list = [None] * len(writers)

    def run(i: int) -> None:
        try:
            out[i] = writers[i]()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(writers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.parametrize("features", ["R", "R,CT"])
def test_two_writers_marking_one_file_both_land_and_no_row_comes_back(backend, features):
    """Both mark their rows on the same snapshot (a barrier holds each between its statement
    and its commit), then race: one commit wins, the other conflicts and is redone."""
    dv_lake(backend)
    both_marked = threading.Barrier(2)

    def writer(where: str):
        def write():
            with backend.lake() as lake:  # closing waits for the clean-up behind the commit
                txn = lake.begin(features)
                n = txn.delete("t", where=where)
                both_marked.wait(timeout=60)
                return n, txn.commit().stats.get("redos", 0)
        return write

    (big, big_redos), (small, small_redos) = run_both([writer(BIG), writer(SMALL)])
    assert (big, small) == (len(range(0, ROWS, 3)), 1000)
    assert big_redos + small_redos >= 1  # the loser was redone, not aborted
    lake = backend.lake()
    add, = lake.snapshot("t").files.values()
    assert add.deletion_vector is not None and add.deletion_vector.cardinality == big + small
    expected = [i for i in range(ROWS) if i % 3 == 2 or (i % 3 == 1 and i >= 3000)]
    assert ours(lake) == judged(backend) == expected
    assert files_of(backend) == logged_dv_files(backend)  # the loser's first DV file is gone


def test_plain_delta_aborts_the_second_writer_marking_one_file(local_backend):
    """LV[DL]: the writer whose commit is held until the other one committed conflicts and
    aborts; its rows stay, the winner's are gone, its DV file is deleted."""
    from tests.helpers import HookStore

    dv_lake(local_backend)
    held, other_done = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        assert other_done.wait(timeout=60)

    store = HookStore(local_backend.store(),
                      lambda kind, key: kind == "put_if_absent" and key.endswith(
                          f"{2:020d}.json"), hold)

    def loser():
        with local_backend.lake(store=store).transaction("") as txn:
            return txn.delete("t", where=BIG)

    def winner():
        assert held.wait(timeout=60)  # the loser marked its rows on version 1 and is committing
        try:
            with local_backend.lake().transaction("") as txn:
                return txn.delete("t", where=SMALL)
        finally:
            other_done.set()

    lost, won = run_both([loser, winner])
    assert isinstance(lost, lv.TransactionAborted) and "conflict" in str(lost), lost
    assert won == 1000
    assert files_of(local_backend) == set()  # the loser's DV file went with it
    expected = [i for i in range(ROWS) if not (i % 3 == 1 and i < 3000)]
    assert ours(local_backend.lake()) == judged(local_backend) == expected
