"""The contract between lakevilla's protocol code and a data engine.

The protocol decides *which* files an operation reads (snapshot, own writes,
pruning) and *what* goes into the log; the engine only reads and writes Parquet
and evaluates expressions. Protocol modules import this file, never an engine.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import math
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

import pyarrow as pa

from ..delta.actions import AddFile, CdcFile, Metadata
from ..delta.actions import Protocol as DeltaProtocol
from ..delta.constraints import Constraint, constraints_of
from ..delta.features import writes_change_data, writes_deletion_vectors
from ..delta.identity import IdentityColumn, identity_columns
from ..delta.snapshot import Snapshot
from ..errors import SchemaMismatchError
from ..scan.ordering import Ordering
from ..store import ObjectStore
from .merge_plan import BoundedKey, KeyBound, MergePlan, MergeResult

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


@dataclass(frozen=True)
class TableContext:
    """What an engine needs to know about one table."""

    name: str
    store: ObjectStore
    lake_uri: str
    schema: pa.Schema
    partition_columns: tuple[str, ...] = ()
    constraints: tuple[Constraint, ...] = ()  # the rules every written row must satisfy
    write_dvs: bool = False  # DELETE and UPDATE mark rows deleted (deletion vectors)
    write_cdf: bool = False  # statements log their change rows (change data feed)
    identity: tuple[IdentityColumn, ...] = ()  # identity columns, with their high-water marks

    def following(self, protocol: DeltaProtocol, metadata: Metadata,
                  schema: pa.Schema | None = None,
                  partition_columns: tuple[str, ...] | None = None) -> TableContext:
        """This context for the table as ``protocol`` and ``metadata`` now describe it (a new
        snapshot, properties set): what derives from them is derived here only."""
        return dataclasses.replace(
            self, schema=self.schema if schema is None else schema,
            partition_columns=(self.partition_columns if partition_columns is None
                               else partition_columns),
            constraints=constraints_of(metadata),
            write_dvs=writes_deletion_vectors(protocol, metadata),
            write_cdf=writes_change_data(metadata),
            identity=identity_columns(metadata))

    @classmethod
    def of(cls, name: str, store: ObjectStore, lake_uri: str, snapshot: Snapshot) -> TableContext:
        """The context of ``name`` as ``snapshot`` shows it."""
        return cls(name, store, lake_uri, snapshot.schema,
                   tuple(snapshot.partition_columns)).following(snapshot.protocol,
                                                                snapshot.metadata)

    @property
    def location_uri(self) -> str:
        return f"{self.lake_uri.rstrip('/')}/{self.name}"


@dataclass
class RewriteResult:
    removed: list[AddFile] = field(default_factory=list)
    added: list[AddFile] = field(default_factory=list)
    rows: int = 0  # rows updated or deleted
    # change data feed: the change rows (rows, ``_change_type``) gathered while rewriting, and
    # the ``_change_data/`` files they were written to
    changes: list[tuple[pa.Table, str]] = field(default_factory=list, repr=False)
    cdc: list[CdcFile] = field(default_factory=list)
    marks: dict[str, int] = field(default_factory=dict)  # identity marks after a merge's inserts


# the columns ``lake.changes`` adds to a table's own: what changed, in which version, when, by
# which lakevilla transaction (null for other writers)
CHANGE_META = [("_change_type", pa.string()), ("_commit_version", pa.int64()),
               ("_commit_timestamp", pa.timestamp("ms", tz="UTC")), ("_lakevilla_txn", pa.string())]


@dataclass(frozen=True)
class CommitFiles:
    """The files of one commit a change feed reads (``lake.changes``): its ``cdc`` files when it
    has any, else the data files it removed (as the logical files they were) and added."""

    version: int
    time: float  # the version's time, seconds since the epoch
    txn: str | None  # the lakevilla transaction that wrote it
    cdc: tuple[CdcFile, ...] = ()
    removed: tuple[AddFile, ...] = ()
    added: tuple[AddFile, ...] = ()


class MergeSource(Protocol):
    """A MERGE's source rows where the engine keeps them (a pyarrow table, a Spark DataFrame):
    the statement sees its schema, the bounds of its join keys and where it was staged, never
    its rows."""

    @property
    def schema(self) -> pa.Schema:
        """Its columns, in Arrow types (checked against the target before any row is read)."""

    @property
    def staged(self) -> tuple[str, ...]:
        """The store keys of its staged copy (redo and resume read it); () until staged."""

    def key_bounds(self, keys: list[BoundedKey]) -> dict[str, KeyBound]:
        """Each key's bound, by source column (``prune_predicate``)."""

    def materialized(self, ctx: TableContext, stage_at: str | None) -> MergeSource:
        """The source fixed for the statement's lifetime, so that every use sees the same rows:
        staged under the key prefix ``stage_at`` when given (the transaction keeps sublogs),
        else held however the engine holds rows. A source already fixed returns itself."""

    def stage(self, ctx: TableContext, at: str) -> MergeSource:
        """The source with a copy written under the key prefix ``at`` (a logical entry names it);
        itself when staged already."""


class Engine(Protocol):
    name: str
    writes_change_data: bool  # it writes change data files (change data feed tables)

    def validate_where(self, ctx: TableContext, where: str) -> None: ...

    def validate_set(self, ctx: TableContext, assignments: dict[str, str],
                     where: str | None) -> None: ...

    def write(self, ctx: TableContext, data: Any) -> list[AddFile]:
        """Write ``data`` as new data files of the table; nothing is committed."""

    def scan(self, ctx: TableContext, files: list[AddFile], where: str | None,
             columns: list[str] | None, order: Ordering | None = None) -> Any:
        """Rows of ``files`` satisfying ``where`` (pyarrow.Table, or the engine's DataFrame),
        the first ``order.limit`` of them in ``order`` when given (``ordering.py``)."""

    def rewrite(self, ctx: TableContext, files: list[AddFile], where: str | None,
                assignments: dict[str, str] | None) -> RewriteResult:
        """Update (``assignments``) or delete (None) the rows matching ``where`` in ``files``;
        files without a matching row are left alone."""

    def merge_source(self, data: Any) -> MergeSource:
        """``data`` (any shape ``txn.merge`` takes) as this engine's merge source."""

    def staged_merge_source(self, ctx: TableContext, keys: tuple[str, ...]) -> MergeSource:
        """A source staged before (``MergeSource.staged``), for a redo in another process."""

    def merge(self, ctx: TableContext, files: list[AddFile], plan: MergePlan,
              source: MergeSource) -> tuple[RewriteResult, MergeResult]:
        """MERGE ``source`` into the rows of ``files`` as ``plan`` says; the files removed and
        added, and what each kind of clause did."""

    def num_rows(self, result: Any) -> int: ...

    def change_data(self, ctx: TableContext, removed: list[AddFile],
                    added: list[AddFile]) -> list[CdcFile]:
        """``_change_data/`` files (written, not committed) holding the live rows of ``removed``
        as deletes and of ``added`` as inserts: the change rows of a statement that wrote none
        (an insert, an overwrite) when its commit needs them in files (``change_data.py``)."""

    def change_rows(self, ctx: TableContext, commits: list[CommitFiles]) -> Any:
        """The change rows of ``commits`` (oldest first), as ``lake.changes`` returns them: the
        table's columns then ``CHANGE_META`` (a pyarrow Table, or the engine's DataFrame).
        A commit with ``cdc`` files is those rows; the others are derived from the files
        removed and added: a multiset difference of their live rows each way, per commit."""

    def check_rows(self, ctx: TableContext, files: list[AddFile]) -> None:
        """Rows written before (kept across a redo) checked by the table's rules (``ctx``):
        ``ConstraintViolationError`` for the first that breaks one."""


# -- helpers shared by engines ------------------------------------------------

def partition_value_string(v: Any, column: str = "") -> str | None:
    """A partition value as Delta serialises it in ``partitionValues`` (PROTOCOL.md, "Partition
    Value Serialization"). An empty string (or binary) is written as null: Delta (and every
    reader) reads ``''`` there as null, so the row reads back with a null partition value, as it
    does when Spark or delta-rs writes it. Binary is the UTF-8 text of the bytes, as Spark writes
    it and delta-rs reads it; bytes that are not UTF-8 have no such text and are refused."""
    if v is None or v == "" or v == b"":
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.UTC).replace(tzinfo=None)
        return v.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return repr(v)
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    if isinstance(v, bytes | bytearray | memoryview):
        try:
            return bytes(v).decode("utf-8")
        except UnicodeDecodeError:
            raise SchemaMismatchError(f"partition column {column!r}: the binary "
                                      f"value {bytes(v)[:32]!r} is not UTF-8 text; Delta stores "
                                      "partition values as text, so binary partition values "
                                      "must be valid UTF-8") from None
    return str(v)


def _hive_escape(s: str) -> str:
    return "".join(ch if ch in _SAFE else "".join(f"%{b:02X}" for b in ch.encode()) for ch in s)


def new_data_file_path(partition_values: dict[str, str | None],
                       partition_columns: tuple[str, ...] | list[str]) -> str:
    """A fresh relative file path (as stored in the add action: URI-encoded)."""
    parts = [f"{c}={_hive_escape(v) if (v := partition_values.get(c)) is not None else HIVE_NULL}"
             for c in partition_columns]
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    return quote("/".join([*parts, name]), safe="/=")


def now_ms() -> int:
    return int(dt.datetime.now(dt.UTC).timestamp() * 1000)


def data_file_key(ctx_name: str, path: str, lake_uri: str) -> str:
    """The store key of a data file named by an add/remove ``path``."""
    from urllib.parse import unquote

    if "://" in path:
        root = lake_uri.rstrip("/") + "/"
        if not path.startswith(root):
            raise ValueError(f"data file {path!r} lies outside the lake root {lake_uri!r}")
        return unquote(path[len(root):])
    return f"{ctx_name}/{unquote(path)}"
