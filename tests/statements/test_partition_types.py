"""Every primitive Delta type as a partition column (issue 15, part 3): tables delta-rs writes,
logs in the form Delta on Spark writes (written by hand here: Delta's jars cannot be
installed), and tables lakevilla writes, read alike by lakevilla's engines and delta-rs,
with escaped values and nulls; what cannot be read is a LakeVillaError naming it."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakevilla as lv
from lakevilla.delta.schema import schema_to_json
from lakevilla.scan.pruning import candidates
from tests.statements.test_reads import canon, canon_rows

UTC = dt.UTC
D = decimal.Decimal

# one column per primitive type, values with path characters, unicode, NaN, extremes and nulls
VALUES: dict[str, pa.Array] = {
    "s": pa.array(["a/b", "50%", "sp ace", "é😀", None, "x=y", "q'\"#?"], pa.string()),
    "b": pa.array([b"a/b", b"\x01\x02", b"e\xcc\x81", None, b"%25", b"\xf0\x9f\x98\x80", b"q"],
                  pa.binary()),
    "bo": pa.array([True, False, None, True, False, True, False]),
    "i8": pa.array([1, -2, None, 127, -128, 0, 5], pa.int8()),
    "i16": pa.array([1, -2, None, 32767, -32768, 3, 4], pa.int16()),
    "i32": pa.array([1, -2, None, 2**31 - 1, -(2**31), 3, 4], pa.int32()),
    "i64": pa.array([1, -2, None, 2**63 - 1, -(2**63), 3, 4], pa.int64()),
    "f32": pa.array([1.5, float("nan"), None, -0.5, float("inf"), 0.25, 3.0], pa.float32()),
    "f64": pa.array([1.5, float("nan"), None, 1e20, float("-inf"), 0.1, -2.5], pa.float64()),
    "dec": pa.array([D("1.50"), D("-3.00"), None, D("0.00"), D("999.99"), D("0.01"), D("100.00")],
                    pa.decimal128(5, 2)),
    "d": pa.array([dt.date(2024, 1, 1), None, dt.date(1970, 1, 1), dt.date(2024, 2, 29),
                   dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(2000, 1, 1)]),
    "ts": pa.array([dt.datetime(2024, 1, 1, 1, 2, 3, 4, tzinfo=UTC), None,
                    dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(2024, 1, 1, tzinfo=UTC),
                    dt.datetime(2000, 1, 1, 23, 59, 59, 999999, tzinfo=UTC),
                    dt.datetime(2024, 1, 1, 1, 2, 3, 4, tzinfo=UTC),
                    dt.datetime(2030, 1, 1, tzinfo=UTC)],
                   pa.timestamp("us", "UTC")),
    "nt": pa.array([dt.datetime(2024, 1, 1, 1, 2, 3, 4), None, dt.datetime(1970, 1, 1),
                    dt.datetime(2024, 1, 1), dt.datetime(2000, 1, 1, 23, 59, 59, 999999),
                    dt.datetime(2024, 1, 1, 1, 2, 3, 4), dt.datetime(2030, 1, 1)],
                   pa.timestamp("us")),
}
N = 7
# a predicate on each type's partition column that selects rows 0 and 5 (or just 0)
PICKS = {
    "s": ("s IN ('a/b', 'x=y')", [0, 5]), "bo": ("bo AND id < 3", [0]),
    "i8": ("i8 = 1 OR i8 = 0", [0, 5]),
    "i16": ("i16 BETWEEN 1 AND 3 AND i16 <> 2", [0, 5]), "i32": ("i32 IN (1, 3)", [0, 5]),
    "i64": ("i64 = 1 OR i64 = 3", [0, 5]), "f32": ("f32 = 1.5 OR f32 = 0.25", [0, 5]),
    "f64": ("f64 > 1e19 OR f64 = 'NaN'::DOUBLE", [1, 3]),
    "dec": ("dec = 1.50 OR dec = 0.01", [0, 5]),
    "d": ("d = DATE '2024-01-01' OR d = DATE '9999-12-31'", [0, 5]),
    "ts": ("ts = TIMESTAMPTZ '2024-01-01 01:02:03.000004+00'", [0, 5]),
    "nt": ("nt = TIMESTAMP '2024-01-01 01:02:03.000004'", [0, 5]),
}


def _table(col: str) -> pa.Table:
    return pa.table({"id": pa.array(range(N), pa.int64()), col: VALUES[col]})


def _ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


@pytest.mark.parametrize("col", list(VALUES))
def test_delta_rs_tables_partitioned_by_each_type(local_backend, col):
    """delta-rs writes; lakevilla reads the same rows, prunes by the partition value, writes
    more files delta-rs reads back. (delta-rs writes binary partition values as escape text,
    ``\\u0061``, and reads them back as that text: lakevilla reads what delta-rs reads.)"""
    from deltalake import write_deltalake

    write_deltalake(local_backend.table_uri(col), _table(col), partition_by=[col])
    lake = local_backend.lake()
    theirs = pa.table(local_backend.delta(col).to_pyarrow_table())
    assert canon_rows(lake.read(col)) == canon_rows(theirs)
    if col in PICKS:
        where, want = PICKS[col]
        assert _ids(lake.read(col, where=where)) == want, where
        # one file per distinct value
        files = {repr(canon(VALUES[col][i].as_py())) for i in want}
        # pruned by the values
        assert len(candidates(lake.snapshot(col), where)) == len(files), where
        assert _ids(lake.read(col, where=f"{col} IS NULL")) == [
            i for i in range(N) if VALUES[col][i].as_py() is None]
    with lake.transaction(features="R") as txn:
        more = _table(col).set_column(0, "id", pa.array(range(N, 2 * N), pa.int64()))
        txn.insert(col, more)
    assert canon_rows(lake.read(col)) == canon_rows(
        pa.table(local_backend.delta(col).to_pyarrow_table()))


@pytest.mark.parametrize("col", list(VALUES))
def test_lakevilla_tables_partitioned_by_each_type(backend, col):
    """lakevilla writes (Delta's serialisation: binary as its UTF-8 text); lakevilla and
    delta-rs read back exactly the rows written, and updates keep the partition values."""
    lake = backend.lake()
    lake.create_table(col, _table(col).schema, partition_by=[col])
    with lake.transaction(features="R") as txn:
        txn.insert(col, _table(col))
    assert canon_rows(lake.read(col)) == canon_rows(_table(col))
    assert canon_rows(pa.table(backend.delta(col).to_pyarrow_table())) == canon_rows(_table(col))
    with lake.transaction(features="R") as txn:
        assert txn.update(col, set={"id": "id + 100"}, where="id >= 3") == 4
    want = _table(col).set_column(0, "id", pa.array([i if i < 3 else i + 100 for i in range(N)],
                                                    pa.int64()))
    assert canon_rows(lake.read(col)) == canon_rows(want)
    assert canon_rows(pa.table(backend.delta(col).to_pyarrow_table())) == canon_rows(want)


def test_binary_partition_values_that_are_not_text_are_refused(local_backend):
    lake = local_backend.lake()
    lake.create_table("t", pa.schema([("id", pa.int64()), ("b", pa.binary())]), partition_by=["b"])
    before = local_backend.all_keys()
    with pytest.raises(lv.SchemaMismatchError, match="UTF-8"), \
            lake.transaction(features="R") as txn:
        txn.insert("t", {"id": [1], "b": [b"\xff\xfe"]})
    lake.flush()
    assert local_backend.all_keys() == before


# -- a log in the form Delta on Spark writes -----------------------------------------------

SPARK_SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("d", pa.date32()),
                          ("b", pa.binary()), ("ts", pa.timestamp("us", "UTC")),
                          ("nt", pa.timestamp("us")), ("f", pa.float64()),
                          ("dec", pa.decimal128(5, 2)), ("bo", pa.bool_()), ("i8", pa.int8())])
SPARK_PARTS = [f.name for f in SPARK_SCHEMA if f.name != "id"]
# per file: (typed values, the partitionValues strings Spark writes for them)
SPARK_FILES = [
    ({"s": "a/b", "d": dt.date(2024, 1, 1), "b": b"\x01x/y",
      "ts": dt.datetime(2024, 1, 1, 1, 2, 3, 4, tzinfo=UTC),
      "nt": dt.datetime(2024, 1, 1, 1, 2, 3, 4), "f": 1.5, "dec": D("1.50"), "bo": True, "i8": 1},
     {"s": "a/b", "d": "2024-01-01", "b": "\x01x/y", "ts": "2024-01-01 01:02:03.000004",
      "nt": "2024-01-01 01:02:03.000004", "f": "1.5", "dec": "1.50", "bo": "true", "i8": "1"}),
    ({"s": "50% off", "d": dt.date(1999, 12, 31), "b": "é😀".encode(),
      "ts": dt.datetime(2024, 6, 1, tzinfo=UTC),
      "nt": dt.datetime(2024, 6, 1), "f": float("nan"), "dec": D("-3.00"), "bo": False, "i8": -128},
     {"s": "50% off", "d": "1999-12-31", "b": "é😀", "ts": "2024-06-01T00:00:00.000000Z",
      "nt": "2024-06-01 00:00:00", "f": "NaN", "dec": "-3.00", "bo": "false", "i8": "-128"}),
    ({"s": "é😀 #?", "d": None, "b": None, "ts": None, "nt": None, "f": float("inf"), "dec": None,
      "bo": None, "i8": None},
     {"s": "é😀 #?", "d": None, "b": None, "ts": None, "nt": None, "f": "Infinity", "dec": None,
      "bo": None, "i8": None}),
    ({"s": None, "d": dt.date(2024, 2, 29), "b": b"%25", "ts": dt.datetime(1970, 1, 1, tzinfo=UTC),
      "nt": dt.datetime(1970, 1, 1), "f": -0.5, "dec": D("999.99"), "bo": True, "i8": 127},
     {"s": None, "d": "2024-02-29", "b": "%25", "ts": "1970-01-01 00:00:00",
      "nt": "1970-01-01 00:00:00", "f": "-0.5", "dec": "999.99", "bo": "true", "i8": "127"}),
]
_SPARK_ESCAPE = set('"#%\'*/:=?\\\x7f{[]^')


def _spark_dir(v: str | None) -> str:
    """A partition directory value as Spark escapes it (ExternalCatalogUtils.escapePathName)."""
    if v is None:
        return "__HIVE_DEFAULT_PARTITION__"
    return "".join(f"%{ord(c):02X}" if c in _SPARK_ESCAPE or ord(c) < 0x20 else c for c in v)


def spark_form_table(root: Path, name: str = "sp", files=SPARK_FILES,
                     schema: pa.Schema = SPARK_SCHEMA) -> list[dict]:
    """A Delta table laid out and logged as Delta on Spark writes it; returns its rows."""
    parts = [f.name for f in schema if f.name != "id"]
    base = root / name
    log = base / "_delta_log"
    log.mkdir(parents=True)
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["timestampNtz"],
                "writerFeatures": ["timestampNtz"]}
    meta = {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
            "schemaString": schema_to_json(schema), "partitionColumns": parts, "configuration": {},
            "createdTime": 1700000000000}
    lines = [{"commitInfo": {"operation": "CREATE TABLE",
                             "engineInfo": "Apache-Spark/4.0 Delta-Lake/4.0"}},
             {"protocol": protocol}, {"metaData": meta}]
    rows = []
    for i, (typed, texts) in enumerate(files):
        rel = ("/".join(f"{c}={_spark_dir(texts[c])}" for c in parts)
               + f"/part-0000{i}-{uuid.uuid4()}.c000.snappy.parquet")
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        ids = [i * 10, i * 10 + 1]
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), base / rel)
        stats = {"numRecords": 2, "minValues": {"id": ids[0]}, "maxValues": {"id": ids[1]},
                 "nullCount": {"id": 0}}
        lines.append({"add": {"path": quote(rel, safe="/=_.-~!$&'()*+,;@" + "".join(
            c for c in rel if ord(c) > 127)), "partitionValues": texts,
            "size": (base / rel).stat().st_size,
            "modificationTime": 1700000000000, "dataChange": True, "stats": json.dumps(stats)}})
        rows += [{"id": x, **typed} for x in ids]
    (log / f"{0:020d}.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return rows


def test_a_table_written_in_sparks_form_reads_alike_everywhere(local_backend, tmp_path):
    """The issue's table: partitioned by a string, a date and a binary column (values with
    '/', '%', spaces, an emoji, nulls as __HIVE_DEFAULT_PARTITION__) and every other type;
    timestamps in both of Delta's forms (session-zone text and ISO 8601 UTC)."""
    rows = spark_form_table(tmp_path / "lake")
    want = canon_rows(pa.Table.from_pylist(rows, SPARK_SCHEMA))
    lake = local_backend.lake()
    for v in range(lake.version("sp") + 1):
        assert canon_rows(lake.read("sp", version=v)) == want
    assert canon_rows(pa.table(local_backend.delta("sp").to_pyarrow_table())) == want
    checks = {"s = 'a/b'": [0, 1], "s IS NULL": [30, 31], "d = DATE '2024-02-29'": [30, 31],
              "d IS NULL": [20, 21], "ts = TIMESTAMPTZ '2024-06-01 00:00:00+00'": [10, 11],
              "nt < TIMESTAMP '2000-01-01 00:00:00'": [30, 31], "f > 1": [0, 1, 10, 11, 20, 21],
              "dec = 1.5": [0, 1], "bo": [0, 1, 30, 31], "i8 = -128": [10, 11]}
    for where, ids in checks.items():
        assert _ids(lake.read("sp", where=where)) == ids, where
    with lake.transaction(features="R") as txn:  # and lakevilla writes into it
        txn.insert("sp", pa.Table.from_pylist([{**rows[0], "id": 99}], SPARK_SCHEMA))
        assert txn.delete("sp", where="i8 = 127") == 2
    after = [r for r in rows if r["i8"] != 127] + [{**rows[0], "id": 99}]
    want = canon_rows(pa.Table.from_pylist(after, SPARK_SCHEMA))
    assert canon_rows(lake.read("sp")) == want
    assert canon_rows(pa.table(local_backend.delta("sp").to_pyarrow_table())) == want


def test_a_partition_value_of_the_wrong_type_is_an_error_naming_it(local_backend, tmp_path):
    schema = pa.schema([("id", pa.int64()), ("n", pa.int32())])
    spark_form_table(tmp_path / "lake", "bad",
                     files=[({"n": 1}, {"n": "1"}), ({"n": None}, {"n": "one"})],
                     schema=schema)
    lake = local_backend.lake()
    with pytest.raises(lv.CorruptLogError, match=r"'one'.*'n'|'n'.*'one'"):
        lake.read("bad")
    assert _ids(lake.read("bad", where="id = 0")) == [0]  # the bad file is pruned: never read
    with pytest.raises(lv.CorruptLogError, match="'one'"):
        with lake.transaction(features="R") as txn:
            txn.delete("bad", where="id >= 0")
