"""Every Delta table under a folder, read by lakevilla and by delta-rs, compared (issue 38).

    python -m benchmarks.reference_tables --data DIR [--json OUT]
    python -m benchmarks.reference_tables --dat DIR [--json OUT]

A table is a folder with ``_delta_log/``. lakevilla reads it through its public API, a
read-only ``lv.Lake`` rooted at the table's parent folder (``lake.snapshot`` for the version,
``lake.read`` for the rows, the embedded engine); delta-rs through its SQL reader
(``QueryBuilder``, which applies deletion vectors and column mapping). Both read the latest
version and, when there is a later one, version 0. Rows are compared as multisets of normalised
values (``normalise``), columns by name. Each read has an outcome:

* ``same``: the same version, columns and rows;
* ``refused``: lakevilla raised ``UnsupportedTableFeatureError`` (the feature is named);
* ``differs``: the version, the columns or the rows differ (a small diff is given);
* ``failed``: lakevilla raised anything else (while delta-rs read the rows);
* ``judge-wrong``: the rows differ where delta-rs is known to be wrong (``JUDGE_WRONG``);
* ``judge-failed``: delta-rs cannot read the rows, so they are not judged; where both replay
  the log (a fixture whose data files are gone), their versions and live file paths are
  compared instead (``differs`` when they disagree).

A table's outcome is its worst read's (``failed``, ``differs``, ``refused``, ``judge-wrong``
in that order); with none of those, its latest version's. Exit status 1 if any table
``differs`` or ``failed``.

``--dat DIR``: the Delta Acceptance Testing cases instead (``DIR`` is a release's
``reader_tests/generated``): each case is a folder with the table in ``delta/`` and, per
version it pins (``expected/latest``, ``expected/v<N>``), the rows Spark read as Parquet
(``table_content/``) and ``table_version_metadata.json`` (version, reader and writer
versions). The judge is that expected data, not delta-rs: a read is ``same`` when lakevilla
reads that version (``latest``: the version the metadata names) with the same reader and
writer versions and the same rows, ``refused``, ``differs`` or ``failed`` as above.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

OUTCOMES = ("same", "refused", "differs", "failed", "judge-wrong", "judge-failed")
_SEVERITY = ("failed", "differs", "refused", "judge-wrong")
_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_NS_MIN, _NS_MAX = -(2**63), 2**63 - 1  # what an int64 of nanoseconds (delta-rs' INT96) holds
_EPOCH = dt.datetime(1970, 1, 1)


# -------------------------------------------------------------------------------------
# normalising values
# -------------------------------------------------------------------------------------

class _NaN:
    """Every floating-point NaN, as one value equal to itself (float NaNs never are)."""

    def __repr__(self) -> str:
        return "NaN"


NAN = _NaN()


class Instant:
    """A timestamp as an exact UTC instant (nanoseconds since the epoch), shown as ISO text."""

    __slots__ = ("ns",)

    def __init__(self, ns: int) -> None:
        self.ns = ns

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Instant) and other.ns == self.ns

    def __hash__(self) -> int:
        return hash(("instant", self.ns))

    def __repr__(self) -> str:
        secs, frac = divmod(self.ns, 10**9)
        try:
            return (_EPOCH + dt.timedelta(seconds=secs)).isoformat() + f".{frac:09d}Z"
        except OverflowError:
            return f"{self.ns}ns"

    __str__ = __repr__


def normalise(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """A column's values as plain Python values that compare across Arrow's physical types:
    chunks joined, dictionaries decoded, string/binary/list of any width or view alike;
    timestamps become exact UTC instants (``Instant``: a zoned value is its instant, a naive
    one is read as UTC, as Delta stores both; any unit, so ``ms`` and ``ns`` of one instant
    are equal); every NaN is ``NAN``; structs become dicts by field name, lists and maps
    lists (a map's entries in their stored order). Integers, decimals (by value: 1.10 = 1.1),
    dates, strings and bytes are Python's own, so an int64 1 and an int32 1 are equal."""
    if isinstance(column, pa.ChunkedArray):
        out: list[Any] = []
        for chunk in column.chunks:
            out.extend(normalise(chunk))
        return out
    t = column.type
    if pa.types.is_dictionary(t):
        return normalise(column.dictionary_decode())
    if pa.types.is_timestamp(t):
        scale = _NS[t.unit]
        return [None if v is None else Instant(v * scale)
                for v in column.view(pa.int64()).to_pylist()]
    if pa.types.is_floating(t):
        return [NAN if isinstance(v, float) and math.isnan(v) else v
                for v in column.to_pylist()]
    if pa.types.is_struct(t):
        valid = column.is_valid().to_pylist()
        fields = [t.field(i).name for i in range(t.num_fields)]
        children = [normalise(c) for c in column.flatten()]
        return [dict(zip(fields, vals, strict=True)) if ok else None
                for ok, vals in zip(valid, zip(*children, strict=True), strict=True)] \
            if fields else [{} if ok else None for ok in valid]
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return normalise(column.cast(pa.large_list(t.value_field)))
    if pa.types.is_fixed_size_list(t):
        n, first = t.list_size, column.offset
        flat = normalise(column.values)  # the whole child array: slots of null lists included
        return [flat[(first + i) * n:(first + i + 1) * n] if ok else None
                for i, ok in enumerate(column.is_valid().to_pylist())]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        offsets = column.offsets.to_pylist()  # into the whole child array, slicing included
        items = normalise(column.values)
        return [items[offsets[i]:offsets[i + 1]] if ok else None
                for i, ok in enumerate(column.is_valid().to_pylist())]
    return column.to_pylist()


def rows(table: pa.Table) -> list[dict[str, Any]]:
    """The table's rows as dicts of normalised values."""
    cols = {name: normalise(table.column(name)) for name in table.column_names}
    return [dict(zip(cols, vals, strict=True)) for vals in zip(*cols.values(), strict=True)] \
        if cols else [{} for _ in range(table.num_rows)]


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    return v


def _show(v: Any, width: int = 160) -> str:
    def plain(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: plain(y) for k, y in x.items()}
        if isinstance(x, list):
            return [plain(y) for y in x]
        if isinstance(x, Instant | decimal.Decimal | dt.date | bytes):
            return str(x)
        return x
    text = repr(plain(v))
    return text if len(text) <= width else text[:width - 3] + "..."


def compare(ours: pa.Table, judge: pa.Table, shown: int = 3) -> str | None:
    """None when both hold the same columns (by name) and the same multiset of normalised
    rows; else a short description of the difference."""
    a, b = set(ours.column_names), set(judge.column_names)
    if a != b:
        return (f"columns only lakevilla {sorted(a - b)}, only delta-rs {sorted(b - a)}")
    mine, theirs = rows(ours), rows(judge)
    seen = {_freeze(r): r for r in mine} | {_freeze(r): r for r in theirs}
    cm = Counter(_freeze(r) for r in mine)
    ct = Counter(_freeze(r) for r in theirs)
    if cm == ct:
        return None
    only_mine = list((cm - ct).elements())
    only_theirs = list((ct - cm).elements())
    parts = [f"{ours.num_rows} vs {judge.num_rows} rows; "
             f"{len(only_mine)} only lakevilla, {len(only_theirs)} only delta-rs"]
    parts += [f"lakevilla: {_show(seen[k])}" for k in only_mine[:shown]]
    parts += [f"delta-rs: {_show(seen[k])}" for k in only_theirs[:shown]]
    return "; ".join(parts)


def _plain(t: pa.DataType) -> pa.DataType:
    """``t`` without what only changes the layout: dictionaries, views, 64-bit offsets."""
    if pa.types.is_dictionary(t):
        return _plain(t.value_type)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t)
            or pa.types.is_large_list_view(t)):
        return pa.list_(_plain(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(_plain(t.key_type), _plain(t.item_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain(f.type)) for f in t])
    return t


def type_differences(ours: pa.Table, judge: pa.Table) -> dict[str, str]:
    """Columns whose Arrow types differ beyond layout (noted, not judged: values decide)."""
    return {f.name: f"lakevilla {f.type}, delta-rs {judge.schema.field(f.name).type}"
            for f in ours.schema if f.name in judge.column_names
            and _plain(f.type) != _plain(judge.schema.field(f.name).type)}


# -------------------------------------------------------------------------------------
# where delta-rs is the one that is wrong
# -------------------------------------------------------------------------------------

def _int96_overflow(ours: pa.Table, judge: pa.Table) -> str | None:
    """delta-rs reads INT96 timestamps as int64 nanoseconds, which overflow before 1677 and
    after 2262. The reason, when the tables agree once every timestamp column holding such an
    instant in lakevilla's rows is left out, and agree on every row where it holds none."""
    if set(ours.column_names) != set(judge.column_names):
        return None
    mine, theirs = rows(ours), rows(judge)
    wide = {c for r in mine for c, v in r.items()
            if isinstance(v, Instant) and not _NS_MIN <= v.ns <= _NS_MAX}
    if not wide:
        return None

    def inside(r: dict[str, Any]) -> bool:
        return all(not isinstance(r[c], Instant) or _NS_MIN <= r[c].ns <= _NS_MAX for c in wide)

    keep = [c for c in ours.column_names if c not in wide]
    if compare(ours.select(keep), judge.select(keep)) is not None:
        return None
    rest = [r for r in mine if inside(r)]
    if Counter(_freeze(r) for r in rest) - Counter(_freeze(r) for r in theirs):
        return None  # a row in range that delta-rs does not return: a real difference
    return (f"delta-rs overflows INT96 timestamps outside 1677-2262 (int64 nanoseconds) in "
            f"{sorted(wide)}; the other columns and the in-range rows agree")


JUDGE_WRONG: list[Callable[[pa.Table, pa.Table], str | None]] = [_int96_overflow]


# -------------------------------------------------------------------------------------
# reading and judging
# -------------------------------------------------------------------------------------

def find_tables(data: Path) -> list[Path]:
    """Every folder under ``data`` (itself included) with a ``_delta_log/`` folder."""
    return sorted(p.parent for p in data.rglob("_delta_log") if p.is_dir())


def _lake(path: Path) -> Any:
    import lakevilla as lv

    return lv.Lake(str(path.parent), read_only=True)


def _error(e: BaseException, width: int = 300) -> str:
    text = f"{type(e).__name__}: {e}".replace("\n", " ")
    return text if len(text) <= width else text[:width - 3] + "..."


def read_delta_rs(path: Path, version: int | None) -> tuple[pa.Table, int]:
    """The table through delta-rs' SQL reader, and the version it read."""
    from deltalake import DeltaTable, QueryBuilder

    table = DeltaTable(str(path), version=version)
    reader = QueryBuilder().register("t", table).execute("SELECT * FROM t")
    return pa.RecordBatchReader.from_stream(reader).read_all(), table.version()


def _logs_agree(path: Path, snap: Any, version: int | None) -> str | None:
    """When delta-rs cannot read the rows (a fixture of log only, its data files gone): None
    if delta-rs' log replay has lakevilla's version and live file paths, else the difference."""
    from deltalake import DeltaTable

    table = DeltaTable(str(path), version=version)
    theirs = set(pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist())
    mine = set(snap.files)
    if (snap.version, mine) == (table.version(), theirs):
        return None
    return (f"log: version lakevilla {snap.version}, delta-rs {table.version()}; files only "
            f"lakevilla {sorted(mine - theirs)[:3]}, only delta-rs {sorted(theirs - mine)[:3]}")


def judge_read(path: Path, version: int | None) -> dict[str, Any]:
    """One read's outcome: keys ``version``, ``outcome``, ``rows``, ``detail``. lakevilla reads
    through its public API, a read-only lake rooted at the table's parent folder: the snapshot
    (the version read, its files), then the rows."""
    import lakevilla as lv

    res: dict[str, Any] = {"version": version, "rows": None, "detail": ""}
    snap: Any = None
    ours: pa.Table | None = None
    mine_error = ""
    try:
        lake = _lake(path)
        snap = lake.snapshot(path.name, version)
        res["version"] = snap.version
        ours = lake.read(path.name, version=snap.version)
        res["rows"] = ours.num_rows
    except lv.UnsupportedTableFeatureError as e:
        return res | {"outcome": "refused", "feature": e.feature,
                      "detail": _error(e).removeprefix(f"{type(e).__name__}: ")}
    except Exception as e:  # every other failure is a finding
        mine_error = _error(e)
    try:
        judge, judge_version = read_delta_rs(path, version)
    except BaseException as e:  # a delta-rs panic is a BaseException
        if isinstance(e, KeyboardInterrupt):
            raise
        ours_said = f"{ours.num_rows} rows" if ours is not None else mine_error
        detail = f"delta-rs: {_error(e, 160)}; lakevilla: {ours_said}"
        if snap is not None:
            try:
                log_diff = _logs_agree(path, snap, version)
            except Exception:  # delta-rs cannot replay the log either
                log_diff = "not judged"
            if log_diff is None:
                detail = f"the logs agree (v{snap.version}, {len(snap.files)} files); " + detail
            elif log_diff != "not judged":
                return res | {"outcome": "differs", "detail": log_diff}
        return res | {"outcome": "judge-failed", "detail": detail}
    if ours is None:
        return res | {"outcome": "failed",
                      "detail": f"{mine_error} (delta-rs read {judge.num_rows} rows)"}
    if snap.version != judge_version:
        return res | {"outcome": "differs",
                      "detail": f"version: lakevilla {snap.version}, delta-rs {judge_version}"}
    if types := type_differences(ours, judge):
        res["types"] = types
    diff = compare(ours, judge)
    if diff is None:
        return res | {"outcome": "same"}
    for check in JUDGE_WRONG:
        reason = check(ours, judge)
        if reason is not None:
            return res | {"outcome": "judge-wrong", "detail": reason}
    return res | {"outcome": "differs", "detail": diff}


def judge_table(path: Path) -> list[dict[str, Any]]:
    """The latest version's read, then version 0's when the latest (from the history when
    the snapshot was refused) is later."""
    latest = judge_read(path, None)
    reads = [latest]
    newest = latest["version"]
    if newest is None:
        try:
            newest = _lake(path).history(path.name, limit=1)[0].version
        except Exception:  # no history: nothing more to read
            newest = None
    if isinstance(newest, int) and newest > 0:
        reads.append(judge_read(path, 0))
    return reads


def overall(reads: list[dict[str, Any]]) -> dict[str, Any]:
    """A table's outcome from its reads' (see the module's docstring)."""
    for outcome in _SEVERITY:
        for r in reads:
            if r["outcome"] == outcome:
                return r
    return reads[0]


def run(data: Path) -> dict[str, Any]:
    """Judge every table under ``data``; the payload ``--json`` writes."""
    tables = []
    for path in find_tables(data):
        t0 = time.perf_counter()
        reads = judge_table(path)
        top = overall(reads)
        at = "" if top is reads[0] else f"v{top['version']}: "
        tables.append({"table": str(path.relative_to(data)) if path != data else path.name,
                       "rows": reads[0]["rows"], "outcome": top["outcome"],
                       "detail": at + top["detail"], "reads": reads,
                       "seconds": round(time.perf_counter() - t0, 3)})
    totals = {o: sum(t["outcome"] == o for t in tables) for o in OUTCOMES}
    return {"benchmark": "reference_tables", "data": str(data), "tables": tables,
            "totals": totals}


# -------------------------------------------------------------------------------------
# the Delta Acceptance Testing (DAT) cases: Spark's expected rows as the judge
# -------------------------------------------------------------------------------------

def find_dat_cases(data: Path) -> list[Path]:
    """Every DAT case under ``data``: a folder with ``delta/_delta_log/`` and ``expected/``."""
    return sorted(p.parent.parent for p in data.rglob("_delta_log")
                  if p.parent.name == "delta" and (p.parent.parent / "expected").is_dir())


def judge_dat_read(case: Path, expected: Path) -> dict[str, Any]:
    """lakevilla's read of ``case`` at the version ``expected`` pins, against its rows."""
    import pyarrow.parquet as pq

    import lakevilla as lv

    meta = json.loads((expected / "table_version_metadata.json").read_text())
    pinned = None if expected.name == "latest" else int(expected.name.removeprefix("v"))
    res: dict[str, Any] = {"expected": expected.name, "version": meta["version"], "rows": None,
                           "detail": ""}
    try:
        lake = lv.Lake(str(case), read_only=True)
        snap = lake.snapshot("delta", pinned)
        ours = lake.read("delta", version=snap.version)
    except lv.UnsupportedTableFeatureError as e:
        return res | {"outcome": "refused", "feature": e.feature,
                      "detail": _error(e).removeprefix(f"{type(e).__name__}: ")}
    except Exception as e:  # every other failure is a finding, unless the copy is incomplete
        if gone := _missing_data_files(case / "delta"):
            return res | {"outcome": "judge-failed",
                          "detail": f"the copy lacks {len(gone)} data file(s) its log adds "
                                    f"({gone[0]}); lakevilla: {_error(e, 160)}"}
        return res | {"outcome": "failed", "detail": _error(e)}
    res["rows"] = ours.num_rows
    want = pq.read_table(expected / "table_content")  # skips _SUCCESS and .crc files
    protocol = (snap.protocol.min_reader_version, snap.protocol.min_writer_version)
    if (snap.version, *protocol) != (meta["version"], meta["min_reader_version"],
                                     meta["min_writer_version"]):
        return res | {"outcome": "differs",
                      "detail": f"version, reader, writer: lakevilla ({snap.version}, "
                                f"{protocol[0]}, {protocol[1]}), expected ({meta['version']}, "
                                f"{meta['min_reader_version']}, {meta['min_writer_version']})"}
    if types := type_differences(ours, want):
        res["types"] = {c: t.replace("delta-rs", "expected") for c, t in types.items()}
    diff = compare(ours, want)
    return res | ({"outcome": "same"} if diff is None
                  else {"outcome": "differs", "detail": diff.replace("delta-rs", "expected")})


def _missing_data_files(table: Path) -> list[str]:
    """Data files some JSON commit of ``table`` adds that are not on disk (a copy of a case
    that lost files: some copies drop ``__HIVE_DEFAULT_PARTITION__`` folders)."""
    from urllib.parse import unquote

    gone = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            add = json.loads(line).get("add") if line.strip() else None
            if add and not (table / unquote(add["path"])).exists():
                gone.append(add["path"])
    return gone


def run_dat(data: Path) -> dict[str, Any]:
    """Judge every DAT case under ``data``; the payload ``--json`` writes."""
    tables = []
    for case in find_dat_cases(data):
        t0 = time.perf_counter()
        reads = [judge_dat_read(case, e) for e in sorted(
            (case / "expected").iterdir(), key=lambda p: (p.name != "latest", p.name))
            if (e / "table_version_metadata.json").is_file()]
        top = overall(reads)
        at = "" if top is reads[0] else f"{top['expected']}: "
        tables.append({"table": case.name, "rows": reads[0]["rows"], "outcome": top["outcome"],
                       "detail": at + top["detail"], "reads": reads,
                       "seconds": round(time.perf_counter() - t0, 3)})
    totals = {o: sum(t["outcome"] == o for t in tables)
              for o in ("same", "refused", "differs", "failed", "judge-failed")}
    return {"benchmark": "reference_tables", "dat": str(data), "tables": tables,
            "totals": totals}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", type=Path, help="a folder of Delta tables")
    source.add_argument("--dat", type=Path,
                        help="a DAT release's reader_tests/generated folder")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)
    from benchmarks.common import print_table

    payload = run(args.data) if args.data else run_dat(args.dat)
    print_table([{k: t[k] for k in ("table", "rows", "outcome")}
                 | {"detail": t["detail"][:120]} for t in payload["tables"]],
                ["table", "rows", "outcome", "detail"])
    print("totals: " + ", ".join(f"{o} {n}" for o, n in payload["totals"].items()))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2, default=str))
    return payload


if __name__ == "__main__":
    totals = main()["totals"]
    sys.exit(1 if totals["differs"] or totals["failed"] else 0)
