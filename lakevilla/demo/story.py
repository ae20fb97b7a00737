"""``make demo``: a small bank on a local Delta lake, under concurrency and failures.

Two account tables (two banks) and a ledger. Clients transfer money between the
banks concurrently; some transfers fail half-way, one client crashes mid-commit;
auditors sum both banks while transfers run. Each act runs with different
lakevilla features and checks, with lakevilla and with delta-rs, whether money
was conserved.
"""

from __future__ import annotations

import argparse
import functools
import random
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

import lakevilla as lv
from lakevilla.store import FaultInjectingStore, FaultPlan, SimulatedCrash, open_store

from .voice import say, thread

ACCOUNTS = pa.schema([("id", pa.int64()), ("owner", pa.string()), ("balance", pa.int64())])
LEDGER = pa.schema([("transfer", pa.string()), ("bank", pa.string()), ("account", pa.int64()),
                    ("amount", pa.int64())])
BANKS = ("bank_eu", "bank_us")
N_ACCOUNTS = 8
START = 1_000


class AppFailure(Exception):
    """The application gives up half-way through a transfer (a bug, a timeout...)."""


COMMITTED, HALF, ABORTED = "committed", "failed half-way", "aborted"


def outcome_of(fn: Callable[[], None], features: str) -> tuple[str, str]:
    """How one transfer ended: committed, failed half-way or aborted, and why."""
    try:
        fn()
        return COMMITTED, ""
    except AppFailure:
        # plain Delta: the withdrawal committed on its own; with R,CT the block rolled back
        return HALF, "gave up after the withdrawal" + ("" if features == "" else ", rolled back")
    except lv.PartialCommitError:  # plain Delta: a conflict after the withdrawal had committed
        return HALF, "lost a conflict after the withdrawal"
    except lv.TransactionAborted as e:
        return ABORTED, f"aborted ({e.reason}), nothing visible"
    except lv.CommitPendingError:
        return ABORTED, "outcome left to recovery"
    except lv.LakeVillaError as e:
        return ABORTED, type(e).__name__


def setup(root: str) -> None:
    # every Lake the demo opens is closed before it goes on: a client's background work (a
    # checkpoint, batched deletes) must not still run in native code when the process exits
    with lv.Lake(root) as lake:
        for bank in BANKS:
            lake.create_table(bank, ACCOUNTS)
            with lake.transaction("") as txn:
                txn.insert(bank,
                           {"id": list(range(N_ACCOUNTS)),
                            "owner": [f"{bank}-{i}" for i in range(N_ACCOUNTS)],
                            "balance": [START] * N_ACCOUNTS})
        lake.create_table("ledger", LEDGER)


def total(reader) -> int:
    return sum(sum(reader.read(b, columns=["balance"]).column("balance").to_pylist())
               for b in BANKS)


def transfer(txn: lv.Transaction, tid: str, rng: random.Random, fail: bool) -> None:
    src, dst = rng.sample(BANKS, 2)
    a, b = rng.randrange(N_ACCOUNTS), rng.randrange(N_ACCOUNTS)
    amount = rng.randint(1, 50)
    txn.update(src, set={"balance": f"balance - {amount}"}, where=f"id = {a}")
    if fail:
        raise AppFailure(f"{tid} gave up after the withdrawal")
    txn.update(dst, set={"balance": f"balance + {amount}"}, where=f"id = {b}")
    txn.insert("ledger", {"transfer": [tid, tid], "bank": [src, dst], "account": [a, b],
                          "amount": [-amount, amount]})


def run_clients(root: str, features: str, clients: int, per_client: int,
                fail_every: int) -> tuple[Counter, Counter]:
    """Every transfer the clients start, counted by outcome (committed, failed half-way,
    aborted) and by why; the outcomes add up to clients x per_client."""
    stats: Counter = Counter()
    why: Counter = Counter()
    lock = threading.Lock()

    def client(c: int) -> None:
        lake = lv.Lake(root)
        try:
            for i in range(per_client):
                tid = f"c{c}-t{i}"
                fail = fail_every > 0 and i % fail_every == fail_every - 1

                def one(tid: str = tid, fail: bool = fail) -> None:
                    lake.run(lambda txn: transfer(txn, tid, random.Random(hash(tid)), fail),
                             features=features, retries=10)

                outcome, reason = outcome_of(one, features)
                with lock:
                    stats[outcome] += 1
                    why[reason] += 1 if reason else 0
        finally:
            lake.close()

    errors: list[str] = []
    threads = [thread(functools.partial(client, c), errors) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        say(f"   a client stopped: {e}")
    return stats, why


def outcomes_line(stats: Counter, why: Counter, started: int) -> str:
    counted = sum(stats.values())
    parts = ", ".join(f"{stats[k]} {k}" for k in (COMMITTED, HALF, ABORTED))
    reasons = "; ".join(f"{n} {r}" for r, n in sorted(why.items()) if n)
    check = "" if counted == started else f" -- {started - counted} NOT COUNTED"
    return f"{started} transfers started: {parts}" + (f" ({reasons})" if reasons else "") + check


def check(root: str, label: str, expected: int) -> bool:
    from deltalake import DeltaTable

    with lv.Lake(root) as lake:
        ours = total(lake)
    theirs = sum(sum(pa.table(DeltaTable(f"{root}/{b}").to_pyarrow_table()).column("balance")
                     .to_pylist()) for b in BANKS)
    ok = ours == theirs == expected
    verdict = ("money conserved" if ok
               else f"MONEY {'CREATED' if ours > expected else 'LOST'}: {ours - expected:+d}")
    say(f"   {label}: total = {ours} (delta-rs reads {theirs}), expected {expected} -> {verdict}")
    return ok


def act_transfers(base: Path, features: str, title: str, clients: int, per_client: int) -> bool:
    root = f"file://{base / ('act-' + (features or 'DL').replace(',', ''))}"
    setup(root)
    say(f"\n== {title}")
    say(f"   {clients} clients x {per_client} transfers, features={features or chr(39) * 2}, "
        f"every 4th transfer fails after its withdrawal")
    t0 = time.time()
    stats, why = run_clients(root, features, clients, per_client, fail_every=4)
    say(f"   {outcomes_line(stats, why, clients * per_client)} in {time.time() - t0:.1f}s")
    return check(root, "after the run", 2 * N_ACCOUNTS * START)


def act_auditors(base: Path) -> tuple[int, int, int]:
    root = f"file://{base / 'act-audit'}"
    setup(root)
    say("\n== Auditors sum both banks while transfers run (writers use R,CT,I)")
    stop = threading.Event()
    wrong: Counter[str] = Counter()
    audits: Counter[str] = Counter()

    def auditor(features: str) -> None:
        lake = lv.Lake(root)
        try:
            while not stop.is_set():
                s = lake.run(total, features=features, retries=50)
                audits[features] += 1
                if s != 2 * N_ACCOUNTS * START:
                    wrong[features] += 1
        finally:
            lake.close()

    errors: list[str] = []
    threads = [thread(functools.partial(auditor, f), errors) for f in ("I", "R")]
    for t in threads:
        t.start()
    stats, why = run_clients(root, "R,CT,I", clients=3, per_client=15, fail_every=0)
    stop.set()
    for t in threads:
        t.join()
    say(f"   writers: {outcomes_line(stats, why, 3 * 15)}")
    for e in errors:
        say(f"   an auditor stopped: {e}")
    say(f"   isolated auditors (I):  {audits['I']} audits, {wrong['I']} saw a wrong total")
    say(f"   plain auditors (R):     {audits['R']} audits, {wrong['R']} saw a wrong total "
        "(they read the two banks at different moments)")
    check(root, "after the run", 2 * N_ACCOUNTS * START)
    return wrong["I"], wrong["R"], len(errors)


def _first_accounts(lake: lv.Lake) -> str:
    """Account 0 of each bank, as the crash act prints it."""
    return ", ".join(f"{b.removeprefix('bank_')}[0] = "
                     f"{lake.read(b, where='id = 0').column('balance')[0].as_py()}"
                     for b in ("bank_eu", "bank_us"))


def act_crash(base: Path) -> bool:
    root = f"file://{base / 'act-crash'}"
    setup(root)
    say("\n== A client crashes in the middle of a two-bank commit (R,CT)")
    plan = FaultPlan(crash_after=1, kinds=("put_if_absent",),
                     # right after deciding
                     predicate=lambda kind, key: key.startswith("_lakevilla/txns/"))
    with lv.Lake(root, store=FaultInjectingStore(open_store(root), plan),
                 marker_ttl=2.0) as dying:
        txn = dying.begin("R,CT")
        txn.update("bank_eu", set={"balance": "balance - 500"}, where="id = 0")
        txn.update("bank_us", set={"balance": "balance + 500"}, where="id = 0")
        try:
            txn.commit()
        except SimulatedCrash:
            say("   the client died right after its commit decision, before writing "
                "either table commit")
    with lv.Lake(root) as plain:
        say(f"   right after the crash: {_first_accounts(plain)}")
        with lv.Lake(root, marker_ttl=2.0, clock=lambda: time.time() + 60) as recovering:
            report = recovering.recover()
        say(f"   another client runs lake.recover(): {report}")
        say(f"   after recovery: {_first_accounts(plain)}")
    return check(root, "after recovery", 2 * N_ACCOUNTS * START)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lake", default="demo-lake", help="folder for the demo lake (recreated)")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--transfers", type=int, default=12, help="per client")
    p.add_argument("--no-spark", dest="spark", action="store_false",
                   help="skip the PySpark pipeline act")
    args = p.parse_args(argv)
    base = Path(args.lake).resolve()
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    say(f"lakevilla demo: a bank on plain Delta tables under {base}")
    results = {
        "plain Delta (LV[DL])": act_transfers(base, "",
                                              "Plain Delta: every statement commits on its own",
                                              args.clients, args.transfers),
        "LV[R,CT]": act_transfers(base, "R,CT",
                                  "lakevilla R,CT: each transfer is one multi-table transaction",
                                  args.clients, args.transfers),
    }
    wrong_i, _wrong_r, stopped = act_auditors(base)
    results["isolated audits"] = wrong_i == 0 and stopped == 0
    results["crash + recovery"] = act_crash(base)
    if args.spark:
        from .spark import act_spark

        results["Spark pipeline"] = act_spark(base)
    say("\n== Summary")
    for k, ok in results.items():
        say(f"   {k:24} {'ok' if ok else 'BROKEN'}")
    expected_broken = {"plain Delta (LV[DL])"}
    bad = [k for k, ok in results.items() if not ok and k not in expected_broken]
    if results["plain Delta (LV[DL])"]:
        say("   (plain Delta happened to conserve money this time; its failures lose money when a "
            "transfer fails between its two statements)")
    say("   lakevilla guarantees held." if not bad else f"   UNEXPECTED: {bad}")
    return 1 if bad else 0
