"""Chaos: a bank with a ledger over several tables, under kills, store faults and maintenance.

    python -m benchmarks.chaos [--quick] [--minutes M] [--store local|s3|azure|gcs]
    [--features R+CT,R+CT+I,I,R,DL]

Worker processes move money between accounts, each with one feature set (``+`` joins
features, ``DL`` is plain Delta), and draw the kind of each transaction: a transfer with a
ledger INSERT, an upsert (a batch of transfers whose ledger entries are MERGEd by transfer
id, and sometimes sent again), or a rebuild of a derived table from the ledger with
``overwrite(where=...)`` (``chaos_kinds.py``). CT and I transfers span two bank tables and
the ledger; R transfers stay in one bank table (R is atomic per table) and log to the ledger; DL
transfers are one conserving UPDATE, then a ledger insert. DL workers use a bank table of
their own: a client that ignores markers and rewrites a file that a decided CT/I
transaction also rewrites, before that transaction's table commit lands, conflicts with
it for good (README, "Clients that ignore markers"); when the owner is killed right after
its decision that window lasts until recovery. ``--dl-shared`` lets DL workers into the
shared banks to show exactly that (duplicated accounts, a total not conserved). Every worker's store
injects faults at random: transient errors, writes applied and then reported failed, writes
applied after which the key stays unreachable beyond the client's retries, and latency
spikes. A supervisor SIGKILLs random workers (and now and then the maintenance process)
and restarts them; after ``--minutes`` the run goes on without kills until every kind of
worker has committed and every reader has read (for at most as long again). A process
that exits on its own, or that has not stopped well after the end (its stacks are printed
first), is a violation. Maintenance runs ``cleanup`` and ``delete_abandoned_files`` with a short
forced retention (the workers' ``max_transaction_age`` is shorter still, which is what
makes it safe), ``checkpoint``, ``optimize`` of every table and ``recover`` throughout, and
adds a column to ``bank_0`` half-way through. Isolated readers (I) check the total of all
accounts continuously, and so do views of a random recent moment (``lake.at``); a consumer
process folds the ledger's changes into per-bank sums exactly once (``lake.consumer``).

At the end, after ``recover``: the total is conserved; every acknowledged transfer is in
the ledger exactly once; no transfer id appears twice; every version of every table
loads in delta-rs and names only existing files; lakevilla and delta-rs read the same
rows; nothing is left stalled; the derived table equals a recomputation from the ledger at
every version checked; no compaction changed a table's rows; the column added stays; the
consumer's sums equal a recomputation from the ledger at its offset. It
prints and writes ``chaos.json`` (and a plot): transactions committed by feature set and
kind, kills, faults injected by kind, maintenance runs, violations by kind. Every violation
count must be 0; the exit status says whether they are.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks import chaos_kinds as kinds

BANK = pa.schema([("id", pa.int64()), ("balance", pa.int64())])
LEDGER = pa.schema([("transfer", pa.string()), ("worker", pa.int64()), ("features", pa.string()),
                    ("src", pa.string()), ("dst", pa.string()), ("amount", pa.int64())])
INITIAL = 1000
DEFAULT_FEATURES = "R+CT,R+CT+I,I,R,DL"
QUICK = {"minutes": 0.35, "banks": 3, "accounts": 8, "kill_every": 5.0, "retention": 6.0,
         "max_age": 5.0, "marker_ttl": 1.0}


# -- the store's faults ------------------------------------------------------------------------

def _chaos_store_class():
    from lakevilla.store import NotFound, PreconditionFailed, StoreWrapper, TransientStoreError

    class ChaosStore(StoreWrapper):
        """Random faults by kind, counted. ``unreachable`` keys fail every request until a
        deadline that outlasts the client's retries (and the read-back that settles them)."""

        def __init__(self, inner, seed: int, rates: dict[str, float],
                     unreachable_for: float) -> None:
            super().__init__(inner)
            self.rng = random.Random(seed)
            self.rates = rates
            self.unreachable_for = unreachable_for
            self.unreachable: dict[str, float] = {}
            self.counts: Counter[str] = Counter()

        def _roll(self, kind: str) -> bool:
            return self.rng.random() < self.rates.get(kind, 0.0)

        def _around(self, kind: str, key: str, fn):
            until = self.unreachable.get(key)
            if until is not None:
                if time.monotonic() < until:
                    raise TransientStoreError(f"chaos: {key} unreachable")
                self.unreachable.pop(key, None)
            if self._roll("latency_spike"):
                self.counts["latency_spike"] += 1
                time.sleep(self.rng.uniform(0.2, 1.0))  # the simulated spike itself
            if self._roll("transient"):
                self.counts["transient"] += 1
                raise TransientStoreError(f"chaos: transient error on {kind} {key}")
            write = kind not in ("get", "head", "list")
            try:
                result = fn()
            except (NotFound, PreconditionFailed):
                self._after(write, key)
                raise
            self._after(write, key)
            return result

        def _after(self, write: bool, key: str) -> None:
            if not write:
                return
            if self._roll("applied_then_failed"):
                self.counts["applied_then_failed"] += 1
                raise TransientStoreError(f"chaos: {key} applied, reply lost")
            if self._roll("applied_then_unreachable"):
                self.counts["applied_then_unreachable"] += 1
                self.unreachable[key] = time.monotonic() + self.unreachable_for
                raise TransientStoreError(f"chaos: {key} applied, then unreachable")

        def get(self, key):
            return self._around("get", key, lambda: self.inner.get(key))

        def head(self, key):
            return self._around("head", key, lambda: self.inner.head(key))

        def put(self, key, data):
            return self._around("put", key, lambda: self.inner.put(key, data))

        def put_if_absent(self, key, data):
            return self._around("put_if_absent", key, lambda: self.inner.put_if_absent(key, data))

        def put_if_match(self, key, data, etag):
            return self._around("put_if_match", key,
                                lambda: self.inner.put_if_match(key, data, etag))

        def delete(self, key):
            return self._around("delete", key, lambda: self.inner.delete(key))

        def delete_many(self, keys):
            if not keys:
                return None
            return self._around("delete", keys[0], lambda: self.inner.delete_many(keys))

        def list_page(self, prefix, start_after=None, token=None, max_keys=1000):
            return self._around("list", prefix, lambda: self.inner.list_page(
                prefix, start_after=start_after, token=token, max_keys=max_keys))

    return ChaosStore


RATES = {"transient": 0.01, "applied_then_failed": 0.005, "applied_then_unreachable": 0.001,
         "latency_spike": 0.002}


def _lake(cfg: dict, seed: int, rates: dict[str, float] | None, **kw):
    """A lake client whose store injects ``rates`` faults below the retries, as S3's would."""
    import lakevilla as lv
    from lakevilla.store import RetryingStore, open_store

    raw = open_store(cfg["root"], cfg["storage_options"] or None)
    if isinstance(raw, RetryingStore):
        raw = raw.inner
    chaos = _chaos_store_class()(raw, seed, rates or {}, unreachable_for=3.0)
    store = RetryingStore(chaos, attempts=5, base_delay=0.02, max_delay=0.5)
    lake = lv.Lake(cfg["root"], storage_options=cfg["storage_options"] or None, store=store,
                   marker_ttl=cfg["marker_ttl"], max_transaction_age=cfg["max_age"], **kw)
    return lake, chaos


def _save(path: Path, payload: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)  # whole or not at all: a SIGKILL never leaves half a file


# -- the processes -------------------------------------------------------------------------------

def _diagnosable() -> None:
    """A child that crashes prints where, every thread's stack: also on SIGABRT, which the
    supervisor sends a process that did not end (it dumps, then dies). SIGUSR1 dumps and goes on,
    for a look at a live run."""
    faulthandler.enable(all_threads=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def worker_main(cfg: dict, wid: int, gen: int, features: str) -> None:
    _diagnosable()
    import lakevilla as lv

    run_dir = Path(cfg["run_dir"])
    rng = random.Random(cfg["seed"] * 7919 + wid * 104729 + gen)
    lake, chaos = _lake(cfg, rng.randrange(1 << 30),
                        {k: r * cfg["fault_scale"] for k, r in RATES.items()})
    feats = "" if features == "DL" else features.replace("+", ",")
    atomic = "CT" in feats or "I" in feats
    acks = os.open(run_dir / f"acks-{wid}-{gen}.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    stats: Counter[str] = Counter()
    errors: list[str] = []
    banks, accounts = cfg["banks"], cfg["accounts"]
    last_save, i = 0.0, 0
    _save(run_dir / f"stats-w{wid}-{gen}.json",
          {"stats": stats, "faults": chaos.counts, "errors": errors,
           "features": features})  # listed even if killed at once
    while time.time() < cfg["deadline"] and not (run_dir / "stop").exists():
        i += 1
        kind = kinds.pick_kind(rng)
        if kind == "derive":
            bank = f"bank_{rng.randrange(banks)}"

            def work(txn, bank=bank):
                kinds.derive(lake, txn, features, bank, accounts)

            tids: list[str] = []
        else:
            tids, rows, moves = [], [], []
            for j in range(1 if kind == "transfer" else rng.randint(1, 3)):
                tid = f"{wid}-{gen}-{i}-{j}"
                amount = rng.randint(1, 50)
                src_t = (f"bank_{banks}" if features == "DL" and not cfg["dl_shared"]
                         else f"bank_{rng.randrange(banks)}")
                dst_t = f"bank_{rng.randrange(banks)}" if atomic else src_t
                a = rng.randrange(accounts)
                b = rng.choice([x for x in range(accounts) if (dst_t, x) != (src_t, a)])
                tids.append(tid)
                moves.append((src_t, dst_t, a, b, amount))
                rows.append({"transfer": tid, "worker": wid, "features": features,
                             "src": f"{src_t}/{a}", "dst": f"{dst_t}/{b}", "amount": amount})
            entries = pa.Table.from_pylist(rows, schema=LEDGER)

            def work(txn, kind=kind, moves=moves, entries=entries):
                for m in moves:
                    kinds.move_money(txn, features, *m)
                if kind == "transfer":
                    txn.insert("ledger", entries)
                else:
                    kinds.upsert_entries(txn, entries)

        aborted = False
        try:
            lake.run(work, features=feats, retries=3)
            if tids:
                os.write(acks, "".join(t + "\n" for t in tids).encode())
            stats["committed"] += 1
            stats[f"committed_{kind}"] += 1
        except lv.CommitPendingError:
            # settled by recovery; not acknowledged, so not checked either way
            stats["pending"] += 1
        except lv.PartialCommitError:
            stats["partial"] += 1  # R and DL: the bank part committed, the ledger row did not
        except lv.TransactionAborted as e:
            stats["aborted"] += 1
            stats[f"aborted_{e.reason}"] += 1
            aborted = True
        except kinds.ReadFailed:
            stats["aborted"] += 1
            stats["aborted_storage"] += 1
        except Exception as e:  # noqa: BLE001 - anything else is a violation: reported, not hidden
            stats["unexpected_errors"] += 1
            errors.append(f"{kind}: {type(e).__name__}: {e}"[:300])
        if kind == "upsert" and (aborted or rng.random() < 0.3):
            # the source sends the batch again (at least once): its entries, never the money
            try:
                lake.run(lambda txn, entries=entries: kinds.upsert_entries(txn, entries),
                         features=feats, retries=3)
                stats["upsert_resent"] += 1
            except (lv.CommitPendingError, lv.PartialCommitError, lv.TransactionAborted):
                stats["upsert_resend_failed"] += 1
            except Exception as e:  # noqa: BLE001 - a violation, reported
                stats["unexpected_errors"] += 1
                errors.append(f"upsert resent: {type(e).__name__}: {e}"[:300])
        if time.time() - last_save > 0.5:
            last_save = time.time()
            _save(run_dir / f"stats-w{wid}-{gen}.json",
                  {"stats": stats, "faults": chaos.counts, "errors": errors,
                   "features": features})
    _save(run_dir / f"stats-w{wid}-{gen}.json",
          {"stats": stats, "faults": chaos.counts, "errors": errors,
           "features": features})
    lake.close()
    os._exit(0)  # delta-rs-free, but keep teardown out of the picture (see environment notes)


def reader_main(cfg: dict, rid: int, gen: int) -> None:
    _diagnosable()
    import lakevilla as lv

    run_dir = Path(cfg["run_dir"])
    lake, chaos = _lake(cfg, cfg["seed"] + 1000 * rid + gen,
                        {"transient": 0.005 * cfg["fault_scale"]})
    total = (cfg["banks"] + 1) * cfg["accounts"] * INITIAL
    stats: Counter[str] = Counter()
    bad: list[int] = []
    bad_reasons: list[str] = []
    bad_cuts: list[dict[str, Any]] = []
    last_save = 0.0
    while time.time() < cfg["deadline"] and not (run_dir / "stop").exists():
        try:
            with lake.transaction("I") as txn:
                sums = {
                    f"bank_{k}": sum(txn.read(f"bank_{k}", columns=["balance"])
                                     .column("balance").to_pylist())
                    for k in range(cfg["banks"] + 1)}
            seen = sum(sums.values())
            stats["reads"] += 1
            if seen != total:
                stats["isolated_total_mismatch"] += 1
                bad.append(seen)
                if len(bad_cuts) < 5:  # what the operator needs to find the transfer seen in half
                    bad_cuts.append({"total": seen, "sums": sums, "txn": txn.id,
                                     "versions": {t: tw.base.version
                                                  for t, tw in txn.tables.items()},
                                     **txn.cut_report()})
        except lv.TransactionAborted as e:
            stats["read_aborted"] += 1
            stats[f"read_aborted_{e.reason}"] += 1
            if len(bad_reasons) < 5:
                bad_reasons.append(str(e)[:200])
        except lv.LakeVillaError:
            stats["read_errors"] += 1
        kinds.past_read(lake, cfg, total, stats, bad)
        if time.time() - last_save > 0.5:
            last_save = time.time()
            _save(run_dir / f"stats-r{rid}-{gen}.json",
                  {"stats": stats, "faults": chaos.counts, "bad": bad[:20],
                   "aborts": bad_reasons, "bad_cuts": bad_cuts})
    _save(run_dir / f"stats-r{rid}-{gen}.json",
          {"stats": stats, "faults": chaos.counts, "bad": bad[:20],
           "aborts": bad_reasons, "bad_cuts": bad_cuts})
    os._exit(0)


def consumer_main(cfg: dict, gen: int) -> None:
    """The exactly-once consumer of the ledger's changes (``chaos_kinds.consume``)."""
    _diagnosable()
    import lakevilla as lv

    run_dir = Path(cfg["run_dir"])
    lake, chaos = _lake(cfg, cfg["seed"] + 7000 + gen, {k: r * cfg["fault_scale"]
                                                        for k, r in RATES.items()})
    stats: Counter[str] = Counter()
    errors: list[str] = []
    while time.time() < cfg["deadline"] and not (run_dir / "stop").exists():
        try:
            stats["consumed_changes"] += kinds.consume(lake)
            stats["consumer_runs"] += 1
        except (lv.TransactionAborted, lv.CommitPendingError, lv.StorageError):
            stats["consumer_failed"] += 1
        except Exception as e:  # noqa: BLE001 - a violation, reported
            stats["unexpected_errors"] += 1
            errors.append(f"consumer: {type(e).__name__}: {e}"[:300])
        _save(run_dir / f"stats-c-{gen}.json",
              {"stats": stats, "faults": chaos.counts, "errors": errors})
    os._exit(0)


def maintenance_main(cfg: dict, gen: int) -> None:
    _diagnosable()
    import lakevilla as lv

    run_dir = Path(cfg["run_dir"])
    lake, chaos = _lake(cfg, cfg["seed"] + 5000 + gen, {"transient": 0.005 * cfg["fault_scale"]})
    tables = [f"bank_{k}" for k in range(cfg["banks"] + 1)] + ["ledger", "flows"]
    stats: Counter[str] = Counter()
    errors: list[str] = []
    last_save = 0.0

    def schema_change() -> None:
        if time.time() >= cfg["schema_change_at"]:
            stats["add_columns_done"] += int(kinds.add_column_once(lake))
            stats["column_present"] = 1  # also when a killed generation before added it

    steps = [
        ("cleanup", lambda: stats.update({
            f"cleanup_deleted_{k}": n for k, n in lake.maintenance.cleanup(
                older_than=cfg["retention"], force=True,
                keep_global=cfg.get("keep_global")).items()})),
        ("delete_abandoned_files", lambda: stats.update(
            deleted_files=len(lake.maintenance.delete_abandoned_files(
                min_age=cfg["retention"], force=True)))),
        ("checkpoint", lambda: lake.maintenance.checkpoint(random.choice(tables))),
        ("optimize", lambda: stats.update(
            optimize_files_removed=kinds.compact(lake, random.choice(tables))["files_removed"])),
        ("add_columns", schema_change),
        ("recover", lambda: lake.recover()),
    ]
    while time.time() < cfg["deadline"] and not (run_dir / "stop").exists():
        for name, step in steps:
            try:
                step()
                stats[name] += 1
            except lv.InvalidArgumentError:
                # a checkpoint above an open marker: refused by design
                stats[f"{name}_refused"] += 1
            except lv.LakeVillaError as e:
                stats[f"{name}_failed"] += 1  # the store failed under it: tried again next round
                if not isinstance(e, lv.StorageError | lv.TransactionAborted
                                  | lv.CommitPendingError):
                    errors.append(f"{name}: {type(e).__name__}: {e}"[:300])
            if time.time() - last_save > 0.5:
                last_save = time.time()
                _save(run_dir / f"stats-m-{gen}.json",
                      {"stats": stats, "faults": chaos.counts, "errors": errors})
        time.sleep(0.2)  # maintenance runs periodically, not in a hot loop
    _save(run_dir / f"stats-m-{gen}.json",
          {"stats": stats, "faults": chaos.counts, "errors": errors})
    os._exit(0)


# -- the supervisor --------------------------------------------------------------------------------

def _setup(cfg: dict) -> None:
    import lakevilla as lv

    lake = lv.Lake(cfg["root"], storage_options=cfg["storage_options"] or None)
    for k in range(cfg["banks"] + 1):  # bank_<banks> is the DL workers' own
        lake.create_table(f"bank_{k}", BANK)
        # a file per account: conflicts are per file, transfers per account
        with lake.transaction("") as txn:
            for a in range(cfg["accounts"]):
                txn.insert(f"bank_{k}", {"id": [a], "balance": [INITIAL]})
    lake.create_table("ledger", LEDGER)
    lake.create_table("flows", kinds.FLOWS)
    lake.create_table("ledger_sums", kinds.SUMS)


def _verify(cfg: dict, acked: set[str]) -> tuple[Counter, dict[str, Any]]:
    """The end checks, after every client is gone and recovery ran."""
    from deltalake import DeltaTable

    import lakevilla as lv
    from benchmarks import clouds
    from lakevilla.complex_txn import record as records
    from lakevilla.isolation import resolve as gvl_resolve
    from lakevilla.markers.marker import RUNNING, marker_of

    v: Counter[str] = Counter()
    info: dict[str, Any] = {}
    lake = lv.Lake(cfg["root"], storage_options=cfg["storage_options"] or None,
                   marker_ttl=cfg["marker_ttl"],
                   clock=lambda: time.time() + 10 * cfg["marker_ttl"] + 3600)
    info["final_recovery"] = str(lake.recover())
    fresh = lv.Lake(cfg["root"], storage_options=cfg["storage_options"] or None)
    banks = [f"bank_{k}" for k in range(cfg["banks"] + 1)]
    tables = [*banks, "ledger", "flows"]
    total = 0
    for t in banks:
        ids = Counter(fresh.read(t).column("id").to_pylist())
        v["duplicate_account"] += sum(n - 1 for n in ids.values() if n > 1)
        total += sum(fresh.read(t).column("balance").to_pylist())
    info["total"], info["expected_total"] = total, (cfg["banks"] + 1) * cfg["accounts"] * INITIAL
    v["total_not_conserved"] += int(total != info["expected_total"])
    ledger = Counter(fresh.read("ledger").column("transfer").to_pylist())
    v["duplicate_transfer"] += sum(1 for n in ledger.values() if n > 1)
    v["acknowledged_transfer_missing"] += len(acked - set(ledger))
    info["ledger_rows"] = sum(ledger.values())
    opts = cfg["storage_options"] or None
    store = fresh.store

    def check_table(t: str) -> tuple[Counter, int, int]:
        tv: Counter[str] = Counter()
        log = fresh._client.log(t)
        latest = log.latest_version()
        present = {m.key for m in store.list(t + "/")}
        for _ver, c in log.commits_between(-1, latest):
            if (m := marker_of(c)) is not None and m.state == RUNNING:
                tv["stalled_marker"] += 1
            tv["version_references_missing_file"] += sum(1 for a in c.adds
                                                         if f"{t}/{a.path}" not in present)
        # on GCS delta-rs reads a local copy of the table (benchmarks/clouds.py)
        uri, dr_opts, drop_view = clouds.delta_rs_view(cfg["root"], t, store, opts)
        view_root, view_path = (cfg["root"], cfg["root_path"]) if uri.startswith(
            cfg["root"]) else (uri[:-len(t) - 1],) * 2
        try:
            return _check_with_delta_rs(tv, t, uri, dr_opts, view_root, view_path, latest,
                                        present, log)
        finally:
            drop_view()

    def _check_with_delta_rs(tv: Counter, t: str, uri: str, opts: Any, view_root: str,
                             view_path: str, latest: int, present: set[str],
                             log: Any) -> tuple[Counter, int, int]:
        dt = DeltaTable(uri, version=0, storage_options=opts)
        every = max(1, (latest + 1) // 20)  # every version's log and file list; ~20 full data reads
        versions = reads = 0
        for ver in range(latest + 1):
            versions += 1
            try:
                dt.load_as_version(ver)
                for f in dt.file_uris():
                    rel = (f[len(view_root) + 1:] if f.startswith(view_root)
                           else f.split(view_path + "/", 1)[-1])
                    if rel not in present:
                        tv["delta_rs_version_names_missing_file"] += 1
                if ver % every == 0 or ver == latest:
                    reads += 1
                    pa.table(dt.to_pyarrow_table())
            except Exception:  # noqa: BLE001 - any failure to load a version is the violation
                tv["delta_rs_unreadable_version"] += 1
        lv_rows = sorted(fresh.read(t).to_pylist(), key=lambda r: json.dumps(r, sort_keys=True))
        dr_rows = sorted(
            pa.table(DeltaTable(uri, storage_options=opts).to_pyarrow_table()).to_pylist(),
            key=lambda r: json.dumps(r, sort_keys=True))
        tv["lakevilla_differs_from_delta_rs"] += int(lv_rows != dr_rows)
        compacted, n = kinds.check_compaction(fresh.read, t, log.commits_between(-1, latest))
        tv.update(compacted)
        tv["compactions_checked"] += n
        return tv, versions, reads

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(tables)) as pool:  # delta-rs works outside the GIL
        results = list(pool.map(check_table, tables))
    versions = sum(r[1] for r in results)
    data_reads = sum(r[2] for r in results)
    for tv, _, _ in results:
        info["compactions_checked"] = info.get("compactions_checked", 0) + tv.pop(
            "compactions_checked", 0)
        v.update(tv)
    v["consumer_output_differs_at_offset"] += kinds.check_consumer(fresh)
    flows, info["flows_versions_checked"] = kinds.check_flows(
        fresh.read, fresh.version("flows"), cfg["accounts"])
    v.update(flows)
    info["column_added"] = kinds.NEW_COLUMN[0] in fresh.schema("bank_0").names
    for meta in store.list("_lakevilla/txns/"):
        rest = meta.key[len("_lakevilla/txns/"):]
        if "/" not in rest and rest.endswith(".json"):
            rec = records.read(store, rest[:-5])
            v["stalled_record"] += int(rec is not None and rec.state == records.COMMITTING)
    head = fresh._client.gvl.head()
    for t, p in (head.pending.items() if head is not None else ()):
        v["stalled_announcement"] += int(gvl_resolve.find_pending(fresh._client.log(t), p) is None)
    info["versions_checked"], info["data_reads"] = versions, data_reads
    return v, info


def _starved(run_dir: Path, feature_sets: list[str], readers: int) -> list[str]:
    """What has not happened yet: a feature set or a kind of work that never committed, no
    isolated read, no compaction or the column not yet added by maintenance."""
    committed: Counter[str] = Counter()
    reads = 0
    maint: Counter[str] = Counter()
    for f in run_dir.glob("stats-*.json"):
        try:
            d = json.loads(f.read_text())
        except (OSError, ValueError):
            continue  # replaced as we read it: next look
        if f.name.startswith("stats-w"):
            committed[d["features"]] += d["stats"].get("committed", 0)
            committed.update({k: n for k, n in d["stats"].items() if k.startswith("committed_")})
        elif f.name.startswith("stats-r"):
            reads += d["stats"].get("reads", 0)
        else:
            maint.update(d["stats"])
    return _never_did(committed, reads, feature_sets, readers, maint)


def _never_did(committed: Counter[str], reads: int, feature_sets: list[str],
               readers: int, maint: Counter[str]) -> list[str]:
    out = [k for k in dict.fromkeys(feature_sets) if committed[k] == 0]
    out += [k for k in kinds.KINDS if committed[f"committed_{k}"] == 0]
    out += [k for k in ("optimize", "column_present") if maint[k] == 0]
    return out + (["I reads"] if readers and reads == 0 else [])


def _location(args: argparse.Namespace, tmp: Path) -> tuple[str, dict[str, str], str, Any]:
    """Where the lake lives: (root, storage options, its path as delta-rs may name files, the
    function that stops the emulator started for it, or None)."""
    from benchmarks import clouds
    from benchmarks.common import start_moto_process

    if args.store == "local":
        return "file://" + str(tmp / "lake"), {}, str(tmp / "lake"), None
    if args.store in clouds.CLOUDS:  # Azurite / fake-gcs-server, a container (bucket) of its own
        endpoint, stop = clouds.start(args.store)
        root = clouds.new_root(args.store, endpoint, "chaos")
        return root, clouds.options(args.store, endpoint), root.split("://", 1)[1], stop
    import boto3

    endpoint, stop_moto = args.endpoint, None
    if endpoint is None:
        endpoint, stop_moto = start_moto_process()
    opts = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true"}
    bucket = f"lv-chaos-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                 aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/chaos", opts, f"{bucket}/chaos", stop_moto


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.common import plot, print_table, write_json

    feature_sets = [f.strip() for f in args.features.split(",") if f.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="lakevilla-chaos-"))
    root, opts, root_path, stop_moto = _location(args, tmp)
    run_dir = tmp / "run"
    run_dir.mkdir()
    duration = args.minutes * 60
    cfg = {"root": root, "root_path": root_path, "storage_options": opts, "run_dir": str(run_dir),
           "seed": args.seed, "banks": args.banks, "accounts": args.accounts,
           "marker_ttl": args.marker_ttl, "max_age": args.max_age, "retention": args.retention,
           "deadline": 0.0, "fault_scale": args.fault_scale, "dl_shared": args.dl_shared,
           "keep_global": args.keep_global}
    ctx = mp.get_context("spawn")
    rng = random.Random(args.seed)
    kills: Counter[str] = Counter()
    started = time.time()
    try:
        _setup(cfg)
        t0 = time.time()
        # the run lasts ``duration``, then, without kills, until every kind of worker committed and
        # every reader read (a worker killed twice while it started may have done neither), for at
        # most ``duration`` again; the children stop at the stop file, or at this hard deadline
        end_min, cfg["deadline"] = t0 + duration, t0 + 2 * duration
        cfg["schema_change_at"] = t0 + duration / 2
        gens: Counter[str] = Counter()
        procs: dict[str, Any] = {}
        exited: list[dict[str, Any]] = []

        def spawn(name: str) -> None:
            gen = gens[name]
            gens[name] += 1
            if name.startswith("w"):
                wid = int(name[1:])
                target, a = worker_main, (cfg, wid, gen, feature_sets[wid % len(feature_sets)])
            elif name.startswith("r"):
                target, a = reader_main, (cfg, int(name[1:]), gen)
            elif name == "c":
                target, a = consumer_main, (cfg, gen)
            else:
                target, a = maintenance_main, (cfg, gen)
            p = ctx.Process(target=target, args=a, daemon=True)
            p.start()
            procs[name] = p

        for w in range(args.workers):
            spawn(f"w{w}")
        for r in range(args.readers):
            spawn(f"r{r}")
        spawn("m")
        spawn("c")
        next_kill = time.time() + rng.uniform(0.5, 1.5) * args.kill_every
        last_look = 0.0
        while time.time() < cfg["deadline"] - 1:
            time.sleep(0.1)  # the supervisor's polling interval
            if time.time() >= end_min and time.time() - last_look > 0.5:
                last_look = time.time()
                if not _starved(run_dir, feature_sets, args.readers):
                    break
            for name, p in list(procs.items()):
                # a process that ended before the stop (it should not): say so, restart it
                if not p.is_alive():
                    exited.append({"process": name, "exitcode": p.exitcode,
                                   "at_s": round(time.time() - t0, 1)})
                    print(f"chaos: {name} exited with code {p.exitcode} "
                          f"after {time.time() - t0:.1f}s", flush=True)
                    spawn(name)
            if args.kill_every > 0 and time.time() >= next_kill and time.time() < end_min - 2:
                victim = rng.choice([n for n in procs if n.startswith("w")]
                                    + (["m"] if rng.random() < 0.2 else [])
                                    + (["c"] if rng.random() < 0.3 else []))
                os.kill(procs[victim].pid, signal.SIGKILL)
                procs[victim].join(10)
                kills[{"m": "maintenance", "c": "consumer"}.get(victim, "worker")] += 1
                spawn(victim)
                next_kill = time.time() + rng.uniform(0.5, 1.5) * args.kill_every
            elapsed = time.time() - started
            if args.progress and int(elapsed) % 30 == 0 and elapsed - int(elapsed) < 0.1:
                print(f"  chaos: {elapsed:.0f}s, {sum(kills.values())} kills", flush=True)
        ran_s = time.time() - t0
        (run_dir / "stop").touch()
        # a transaction in flight ends within its max age, retries included: one that has not after
        # a generous grace is hung; its stacks go to stderr before it is killed
        grace_end = time.time() + max(60.0, 4 * args.max_age + 30)
        hung: list[str] = []
        for name, p in procs.items():
            p.join(max(0.0, grace_end - time.time()))
            if p.is_alive():
                hung.append(name)
                print(f"chaos: {name} did not stop; its stacks follow on stderr", flush=True)
                # faulthandler writes the stacks, then the process ends
                os.kill(p.pid, signal.SIGABRT)
                p.join(10)
                if p.is_alive():
                    p.kill()
                    p.join(10)
        acked: set[str] = set()
        for f in run_dir.glob("acks-*.txt"):
            # a torn last line has no id
            acked.update(line for line in f.read_text().split("\n") if line)
        stats: Counter[str] = Counter()
        faults: Counter[str] = Counter()
        maint: Counter[str] = Counter()
        by_features: dict[str, Counter] = {}
        violations: Counter[str] = Counter()
        errors: list[str] = []
        reader_notes: list[str] = []
        mismatches: list[dict[str, Any]] = []
        reader_reads = 0
        for f in run_dir.glob("stats-*.json"):
            d = json.loads(f.read_text())
            faults.update(d.get("faults", {}))
            if f.name.startswith("stats-w"):
                stats.update(d["stats"])
                by_features.setdefault(d["features"], Counter()).update(d["stats"])
                errors += d.get("errors", [])
            elif f.name.startswith("stats-c"):
                stats.update(d["stats"])
                errors += d.get("errors", [])
            elif f.name.startswith("stats-r"):
                stats.update(d["stats"])
                reader_reads += d["stats"].get("reads", 0)
                reader_notes += d.get("aborts", [])
                mismatches += d.get("bad_cuts", [])
            else:
                maint.update(d["stats"])
                errors += d.get("errors", [])
        violations["unexpected_errors"] = stats["unexpected_errors"] + sum(1 for e in errors
                                                                           if "maintenance" in e)
        violations["isolated_total_mismatch"] = stats["isolated_total_mismatch"]
        violations["past_total_mismatch"] = stats["past_total_mismatch"]
        violations["process_exited"] = len(exited)
        violations["process_hung"] = len(hung)
        checked, info = _verify(cfg, acked)
        violations.update(checked)
        # maintenance said it added the column, and the table does not have it
        violations["column_added_then_lost"] = int(maint["add_columns_done"] > 0
                                                   and not info["column_added"])
        payload = {
            "benchmark": "chaos",
            "info": {"store": args.store, "minutes": args.minutes, "quick": bool(args.quick),
                     "seed": args.seed, "workers": args.workers, "readers": args.readers,
                     "features": feature_sets, "banks": args.banks, "accounts": args.accounts,
                     "marker_ttl": args.marker_ttl, "max_transaction_age": args.max_age,
                     "retention": args.retention, "fault_rates": RATES,
                     "fault_scale": args.fault_scale, "kill_every": args.kill_every,
                     "dl_shared": args.dl_shared, "keep_global": args.keep_global,
                     "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                     "wall_s": round(time.time() - started, 1)},
            "committed": len(acked),
            "outcomes": {k: stats[k] for k in ("committed", "aborted", "partial", "pending")},
            "by_features": {f: {k: c[k] for k in ("committed", "aborted", "partial", "pending")}
                            for f, c in sorted(by_features.items())},
            "aborted_by_reason": {k[len("aborted_"):]: n
                                  for k, n in sorted(stats.items()) if k.startswith("aborted_")},
            "isolated_reads": stats["reads"], "isolated_reads_aborted": stats["read_aborted"],
            "past_reads": stats["past_reads"], "past_too_old": stats["past_too_old"],
            "consumer_runs": stats["consumer_runs"],
            "consumed_changes": stats["consumed_changes"],
            "isolated_reads_aborted_by_reason": {k[len("read_aborted_"):]: n
                                                 for k, n in sorted(stats.items())
                                                 if k.startswith("read_aborted_")},
            "isolated_read_abort_examples": reader_notes[:5],
            "isolated_mismatch_examples": mismatches[:5],
            "by_kind": {f: {k: c[f"committed_{k}"] for k in kinds.KINDS}
                        for f, c in sorted(by_features.items())},
            "upserts_resent": stats["upsert_resent"],
            "ran_s": round(ran_s, 1), "starved": _never_did(
                Counter({f: c["committed"] for f, c in by_features.items()})
                + Counter({k: n for k, n in stats.items() if k.startswith("committed_")}),
                reader_reads, feature_sets, args.readers, maint),
            "exited": exited, "hung": hung,
            "kills": dict(kills), "faults": dict(faults), "maintenance": dict(maint),
            "violations": {k: int(violations[k])
                           for k in sorted(set(violations) | _VIOLATION_KINDS)},
            "errors": errors[:20], "checks": info,
        }
        rows = [{"what": "transfers acknowledged (ledger entries checked)", "n": len(acked)}]
        rows += [{"what": f"  {f}: committed / aborted / partial / pending",
                  "n": " / ".join(str(c[k])
                                  for k in ("committed", "aborted", "partial", "pending"))}
                 for f, c in sorted(by_features.items())]
        rows += [{"what": f"  {f}: committed transfer / upsert / derive",
                  "n": " / ".join(str(c[f"committed_{k}"]) for k in kinds.KINDS)}
                 for f, c in sorted(by_features.items())]
        rows += [{"what": "upsert batches sent again", "n": stats["upsert_resent"]}]
        rows += [{"what": "isolated reads (total checked)", "n": stats["reads"]}]
        rows += [{"what": "past views lake.at(moment) (total checked; too old)",
                  "n": f"{stats['past_reads']} ({stats['past_too_old']})"}]
        rows += [{"what": "consumer runs (change rows consumed exactly once)",
                  "n": f"{stats['consumer_runs']} ({stats['consumed_changes']})"}]
        rows += [{"what": "seconds of chaos (kinds that never committed)",
                  "n": f"{ran_s:.0f} ({', '.join(payload['starved']) or 'none'})"}]
        rows += [{"what": f"kills: {k}", "n": n} for k, n in sorted(kills.items())]
        rows += [{"what": f"faults: {k}", "n": n} for k, n in sorted(faults.items())]
        rows += [{"what": f"maintenance: {k}", "n": n} for k, n in sorted(maint.items())]
        rows += [{"what": f"violations: {k}", "n": n} for k, n in payload["violations"].items()]
        rows += [{"what": "versions loaded by delta-rs (full reads)",
                  "n": f"{info['versions_checked']} ({info['data_reads']})"}]
        rows += [{"what": "compactions checked row for row / flows versions checked",
                  "n": f"{info['compactions_checked']} / {info['flows_versions_checked']}"}]
        print_table(rows, ["what", "n"],
                    title=f"chaos on {args.store}, {args.minutes:g} min, seed {args.seed}")
        write_json(args.out, "chaos", payload)

        def draw(fig):
            ax = fig.add_subplot(1, 2, 1)
            names = sorted(by_features)
            for j, k in enumerate(("committed", "aborted", "partial", "pending")):
                ax.bar([x + 0.2 * j for x in range(len(names))], [by_features[n][k] for n in names],
                       0.2, label=k)
            ax.set_xticks([x + 0.3 for x in range(len(names))], names)
            ax.set_title("transfers by feature set")
            ax.legend(fontsize=7)
            ax2 = fig.add_subplot(1, 2, 2)
            ax2.barh(list(faults) + [f"kill {k}" for k in kills],
                     list(faults.values()) + list(kills.values()))
            ax2.set_title(f"faults and kills ({sum(payload['violations'].values())} violations)")

        plot(args.out, "chaos", draw)
        return payload
    finally:
        if stop_moto is not None:
            stop_moto()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")


_VIOLATION_KINDS = {"process_exited", "process_hung", "total_not_conserved", "duplicate_account",
                    "duplicate_transfer", "acknowledged_transfer_missing",
                    "version_references_missing_file", "delta_rs_version_names_missing_file",
                    "delta_rs_unreadable_version", "lakevilla_differs_from_delta_rs",
                    "stalled_marker", "stalled_record", "stalled_announcement",
                    "isolated_total_mismatch", "unexpected_errors", "derived_differs_from_ledger",
                    "derived_rows_of_two_rebuilds", "compaction_changed_rows",
                    "column_added_then_lost", "past_total_mismatch",
                    "consumer_output_differs_at_offset"}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from benchmarks.common import parse_with_quick

    p = argparse.ArgumentParser(prog="python -m benchmarks.chaos",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="about half a minute: what the test suite runs")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--store", choices=["local", "s3", "azure", "gcs"], default="local",
                   help="s3, azure, gcs: moto, Azurite or fake-gcs-server on 127.0.0.1")
    p.add_argument("--endpoint", default=None,
                   help="S3 endpoint (default: a moto server on 127.0.0.1)")
    p.add_argument("--features", default=DEFAULT_FEATURES,
                   help="comma-separated feature sets of the workers, '+' inside a set, "
                        "DL for plain Delta")
    p.add_argument("--workers", type=int, default=None, help="default: one per feature set")
    p.add_argument("--readers", type=int, default=1)
    p.add_argument("--banks", type=int, default=3,
                   help="shared bank tables (DL workers have one more of their own)")
    p.add_argument("--dl-shared", action="store_true",
                   help="DL workers transfer in the shared banks too (shows the "
                        "marker-ignoring writer hazard)")
    p.add_argument("--accounts", type=int, default=20)
    p.add_argument("--kill-every", type=float, default=20.0,
                   help="mean seconds between SIGKILLs (0: none)")
    p.add_argument("--fault-scale", type=float, default=1.0,
                   help="multiplies every fault rate (0: no faults)")
    p.add_argument("--marker-ttl", type=float, default=2.0)
    p.add_argument("--max-age", type=float, default=15.0,
                   help="the workers' max_transaction_age (seconds)")
    p.add_argument("--retention", type=float, default=20.0,
                   help="maintenance's forced retention (seconds; must exceed --max-age)")
    p.add_argument("--keep-global", type=int, default=None,
                   help="maintenance's cleanup keeps this many global-log entries (default: the "
                        "lake's, 1,000); a small value races clean-up against I transactions")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="results/chaos")
    p.add_argument("--keep", action="store_true", help="keep the lake and the run folder")
    p.add_argument("--progress", action="store_true")
    args = parse_with_quick(p, argv, QUICK)
    if args.workers is None:
        args.workers = len([f for f in args.features.split(",") if f.strip()])
    if args.retention <= args.max_age:
        raise SystemExit("--retention must exceed --max-age: that is what makes "
                         "deleting by age safe")
    return run(args)


if __name__ == "__main__":
    out = main()
    raise SystemExit(1 if sum(out["violations"].values()) else 0)
