"""The five TPC-C transactions (clause 2.4-2.8) on the lakevilla API, and one client
(terminal) that runs the mix and counts what happened.

Updates are declarative where the spec's effect allows (``d_ytd + amount``, the stock
quantity rule as a CASE); values the spec reads and then uses (the new order id, the
oldest undelivered order, the customer picked by last name, the amounts delivered) are
read and fed back: that read-compute-write is what weaker feature sets cannot protect.
Per-item statements of NewOrder and per-district statements of Delivery are batched
into one statement per table (the same rows and effects, far fewer round trips).
"""

from __future__ import annotations

import datetime as dt
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

import lakevilla as lv

from .tpcc_schema import DISTRICTS, W_ID, Scale, last_name, last_name_range, nurand

KINDS = ("new_order", "payment", "order_status", "delivery", "stock_level")
OP_COUNTERS = ("read", "insert", "update", "delete")
MIX = {"new_order": 45, "payment": 43, "order_status": 4, "delivery": 4, "stock_level": 4}


class NewOrderRollback(Exception):  # noqa: N818 - a business outcome, not an error
    """The 1% of NewOrders with an unused item number: the whole transaction rolls back."""


def _in(values: list[int]) -> str:
    return "(" + ", ".join(str(v) for v in values) + ")"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _ts_literal(t: dt.datetime) -> str:
    return f"TIMESTAMPTZ '{t.isoformat()}'"


# -- inputs (clause 2.x.1): drawn before the first attempt, reused by every retry ------------
@dataclass(frozen=True)
class NewOrderInput:
    d_id: int
    c_id: int
    items: tuple[int, ...]
    quantities: tuple[int, ...]
    rollback: bool


@dataclass(frozen=True)
class PaymentInput:
    d_id: int
    c_id: int | None
    c_last: str | None
    amount: int  # cents


@dataclass(frozen=True)
class OrderStatusInput:
    d_id: int
    c_id: int | None
    c_last: str | None


@dataclass(frozen=True)
class DeliveryInput:
    carrier: int


@dataclass(frozen=True)
class StockLevelInput:
    d_id: int
    threshold: int


def _customer_choice(rng: random.Random, scale: Scale) -> tuple[int | None, str | None]:
    """60% by last name, 40% by id (clause 2.5.1.2, 2.6.1.2)."""
    if rng.random() < 0.6:
        return None, last_name(nurand(rng, 255, 0, last_name_range(scale)))
    return nurand(rng, 1023, 1, scale.customers), None


def draw_input(kind: str, rng: random.Random, scale: Scale, terminal_district: int) -> Any:
    if kind == "new_order":
        n = rng.randint(5, 15)
        items: list[int] = []
        while len(items) < n:  # distinct items: one stock row per order line
            i = nurand(rng, 8191, 1, scale.items)
            if i not in items:
                items.append(i)
        rollback = rng.random() < 0.01
        if rollback:
            items[-1] = scale.items + 1  # an unused item number (clause 2.4.1.5)
        return NewOrderInput(rng.randint(1, DISTRICTS), nurand(rng, 1023, 1, scale.customers),
                             tuple(items), tuple(rng.randint(1, 10) for _ in items), rollback)
    if kind == "payment":
        c_id, c_last = _customer_choice(rng, scale)
        return PaymentInput(rng.randint(1, DISTRICTS), c_id, c_last, rng.randint(100, 500_000))
    if kind == "order_status":
        c_id, c_last = _customer_choice(rng, scale)
        return OrderStatusInput(rng.randint(1, DISTRICTS), c_id, c_last)
    if kind == "delivery":
        return DeliveryInput(rng.randint(1, 10))
    return StockLevelInput(terminal_district, rng.randint(10, 20))


def deck(rng: random.Random) -> list[str]:
    """A shuffled deck of 100 cards holding the mix exactly (clause 5.2.4.2)."""
    cards = [k for k, n in MIX.items() for _ in range(n)]
    rng.shuffle(cards)
    return cards


# -- the transactions ------------------------------------------------------------------------
def _one(table: pa.Table, what: str) -> dict[str, Any]:
    rows = table.to_pylist()
    if len(rows) != 1:
        raise RuntimeError(f"expected one {what} row, found {len(rows)}")
    return rows[0]


def new_order(txn: lv.Transaction, inp: NewOrderInput) -> dict[str, Any]:
    d = inp.d_id
    w = _one(txn.read("warehouse", where=f"w_id = {W_ID}", columns=["w_tax"]), "warehouse")
    dist = _one(txn.read("district", where=f"d_id = {d}", columns=["d_tax", "d_next_o_id"]),
                "district")
    o_id = dist["d_next_o_id"]  # read, then used for every row below
    txn.update("district", set={"d_next_o_id": "d_next_o_id + 1"}, where=f"d_id = {d}")
    cust = _one(txn.read("customer", where=f"c_d_id = {d} AND c_id = {inp.c_id}",
                         columns=["c_discount", "c_last", "c_credit"]), "customer")
    now = _now()
    txn.insert("orders",
               [{"o_id": o_id, "o_d_id": d, "o_w_id": W_ID, "o_c_id": inp.c_id, "o_entry_d": now,
                 "o_carrier_id": None, "o_ol_cnt": len(inp.items), "o_all_local": 1}])
    txn.insert("new_order", [{"no_o_id": o_id, "no_d_id": d, "no_w_id": W_ID}])
    items = {r["i_id"]: r for r in txn.read("item", where=f"i_id IN {_in(list(inp.items))}",
                                            columns=["i_id", "i_price", "i_name",
                                                     "i_data"]).to_pylist()}
    if len(items) != len(inp.items):
        raise NewOrderRollback(f"item {inp.items[-1]} does not exist")
    dist_col = f"s_dist_{d:02d}"
    stock = {r["s_i_id"]: r for r in txn.read("stock", where=f"s_i_id IN {_in(list(inp.items))}",
                                              columns=["s_i_id", dist_col, "s_data"]).to_pylist()}
    qty = dict(zip(inp.items, inp.quantities))
    new_q = " ".join(f"WHEN {i} THEN (CASE WHEN s_quantity - {q} >= 10 THEN s_quantity - {q} "
                     f"ELSE s_quantity - {q} + 91 END)" for i, q in qty.items())
    ytd = " ".join(f"WHEN {i} THEN {q}" for i, q in qty.items())
    txn.update("stock", set={"s_quantity": f"CASE s_i_id {new_q} ELSE s_quantity END",
                             "s_ytd": f"s_ytd + CASE s_i_id {ytd} ELSE 0 END",
                             "s_order_cnt": "s_order_cnt + 1"},
               where=f"s_i_id IN {_in(list(inp.items))}")
    lines = [{"ol_o_id": o_id, "ol_d_id": d, "ol_w_id": W_ID, "ol_number": n, "ol_i_id": i,
              "ol_supply_w_id": W_ID, "ol_delivery_d": None, "ol_quantity": qty[i],
              "ol_amount": qty[i] * items[i]["i_price"], "ol_dist_info": stock[i][dist_col]}
             for n, i in enumerate(inp.items, start=1)]
    txn.insert("order_line", lines)
    total = sum(r["ol_amount"]
                for r in lines) * (1 - cust["c_discount"]) * (1 + w["w_tax"] + dist["d_tax"])
    return {"o_id": o_id, "total_cents": round(total)}


def _customer_by_name(txn: lv.Transaction, d: int, c_last: str) -> int:
    """The customer at position ceil(n/2) of those named ``c_last``, sorted by C_FIRST."""
    rows = txn.read("customer", where=f"c_d_id = {d} AND c_last = '{c_last}'",
                    columns=["c_id", "c_first"]).to_pylist()
    if not rows:
        raise RuntimeError(f"no customer named {c_last} in district {d}")
    rows.sort(key=lambda r: r["c_first"])
    return rows[(len(rows) + 1) // 2 - 1]["c_id"]


def payment(txn: lv.Transaction, inp: PaymentInput) -> dict[str, Any]:
    d, amt = inp.d_id, inp.amount
    txn.update("warehouse", set={"w_ytd": f"w_ytd + {amt}"}, where=f"w_id = {W_ID}")
    w = _one(txn.read("warehouse", where=f"w_id = {W_ID}", columns=["w_name", "w_city"]),
             "warehouse")
    txn.update("district", set={"d_ytd": f"d_ytd + {amt}"}, where=f"d_id = {d}")
    dist = _one(txn.read("district", where=f"d_id = {d}", columns=["d_name", "d_city"]), "district")
    c_id = inp.c_id if inp.c_id is not None else _customer_by_name(txn, d, inp.c_last or "")
    where = f"c_d_id = {d} AND c_id = {c_id}"
    cust = _one(txn.read("customer", where=where, columns=["c_credit", "c_balance"]), "customer")
    note = f"{c_id} {d} {W_ID} {d} {W_ID} {amt} "
    txn.update("customer", set={
        "c_balance": f"c_balance - {amt}", "c_ytd_payment": f"c_ytd_payment + {amt}",
        "c_payment_cnt": "c_payment_cnt + 1",
        "c_data": f"CASE WHEN c_credit = 'BC' THEN substr('{note}' || c_data, 1, "
                  "500) ELSE c_data END"},
        where=where)
    txn.insert("history",
               [{"h_c_id": c_id, "h_c_d_id": d, "h_c_w_id": W_ID, "h_d_id": d, "h_w_id": W_ID,
                 "h_date": _now(), "h_amount": amt,
                 "h_data": f"{w['w_name']}    {dist['d_name']}"}])
    return {"c_id": c_id, "balance_cents": cust["c_balance"] - amt}


def order_status(txn: lv.Transaction, inp: OrderStatusInput) -> dict[str, Any]:
    d = inp.d_id
    c_id = inp.c_id if inp.c_id is not None else _customer_by_name(txn, d, inp.c_last or "")
    _one(txn.read("customer", where=f"c_d_id = {d} AND c_id = {c_id}",
                  columns=["c_balance", "c_first", "c_last"]), "customer")
    orders = txn.read("orders", where=f"o_d_id = {d} AND o_c_id = {c_id}",
                      columns=["o_id", "o_carrier_id"])
    if orders.num_rows == 0:
        return {"c_id": c_id, "o_id": None, "lines": 0}
    o_id = max(orders.column("o_id").to_pylist())
    lines = txn.read("order_line", where=f"ol_d_id = {d} AND ol_o_id = {o_id}",
                     columns=["ol_i_id", "ol_quantity", "ol_amount", "ol_delivery_d"])
    return {"c_id": c_id, "o_id": o_id, "lines": lines.num_rows}


def delivery(txn: lv.Transaction, inp: DeliveryInput) -> dict[str, Any]:
    """All ten districts in one transaction (the spec allows up to ten)."""
    oldest: dict[int, int] = {}
    for d in range(1, DISTRICTS + 1):  # the spec's query per district: its oldest undelivered order
        first = txn.read("new_order", where=f"no_w_id = {W_ID} AND no_d_id = {d}",
                         columns=["no_o_id"], order_by="no_o_id", limit=1).to_pylist()
        if first:
            oldest[d] = first[0]["no_o_id"]
    if not oldest:
        return {"delivered": 0, "skipped": DISTRICTS}
    pick = " OR ".join(f"({{d}} = {d} AND {{o}} = {o})" for d, o in sorted(oldest.items()))
    txn.delete("new_order", where=pick.format(d="no_d_id", o="no_o_id"))
    o_where = pick.format(d="o_d_id", o="o_id")
    owners = {r["o_d_id"]: r["o_c_id"] for r in txn.read("orders", where=o_where,
                                                          columns=["o_d_id", "o_c_id"]).to_pylist()}
    txn.update("orders", set={"o_carrier_id": str(inp.carrier)}, where=o_where)
    ol_where = pick.format(d="ol_d_id", o="ol_o_id")
    txn.update("order_line", set={"ol_delivery_d": _ts_literal(_now())}, where=ol_where)
    amounts: Counter[int] = Counter()
    for r in txn.read("order_line", where=ol_where, columns=["ol_d_id", "ol_amount"]).to_pylist():
        amounts[r["ol_d_id"]] += r["ol_amount"]
    c_where = " OR ".join(f"(c_d_id = {d} AND c_id = {c})" for d, c in sorted(owners.items()))
    add = " ".join(f"WHEN c_d_id = {d} AND c_id = {c} THEN {amounts[d]}"
                   for d, c in sorted(owners.items()))
    txn.update("customer", set={"c_balance": f"c_balance + CASE {add} ELSE 0 END",
                                "c_delivery_cnt": "c_delivery_cnt + 1"}, where=c_where)
    return {"delivered": len(oldest), "skipped": DISTRICTS - len(oldest)}


def stock_level(txn: lv.Transaction, inp: StockLevelInput) -> dict[str, Any]:
    d = inp.d_id
    nxt = _one(txn.read("district", where=f"d_id = {d}",
                        columns=["d_next_o_id"]), "district")["d_next_o_id"]
    lines = txn.read("order_line",
                     where=f"ol_d_id = {d} AND ol_o_id >= {nxt - 20} AND ol_o_id < {nxt}",
                     columns=["ol_i_id"])
    items = sorted(set(lines.column("ol_i_id").to_pylist()))
    if not items:
        return {"low_stock": 0}
    low = txn.read("stock", where=f"s_i_id IN {_in(items)} AND s_quantity < {inp.threshold}",
                   columns=["s_i_id"])
    return {"low_stock": low.num_rows}


TRANSACTIONS: dict[str, Callable[[lv.Transaction, Any], dict[str, Any]]] = {
    "new_order": new_order, "payment": payment, "order_status": order_status, "delivery": delivery,
    "stock_level": stock_level,
}


# -- one client --------------------------------------------------------------------------------
@dataclass
class TypeStats:
    """What happened to one transaction type at one client."""

    committed: int = 0
    rollbacks: int = 0  # NewOrder's intentional rollbacks
    aborts: int = 0  # attempts that ended in lv.TransactionAborted
    retries: int = 0  # attempts after the first
    failed: int = 0  # still aborted after every retry
    partial: int = 0  # lv.PartialCommitError: some tables committed, a later one could not
    errors: int = 0  # anything else lakevilla raised
    redos: int = 0
    requests: int = 0  # store requests made by this client during these transactions
    seconds: float = 0.0
    error_samples: list[str] = field(default_factory=list)
    # lakevilla's own counters (waits, shifts, ...)
    protocol: dict[str, int] = field(default_factory=dict)

    @property
    def issued(self) -> int:
        return self.committed + self.rollbacks + self.failed + self.partial + self.errors

    def add(self, other: TypeStats) -> None:
        for k in ("committed", "rollbacks", "aborts", "retries", "failed", "partial", "errors",
                  "redos", "requests", "seconds"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.error_samples = (self.error_samples + other.error_samples)[:5]
        self.protocol = dict(Counter(self.protocol) + Counter(other.protocol))


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


def run_one(lake: lv.Lake, features: str, kind: str, inp: Any, st: TypeStats, retries: int,
            requests: Callable[[], int]) -> None:
    """One transaction through ``lake.run``; every attempt's outcome lands in ``st``."""
    attempts: list[lv.Transaction] = []

    def body(txn: lv.Transaction) -> dict[str, Any]:
        attempts.append(txn)
        return TRANSACTIONS[kind](txn, inp)

    before, t0 = requests(), time.perf_counter()
    try:
        lake.run(body, features=features, retries=retries)
        st.committed += 1
    except NewOrderRollback:
        st.rollbacks += 1
    except lv.TransactionAborted:
        st.failed += 1
        st.aborts += 1  # the last attempt
    except lv.PartialCommitError as e:
        st.partial += 1
        st.error_samples = (st.error_samples + [_error_text(e)])[:5]
    except Exception as e:  # noqa: BLE001 - recorded: a benchmark reports misbehaviour, it does not hide it
        st.errors += 1
        st.error_samples = (st.error_samples + [_error_text(e)])[:5]
    st.seconds += time.perf_counter() - t0
    st.requests += requests() - before
    st.retries += max(len(attempts) - 1, 0)
    st.aborts += max(len(attempts) - 1, 0)
    st.redos += sum(t.stats.get("redos", 0) for t in attempts)
    counters = Counter(st.protocol)
    for t in attempts:
        counters.update({k: v for k, v in t.stats.items() if k not in OP_COUNTERS})
    st.protocol = dict(counters)


def run_client(lake: lv.Lake, features: str, client: int, n: int, scale: Scale, seed: int,
               retries: int, requests: Callable[[], int], tick: Callable[[], None] = lambda: None,
               deadline: float | None = None) -> dict[str, TypeStats]:
    """Terminal ``client``: up to ``n`` transactions from its own deck and input stream,
    starting none after ``deadline`` (wall-clock seconds; the measurement interval)."""
    rng = random.Random(f"tpcc-client-{seed}-{client}")
    home = client % DISTRICTS + 1  # StockLevel's fixed district per terminal (clause 2.8.1.1)
    stats = {k: TypeStats() for k in KINDS}
    cards: list[str] = []
    for _ in range(n):
        if deadline is not None and time.time() >= deadline:
            break
        if not cards:
            cards = deck(rng)
        kind = cards.pop()
        inp = draw_input(kind, rng, scale, home)
        run_one(lake, features, kind, inp, stats[kind], retries, requests)
        tick()
    return stats
