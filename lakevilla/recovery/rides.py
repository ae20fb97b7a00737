"""Group commit's objects on storage: who leads a version of a table, and riders' requests.

A version of a table that several one-table commits want is led by whoever creates its lead
object (put-if-absent); the others write a request naming their statements on the table, for
that version only. The leader reads the requests, carries what it can in one commit at that
version, and that commit's put-if-absent decides every transaction it names
(``docs/protocol.md``, "Group commit"). Nothing here decides anything: these objects only say
who asks whom; once their version exists they name no live state.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import CorruptLogError, LakeVillaError, StorageError
from ..names import RIDES_DIR, lead_key, request_key, ride_prefix
from ..parallel import pmap
from ..store import NotFound, ObjectStore, PreconditionFailed, settle_create
from . import sublog as sublogs

FORMAT = 1


def _check_format(d: dict[str, Any], what: str) -> None:
    if int(d.get("v", FORMAT)) > FORMAT:
        raise CorruptLogError(f"{what}: format version {d['v']} is newer than this lakevilla")


@dataclass
class Lead:
    """Who leads a version: the first to create its lead object."""

    attempt: str
    txn: str
    created: float = 0.0
    v: int = FORMAT

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()


@dataclass
class RideRequest:
    """A rider's statements on one table, for one version: ``ops`` in statement order, each
    ``{"entry": <sublog entry>}`` (a write) or ``{"read": <read record>}``."""

    txn: str
    attempt: str
    table: str
    version: int
    features: str
    started: float
    ops: list[dict[str, Any]] = field(default_factory=list)
    # the newest version the rider validated its statements against (the leader checks them
    # against every commit after it: a rider that missed a version rides the next one at once)
    validated_upto: int = -1
    created: float = 0.0
    v: int = FORMAT

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> RideRequest:
        try:
            d = json.loads(data)
            _check_format(d, where)
            known = set(cls.__dataclass_fields__)
            return cls(**{k: v for k, v in d.items() if k in known})
        except (ValueError, TypeError, KeyError) as e:
            raise CorruptLogError(f"{where} is damaged: {e}") from None

    def entries(self) -> list[tuple[str, Any]]:
        """(``"entry"``, SublogEntry) or (``"read"``, read record dict), in statement order."""
        out: list[tuple[str, Any]] = []
        for o in self.ops:
            if "entry" in o:
                out.append(("entry", sublogs.SublogEntry.from_json(o["entry"])))
            else:
                out.append(("read", dict(o["read"])))
        return out


def take_lead(store: ObjectStore, table: str, version: int, lead: Lead) -> bool:
    """Whether we lead ``version`` of ``table`` (our put-if-absent of its lead object won). A
    reply lost is read back; an outcome still unknown counts as not leading (the version's
    decision is its commit's put, which the caller makes either way)."""
    key, data = lead_key(table, version), lead.to_bytes()
    try:
        store.put_if_absent(key, data)
        return True
    except PreconditionFailed:
        return False
    except StorageError as e:
        try:
            return settle_create(store, key, data, e) is not None
        except StorageError:
            return False


def ask(store: ObjectStore, req: RideRequest) -> None:
    """Write a rider's request for its version (a PUT of a key nobody else writes)."""
    req.created = req.created or time.time()
    store.put(request_key(req.table, req.version, req.attempt), req.to_bytes())


def requests(store: ObjectStore, table: str, version: int) -> list[RideRequest]:
    """The requests for ``version`` of ``table`` now on storage, in key order (one LIST, then
    the requests in parallel). A damaged or vanished one is left out: its rider is not carried,
    and goes on by itself."""
    prefix = ride_prefix(table, version)
    keys = [m.key for m in store.list(prefix)
            if m.key.endswith(".json") and not m.key.endswith("/lead.json")
            and "/" not in m.key[len(prefix):]]

    def one(key: str) -> RideRequest | None:
        try:
            return RideRequest.from_bytes(store.get(key).data, key)
        except (NotFound, CorruptLogError):
            return None

    got = pmap(one, sorted(keys))
    return [r for r in got if r is not None and r.table == table and r.version == version]


def stale(store: ObjectStore, latest_of: Callable[[str], int], now: float,
          older_than: float) -> list[str]:
    """Ride objects that name nothing live (one LIST of every table's, a LIST of the log of each
    table that has some): those of a version its table's log holds (it is decided), and any
    older than ``older_than`` seconds (a leader carries no rider that old)."""
    by_table: dict[str, list[tuple[int, str, float | None]]] = {}
    for m in store.list(f"{RIDES_DIR}/"):
        parts = m.key[len(RIDES_DIR) + 1:].split("/")
        if len(parts) < 3 or len(parts[-2]) != 20 or not parts[-2].isdigit():
            continue
        by_table.setdefault("/".join(parts[:-2]), []).append(
            (int(parts[-2]), m.key, m.last_modified))
    out = []
    for table, objs in sorted(by_table.items()):
        try:
            latest = latest_of(table)
        except LakeVillaError:
            latest = -1
        out += [key for v, key, at in objs
                if v <= latest or (at is not None and now - at >= older_than)]
    return out
