"""``lake.at(when)``: every table at one consistent cut as of a moment or a global-log position.

A multi-table transaction is seen whole or not at all, whether R,CT (a record) or I (the global
log) decided it; a decided transaction whose commits land after the moment is not seen; a moment
older than clean-up kept is refused, naming the oldest one that can be served."""

from __future__ import annotations

import datetime as dt
import os
import random
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import lakevilla as lv
from tests.helpers import HalfPublished, accounts, join_global_log
from tests.spark_session import CLASSIC_ONLY

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])


def _moment(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def _total(view, tables=("a", "b")) -> int:
    return sum(sum(view.read(t).column("value").to_pylist()) for t in tables)


def _transfer(txn, amount: int = 5, src: str = "a", dst: str = "b") -> None:
    txn.update(src, set={"value": f"value - {amount}"}, where="id = 1")
    txn.update(dst, set={"value": f"value + {amount}"}, where="id = 1")


def _next_second(backend, moment: dt.datetime) -> None:
    """S3 dates objects to the second: commits after ``moment`` must land in a later second to
    be dated after it (no thread waits on this: it is the clock)."""
    while backend.kind == "s3" and int(time.time()) == int(moment.timestamp()):
        time.sleep(0.05)


def _commit_file(root: Path, table: str, version: int) -> Path:
    return root / table / "_delta_log" / f"{version:020d}.json"


def _versions_of(lake, table: str, txn_id: str) -> list[int]:
    return [h.version for h in lake.history(table) if h.txn == txn_id and not h.marker]


@pytest.mark.parametrize("features", ["R,CT", "R,CT,I"])
def test_a_moment_between_the_two_commits_of_a_transfer_sees_neither_half(local_backend,
                                                                          features):
    """The transfer's commit to ``a`` is dated a minute before its commit to ``b``: per table,
    Delta's timestamp rule shows ``a``'s half alone in between; ``lake.at`` shows neither,
    whether a record (R,CT) or the global log (I) decided the transfer."""
    lake = accounts(local_backend)
    if "I" in features:
        join_global_log(local_backend)
    with lake.transaction(features) as txn:
        _transfer(txn)
    root = Path(local_backend.uri.removeprefix("file://"))
    va, vb = _versions_of(lake, "a", txn.id)[0], _versions_of(lake, "b", txn.id)[0]
    base = time.time() + 3600  # later than every other version: only the transfer moves
    for t, v, at in (("a", va, base), ("b", vb, base + 60)):
        for u in range(v, lake.version(t) + 1):
            os.utime(_commit_file(root, t, u), (at, at))
    between = _moment(base + 30)
    assert lake.read("a", timestamp=between).column("value").to_pylist()[0] == -5  # a's half
    view = lake.at(between)
    assert view.cut() == lake.at(_moment(base - 1)).cut() and view.version("a") < va
    assert _total(view) == 0 and view.read("a", where="id = 1").column("value")[0].as_py() == 0
    after = lake.at(_moment(base + 61))
    assert after.cut() == {"a": va, "b": vb} and _total(after) == 0
    assert after.read("b", where="id = 1").column("value")[0].as_py() == 5


def test_lowering_one_table_takes_transactions_out_of_others_until_nothing_changes(
        local_backend):
    """X1 moves money from ``b`` to ``c``, X2 from ``a`` to ``c``; X1's commit to ``b`` is dated
    after the moment. Taking X1 out lowers ``c`` below X2's commit too, so X2 must leave ``a``:
    a second round that a single pass over the tables (``a`` checked first) would miss."""
    lake = accounts(local_backend, tables=("a", "b", "c"))
    with lake.transaction("R,CT") as x1:
        _transfer(x1, 3, "b", "c")
    with lake.transaction("R,CT") as x2:
        _transfer(x2, 4, "a", "c")
    root = Path(local_backend.uri.removeprefix("file://"))
    base = time.time() + 3600
    dates = [("b", _versions_of(lake, "b", x1.id)[0], base + 100),
             ("c", _versions_of(lake, "c", x1.id)[0], base + 10),
             ("c", _versions_of(lake, "c", x2.id)[0], base + 20),
             ("a", _versions_of(lake, "a", x2.id)[0], base + 20)]
    for t, v, at in dates:  # in order: a later date overrides from its own version on
        for u in range(v, lake.version(t) + 1):
            os.utime(_commit_file(root, t, u), (at, at))
    view = lake.at(_moment(base + 50))
    assert _total(view, ("a", "b", "c")) == 0
    assert view.version("a") < _versions_of(lake, "a", x2.id)[0]
    assert view.version("c") < _versions_of(lake, "c", x1.id)[0]
    assert _total(lake.at(_moment(base + 101)), ("a", "b", "c")) == 0


def _transfers(lake, n: int, seed: int, errors: list[BaseException],
               features: str = "R,CT") -> None:
    rnd = random.Random(seed)
    try:
        for _ in range(n):
            src, dst = ("a", "b") if rnd.random() < 0.5 else ("b", "a")
            lake.run(lambda txn, s=src, d=dst: _transfer(txn, rnd.randint(1, 9), s, d), features,
                     retries=50)
    except BaseException as e:  # noqa: BLE001 - reported by the test
        errors.append(e)


@pytest.mark.parametrize("mode", ["tail", "in_place"])
def test_every_moment_sees_the_money_of_concurrent_two_table_transfers_conserved(backend, mode):
    """Two writers move money between ``a`` and ``b`` with R,CT while a third client reads
    ``lake.at`` at random past moments; afterwards every version's time of either table is
    read too (the moments where one table's half has landed and the other's may not have).
    In place, a commit fills its marker's version: its time is the fill's."""
    if mode == "in_place" and backend.kind == "s3":
        pytest.skip("in-place fills are the same on S3; one backend is enough")
    lake = accounts(backend)
    start = time.time()
    n = 12 if backend.kind == "local" else 5
    errors: list[BaseException] = []
    writers = [threading.Thread(target=_transfers,
                                args=(backend.lake(commit_mode=mode), n, i, errors))
               for i in range(2)]
    done = threading.Event()
    seen: list[tuple[float, int]] = []

    def sample() -> None:
        reader = backend.lake(read_only=True)
        rnd = random.Random(7)
        try:
            while not done.is_set() or len(seen) < 3:
                when = rnd.uniform(start, time.time())
                seen.append((when, _total(reader.at(_moment(when)))))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    sampler = threading.Thread(target=sample)
    for th in (*writers, sampler):
        th.start()
    for th in writers:
        th.join()
    done.set()
    sampler.join()
    assert errors == []
    moments = {h.timestamp.timestamp() for t in ("a", "b") for h in lake.history(t)}
    moments |= {m + d for m in list(moments) for d in (-0.0005, 0.0005)}
    for m in sorted(m for m in moments if m >= start):
        seen.append((m, _total(lake.at(_moment(m)))))
    bad = [(when, total) for when, total in seen if total != 0]
    assert bad == [], f"{len(bad)} of {len(seen)} moments saw money made or lost"
    assert _total(lake.at(_moment(time.time()))) == 0


@pytest.mark.parametrize("features", ["R,CT", "R,CT,I"])
def test_a_transfer_decided_but_half_published_is_not_seen_then_or_ever_at_that_moment(backend,
                                                                                     features):
    """The transfer is decided (its record is COMMITTING, or its global-log entry written) and
    its commit to ``a`` has landed; ``b``'s is not written yet. ``lake.at`` at that moment shows
    neither half, then and after ``b``'s commit lands (it landed later); a moment after that
    shows both. With I, ``a`` and ``b`` are scanned from the entry the join wrote (it holds no
    pending write), and ``b``'s missing half is not taken for one that landed below it."""
    if features == "R,CT,I" and backend.kind == "s3":
        pytest.skip("the same on S3; the R,CT case runs there")
    lake = accounts(backend)
    if "I" in features:
        join_global_log(backend)
    mids: list[float] = []
    cuts: list[dict[str, int]] = []

    def during() -> None:
        now = time.time()
        mids.append(now)
        view = backend.lake().at(_moment(now))
        cuts.append(view.cut())
        assert _total(view) == 0
        assert view.read("a", where="id = 1").column("value")[0].as_py() == 0
        _next_second(backend, _moment(now))  # b's commit lands after the moment

    store = HalfPublished(backend.store(), "a", "b", during)
    writer = backend.lake(store=store)
    store.armed = True
    with writer.transaction(features) as txn:
        _transfer(txn)
    assert store.fired == 1 and len(mids) == 1
    va = _versions_of(lake, "a", txn.id)[0]
    assert cuts[0]["a"] < va  # a's half had landed: the cut lowered a below it
    later = lake.at(_moment(mids[0]))
    assert later.cut() == cuts[0] and _total(later) == 0
    now = lake.at(_moment(time.time()))
    assert _total(now) == 0 and now.read("b", where="id = 1").column("value")[0].as_py() == 5


def test_a_table_a_decided_transaction_creates_but_has_not_written_yet_holds_back_the_rest(
        local_backend):
    """A R,CT transaction creates ``n`` holding 5 and takes 5 from ``a``; ``a``'s commit has
    landed, ``n``'s version 0 is not written yet. At that moment ``n`` does not exist and ``a``
    does not show its half either; once ``n`` is written, both are there."""
    lake = accounts(local_backend, tables=("a",))
    seen: list[tuple] = []

    def during() -> None:
        view = local_backend.lake().at(_moment(time.time()))
        with pytest.raises(lv.TableNotFoundError):
            view.read("n")
        seen.append((view.read("a", where="id = 1").column("value")[0].as_py(),))

    gate = HalfPublished(local_backend.store(), "a", "n", during)
    txn = local_backend.lake(store=gate).begin("R,CT")
    txn.create_table("n", data={"id": [1], "value": [5]})
    txn.update("a", set={"value": "value - 5"}, where="id = 1")
    gate.armed = True
    txn.commit()
    assert gate.fired == 1 and seen == [(0,)]
    assert _total(lake.at(_moment(time.time())), ("a", "n")) == 0


def test_isolated_transfers_read_at_a_global_log_position_and_at_a_moment(backend):
    """I transfers: each is one global-log entry. ``lake.at(n)`` reads entry n's cut (the
    transfer it decided, whole), and moments between entries see whole transfers only."""
    lake = accounts(backend)
    join_global_log(backend)
    start = time.time()
    gvl = lake._client.gvl
    positions = []
    for amount in (3, 4):
        with lake.transaction("R,CT,I") as txn:
            _transfer(txn, amount)
        positions.append(gvl.head().seq)
    first, second = (lake.at(p) for p in positions)
    assert first.read("a", where="id = 1").column("value")[0].as_py() == -3
    assert second.read("b", where="id = 1").column("value")[0].as_py() == 7
    assert _total(first) == _total(second) == 0
    assert first.cut(["a", "b"]) != second.cut(["a", "b"])
    assert lake.at(positions[0] - 1).read("a", where="id = 1").column("value")[0].as_py() == 0
    for h in lake.history("a") + lake.history("b"):
        if h.timestamp.timestamp() >= start:
            assert _total(lake.at(h.timestamp)) == 0
    with pytest.raises(lv.InvalidArgumentError, match="no position"):
        lake.at(positions[-1] + 5)
    # changes between two positions: the second transfer, whole
    moved = lake.changes(["a", "b"], since=positions[0], until=positions[1])
    assert {t: sorted((r["value"], r["_change_type"]) for r in moved[t].to_pylist())
            for t in "ab"} == {"a": [(-7, "insert"), (-3, "delete")],
                               "b": [(3, "delete"), (7, "insert")]}


def test_a_global_log_entry_without_pending_writes_bounds_the_scan_and_changes_nothing(
        local_backend):
    """Transfers by I and by R,CT writers beside I readers: every moment's cut is the same
    whether the scan of each table starts at the newest global-log entry written by then that
    holds no pending write, or at the table's first commit; and the entry saves reading the
    commits below it."""
    from lakevilla.isolation.units import RecordCache
    from lakevilla.past.cut import MomentCut

    lake = accounts(local_backend)
    join_global_log(local_backend)
    start = time.time()
    errors: list[BaseException] = []
    writers = [threading.Thread(target=_transfers, args=(local_backend.lake(), 6, i, errors, f))
               for i, f in enumerate(("R,CT,I", "R,CT", "R,CT,I"))]
    for th in writers:
        th.start()
    for th in writers:
        th.join()
        join_global_log(local_backend)  # a reader takes the commits in: an entry, no pending
    assert errors == []
    client = lake._client
    based = 0
    moments = sorted({h.timestamp.timestamp() for t in ("a", "b") for h in lake.history(t)
                      if h.timestamp.timestamp() >= start})
    for m in moments + [time.time()]:
        with_base = MomentCut(client.log, RecordCache(lake.store), m, client.gvl)
        full = MomentCut(client.log, RecordCache(lake.store), m)
        assert [with_base.version(t) for t in "ab"] == [full.version(t) for t in "ab"]
        assert _total(lake.at(_moment(m))) == 0
        if with_base._base is not None:
            based += 1
            assert all(with_base.logs[t].start >= 0 for t in "ab")  # type: ignore[union-attr]
    assert based > 0


def test_a_moment_older_than_log_clean_up_kept_is_refused_naming_the_oldest_one(tmp_path):
    """After a checkpoint and a log clean-up that deleted the commits before it (as Delta's log
    retention does), a moment before the checkpoint is refused; the error names the checkpoint
    version's time, and that moment can be read."""
    lake = lv.Lake(str(tmp_path / "l"))
    lake.create_table("t", T)
    for i in range(4):
        with lake.transaction("") as txn:
            txn.insert("t", {"id": [i], "value": [i]})
    log = tmp_path / "l" / "t" / "_delta_log"
    for v in range(5):
        os.utime(log / f"{v:020d}.json", (1_700_000_000 + 60 * v,) * 2)
    lake.maintenance.checkpoint("t")
    fresh = lv.Lake(str(tmp_path / "l"))
    assert fresh.at(_moment(1_700_000_000 + 90)).read("t").num_rows == 1
    for v in range(4):  # keep the checkpoint's version 4 only
        (log / f"{v:020d}.json").unlink()
    fresh = lv.Lake(str(tmp_path / "l"))
    with pytest.raises(lv.MomentTooOldError, match="oldest moment that can be served") as e:
        fresh.at(_moment(1_700_000_000 + 90)).read("t")
    assert e.value.oldest == _moment(1_700_000_000 + 240)
    assert isinstance(e.value, lv.VersionNotFoundError)
    assert fresh.at(e.value.oldest).read("t").num_rows == 4


def test_a_transfer_whose_other_half_log_clean_up_removed_is_still_seen_whole(local_backend):
    """``b``'s log was cleaned (a checkpoint, then its older commits deleted, the transfer's
    among them): the transfer's commit to ``a`` is still in the cut, since its other half
    landed below what ``b`` keeps."""
    lake = accounts(local_backend)
    with lake.transaction("R,CT") as txn:
        _transfer(txn)
    with lake.transaction("") as other:  # more commits on b, so that its checkpoint is above
        other.insert("b", {"id": [3], "value": [0]})
    lake.flush()
    lake.maintenance.checkpoint("b")
    root = Path(local_backend.uri.removeprefix("file://"))
    vb = lake.version("b")
    for v in range(vb):
        _commit_file(root, "b", v).unlink()
    fresh = local_backend.lake()
    view = fresh.at(_moment(time.time()))
    assert view.cut() == {"a": lake.version("a"), "b": vb}
    assert _total(view) == 0 and view.read("a", where="id = 1").column("value")[0].as_py() == -5


def test_a_global_log_position_clean_up_deleted_is_refused_naming_the_oldest_kept(backend):
    lake = accounts(backend)
    join_global_log(backend)
    for _ in range(4):
        with lake.transaction("R,CT,I") as txn:
            _transfer(txn)
    head = lake._client.gvl.head().seq
    lake.maintenance.cleanup(older_than=0, keep_global=1, force=True)
    with pytest.raises(lv.MomentTooOldError, match="position 0 was removed by clean-up") as e:
        lake.at(0)
    assert e.value.oldest == head - 1
    assert _total(lake.at(e.value.oldest)) == 0


def test_a_data_file_vacuumed_away_is_refused_as_too_old(tmp_path):
    lake = lv.Lake(str(tmp_path / "l"))
    lake.create_table("t", T)
    with lake.transaction("") as txn:
        txn.insert("t", {"id": [1], "value": [1]})
    before = time.time()
    old = list(lake.snapshot("t").files)
    with lake.transaction("") as txn:
        txn.update("t", set={"value": "2"}, where="id = 1")
    for path in old:  # what VACUUM deletes once the retention passed
        (tmp_path / "l" / "t" / path).unlink()
    with pytest.raises(lv.MomentTooOldError, match="data file"):
        lake.at(_moment(before)).read("t")
    assert lake.at(_moment(time.time())).read("t").column("value").to_pylist() == [2]


def test_inside_a_transaction_the_view_is_the_same_and_takes_no_part_in_it(backend):
    lake = accounts(backend)
    with lake.transaction("R,CT") as txn:
        _transfer(txn)
    moment = _moment(time.time())
    outside = lake.at(moment).cut()
    _next_second(backend, moment)

    def fn(txn):
        view = lake.at(moment)
        assert view.cut() == outside and _total(view) == 0
        _transfer(txn, 2)
        return view.read("b", where="id = 1").column("value")[0].as_py()

    assert lake.run(fn, "R,CT") == 5
    with lake.transaction("R,CT,I") as txn:
        assert lake.at(moment).cut() == outside
        txn.read("a")
    assert _total(lake.at(_moment(time.time()))) == 0


def test_the_view_refuses_writes_and_says_what_it_is(tmp_path):
    lake = lv.Lake(str(tmp_path / "l"))
    lake.create_table("t", T)
    view = lake.at(dt.datetime.now(dt.UTC).isoformat())
    with pytest.raises(lv.ReadOnlyLakeError, match="read-only view"):
        view.insert("t", {"id": [1], "value": [1]})
    with pytest.raises(lv.TableNotFoundError, match="did not exist"):
        lake.at("2000-01-01T00:00:00Z").read("t")
    assert view.tables() == ["t"] and view.read("t").num_rows == 0
    assert "LakeAt(" in repr(view)
    with pytest.raises(lv.InvalidArgumentError):
        lake.at(True)  # type: ignore[arg-type]


@CLASSIC_ONLY
def test_the_spark_engine_reads_the_same_cut_and_changes(spark, local_backend):
    """Both engines read a table at a version: the Spark engine's view of a moment between a
    transfer's two commits is the embedded engine's, and so are its changes."""
    lake = accounts(local_backend)
    with lake.transaction("R,CT") as txn:
        _transfer(txn)
    root = Path(local_backend.uri.removeprefix("file://"))
    base = time.time() + 3600
    for t, at in (("a", base), ("b", base + 60)):
        v = _versions_of(lake, t, txn.id)[0]
        for u in range(v, lake.version(t) + 1):
            os.utime(_commit_file(root, t, u), (at, at))
    with lv.Lake(local_backend.uri, engine=lv.SparkEngine(spark)) as sl:
        for when in (_moment(base + 30), _moment(base + 61)):
            view, ref = sl.at(when), lake.at(when)
            assert view.cut() == ref.cut()
            for t in ("a", "b"):
                rows = sorted((r["id"], r["value"]) for r in view.read(t).collect())
                assert rows == sorted((r["id"], r["value"]) for r in ref.read(t).to_pylist())
        got = sl.changes(["a", "b"], since=_moment(base - 1), until=_moment(base + 61))
        want = lake.changes(["a", "b"], since=_moment(base - 1), until=_moment(base + 61))
        for t in ("a", "b"):  # a DataFrame on Spark: the rows the embedded engine returns
            ours = got[t].toArrow().cast(want[t].schema)
            assert ours.sort_by("value").to_pylist() == want[t].sort_by("value").to_pylist()
