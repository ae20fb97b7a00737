"""The kinds of work a chaos worker does, and the end checks each kind needs.

A worker draws a kind per iteration, so every worker process (one per feature set) exercises
every kind, and a kill lands in any of them:

* ``transfer``: move money between two accounts and INSERT the transfer into the ledger;
* ``upsert``: move money for a batch of one to three transfers and MERGE their ledger entries,
  keyed by transfer id (matched: update, not matched: insert). An acknowledged batch is sent
  again now and then, and a batch whose transaction aborted always is, as an at-least-once
  source would: the entries must still be there exactly once;
* ``derive``: read the ledger and rebuild one bank's rows of ``flows`` (each account's net
  money in and out, with the ledger version they were computed from) with
  ``overwrite(where="bank = ...")``, in the same transaction.

Maintenance compacts every table (``optimize``, the banks and the ledger included while they
are written) and, once half the run is over, adds a column to a bank table while transfers run.

At the end: every version of ``flows`` equals a recomputation from the ledger at the version its
rows name, and every commit that only rearranged files (``dataChange: false``, what OPTIMIZE
writes) left the table's rows exactly as the version before.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

FLOWS = pa.schema([("bank", pa.string()), ("account", pa.int64()), ("net", pa.int64()),
                   ("ledger_version", pa.int64())])
KINDS = ("transfer", "upsert", "derive")
_WEIGHTS = (0.5, 0.3, 0.2)
NEW_COLUMN = ("note", pa.string())  # the column maintenance adds to ``bank_0`` mid-run
COMPACT_TARGET = 4096  # bytes: a few one-account files per output, so transfers keep their files


class ReadFailed(Exception):
    """A plain-Delta rebuild's read of the ledger, outside any transaction, met a store failure
    beyond its retries (inside a transaction that is an abort with reason ``storage``)."""


def pick_kind(rng: random.Random) -> str:
    return rng.choices(KINDS, _WEIGHTS)[0]


def move_money(txn: Any, features: str, src_t: str, dst_t: str, a: int, b: int,
               amount: int) -> None:
    """The bank part of a transfer. DL: one conserving statement (plain Delta commits each
    statement alone, so two would leave money half moved)."""
    if features == "DL":
        txn.update(src_t, set={"balance": f"CASE WHEN id = {a} THEN balance - {amount} "
                                          f"ELSE balance + {amount} END"},
                   where=f"id = {a} OR id = {b}")
    else:
        txn.update(src_t, set={"balance": f"balance - {amount}"}, where=f"id = {a}")
        txn.update(dst_t, set={"balance": f"balance + {amount}"}, where=f"id = {b}")


def upsert_entries(txn: Any, entries: pa.Table) -> None:
    txn.merge("ledger", entries, on="transfer").when_matched_update_all() \
        .when_not_matched_insert_all().execute()


def net_flows(ledger: pa.Table, bank: str, accounts: int, version: int) -> pa.Table:
    """Each account of ``bank``: money in minus money out, by the ledger's entries."""
    net = dict.fromkeys(range(accounts), 0)
    for src, dst, amount in zip(ledger.column("src").to_pylist(), ledger.column("dst").to_pylist(),
                                ledger.column("amount").to_pylist(), strict=True):
        for end, sign in ((src, -1), (dst, 1)):
            t, _, acct = end.rpartition("/")
            if t == bank:
                net[int(acct)] += sign * amount
    return pa.table({"bank": [bank] * accounts, "account": list(net),
                     "net": list(net.values()), "ledger_version": [version] * accounts},
                    schema=FLOWS)


def derive(lake: Any, txn: Any, features: str, bank: str, accounts: int) -> None:
    """Rebuild ``bank``'s rows of ``flows`` from the ledger read in this transaction. Plain
    Delta keeps no snapshot per transaction, so DL reads one version by number."""
    if features == "DL":
        import lakevilla as lv

        try:
            version = lake.version("ledger")
            ledger = lake.read("ledger", version=version, columns=["src", "dst", "amount"])
        except lv.StorageError as e:  # the store failed a read outside any transaction
            raise ReadFailed(str(e)) from e
    else:
        ledger = txn.read("ledger", columns=["src", "dst", "amount"])
        version = txn.tables["ledger"].read_version
    txn.overwrite("flows", net_flows(ledger, bank, accounts, version), where=f"bank = '{bank}'")


def add_column_once(lake: Any) -> bool:
    """Add ``NEW_COLUMN`` to ``bank_0`` unless a run before (maybe killed after) did."""
    if NEW_COLUMN[0] in lake.schema("bank_0").names:
        return False
    with lake.transaction("R") as txn:
        txn.add_columns("bank_0", {NEW_COLUMN[0]: NEW_COLUMN[1]})
    return True


def compact(lake: Any, table: str) -> dict[str, Any]:
    with lake.transaction("R") as txn:
        out: dict[str, Any] = txn.optimize(table, target_file_size=COMPACT_TARGET)
    return out


# -- the end checks ------------------------------------------------------------------------------

def _sorted_rows(t: pa.Table) -> list[tuple]:
    cols = sorted(t.column_names)
    return sorted(zip(*(t.column(c).to_pylist() for c in cols), strict=True), key=repr)


def check_flows(read: Callable[..., pa.Table], latest: int, accounts: int,
                samples: int = 20) -> tuple[Counter[str], int]:
    """``flows`` at about ``samples`` versions (the newest always): each bank's rows equal a
    recomputation from the ledger at the version they name. Returns violations, versions seen."""
    v: Counter[str] = Counter()
    every = max(1, (latest + 1) // samples)
    seen = 0
    ledgers: dict[int, pa.Table] = {}
    for ver in range(latest + 1):
        if ver % every and ver != latest:
            continue
        seen += 1
        flows = read("flows", version=ver)
        for bank in sorted(set(flows.column("bank").to_pylist())):
            mine = flows.filter(pc.equal(flows.column("bank"), bank))
            versions = set(mine.column("ledger_version").to_pylist())
            if len(versions) != 1:
                v["derived_rows_of_two_rebuilds"] += 1
                continue
            lv_ver = versions.pop()
            if lv_ver not in ledgers:
                ledgers[lv_ver] = read("ledger", version=lv_ver)
            expect = net_flows(ledgers[lv_ver], bank, accounts, lv_ver)
            v["derived_differs_from_ledger"] += int(_sorted_rows(mine) != _sorted_rows(expect))
    return v, seen


def rearranging_versions(commits: list[tuple[int, Any]]) -> list[int]:
    """Versions whose commit changed files but no rows: every add and remove ``dataChange:
    false`` (OPTIMIZE's commits), at least one of them."""
    out = []
    for ver, c in commits:
        actions = [*c.adds, *c.removes]
        if actions and not any(a.data_change for a in actions):
            out.append(ver)
    return out


def check_compaction(read: Callable[..., pa.Table], table: str,
                     commits: list[tuple[int, Any]]) -> tuple[Counter[str], int]:
    """Rows at each rearranging version equal the rows at the version before."""
    v: Counter[str] = Counter()
    versions = [x for x in rearranging_versions(commits) if x > 0]
    for ver in versions:
        before, after = read(table, version=ver - 1), read(table, version=ver)
        v["compaction_changed_rows"] += int(_sorted_rows(before) != _sorted_rows(after))
    return v, len(versions)


# -- the past and the change feed --------------------------------------------------------------

SUMS = pa.schema([("bank", pa.string()), ("amount", pa.int64())])
_SIGN = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}


def past_read(lake: Any, cfg: dict, total: int, stats: Counter[str], bad: list[int]) -> None:
    """The bank's total at a random recent moment (``lake.at``): conserved at every one."""
    import datetime as dt

    import lakevilla as lv

    ago = random.uniform(0, cfg["retention"] / 2)  # within what clean-up keeps
    try:
        view = lake.at(dt.datetime.fromtimestamp(time.time() - ago, dt.UTC))
        seen = sum(sum(view.read(f"bank_{k}", columns=["balance"]).column("balance")
                       .to_pylist()) for k in range(cfg["banks"] + 1))
    except lv.MomentTooOldError:
        stats["past_too_old"] += 1
        return
    except lv.LakeVillaError:
        stats["past_read_errors"] += 1
        return
    stats["past_reads"] += 1
    if seen != total:
        stats["past_total_mismatch"] += 1
        bad.append(seen)


def _ledger_sums(txn: Any, changes: dict[str, pa.Table]) -> int:
    sums: dict[str, int] = {}
    for r in changes["ledger"].to_pylist():
        bank = r["src"].rpartition("/")[0]
        sums[bank] = sums.get(bank, 0) + _SIGN[r["_change_type"]] * r["amount"]
    if sums:
        src = pa.table({"bank": list(sums), "amount": list(sums.values())}, schema=SUMS)
        txn.merge("ledger_sums", src, on="bank").when_matched_update(
            {"amount": "target.amount + source.amount"}).when_not_matched_insert_all().execute()
    return changes["ledger"].num_rows


def consume(lake: Any) -> int:
    """One run of the exactly-once consumer: the ledger's changes into each source bank's sum."""
    out: int = lake.consumer("ledger_sums", ["ledger"]).run(_ledger_sums, retries=10).value
    return out


def check_consumer(lake: Any) -> int:
    """After a last run: the sums equal a recomputation from the ledger at the stored offset."""
    consume(lake)
    offset = lake.consumer("ledger_sums", ["ledger"]).offset()
    want: dict[str, int] = {}
    for r in lake.at(offset).read("ledger").to_pylist():
        bank = r["src"].rpartition("/")[0]
        want[bank] = want.get(bank, 0) + r["amount"]
    got = {r["bank"]: r["amount"] for r in lake.read("ledger_sums").to_pylist()}
    return int({b: n for b, n in got.items() if n} != {b: n for b, n in want.items() if n})
