"""Compaction beside concurrent writers: delta-rs' optimize vs lakevilla's txn.optimize.

    python -m benchmarks.compaction [--quick] [--writers 4] [--txns 30] [--store s3 --latency s3]
                                    [--workers processes|threads]

W writer processes each run transactions that append two rows to a partition and delete a
row they wrote two transactions before (so writers touch existing files, which a compaction
rewrites); one more process compacts the table over and over while they run. Every system
runs the same work twice, without and with the compacting process:

* delta-rs: ``write_deltalake(append)`` then ``DeltaTable.delete`` (two commits), and
  ``optimize.compact``; a CommitFailedError is retried by the application (up to --retries).
* LV[DL]: the same statements through lakevilla, each its own Delta commit, retried likewise.
* LV[R]: insert and delete in one R transaction; ``txn.optimize`` in another. A conflict is
  redone inside the commit, so the application never retries.

Reported per run: the writers' committed transactions per second, the aborts the
application saw (retries) and the transactions it gave up, the compactions that landed and
the ones that aborted, files compacted, the files left; and the check: every acknowledged
row is there exactly once, every acknowledged delete gone (read by delta-rs).
"""

from __future__ import annotations

import argparse
import time
import traceback
from typing import Any

import pyarrow as pa

from .common import (
    Env,
    add_common_args,
    clients_kind,
    latency_profile,
    make_env,
    plot,
    print_table,
    run_info,
    write_json,
)

TABLE = "events"
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.int64())])
PARTS = 4
DEFAULT_SYSTEMS = "delta-rs,LV[DL],LV[R]"
FEATURES = {"LV[DL]": "", "LV[R]": "R"}


def _batch(ids: list[int], p: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([p] * len(ids), pa.string()),
                     "v": pa.array(ids, pa.int64())}, schema=SCHEMA)


def _lake(spec: dict):
    env = Env(spec["kind"], spec["root"], spec["opts"], latency_profile(spec["latency"]),
              spec["latency"])
    return env.lake(spec["root"])[0]


def _retrying(fn, aborts: tuple, retries: int, stats: dict) -> bool:
    for _ in range(retries + 1):
        try:
            fn()
            return True
        except aborts:
            stats["aborts"] += 1
    stats["given_up"] += 1
    return False


def _writer(spec: dict, w: int, n: int, retries: int, out) -> None:
    try:
        stats = {"aborts": 0, "given_up": 0, "committed": 0, "inserted": [], "deleted": []}
        p = f"p{w % PARTS}"
        t0 = time.perf_counter()
        if spec["system"] == "delta-rs":
            from deltalake import DeltaTable, write_deltalake
            from deltalake.exceptions import CommitFailedError

            uri, opts = f"{spec['root']}/{TABLE}", spec["opts"] or None
            dt = DeltaTable(uri, storage_options=opts)
            for i in range(n):
                ids = [w * 100_000 + 2 * i, w * 100_000 + 2 * i + 1]
                if _retrying(lambda ids=ids: write_deltalake(uri, _batch(ids, p), mode="append",
                                                             storage_options=opts),
                             (CommitFailedError,), retries, stats):
                    stats["inserted"] += ids
                if i >= 2:
                    gone = w * 100_000 + 2 * (i - 2)

                    def delete(gone=gone):
                        dt.update_incremental()
                        dt.delete(f"id = {gone}")
                    if _retrying(delete, (CommitFailedError,), retries, stats):
                        stats["deleted"].append(gone)
                stats["committed"] += 1
        else:
            import lakevilla as lv

            lake = _lake(spec)
            features = FEATURES[spec["system"]]
            for i in range(n):
                ids = [w * 100_000 + 2 * i, w * 100_000 + 2 * i + 1]
                gone = w * 100_000 + 2 * (i - 2) if i >= 2 else None
                if not features:  # plain Delta: each statement commits (and is retried) on its own

                    def insert(ids=ids):
                        with lake.transaction("") as t:
                            t.insert(TABLE, _batch(ids, p))

                    def delete(gone=gone):
                        with lake.transaction("") as t:
                            t.delete(TABLE, where=f"id = {gone}")
                    if _retrying(insert, (lv.TransactionAborted,), retries, stats):
                        stats["inserted"] += ids
                    if gone is not None and _retrying(delete, (lv.TransactionAborted,), retries,
                                                      stats):
                        stats["deleted"].append(gone)
                    stats["committed"] += 1
                    continue

                def txn(ids=ids, gone=gone):
                    with lake.transaction(features) as t:
                        t.insert(TABLE, _batch(ids, p))
                        if gone is not None:
                            t.delete(TABLE, where=f"id = {gone}")
                if _retrying(txn, (lv.TransactionAborted,), retries, stats):
                    stats["inserted"] += ids
                    if gone is not None:
                        stats["deleted"].append(gone)
                    stats["committed"] += 1
            lake.close()
        stats["seconds"] = time.perf_counter() - t0
        out.put(("writer", stats))
    except Exception:  # noqa: BLE001 - reported to the parent, which fails the run
        out.put(("error", traceback.format_exc()))


def _optimizer(spec: dict, done, target: int, interval: float, retries: int, out) -> None:
    try:
        stats = {"runs": 0, "aborts": 0, "given_up": 0, "files_removed": 0, "redos": 0}
        if spec["system"] == "delta-rs":
            from deltalake import DeltaTable
            from deltalake.exceptions import CommitFailedError

            dt = DeltaTable(f"{spec['root']}/{TABLE}", storage_options=spec["opts"] or None)

            def once() -> None:
                dt.update_incremental()
                m = dt.optimize.compact(target_size=target)
                stats["files_removed"] += int(m.get("numFilesRemoved", 0))
            aborts: tuple = (CommitFailedError,)
        else:
            import lakevilla as lv

            lake = _lake(spec)

            def once() -> None:
                txn = lake.begin(FEATURES[spec["system"]])
                try:
                    m = txn.optimize(TABLE, target_file_size=target)
                    txn.commit()
                except BaseException:
                    txn.abort()
                    raise
                stats["files_removed"] += m["files_removed"]
                stats["redos"] += txn.stats["redos"]
            aborts = (lv.TransactionAborted,)
        while True:  # a compaction at once, then every `interval` seconds while the writers run
            if _retrying(once, aborts, retries, stats):
                stats["runs"] += 1
            if done.wait(interval):
                break
        if spec["system"] != "delta-rs":
            lake.close()  # its deletes behind commits, before the caller stops the endpoint
        out.put(("optimizer", stats))
    except Exception:  # noqa: BLE001
        out.put(("error", traceback.format_exc()))


def _setup(env: Env, system: str, root: str) -> None:
    import lakevilla as lv

    lake = lv.Lake(root, storage_options=env.storage_options or None, store=env.store(root))
    lake.create_table(TABLE, SCHEMA, partition_by=["p"])
    for k in range(PARTS * 2):  # small files to start from
        with lake.transaction("") as t:
            t.insert(TABLE, _batch([-(k + 1)], f"p{k % PARTS}"))
    lake.close()


def _final(env: Env, root: str) -> tuple[list[int], int]:
    from deltalake import DeltaTable

    dt = DeltaTable(f"{root}/{TABLE}", storage_options=env.storage_options or None)
    return (pa.table(dt.to_pyarrow_table(columns=["id"])).column("id").to_pylist(),
            len(dt.file_uris()))


def run_one(env: Env, system: str, compact: bool, args: argparse.Namespace) -> dict[str, Any]:
    root = env.fresh_root(
        f"{system.replace('[', '').replace(']', '').replace(',', '')}-{int(compact)}")
    _setup(env, system, root)
    spec = {"system": system, "root": root, "opts": env.storage_options, "kind": env.kind,
            "latency": env.latency_label}
    ctx = clients_kind(args.workers)  # each has a Lake or DeltaTable of its own either way
    out, done = ctx.Queue(), ctx.Event()
    writers = [ctx.Process(target=_writer, args=(spec, w, args.txns, args.retries, out))
               for w in range(args.writers)]
    opt = ctx.Process(target=_optimizer,
                      args=(spec, done, args.target, args.interval, args.retries, out)) \
        if compact else None
    t0 = time.perf_counter()
    for p in writers + ([opt] if opt else []):
        p.start()
    got: list[dict] = []
    opt_stats: dict = {}
    errors = []
    while len(got) < len(writers):
        kind, payload = out.get(timeout=1800)
        if kind == "error":
            errors.append(payload)
            got.append({})
        else:
            got.append(payload)
    wall = time.perf_counter() - t0
    done.set()
    if opt is not None:
        kind, payload = out.get(timeout=600)
        if kind == "error":
            errors.append(payload)
        else:
            opt_stats = payload
    for p in writers + ([opt] if opt else []):
        p.join(120)
    if errors:
        raise RuntimeError("a benchmark process failed:\n" + "\n".join(errors))
    ids, files = _final(env, root)
    inserted = {i for s in got for i in s["inserted"]}
    deleted = {i for s in got for i in s["deleted"]}
    expected = (inserted - deleted) | {-(k + 1) for k in range(PARTS * 2)}
    committed = sum(s["committed"] for s in got)
    return {
        "system": system, "optimize": "yes" if compact else "no", "writer_txns": committed,
        # the writers' own clocks (from their first transaction to their last), not process start-up
        "txn_per_s": committed / max(s["seconds"] for s in got) if got else 0.0,
        "writer_aborts": sum(s["aborts"] for s in got), "given_up": sum(s["given_up"] for s in got),
        "opt_runs": opt_stats.get("runs", 0), "opt_aborts": opt_stats.get("aborts", 0),
        "opt_redos": opt_stats.get("redos", 0),
        "files_compacted": opt_stats.get("files_removed", 0), "final_files": files,
        "rows_ok": sorted(ids) == sorted(expected) and len(ids) == len(set(ids)), "seconds": wall,
    }


COLUMNS = ["system", "optimize", "writer_txns", "txn_per_s", "writer_aborts", "given_up",
           "opt_runs", "opt_aborts", "opt_redos", "files_compacted", "final_files", "rows_ok"]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compaction",
                                description=__doc__.splitlines()[0])
    add_common_args(p, "results/compaction")
    p.set_defaults(systems=DEFAULT_SYSTEMS)
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--txns", type=int, default=30, help="transactions per writer")
    p.add_argument("--retries", type=int, default=10,
                   help="application retries per aborted statement")
    p.add_argument("--target", type=int, default=16 << 20,
                   help="compaction target file size (bytes)")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between compactions")
    p.add_argument("--workers", choices=["processes", "threads"], default="processes",
                   help="writers and compaction as spawned processes (default) or threads")
    args = p.parse_args(argv)
    if args.quick:
        args.writers, args.txns, args.interval = 2, 4, 0.2
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s != "delta-rs" and s not in FEATURES]
    if unknown:
        p.error(f"unknown system(s) {unknown}: choose from delta-rs, {', '.join(FEATURES)}")
    env = make_env(args)
    try:
        rows = [run_one(env, s, compact, args) for s in systems for compact in (False, True)]
        info = run_info(args, env)
    finally:
        env.close()
    print_table(rows, COLUMNS,
                f"compaction beside {args.writers} writers x {args.txns} transactions "
                f"({info['store']}, latency {info['latency']})")
    payload = {"run": info, "writers": args.writers, "txns": args.txns, "results": rows}
    write_json(args.out, "compaction", payload)

    def draw(fig) -> None:
        ax = fig.add_subplot(1, 1, 1)
        labels = [f"{r['system']}\n{'+optimize' if r['optimize'] == 'yes' else 'alone'}"
                  for r in rows]
        ax.bar(range(len(rows)), [r["txn_per_s"] for r in rows],
               color=["#888" if r["optimize"] == "no" else "#37a" for r in rows])
        for i, r in enumerate(rows):
            ax.text(i, r["txn_per_s"], f"{r['writer_aborts']} aborts", ha="center", va="bottom",
                    fontsize=8)
        ax.set_xticks(range(len(rows)), labels, fontsize=8)
        ax.set_ylabel("writer transactions / s")
        ax.set_title("Writers beside a compaction")

    plot(args.out, "compaction", draw)
    return payload


if __name__ == "__main__":
    main()
