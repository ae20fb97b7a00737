"""Object-store requests per operation and per transaction (the paper's Figure 14),
snapshot load time, and the latency price of LV[R] over plain Delta.

    python -m benchmarks.costs [--quick] [--reps 20] [--commits 1000] [--latency 20] ...
    python -m benchmarks.costs --store azure --latency cloud    # (or s3, gcs)

Requests are counted at lakevilla's store layer (every request goes through it),
by kind and by area: the Delta log, lakevilla's own ``_lakevilla/`` folder, and data
files. The paper counts metadata requests only (log + lakevilla); we show both.
delta-rs' requests are only observable on S3 and Azure (``--store s3|azure``), where they
cross our counting proxy; on the local store they are n/a, and on GCS delta-rs does not run (no
emulator here serves it). ``--latency cloud`` gives each cloud its published conditional-write
latency (``lakevilla/store/latency.py``), for the per-cloud table of benchmarks/README.md.

Warm: one long-lived ``Lake`` per feature set, averaged over ``--reps``
transactions after one unmeasured warm-up. Cold: the first transaction of a new
``Lake`` (snapshot loading included).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from .ycsb import TABLE, fill, insert_row, load_table, usertable_schema

FEATURE_SETS = {"LV[DL]": "", "LV[R]": "R", "LV[R,CT]": "R,CT", "LV[I]": "I",
                "LV[R,CT,I]": "R,CT,I"}

# transaction shapes: the single-operation kinds, then the two transaction kinds
SCENARIOS: dict[str, tuple[str, ...]] = {
    "read": ("read",),
    "insert": ("insert",),
    "update": ("update",),
    "read-only txn": ("read", "read", "read"),
    "read-write txn": ("read", "update", "insert"),
}
PARTS = ("requests", "load", "latency")
KINDS = ("get", "head", "list", "put", "put_if_absent", "put_if_match", "delete")


class Keys:
    """Distinct keys per operation so repetitions do not hit one cached file."""

    def __init__(self, records: int) -> None:
        self.records, self.i, self.next_insert = records, 0, records

    def existing(self) -> int:
        self.i += 1
        return (self.i * 37) % self.records

    def new(self) -> int:
        self.next_insert += 1
        return self.next_insert


def run_txn(lake: Any, features: str, ops: tuple[str, ...], keys: Keys) -> None:
    import pyarrow as pa

    with lake.transaction(features=features) as txn:
        for op in ops:
            if op == "read":
                txn.read(TABLE, where=f"key = {keys.existing()}")
            elif op == "update":
                txn.update(TABLE, set={"field1": f"'{fill('cost')}'"},
                           where=f"key = {keys.existing()}")
            else:
                k = keys.new()
                txn.insert(TABLE,
                           pa.Table.from_pylist([insert_row(k, f"i{k}")],
                                                schema=usertable_schema()))


def run_delta_rs(dt: Any, ops: tuple[str, ...], keys: Keys) -> None:
    """The same shapes with delta-rs: every operation is its own commit."""
    import pyarrow as pa
    from deltalake import write_deltalake

    for op in ops:
        dt.update_incremental()
        if op == "read":
            dt.to_pyarrow_table(filters=[("key", "=", keys.existing())])
        elif op == "update":
            dt.update(updates={"field1": f"'{fill('cost')}'"}, predicate=f"key = {keys.existing()}")
        else:
            k = keys.new()
            write_deltalake(dt,
                            pa.Table.from_pylist([insert_row(k, f"i{k}")],
                                                 schema=usertable_schema()), mode="append")


def counted(store: Any) -> dict[str, Any]:
    """Everything one measurement reports about its requests."""
    from .common import reads_writes

    counts = dict(store.snapshot())
    areas = store.area_snapshot()
    meta = Counter()
    data = Counter()
    for (kind, area), n in areas.items():
        (data if area == "data" else meta)[kind] += n
    r, w = reads_writes(counts)
    mr, mw = reads_writes(meta)
    return {"kinds": {k: counts.get(k, 0) for k in KINDS}, "reads": r, "writes": w,
            "meta_reads": mr, "meta_writes": mw, "data_reads": r - mr, "data_writes": w - mw,
            "by_area": {f"{k}:{a}": n for (k, a), n in sorted(areas.items())}}


def scale(m: dict[str, Any], n: int) -> dict[str, Any]:
    out = {k: (v / n if isinstance(v, int | float) else v)
           for k, v in m.items() if k not in ("kinds", "by_area")}
    out["kinds"] = {k: v / n for k, v in m["kinds"].items()}
    out["by_area"] = {k: v / n for k, v in m["by_area"].items()}
    return out


def measure_feature_set(ce: Any, name: str, features: str, records: int, reps: int,
                        commit_mode: str = "tail") -> list[dict[str, Any]]:
    env = ce.env
    root = env.fresh_root(f"costs-{features.replace(',', '') or 'DL'}")
    load_table(ce.direct_store(root), root, records, 10)
    rows = []
    keys = Keys(records)
    for scen, ops in SCENARIOS.items():  # cold: a fresh Lake's first transaction
        lake, store = env.lake(root, commit_mode=commit_mode)
        try:
            run_txn(lake, features, ops, keys)
            lake.flush()
            rows.append({"system": name, "scenario": scen, "state": "cold", "n": 1,
                         **counted(store)})
        finally:
            lake.close()
    lake, store = env.lake(root, commit_mode=commit_mode)
    try:
        for scen, ops in SCENARIOS.items():
            run_txn(lake, features, ops, keys)  # warm-up, not counted
            lake.flush()
            store.reset()
            for _ in range(reps):
                run_txn(lake, features, ops, keys)
            lake.flush()
            rows.append({"system": name, "scenario": scen, "state": "warm", "n": reps,
                         **scale(counted(store), reps)})
    finally:
        lake.close()
    return rows


def measure_delta_rs(ce: Any, records: int, reps: int) -> list[dict[str, Any]]:
    """delta-rs' requests, counted at the proxy (S3, Azure: the only place they are
    observable)."""
    from deltalake import DeltaTable

    from .common import reads_writes

    env = ce.env
    root = env.fresh_root("costs-delta-rs")
    load_table(ce.direct_store(root), root, records, 10)
    keys = Keys(records)
    rows = []
    dt = DeltaTable(f"{root}/{TABLE}", storage_options=env.storage_options)
    for scen, ops in SCENARIOS.items():
        run_delta_rs(dt, ops, keys)
        ce.proxy.reset()
        for _ in range(reps):
            run_delta_rs(dt, ops, keys)
        counts = ce.proxy.reset()
        r, w = reads_writes(counts)
        rows.append({"system": "delta-rs", "scenario": scen, "state": "warm", "n": reps,
                     "kinds": {k: counts.get(k, 0) / reps for k in KINDS}, "reads": r / reps,
                     "writes": w / reps, "meta_reads": None, "meta_writes": None,
                     "data_reads": None, "data_writes": None, "by_area": {}})
    return rows


def add_extra(rows: list[dict[str, Any]]) -> None:
    """Requests each feature set adds over LV[DL] for the same transaction shape."""
    base = {(r["scenario"], r["state"]): r for r in rows if r["system"] == "LV[DL]"}
    for r in rows:
        b = base.get((r["scenario"], r["state"]))
        if b is None:
            continue
        r["extra_reads"] = r["reads"] - b["reads"]
        r["extra_writes"] = r["writes"] - b["writes"]
        if r.get("meta_reads") is not None:
            r["extra_meta_reads"] = r["meta_reads"] - b["meta_reads"]
            r["extra_meta_writes"] = r["meta_writes"] - b["meta_writes"]


# -------------------------------------------------------------------------------------
# Snapshot loading of a long table
# -------------------------------------------------------------------------------------

def write_history(store: Any, root: str, commits: int, bar: Any) -> dict[str, Any]:
    """A table with ``commits`` commits (one-row inserts), written by lakevilla with its
    default checkpointing, over the unslowed store (a fixture, not a measurement)."""
    import pyarrow as pa

    import lakevilla as lv

    lake = lv.Lake(root, store=store)
    try:
        lake.create_table(TABLE, usertable_schema())
        for k in range(commits - 1):
            with lake.transaction(features="") as txn:
                txn.insert(TABLE,
                           pa.Table.from_pylist([insert_row(k, f"h{k}")],
                                                schema=usertable_schema()))
            bar.update(1)
        lake.flush()
        log = lake._client.log(TABLE)
        return {"version": lake.version(TABLE), "last_checkpoint": log.last_checkpoint_version()}
    finally:
        lake.close()


def forget_global_log(store: Any) -> None:
    """Delete the lake's global log: every table is new to it again (a first isolated read)."""
    from lakevilla.names import GVL_DIR

    for meta in list(store.list(GVL_DIR + "/")):
        store.delete(meta.key)


class _NoBar:
    def update(self, n: int) -> None:
        pass


def median_time(fn: Callable[[], Any], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _timed_on_new_lake(store_factory: Callable[[], Any], root: str,
                       fn: Callable[[Any], None]) -> tuple[float, dict[str, int]]:
    """``fn(lake)`` on a new Lake over a new store: its time and the requests it made."""
    import lakevilla as lv

    store = store_factory()
    lake = lv.Lake(root, store=store)
    try:
        t0 = time.perf_counter()
        fn(lake)
        dt = time.perf_counter() - t0
        return dt, dict(store.snapshot())
    finally:
        lake.close()


def lv_load(store_factory: Callable[[], Any], root: str) -> tuple[float, dict[str, int]]:
    """One cold load: a new Lake, a new store, ``snapshot(table)``."""
    def load(lake: Any) -> None:
        assert lake.snapshot(TABLE).version >= 0

    return _timed_on_new_lake(store_factory, root, load)


def lv_isolated_read(store_factory: Callable[[], Any], root: str) -> tuple[float, dict[str, int]]:
    """One isolated transaction of a new Lake that reads the table (a predicate no file's
    statistics can satisfy, so that the log and the global log are what it costs)."""
    def read(lake: Any) -> None:
        with lake.transaction("I") as txn:
            assert txn.read(TABLE, where="key < 0").num_rows == 0

    return _timed_on_new_lake(store_factory, root, read)


def measure_load(ce: Any, commits: int, loads: int) -> dict[str, Any]:
    from deltalake import DeltaTable

    from .common import AreaCountingStore, progress

    env = ce.env
    root = env.fresh_root("history")
    bar = progress(commits, "costs: writing history")
    try:
        meta = write_history(ce.direct_store(root), root, commits, bar)
    finally:
        bar.close()
    uri = f"{root}/{TABLE}"

    def lv_times(factory: Callable[[], Any]) -> tuple[float, dict[str, int]]:
        runs = [lv_load(factory, root) for _ in range(loads)]
        return statistics.median(t for t, _ in runs), runs[0][1]

    lv_env_t, lv_reqs = lv_times(lambda: AreaCountingStore(env.store(root)))
    lv_direct_t, _ = lv_times(lambda: AreaCountingStore(ce.direct_store(root)))
    dr_reqs: dict[str, int] | None = None
    dr_t: float | None = None
    if env.delta_rs_runs:  # not on GCS (benchmarks/clouds.py)
        if ce.proxy is not None:
            ce.proxy.reset()
        DeltaTable(uri, storage_options=env.storage_options or None)
        dr_reqs = ce.proxy.reset() if ce.proxy is not None else None
        dr_t = median_time(lambda: DeltaTable(uri, storage_options=env.storage_options or None),
                           loads)
    # the first isolated read of a table the global log does not know examines the commits after
    # what its checkpoint promises (without a promise, every commit the log still has); it then
    # joins the global log, and later isolated reads start from where an entry has it. An
    # unmeasured isolated read in another lake first: the process's first read pays one-time
    # set-up (imports, DuckDB) that is no part of the join
    warm = env.fresh_root("warm-up")
    write_history(ce.direct_store(warm), warm, 3, _NoBar())
    lv_isolated_read(lambda: AreaCountingStore(env.store(warm)), warm)
    # in pairs, side by side: the global log forgotten (deleted), a first read, a known read
    firsts, known = [], []
    for _ in range(loads):
        forget_global_log(ce.direct_store(root))
        firsts.append(lv_isolated_read(lambda: AreaCountingStore(env.store(root)), root))
        known.append(lv_isolated_read(lambda: AreaCountingStore(env.store(root)), root))
    first_t, first_reqs = statistics.median(t for t, _ in firsts), firsts[0][1]
    # delta-rs pays the simulated latency on S3 and Azure (it crosses the proxy); on the local
    # store compare unslowed to unslowed
    same = lv_env_t if env.delta_rs_slowed else lv_direct_t
    return {"commits": meta["version"] + 1, "last_checkpoint": meta["last_checkpoint"],
            "loads": loads, "lakevilla_s": lv_env_t, "lakevilla_unslowed_s": lv_direct_t,
            "delta_rs_s": dr_t, "delta_rs_pays_latency": env.delta_rs_slowed,
            "ratio_lakevilla_over_delta_rs": same / dr_t if dr_t else None,
            "lakevilla_requests": lv_reqs,
            "delta_rs_requests": dr_reqs, "isolated_first_read_s": first_t,
            "isolated_first_read_requests": first_reqs,
            "isolated_known_read_s": statistics.median(t for t, _ in known),
            "isolated_known_read_requests": known[0][1]}


# -------------------------------------------------------------------------------------
# Latency of a single-writer update workload
# -------------------------------------------------------------------------------------

def measure_latency(ce: Any, systems: dict[str, str], records: int, n: int,
                    commit_mode: str = "tail") -> list[dict[str, Any]]:
    from .common import percentile

    env = ce.env
    rows = []
    for name, features in systems.items():
        root = env.fresh_root(f"lat-{features.replace(',', '') or 'DL'}")
        load_table(ce.direct_store(root), root, records, 10)
        lake, store = env.lake(root, commit_mode=commit_mode)
        keys = Keys(records)
        try:
            run_txn(lake, features, ("update",), keys)
            lake.flush()
            store.reset()
            lat = []
            for _ in range(n):
                t0 = time.perf_counter()
                run_txn(lake, features, ("update",), keys)
                lat.append(time.perf_counter() - t0)
            lake.flush()
            rows.append({"system": name, "n": n, "median_ms": statistics.median(lat) * 1000,
                         "mean_ms": statistics.fmean(lat) * 1000,
                         "p90_ms": percentile(lat, 90) * 1000, **scale(counted(store), n)})
        finally:
            lake.close()
    base = next((r for r in rows if r["system"] == "LV[DL]"), None)
    for r in rows:
        r["median_ratio_vs_DL"] = r["median_ms"] / base["median_ms"] if base else None
        r["mean_ratio_vs_DL"] = r["mean_ms"] / base["mean_ms"] if base else None
    return rows


# -------------------------------------------------------------------------------------
# Output
# -------------------------------------------------------------------------------------

def _short(k: str) -> str:
    return {"put_if_absent": "pia", "put_if_match": "pim"}.get(k, k)


def request_table(rows: list[dict[str, Any]], state: str) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        if r["state"] != state:
            continue
        d = {"scenario": r["scenario"], "system": r["system"], "reads": r["reads"],
             "writes": r["writes"]}
        d.update({_short(k): r["kinds"][k] for k in KINDS})
        d["meta r/w"] = ("n/a" if r.get("meta_reads") is None
                         else f"{r['meta_reads']:.1f}/{r['meta_writes']:.1f}")
        d["+r/+w vs DL"] = ("" if "extra_reads" not in r
                            else f"{r['extra_reads']:+.1f}/{r['extra_writes']:+.1f}")
        out.append(d)
    return out


REQ_COLUMNS = ["scenario", "system", "reads", "writes", *[_short(k) for k in KINDS], "meta r/w",
               "+r/+w vs DL"]


def plot_costs(out_dir: str, rows: list[dict[str, Any]], systems: list[str]) -> str:
    from .common import READ_KINDS, WRITE_KINDS, plot

    warm = {(r["scenario"], r["system"]): r for r in rows if r["state"] == "warm"}
    scen = list(SCENARIOS)

    def draw(fig: Any) -> None:
        for i, (label, kinds) in enumerate((("reads (GET/HEAD/LIST)", READ_KINDS),
                                            ("writes (PUT/conditional PUT/DELETE)", WRITE_KINDS))):
            ax = fig.add_subplot(1, 2, i + 1)
            width = 0.8 / max(len(systems), 1)
            for j, s in enumerate(systems):
                xs = [x + j * width for x in range(len(scen))]
                bottom = [0.0] * len(scen)
                for kind in kinds:
                    ys = [((warm.get((sc, s)) or {}).get("kinds") or {}).get(kind, 0)
                          for sc in scen]
                    ax.bar(xs, ys, width, bottom=bottom, color=_color(kind), edgecolor="white",
                           linewidth=0.3, label=_short(kind) if j == 0 else None)
                    bottom = [b + y for b, y in zip(bottom, ys)]
                for x, b in zip(xs, bottom):
                    ax.text(x, b, s.replace("LV", ""), rotation=90, fontsize=5, ha="center",
                            va="bottom")
            ax.set_xticks([x + 0.4 - width / 2 for x in range(len(scen))], scen, fontsize=7,
                          rotation=20)
            ax.set_title(label, fontsize=9)
            ax.set_ylabel("requests per transaction (warm)" if i == 0 else "")
            ax.legend(fontsize=7)

    return str(plot(out_dir, "requests", draw))


def _color(kind: str) -> str:
    return {"get": "#4c72b0", "head": "#64b5cd", "list": "#8172b2", "put": "#dd8452",
            "put_if_absent": "#c44e52", "put_if_match": "#da8bc3", "delete": "#937860"}[kind]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from .common import add_commit_mode_arg, add_common_args, parse_with_quick

    p = argparse.ArgumentParser(prog="python -m benchmarks.costs",
                                description=__doc__.split("\n\n")[0])
    add_common_args(p, "results/costs")
    add_commit_mode_arg(p)
    p.add_argument("--reps", type=int, default=20, help="warm transactions averaged per shape")
    p.add_argument("--records", type=int, default=1000)
    p.add_argument("--commits", type=int, default=1000, help="commits in the snapshot-load table")
    p.add_argument("--loads", type=int, default=5, help="cold loads per system (median)")
    p.add_argument("--updates", type=int, default=30,
                   help="transactions in the latency measurement")
    p.add_argument("--parts", default=",".join(PARTS),
                   help="comma-separated subset of " + ",".join(PARTS) + " (load: the cold "
                        "snapshot load and the first isolated read of a long table)")
    return parse_with_quick(p, argv,
                            {"reps": 3, "records": 100, "commits": 100, "loads": 3, "updates": 5})


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from .common import make_counted_env, parse_systems, print_table, run_info, write_json

    args = parse_args(argv)
    chosen = parse_systems(args.systems)
    systems = {n: f for n, f in chosen.items() if f is not None}
    if "LV[DL]" not in systems:
        systems = {"LV[DL]": "", **systems}  # the baseline every figure compares against
    ce = make_counted_env(args)
    try:
        t0 = time.time()
        parts = set(args.parts.split(","))
        rows: list[dict[str, Any]] = []
        for name, features in systems.items() if "requests" in parts else ():
            rows.extend(measure_feature_set(ce, name, features, args.records, args.reps,
                                            args.commit_mode))
        if ("delta-rs" in chosen and ce.proxy is not None and ce.env.delta_rs_runs
                and "requests" in parts):
            rows.extend(measure_delta_rs(ce, args.records, args.reps))
        add_extra(rows)
        load = measure_load(ce, args.commits, args.loads) if "load" in parts else None
        latency = (measure_latency(ce, systems, args.records, args.updates, args.commit_mode)
                   if "latency" in parts else [])
        info = run_info(args, ce.env)
        info.update({"reps": args.reps, "records": args.records, "commit_mode": args.commit_mode,
                     "wall_s": time.time() - t0})
    finally:
        ce.close()
    texts = []
    if rows:
        texts += [
            print_table(request_table(rows, "warm"), REQ_COLUMNS,
                        title=f"\nRequests per transaction, warm Lake (mean of {args.reps}); "
                              "meta = log + _lakevilla"),
            print_table(request_table(rows, "cold"), REQ_COLUMNS,
                        title="\nRequests of the first transaction of a new Lake")]
    if load is not None:
        texts += load_tables(load, args.loads)
    if latency:
        texts.append(print_table(
            [{"system": r["system"], "median ms": r["median_ms"], "mean ms": r["mean_ms"],
              "p90 ms": r["p90_ms"], "x LV[DL] (median)": r["median_ratio_vs_DL"],
              "x LV[DL] (mean)": r["mean_ratio_vs_DL"], "reads": r["reads"],
              "writes": r["writes"]} for r in latency],
            ["system", "median ms", "mean ms", "p90 ms", "x LV[DL] (median)",
             "x LV[DL] (mean)", "reads", "writes"],
            title=f"\nSingle-writer update transactions, simulated latency {args.latency} "
                  f"({args.updates} transactions)"))
    payload = {"benchmark": "costs", "info": info, "requests": rows, "snapshot_load": load,
               "latency": latency, "table": "\n".join(texts)}
    path = write_json(args.out, "costs", payload)
    payload["files"] = [str(path)]
    if rows:
        payload["files"].append(plot_costs(args.out, rows, [*systems, *(
            ["delta-rs"] if any(r["system"] == "delta-rs" for r in rows) else [])]))
    print("wrote " + ", ".join(payload["files"]))
    return payload


def load_tables(load: dict[str, Any], loads: int) -> list[str]:
    """The cold snapshot load, and the isolated reads of that table (first, then known)."""
    from .common import print_table

    return [
        print_table([{"commits": load["commits"], "last checkpoint": load["last_checkpoint"],
                      "lakevilla ms": load["lakevilla_s"] * 1000, "lakevilla unslowed ms":
                      load["lakevilla_unslowed_s"] * 1000,
                      "delta-rs ms": (load["delta_rs_s"] * 1000 if load["delta_rs_s"] is not None
                                      else "n/a"),
                      "ratio lv/delta-rs": load["ratio_lakevilla_over_delta_rs"] or "n/a",
                      "lakevilla requests": _fmt_counts(load["lakevilla_requests"]),
                      "delta-rs requests": _fmt_counts(load["delta_rs_requests"])}],
                    ["commits", "last checkpoint", "lakevilla ms", "lakevilla unslowed ms",
                     "delta-rs ms", "ratio lv/delta-rs", "lakevilla requests", "delta-rs requests"],
                    title=f"\nCold snapshot load (median of {loads}); ratio under equal "
                          "conditions (both "
                          f"{'slowed' if load['delta_rs_pays_latency'] else 'unslowed'})"),
        print_table([{"read": what, "ms": load[f"isolated_{k}_read_s"] * 1000,
                      "x cold snapshot load": load[f"isolated_{k}_read_s"] / load["lakevilla_s"],
                      "x known read": (load[f"isolated_{k}_read_s"]
                                       / load["isolated_known_read_s"]),
                      "requests": _fmt_counts(load[f"isolated_{k}_read_requests"])}
                     for k, what in (("first", "first, table new to the global log"),
                                     ("known", "table known"))],
                    ["read", "ms", "x cold snapshot load", "x known read", "requests"],
                    title="\nAn isolated transaction of a new Lake reading that table "
                          f"({load['commits']} commits; median of {loads} pairs, the global log "
                          "deleted before each first read)"),
    ]


def _fmt_counts(c: dict[str, int] | None) -> str:
    if c is None:
        return "n/a"
    return " ".join(f"{_short(k)}={v}" for k, v in sorted(c.items()) if v)


if __name__ == "__main__":
    main()
