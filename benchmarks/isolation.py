"""Read-only transactions over many tables, LV[I] against LV[DL], and what LV[I]'s
validation costs per transaction (the paper's section 6: LV[I] adds the fewest
requests of all features, about +4 ms per operation).

    python -m benchmarks.isolation [--quick] [--tables 10] [--reps 20] [--latency s3] ...

Every table holds ``--rows`` rows in one file. A read-only transaction reads every
table whole. LV[DL] must ask each table's log for its newest version; LV[I] takes
all versions from the newest global log entry instead (a hint and one probe).

* quiet: nothing else happens between the measured transactions (warm ``Lake``).
* busy: between two measured transactions another client (its own ``Lake``, same
  features) commits one update to a random table, so every reader has news to find.
* cold: the first transaction of a new ``Lake`` (median over ``--loads`` lakes).
* validation: read one row of every table, update the first table, commit; between
  the reads and the commit another client updates a row of another table in another
  file than the row read, so validation has a commit to check and no reason to
  abort. Time and requests spent inside the global-log validation are recorded per
  transaction, for ``serializable`` (R1-R3) and ``snapshot`` (R2, R3). The other
  client's commit runs inside the measured transaction, so ``median_ms`` includes
  it; ``validation_ms`` does not.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

FEATURE_SETS = {"LV[DL]": "", "LV[I]": "I", "LV[R,CT,I]": "R,CT,I"}
KINDS = ("get", "head", "list", "put", "put_if_absent", "put_if_match", "delete")


def table_name(i: int) -> str:
    return f"t{i:03d}"


FILES = 4  # per table, by id range, so min/max statistics tell rows of different files apart


def create_tables(store: Any, root: str, n: int, rows: int) -> None:
    """The fixture, over an unslowed store: ``n`` tables of ``rows`` rows in ``FILES`` files."""
    import pyarrow as pa

    import lakevilla as lv

    schema = pa.schema([("id", pa.int64()), ("v", pa.int64())])
    lake = lv.Lake(root, store=store)
    try:
        def one(i: int) -> None:
            lake.create_table(table_name(i), schema)
            with lake.transaction(features="") as txn:
                for ids in file_ranges(rows):
                    txn.insert(table_name(i), pa.table({"id": list(ids), "v": [0] * len(ids)}, schema=schema))

        lake.map(one, range(n))
    finally:
        lake.close()


def file_ranges(rows: int) -> list[range]:
    step = -(-rows // FILES)
    return [range(a, min(a + step, rows)) for a in range(0, rows, step)]


def in_another_file(key: int, rows: int, rng: random.Random) -> int:
    """A row of a different file than ``key``'s (the same one if the table has one file)."""
    others = [r for r in file_ranges(rows) if key not in r]
    return rng.choice(rng.choice(others)) if others else key


def announce_all(store: Any, root: str, features: str, n: int) -> None:
    """One LV[I] transaction writing every table, so the global log knows them all (as it
    does in a lake whose writers use I; tables it does not know are listed like LV[DL])."""
    import lakevilla as lv

    lake = lv.Lake(root, store=store)
    try:
        with lake.transaction(features=features) as txn:
            for i in range(n):
                txn.update(table_name(i), set={"v": "v + 0"}, where="id = 0")
    finally:
        lake.close()


class ValidationMeter:
    """Time and requests spent inside ``Transaction._validate_against_head``.

    Instrumentation for this process only: the method is wrapped while the meter is
    active. Only one transaction of the metered store runs at a time, so the store's
    counts before and after a call are that call's requests."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, int]] = []

    @contextmanager
    def active(self, store: Any) -> Iterator[ValidationMeter]:
        from lakevilla.transaction import Transaction

        original = Transaction._validate_against_head
        meter = self

        def wrapped(txn: Any, head: Any, written: set[str]) -> None:
            before = sum(store.snapshot().values())
            t0 = time.perf_counter()
            try:
                original(txn, head, written)
            finally:
                meter.calls.append((time.perf_counter() - t0, sum(store.snapshot().values()) - before))

        Transaction._validate_against_head = wrapped  # type: ignore[method-assign]
        try:
            yield self
        finally:
            Transaction._validate_against_head = original  # type: ignore[method-assign]


def read_all(lake: Any, features: str, tables: int, isolation: str = "serializable") -> int:
    with lake.transaction(features=features, isolation=isolation) as txn:
        return sum(txn.read(table_name(i)).num_rows for i in range(tables))


def bump(lake: Any, features: str, table: int, row: int) -> None:
    with lake.transaction(features=features) as txn:
        txn.update(table_name(table), set={"v": "v + 1"}, where=f"id = {row}")


def measure_reads(ce: Any, name: str, features: str, args: argparse.Namespace, bar: Any) -> list[dict[str, Any]]:
    from .common import reads_writes

    env = ce.env
    root = env.fresh_root(f"iso-{features.replace(',', '') or 'DL'}")
    create_tables(ce.direct_store(root), root, args.tables, args.rows)
    if "I" in features.split(","):
        announce_all(ce.direct_store(root), root, features, args.tables)
    rng = random.Random(args.seed)
    out = []
    want = args.tables * args.rows

    def row(scenario: str, lat: list[float], counts: dict[str, int], n: int, bad: int) -> dict[str, Any]:
        r, w = reads_writes(counts)
        return {"system": name, "scenario": scenario, "n": n, "median_ms": statistics.median(lat) * 1000,
                "reads": r / n, "writes": w / n, "kinds": {k: counts.get(k, 0) / n for k in KINDS},
                "wrong_row_counts": bad}

    # cold: a new Lake's first read-only transaction
    lat, total, bad = [], {k: 0 for k in KINDS}, 0
    for _ in range(args.loads):
        lake, store = env.lake(root)
        try:
            t0 = time.perf_counter()
            bad += read_all(lake, features, args.tables) != want
            lat.append(time.perf_counter() - t0)
            lake.flush()
            for k, v in store.snapshot().items():
                total[k] = total.get(k, 0) + v
        finally:
            lake.close()
        bar.update(1)
    out.append(row("cold", lat, total, args.loads, bad))

    lake, store = env.lake(root)
    writer, _ = env.lake(root)
    try:
        read_all(lake, features, args.tables)  # warm-up: every snapshot cached
        bump(writer, features, 0, 0)  # the writer's snapshot too
        for scenario in ("quiet", "busy"):
            lake.flush()
            store.reset()
            lat, bad = [], 0
            for _ in range(args.reps):
                if scenario == "busy":
                    bump(writer, features, rng.randrange(args.tables), rng.randrange(args.rows))  # not counted
                t0 = time.perf_counter()
                bad += read_all(lake, features, args.tables) != want
                lat.append(time.perf_counter() - t0)
                bar.update(1)
            lake.flush()
            out.append(row(scenario, lat, dict(store.snapshot()), args.reps, bad))
    finally:
        writer.close()
        lake.close()
    return out


def read_then_update(lake: Any, writer: Any, features: str, isolation: str, args: argparse.Namespace,
                     rng: random.Random, key: int, interfere: bool) -> None:
    with lake.transaction(features=features, isolation=isolation) as txn:
        for i in range(args.tables):
            txn.read(table_name(i), where=f"id = {key}")
        if interfere and args.tables > 1:  # lands between our reads and our commit
            bump(writer, features, 1 + rng.randrange(args.tables - 1), in_another_file(key, args.rows, rng))
        txn.update(table_name(0), set={"v": "v + 1"}, where="id = 0")


def measure_validation(ce: Any, name: str, features: str, args: argparse.Namespace, bar: Any) -> list[dict[str, Any]]:
    """Read a row of every table, update the first; another client commits in between."""
    from .common import reads_writes

    env = ce.env
    out = []
    for isolation in ("serializable", "snapshot"):
        root = env.fresh_root(f"val-{features.replace(',', '')}-{isolation}")
        create_tables(ce.direct_store(root), root, args.tables, args.rows)
        announce_all(ce.direct_store(root), root, features, args.tables)
        rng = random.Random(args.seed)
        lake, store = env.lake(root)
        writer, _ = env.lake(root)
        meter = ValidationMeter()
        lat, aborts, committed = [], 0, 0
        try:
            read_then_update(lake, writer, features, isolation, args, rng, 0, False)  # warm-up
            bump(writer, features, 1 % args.tables, 0)
            lake.flush()
            store.reset()
            with meter.active(store):
                for _ in range(args.reps):
                    meter.calls.clear()
                    t0 = time.perf_counter()
                    try:
                        read_then_update(lake, writer, features, isolation, args, rng, rng.randrange(args.rows), True)
                        committed += 1
                    except Exception as e:  # noqa: BLE001 - an abort is a result
                        import lakevilla as lv

                        if not isinstance(e, lv.TransactionAborted):
                            raise
                        aborts += 1
                    lat.append((time.perf_counter() - t0, sum(c[0] for c in meter.calls),
                                sum(c[1] for c in meter.calls)))
                    bar.update(1)
            lake.flush()
            counts = dict(store.snapshot())
            final = lake.read(table_name(0), where="id = 0").column("v").to_pylist()[0]
        finally:
            writer.close()
            lake.close()
        r, w = reads_writes(counts)
        n = max(len(lat), 1)
        out.append({"system": name, "isolation": isolation, "n": len(lat), "committed": committed,
                    "aborts": aborts, "median_ms": statistics.median(x[0] for x in lat) * 1000,
                    "validation_ms": statistics.median(x[1] for x in lat) * 1000,
                    "validation_requests": sum(x[2] for x in lat) / n, "reads": r / n, "writes": w / n,
                    # the first table's row 0 is only touched by the measured transactions
                    "lost_updates": (committed + 1) - final})
    return out


def add_ratios(rows: list[dict[str, Any]]) -> None:
    base = {r["scenario"]: r for r in rows if r["system"] == "LV[DL]"}
    for r in rows:
        b = base.get(r["scenario"])
        r["latency_vs_DL"] = r["median_ms"] / b["median_ms"] if b else None
        r["requests_vs_DL"] = (r["reads"] + r["writes"]) / (b["reads"] + b["writes"]) if b else None


def plot_reads(out_dir: str, rows: list[dict[str, Any]]) -> str:
    from .common import plot

    scen = list(dict.fromkeys(r["scenario"] for r in rows))
    systems = list(dict.fromkeys(r["system"] for r in rows))
    by = {(r["system"], r["scenario"]): r for r in rows}

    def draw(fig: Any) -> None:
        for i, (key, label) in enumerate((("median_ms", "median latency (ms)"),
                                          ("reads", "read requests per transaction"))):
            ax = fig.add_subplot(1, 2, i + 1)
            width = 0.8 / max(len(systems), 1)
            for j, s in enumerate(systems):
                xs = [x + j * width for x in range(len(scen))]
                ax.bar(xs, [by[(s, sc)][key] for sc in scen], width, label=s)
            ax.set_xticks([x + 0.4 - width / 2 for x in range(len(scen))], scen)
            ax.set_ylabel(label)
            ax.legend(fontsize=7)
        fig.suptitle("read-only transaction over every table", fontsize=9)

    return str(plot(out_dir, "isolation", draw))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from .common import add_common_args, parse_with_quick

    p = argparse.ArgumentParser(prog="python -m benchmarks.isolation", description=__doc__.split("\n\n")[0])
    add_common_args(p, "results/isolation")
    p.add_argument("--tables", type=int, default=10)
    p.add_argument("--rows", type=int, default=100)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--loads", type=int, default=5, help="new lakes for the cold measurement")
    p.set_defaults(systems=",".join(FEATURE_SETS))
    args = parse_with_quick(p, argv, {"tables": 3, "rows": 10, "reps": 3, "loads": 2})
    if args.tables < 1 or args.rows < 1 or args.reps < 1 or args.loads < 1:
        p.error("--tables, --rows, --reps and --loads must be positive")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from .common import make_counted_env, parse_systems, print_table, progress, run_info, write_json

    args = parse_args(argv)
    chosen = parse_systems(args.systems)
    systems = {"LV[DL]": "", **{n: f for n, f in chosen.items() if f is not None}}
    with_i = {n: f for n, f in systems.items() if "I" in f.split(",")}
    ce = make_counted_env(args)
    t0 = time.time()
    try:
        bar = progress(len(systems) * (args.loads + 2 * args.reps) + len(with_i) * 2 * args.reps, "isolation")
        reads: list[dict[str, Any]] = []
        validation: list[dict[str, Any]] = []
        try:
            for name, features in systems.items():
                reads.extend(measure_reads(ce, name, features, args, bar))
            for name, features in with_i.items():
                validation.extend(measure_validation(ce, name, features, args, bar))
        finally:
            bar.close()
        info = run_info(args, ce.env)
        info.update({"tables": args.tables, "rows": args.rows, "reps": args.reps, "loads": args.loads,
                     "wall_s": time.time() - t0})
    finally:
        ce.close()
    add_ratios(reads)
    texts = [
        print_table([{**r, **{k: r["kinds"][k] for k in ("get", "head", "list")}} for r in reads],
                    ["scenario", "system", "median_ms", "latency_vs_DL", "reads", "get", "head", "list", "writes",
                     "requests_vs_DL", "wrong_row_counts"],
                    title=f"\nRead-only transaction over {args.tables} tables, latency {args.latency} "
                          f"(store {info['store']}); requests per transaction"),
        print_table(validation, ["system", "isolation", "n", "committed", "aborts", "median_ms", "validation_ms",
                                 "validation_requests", "reads", "writes", "lost_updates"],
                    title=f"\nRead {args.tables} tables + update one, a writer busy on the others: "
                          "time (median) and requests (mean) inside global-log validation"),
    ]
    payload = {"benchmark": "isolation", "info": info, "reads": reads, "validation": validation,
               "table": "\n".join(texts)}
    path = write_json(args.out, "isolation", payload)
    payload["files"] = [str(path), plot_reads(args.out, reads)]
    print("wrote " + ", ".join(payload["files"]))
    return payload


if __name__ == "__main__":
    main()
