"""Deletion vectors written: a DV too large to inline goes to a DV file of the table (the
Delta file format, read back by delta-rs), counted like a data file the statement wrote (an
abort, a redo, a dropped statement delete it; a crash leaves it referenced, protected by its
sublog, or swept); MERGE marks the rows it updates and deletes instead of rewriting files.
delta-rs' SQL reader, which applies deletion vectors, is the judge."""

from __future__ import annotations

import json
import struct
import time
import zlib

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.delta.deletion_vectors import FILE_FORMAT_VERSION, MAGIC, DeletionVector
from tests.dv_tables import delta_rs_rows

DV_TABLE = {"delta.enableDeletionVectors": "true"}
IDS = pa.schema([("id", pa.int64()), ("v", pa.int64())])
ROWS = 20_000
BIG = "id % 3 = 0"  # 6,667 rows of one file: a bitmap over INLINE_MAX (8 KiB)
BIG_ROWS = len(range(0, ROWS, 3))


def dv_lake(backend, name: str = "t", rows: int = ROWS, **kw) -> lv.Lake:
    lake = backend.lake(**kw)
    lake.create_table(name, IDS, properties=DV_TABLE)
    with lake.transaction("") as txn:
        txn.insert(name, {"id": list(range(rows)), "v": [0] * rows})
    return lake


def files_of(backend, name: str = "t", suffix: str = ".bin") -> set[str]:
    """Keys under the table (not its log) ending in ``suffix``."""
    return {m.key for m in backend.store().list(f"{name}/")
            if m.key.endswith(suffix) and "/_delta_log/" not in m.key}


def logged_dv_files(backend, name: str = "t") -> set[str]:
    """Keys of the DV files any commit of the table names, in an add or a remove."""
    store = backend.store()
    out = set()
    for m in store.list(f"{name}/_delta_log/"):
        if not m.key.endswith(".json"):
            continue
        for line in store.get(m.key).data.decode().splitlines():
            action = json.loads(line)
            for kind in ("add", "remove"):
                dv = (action.get(kind) or {}).get("deletionVector")
                if dv and dv["storageType"] == "u":
                    out.add(f"{name}/{DeletionVector.from_json(dv).relative_file()}")
    return out


def judged(backend, name: str = "t", version: int | None = None) -> list[int]:
    rows = delta_rs_rows(backend.table_uri(name), version, backend.storage_options)
    return sorted(r["id"] for r in rows)


def ours(lake: lv.Lake, name: str = "t") -> list[int]:
    return sorted(lake.read(name).column("id").to_pylist())


# -- a DV file, in Delta's format ----------------------------------------------------------------

def test_a_deletion_vector_too_large_to_inline_is_written_to_a_dv_file(backend):
    """The file: the format version, then the DV's big-endian size, its bytes (the magic number
    and a portable 64-bit RoaringBitmap) and their CRC-32; the add names it by its UUID in Z85,
    at offset 1. No data file is rewritten; a later delete writes a new DV file and the old one
    stays for time travel."""
    lake = dv_lake(backend)
    parquet = files_of(backend, suffix=".parquet")
    with lake.transaction("R") as txn:
        assert txn.delete("t", where=BIG) == BIG_ROWS
    assert files_of(backend, suffix=".parquet") == parquet
    dv_file, = files_of(backend)
    add, = lake.snapshot("t").files.values()
    dv = add.deletion_vector
    assert dv is not None and (dv.storage_type, dv.offset, dv.cardinality) == ("u", 1, BIG_ROWS)
    assert f"t/{dv.relative_file()}" == dv_file
    blob = backend.store().get(dv_file).data
    assert blob[0] == FILE_FORMAT_VERSION
    size, = struct.unpack_from(">i", blob, 1)
    raw = blob[5:5 + size]
    assert size == dv.size_in_bytes > 8 * 1024 and len(blob) == 1 + 4 + size + 4
    assert struct.unpack_from("<I", raw)[0] == MAGIC
    assert struct.unpack_from(">I", blob, 5 + size)[0] == zlib.crc32(raw)
    expected = [i for i in range(ROWS) if i % 3]
    assert ours(lake) == judged(backend) == expected
    with lake.transaction("R") as txn:  # more rows of the same file: the union, in a new file
        assert txn.delete("t", where="id % 3 = 1 AND id < 300") == 100
    assert len(files_of(backend)) == 2 and files_of(backend, suffix=".parquet") == parquet
    assert ours(lake) == judged(backend) == [i for i in expected if i >= 300 or i % 3 != 1]
    assert judged(backend, version=2) == expected  # the older DV file still reads


@pytest.mark.parametrize("features", ["R", "R,CT,I"])
def test_an_aborted_transaction_deletes_its_dv_file_not_the_file_it_marked(local_backend,
                                                                          features):
    lake = dv_lake(local_backend)
    parquet = files_of(local_backend, suffix=".parquet")
    with pytest.raises(RuntimeError, match="changed my mind"):
        with lake.transaction(features) as txn:
            txn.delete("t", where=BIG)
            assert len(files_of(local_backend)) == 1
            raise RuntimeError("changed my mind")
    assert files_of(local_backend) == set()
    assert files_of(local_backend, suffix=".parquet") == parquet
    assert ours(lake) == list(range(ROWS))


def test_a_redone_delete_leaves_only_the_dv_file_its_commit_names(local_backend):
    """The first run's DV file is garbage once the redo wrote the union of both deletions to
    a new one: deleted after the commit, like the data files a redo replaces."""
    lake = dv_lake(local_backend)
    first = lake.begin("R")
    first.delete("t", where=BIG)
    with lake.transaction("R") as other:
        other.delete("t", where="id = 1")
    assert first.commit().stats["redos"] >= 1
    lake.flush()  # the clean-up runs behind the commit
    add, = lake.snapshot("t").files.values()
    assert add.deletion_vector is not None and add.deletion_vector.cardinality == BIG_ROWS + 1
    assert files_of(local_backend) == {f"t/{add.deletion_vector.relative_file()}"}
    assert ours(lake) == judged(local_backend) == [i for i in range(ROWS) if i % 3 and i != 1]


def test_a_transaction_that_marks_a_file_twice_commits_only_its_last_dv_file(local_backend):
    """The first statement's DV file is never committed (the second replaced its add): it is
    deleted after the commit. A file the transaction inserted and then marked stays."""
    lake = dv_lake(local_backend)
    with lake.transaction("R") as txn:
        txn.insert("t", {"id": list(range(ROWS, 2 * ROWS)), "v": [0] * ROWS})
        txn.delete("t", where=BIG)
        assert len(files_of(local_backend)) == 1
        txn.delete("t", where="id % 3 = 1 AND (id < 300 OR id >= 39700)")  # both files again
    lake.flush()  # the clean-up runs behind the commit
    named = {f"t/{a.deletion_vector.relative_file()}" for a in lake.snapshot("t").files.values()
             if a.deletion_vector is not None}
    assert len(named) == 1 and files_of(local_backend) == named
    expected = [i for i in range(2 * ROWS) if i % 3 and (300 <= i < 39700 or i % 3 != 1)]
    assert ours(lake) == judged(local_backend) == expected


def test_a_plain_delta_delete_dropped_after_a_conflict_deletes_its_dv_file(local_backend):
    """LV[DL]: the statement lost to a concurrent delete of the same file: it is dropped, its
    DV file with it; the marked data file stays."""
    from tests.helpers import HookStore

    dv_lake(local_backend)
    parquet = files_of(local_backend, suffix=".parquet")

    def concurrent_delete() -> None:
        with local_backend.lake().transaction("") as txn:
            txn.delete("t", where="id = 2")

    store = HookStore(local_backend.store(),
                      lambda kind, key: kind == "put_if_absent" and key.endswith(
                          f"{2:020d}.json"), concurrent_delete)
    with pytest.raises(lv.TransactionAborted, match="conflicts"):
        with local_backend.lake(store=store).transaction("") as txn:
            txn.delete("t", where=BIG)
    assert files_of(local_backend) == set()
    assert files_of(local_backend, suffix=".parquet") == parquet
    assert judged(local_backend) == [i for i in range(ROWS) if i != 2]


def test_a_crash_anywhere_leaves_no_dv_file_the_sweep_would_not_clean(backend):
    """A crash at every store call of an R transaction that writes a DV file: after recovery
    the abandoned-file sweep (no retention) keeps the DV file while a sublog names it, so the
    crashed transaction resumes and commits; every DV file left is then one a commit names."""
    from tests.helpers import count_calls, crash_plans, crash_stride, entries_landed, run_crashing

    holder: dict = {}

    def action_on(name: str):
        def action(lake) -> None:
            txn = lake.begin("R")
            holder["id"] = txn.id
            txn.delete(name, where=BIG)
            entries_landed(txn)  # the same n-th store call in every run
            txn.commit()
        return action

    def make(store):
        return backend.lake(store=store, marker_ttl=5.0)

    def later() -> float:
        return time.time() + 3600

    base = backend.store()
    dv_lake(backend, "probe")
    n = count_calls(base, make, action_on("probe"))
    after = [i for i in range(ROWS) if i % 3]
    seen = {"committed": 0, "resumed": 0, "re-run": 0, "swept": 0}
    for i, (label, plan) in enumerate(crash_plans(n, every=crash_stride(backend, "one"))):
        name = f"t{i}"
        dv_lake(backend, name)
        run_crashing(base, plan, make, action_on(name))
        sweeper = backend.lake(marker_ttl=5.0, clock=later)
        sweeper.recover(tables=[name])
        swept = sweeper.maintenance.delete_abandoned_files(name, min_age=0, force=True)
        seen["swept"] += any(k.endswith(".bin") for _t, k in swept)
        if ours(sweeper, name) != after:
            try:
                resumed = backend.lake(marker_ttl=5.0).resume(holder["id"])
            except lv.LakeVillaError as e:
                assert "no sublogs" in str(e), label
                seen["re-run"] += 1
                action_on(name)(backend.lake())
            else:
                if not resumed.operations:
                    resumed.delete(name, where=BIG)
                resumed.commit()
                seen["resumed"] += 1
        else:
            seen["committed"] += 1
        backend.lake().flush()
        sweeper.maintenance.delete_abandoned_files(name, min_age=0, force=True)
        assert ours(sweeper, name) == judged(backend, name) == after, label
        assert files_of(backend, name) == logged_dv_files(backend, name), label
    assert seen["committed"], seen
    if backend.kind == "local":  # through moto a sample of the points, which may miss these
        assert seen["resumed"], seen  # crashes between the sublog entry and the commit
        assert seen["swept"], seen  # crashes after the DV file's PUT, before any entry named it


# -- MERGE by deletion vectors ---------------------------------------------------------------------

@pytest.mark.parametrize("features", ["", "R", "R,CT,I"])
@pytest.mark.parametrize("deleted", ["few", "many"])
def test_a_merge_marks_the_rows_it_updates_and_deletes_and_writes_only_new_rows(
        local_backend, features, deleted):
    """Matched-update and matched-delete mark their rows in each file's DV (inline, or a DV
    file when many), by their place in that file; the updated and inserted rows are one new
    file: the target's two files stay."""
    lake = local_backend.lake()
    lake.create_table("t", IDS, properties=DV_TABLE)
    half = ROWS  # two files, each DV over INLINE_MAX when every third row goes
    for lo in (0, half):
        with lake.transaction("") as txn:
            txn.insert("t", {"id": list(range(lo, lo + half)), "v": [0] * half})
    parquet = files_of(local_backend, suffix=".parquet")
    gone = [5, half + 7] if deleted == "few" else list(range(0, 2 * half, 3))
    new_id = 2 * half + 2
    source = {"id": [half + 2, *gone, new_id], "v": [10] + [-1] * len(gone) + [30]}
    with lake.transaction(features) as txn:
        metrics = (txn.merge("t", source, on="id")
                   .when_matched_delete("source.v < 0")
                   .when_matched_update({"v": "source.v"})
                   .when_not_matched_insert_all().execute())
    assert (metrics["num_target_rows_updated"], metrics["num_target_rows_deleted"],
            metrics["num_target_rows_inserted"]) == (1, len(gone), 1)
    new = files_of(local_backend, suffix=".parquet") - parquet
    assert len(new) == 1 and parquet <= files_of(local_backend, suffix=".parquet")  # kept
    dvs = [a.deletion_vector for a in lake.snapshot("t").files.values() if a.deletion_vector]
    assert len(dvs) == 2 and sum(dv.cardinality for dv in dvs) == len(gone) + 1  # + updated
    assert {dv.storage_type for dv in dvs} == ({"i"} if deleted == "few" else {"u"})
    removed = set(gone)
    expected = sorted([{"id": i, "v": 10 if i == half + 2 else 0} for i in range(2 * half)
                       if i not in removed] + [{"id": new_id, "v": 30}],
                      key=lambda r: r["id"])
    assert sorted(lake.read("t").to_pylist(), key=lambda r: r["id"]) == expected
    assert sorted(delta_rs_rows(local_backend.table_uri("t")), key=lambda r: r["id"]) == expected


def test_a_crash_anywhere_in_a_transaction_that_merges_by_dv_recovers_or_resumes(local_backend):
    """A MERGE marking many rows (a DV file) then a DELETE of the same file, crashed at every
    store call: recovery leaves all or nothing (delta-rs agrees), and the crashed client resumes
    from its sublogs, its DV files checked present, and finishes."""
    from tests.helpers import sweep_crashes_recover_resume

    steps = [
        lambda t, name: (t.merge(name, {"id": [*range(0, ROWS, 3), ROWS],
                                        "v": [-1] * BIG_ROWS + [5]}, on="id")
                         .when_matched_delete().when_not_matched_insert_all().execute()),
        lambda t, name: t.delete(name, where="id = 1"),
    ]
    before, after, seen = sweep_crashes_recover_resume(
        local_backend, steps, lambda name: dv_lake(local_backend, name),
        lambda rs: sorted(rs, key=lambda r: r["id"]), later=lambda: time.time() + 3600)
    assert [r["id"] for r in after] == [i for i in range(ROWS) if i % 3 and i != 1] + [ROWS]
    assert all(seen.values()), seen


def test_resuming_a_transaction_whose_dv_file_is_gone_aborts_as_lost_data(local_backend):
    """A resumed transaction commits the adds its sublog names: one whose DV file is missing
    would commit an add no reader can apply, so resume checks the DV file as it checks data."""
    from tests.helpers import entries_landed

    lake = dv_lake(local_backend, marker_ttl=5.0)
    crashed = lake.begin("R")
    crashed.delete("t", where=BIG)
    entries_landed(crashed)
    lake._client.heartbeats.forget(crashed)  # the client is gone: no heartbeat, no commit
    dv_file, = files_of(local_backend)
    local_backend.store().delete(dv_file)  # as a sweep that ignored the sublog would
    with pytest.raises(lv.TransactionAborted, match="deletion_vector_") as e:
        local_backend.lake(marker_ttl=5.0).resume(crashed.id)
    assert e.value.reason == "lost-data"
    assert ours(lake) == judged(local_backend) == list(range(ROWS))
