"""An incremental pipeline beside concurrent writers, with clients killed at random: orders and
their lines into daily revenue, exactly once, against the same pipeline done per table and per
statement.

    python -m benchmarks.incremental [--quick] [--minutes 2] [--store local|s3] [--writers 3]
                                     [--consumers 2] [--kill-every 4]

Writer processes run R,CT transactions on ``orders`` and ``order_lines`` together: a new order
with one to three lines, a changed line amount, or a cancelled order (its row and its lines
deleted). Two ways turn their changes into each day's revenue and order count:

* **exactly once** (``lake.consumer``): ``--consumers`` processes run the same consumer, racing
  each other; each run reads the changes since its stored offset up to a consistent cut, MERGEs
  the deltas into ``daily`` and stores the new offset, in one R,CT transaction;
* **per table, per statement** (what a pipeline does without it): one process reads each
  table's changes since that table's stored version, applies them to ``daily_naive`` and then
  stores the version, each step its own plain Delta commit (features ``""``).

A supervisor SIGKILLs a random writer or consumer every ``--kill-every`` seconds (mean) and
restarts it; a consumer of either way is killed at its worst moment, between writing its outputs
and storing its offset (each says when it is there; ``--no-aim``: at any moment). At the end
every client stops, each way catches up once more, and:

* ``daily`` equals a batch recomputation at the consumer's offset, at the end and at sampled
  past moments (``lake.at``: the output and its offset are read at one consistent cut);
* ``daily_naive`` is compared with the batch recomputation of the whole tables: the revenue and
  orders it counted twice (a kill between applying and storing the offset) or lost.

It reports the writers' and consumers' throughput, the consumer's lag (from a change's commit to
the run that consumed it, median and p95) and the violations, writes ``incremental.json`` and a
plot. Exit status 1 when the exactly-once side shows any violation.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import statistics
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

ORDERS = pa.schema([("order_id", pa.int64()), ("day", pa.string())])
LINES = pa.schema([("order_id", pa.int64()), ("day", pa.string()), ("amount", pa.int64())])
DAILY = pa.schema([("day", pa.string()), ("revenue", pa.int64()), ("orders", pa.int64())])
NAIVE_OFFSETS = pa.schema([("source", pa.string()), ("version", pa.int64())])
DAYS = ["mon", "tue", "wed", "thu", "fri"]
SOURCES = ["orders", "order_lines"]
SIGN = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}
OVERTIME_S = 120.0  # the longest a run goes on past --minutes waiting for a writer's commit
QUICK = {"minutes": 0.14, "writers": 2, "consumers": 2, "kill_every": 2.5, "samples": 3}


def deltas(changes: dict[str, pa.Table]) -> dict[str, list[int]]:
    """Each day's revenue and order count moved by ``changes``."""
    out: dict[str, list[int]] = {}
    for r in changes.get("order_lines", pa.table({})).to_pylist():
        out.setdefault(r["day"], [0, 0])[0] += SIGN[r["_change_type"]] * r["amount"]
    for r in changes.get("orders", pa.table({})).to_pylist():
        out.setdefault(r["day"], [0, 0])[1] += SIGN[r["_change_type"]]
    return {d: v for d, v in out.items() if v != [0, 0]}


def apply(txn: Any, table: str, delta: dict[str, list[int]]) -> None:
    if delta:
        src = pa.table({"day": list(delta), "revenue": [v[0] for v in delta.values()],
                        "orders": [v[1] for v in delta.values()]}, schema=DAILY)
        txn.merge(table, src, on="day").when_matched_update(
            {"revenue": "target.revenue + source.revenue",
             "orders": "target.orders + source.orders"}).when_not_matched_insert_all().execute()


def batch(view: Any) -> dict[str, tuple[int, int]]:
    """Daily revenue and orders recomputed from scratch in ``view`` (a lake or a LakeAt)."""
    out: dict[str, list[int]] = {}
    for r in view.read("order_lines").to_pylist():
        out.setdefault(r["day"], [0, 0])[0] += r["amount"]
    for r in view.read("orders").to_pylist():
        out.setdefault(r["day"], [0, 0])[1] += 1
    return {d: (v[0], v[1]) for d, v in out.items() if v != [0, 0]}


def output(rows: pa.Table) -> dict[str, tuple[int, int]]:
    got: dict[str, tuple[int, int]] = {}
    for r in rows.to_pylist():
        if (r["revenue"], r["orders"]) != (0, 0):
            got[r["day"]] = (r["revenue"], r["orders"])
    return got


def _writers_committed(run_dir: Path) -> int:
    """Transactions the writers report committed so far (each replaces its report whole after
    each transaction, ``_save``, so a read sees the old report or the new one)."""
    return sum(json.loads(f.read_text())["stats"].get("committed", 0)
               for f in run_dir.glob("w*.json"))


def _save(path: Path, payload: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def _lake(cfg: dict) -> Any:
    import lakevilla as lv

    return lv.Lake(cfg["root"], storage_options=cfg["opts"] or None, wait_timeout=60.0)


# -- the processes -------------------------------------------------------------------------------

def writer_main(cfg: dict, wid: int, gen: int) -> None:
    import lakevilla as lv

    lake, rng = _lake(cfg), random.Random(cfg["seed"] * 7919 + wid * 104729 + gen)
    stats: Counter[str] = Counter()
    mine: list[int] = []  # orders this generation placed and has not cancelled
    i = 0
    while not Path(cfg["stop"]).exists():
        i += 1
        roll = rng.random()
        try:
            if roll < 0.6 or not mine:
                oid, day = (wid * 1000 + gen) * 100000 + i, rng.choice(DAYS)
                amounts = [rng.randint(1, 100) for _ in range(rng.randint(1, 3))]
                with lake.transaction("R,CT") as txn:
                    txn.insert("orders", {"order_id": [oid], "day": [day]})
                    txn.insert("order_lines", {"order_id": [oid] * len(amounts),
                                               "day": [day] * len(amounts), "amount": amounts})
                mine.append(oid)
            elif roll < 0.8:
                with lake.transaction("R,CT") as txn:
                    txn.update("order_lines", set={"amount": "amount + 1"},
                               where=f"order_id = {rng.choice(mine)}")
            else:
                oid = mine.pop(rng.randrange(len(mine)))
                with lake.transaction("R,CT") as txn:
                    txn.delete("orders", where=f"order_id = {oid}")
                    txn.delete("order_lines", where=f"order_id = {oid}")
            stats["committed"] += 1
        except lv.TransactionAborted:
            stats["aborted"] += 1
        except lv.CommitPendingError:
            stats["pending"] += 1
        except lv.LakeVillaError:
            stats["errors"] += 1
        _save(Path(cfg["run"]) / f"w{wid}-{gen}.json", {"stats": stats})
    os._exit(0)


def consumer_main(cfg: dict, cid: int, gen: int) -> None:
    import lakevilla as lv

    lake = _lake(cfg)
    feed = lake.consumer("revenue", SOURCES)
    stats: Counter[str] = Counter()
    lags: list[float] = []
    errors: list[str] = []

    window = Path(cfg["run"]) / f"window-c{cid}"

    def step(txn: Any, changes: dict[str, pa.Table]) -> list[float]:
        apply(txn, "daily", deltas(changes))
        window.touch()  # outputs written, offset not stored yet: where a kill is aimed
        return [t.timestamp() for c in changes.values()
                for t in c.column("_commit_timestamp").to_pylist()]

    while not Path(cfg["stop"]).exists():
        try:
            done = feed.run(step, retries=20)
            window.unlink(missing_ok=True)
            stats["runs"] += 1
            stats["changes"] += sum(done.rows.values())
            if done.value:
                lags.append(time.time() - min(done.value))
        except (lv.TransactionAborted, lv.CommitPendingError):
            stats["aborted"] += 1
        except lv.LakeVillaError as e:
            stats["errors"] += 1
            errors.append(f"{type(e).__name__}: {e}"[:300])
        _save(Path(cfg["run"]) / f"c{cid}-{gen}.json",
              {"stats": stats, "lags": lags[-2000:], "errors": errors[-20:]})
    os._exit(0)


def naive_step(lake: Any, window: Path | None = None) -> int:
    """Per table, per statement: each step commits alone (what a kill can split)."""
    seen = 0
    offsets = {r["source"]: r["version"] for r in lake.read("naive_offsets").to_pylist()}
    for t in SOURCES:
        since, until = offsets.get(t, -1), lake.version(t)
        if until == since:
            continue
        got = lake.changes(t, since=None if since < 0 else {t: since}, until={t: until})
        seen += got[t].num_rows
        with lake.transaction("") as txn:
            apply(txn, "daily_naive", deltas(got))
        if window is not None:
            window.touch()  # outputs committed, offset not stored yet: where a kill is aimed
        with lake.transaction("") as txn:
            txn.merge("naive_offsets", pa.table({"source": [t], "version": [until]},
                                                schema=NAIVE_OFFSETS), on="source") \
                .when_matched_update_all().when_not_matched_insert_all().execute()
        if window is not None:
            window.unlink(missing_ok=True)
    return seen


def naive_main(cfg: dict, gen: int) -> None:
    import lakevilla as lv

    lake = _lake(cfg)
    stats: Counter[str] = Counter()
    while not Path(cfg["stop"]).exists():
        try:
            stats["changes"] += naive_step(lake, Path(cfg["run"]) / "window-n")
            stats["runs"] += 1
        except lv.LakeVillaError:
            stats["failed"] += 1
        _save(Path(cfg["run"]) / f"n-{gen}.json", {"stats": stats})
    os._exit(0)


# -- the supervisor --------------------------------------------------------------------------------

def _setup(lake: Any) -> None:
    lake.create_table("orders", ORDERS)
    lake.create_table("order_lines", LINES)
    lake.create_table("daily", DAILY)
    lake.create_table("daily_naive", DAILY)
    lake.create_table("naive_offsets", NAIVE_OFFSETS)


def _check(lake: Any, samples: int, started: float) -> tuple[Counter[str], dict[str, Any]]:
    """After the end and a last catch-up of both ways: the violations and the naive way's
    duplicates and losses."""
    import datetime as dt

    v: Counter[str] = Counter()
    feed = lake.consumer("revenue", SOURCES)
    offset = feed.offset()
    assert offset is not None
    v["exact_output_differs_at_offset"] += int(output(lake.read("daily"))
                                              != batch(lake.at(offset)))
    # past moments: the output and the offset it stored, read at one consistent cut
    now = time.time()
    checked = 0
    for k in range(samples):
        moment = dt.datetime.fromtimestamp(started + (now - started) * (k + 1) / (samples + 1),
                                           dt.UTC)
        view = lake.at(moment)
        rows = view.read("lakevilla_offsets").to_pylist() if "lakevilla_offsets" in \
            view.tables() else []
        if not rows:
            continue
        checked += 1
        past = {t: int(x) for t, x in json.loads(rows[0]["cut"]).items()}
        v["exact_output_differs_at_a_past_moment"] += int(output(view.read("daily"))
                                                         != batch(lake.at(past)))
    naive, truth = output(lake.read("daily_naive")), batch(lake)
    over = under = 0
    for day in set(naive) | set(truth):
        got, want = naive.get(day, (0, 0)), truth.get(day, (0, 0))
        for g, w in zip(got, want, strict=True):
            over, under = over + max(0, g - w), under + max(0, w - g)
    info = {"moments_checked": checked, "naive_counted_twice": over, "naive_lost": under,
            "truth_revenue": sum(x[0] for x in truth.values()),
            "truth_orders": sum(x[1] for x in truth.values())}
    return v, info


def run(args: argparse.Namespace) -> dict[str, Any]:
    import lakevilla as lv
    from benchmarks.common import plot, print_table, start_moto_process, write_json

    tmp = Path(tempfile.mkdtemp(prefix="lakevilla-incremental-"))
    stop_moto = None
    if args.store == "local":
        root, opts = "file://" + str(tmp / "lake"), {}
    else:
        import boto3

        endpoint, stop_moto = start_moto_process()
        opts = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
                "AWS_ALLOW_HTTP": "true"}
        bucket = f"lv-incr-{uuid.uuid4().hex[:10]}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                     aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket=bucket)
        root = f"s3://{bucket}/incr"
    run_dir = tmp / "run"
    run_dir.mkdir()
    cfg = {"root": root, "opts": opts, "run": str(run_dir), "stop": str(run_dir / "stop"),
           "seed": args.seed}
    ctx = mp.get_context("spawn")
    rng = random.Random(args.seed)
    kills: Counter[str] = Counter()
    in_window: Counter[str] = Counter()
    exited: list[dict[str, Any]] = []
    try:
        lake = lv.Lake(root, storage_options=opts or None)
        _setup(lake)
        started = time.time()
        gens: Counter[str] = Counter()
        procs: dict[str, Any] = {}

        def spawn(name: str) -> None:
            gen = gens[name]
            gens[name] += 1
            target, a = ((writer_main, (cfg, int(name[1:]), gen)) if name[0] == "w"
                         else (consumer_main, (cfg, int(name[1:]), gen)) if name[0] == "c"
                         else (naive_main, (cfg, gen)))
            procs[name] = ctx.Process(target=target, args=a, daemon=True)
            procs[name].start()

        for name in ([f"w{k}" for k in range(args.writers)]
                     + [f"c{k}" for k in range(args.consumers)] + ["n"]):
            spawn(name)
        end = started + args.minutes * 60
        next_kill = time.time() + rng.uniform(0.5, 1.5) * args.kill_every
        # past --minutes the run goes on (up to OVERTIME_S) until some writer has committed: on a
        # loaded machine a short run's spawned writers may not get past their imports and kills
        while time.time() < end or (not _writers_committed(run_dir)
                                    and time.time() < end + OVERTIME_S):
            time.sleep(0.1)  # the supervisor's polling interval
            for name, p in list(procs.items()):
                if not p.is_alive():  # ended on its own: reported, restarted
                    exited.append({"process": name, "exitcode": p.exitcode})
                    spawn(name)
            if args.kill_every > 0 and time.time() >= next_kill:
                # a writer, a consumer of the exactly-once way or the per-table process,
                # a third each: both ways' consumers are killed as often
                kind = rng.choice("wcn")
                victim = rng.choice(sorted(n for n in procs if n[0] == kind))
                if victim[0] != "w" and args.aim:
                    # a consumer of either way is killed between writing its outputs and
                    # storing its offset, when it says it is there (within 5 s)
                    window, until = run_dir / f"window-{victim}", time.time() + 5
                    while not window.exists() and time.time() < until:
                        time.sleep(0.005)  # polling the consumer's announcement
                    in_window[victim[0]] += int(window.exists())
                os.kill(procs[victim].pid, signal.SIGKILL)
                (run_dir / f"window-{victim}").unlink(missing_ok=True)
                procs[victim].join(10)
                kills[{"w": "writer", "c": "consumer", "n": "per-table"}[victim[0]]] += 1
                spawn(victim)
                next_kill = time.time() + rng.uniform(0.5, 1.5) * args.kill_every
        ran = time.time() - started
        Path(cfg["stop"]).touch()
        for p in procs.values():
            p.join(120)
            if p.is_alive():
                p.kill()
        lake.recover()
        lake.consumer("revenue", SOURCES).run(
            lambda txn, ch: apply(txn, "daily", deltas(ch)), retries=20)
        naive_step(lake)
        violations, info = _check(lake, args.samples, started)
        violations["process_exited"] = len(exited)
        stats: dict[str, Counter[str]] = {"w": Counter(), "c": Counter(), "n": Counter()}
        lags: list[float] = []
        errs: list[str] = []
        for f in run_dir.glob("*.json"):
            d = json.loads(f.read_text())
            stats[f.name[0]].update(d["stats"])
            lags += d.get("lags", [])
            errs += d.get("errors", [])
        lag_ms = (statistics.median(lags) * 1000, sorted(lags)[int(0.95 * (len(lags) - 1))] * 1000
                  ) if lags else (None, None)
        payload = {
            "benchmark": "incremental",
            "info": {"store": args.store, "minutes": args.minutes, "writers": args.writers,
                     "consumers": args.consumers, "kill_every": args.kill_every,
                     "seed": args.seed, "quick": bool(args.quick), "ran_s": round(ran, 1),
                     "time": time.strftime("%Y-%m-%dT%H:%M:%S")},
            "writers": dict(stats["w"]), "consumer": dict(stats["c"]),
            "per_table": dict(stats["n"]), "kills": dict(kills),
            "kills_between_outputs_and_offset": {"exactly once": in_window["c"],
                                                 "per table": in_window["n"]},
            "writer_txn_per_s": stats["w"]["committed"] / ran,
            "consumer_runs_per_s": stats["c"]["runs"] / ran,
            "changes_per_s": stats["c"]["changes"] / ran,
            "lag_ms_median": lag_ms[0], "lag_ms_p95": lag_ms[1],
            "violations": {k: int(violations[k]) for k in sorted(
                set(violations) | {"exact_output_differs_at_offset",
                                   "exact_output_differs_at_a_past_moment", "process_exited"})},
            "exited": exited[:20], "consumer_errors": errs[:20],
            "checks": info,
        }
        rows = [
            {"what": "writer transactions committed / aborted (per s)",
             "exactly once": f"{stats['w']['committed']} / {stats['w']['aborted']} "
                             f"({payload['writer_txn_per_s']:.1f}/s)", "per table": ""},
            {"what": "consumer runs (change rows consumed)",
             "exactly once": f"{stats['c']['runs']} ({stats['c']['changes']})",
             "per table": f"{stats['n']['runs']} ({stats['n']['changes']})"},
            {"what": "lag, commit to consumed: median / p95 ms",
             "exactly once": f"{lag_ms[0]:.0f} / {lag_ms[1]:.0f}" if lags else "-",
             "per table": "-"},
            {"what": "kills (writers / consumers / per-table)",
             "exactly once": f"{kills['writer']} / {kills['consumer']} / {kills['per-table']}",
             "per table": ""},
            {"what": "consumer kills between outputs and offset",
             "exactly once": str(in_window["c"]), "per table": str(in_window["n"])},
            {"what": "output differs from the batch recomputation at its offset",
             "exactly once": f"{violations['exact_output_differs_at_offset']} (end), "
                             f"{violations['exact_output_differs_at_a_past_moment']} of "
                             f"{info['moments_checked']} past moments",
             "per table": ""},
            {"what": "revenue + orders counted twice / lost (of the truth)",
             "exactly once": "0 / 0" if not sum(violations.values()) else "see violations",
             "per table": f"{info['naive_counted_twice']} / {info['naive_lost']} (of "
                          f"{info['truth_revenue'] + info['truth_orders']})"},
        ]
        print_table(rows, ["what", "exactly once", "per table"],
                    title=f"incremental pipeline on {args.store}, {args.minutes:g} min")
        write_json(args.out, "incremental", payload)

        def draw(fig):
            ax = fig.add_subplot(1, 1, 1)
            ax.bar(["exactly once", "per table"], [0, info["naive_counted_twice"]],
                   label="counted twice")
            ax.bar(["exactly once", "per table"], [0, info["naive_lost"]],
                   bottom=[0, info["naive_counted_twice"]], label="lost")
            ax.set_title(f"{sum(kills.values())} kills; exactly-once violations: "
                         f"{sum(violations.values())}")
            ax.legend()

        plot(args.out, "incremental", draw)
        return payload
    finally:
        if stop_moto is not None:
            stop_moto()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from benchmarks.common import parse_with_quick

    p = argparse.ArgumentParser(prog="python -m benchmarks.incremental",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="about half a minute, for the suite")
    p.add_argument("--minutes", type=float, default=2.0)
    p.add_argument("--store", choices=["local", "s3"], default="local")
    p.add_argument("--writers", type=int, default=3)
    p.add_argument("--consumers", type=int, default=2)
    p.add_argument("--kill-every", type=float, default=4.0,
                   help="mean seconds between SIGKILLs (0: none)")
    p.add_argument("--samples", type=int, default=10, help="past moments checked at the end")
    p.add_argument("--no-aim", dest="aim", action="store_false",
                   help="kill consumers at any moment, not between outputs and offset")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="results/incremental")
    args = parse_with_quick(p, argv, QUICK)
    return run(args)


if __name__ == "__main__":
    out = main()
    raise SystemExit(1 if sum(out["violations"].values()) else 0)
