"""The change consumer (``lake.consumer``): each change of its tables is consumed exactly once,
however its runs crash or race, and its output always equals a batch recomputation at the
offset it stored."""

from __future__ import annotations

import threading
from collections import Counter

import pyarrow as pa
import pytest

import lakevilla as lv

ORDERS = pa.schema([("order_id", pa.int64()), ("day", pa.string())])
LINES = pa.schema([("order_id", pa.int64()), ("day", pa.string()), ("amount", pa.int64())])
DAILY = pa.schema([("day", pa.string()), ("revenue", pa.int64()), ("orders", pa.int64())])
SIGN = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}


def _shop(lake) -> None:
    lake.create_table("orders", ORDERS)
    lake.create_table("order_lines", LINES)
    lake.create_table("daily", DAILY)


def _order(lake, oid: int, day: str, amounts: list[int]) -> None:
    """One order and its lines, in one R,CT transaction across both tables."""
    with lake.transaction("R,CT") as txn:
        txn.insert("orders", {"order_id": [oid], "day": [day]})
        txn.insert("order_lines", {"order_id": [oid] * len(amounts), "day": [day] * len(amounts),
                                   "amount": amounts})


def _cancel(lake, oid: int) -> None:
    with lake.transaction("R,CT") as txn:
        txn.delete("orders", where=f"order_id = {oid}")
        txn.delete("order_lines", where=f"order_id = {oid}")


def _fold(txn, changes) -> int:
    """The consumer's work: each day's revenue and order count moved by the changes."""
    delta: dict[str, list[int]] = {}
    for r in changes["order_lines"].to_pylist():
        delta.setdefault(r["day"], [0, 0])[0] += SIGN[r["_change_type"]] * r["amount"]
    for r in changes["orders"].to_pylist():
        delta.setdefault(r["day"], [0, 0])[1] += SIGN[r["_change_type"]]
    if delta:
        src = pa.table({"day": list(delta), "revenue": [v[0] for v in delta.values()],
                        "orders": [v[1] for v in delta.values()]}, schema=DAILY)
        txn.merge("daily", src, on="day").when_matched_update(
            {"revenue": "target.revenue + source.revenue",
             "orders": "target.orders + source.orders"}).when_not_matched_insert_all().execute()
    return sum(c.num_rows for c in changes.values())


def _batch(lake, cut) -> dict[str, tuple[int, int]]:
    """Daily revenue and orders recomputed from scratch at ``cut``."""
    view = lake.at(cut)
    out: dict[str, list[int]] = {}
    for r in view.read("order_lines").to_pylist():
        out.setdefault(r["day"], [0, 0])[0] += r["amount"]
    for r in view.read("orders").to_pylist():
        out.setdefault(r["day"], [0, 0])[1] += 1
    return {d: (v[0], v[1]) for d, v in out.items() if v != [0, 0]}


def _output(lake) -> dict[str, tuple[int, int]]:
    rows = lake.read("daily").to_pylist()
    assert not [d for d, n in Counter(r["day"] for r in rows).items() if n > 1]
    return {r["day"]: (r["revenue"], r["orders"]) for r in rows
            if (r["revenue"], r["orders"]) != (0, 0)}


def test_each_run_consumes_what_changed_since_the_last_and_equals_a_batch_recomputation(backend):
    lake = backend.lake()
    _shop(lake)
    feed = lake.consumer("revenue", ["orders", "order_lines"])
    assert feed.offset() is None
    _order(lake, 1, "mon", [10, 5])
    _order(lake, 2, "tue", [7])
    first = feed.run(_fold)
    assert first.since is None and first.rows == {"orders": 2, "order_lines": 3}
    assert _output(lake) == _batch(lake, first.until) == {"mon": (15, 1), "tue": (7, 1)}
    assert feed.run(_fold).rows == {"orders": 0, "order_lines": 0}  # nothing new: nothing again
    with lake.transaction("R") as txn:
        txn.update("order_lines", set={"amount": "amount * 2"}, where="order_id = 1")
    _cancel(lake, 2)
    _order(lake, 3, "tue", [1, 1, 1])
    third = feed.run(_fold)
    fourth = feed.run(_fold)  # nothing new: the offset stays, nothing is written
    assert fourth.since == fourth.until == third.until == feed.offset()
    assert fourth.rows == {"orders": 0, "order_lines": 0}
    assert _output(lake) == _batch(lake, third.until) == {"mon": (30, 1), "tue": (3, 1)}


def test_a_run_that_fails_after_writing_its_outputs_leaves_outputs_and_offset_as_they_were(
        local_backend):
    lake = local_backend.lake()
    _shop(lake)
    feed = lake.consumer("revenue", ["orders", "order_lines"])
    _order(lake, 1, "mon", [10])
    done = feed.run(_fold)
    _order(lake, 2, "mon", [4])

    def dies(txn, changes):
        _fold(txn, changes)
        raise RuntimeError("the client dies after writing its outputs")

    with pytest.raises(RuntimeError):
        feed.run(dies)
    assert feed.offset() == done.until and _output(lake) == {"mon": (10, 1)}
    again = feed.run(_fold)
    assert again.rows == {"orders": 1, "order_lines": 1}
    assert _output(lake) == _batch(lake, again.until) == {"mon": (14, 2)}


@pytest.mark.parametrize("features", ["R,CT", "R,CT,I"])
def test_two_runs_at_once_never_consume_a_change_twice(local_backend, features):
    """Both runs read the same offset before either commits (a barrier in their work): the
    second to commit must not add the same changes again; it reads the new offset and
    consumes only what is left. Then a writer and two consumers race freely."""
    root = local_backend.lake()
    _shop(root)
    _order(root, 1, "mon", [10, 20])
    both_read = threading.Barrier(2, timeout=60)
    errors: list[BaseException] = []
    results = []

    def consume(use_barrier: bool, rounds: int) -> None:
        lake = local_backend.lake(wait_timeout=60.0)
        feed = lake.consumer("revenue", ["orders", "order_lines"])
        first = [use_barrier]

        def work(txn, changes):
            if first[0]:
                first[0] = False
                both_read.wait()
            return _fold(txn, changes)

        try:
            for _ in range(rounds):
                results.append(feed.run(work, features=features, retries=20))
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    threads = [threading.Thread(target=consume, args=(True, 1)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert sorted(r.rows["order_lines"] for r in results) == [0, 2]  # one consumed, one nothing
    assert _output(root) == {"mon": (30, 1)}

    writer_done = threading.Event()

    def write() -> None:
        lake = local_backend.lake(wait_timeout=60.0)
        try:
            for oid in range(2, 12):
                _order(lake, oid, ["mon", "tue", "wed"][oid % 3], [oid, 1])
                if oid % 4 == 0:
                    _cancel(lake, oid - 1)
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)
        finally:
            writer_done.set()

    threads = [threading.Thread(target=write)] + [
        threading.Thread(target=consume, args=(False, 6)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    final = root.consumer("revenue", ["orders", "order_lines"]).run(_fold, features=features)
    assert _output(root) == _batch(root, final.until) == _batch(root, root.at(final.until).cut())


def test_a_consumer_refuses_features_that_cannot_keep_it_exact_and_bad_names(local_backend):
    lake = local_backend.lake()
    _shop(lake)
    with pytest.raises(lv.InvalidArgumentError, match="R and CT"):
        lake.consumer("c", ["orders"]).run(_fold, features="R")
    with pytest.raises(lv.InvalidArgumentError, match="quotes"):
        lake.consumer("it's", ["orders"])
    with pytest.raises(lv.InvalidArgumentError):
        lake.at({"orders": "three"})
    with pytest.raises(lv.TableNotFoundError):
        lake.at({"orders": 0}).read("order_lines")
