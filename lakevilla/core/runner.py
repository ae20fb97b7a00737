"""Running a transaction's statements against its views (every feature set with markers).

The first statement on a table fixes the snapshot it reads (the newest, or under I the version
of the transaction's cut: the reader part). A statement is checked, run by the engine against
the table's view, and logged: a read rides along with the next sublog entry, a write gets an
entry (with R) and, where markers are claimed at the first write, a marker. Nothing reaches a
table's log before commit; the decider writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from .. import parallel
from ..data.schemas import table_spec
from ..delta.creation import creation_commit, new_metadata
from ..delta.features import check_readable, protocol_for
from ..delta.files import FileSet
from ..delta.snapshot import Snapshot
from ..engines.api import TableContext
from ..errors import InvalidArgumentError, TableExistsError
from ..recovery.journal import Journal
from ..statements.view import TableWork
from .context import TxnContext
from .markerset import MarkerSet
from .read_wait import NoReadWait

if TYPE_CHECKING:
    import pyarrow as pa

    from ..delta.log import DeltaLog
    from ..statements.base import Statement


class Reader(Protocol):
    """Which snapshot a transaction reads a table at (``precheck``: the statement's checks
    against the newest snapshot, for a reader that must refuse bad input before it reads)."""

    def snapshot(self, name: str, log: DeltaLog,
                 precheck: Callable[[Snapshot], None]) -> Snapshot: ...

    def report(self) -> dict[str, Any]: ...


class NewestReader:
    def snapshot(self, name: str, log: DeltaLog, precheck: Callable[[Snapshot], None]) -> Snapshot:
        return log.snapshot()

    def report(self) -> dict[str, Any]:
        return {}


class ClaimLater:
    """Markers are claimed at commit (CT, I: all at once; R alone, or CT writing one table, at the
    tail: only to queue). Whether a predecessor will make a statement's entry logical is not
    known yet, so an update or delete carries its statement anyway."""

    def __init__(self, markers: MarkerSet, journal: Journal) -> None:
        self.markers = markers
        self.journal = journal

    def after_write(self, tw: TableWork, op: Statement) -> None:
        self.journal.statement(tw, op, self.journal.together_with_claim(op))

    def resumed(self, tw: TableWork) -> None:
        pass


class ClaimAtFirstWrite(ClaimLater):
    """R in place: the fill goes into the marker's version, so the marker is claimed at the
    first write. Its first entry goes out together with the claim (one round trip, not two),
    except a MERGE's, which stages its source first."""

    def after_write(self, tw: TableWork, op: Statement) -> None:
        if tw.marker is None and tw.creating is None:
            if self.journal.together_with_claim(op):
                parallel.together(lambda: self.markers.claim_first(tw),
                                  lambda: self.journal.statement(tw, op, True))
                return
            self.markers.claim_first(tw)
        self.journal.statement(tw, op, False)

    def resumed(self, tw: TableWork) -> None:
        if tw.written:
            self.markers.claim([tw])


class StatementRunner:
    def __init__(self, ctx: TxnContext, markers: MarkerSet, journal: Journal, claims: ClaimLater,
                 reader: Reader, creates_tables: bool, read_wait: NoReadWait | None = None) -> None:
        self.ctx = ctx
        self.markers = markers
        self.journal = journal
        self.claims = claims
        self.reader = reader
        self.creates_tables = creates_tables
        self.read_wait = read_wait if read_wait is not None else NoReadWait()

    def table_context(self, name: str, snap: Snapshot) -> TableContext:
        client = self.ctx.client
        return TableContext.of(name, client.store, client.root_uri, snap)

    def table(self, name: str, op: Statement | None = None) -> TableWork:
        """The view of ``name`` (made at the first statement on it)."""
        tw = self.ctx.tables.get(name)
        if tw is not None:
            return tw
        log = self.ctx.client.log(name)

        def precheck(newest: Snapshot) -> None:
            if op is not None:
                op.check(TableWork(name, log, newest, self.table_context(name, newest)),
                         self.ctx.client.engine, self.ctx.client.store)

        snap = self.reader.snapshot(name, log, precheck)
        if op is not None and self.read_wait.before_first_read(log, snap, op):
            snap = self.reader.snapshot(name, log, precheck)  # after the writers it waited for
        check_readable(name, snap.protocol, snap.metadata)
        tw = TableWork(name, log, snap, self.table_context(name, snap))
        self.ctx.tables[name] = tw
        return tw

    def run(self, op: Statement, data: Any = None) -> Any:
        client = self.ctx.client
        if op.is_write:
            client.check_writable(f"{op.kind} on {op.table!r}")
            self.ctx.last_write = self.ctx.now()  # before its entry: never later than storage's
        self.markers.heartbeat()
        tw = self.table(op.table, op)
        op.check(tw, client.engine, client.store)
        self.journal.prepare(tw, op, client.engine)
        # Bad input fails inside run() before anything is written (the engine cleans up its own
        # partial writes), so the marker comes after: its data is not
        # reachable before commit anyway.
        result = tw.run(client.engine, op, data)
        tw.ops.append(op)
        if op.is_write:
            self.claims.after_write(tw, op)
        else:
            self.journal.read(op.table, tw.base.version, sorted(op.read_files), op.where)
        self.ctx.stats[op.kind] += 1
        return result

    def current_schema(self, table: str) -> pa.Schema:
        """The schema the next statement on ``table`` runs with (its view's)."""
        return self.table(table).schema

    def create_table(self, name: str, schema: Any, partition_by: list[str] | str | None, data: Any,
                     properties: dict[str, str] | None, if_not_exists: bool,
                     description: str | None) -> int | None:
        """Plan the creation of ``name`` in this transaction: its version 0 is written at commit;
        the name is reserved now, so a second creator learns now, not at its commit. None: the
        caller inserts ``data`` next; 0: it exists already and ``if_not_exists``."""
        self.ctx.client.check_writable(f"create_table({name!r})")
        if not self.creates_tables:
            raise InvalidArgumentError(
                "create_table inside a transaction with feature I is not supported yet: create the "
                "table first (lake.create_table) or create it in an 'R' or 'R,CT' transaction")
        ctx = self.ctx
        tw = ctx.tables.get(name)
        log = ctx.client.log(name)
        if tw is not None or log.latest_version() >= 0:
            if if_not_exists:
                return 0
            raise TableExistsError(f"table {name!r} already exists"
                                   + (" (created in this transaction)"
                                      if tw is not None and tw.creating else ""))
        tschema, parts = table_spec(name, schema, partition_by, data)
        metadata = new_metadata(tschema, parts, properties, description)
        snap = Snapshot(name, -1, protocol_for(tschema, metadata.configuration), metadata,
                        FileSet())
        tw = TableWork(name, log, snap, self.table_context(name, snap))
        tw.creating = creation_commit(metadata, [], with_data=False)
        self.markers.hold_name(tw)
        ctx.tables[name] = tw
        self.markers.watch()
        ctx.stats["create_table"] += 1
        return None
