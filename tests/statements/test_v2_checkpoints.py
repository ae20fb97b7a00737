"""Reading tables with V2 checkpoints (issue 38: reader feature ``v2Checkpoint``): UUID-named
checkpoints in JSON or Parquet, a classic-named one that follows the V2 spec, sidecar files of
add/remove rows, several checkpoints at one version; and written (below). The judge is the table's
own JSON commits: every version read through a checkpoint must equal the same version replayed
from the commits alone, and the store must have served the checkpoint (and its sidecars), not the
commits it covers. The Databricks-written table comes from delta-rs (tests/data/README.md)."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakevilla as lv
from lakevilla.delta.checkpoint import write_checkpoint_table
from lakevilla.store import CountingStore, open_store

REFERENCE = Path(__file__).parent.parent / "data" / "checkpoint-v2-table"
NEWEST = 9  # JSON V2 checkpoints at 6 and 8, each with one sidecar
LOG = "_delta_log"
_MAP = pa.map_(pa.string(), pa.string())
_CKPT_META = pa.struct([("version", pa.int64()), ("tags", _MAP)])
_SIDECAR = pa.struct([("path", pa.string()), ("sizeInBytes", pa.int64()),
                      ("modificationTime", pa.int64()), ("tags", _MAP)])


class Served(CountingStore):
    """The keys GET requests fetched."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.got: set[str] = set()

    def _tally(self, kind: str, key: str) -> None:
        if kind == "get":
            self.got.add(key.rsplit("/_delta_log/", 1)[-1])


def copy_reference(dest: Path) -> Path:
    shutil.copytree(REFERENCE, dest)
    return dest


def commits_only(lake_dir: Path) -> lv.Lake:
    """The reference table without any checkpoint, sidecar or hint: replayed from its commits."""
    path = copy_reference(lake_dir / "t")
    for f in (path / LOG).glob("*.checkpoint.*"):
        f.unlink()
    (path / LOG / "_last_checkpoint").unlink()
    shutil.rmtree(path / LOG / "_sidecars")
    return lv.Lake("file://" + str(lake_dir))


def rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def files_at(lake: lv.Lake, version: int) -> list[str]:
    return sorted(lake._client.log("t").snapshot(version).files)


def read_cold(lake_dir: Path, version: int | None) -> tuple[list[dict], list[str], set[str]]:
    """Rows and live files at ``version`` read by a fresh client, and the log keys it fetched."""
    uri = "file://" + str(lake_dir)
    store = Served(open_store(uri))
    with lv.Lake(uri, store=store) as lake:
        got = rows(lake.read("t", version=version))
        files = files_at(lake, version if version is not None else lake.version("t"))
    return got, files, store.got


@pytest.fixture
def judge(tmp_path):
    with commits_only(tmp_path / "judge") as lake:
        yield lake


@pytest.mark.parametrize("hint", [True, False], ids=["last-checkpoint", "listed"])
def test_every_version_reads_as_the_json_commits_replay_it(tmp_path, judge, hint):
    path = copy_reference(tmp_path / "lake" / "t")
    if not hint:
        (path / LOG / "_last_checkpoint").unlink()
    for v in [*range(NEWEST + 1), None]:
        got, files, served = read_cold(tmp_path / "lake", v)
        want_v = NEWEST if v is None else v
        assert got == rows(judge.read("t", version=want_v)), f"version {v}"
        assert files == files_at(judge, want_v), f"version {v}"
        if want_v >= 6:  # through the newest checkpoint at or below it, and its sidecar
            cp = 8 if want_v >= 8 else 6
            assert any(k.startswith(f"{cp:020d}.checkpoint.") and k.endswith(".json")
                       for k in served), served
            assert any(k.startswith(f"_sidecars/{cp:020d}.") for k in served), served
            assert f"{cp - 1:020d}.json" not in served and f"{1:020d}.json" not in served
    assert len(got) == 44 and got[-1]["id"] == 44


def _state(judge: lv.Lake, version: int):
    return judge._client.log("t").snapshot(version)


def _sidecar(log_dir: Path, adds: pa.Table) -> dict:
    """Write ``adds`` (ADD_SCHEMA rows) as a sidecar file; its ``sidecar`` action."""
    name = f"{uuid.uuid4()}.parquet"
    (log_dir / "_sidecars").mkdir(exist_ok=True)
    adds = adds.combine_chunks()
    col = pa.StructArray.from_arrays([c.chunk(0) if c.num_chunks else pa.array([], c.type)
                                      for c in adds.columns], fields=list(adds.schema))
    pq.write_table(pa.table({"add": col}), log_dir / "_sidecars" / name)
    return {"path": name, "sizeInBytes": (log_dir / "_sidecars" / name).stat().st_size,
            "modificationTime": 0, "tags": None}


def write_v2_checkpoint(log_dir: Path, judge: lv.Lake, version: int, *, fmt: str,
                        sidecars: int, name: str | None = None) -> str:
    """A V2 checkpoint at ``version``, from the state the commits replay to: ``fmt`` "json" or
    "parquet" (UUID-named) or "classic" (``n.checkpoint.parquet`` with checkpointMetadata); its
    adds in ``sidecars`` sidecar files (0: inline). Returns its file name."""
    snap = _state(judge, version)
    files = snap.files.table()
    half = (files.num_rows + 1) // 2
    side = [_sidecar(log_dir, files.slice(i * half, half)) for i in range(sidecars)] \
        if sidecars else []
    stem = f"{version:020d}.checkpoint"
    if fmt == "json":
        name = name or f"{stem}.{uuid.uuid4()}.json"
        lines = [{"checkpointMetadata": {"version": version, "tags": {}}},
                 {"protocol": snap.protocol.to_json()}, {"metaData": snap.metadata.to_json()},
                 *({"sidecar": s} for s in side)]
        if not sidecars:
            lines += [{"add": a.to_json()} for a in snap.files.values()]
        (log_dir / name).write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        return name
    name = name or (f"{stem}.parquet" if fmt == "classic" else f"{stem}.{uuid.uuid4()}.parquet")
    data, _ = write_checkpoint_table(snap.protocol, snap.metadata,
                                     files if not sidecars else files.slice(0, 0),
                                     snap.tombstones.table(), snap.app_txns, snap.domains)
    base = pq.read_table(pa.BufferReader(data))
    schema = base.schema.append(pa.field("checkpointMetadata", _CKPT_META)) \
        .append(pa.field("sidecar", _SIDECAR))
    schema = pa.schema([f.with_nullable(True) for f in schema])
    extra = [{"checkpointMetadata": {"version": version, "tags": []}},
             *({"sidecar": s} for s in side)]
    table = pa.Table.from_pylist(extra + base.to_pylist(), schema=schema)
    pq.write_table(table, log_dir / name)
    return name


def _without_checkpoints(tmp_path: Path) -> Path:
    """A copy of the reference table with none of its own checkpoints (commits all kept)."""
    path = copy_reference(tmp_path / "lake" / "t")
    for f in (path / LOG).glob("*.checkpoint.*"):
        f.unlink()
    (path / LOG / "_last_checkpoint").unlink()
    shutil.rmtree(path / LOG / "_sidecars")
    return path


@pytest.mark.parametrize("fmt,sidecars", [("parquet", 2), ("parquet", 0), ("json", 0),
                                          ("classic", 2), ("classic", 0)])
def test_hand_built_v2_checkpoints_read_as_the_commits_replay(tmp_path, judge, fmt, sidecars):
    path = _without_checkpoints(tmp_path)
    name = write_v2_checkpoint(path / LOG, judge, 8, fmt=fmt, sidecars=sidecars)
    for v in (1, 7):  # the commits it covers are gone: only the checkpoint can give 8 and 9
        (path / LOG / f"{v:020d}.json").unlink()
    for v in (8, 9, None):
        got, files, served = read_cold(tmp_path / "lake", v)
        want_v = NEWEST if v is None else v
        assert got == rows(judge.read("t", version=want_v)), f"version {v}"
        assert files == files_at(judge, want_v)
        assert name in served
        assert sum(k.startswith("_sidecars/") for k in served) == sidecars


def test_a_last_checkpoint_hint_names_a_uuid_checkpoint(tmp_path, judge):
    path = _without_checkpoints(tmp_path)
    name = write_v2_checkpoint(path / LOG, judge, 8, fmt="parquet", sidecars=2)
    (path / LOG / "_last_checkpoint").write_text(json.dumps(
        {"version": 8, "size": 4, "v2Checkpoint": {"path": name, "sizeInBytes": 1,
                                                   "modificationTime": 0}}))
    from lakevilla.delta.log import DeltaLog

    store = Served(open_store("file://" + str(tmp_path / "lake")))
    snap = DeltaLog(store, "t").snapshot(8)
    assert sorted(snap.files) == files_at(judge, 8) and name in store.got
    assert store.counts["list"] == 1  # only the one for newer checkpoints: the hint was followed
    got, _files, served = read_cold(tmp_path / "lake", 8)
    assert not any(k.startswith(f"{8:020d}.checkpoint.") and k != name for k in served)


def test_of_several_checkpoints_at_one_version_the_greatest_uuid_named_one_is_read(tmp_path,
                                                                                    judge):
    """The protocol lets a reader choose; we choose deterministically: a UUID-named checkpoint
    before the classic file, the greatest name among UUID-named ones. The others here are
    unreadable, so any other choice fails."""
    path = copy_reference(tmp_path / "lake" / "t")
    (path / LOG / "_last_checkpoint").unlink()
    chosen = next(f.name for f in (path / LOG).glob(f"{8:020d}.checkpoint.*.json"))
    smaller = f"{8:020d}.checkpoint.{uuid.UUID(int=0)}.json"
    lines = (path / LOG / chosen).read_text().replace(".parquet", "-gone.parquet")
    (path / LOG / smaller).write_text(lines)  # its sidecar does not exist
    (path / LOG / f"{8:020d}.checkpoint.parquet").write_bytes(b"not a checkpoint")
    got, _files, served = read_cold(tmp_path / "lake", None)
    assert got == rows(judge.read("t")) and chosen in served
    assert smaller not in served and f"{8:020d}.checkpoint.parquet" not in served


def test_a_missing_sidecar_is_a_corrupt_log_naming_it(tmp_path):
    path = copy_reference(tmp_path / "lake" / "t")
    gone = next((path / LOG / "_sidecars").glob(f"{8:020d}.*.parquet"))
    gone.unlink()
    with lv.Lake("file://" + str(tmp_path / "lake")) as lake:
        with pytest.raises(lv.CorruptLogError, match=gone.name):
            lake.read("t")
        assert lake.read("t", version=7).num_rows == 33  # the checkpoint at 6 is whole


def _tree(path: Path) -> dict[str, bytes]:
    return {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*"))
            if f.is_file()}


def test_the_reference_table_takes_inserts_numbered_past_its_identity_mark(tmp_path):
    """The Databricks table (V2 checkpoints, an identity column whose mark is 44) is written:
    a given identity value is refused before anything is written, inserts are numbered on."""
    path = copy_reference(tmp_path / "lake" / "t")
    before = _tree(path.parent)
    with lv.Lake("file://" + str(tmp_path / "lake")) as lake:
        assert lake.read("t").num_rows == 44
        with pytest.raises(lv.SchemaMismatchError, match="identity column"):
            with lake.transaction(features="") as txn:
                txn.insert("t", {"id": [100], "name": ["x"]})
        assert _tree(path.parent) == before  # refused before anything was written
        for features in ("", "R"):
            with lake.transaction(features=features) as txn:
                txn.insert("t", {"name": [f"by {features or 'DL'}"]})
        ids = sorted(lake.read("t").column("id").to_pylist())
        assert ids[-2:] == [45, 46] and len(set(ids)) == 46  # past Databricks' mark of 44


def test_a_cold_load_costs_the_hint_one_list_the_checkpoint_its_sidecar_and_newer_commits(
        tmp_path):
    from lakevilla.delta.log import DeltaLog

    copy_reference(tmp_path / "lake" / "t")
    store = Served(open_store("file://" + str(tmp_path / "lake")))
    snap = DeltaLog(store, "t").snapshot()
    assert snap.version == NEWEST and len(snap.files) == 8
    assert store.counts == {"get": 4, "list": 1}
    assert {k.split(".")[0] for k in store.got} == {"_last_checkpoint", f"{8:020d}",
                                                    f"_sidecars/{8:020d}", f"{9:020d}"}


# -- V2 checkpoints written ------------------------------------------------------------------

W = pa.schema([("id", pa.int64()), ("value", pa.int64())])


def _log_names(backend, table: str) -> list[str]:
    prefix = f"{table}/{LOG}/"
    return sorted(m.key[len(prefix):] for m in backend.store().list(prefix))


def _rs_rows(backend, table: str) -> list[dict]:
    from deltalake import QueryBuilder

    got = pa.table(QueryBuilder().register("t", backend.delta(table)).execute("SELECT * FROM t"))
    return rows(got)


def test_a_v2_table_gets_a_uuid_named_v2_checkpoint_that_readers_use_alone(backend):
    """A table asking for V2 checkpoints, with deletion vectors: the checkpoint is UUID-named,
    holds one ``checkpointMetadata`` of its version and every add with its DV, and the hint
    names it. Once the commits it covers are deleted, delta-rs and a fresh client read the
    same rows from it."""
    lake = backend.lake()
    lake.create_table("w", W, properties={"delta.checkpointPolicy": "v2",
                                          "delta.enableDeletionVectors": "true"})
    for i in range(3):
        with lake.transaction("R") as txn:
            txn.insert("w", {"id": [i, i + 10], "value": [i, i]})
    with lake.transaction("") as txn:
        txn.delete("w", where="id = 1")  # marks the row in its file: an add with a DV
    want = rows(lake.read("w"))
    v = lake.maintenance.checkpoint("w")
    cps = [n for n in _log_names(backend, "w") if ".checkpoint." in n]
    assert len(cps) == 1 and cps[0].startswith(f"{v:020d}.checkpoint.") and \
        cps[0].endswith(".parquet") and len(cps[0].split(".")[2]) == 36, cps
    store = backend.store()
    hint = json.loads(store.get(f"w/{LOG}/_last_checkpoint").data)
    assert hint["version"] == v and hint["v2Checkpoint"]["path"] == cps[0]
    t = pq.read_table(pa.BufferReader(store.get(f"w/{LOG}/{cps[0]}").data))
    assert [r for r in t.column("checkpointMetadata").to_pylist() if r] == \
        [{"version": v, "tags": None}]
    adds = [r for r in t.column("add").to_pylist() if r]
    assert sum(r["deletionVector"] is not None for r in adds) == 1
    store.delete_many([f"w/{LOG}/{x:020d}.json" for x in range(v)])
    with backend.lake() as fresh:
        assert rows(fresh.read("w")) == want
    assert _rs_rows(backend, "w") == want
    assert backend.delta("w").version() == v


def test_set_properties_makes_an_existing_table_write_v2_checkpoints(local_backend):
    lake = local_backend.lake()
    lake.create_table("w", W)
    with lake.transaction("") as txn:
        txn.insert("w", {"id": [1], "value": [1]})
    first = lake.maintenance.checkpoint("w")
    assert f"{first:020d}.checkpoint.parquet" in _log_names(local_backend, "w")
    with lake.transaction("R") as txn:
        txn.set_properties("w", {"delta.checkpointPolicy": "v2"})
        txn.insert("w", {"id": [2], "value": [2]})
    p = lake.snapshot("w").protocol
    assert (p.min_reader_version, p.min_writer_version) == (3, 7)
    assert "v2Checkpoint" in p.reader_features and "v2Checkpoint" in p.writer_features
    v = lake.maintenance.checkpoint("w")
    assert [n for n in _log_names(local_backend, "w") if n.startswith(f"{v:020d}.checkpoint.")
            and n != f"{v:020d}.checkpoint.parquet"]
    assert f"{v:020d}.checkpoint.parquet" not in _log_names(local_backend, "w")
    assert _rs_rows(local_backend, "w") == [{"id": 1, "value": 1}, {"id": 2, "value": 2}]
