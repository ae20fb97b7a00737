"""The price of changing one row: DELETE, UPDATE and MERGE of a single row in a large file, on a
table that rewrites files and on one with deletion vectors, side by side.

    python -m benchmarks.update_price [--quick] [--rows 1000000] [--reps 5] [--store s3]

Each system gets a table of one data file of ``--rows`` rows (an id and a payload column),
then ``--reps`` single-row deletes, ``--reps`` single-row updates and ``--reps`` one-row MERGE
upserts (a matched key: an update), each its own LV[R] transaction; last, one DELETE of every
third row (a DV too large to inline: a DV file). Measured per statement:
bytes written (every PUT through the store layer), requests, and latency (median); then the
time of a full scan, which pays for the deletion vectors it applies. Without DVs a statement
rewrites the whole file; with them, a DELETE logs an inline DV (the large one: a DV file) and
an UPDATE or MERGE writes its one row.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import pyarrow as pa

from lakevilla.store import CountingStore

from .common import add_common_args, make_env, plot, print_table, run_info, write_json

SYSTEMS = {"rewrite": {}, "deletion vectors": {"delta.enableDeletionVectors": "true"}}
STATEMENTS = ("delete", "update", "merge", "delete a third")  # the last once: a DV file
COLUMNS = ["system", "statement", "rows", "bytes_written", "requests", "ms_median",
           "scan_ms_after"]


def run_system(env: Any, system: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    import lakevilla as lv

    root = env.fresh_root(system.replace(" ", "-"))
    counting = CountingStore(env.store(root))  # requests, and the bytes every write carries
    lake = lv.Lake(root, storage_options=env.storage_options or None, store=counting)
    schema = pa.schema([("id", pa.int64()), ("payload", pa.string())])
    lake.create_table("t", schema, properties=SYSTEMS[system] or None)
    ids = pa.array(range(args.rows), pa.int64())
    with lake.transaction("") as txn:
        txn.insert("t", pa.table({"id": ids, "payload": pa.compute.cast(ids, pa.string())}))
    rows = []
    step = max(1, args.rows // (3 * args.reps + 1))
    for k, statement in enumerate(STATEMENTS):
        times, sizes, requests = [], [], []
        for i in range(args.reps if statement != "delete a third" else 1):
            key = (i + 1) * step + k * args.reps * step
            counting.reset()
            t0 = time.perf_counter()
            with lake.transaction("R") as txn:
                if statement == "delete":
                    txn.delete("t", where=f"id = {key}")
                elif statement == "delete a third":  # a DV too large to inline
                    txn.delete("t", where="id % 3 = 0")
                elif statement == "update":
                    txn.update("t", {"payload": "'changed'"}, where=f"id = {key}")
                else:
                    txn.merge("t", {"id": [key], "payload": ["merged"]}, on="id") \
                        .when_matched_update_all().when_not_matched_insert_all().execute()
            lake.flush()
            times.append((time.perf_counter() - t0) * 1000)
            sizes.append(counting.bytes_written)
            requests.append(sum(counting.snapshot().values()))
        t0 = time.perf_counter()
        scanned = lake.read("t").num_rows
        scan_ms = (time.perf_counter() - t0) * 1000
        rows.append({"system": system, "statement": statement, "rows": scanned,
                     "bytes_written": int(statistics.median(sizes)),
                     "requests": int(statistics.median(requests)),
                     "ms_median": round(statistics.median(times), 1),
                     "scan_ms_after": round(scan_ms, 1)})
    lake.close()
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.update_price",
                                description=__doc__.splitlines()[0])
    add_common_args(p, "results/update_price")
    p.add_argument("--rows", type=int, default=1_000_000, help="rows in the table's one file")
    p.add_argument("--reps", type=int, default=5, help="statements of each kind")
    args = p.parse_args(argv)
    if args.quick:
        args.rows, args.reps = 20_000, 2
    env = make_env(args)
    try:
        results = [r for system in SYSTEMS for r in run_system(env, system, args)]
        info = run_info(args, env)
    finally:
        env.close()
    for statement in STATEMENTS:
        base, dv = (next(r for r in results if r["system"] == s and r["statement"] == statement)
                    for s in SYSTEMS)
        dv["bytes_ratio"] = round(dv["bytes_written"] / max(base["bytes_written"], 1), 5)
        dv["ms_ratio"] = round(dv["ms_median"] / max(base["ms_median"], 1e-9), 3)
    print_table(results, COLUMNS + ["bytes_ratio", "ms_ratio"],
                f"one-row statements on a {args.rows:,}-row file ({info['store']}, latency "
                f"{info['latency']}); ratios: deletion vectors / rewrite")
    payload = {"run": info, "rows": args.rows, "reps": args.reps, "results": results}
    write_json(args.out, "update_price", payload)

    def draw(fig) -> None:
        ax = fig.add_subplot(1, 1, 1)
        labels = [f"{r['system']}\n{r['statement']}" for r in results]
        ax.bar(range(len(results)), [max(r["bytes_written"], 1) for r in results],
               color=["#888" if r["system"] == "rewrite" else "#37a" for r in results])
        ax.set_yscale("log")
        ax.set_xticks(range(len(results)), labels, fontsize=8)
        ax.set_ylabel("bytes written per one-row statement")

    plot(args.out, "update_price", draw)
    return payload


if __name__ == "__main__":
    main()
