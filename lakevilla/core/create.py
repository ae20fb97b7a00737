"""Creating a table at once (``lake.create_table``, and ``create_table`` without features).

The engine writes the data files first; then version 0 holds protocol, metadata and every
file in one put-if-absent, so the table appears whole or not at all. The name is held by a
reservation (``complex_txn/reservations.py``) meanwhile, so that a transaction creating the same
name cannot decide at the same time. A loser's files are deleted.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ..complex_txn import reservations
from ..data.schemas import rows_as_data, table_spec
from ..delta import column_mapping
from ..delta.actions import Commit
from ..delta.creation import creation_commit, new_metadata
from ..delta.features import protocol_for
from ..delta.identity import with_marks
from ..delta.log import DeltaLog, VersionExists
from ..delta.snapshot import Snapshot
from ..engines import identity
from ..engines.api import TableContext, data_file_key
from ..errors import TableExistsError, TransactionAborted
from ..names import check_table_name
from ..statements.evolution import data_fields
from ..store import NotFound
from .client import LakeClient


def create_now(client: LakeClient, name: str, schema: Any = None,
               partition_by: list[str] | str | None = None, *, data: Any = None,
               properties: dict[str, str] | None = None, if_not_exists: bool = False,
               description: str | None = None) -> Snapshot:
    """Create a plain Delta table at ``<root>/<name>`` (protocol 1/2, no table features).

    ``schema``: a pyarrow schema, a dict or list of fields, a Spark ``StructType`` or a
    DataFrame (its schema; one that holds rows is written as ``data``: see
    ``lakevilla.data.schemas``). ``data``: rows to create the table
    with (the schema defaults to theirs): the engine writes the data files first, then
    version 0 holds protocol, metadata and every file in one put-if-absent, so the table
    appears whole or not at all. A concurrent creator of the same name gets
    ``TableExistsError`` and its files are deleted."""
    check_table_name(name)
    schema, data = rows_as_data(name, schema, data)
    schema, parts = table_spec(name, schema, partition_by, data)
    metadata = new_metadata(schema, parts, properties, description)  # raises for unsupported types
    log = client.log(name)
    if log.latest_version() >= 0:
        if if_not_exists:
            return log.snapshot()
        raise TableExistsError(f"table {name!r} already exists")
    table_id = metadata.id
    adds = []
    if data is not None:
        protocol = protocol_for(schema, metadata.configuration)
        ctx = TableContext(name, client.store, client.root_uri,
                           column_mapping.logical_schema(name, protocol, metadata),
                           tuple(parts)).following(protocol, metadata)
        numbered = identity.absent(ctx, [f.name for f in data_fields(data)])
        adds = client.engine.write(ctx, data)
        n = sum(a.num_records or 0 for a in adds)  # the marks the numbered rows leave
        metadata = with_marks(metadata, {c.name: m for c in numbered
                                         if (m := c.mark_after(n)) is not None})
    commit = creation_commit(metadata, adds, with_data=data is not None)
    # hold the name (reservations.py): a transaction creating it too must not decide meanwhile
    started = client.now()
    res = reservations.Reservation(table=name, holder=f"create-{table_id}",
                                   txn=f"create-{table_id}", kind="table", created=started,
                                   expires=started + client.settings.max_transaction_age)
    try:
        reservations.hold(client.store, res, lambda: log.latest_version() >= 0, now=started)
    except TableExistsError:
        _discard_files(client, name, adds)
        if if_not_exists and log.latest_version() >= 0:
            return log.snapshot()
        raise
    except Exception:
        _discard_files(client, name, adds)
        raise
    try:
        return _write_version_zero(client, log, name, commit, table_id, adds, if_not_exists,
                                   res.expires)
    finally:
        reservations.release(client.store, name, res.holder, "done")

def _write_version_zero(client: LakeClient, log: DeltaLog, name: str, commit: Commit, table_id: str,
                        adds: list, if_not_exists: bool, deadline: float) -> Snapshot:
    if client.now() > deadline:  # our reservation may have been taken over: we must not decide
        _discard_files(client, name, adds)
        raise TransactionAborted(f"creating {name!r} took longer than max_transaction_age; "
                                 "nothing was created", reason="too-old")
    try:
        log.write_commit(0, commit)
    except VersionExists:
        _discard_files(client, name, adds)
        if if_not_exists:
            return log.snapshot()
        raise TableExistsError(f"table {name!r} already exists (created concurrently)") from None
    except Exception:
        # the put may have been applied although it reported a failure: learn whose version 0
        # exists before touching the data files it may reference
        owner = _creator(log, table_id)
        if owner == "theirs":
            _discard_files(client, name, adds)
            if if_not_exists:
                return log.snapshot()
            raise TableExistsError(
                f"table {name!r} already exists (created concurrently)") from None
        if owner != "ours":
            if owner == "absent":
                _discard_files(client, name, adds)
            raise
    return log.snapshot(0)

def _creator(log: DeltaLog, table_id: str) -> str:
    """Who wrote version 0: "ours", "theirs", "absent" or "unknown" (the read failed too)."""
    try:
        c, _ = log.read_commit_raw(0)
    except NotFound:
        return "absent"
    except Exception:  # noqa: BLE001 - the store is failing: the outcome stays unknown
        return "unknown"
    return "ours" if c.metadata is not None and c.metadata.id == table_id else "theirs"

def _discard_files(client: LakeClient, table: str, adds: list) -> None:
    """Best effort: data files no version references (abandoned-file clean-up catches misses)."""
    for a in adds:
        with contextlib.suppress(Exception):
            client.store.delete(data_file_key(table, a.path, client.root_uri))
