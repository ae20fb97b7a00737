"""Summaries, ratios, the printed table and the plots."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..common import SYSTEMS


def summarize(system: str, workload: str, n_clients: int, mode: str, clients: list[dict[str, Any]],
              proxy_counts: dict[str, int] | None, concurrency: str) -> dict[str, Any]:
    from ..common import finite_or_none, percentile

    done = Counter()
    failed = Counter()
    stats = Counter()
    lat: dict[str, list[float]] = {}
    reqs = Counter()
    areas = Counter()
    reasons = Counter()
    errors: list[str] = []
    for c in clients:
        done.update(c["done"])
        failed.update(c["failed"])
        stats.update(c["stats"])
        reqs.update(c["requests"])
        areas.update(c.get("requests_by_area") or {})
        reasons.update(c["abort_reasons"])
        errors.extend(c["errors"])
        for k, v in c["latency"].items():
            lat.setdefault(k, []).extend(v)
    starts = [c["start"] for c in clients if c["start"]]
    ends = [c["end"] for c in clients if c["end"]]
    elapsed = (max(ends) - min(starts)) if starts and ends else float("nan")
    committed = sum(done.values())
    is_lv = SYSTEMS[system] is not None
    own = dict(reqs) if is_lv else (dict(proxy_counts) if proxy_counts is not None else None)
    total_req = sum(own.values()) if own is not None else None
    return {
        "system": system, "workload": workload, "clients": n_clients, "mode": mode,
        "concurrency": concurrency, "ops_planned": sum(done.values()) + sum(failed.values()),
        "ops_committed": committed, "ops_failed": sum(failed.values()),
        "elapsed_s": finite_or_none(elapsed),
        "throughput": finite_or_none(committed
                                     / elapsed) if elapsed and elapsed == elapsed else None,
        "latency_ms": {k: {"n": len(v), "p50": percentile(v, 50) * 1000,
                           "p99": percentile(v, 99) * 1000}
                       for k, v in sorted(lat.items())},
        "aborts": sum(c["aborts"] for c in clients), "abort_reasons": dict(reasons),
        "redos": stats.get("redos", 0), "stats": dict(stats),
        "requests": own,
        "requests_source": ("store" if is_lv else "proxy") if own is not None else "n/a",
        "requests_per_op": (total_req / committed) if total_req is not None and committed else None,
        "proxy_requests": proxy_counts,
        "requests_by_area": dict(sorted(areas.items())) if is_lv else None, "errors": errors[:10],
        "error_count": len(errors), "reads_found": sum(c["reads_found"] for c in clients),
        "reads_missing": sum(c["reads_missing"] for c in clients),
    }


def add_ratios(rows: list[dict[str, Any]]) -> None:
    by = {(r["workload"], r["clients"], r["mode"], r["system"]): r for r in rows}
    for r in rows:
        for ref, name in (("delta-rs", "vs_delta_rs"), ("LV[DL]", "vs_LV_DL")):
            other = by.get((r["workload"], r["clients"], r["mode"], ref))
            ok = other and other.get("throughput") and r.get("throughput") is not None
            r[name] = (r["throughput"] / other["throughput"]) if ok else None


def _lat(r: dict[str, Any], kinds: Sequence[str], q: str) -> float | str:
    for k in kinds:
        if k in r["latency_ms"]:
            return r["latency_ms"][k][q]
    return ""


def table_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        chk = r.get("check") or {}
        out.append({
            "wl": r["workload"], "clients": r["clients"], "mode": r["mode"], "system": r["system"],
            "ops/s": r["throughput"] if r["throughput"] is not None else "n/a",
            "x delta-rs": r["vs_delta_rs"] if r["vs_delta_rs"] is not None else "",
            "x LV[DL]": r["vs_LV_DL"] if r["vs_LV_DL"] is not None else "",
            "aborts": r["aborts"], "failed": r["ops_failed"], "redos": r["redos"],
            "read p50/p99": _pair(_lat(r, ("read", "scan"), "p50"),
                                  _lat(r, ("read", "scan"), "p99")),
            "write p50/p99": _pair(_lat(r, ("update", "rmw", "insert"), "p50"),
                                   _lat(r, ("update", "rmw", "insert"), "p99")),
            "commit p50": _lat(r, ("commit",), "p50"),
            "req/op": r["requests_per_op"] if r["requests_per_op"] is not None else "n/a",
            "lost upd": chk.get("lost_updates", ""),
            "check": "ok" if chk.get("ok") else ("FAIL: " + ",".join(chk.get("violations", []))),
            "errors": r["error_count"] or (r.get("failure") and "RUN FAILED") or "",
        })
    return out


def _pair(a: Any, b: Any) -> str:
    if a == "" or b == "":
        return ""
    return f"{a:.0f}/{b:.0f} ms"


COLUMNS = ["wl", "clients", "mode", "system", "ops/s", "x delta-rs", "x LV[DL]", "aborts", "failed",
           "redos", "read p50/p99", "write p50/p99", "commit p50", "req/op", "lost upd", "check",
           "errors"]


def plot_results(out_dir: str, rows: list[dict[str, Any]], systems: list[str]) -> list[str]:
    from ..common import plot

    combos = sorted({(r["clients"], r["mode"]) for r in rows})
    workloads = sorted({r["workload"] for r in rows})
    by = {(r["workload"], r["clients"], r["mode"], r["system"]): r for r in rows}

    def draw_tp(fig: Any) -> None:
        n = len(combos)
        for i, (c, m) in enumerate(combos):
            ax = fig.add_subplot(1, n, i + 1)
            width = 0.8 / max(len(systems), 1)
            for j, s in enumerate(systems):
                ys = [(by.get((w, c, m, s)) or {}).get("throughput") or 0 for w in workloads]
                ax.bar([x + j * width for x in range(len(workloads))], ys, width, label=s)
            ax.set_xticks([x + 0.4 - width / 2 for x in range(len(workloads))], workloads)
            ax.set_title(f"{c} clients, txn per {m}", fontsize=9)
            ax.set_ylabel("ops/s" if i == 0 else "")
        fig.axes[0].legend(fontsize=7)

    def draw_lat(fig: Any) -> None:
        c = max(r["clients"] for r in rows)
        modes = sorted({r["mode"] for r in rows})
        for i, m in enumerate(modes):
            ax = fig.add_subplot(len(modes), 1, i + 1)
            labels = [(w, k) for w in workloads
                      for k in ("read", "scan", "update", "insert", "rmw", "commit")
                      if any(k in (by.get((w, c, m, s)) or {}).get("latency_ms", {})
                             for s in systems)]
            width = 0.8 / max(len(systems), 1)
            for j, s in enumerate(systems):
                xs = [x + j * width for x in range(len(labels))]
                p50 = [_q(by.get((w, c, m, s)), k, "p50") for w, k in labels]
                p99 = [_q(by.get((w, c, m, s)), k, "p99") for w, k in labels]
                ax.bar(xs, p50, width, label=s)
                ax.scatter(xs, p99, marker="_", color="black", s=30)
            ax.set_xticks([x + 0.4 - width / 2 for x in range(len(labels))],
                          [f"{w}:{k}" for w, k in labels], fontsize=7, rotation=45)
            if any(p.get_height() > 0 for p in ax.patches):
                ax.set_yscale("log")
            ax.set_ylabel("ms (bar p50, tick p99)", fontsize=8)
            ax.set_title(f"{c} clients, transaction per {m}", fontsize=9)
        fig.axes[0].legend(fontsize=7, ncol=3)

    paths = [plot(out_dir, "throughput", draw_tp), plot(out_dir, "latency", draw_lat)]
    return [str(p) for p in paths]


def _q(run: dict[str, Any] | None, kind: str, q: str) -> float:
    return ((run or {}).get("latency_ms", {}).get(kind) or {}).get(q, 0.0)


def _title(info: dict[str, Any]) -> str:
    lat = info["latency"]
    slowed = ("delta-rs pays it too" if info["delta_rs_pays_latency"]
              else "lakevilla only: delta-rs runs unslowed")
    reqs = ("delta-rs does not run on GCS here (no emulator serves it); it judges each run from "
            "a local copy") if info["store"] == "gcs" else (
        "delta-rs requests counted at the proxy" if info["delta_rs_requests_observable"] else
        "delta-rs requests not observable on the local store (n/a)")
    return (f"YCSB: {info['records']} records, {info['ops_per_run']} ops/run, "
            f"store={info['store']}, latency={lat} "
            f"({slowed if lat != 'none' else 'none simulated'}); {reqs}; "
            f"commit_mode={info['commit_mode']}, keys={info.get('distribution', 'workload')}")
