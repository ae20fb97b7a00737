"""What every statement kind shares, and what each one decides for itself.

A statement runs against one table's view (``view.TableWork``) and records what it read,
removed and added: that record is its footprint (the concurrent commits it conflicts with),
its undo (drop what it added, restore what it removed), and, for a declarative statement,
its redo on a newer snapshot. Each kind is one subclass that owns its checks, its execution
through the engine, its footprint and its sublog encoding; ``registry.py`` maps the kind
names written in sublog entries back to the classes. The transaction core asks a statement
what it needs (``is_write``, ``blind``, ``claims_with_entry``, ...), never which kind it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..delta.actions import AddFile, CdcFile
from ..delta.constraints import Constraint
from ..delta.features import check_writable, is_append_only
from ..errors import UnsupportedTableFeatureError
from ..scan.conflicts import Change, Footprint
from ..scan.expressions import check_update
from ..scan.pruning import parse_predicate

if TYPE_CHECKING:
    from ..engines.api import Engine
    from ..store import ObjectStore
    from .view import TableWork


@dataclass(eq=False, kw_only=True)
class Statement:
    """One statement of a transaction on one table (``seq``: its place in the transaction)."""

    kind: ClassVar[str]  # its name in sublog entries and statistics ("update", ...)
    operation: ClassVar[str]  # Delta's commitInfo operation name when it is a commit's only kind
    is_write: ClassVar[bool] = True
    blind: ClassVar[bool] = False  # an append that reads nothing (isBlindAppend, no footprint)
    append_only_ok: ClassVar[bool] = False  # allowed on a table with delta.appendOnly
    compacts: ClassVar[bool] = False  # its removes change no row (dataChange: false)
    # every row it removes it adds back, changed only in its SET columns (an update)
    keeps_rows: ClassVar[bool] = False
    # the engine logs its change rows (change data feed): no cdc file means no row changed,
    # whatever files it rewrote (update, delete, merge)
    logs_changes: ClassVar[bool] = False
    claims_with_entry: ClassVar[bool] = False  # its first entry can go out with a marker claim
    can_be_logical: ClassVar[bool] = True  # its entry can carry the statement for a redo

    seq: int
    table: str
    where: str | None = None
    added: list[AddFile] = field(default_factory=list)
    removed: list[AddFile] = field(default_factory=list)
    cdc: list[CdcFile] = field(default_factory=list)  # its change data files (change data feed)
    read_files: set[str] = field(default_factory=set)
    rows: int = 0
    logical: bool = False  # its sublog entry is logical (redo re-executes it)
    redoable: bool = True  # False for a statement resumed from a physical sublog entry
    # the columns it adds to the table (Delta StructField JSON), once planned: a redo and a
    # resumed run rebuild the same schema from them (evolution.py)
    add_fields: list[dict[str, Any]] | None = None
    # the table rules its new rows were checked by (None: unknown, e.g. resumed from a sublog)
    rules_checked: tuple[Constraint, ...] | None = None

    # -- before it runs ------------------------------------------------------------------
    def check(self, tw: TableWork, engine: Engine, store: ObjectStore) -> None:
        """Refuse bad input before anything is written: the statement's own checks, then the
        table's write rules (protocol features, append-only)."""
        self.check_input(tw, engine, store)
        if not self.is_write:
            return
        check_writable(tw.name, tw.base.protocol, tw.base.metadata)
        if tw.ctx.write_cdf and not getattr(engine, "writes_change_data", False):
            raise UnsupportedTableFeatureError(
                tw.name, "changeDataFeed", f"the {engine.name} engine does not write change data "
                "yet: use the embedded engine")
        if not self.append_only_ok and is_append_only(tw.base.metadata):
            raise UnsupportedTableFeatureError(tw.name, "appendOnly", f"{self.kind} is not allowed")

    def check_input(self, tw: TableWork, engine: Engine, store: ObjectStore) -> None:
        """The statement's expressions against the table (nothing by default)."""

    # -- running ---------------------------------------------------------------------------
    def run(self, tw: TableWork, engine: Engine, data: Any = None, redo: bool = False) -> Any:
        """Execute against the current view: plan and apply added columns, check the
        expressions by the grammar (on every path: a new statement, a redo, one resumed from a
        possibly tampered sublog), then the statement's own work; its effects join the view."""
        self.plan_columns(tw, data)
        self.change_view(tw)
        check_update(tw.schema, tw.name, self.where, self.assignments_to_check())
        result = self.execute(tw, engine, data, redo)
        tw.apply(self)
        return result

    def change_view(self, tw: TableWork) -> None:
        """Its changes of the table's metadata join the view (the columns it adds): on its run,
        and again on a rebase, a redo or a resume, which apply the same change to a newer base."""
        if self.add_fields:
            tw.add_columns(self.add_fields)

    def plan_columns(self, tw: TableWork, data: Any) -> None:
        """Decide ``add_fields`` from the data (schema evolution); nothing by default."""

    def assignments_to_check(self) -> dict[str, str] | None:
        return None

    def execute(self, tw: TableWork, engine: Engine, data: Any, redo: bool) -> Any:
        raise NotImplementedError

    def recheck_kept(self, tw: TableWork, engine: Engine, files: list[AddFile]) -> None:
        """Rows an earlier run wrote and a redo keeps (``kept_files``), checked again when the
        table's rules are not the ones they were checked by (a constraint added meanwhile)."""
        if files and tw.ctx.constraints and tw.ctx.constraints != self.rules_checked:
            engine.check_rows(tw.ctx, files)
        self.rules_checked = tw.ctx.constraints

    def reset_for_redo(self) -> None:
        """Forget the effects of the last run (undone): a redo records them anew."""
        self.added, self.removed, self.read_files, self.cdc = [], [], set(), []

    @property
    def kept_files(self) -> set[str]:
        """Files an undo keeps because a redo writes nothing anew for them (new rows)."""
        return set()

    # -- conflicts -------------------------------------------------------------------------
    def footprint(self) -> Footprint:
        """What a concurrent commit must not invalidate: the files read and removed, and the
        search predicate (a full scan when there is none or the grammar cannot use it)."""
        pred = parse_predicate(self.where)
        return Footprint(
            read_files=set(self.read_files),
            removed_files={a.path for a in self.removed},
            predicate=self.where if pred.node is not None else None,
            full_scan=self.where is None or pred.node is None,
        )

    def change(self) -> Change | None:
        """What committing it may change, for followers about to read (None: no row but the
        ones it adds). Any row and column unless a kind knows less."""
        return Change()

    @property
    def depends_on(self) -> frozenset[str] | None:
        """The columns (lower case) a read's rows depend on; None: every column."""
        return None

    @property
    def comparable(self) -> bool:
        """A read whose rows were kept, so a redo can tell whether it returns the same."""
        return False

    @property
    def consumed(self) -> bool:
        """A read whose rows the client holds and that a redo cannot compare: a conflict
        with it aborts the transaction."""
        return False

    def would_change(self, tw: TableWork, engine: Engine, snapshot: Any) -> bool | None:
        """Whether this read, run on ``snapshot``, returns other rows (None: not such a read)."""
        return None

    # -- sublogs ---------------------------------------------------------------------------
    def prepare(self, tw: TableWork, engine: Engine, stage_at: str | None) -> list[str]:
        """Before it runs: fix its input so that every use sees the same rows (a MERGE's
        source), staged under the key prefix ``stage_at`` when the transaction keeps sublogs
        and the engine stages there; the keys written (deleted with the sublogs)."""
        return []

    def stage(self, store: ObjectStore, txn_id: str) -> list[str]:
        """Write what a recovering client needs to redo this statement beside the sublogs
        (only a MERGE's source so far), if ``prepare`` did not; the keys written."""
        return []

    def staged_keys(self) -> list[str]:
        """The keys of what ``prepare`` or ``stage`` wrote (deleted with the sublogs)."""
        return []

    def options(self) -> dict[str, Any]:
        """The typed settings the sublog entry carries as ``options`` (old entries' shape)."""
        return {"add_fields": self.add_fields} if self.add_fields else {}

    def encode(self, logical: bool) -> dict[str, Any] | None:
        """The ``statement`` of its sublog entry: the declarative statement when the entry is
        logical, and the options (columns added, ...) even when it is physical."""
        opts = self.options()
        if not (logical and self.can_be_logical) and not opts:
            return None
        st: dict[str, Any] = {"where": self.where, "set": None, **self.encode_more()}
        if opts:
            st["options"] = opts
        return st

    def encode_more(self) -> dict[str, Any]:
        return {}

    @classmethod
    def decode(cls, seq: int, table: str, statement: dict[str, Any],
               added: list[AddFile]) -> Statement:
        """The statement of a sublog entry (``statement``: its ``statement`` object or {})."""
        opts = statement.get("options") or {}
        return cls(seq=seq, table=table, where=statement.get("where"), added=added,
                   add_fields=opts.get("add_fields"), **cls.decode_more(statement, added))

    @classmethod
    def decode_more(cls, statement: dict[str, Any], added: list[AddFile]) -> dict[str, Any]:
        return {}

    # -- reporting ---------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """What ``Transaction.operations`` shows of it."""
        return {"kind": self.kind, "table": self.table, "where": self.where, "set": None,
                "rows": self.rows}

    def result(self, out: Any) -> Any:
        """What the public method returns (rows by default)."""
        return self.rows
