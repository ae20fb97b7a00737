"""YCSB's workloads: key choice (zipfian, latest, uniform), operation mixes, rows and the
operation sequences every system replays."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

TABLE = "usertable"


FIELDS = [f"field{i}" for i in range(10)]


FIELD_LEN = 100


ZIPF_THETA = 0.99


MAX_SCAN = 100


# Key choice: YCSB's zipfian (Gray et al., "Quickly generating billion-record synthetic
# databases", SIGMOD 1994), scrambled by an FNV hash, and the "latest" distribution.
class Zipfian:
    """Integers in [0, n) with P(i) proportional to 1/(i+1)^theta; n may grow between draws."""

    def __init__(self, n: int, rng: random.Random, theta: float = ZIPF_THETA) -> None:
        if n < 1:
            raise ValueError("zipfian needs at least one item")
        self.rng, self.theta = rng, theta
        self.alpha = 1.0 / (1.0 - theta)
        self.zeta2 = 1.0 + 0.5 ** theta
        self.n, self.zetan = 0, 0.0
        self._resize(n)

    def _resize(self, n: int) -> None:
        if n < self.n:  # shrinking is rare: recompute from scratch
            self.n, self.zetan = 0, 0.0
        self.zetan += sum(1.0 / (i ** self.theta) for i in range(self.n + 1, n + 1))
        self.n = n
        self.eta = ((1.0 - (2.0 / n) ** (1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
                    if n > 1 else 0.0)

    def next(self, n: int | None = None) -> int:
        if n is not None and n != self.n:
            self._resize(n)
        u = self.rng.random()
        uz = u * self.zetan
        if uz < 1.0 or self.n == 1:
            return 0
        if uz < self.zeta2:
            return 1
        return min(int(self.n * (self.eta * u - self.eta + 1.0) ** self.alpha), self.n - 1)


def fnv1a64(x: int) -> int:
    """FNV-1a over the 8 little-endian bytes of ``x``: spreads the popular ranks over the keys."""
    h = 0xCBF29CE484222325
    for _ in range(8):
        h ^= x & 0xFF
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        x >>= 8
    return h


class ScrambledZipfian:
    """Zipfian popularity, but the popular items are scattered over the key space."""

    def __init__(self, n: int, rng: random.Random) -> None:
        self.n, self.z = n, Zipfian(n, rng)

    def next(self) -> int:
        return fnv1a64(self.z.next()) % self.n


@dataclass(frozen=True)
class Workload:
    read: float = 0.0
    update: float = 0.0
    insert: float = 0.0
    scan: float = 0.0
    rmw: float = 0.0
    dist: str = "zipfian"  # or "latest"

    def mix(self) -> list[tuple[str, float]]:
        return [(k, getattr(self, k))
                for k in ("read", "update", "insert", "scan", "rmw") if getattr(self, k)]


WORKLOADS: dict[str, Workload] = {
    "A": Workload(read=0.5, update=0.5),
    "B": Workload(read=0.95, update=0.05),
    "C": Workload(read=1.0),
    "D": Workload(read=0.95, insert=0.05, dist="latest"),
    "E": Workload(scan=0.95, insert=0.05),
    "F": Workload(read=0.5, rmw=0.5),
}


@dataclass(frozen=True)
class Op:
    kind: str
    key: int
    n: int = 0              # scan length
    field: str = ""         # updated field
    token: str = ""         # unique per operation: lets the check tell whose value survived


def fill(s: str) -> str:
    return (s + "#" * FIELD_LEN)[:FIELD_LEN]


def token_of(value: str) -> str:
    return value.split("#", 1)[0]


def counter_value(n: int, token: str) -> str:
    return fill(f"{n:08d}|{token}")


def counter_of(value: str) -> int:
    return int(value.split("|", 1)[0])


def load_row(key: int) -> dict[str, Any]:
    row: dict[str, Any] = {"key": key, "field0": counter_value(0, "load")}
    for i in range(1, 10):
        row[f"field{i}"] = fill(f"load-{key}-{i}")
    return row


def insert_row(key: int, token: str) -> dict[str, Any]:
    return {"key": key, **{f: fill(f"{token}-{f}") for f in FIELDS}}


def generate_ops(wl: Workload, records: int, n_ops: int, client: int, clients: int, seed: int,
                 name: str = "", distribution: str = "workload") -> list[Op]:
    """One client's operations, the same for every system. Insert keys are disjoint per
    client; "latest" favours the newest keys this client knows of (the load and its own
    inserts: clients share no state). ``distribution="uniform"`` draws every key uniformly
    instead (the low-contention case: what markers cost when nobody collides)."""
    rng = random.Random(seed * 1_000_003 + client * 7_919 + sum(map(ord, name)))
    kinds, weights = zip(*wl.mix())
    zipf = ScrambledZipfian(records, rng)
    latest = Zipfian(records, rng)
    own_inserts: list[int] = []
    ops: list[Op] = []
    for i in range(n_ops):
        kind = rng.choices(kinds, weights)[0]
        tok = f"c{client}-{i}"
        if kind == "insert":
            key = records + client + len(own_inserts) * clients
            own_inserts.append(key)
            ops.append(Op("insert", key, token=tok))
            continue
        if distribution == "uniform":
            key = rng.randrange(records)
        elif wl.dist == "latest":
            known = records + len(own_inserts)
            r = latest.next(known)
            key = (own_inserts[-1 - r] if r < len(own_inserts)
                   else records - 1 - (r - len(own_inserts)))
        else:
            key = zipf.next()
        if kind == "scan":
            ops.append(Op("scan", key, n=rng.randint(1, MAX_SCAN)))
        elif kind == "update":
            ops.append(Op("update", key, field=rng.choice(FIELDS), token=tok))
        elif kind == "rmw":
            ops.append(Op("rmw", key, field="field0", token=tok))
        else:
            ops.append(Op("read", key))
    return ops
