"""Snapshots of big checkpoints: columns read from the checkpoint's Parquet as they are needed,
in batches, never whole, give the files, the pruning and the rows a whole read gives.

"Big" is the size thresholds of ``lakevilla.delta.files`` turned down, so that a checkpoint of a
hundred files takes the path of one of a million: several row groups, several batches per row
group, the statistics parsed on threads, and reads of a few rows that decode their row groups
only. Two layouts: ours (the adds contiguous in their row groups) and one where removes and
adds alternate row by row, as other writers may lay them out (the adds a row group holds are
not a slice of it).
"""

from __future__ import annotations

import io
import json
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakevilla as lv
from lakevilla.delta import files as delta_files
from lakevilla.delta.actions import Metadata, Protocol
from lakevilla.delta.checkpoint import last_checkpoint_json, write_checkpoint_table
from lakevilla.delta.files import ADD_SCHEMA, REMOVE_SCHEMA
from lakevilla.scan import statcols
from lakevilla.scan.pruning import candidates
from lakevilla.store import open_store

N = 100  # files in the checkpoint
SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "v", "type": "double", "nullable": True, "metadata": {}}]}
WHERES = [
    "id = 4242",  # one file
    "id BETWEEN 250 AND 450",  # files 2, 3 and 4; 3 is removed after the checkpoint
    "id < 1000 OR v > 45.5",  # the first ten and the last few
    "v IS NULL",  # the files whose statistics count nulls
    "id > 0",  # nearly all
]


def _path(i: int) -> str:
    return f"part-{i:05d}.parquet"


def _stats(i: int) -> str:
    nulls = 1 if i % 10 == 0 else 0
    return json.dumps({"numRecords": 100, "minValues": {"id": i * 100, "v": i * 0.5},
                       "maxValues": {"id": i * 100 + 99, "v": i * 0.5 + 1},
                       "nullCount": {"id": 0, "v": nulls}})


def _interleaved(body: bytes) -> bytes:
    """The checkpoint with its remove and add rows alternating, in row groups of 7 rows."""
    t = pq.read_table(io.BytesIO(body))
    is_add = np.asarray(t.column("add").is_valid())
    is_rm = np.asarray(t.column("remove").is_valid())
    head = np.flatnonzero(~is_add & ~is_rm)
    adds, rms = np.flatnonzero(is_add), np.flatnonzero(is_rm)
    mixed = [x for pair in zip(adds, rms, strict=False) for x in pair]
    mixed += list(adds[len(rms):])
    out = io.BytesIO()
    pq.write_table(t.take(np.concatenate([head, mixed]).astype(np.int64)), out, row_group_size=7)
    return out.getvalue()


def _table(root: str, layout: str) -> None:
    """Version 0 (protocol, metadata), a checkpoint at 1 of N files and N // 2 tombstones, then
    commits that remove file 3 and add files N and N + 1."""
    store = open_store(root)
    log = "t/_delta_log"
    meta = Metadata(id=str(uuid.uuid4()), schema_string=json.dumps(SCHEMA),
                    partition_columns=[], configuration={}, created_time=0)
    proto = Protocol(1, 2)
    store.put(f"{log}/{0:020d}.json", (json.dumps({"protocol": proto.to_json()}) + "\n" +
                                       json.dumps({"metaData": meta.to_json()}) + "\n").encode())
    store.put(f"{log}/{1:020d}.json", b'{"commitInfo":{"operation":"test"}}\n')
    no_values = pa.array([[]] * N, ADD_SCHEMA.field("partitionValues").type)
    adds = pa.table({"path": [_path(i) for i in range(N)], "partitionValues": no_values,
                     "size": pa.array(np.arange(N) + 1000),
                     "modificationTime": pa.array(np.arange(N) + 1_700_000_000_000),
                     "dataChange": pa.array(np.zeros(N, bool)),
                     "stats": [_stats(i) if i % 17 else None for i in range(N)]})
    removes = pa.table({"path": [f"gone-{i}.parquet" for i in range(N // 2)],
                        "deletionTimestamp": pa.array(np.full(N // 2, 1_700_000_000_000)),
                        "dataChange": pa.array(np.zeros(N // 2, bool))})
    body, rows = write_checkpoint_table(proto, meta, adds,
                                        removes.cast(pa.schema([REMOVE_SCHEMA.field(n)
                                                                for n in removes.column_names])),
                                        {})
    if layout == "interleaved":
        body = _interleaved(body)
    store.put(f"{log}/{1:020d}.checkpoint.parquet", body)
    store.put(f"{log}/_last_checkpoint", last_checkpoint_json(1, rows, len(body), N))
    rm = {"path": _path(3), "deletionTimestamp": 1_700_000_000_001, "dataChange": True}
    store.put(f"{log}/{2:020d}.json", json.dumps({"remove": rm}).encode() + b"\n")
    for v, i in ((3, N), (4, N + 1)):
        add = {"path": _path(i), "partitionValues": {}, "size": 7, "modificationTime": 0,
               "dataChange": True, "stats": _stats(i)}
        store.put(f"{log}/{v:020d}.json", json.dumps({"add": add}).encode() + b"\n")


@pytest.fixture(params=["ours", "interleaved"])
def table_root(request, tmp_path, monkeypatch) -> str:
    monkeypatch.setattr("lakevilla.delta.checkpoint.ROWS_PER_GROUP", 16)
    root = str(tmp_path / "lake")
    _table(root, request.param)
    return root


def _whole(root: str, monkeypatch) -> lv.Lake:
    monkeypatch.setattr(delta_files, "EAGER_ROWS", 1 << 16)
    return lv.Lake(root)


def _batched(monkeypatch) -> None:
    monkeypatch.setattr(delta_files, "EAGER_ROWS", 10)
    monkeypatch.setattr(delta_files, "BATCH_ROWS", 16)
    monkeypatch.setattr(delta_files, "TAKE_BATCH", 3)
    monkeypatch.setattr(statcols, "MIN_SLICE", 1)  # the statistics parsed on threads
    monkeypatch.setattr(statcols, "PY_ROWS", 10)  # by DuckDB, as a big table's are


def test_a_big_checkpoint_prunes_as_a_whole_read_does(table_root, monkeypatch):
    whole = _whole(table_root, monkeypatch).snapshot("t")
    want = {w: sorted(candidates(whole, w), key=lambda a: a.path) for w in WHERES}
    # files 2 and 4, and those without statistics (every 17th); not 3, removed after it
    assert [a.path for a in want["id BETWEEN 250 AND 450"]] == [
        _path(i) for i in (0, 2, 4, 17, 34, 51, 68, 85)]
    _batched(monkeypatch)
    snap = lv.Lake(table_root).snapshot("t")
    assert snap.files.base.num_rows == N
    for i, w in enumerate(WHERES):
        assert sorted(candidates(snap, w), key=lambda a: a.path) == want[w], w
        if i < 2:  # the statistics were streamed and parsed, not kept; the few files found
            # were read from their row groups: no column was decoded whole
            assert not snap.files.base._columns


def test_a_few_rows_of_a_big_checkpoint_are_the_rows_a_whole_read_has(table_root, monkeypatch):
    whole = _whole(table_root, monkeypatch).snapshot("t").files.base
    want = whole.table
    _batched(monkeypatch)
    base = lv.Lake(table_root).snapshot("t").files.base
    rng = np.random.default_rng(7)
    for _ in range(delta_files.LAZY_TAKES):
        idx = rng.choice(N, size=int(rng.integers(1, 12)), replace=False)  # unsorted
        assert base.take(idx).equals(want.take(idx))
        assert base.actions(idx) == whole.actions(idx)  # the same rows: the read just made
    assert not base._columns  # each read decoded the row groups it needed, kept nothing
    reads = base._takes
    assert base.take(idx).equals(want.take(idx))  # the same rows again: kept from the last read
    assert base._takes == reads
    idx = np.array([N - 1, 0, 50])
    assert base.take(idx).equals(want.take(idx))
    assert set(base._columns) == set(ADD_SCHEMA.names)  # asked again and again: decoded whole


def test_a_big_checkpoint_streams_its_statistics_in_row_order(table_root, monkeypatch):
    want = _whole(table_root, monkeypatch).snapshot("t").files.base.column("stats")
    _batched(monkeypatch)
    base = lv.Lake(table_root).snapshot("t").files.base
    got = list(base.batches("stats", 5))
    assert max(len(b) for b in got) <= 5
    assert pa.chunked_array(got, pa.string()).to_pylist() == want.to_pylist()
    assert "stats" not in base._columns
