"""The commit skeleton every decider shares, and the pieces multi-table decisions share.

A decider is the part that makes a transaction's commit durable; the features choose one when
the transaction starts: each statement on its own (LV[DL], ``per_statement.py``), each table by
its own commit (R, ``per_table.py``), one transaction record (CT, ``complex_txn/decider.py``)
or one global-log entry (I, ``isolation/decider.py``). The skeleton (``Decider.commit``) hands
the written tables to ``decide``; a read-only transaction is finished by ``finish_read_only``.
Multi-table decisions prepare every table (``prepare_all``), build what each table's commit
will hold (``intents``) and, once decided, publish them all (``publish_all``).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..complex_txn import record as records
from ..delta import ict, row_tracking
from ..delta.actions import Commit
from ..engines.api import data_file_key
from ..errors import LakeVillaError, TransactionAborted
from ..markers.marker import COMMITTED, ENGINE_INFO, marker_of
from ..markers.overtake import NeverOvertake
from ..markers.publish import fill_is_safe, publish, publish_create
from ..recovery.journal import Journal
from ..scan.conflicts import first_conflict
from ..vocab import CommitInfo, CommitMode, Decision, InfoKind
from .context import TxnContext
from .markerset import MarkerSet
from .validate import Commits, Validator

if TYPE_CHECKING:
    from ..isolation.gvl import PendingWrite
    from ..statements.view import TableWork


@dataclass
class CommitResult:
    """What a committed transaction did: the version of each table that holds its commit, its
    counters and (I) the global-log entry that announced it. ``partial``: the tables committed
    one by one (no features, or R alone across tables), not all at once."""

    txn_id: str
    versions: dict[str, int] = field(default_factory=dict)  # table -> version that holds our commit
    stats: dict[str, int] = field(default_factory=dict)
    global_version: int | None = None
    partial: bool = False


class Decider:
    """The skeleton; a subclass decides the written tables (``decide``)."""

    # create_table inside the transaction (the global log cannot announce it yet)
    creates_tables = True
    uses_markers = True

    def __init__(self, ctx: TxnContext, markers: MarkerSet, validator: Validator, journal: Journal,
                 overtake: NeverOvertake) -> None:
        self.ctx = ctx
        self.markers = markers
        self.validator = validator
        self.journal = journal
        self.overtake = overtake

    def commit(self) -> CommitResult:
        written = [tw for tw in self.ctx.tables.values() if tw.written]
        if not written:
            return self.finish_read_only()
        return self.decide(written)

    def finish_read_only(self) -> CommitResult:
        return CommitResult(self.ctx.id, {}, dict(self.ctx.stats))

    def decide(self, written: list[TableWork]) -> CommitResult:
        raise NotImplementedError

    # -- after the decision -------------------------------------------------------------------
    def after_table_commit(self, tw: TableWork, version: int) -> None:
        self.ctx.client.checkpoint_if_due(tw.log, version)

    def cleanup_after_commit(self) -> None:
        """Delete, off the latency path, the files redone statements replaced and the sublogs."""
        ctx = self.ctx
        garbage = [(tw.name, p) for tw in ctx.tables.values() for p in tw.intermediate_files()]
        keys = list(self.journal.keys)
        if not garbage and not keys:
            return

        # one request (S3's DeleteObjects) for the redone files and the sublogs of this and the
        # client's other finished transactions (core/deletes.py)
        doomed = [data_file_key(name, p, ctx.client.root_uri) for name, p in garbage]
        ctx.client.deletes.add(doomed + (keys if ctx.settings.delete_sublogs else []))

    def undo(self) -> None:
        """The transaction aborted before any decision: release markers and names, delete the
        data files it wrote and its sublogs. Never raises a LakeVillaError."""
        ctx = self.ctx
        live = [tw for tw in ctx.tables.values() if tw.name not in ctx.committed]
        self.markers.release(live)
        doomed = [data_file_key(tw.name, p, ctx.client.root_uri) for tw in live
                  for p in sorted({p for op in tw.ops for a in op.added for p in a.written_files}
                                  | {c.path for op in tw.ops for c in op.cdc} | tw.garbage)]
        with contextlib.suppress(LakeVillaError):  # a name left reserved still lets the files go
            self.markers.release_names("aborted")
        self.journal.settle()  # an entry still on its way would outlive the delete below
        delete_keys(ctx, doomed + (list(self.journal.keys) if ctx.settings.delete_sublogs else []))

    # -- multi-table decisions ------------------------------------------------------------------
    def prepare_all(self, written: list[TableWork]) -> None:
        """Wait for every predecessor, then validate (and redo) every written table."""
        ctx = self.ctx
        created = [tw for tw in written if tw.creating is not None]
        written = [tw for tw in written if tw.creating is None]  # no marker, nothing to validate
        for _ in range(ctx.settings.max_retries + 1):
            self.markers.wait(written, self.validator.abort_if_doomed)
            # tables in parallel: latency stays flat
            ctx.client.map(self.validator.validate, written)
            if not any(tw.marker is not None and tw.marker.lost for tw in written):
                for tw in created:  # the names we create are ours, and the tables still absent
                    self.markers.hold_name(tw)
                return
            self.markers.check_held(written)
        raise TransactionAborted("could not hold our markers", txn_id=ctx.id, reason="preempted")

    def intents(self, written: list[TableWork]) -> dict[str, records.TableIntent]:
        """Each written table's commit, byte for byte, and where it goes."""
        ctx = self.ctx
        together = sorted(w.name for w in written) if len(written) > 1 else None  # a reader can
        # take the whole transaction without its record

        def one(tw: TableWork) -> tuple[str, records.TableIntent]:
            if tw.creating is not None:
                lv_info = CommitInfo(kind=InfoKind.CREATE, txn=ctx.id, attempt=ctx.attempt,
                                     features=ctx.label, decision=Decision.RECORD,
                                     tables=len(written), txn_tables=together).to_json()
                c = tw.build_commit({"timestamp": ctx.timestamp_ms(), "lakevilla": lv_info})
                return tw.name, records.TableIntent(marker=None, mode=CommitMode.TAIL,
                                                    commit=c.to_bytes().decode(), create=True)
            assert tw.marker is not None
            lv_info = ctx.commit_info(len(written), marker=tw.marker.version, txn_tables=together)
            c = tw.build_commit({"timestamp": ctx.timestamp_ms(), "engineInfo": ENGINE_INFO,
                                 "lakevilla": lv_info})
            fill = ctx.mode == CommitMode.IN_PLACE and self.fill_ok(tw, tw.validated_upto)
            mode = ctx.mode if fill else CommitMode.TAIL
            return tw.name, records.TableIntent(marker=tw.marker.version, mode=mode,
                                                commit=c.to_bytes().decode())

        return dict(ctx.client.map(one, written))

    def fill_ok(self, tw: TableWork, latest: int) -> bool:
        """Whether our commit may fill our marker's version in place (else it goes to the tail)."""
        if tw.marker is None or tw.marker.lost:
            return False
        if tw.metadata is not None and ict.enabled(tw.metadata) \
                and not ict.enabled(tw.base.metadata):
            return False  # the markers above ours have no in-commit timestamp: enable at the tail
        if row_tracking.assigns(tw.protocol or tw.base.protocol, tw.metadata or tw.base.metadata):
            # row ids go past the mark below our version: a client ignoring markers committing
            # above the marker before the fill would take the same ids (docs/protocol.md)
            self.ctx.count("fill_fallback")
            return False
        if not fill_is_safe(tw.log, tw.marker.version, latest):
            self.ctx.count("fill_fallback")
            return False
        # a client ignoring markers that commits between our check and the fill would not have
        # seen our actions; where such clients are active, the tail is the only safe place
        lo = max(tw.read_version - 20, -1)
        for _v, c in tw.log.commits_between(lo, latest):
            if c.lakevilla is None and (c.adds or c.removes):
                self.ctx.count("fill_fallback")
                return False
        return True

    def publish_all(self, intents: dict[str, records.TableIntent] | dict[str, PendingWrite],
                    written: list[TableWork]) -> dict[str, int]:
        """Write every table's decided commit (in parallel); their versions."""
        ctx = self.ctx
        by_name = {tw.name: tw for tw in written}

        def one(name: str) -> tuple[str, int]:
            tw = by_name[name]
            it = intents[name]
            hint = getattr(it, "hint", None)
            if getattr(it, "create", False):
                v = publish_create(tw.log, ctx.attempt, Commit.from_bytes(it.commit.encode()))
                ctx.landed(tw, v)
                return name, v

            def foreign(v: int, c: Commit) -> None:
                hit = first_conflict(tw.footprints(), [(v, c)], tw.schema,
                                     tw.base.partition_columns)
                if hit is not None and marker_of(c) is None:
                    ctx.count("conflicts_after_decision")
                    warnings.warn(f"{name}@{v} was committed by a client that ignores lakevilla "
                                  f"markers after transaction {ctx.id} decided, and conflicts "
                                  f"with it ({hit[2]})", stacklevel=2)

            v = publish(tw.log, ctx.attempt, Commit.from_bytes(it.commit.encode()),
                        marker_version=it.marker, mode=it.mode, hint=hint, on_foreign=foreign)
            ctx.landed(tw, v)
            if v != it.marker:
                ctx.post_commit("close_marker", self.markers.close, tw, v)
            elif tw.marker is not None:
                with tw.marker.lock:
                    tw.marker.payload.state = COMMITTED
            ctx.post_commit("checkpoint", self.after_table_commit, tw, v)
            return name, v

        return dict(ctx.client.map(one, sorted(intents)))


class Deciding:
    """The narrow view of a transaction that a record or global-log decision sees
    (``complex_txn.decide.Deciding``, ``isolation.decide.Announcing``)."""

    def __init__(self, ctx: TxnContext, markers: MarkerSet, validator: Validator) -> None:
        self._ctx = ctx
        self._markers = markers
        self._validator = validator

    @property
    def id(self) -> str:
        return self._ctx.id

    @property
    def attempt(self) -> str:
        return self._ctx.attempt

    @property
    def isolation(self) -> str:
        return self._ctx.isolation

    @property
    def slack(self) -> int:
        return self._ctx.slack

    @property
    def tables(self) -> dict[str, TableWork]:
        return self._ctx.tables

    def check_age(self) -> None:
        self._ctx.check_age()

    def in_doubt(self, what: str | None) -> None:
        self._ctx.in_doubt = what

    def decided(self) -> None:
        self._ctx.decided = True

    def preempted(self) -> None:
        self._ctx.stats["preempted"] += 1
        self._markers.new_attempt()

    def count(self, key: str, n: int = 1) -> None:
        self._ctx.count(key, n)

    def revalidate(self, table: str) -> None:
        self._validator.validate(self._ctx.tables[table])

    def reads_hold(self, table: str, commits: Commits, version: int) -> bool:
        return self._validator.reads_hold(self._ctx.tables[table], commits, version)


def delete_keys(ctx: TxnContext, keys: list[str]) -> None:
    if keys:
        # what is left, abandoned-file deletion and cleanup find
        with contextlib.suppress(LakeVillaError):
            ctx.client.store.delete_many(keys)
