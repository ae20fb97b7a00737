"""Row tracking (``delta.enableRowTracking``, writer features ``rowTracking`` and
``domainMetadata``): every new file's add carries ``baseRowId`` past the table's
``rowIdHighWaterMark`` and ``defaultRowCommitVersion`` equal to the version it lands at, the
``delta.rowTracking`` domain's mark rises in the same commit, removes carry their add's ids, and
a commit that lands later than it first tried (a lost race, a redo, a queue) is assigned there.
No two rows of the table ever get one id, under concurrent writers of every feature set."""

from __future__ import annotations

import json
import threading

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.store import open_store
from tests.dv_tables import delta_rs_rows
from tests.helpers import HookStore

S = pa.schema([("id", pa.int64()), ("v", pa.string())])
ON = {"delta.enableRowTracking": "true"}


def _log(backend, table: str = "t") -> list[tuple[int, list[dict]]]:
    """Every commit of ``table``, (version, actions), oldest first."""
    store = backend.store()
    out = []
    for m in sorted(store.list(f"{table}/_delta_log/"), key=lambda m: m.key):
        if m.key.endswith(".json") and "/_delta_log/0" in m.key:
            version = int(m.key.rsplit("/", 1)[1][:20])
            lines = store.get(m.key).data.decode().splitlines()
            out.append((version, [json.loads(x) for x in lines if x.strip()]))
    return out


def _check_ids(backend, table: str = "t") -> list[tuple[int, int, int]]:
    """The protocol's rules for every commit; the fresh (version, first id, rows) ranges."""
    fresh: list[tuple[int, int, int]] = []
    ids_of: dict[str, tuple[int, int]] = {}  # path -> (baseRowId, defaultRowCommitVersion)
    mark, tracked = -1, False
    for version, actions in _log(backend, table):
        for p in (a["protocol"] for a in actions if "protocol" in a):
            tracked = "rowTracking" in (p.get("writerFeatures") or [])
        if not tracked:
            continue
        adds = [a["add"] for a in actions if "add" in a]
        for r in (a["remove"] for a in actions if "remove" in a):
            if r["path"] in ids_of:  # a remove carries the ids of its add
                assert (r["baseRowId"], r["defaultRowCommitVersion"]) == ids_of[r["path"]]
        for add in adds:
            base, cv = add["baseRowId"], add["defaultRowCommitVersion"]
            if ids_of.get(add["path"]) == (base, cv):
                continue  # a recommit (a deletion vector's re-add) keeps its ids
            n = json.loads(add["stats"])["numRecords"]
            assert cv == version, f"{add['path']} at {version} says {cv}"
            assert base > mark, f"{add['path']} at {version}: baseRowId {base} <= mark {mark}"
            fresh.append((version, base, n))
            mark = max(mark, base + n - 1)
            ids_of[add["path"]] = (base, cv)
        domains = [a["domainMetadata"] for a in actions if "domainMetadata" in a]
        if any(add["path"] in ids_of and ids_of[add["path"]][1] == version for add in adds):
            (dm,) = [d for d in domains if d["domain"] == "delta.rowTracking"]
            assert json.loads(dm["configuration"])["rowIdHighWaterMark"] == mark
    taken: set[int] = set()
    for _v, base, n in fresh:
        ids = set(range(base, base + n))
        assert not ids & taken, "a row id was given twice"
        taken |= ids
    return fresh


@pytest.mark.parametrize("dvs", [False, True], ids=["rewrite", "dv"])
@pytest.mark.parametrize("features", ["", "R", "R,CT", "R,CT,I"])
def test_every_new_file_gets_fresh_row_ids_at_the_version_it_lands(local_backend, features,
                                                                   dvs):
    props = {**ON, **({"delta.enableDeletionVectors": "true"} if dvs else {})}
    lake = local_backend.lake()
    lake.create_table("t", S, data={"id": [1, 2, 3], "v": ["a", "b", "c"]}, properties=props)
    with lake.transaction(features) as txn:
        txn.insert("t", {"id": [4, 5], "v": ["d", "e"]})
        txn.update("t", {"v": "'z'"}, where="id = 1")
    with lake.transaction(features) as txn:
        txn.delete("t", where="id = 2")
        txn.merge("t", pa.table({"id": [3, 9], "v": ["m", "n"]}), on="id") \
            .when_matched_update({"v": "source.v"}).when_not_matched_insert_all().execute()
    with lake.transaction(features) as txn:
        txn.optimize("t")
    fresh = _check_ids(local_backend)
    assert len(fresh) >= 5
    dt = local_backend.delta("t")
    assert {"rowTracking", "domainMetadata"} <= set(dt.protocol().writer_features or [])
    config = dt.metadata().configuration
    assert config["delta.rowTracking.materializedRowIdColumnName"]
    assert config["delta.rowTracking.materializedRowCommitVersionColumnName"]
    got = delta_rs_rows(local_backend.uri[len("file://"):] + "/t")  # its SQL reader reads DVs
    assert sorted((r["id"], r["v"]) for r in got) == [
        (1, "z"), (3, "m"), (4, "d"), (5, "e"), (9, "n")]


@pytest.mark.parametrize("features", ["", "R"])
def test_enabling_row_tracking_gives_every_file_ids_in_that_version(local_backend, features):
    """The version that sets ``delta.enableRowTracking`` re-adds every file without ids
    (``dataChange: false``) with fresh ones, as the protocol requires of it."""
    lake = local_backend.lake()
    lake.create_table("t", S, data={"id": [1, 2], "v": ["a", "b"]})
    with lake.transaction(features) as txn:
        txn.insert("t", {"id": [3], "v": ["c"]})
    with lake.transaction(features) as txn:
        txn.set_properties("t", ON)
    with lake.transaction(features) as txn:
        txn.insert("t", {"id": [4], "v": ["d"]})
    log = _log(local_backend)
    enabling = [acts for _v, acts in log if any(
        "metaData" in a and a["metaData"]["configuration"].get("delta.enableRowTracking")
        for a in acts)][0]
    readds = [a["add"] for a in enabling if "add" in a]
    assert len(readds) == 2 and not any(a["dataChange"] for a in readds)
    dt = local_backend.delta("t")
    live = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    assert len(live) == 3
    fresh = {(b, n) for _v, b, n in _check_ids(local_backend)}
    assert len(fresh) == 3
    assert sorted(r["id"] for r in dt.to_pyarrow_table().to_pylist()) == [1, 2, 3, 4]


def test_an_r_commit_that_lands_later_is_given_ids_at_that_version(backend):
    """A's append goes to the tail after B's, which took the version A read past: A's ids
    follow B's and name the version A landed at."""
    lake = backend.lake()
    lake.create_table("t", S, properties=ON)
    a = lake.transaction("R")
    a.insert("t", {"id": [1, 2], "v": ["a", "a"]})
    with backend.lake().transaction("R") as b:
        b.insert("t", {"id": [3, 4, 5], "v": ["b", "b", "b"]})
    a.commit()
    assert [(v, base, n) for v, base, n in _check_ids(backend)] == [(1, 0, 3), (2, 3, 2)]


def test_a_plain_delta_commit_that_loses_the_race_is_given_ids_at_its_new_version(
        local_backend):
    lake = local_backend.lake()
    lake.create_table("t", S, properties=ON)
    other = local_backend.lake()

    def theirs() -> None:
        with other.transaction("") as t:
            t.insert("t", {"id": [9, 9, 9], "v": ["x", "x", "x"]})

    store = HookStore(open_store(local_backend.uri),
                      lambda kind, key: kind == "put_if_absent"
                      and key.endswith(f"t/_delta_log/{1:020d}.json"), theirs)
    with lv.Lake(local_backend.uri, store=store).transaction("") as txn:
        txn.insert("t", {"id": [1], "v": ["ours"]})
    assert store.fired == 1
    assert _check_ids(local_backend) == [(1, 0, 3), (2, 3, 1)]


@pytest.mark.parametrize("features,mode", [("", "tail"), ("R", "tail"), ("R", "in_place"),
                                           ("R,CT", "in_place")])
def test_concurrent_writers_never_share_a_row_id(local_backend, features, mode):
    """Four threads appending and deleting at once, each through its own lake: every commit
    follows the protocol's rules and no row id is given twice; in place, no commit fills a
    marker (its ids could fall below a later version's mark)."""
    lake = local_backend.lake()
    lake.create_table("t", S, properties=ON)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        mine = local_backend.lake(commit_mode=mode)
        try:
            for i in range(5):  # each its own transaction: lake.run retries either whole
                mine.run(lambda txn, i=i: txn.insert("t", {"id": [w * 100 + i] * 2,
                                                           "v": [f"w{w}"] * 2}),
                         features=features, retries=20)
                mine.run(lambda txn, i=i: txn.delete("t", where=f"id = {w * 100 + i - 1}"),
                         features=features, retries=20)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    fresh = _check_ids(local_backend)
    assert sum(n for _v, _b, n in fresh) >= 40
    assert len(local_backend.delta("t").to_pyarrow_table()) == 8  # each writer's last two rows


def test_a_writer_that_loads_the_table_from_a_checkpoint_continues_past_its_mark(local_backend):
    """The mark and the files' ids live in the checkpoint too (domain metadata, add columns): a
    fresh client starting from it assigns past the mark, and its removes keep the ids."""
    lake = local_backend.lake()
    lake.create_table("t", S, properties=ON)
    for i in range(11):
        with lake.transaction("R") as txn:
            txn.insert("t", {"id": [i, i], "v": ["a", "b"]})
    lake.maintenance.checkpoint("t")
    with local_backend.lake().transaction("R") as txn:
        txn.insert("t", {"id": [99], "v": ["c"]})
        txn.delete("t", where="id = 0")
    assert _check_ids(local_backend)[-1] == (12, 22, 1)
