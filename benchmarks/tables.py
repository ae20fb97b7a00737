"""Commit latency and requests per transaction as the tables a transaction touches grow
(the paper's Figure 10: LV[CT] flat at about 1 s up to 32 tables; one write and five
reads added per table).

    python -m benchmarks.tables [--quick] [--tables 1,2,4,8,16,32,64] [--ops insert,update]
                                [--latency s3] ...

Each transaction inserts (or updates) one row in each of its ``n`` tables, TPC-H
``customer``-shaped tables preloaded with a few rows. One client, a warm ``Lake``
per feature set, one unmeasured warm-up transaction per point, then ``--reps``
measured ones (median latency, mean requests). Latency is simulated on the store
(default: a same-region S3 profile).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

FEATURE_SETS = {"LV[DL]": "", "LV[R]": "R", "LV[R,CT]": "R,CT", "LV[I]": "I",
                "LV[R,CT,I]": "R,CT,I"}
PRELOAD = 10


def customer_schema():
    import pyarrow as pa

    return pa.schema([("c_custkey", pa.int64()), ("c_name", pa.string()),
                      ("c_address", pa.string()), ("c_nationkey", pa.int32()),
                      ("c_phone", pa.string()), ("c_acctbal", pa.float64()),
                      ("c_mktsegment", pa.string()), ("c_comment", pa.string())])


def customer_rows(keys: range | list[int]):
    import pyarrow as pa

    rows = [{"c_custkey": k, "c_name": f"Customer#{k:09d}", "c_address": f"addr {k}",
             "c_nationkey": k % 25, "c_phone": f"{10 + k % 25}-{k % 1000:03d}-555-0100",
             "c_acctbal": float(k % 10000) / 3,
             "c_mktsegment": ("BUILDING", "AUTOMOBILE", "MACHINERY", "HOUSEHOLD",
                              "FURNITURE")[k % 5],
             "c_comment": "regular deposits sleep carefully"} for k in keys]
    return pa.Table.from_pylist(rows, schema=customer_schema())


def table_name(i: int) -> str:
    return f"customer_{i:03d}"


def create_tables(store: Any, root: str, n: int) -> None:
    """``n`` tables of ``PRELOAD`` rows each, over the unslowed store (a fixture)."""
    import lakevilla as lv

    lake = lv.Lake(root, store=store)
    try:
        def one(i: int) -> None:
            lake.create_table(table_name(i), customer_schema())
            with lake.transaction(features="") as txn:
                txn.insert(table_name(i), customer_rows(range(PRELOAD)))

        lake._client.map(one, range(n))
    finally:
        lake.close()


class Writer:
    """Transactions touching the first ``n`` tables, with keys that never collide."""

    def __init__(self, lake: Any, features: str, op: str, first_key: int) -> None:
        self.lake, self.features, self.op = lake, features, op
        self.next_key = first_key
        self.applied: dict[int, int] = {}  # table index -> committed transactions that touched it

    def txn(self, n: int) -> dict[str, Any]:
        self.next_key += 1
        k = self.next_key
        t0 = time.perf_counter()
        txn = self.lake.begin(features=self.features)
        try:
            for i in range(n):
                if self.op == "insert":
                    txn.insert(table_name(i), customer_rows([k]))
                else:
                    txn.update(table_name(i), set={"c_acctbal": "c_acctbal + 1"},
                               where=f"c_custkey = {k % PRELOAD}")
            t1 = time.perf_counter()
            txn.commit()
        except BaseException:
            txn.abort()
            raise
        t2 = time.perf_counter()
        for i in range(n):
            self.applied[i] = self.applied.get(i, 0) + 1
        return {"total": t2 - t0, "ops": t1 - t0, "commit": t2 - t1, "stats": dict(txn.stats)}


def measure(env: Any, root: str, name: str, features: str, op: str, n: int, reps: int,
            first_key: int, commit_mode: str = "tail") -> dict[str, Any]:
    from .common import reads_writes

    lake, store = env.lake(root, commit_mode=commit_mode)
    w = Writer(lake, features, op, first_key)
    runs, errors = [], []
    try:
        try:
            w.txn(n)  # warm-up: snapshots of every table cached
        except Exception as e:  # noqa: BLE001 - a failure is a result
            errors.append(f"warm-up: {type(e).__name__}: {e}"[:300])
        lake.flush()
        store.reset()
        for _ in range(reps):
            try:
                runs.append(w.txn(n))
            except Exception as e:  # noqa: BLE001
                errors.append(f"{type(e).__name__}: {e}"[:300])
        lake.flush()
        counts = dict(store.snapshot())
    finally:
        lake.close()
    done = max(reps, 1)  # measured attempts, failed ones included
    r, wr = reads_writes(counts)
    med = (lambda k: statistics.median(x[k] for x in runs) * 1000) if runs else (lambda k: None)
    stats: dict[str, int] = {}
    for x in runs:
        for k, v in x["stats"].items():
            stats[k] = stats.get(k, 0) + v
    return {"system": name, "op": op, "tables": n, "reps": reps, "ok": len(runs), "errors": errors,
            "latency_ms": med("total"), "ops_ms": med("ops"), "commit_ms": med("commit"),
            "requests": {k: v / done for k, v in counts.items()}, "reads": r / done,
            "writes": wr / done, "reads_per_table": r / done / n, "writes_per_table": wr / done / n,
            "stats": stats, "applied": w.applied}


def verify(root: str, options: dict[str, str], tables: int, inserts: dict[int, int],
           updates: dict[int, int]) -> dict[str, Any]:
    """Read every table back with delta-rs: each committed insert is there once and each
    committed ``c_acctbal + 1`` is counted (nothing lost, nothing doubled)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    base = sum(r["c_acctbal"] for r in customer_rows(range(PRELOAD)).to_pylist())
    bad = []
    for i in range(tables):
        t = pa.table(DeltaTable(f"{root}/{table_name(i)}",
                                storage_options=options or None).to_pyarrow_table())
        keys = t.column("c_custkey").to_pylist()
        want_rows = PRELOAD + inserts.get(i, 0)
        preload = [r for r in t.to_pylist() if r["c_custkey"] < PRELOAD]
        got_sum = sum(r["c_acctbal"] for r in preload)
        if len(keys) != want_rows or len(set(keys)) != len(keys):
            bad.append(f"{table_name(i)}: {len(keys)} rows ({len(set(keys))} distinct), "
                       f"expected {want_rows}")
        if abs(got_sum - base - updates.get(i, 0)) > 1e-6:
            bad.append(f"{table_name(i)}: acctbal sum {got_sum:.3f}, "
                       f"expected {base + updates.get(i, 0):.3f}")
    return {"tables": tables, "ok": not bad, "problems": bad[:20]}


def add_extra(rows: list[dict[str, Any]]) -> None:
    """Per-table requests each feature set adds over LV[DL] at the same point."""
    base = {(r["op"], r["tables"]): r for r in rows if r["system"] == "LV[DL]"}
    for r in rows:
        b = base.get((r["op"], r["tables"]))
        if b:
            r["extra_reads_per_table"] = r["reads_per_table"] - b["reads_per_table"]
            r["extra_writes_per_table"] = r["writes_per_table"] - b["writes_per_table"]


def plot_tables(out_dir: str, rows: list[dict[str, Any]]) -> str:
    from .common import plot

    ops = sorted({r["op"] for r in rows})
    systems = list(dict.fromkeys(r["system"] for r in rows))

    def draw(fig: Any) -> None:
        for i, op in enumerate(ops):
            ax = fig.add_subplot(1, len(ops), i + 1)
            for s in systems:
                pts = sorted((r["tables"], r["latency_ms"], r["commit_ms"]) for r in rows
                             if r["op"] == op and r["system"] == s and r["latency_ms"] is not None)
                if not pts:
                    continue
                line = ax.plot([p[0] for p in pts], [p[1] / 1000 for p in pts], marker="o",
                               label=f"{s} total")
                ax.plot([p[0] for p in pts], [p[2] / 1000 for p in pts], marker=".", linestyle="--",
                        color=line[0].get_color(), alpha=0.6)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("tables per transaction")
            ax.set_ylabel("seconds (solid: transaction, dashed: commit)" if i == 0 else "")
            ax.set_title(f"one row {'inserted' if op == 'insert' else 'updated'} per table",
                         fontsize=9)
            ax.legend(fontsize=7)

    return str(plot(out_dir, "tables", draw))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from .common import add_commit_mode_arg, add_common_args, parse_with_quick

    p = argparse.ArgumentParser(prog="python -m benchmarks.tables",
                                description=__doc__.split("\n\n")[0])
    add_common_args(p, "results/tables")
    add_commit_mode_arg(p)
    p.set_defaults(latency="s3")
    p.add_argument("--tables", default="1,2,4,8,16,32,64")
    p.add_argument("--ops", default="insert,update",
                   help="insert and/or update (one row per table)")
    p.add_argument("--reps", type=int, default=3)
    return parse_with_quick(p, argv, {"tables": "1,2,4", "reps": 1, "latency": "none"})


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from .common import make_counted_env, parse_systems, print_table, progress, run_info, write_json

    args = parse_args(argv)
    systems = {n: f for n, f in parse_systems(args.systems).items() if f is not None}
    counts = sorted({int(x) for x in args.tables.split(",") if x})
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    for o in ops:
        if o not in ("insert", "update"):
            raise SystemExit(f"unknown op {o}: insert and/or update")
    ce = make_counted_env(args)
    env = ce.env
    rows: list[dict[str, Any]] = []
    try:
        t0 = time.time()
        # one lake per feature set: equal log lengths, and no feature set reads another's commits
        roots = {name: env.fresh_root("tables-" + (f.replace(",", "") or "DL"))
                 for name, f in systems.items()}
        for root in roots.values():
            create_tables(ce.direct_store(root), root, max(counts))
        bar = progress(len(systems) * len(ops) * sum(counts) * (args.reps + 1), "tables")
        bar.unit = "table-op"
        try:
            applied = {(name, op): {} for name in systems for op in ops}
            key = 1_000_000
            for op in ops:
                for name, features in systems.items():
                    for n in counts:
                        bar.set_description(f"tables {op} {name} n={n}")
                        row = measure(env, roots[name], name, features, op, n, args.reps, key,
                                      args.commit_mode)
                        key += args.reps + 1
                        for i, c in row.pop("applied").items():
                            applied[(name, op)][i] = applied[(name, op)].get(i, 0) + c
                        rows.append(row)
                        bar.update(n * (args.reps + 1))
        finally:
            bar.close()
        direct = ce.direct_options or env.storage_options
        checks = {name: verify(roots[name], direct, max(counts), applied.get((name, "insert"), {}),
                               applied.get((name, "update"), {})) for name in systems}
        add_extra(rows)
        info = run_info(args, env)
        info.update({"reps": args.reps, "preload_rows": PRELOAD, "commit_mode": args.commit_mode,
                     "wall_s": time.time() - t0})
    finally:
        ce.close()
    text = print_table([_row(r) for r in rows], COLUMNS,
                       title=f"Tables per transaction: latency={args.latency}, store={env.kind}, "
                             f"commit_mode={args.commit_mode}, median of "
                             f"{args.reps} (ms); requests per transaction and per table")
    for name, c in checks.items():
        if not c["ok"]:
            print(f"CHECK FAILED for {name}: " + "; ".join(c["problems"]))
    payload = {"benchmark": "tables", "info": info, "points": rows, "checks": checks, "table": text}
    path = write_json(args.out, "tables", payload)
    payload["files"] = [str(path), plot_tables(args.out, rows)]
    print("wrote " + ", ".join(payload["files"]))
    return payload


COLUMNS = ["op", "system", "tables", "txn ms", "commit ms", "reads", "writes", "reads/table",
           "writes/table", "+r/+w per table vs DL", "markers", "errors"]


def _row(r: dict[str, Any]) -> dict[str, Any]:
    return {"op": r["op"], "system": r["system"], "tables": r["tables"],
            "txn ms": r["latency_ms"] if r["latency_ms"] is not None else "n/a",
            "commit ms": r["commit_ms"] if r["commit_ms"] is not None else "n/a",
            "reads": r["reads"], "writes": r["writes"], "reads/table": r["reads_per_table"],
            "writes/table": r["writes_per_table"],
            "+r/+w per table vs DL": "" if "extra_reads_per_table" not in r else
            f"{r['extra_reads_per_table']:+.1f}/{r['extra_writes_per_table']:+.1f}",
            "markers": r["stats"].get("markers", 0) / max(r["ok"], 1),
            "errors": len(r["errors"]) or ""}


if __name__ == "__main__":
    main()
