"""Delta tables of any size and log length, written straight to the store as their log files
(no commits through a writer): a checkpoint of N file actions at version 1, then commits that
each replace one file, with a checkpoint every ``interval`` versions as a Delta writer leaves
them. Only the files a benchmark reads or rewrites exist as Parquet; the others are statistics
that prune them away. ``benchmarks.reads`` (snapshot scaling) and ``benchmarks.scale`` build
their tables here; delta-rs and lakevilla both load them.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

SCALE_SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "v", "type": "double", "nullable": True, "metadata": {}},
    {"name": "p", "type": "string", "nullable": True, "metadata": {}}]}
PER_FILE = 100  # rows each synthetic file claims
REMOVED_AT_2 = 2  # the first file a commit replaces (then each commit replaces the one before)
OLD_MS = 1_700_000_000_000  # removal time: tombstones long past retention, left out of checkpoints


def file_path(i: int) -> str:
    return f"part-{i:08d}-{uuid.UUID(int=i)}-c000.snappy.parquet"


def file_stats(i: int) -> str:
    return (f'{{"numRecords":{PER_FILE},"minValues":{{"id":{i * PER_FILE},"v":{i * 0.5}}},'
            f'"maxValues":{{"id":{i * PER_FILE + PER_FILE - 1},"v":{i * 0.5 + 1}}},'
            '"nullCount":{"id":0,"v":0}}')


def row_id(i: int) -> int:
    """The id of the row updated in file ``i`` (its ``v`` starts at ``row_id * 0.005``)."""
    return i * PER_FILE + 42


@dataclass(frozen=True)
class Shape:
    """What a synthetic table looks like: ``files`` live files, versions 0 to ``commits - 1``,
    a checkpoint at version 1 and then every ``interval`` versions (also the table's
    ``delta.checkpointInterval``, so writers go on the same way), and the files that exist."""

    files: int
    commits: int
    interval: int
    real: tuple[int, ...]


def parquet_file(i: int) -> bytes:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = io.BytesIO()
    ids = np.arange(i * PER_FILE, (i + 1) * PER_FILE)
    pq.write_table(pa.table({"id": ids, "v": ids * 0.005, "p": pa.array(["x"] * PER_FILE)}), data)
    return data.getvalue()


def log_objects(shape: Shape) -> Iterator[tuple[str, bytes]]:
    """(key under the table, bytes) of every object of the table, data files first."""
    import numpy as np
    import pyarrow as pa

    from lakevilla.delta.actions import Metadata, Protocol
    from lakevilla.delta.checkpoint import last_checkpoint_json, write_checkpoint_table
    from lakevilla.delta.files import ADD_SCHEMA, REMOVE_SCHEMA

    n = shape.files
    if REMOVED_AT_2 in shape.real or not all(0 <= i < n for i in shape.real):
        raise ValueError(f"real files {shape.real} must lie in 0..{n - 1}, not {REMOVED_AT_2}")
    sizes = np.full(n, 12345, dtype=np.int64)
    for i in shape.real:
        body = parquet_file(i)
        sizes[i] = len(body)
        yield file_path(i), body
    meta = Metadata(id=str(uuid.uuid4()), schema_string=json.dumps(SCALE_SCHEMA),
                    partition_columns=[],
                    configuration={"delta.checkpointInterval": str(shape.interval)},
                    created_time=0)
    proto = Protocol(1, 2)
    yield "_delta_log/" + f"{0:020d}.json", (json.dumps({"protocol": proto.to_json()}) + "\n" +
                                             json.dumps({"metaData": meta.to_json()}) + "\n"
                                             ).encode()
    yield "_delta_log/" + f"{1:020d}.json", b'{"commitInfo":{"operation":"synthetic"}}\n'
    adds = pa.table({"path": pa.array([file_path(i) for i in range(n)]),
                     "partitionValues": pa.array([[]] * n,
                                                 ADD_SCHEMA.field("partitionValues").type),
                     "size": pa.array(sizes),
                     "modificationTime": pa.array(np.full(n, OLD_MS)),
                     "dataChange": pa.array(np.zeros(n, bool)),
                     "stats": pa.array([file_stats(i) for i in range(n)]),
                     "tags": pa.nulls(n, ADD_SCHEMA.field("tags").type)})  # the rest: null

    def checkpoint(version: int, files: pa.Table) -> Iterator[tuple[str, bytes]]:
        body, rows = write_checkpoint_table(proto, meta, files, REMOVE_SCHEMA.empty_table(), {})
        yield f"_delta_log/{version:020d}.checkpoint.parquet", body
        yield "_delta_log/_last_checkpoint", last_checkpoint_json(version, rows, len(body), n)

    last: list[tuple[str, bytes]] = list(checkpoint(1, adds))
    yield last[0]
    for v in range(2, shape.commits):  # each commit replaces one file: the table keeps its size
        gone = REMOVED_AT_2 if v == 2 else n + v - 1
        add = {"path": file_path(n + v), "partitionValues": {}, "size": 12345,
               "modificationTime": OLD_MS, "dataChange": True, "stats": file_stats(n + v)}
        rm = {"path": file_path(gone), "deletionTimestamp": OLD_MS, "dataChange": True}
        yield (f"_delta_log/{v:020d}.json",
               (json.dumps({"add": add}) + "\n" + json.dumps({"remove": rm}) + "\n").encode())
        if v % shape.interval == 0:
            row = pa.table({c: pa.array([add.get(c)] if c != "partitionValues" else [[]],
                                        adds.schema.field(c).type) for c in adds.column_names})
            live = pa.concat_tables([adds.slice(0, REMOVED_AT_2), row,
                                     adds.slice(REMOVED_AT_2 + 1)])
            last = list(checkpoint(v, live))
            yield last[0]
    yield last[1]  # _last_checkpoint: the newest checkpoint, written last


def build(store: Any, table: str, shape: Shape, objects: Sequence[tuple[str, bytes]] | None = None,
          threads: int = 8) -> None:
    """Write the table ``shape`` describes under ``table`` (``objects``: ``log_objects(shape)``
    made once for several copies). Commits go first, ``_last_checkpoint`` last."""
    objs = list(objects if objects is not None else log_objects(shape))
    *body, hint = objs
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda kv: store.put(f"{table}/{kv[0]}", kv[1]), body))
    store.put(f"{table}/{hint[0]}", hint[1])
