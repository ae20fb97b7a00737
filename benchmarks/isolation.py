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
* mixed: the paper's recommended deployment. ``--writers`` R,CT clients commit
  transfers between two random tables at ``--rate`` transactions per second in all
  (each moves one unit between the tables' row 0 and counts itself in both tables'
  row 1), while one LV[DL] reader and one reader per I feature set each run ``--reps``
  read-only transactions over every table, side by side. Per reader transaction:
  latency, requests, aborts, wrong totals (row 0 must sum to 0 over the tables: no
  half transfer) and staleness (transfers acknowledged before the transaction began
  that it does not see, summed over tables: row 1 counts them).
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
                    txn.insert(table_name(i),
                               pa.table({"id": list(ids), "v": [0] * len(ids)}, schema=schema))

        lake._client.map(one, range(n))
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
    """Time and requests spent inside ``GlobalDecider.entry_for`` (validation against the head).

    Instrumentation for this process only: the method is wrapped while the meter is
    active. Only one transaction of the metered store runs at a time, so the store's
    counts before and after a call are that call's requests."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, int]] = []

    @contextmanager
    def active(self, store: Any) -> Iterator[ValidationMeter]:
        from lakevilla.isolation.decide import GlobalDecider

        original = GlobalDecider.entry_for
        meter = self

        def wrapped(decider: Any, *args: Any, **kw: Any) -> Any:
            before = sum(store.snapshot().values())
            t0 = time.perf_counter()
            try:
                return original(decider, *args, **kw)
            finally:
                meter.calls.append((time.perf_counter() - t0,
                                    sum(store.snapshot().values()) - before))

        GlobalDecider.entry_for = wrapped  # type: ignore[method-assign]
        try:
            yield self
        finally:
            GlobalDecider.entry_for = original  # type: ignore[method-assign]


def read_all(lake: Any, features: str, tables: int, isolation: str = "serializable") -> int:
    with lake.transaction(features=features, isolation=isolation) as txn:
        return sum(txn.read(table_name(i)).num_rows for i in range(tables))


def bump(lake: Any, features: str, table: int, row: int) -> None:
    with lake.transaction(features=features) as txn:
        txn.update(table_name(table), set={"v": "v + 1"}, where=f"id = {row}")


def measure_reads(ce: Any, name: str, features: str, args: argparse.Namespace,
                  bar: Any) -> list[dict[str, Any]]:
    from .common import reads_writes

    env = ce.env
    root = env.fresh_root(f"iso-{features.replace(',', '') or 'DL'}")
    create_tables(ce.direct_store(root), root, args.tables, args.rows)
    if "I" in features.split(","):
        announce_all(ce.direct_store(root), root, features, args.tables)
    rng = random.Random(args.seed)
    out = []
    want = args.tables * args.rows

    def row(scenario: str, lat: list[float], counts: dict[str, int], n: int,
            bad: int) -> dict[str, Any]:
        r, w = reads_writes(counts)
        return {"system": name, "scenario": scenario, "n": n,
                "median_ms": statistics.median(lat) * 1000, "reads": r / n, "writes": w / n,
                "kinds": {k: counts.get(k, 0) / n for k in KINDS}, "wrong_row_counts": bad}

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
                    # not counted
                    bump(writer, features, rng.randrange(args.tables), rng.randrange(args.rows))
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


def read_then_update(lake: Any, writer: Any, features: str, isolation: str,
                     args: argparse.Namespace, rng: random.Random, key: int,
                     interfere: bool) -> None:
    with lake.transaction(features=features, isolation=isolation) as txn:
        for i in range(args.tables):
            txn.read(table_name(i), where=f"id = {key}")
        if interfere and args.tables > 1:  # lands between our reads and our commit
            bump(writer, features, 1 + rng.randrange(args.tables - 1),
                 in_another_file(key, args.rows, rng))
        txn.update(table_name(0), set={"v": "v + 1"}, where="id = 0")


def measure_validation(ce: Any, name: str, features: str, args: argparse.Namespace,
                       bar: Any) -> list[dict[str, Any]]:
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
                        read_then_update(lake, writer, features, isolation, args, rng,
                                         rng.randrange(args.rows), True)
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
                    "validation_requests": sum(x[2] for x in lat) / n, "reads": r / n,
                    "writes": w / n,
                    # the first table's row 0 is only touched by the measured transactions
                    "lost_updates": (committed + 1) - final})
    return out


class Acknowledged:
    """How many transfers touching each table were acknowledged, as the writers report."""

    def __init__(self, tables: int) -> None:
        import threading

        self.counts = [0] * tables
        self.lock = threading.Lock()

    def add(self, a: int, b: int) -> None:
        with self.lock:
            self.counts[a] += 1
            self.counts[b] += 1

    def now(self) -> list[int]:
        with self.lock:
            return list(self.counts)


def transfer_in(txn: Any, a: int, b: int) -> None:
    """One unit from ``a`` to ``b`` (row 0), and both tables count the transfer (row 1)."""
    for t, sign in ((a, "-"), (b, "+")):
        txn.update(table_name(t), set={"v": f"v {sign} 1"}, where="id = 0")
        txn.update(table_name(t), set={"v": "v + 1"}, where="id = 1")


def mixed_writer(env: Any, root: str, seed: int, rate: float, tables: int, acked: Acknowledged,
                 stop: Any, errors: list[str]) -> int:
    """R,CT transfers at ``rate`` per second (Poisson arrivals) until ``stop``."""
    rng = random.Random(seed)
    lake, _ = env.lake(root)
    done = 0
    due = time.monotonic()
    try:
        while not stop.is_set():
            due += rng.expovariate(rate)
            wait = due - time.monotonic()
            if wait > 0 and stop.wait(wait):  # the fixed rate: sleep until the next transfer is due
                break
            a, b = rng.sample(range(tables), 2)
            try:
                lake.run(lambda txn, a=a, b=b: transfer_in(txn, a, b), features="R,CT", retries=20)
            except Exception as e:  # noqa: BLE001 - reported, the run goes on
                errors.append(repr(e))
                continue
            acked.add(a, b)
            done += 1
    finally:
        lake.close()
    return done


def mixed_reader(env: Any, root: str, name: str, features: str, args: argparse.Namespace,
                 acked: Acknowledged, bar: Any) -> dict[str, Any]:
    import lakevilla as lv

    from .common import reads_writes

    lake, store = env.lake(root)
    lat, aborts, wrong, stale, stale_txns = [], 0, 0, 0, 0
    try:
        with lake.transaction(features=features) as txn:  # warm-up (a join for I), not counted
            for i in range(args.tables):
                txn.read(table_name(i))
        lake.flush()
        store.reset()
        for _ in range(args.reps):
            before = acked.now()
            t0 = time.perf_counter()
            txn = lake.begin(features=features)
            try:
                got = [txn.read(table_name(i), where="id < 2") for i in range(args.tables)]
                txn.commit()
            except lv.TransactionAborted:
                aborts += 1
                bar.update(1)
                continue
            lat.append(time.perf_counter() - t0)
            balance, seen = 0, []
            for t in got:
                row = {r["id"]: r["v"] for r in t.to_pylist()}
                balance += row[0]
                seen.append(row[1])
            wrong += balance != 0
            behind = sum(max(0, b - s) for b, s in zip(before, seen))
            stale += behind
            stale_txns += behind > 0
            bar.update(1)
        lake.flush()
        counts = dict(store.snapshot())
    finally:
        lake.close()
    n = max(len(lat) + aborts, 1)
    r, w = reads_writes(counts)
    return {"system": name, "n": len(lat) + aborts,
            "median_ms": statistics.median(lat) * 1000 if lat else None,
            "p90_ms": sorted(lat)[int(0.9 * (len(lat) - 1))] * 1000 if lat else None,
            "reads": r / n, "writes": w / n, "kinds": {k: counts.get(k, 0) / n for k in KINDS},
            "aborts": aborts, "wrong_totals": wrong, "stale_commits": stale,
            "stale_txns": stale_txns}


def measure_mixed(ce: Any, systems: dict[str, str], args: argparse.Namespace,
                  bar: Any) -> dict[str, Any]:
    """R,CT writers at a fixed rate; readers of every system at the same time."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    env = ce.env
    root = env.fresh_root("mixed")
    create_tables(ce.direct_store(root), root, args.tables, args.rows)
    acked = Acknowledged(args.tables)
    stop, errors = threading.Event(), []
    with ThreadPoolExecutor(max_workers=args.writers + len(systems)) as pool:
        writers = [pool.submit(mixed_writer, env, root, args.seed + w, args.rate / args.writers,
                               args.tables, acked, stop, errors) for w in range(args.writers)]
        readers = [pool.submit(mixed_reader, env, root, name, features, args, acked, bar)
                   for name, features in systems.items()]
        rows = [f.result() for f in readers]
        stop.set()
        transfers = sum(f.result() for f in writers)
    lake, _ = env.lake(root)
    try:
        final = sum(lake.read(table_name(i), where="id = 0").column("v").to_pylist()[0]
                    for i in range(args.tables))
    finally:
        lake.close()
    return {"rows": rows, "transfers": transfers, "writer_errors": errors, "final_balance": final}


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

    p = argparse.ArgumentParser(prog="python -m benchmarks.isolation",
                                description=__doc__.split("\n\n")[0])
    add_common_args(p, "results/isolation")
    p.add_argument("--tables", type=int, default=10)
    p.add_argument("--rows", type=int, default=100)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--loads", type=int, default=5, help="new lakes for the cold measurement")
    p.add_argument("--rate", type=float, default=4.0,
                   help="mixed: R,CT transfers per second, all writers")
    p.add_argument("--writers", type=int, default=2, help="mixed: R,CT writer clients")
    p.add_argument("--parts", default="reads,validation,mixed", help="which measurements to run")
    p.set_defaults(systems=",".join(FEATURE_SETS))
    args = parse_with_quick(p, argv, {"tables": 3, "rows": 10, "reps": 3, "loads": 2, "rate": 10.0})
    if (args.tables < 2 or args.rows < 2 or args.reps < 1 or args.loads < 1 or args.writers < 1
            or args.rate <= 0):
        p.error("--tables and --rows must be at least 2; --reps, --loads, "
                "--writers, --rate positive")
    args.parts = {x.strip() for x in args.parts.split(",") if x.strip()}
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
        total = (len(systems) * (args.loads + 2 * args.reps) if "reads" in args.parts else 0) + \
            (len(with_i) * 2 * args.reps if "validation" in args.parts else 0) + \
            (len(systems) * args.reps if "mixed" in args.parts else 0)
        bar = progress(total, "isolation")
        reads: list[dict[str, Any]] = []
        validation: list[dict[str, Any]] = []
        mixed: dict[str, Any] = {}
        try:
            if "reads" in args.parts:
                for name, features in systems.items():
                    reads.extend(measure_reads(ce, name, features, args, bar))
            if "validation" in args.parts:
                for name, features in with_i.items():
                    validation.extend(measure_validation(ce, name, features, args, bar))
            if "mixed" in args.parts:
                mixed = measure_mixed(ce, systems, args, bar)
        finally:
            bar.close()
        info = run_info(args, ce.env)
        info.update({"tables": args.tables, "rows": args.rows, "reps": args.reps,
                     "loads": args.loads, "rate": args.rate, "writers": args.writers,
                     "wall_s": time.time() - t0})
    finally:
        ce.close()
    add_ratios(reads)
    texts = []
    if reads:
        texts.append(print_table([{**r, **{k: r["kinds"][k] for k in ("get", "head", "list")}}
                                  for r in reads],
                    ["scenario", "system", "median_ms", "latency_vs_DL", "reads", "get", "head",
                     "list", "writes", "requests_vs_DL", "wrong_row_counts"],
                    title=f"\nRead-only transaction over {args.tables} tables, "
                          f"latency {args.latency} (store {info['store']}); "
                          "requests per transaction"))
    if validation:
        texts.append(print_table(validation,
                                 ["system", "isolation", "n", "committed", "aborts", "median_ms",
                                  "validation_ms", "validation_requests", "reads", "writes",
                                  "lost_updates"],
                    title=f"\nRead {args.tables} tables + update one, a writer busy on the others: "
                          "time (median) and requests (mean) inside global-log validation"))
    if mixed:
        texts.append(print_table(
            [{**r, **{k: r["kinds"][k] for k in ("get", "list", "put_if_absent", "put_if_match")}}
             for r in mixed["rows"]],
            ["system", "n", "median_ms", "p90_ms", "reads", "get", "list", "writes",
             "put_if_absent", "put_if_match", "aborts", "wrong_totals", "stale_commits",
             "stale_txns"],
            title=f"\nMixed: {args.writers} R,CT writers, {args.rate:g} transfers/s in all "
                  f"({mixed['transfers']} transfers, final balance {mixed['final_balance']}); "
                  f"read-only transactions over {args.tables} tables, requests per transaction"))
    payload = {"benchmark": "isolation", "info": info, "reads": reads, "validation": validation,
               "mixed": mixed, "table": "\n".join(texts)}
    path = write_json(args.out, "isolation", payload)
    payload["files"] = [str(path)] + ([plot_reads(args.out, reads)] if reads else [])
    print("wrote " + ", ".join(payload["files"]))
    return payload


if __name__ == "__main__":
    main()
