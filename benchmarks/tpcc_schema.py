"""TPC-C with one warehouse: the nine relations as Delta tables, the initial
population (spec clause 4.3, scaled down by ``Scale``) and the consistency
conditions 1-4 (clause 3.3.2.1-3.3.2.4).

Physical design, because lakevilla detects conflicts per data file: district-
scoped tables are partitioned by district, and the load writes ``Scale.chunk``
consecutive keys (items, customers, orders) per data file, so that two
transactions touching different rows of a table usually touch different files.
Money is stored in integer cents (exact sums for condition 1); rates are floats.
"""

from __future__ import annotations

import datetime as dt
import random
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

import lakevilla as lv

W_ID = 1
DISTRICTS = 10
TS = pa.timestamp("us", tz="UTC")
SYLLABLES = ("BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING")


@dataclass(frozen=True)
class Scale:
    """Population sizes per warehouse (the spec: 100 000 items, 3 000 customers and
    3 000 orders per district). ``chunk`` is the keys per data file at load."""

    items: int = 1000
    customers: int = 300
    orders: int = 300
    chunk: int = 10

    def __post_init__(self) -> None:
        if min(self.items, self.customers, self.orders, self.chunk) < 1:
            raise ValueError("every scale knob must be at least 1")
        if self.orders > self.customers:
            raise ValueError("initial orders per district cannot exceed customers per district "
                             "(each order belongs to a distinct customer, clause 4.3.3.1)")
        if self.items < 16:
            raise ValueError("a NewOrder picks up to 15 distinct items: need at least 16")

    @property
    def first_undelivered(self) -> int:
        """The spec's 2101 of 3000: orders from here on are undelivered (in NEW-ORDER)."""
        return int(self.orders * 0.7) + 1


QUICK = Scale(items=100, customers=30, orders=30, chunk=10)


def _i32(n: str) -> pa.Field:
    return pa.field(n, pa.int32(), nullable=False)


def _i64(n: str) -> pa.Field:
    return pa.field(n, pa.int64(), nullable=False)


def _s(n: str) -> pa.Field:
    return pa.field(n, pa.string())


def _f(n: str) -> pa.Field:
    return pa.field(n, pa.float64())


SCHEMAS: dict[str, pa.Schema] = {
    "warehouse": pa.schema([_i32("w_id"), _s("w_name"), _s("w_street_1"), _s("w_street_2"),
                            _s("w_city"), _s("w_state"), _s("w_zip"), _f("w_tax"), _i64("w_ytd")]),
    "district": pa.schema([_i32("d_id"), _i32("d_w_id"), _s("d_name"), _s("d_street_1"),
                           _s("d_street_2"), _s("d_city"), _s("d_state"), _s("d_zip"), _f("d_tax"),
                           _i64("d_ytd"), _i32("d_next_o_id")]),
    "customer": pa.schema([_i32("c_id"), _i32("c_d_id"), _i32("c_w_id"), _s("c_first"),
                           _s("c_middle"), _s("c_last"), _s("c_street_1"), _s("c_street_2"),
                           _s("c_city"), _s("c_state"), _s("c_zip"), _s("c_phone"),
                           pa.field("c_since", TS), _s("c_credit"), _i64("c_credit_lim"),
                           _f("c_discount"), _i64("c_balance"), _i64("c_ytd_payment"),
                           _i32("c_payment_cnt"), _i32("c_delivery_cnt"), _s("c_data")]),
    "history": pa.schema([_i32("h_c_id"), _i32("h_c_d_id"), _i32("h_c_w_id"), _i32("h_d_id"),
                          _i32("h_w_id"), pa.field("h_date", TS), _i64("h_amount"), _s("h_data")]),
    "new_order": pa.schema([_i32("no_o_id"), _i32("no_d_id"), _i32("no_w_id")]),
    "orders": pa.schema([_i32("o_id"), _i32("o_d_id"), _i32("o_w_id"), _i32("o_c_id"),
                         pa.field("o_entry_d", TS), pa.field("o_carrier_id", pa.int32()),
                         _i32("o_ol_cnt"), _i32("o_all_local")]),
    "order_line": pa.schema([_i32("ol_o_id"), _i32("ol_d_id"), _i32("ol_w_id"), _i32("ol_number"),
                             _i32("ol_i_id"), _i32("ol_supply_w_id"), pa.field("ol_delivery_d", TS),
                             _i32("ol_quantity"), _i64("ol_amount"), _s("ol_dist_info")]),
    "item": pa.schema([_i32("i_id"), _i32("i_im_id"), _s("i_name"), _i64("i_price"), _s("i_data")]),
    "stock": pa.schema([_i32("s_i_id"), _i32("s_w_id"), _i32("s_quantity"),
                        *[_s(f"s_dist_{d:02d}") for d in range(1, DISTRICTS + 1)],
                        _i64("s_ytd"), _i32("s_order_cnt"), _i32("s_remote_cnt"), _s("s_data")]),
}

PARTITIONS: dict[str, str | None] = {
    "warehouse": None, "district": "d_id", "customer": "c_d_id", "history": None,
    "new_order": "no_d_id", "orders": "o_d_id", "order_line": "ol_d_id", "item": None,
    "stock": None,
}
TABLES = tuple(SCHEMAS)


# -- random input generation (clause 2.1.6 and 4.3.2) ---------------------------------
NURAND_C = {255: 157, 1023: 223, 8191: 4007}  # one run-time constant C per A (clause 2.1.6)


def nurand(rng: random.Random, a: int, x: int, y: int) -> int:
    """Non-uniform random in [x, y] (clause 2.1.6); skews towards a set of hot keys."""
    return (((rng.randint(0, a) | rng.randint(x, y)) + NURAND_C[a]) % (y - x + 1)) + x


def last_name(num: int) -> str:
    """C_LAST from a number 0..999: three syllables (clause 4.3.2.3)."""
    return SYLLABLES[num // 100] + SYLLABLES[(num // 10) % 10] + SYLLABLES[num % 10]


def last_name_range(scale: Scale) -> int:
    """Highest name number that surely exists: customers 1..min(C, 1000) get names 0..C-1."""
    return min(999, scale.customers - 1)


def astring(rng: random.Random, lo: int, hi: int) -> str:
    return "".join(rng.choices(string.ascii_letters + string.digits, k=rng.randint(lo, hi)))


def nstring(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(string.digits, k=n))


def with_original(rng: random.Random, lo: int, hi: int) -> str:
    """I_DATA / S_DATA: 10% of them hold "ORIGINAL" at a random place."""
    s = astring(rng, lo, hi)
    if rng.random() < 0.1:
        at = rng.randint(0, len(s) - 8)
        s = s[:at] + "ORIGINAL" + s[at + 8:]
    return s


def _address(rng: random.Random, p: str) -> dict[str, str]:
    return {f"{p}_street_1": astring(rng, 10, 20), f"{p}_street_2": astring(rng, 10, 20),
            f"{p}_city": astring(rng, 10, 20), f"{p}_state": astring(rng, 2, 2).upper(),
            f"{p}_zip": nstring(rng, 4) + "11111"}


# -- the initial population (clause 4.3.3.1) ----------------------------------------------
def _warehouse(rng: random.Random) -> list[dict[str, Any]]:
    return [{"w_id": W_ID, "w_name": astring(rng, 6, 10), **_address(rng, "w"),
             "w_tax": round(rng.uniform(0, 0.2), 4), "w_ytd": 30_000_000}]


def _district(rng: random.Random, scale: Scale) -> list[dict[str, Any]]:
    return [{"d_id": d, "d_w_id": W_ID, "d_name": astring(rng, 6, 10), **_address(rng, "d"),
             "d_tax": round(rng.uniform(0, 0.2), 4), "d_ytd": 3_000_000,
             "d_next_o_id": scale.orders + 1}
            for d in range(1, DISTRICTS + 1)]


def _customer(rng: random.Random, d: int, c: int, scale: Scale, now: dt.datetime) -> dict[str, Any]:
    num = c - 1 if c <= 1000 else nurand(rng, 255, 0, last_name_range(scale))
    return {"c_id": c, "c_d_id": d, "c_w_id": W_ID, "c_first": astring(rng, 8, 16),
            "c_middle": "OE", "c_last": last_name(num), **_address(rng, "c"),
            "c_phone": nstring(rng, 16), "c_since": now,
            "c_credit": "BC" if rng.random() < 0.1 else "GC", "c_credit_lim": 5_000_000,
            "c_discount": round(rng.uniform(0, 0.5), 4), "c_balance": -1000, "c_ytd_payment": 1000,
            "c_payment_cnt": 1, "c_delivery_cnt": 0, "c_data": astring(rng, 300, 500)}


def _stock(rng: random.Random, i: int) -> dict[str, Any]:
    row: dict[str, Any] = {"s_i_id": i, "s_w_id": W_ID, "s_quantity": rng.randint(10, 100)}
    row.update({f"s_dist_{d:02d}": astring(rng, 24, 24) for d in range(1, DISTRICTS + 1)})
    row.update({"s_ytd": 0, "s_order_cnt": 0, "s_remote_cnt": 0,
                "s_data": with_original(rng, 26, 50)})
    return row


def _orders(rng: random.Random, d: int, scale: Scale, now: dt.datetime
            ) -> tuple[list[dict], list[dict], list[dict]]:
    """ORDERS, ORDER-LINE and NEW-ORDER rows of one district."""
    owners = list(range(1, scale.customers + 1))
    rng.shuffle(owners)  # O_C_ID: a random permutation of the customers
    orders, lines, new = [], [], []
    for o in range(1, scale.orders + 1):
        delivered = o < scale.first_undelivered
        cnt = rng.randint(5, 15)
        orders.append({"o_id": o, "o_d_id": d, "o_w_id": W_ID, "o_c_id": owners[o - 1],
                       "o_entry_d": now, "o_carrier_id": rng.randint(1, 10) if delivered else None,
                       "o_ol_cnt": cnt, "o_all_local": 1})
        for n in range(1, cnt + 1):
            lines.append({"ol_o_id": o, "ol_d_id": d, "ol_w_id": W_ID, "ol_number": n,
                          "ol_i_id": rng.randint(1, scale.items), "ol_supply_w_id": W_ID,
                          "ol_delivery_d": now if delivered else None, "ol_quantity": 5,
                          "ol_amount": 0 if delivered else rng.randint(1, 999_999),
                          "ol_dist_info": astring(rng, 24, 24)})
        if not delivered:
            new.append({"no_o_id": o, "no_d_id": d, "no_w_id": W_ID})
    return orders, lines, new


def _chunks(rows: list[dict], key: str, size: int) -> Iterator[list[dict]]:
    """Rows grouped by ``size`` consecutive key values (rows arrive sorted by key)."""
    batch: list[dict] = []
    first = None
    for r in rows:
        if first is None:
            first = r[key]
        if r[key] - first >= size:
            yield batch
            batch, first = [], r[key]
        batch.append(r)
    if batch:
        yield batch


def population(scale: Scale, seed: int) -> dict[str, list[list[dict]]]:
    """Every table's initial rows, already cut into the batches that become data files."""
    rng = random.Random(f"tpcc-load-{seed}")
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    items = [{"i_id": i, "i_im_id": rng.randint(1, 10_000), "i_name": astring(rng, 14, 24),
              "i_price": rng.randint(100, 10_000), "i_data": with_original(rng, 26, 50)}
             for i in range(1, scale.items + 1)]
    out: dict[str, list[list[dict]]] = {
        "warehouse": [_warehouse(rng)], "district": [_district(rng, scale)],
        "item": list(_chunks(items, "i_id", scale.chunk * 10)),  # read-only: bigger files
        "stock": list(_chunks([_stock(rng, i) for i in range(1, scale.items + 1)], "s_i_id",
                              scale.chunk)),
        "customer": [], "history": [], "orders": [], "order_line": [], "new_order": [],
    }
    for d in range(1, DISTRICTS + 1):
        custs = [_customer(rng, d, c, scale, now) for c in range(1, scale.customers + 1)]
        out["customer"] += list(_chunks(custs, "c_id", scale.chunk))
        out["history"].append([{"h_c_id": c, "h_c_d_id": d, "h_c_w_id": W_ID, "h_d_id": d,
                                "h_w_id": W_ID, "h_date": now, "h_amount": 1000,
                                "h_data": astring(rng, 12, 24)}
                               for c in range(1, scale.customers + 1)])
        orders, lines, new = _orders(rng, d, scale, now)
        out["orders"] += list(_chunks(orders, "o_id", scale.chunk))
        out["order_line"] += list(_chunks(lines, "ol_o_id", scale.chunk))
        out["new_order"] += list(_chunks(new, "no_o_id", scale.chunk))
    return out


def load(lake: lv.Lake, scale: Scale, seed: int,
         properties: dict[str, str] | None = None) -> dict[str, int]:
    """Create and fill the nine tables, one LV[R] transaction per table (one Delta commit
    each), each with table ``properties`` (e.g. deletion vectors on); returns the rows per
    table."""
    rows: dict[str, int] = {}
    for name, batches in population(scale, seed).items():
        lake.create_table(name, SCHEMAS[name], partition_by=PARTITIONS[name],
                          properties=properties)
        with lake.transaction(features="R") as txn:
            for batch in batches:
                txn.insert(name, pa.Table.from_pylist(batch, schema=SCHEMAS[name]))
        rows[name] = sum(len(b) for b in batches)
    lake.flush()
    return rows


# -- consistency conditions 1-4 (clause 3.3.2) -----------------------------------------------
@dataclass
class Consistency:
    """Violations per condition (2-4 counted per district), and tables that could not be
    read at all (a committed version naming a data file that is gone)."""

    c1: int = 0
    c2: int = 0
    c3: int = 0
    c4: int = 0
    unreadable: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.c1 + self.c2 + self.c3 + self.c4

    def as_dict(self) -> dict[str, Any]:
        return {"c1": self.c1, "c2": self.c2, "c3": self.c3, "c4": self.c4, "total": self.total,
                "unreadable": list(self.unreadable), "details": list(self.details)}


def _per_district(table: pa.Table | None, key: str,
                  aggs: list[tuple[str, str]]) -> dict[int, dict[str, Any]]:
    if table is None or table.num_rows == 0:
        return {}
    g = table.group_by(key).aggregate(aggs)
    return {r[key]: r for r in g.to_pylist()}


def _read(lake: lv.Lake, table: str, columns: list[str], out: Consistency) -> pa.Table | None:
    try:
        return lake.read(table, columns=columns)
    # reported, not raised: the checker must survive a broken table
    except Exception as e:  # noqa: BLE001
        out.unreadable.append(table)
        out.details.append(
            f"{table} unreadable: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        return None


def check_consistency(lake: lv.Lake) -> Consistency:
    """Conditions 1-4 on the newest committed state of every table (a condition over an
    unreadable table is not evaluated)."""
    out = Consistency()
    wh = _read(lake, "warehouse", ["w_ytd"], out)
    dt_ = _read(lake, "district", ["d_id", "d_ytd", "d_next_o_id"], out)
    if wh is None or dt_ is None:
        return out
    dist = {r["d_id"]: r for r in dt_.to_pylist()}
    w_ytd, d_ytd = wh.column("w_ytd").to_pylist(), sum(r["d_ytd"] for r in dist.values())
    if len(w_ytd) != 1 or w_ytd[0] != d_ytd:
        out.c1 += 1
        out.details.append(f"1: W_YTD {w_ytd} != sum(D_YTD) {d_ytd}")
    o_t = _read(lake, "orders", ["o_d_id", "o_id", "o_ol_cnt"], out)
    no_t = _read(lake, "new_order", ["no_d_id", "no_o_id"], out)
    ol_t = _read(lake, "order_line", ["ol_d_id", "ol_number"], out)
    orders = _per_district(o_t, "o_d_id", [("o_id", "max"), ("o_ol_cnt", "sum")])
    new = _per_district(no_t, "no_d_id",
                        [("no_o_id", "max"), ("no_o_id", "min"), ("no_o_id", "count")])
    lines = _per_district(ol_t, "ol_d_id", [("ol_number", "count")])
    for d, row in sorted(dist.items()):
        nxt = row["d_next_o_id"] - 1
        o, n = orders.get(d, {}), new.get(d)
        if o_t is not None and no_t is not None and (
                o.get("o_id_max") != nxt or (n is not None and n["no_o_id_max"] != nxt)):
            out.c2 += 1
            out.details.append(f"2: district {d}: D_NEXT_O_ID-1={nxt}, "
                               f"max(O_ID)={o.get('o_id_max')}, "
                               f"max(NO_O_ID)={n and n['no_o_id_max']}")
        if n is not None and n["no_o_id_max"] - n["no_o_id_min"] + 1 != n["no_o_id_count"]:
            out.c3 += 1
            out.details.append(f"3: district {d}: NO_O_ID {n['no_o_id_min']}..{n['no_o_id_max']} "
                               f"but {n['no_o_id_count']} NEW-ORDER rows")
        ol_rows = lines.get(d, {}).get("ol_number_count", 0)
        if o_t is not None and ol_t is not None and o.get("o_ol_cnt_sum", 0) != ol_rows:
            out.c4 += 1
            out.details.append(f"4: district {d}: sum(O_OL_CNT)={o.get('o_ol_cnt_sum', 0)} "
                               f"but {ol_rows} ORDER-LINE rows")
    return out
