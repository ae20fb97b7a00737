"""The transaction record: the commit point of a multi-table transaction.

``_lakevilla/txns/<attempt>.json`` does not exist while the transaction runs. The
owner creates it with put-if-absent in state COMMITTING, holding every table's
commit, byte for byte: that single write is the decision. A client that finds
the transaction stalled creates it first, in state ABORTED, with the same
put-if-absent, so exactly one of the two decisions exists. After COMMITTING
anyone can write the table commits from the record (roll forward). An ABORTED record that an
operator's ``recover(older_than=)`` wrote for an idle transaction is ``final``: the transaction
is over, not only this attempt (no new attempt, no resume; ``recovery/idle.py``).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import CorruptLogError, StorageError
from ..names import TXN_DIR, record_key
from ..store import NotFound, ObjectStore, PreconditionFailed, settle_create
from ..vocab import RecordState

COMMITTING, COMMITTED, ABORTED = RecordState.COMMITTING, RecordState.COMMITTED, RecordState.ABORTED


@dataclass
class TableIntent:
    marker: int | None
    mode: str
    commit: str  # the NDJSON commit file to publish
    version: int | None = None  # where it landed, once known
    create: bool = False  # the commit is version 0 of a table this transaction creates (only there)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TxnRecord:
    attempt: str
    txn: str
    state: str
    tables: dict[str, TableIntent] = field(default_factory=dict)
    created: float = 0.0
    by: str = "owner"
    reason: str | None = None
    final: bool = False  # ABORTED: the whole transaction, not only this attempt (readers before
    # this field ignore it: they see an aborted attempt, as before)
    v: int = 1

    def to_bytes(self) -> bytes:
        d = asdict(self)
        return json.dumps(d, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "record") -> TxnRecord:
        try:
            d = json.loads(data)
            if int(d.get("v", 1)) > 1:
                raise CorruptLogError(f"{where}: format version {d['v']} is newer "
                                      "than this lakevilla")
            tables = {k: TableIntent(**v) for k, v in (d.get("tables") or {}).items()}
            return cls(attempt=d["attempt"], txn=d["txn"], state=d["state"], tables=tables,
                       created=d.get("created", 0.0), by=d.get("by", "owner"),
                       reason=d.get("reason"), final=bool(d.get("final", False)))
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptLogError(f"{where} is damaged: {e}") from None


def read(store: ObjectStore, attempt: str) -> TxnRecord | None:
    try:
        got = store.get(record_key(attempt))
    except NotFound:
        return None
    return TxnRecord.from_bytes(got.data, where=record_key(attempt))


def decide(store: ObjectStore, rec: TxnRecord) -> TxnRecord:
    """Create the record; if one exists already, that one is the decision and is returned.

    A write that reports an error is settled by reading the record back; if that fails
    too, ``OutcomeUnknown`` (the decision may stand: the caller must not undo anything)."""
    rec.created = rec.created or time.time()
    data = rec.to_bytes()
    try:
        store.put_if_absent(record_key(rec.attempt), data)
        return rec
    except (PreconditionFailed, StorageError) as e:
        if not isinstance(e, PreconditionFailed) and settle_create(store, record_key(rec.attempt),
                                                                   data, e):
            return rec
        existing = read(store, rec.attempt)
        # deleted between our write and read: only cleanup deletes, after resolution
        if existing is None:
            raise CorruptLogError(f"record {rec.attempt} vanished while deciding") from None
        return existing


def abort(store: ObjectStore, attempt: str, txn: str, reason: str) -> TxnRecord:
    return decide(store,
                  TxnRecord(attempt=attempt, txn=txn, state=ABORTED, by="recovery", reason=reason))


def finish(store: ObjectStore, rec: TxnRecord) -> None:
    """Mark a rolled-forward record done (all table commits and markers written)."""
    rec.state = COMMITTED
    store.put(record_key(rec.attempt), rec.to_bytes())


def of_txn(store: ObjectStore, txn: str) -> list[TxnRecord]:
    """Every record of every attempt of ``txn`` (one LIST)."""
    out = []
    for meta in store.list(f"{TXN_DIR}/{txn}."):
        rest = meta.key[len(TXN_DIR) + 1:]
        if "/" in rest or not rest.endswith(".json"):
            continue
        rec = read(store, rest[:-5])
        if rec is not None:
            out.append(rec)
    return out
