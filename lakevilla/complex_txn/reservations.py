"""Name reservations: at most one lakevilla client creating a table name at a time.

A table comes into existence with its version 0, written by put-if-absent. A creator whose
version 0 *is* its deciding write needs nothing else: the loser learns it from the put. A
transaction that creates a table decides earlier, by its transaction record, and writes
version 0 afterwards (roll-forward). It must not decide while another creator could still
take version 0, so every lakevilla creator first holds the name's reservation,
``_lakevilla/creates/<name>.json`` (put-if-absent, or put-if-match over a released or dead
one), then checks that version 0 is absent, then decides.

A holder is one of two kinds, each with a fence that stops it from deciding once another
client has taken the name over (DESIGN 3a: a holder may pause at any request):

* ``record`` (``txn.create_table``): the holder decides by creating its record
  ``_lakevilla/txns/<attempt>.json`` COMMITTING. A taker first creates that record ABORTED
  (only once the reservation's ``expires`` passed; holders refresh it with their
  heartbeats), so the holder can never decide afterwards.
* ``table`` (``lake.create_table``): the holder decides by its version 0 put itself and
  refuses to send it after ``expires`` (its start plus the lake's ``max_transaction_age``),
  so the name is taken over only after that (``recover(force=True)`` earlier).

Reservations are released (rewritten as ``released``, never deleted while the table does not
exist): a released one still tells abandoned-file deletion which folder may hold files of a
table that was never created.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from ..errors import CorruptLogError, StorageError, TableExistsError
from ..names import LV_DIR
from ..store import NotFound, ObjectStore, PreconditionFailed, settle_create
from . import record as records

RES_DIR = f"{LV_DIR}/creates"
HELD, RELEASED = "held", "released"


def reservation_key(table: str) -> str:
    return f"{RES_DIR}/{table.replace('/', '~')}.json"  # '~' never occurs in a table name


def table_of_key(key: str) -> str:
    return key[len(RES_DIR) + 1:-len(".json")].replace("~", "/")


@dataclass
class Reservation:
    table: str
    holder: str  # the transaction attempt (kind record) or a one-off creation id (kind table)
    txn: str
    kind: str  # "record" | "table"
    state: str = HELD
    created: float = 0.0
    expires: float = 0.0
    outcome: str | None = None  # once released: committed / aborted / exists / recovered
    v: int = 1

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "reservation") -> Reservation:
        try:
            d = json.loads(data)
            if int(d.get("v", 1)) > 1:
                raise CorruptLogError(f"{where}: format version {d['v']} is newer "
                                      "than this lakevilla")
            return cls(table=d["table"], holder=d["holder"], txn=d["txn"], kind=d["kind"],
                       state=d["state"], created=float(d.get("created", 0.0)),
                       expires=float(d.get("expires", 0.0)), outcome=d.get("outcome"))
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptLogError(f"{where} is damaged: {e}") from None


def read(store: ObjectStore, table: str) -> tuple[Reservation, str] | None:
    try:
        got = store.get(reservation_key(table))
    except NotFound:
        return None
    return Reservation.from_bytes(got.data, reservation_key(table)), got.etag


def dead(store: ObjectStore, res: Reservation, now: float, *, force: bool = False) -> bool:
    """Can ``res`` be taken over? Fences a record holder (creates its record ABORTED) first."""
    if res.state != HELD:
        return True
    if res.kind == "table":
        return force or now > res.expires
    rec = records.read(store, res.holder)
    if rec is None:
        if not (force or now > res.expires):
            return False
        rec = records.abort(store, res.holder, res.txn, f"its reservation of {res.table!r} expired")
    return rec.state == records.ABORTED


def hold(store: ObjectStore, res: Reservation, table_exists, *, now: float,
         etag: str | None = None) -> str:
    """Hold the name for ``res`` (new, or refreshing our own reservation at ``etag``); returns
    the etag. ``TableExistsError`` if the table exists or another live creator holds the name.
    ``table_exists()`` is checked after holding: nobody can create the table from then on."""
    data = res.to_bytes()
    key = reservation_key(res.table)
    for _ in range(10):
        try:
            if etag is not None:
                new = store.put_if_match(key, data, etag)
            else:
                new = store.put_if_absent(key, data)
        except (PreconditionFailed, NotFound):
            new = None
        except StorageError as e:
            new = settle_create(store, key, data, e) if etag is None else None
            if new is None and etag is not None:
                got = read(store, res.table)
                if got is not None and got[0].to_bytes() == data:
                    new = got[1]
        if new is not None:
            if table_exists():
                release(store, res.table, res.holder, "exists")
                raise TableExistsError(f"table {res.table!r} already exists")
            return new
        got = read(store, res.table)
        if got is None:
            etag = None
            continue
        other, other_etag = got
        if other.holder == res.holder and other.state == HELD:
            etag = other_etag  # ours (a refresh that lost its reply, or a new attempt of ours)
            continue
        if (other.txn == res.txn and other.state == HELD and res.kind == "record"
                and dead(store, other, now, force=True)):
            etag = other_etag  # an earlier attempt of ours, fenced: it can never decide now
            continue
        if table_exists():
            raise TableExistsError(f"table {res.table!r} already exists")
        if dead(store, other, now):
            etag = other_etag
            continue
        who = "a lake.create_table call" if other.kind == "table" else f"transaction {other.txn}"
        raise TableExistsError(
            f"table {res.table!r} is being created by {who} "
            f"(reserved {max(0.0, now - other.created):.0f}s ago); only one creator can win. If "
            "that client died, lake.recover() frees the name once its reservation expires")
    raise TableExistsError(f"table {res.table!r}: the reservation kept changing under us "
                           "(concurrent creators)")


def release(store: ObjectStore, table: str, holder: str, outcome: str) -> None:
    """Mark our reservation released (best effort: a reservation left held is freed by recovery)."""
    try:
        got = read(store, table)
        if got is None or got[0].holder != holder or got[0].state != HELD:
            return
        res, etag = got
        res.state, res.outcome, res.expires = RELEASED, outcome, time.time()
        store.put_if_match(reservation_key(table), res.to_bytes(), etag)
    except (PreconditionFailed, NotFound, StorageError, CorruptLogError):
        pass


def all_reservations(store: ObjectStore) -> list[tuple[Reservation, str]]:
    out = []
    for meta in store.list(f"{RES_DIR}/"):
        if not meta.key.endswith(".json"):
            continue
        got = read(store, table_of_key(meta.key))
        if got is not None:
            out.append(got)
    return out
