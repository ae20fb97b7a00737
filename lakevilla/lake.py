"""``Lake``: the user's entry point to a lake of Delta tables.

A facade: tables, reads, transactions and recovery. The plumbing every transaction shares
(store, logs, pools, heartbeats, the global log) is ``core/client.py``; maintenance is
``lake.maintenance`` (``maintenance.py``).
"""

from __future__ import annotations

import datetime as dt
import os
import random
import time
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from .core.client import LakeClient
from .core.create import create_now
from .delta import history
from .delta.features import check_readable
from .delta.history import HistoryEntry
from .delta.log import LOG_DIR, not_found
from .delta.snapshot import Snapshot
from .engines.api import TableContext, data_file_key
from .errors import (
    CorruptLogError,
    InvalidArgumentError,
    LakeNotFoundError,
    PartialCommitError,
    SelfWaitError,
    TransactionAborted,
)
from .isolation.units import RecordCache
from .maintenance import DEFAULT_RETENTION, Maintenance, RecoveryReport
from .names import LV_DIR
from .past import changes as past_changes
from .past.consumer import ChangeConsumer
from .past.cut import MomentCut
from .past.position import PositionCut
from .past.view import LakeAt, open_at
from .recovery import resume as resuming
from .scan.ordering import Ordering
from .scan.pruning import candidates
from .settings import DEFAULT_MAX_TRANSACTION_AGE, LakeSettings
from .status import LakeStatus, lake_status
from .store import ObjectStore, ReadOnlyStore, open_store
from .txn.features import ISOLATIONS, parse_features
from .txn.transaction import Transaction

__all__ = ["DEFAULT_RETENTION", "Lake", "RecoveryReport"]


class Lake:
    """A folder (``file://``) or bucket prefix (``s3://``) holding Delta tables.

    ``marker_ttl``: seconds after which an unrefreshed marker counts as stalled.
    ``commit_mode``: ``"tail"`` (default: table commits go to a new version, the marker
    stays an empty version) or ``"in_place"`` (the paper's fill of the marker version).
    ``wait_timeout``: how long a commit waits for earlier markers before aborting (default
    ``2 * marker_ttl``). ``shift_timeout``: how long a CT commit waits without progress before
    shifting its markers (the paper's rule IV). ``max_transaction_age``: seconds after its start
    a transaction may still commit (default one day); maintenance keeps files and records at
    least that long, which is what makes deleting by age safe. ``clock``: a time source, for
    tests and simulations of expiry. ``read_only``: never write (an auditor's client): reads,
    time travel, history, status and read-only transactions work, every write is refused
    before any request (``ReadOnlyLakeError``); its isolated reads see one consistent cut that
    it keeps to itself (``isolation/unannounced.py``). The settings are checked once, into
    ``lake.settings`` (a ``LakeSettings``); assigning one of them on the lake replaces it with a
    checked copy.
    """

    def __init__(
        self,
        root: str,
        storage_options: dict[str, str] | None = None,
        store: ObjectStore | None = None,
        engine: Any = None,
        *,
        marker_ttl: float = 30.0,
        commit_mode: str = "tail",
        wait_timeout: float | None = None,
        shift_timeout: float = 2.0,
        max_retries: int = 10,
        max_shifts: int = 8,
        poll_max: float = 0.05,
        gvl_keep: int = 1000,
        delete_sublogs: bool = True,
        max_transaction_age: float = DEFAULT_MAX_TRANSACTION_AGE,
        group_commit: bool = True,
        clock: Callable[[], float] | None = None,
        read_only: bool = False,
    ) -> None:
        settings = LakeSettings(
            marker_ttl=marker_ttl, commit_mode=commit_mode, wait_timeout=wait_timeout,
            shift_timeout=shift_timeout, max_retries=max_retries, max_shifts=max_shifts,
            poll_max=poll_max, gvl_keep=gvl_keep, delete_sublogs=delete_sublogs,
            max_transaction_age=max_transaction_age, group_commit=group_commit)
        self.store = store if store is not None else open_store(root, storage_options)
        if read_only:
            self.store = ReadOnlyStore(self.store)
        if "://" not in root:
            root = "file://" + os.path.abspath(root)
        self.root_uri = root.rstrip("/")
        self.storage_options = dict(storage_options or {})
        if engine is None:
            from .engines.embedded import EmbeddedEngine

            engine = EmbeddedEngine()
        self.engine = engine
        self._client = LakeClient(self.store, self.root_uri, engine, settings, clock,
                                  read_only=bool(read_only))
        if hasattr(engine, "attach"):
            engine.attach(self)
        self.maintenance = Maintenance(self._client, self.tables)

    @property
    def settings(self) -> LakeSettings:
        """The checked settings (``LakeSettings``); assign one to replace them all."""
        return self._client.settings

    @settings.setter
    def settings(self, value: LakeSettings) -> None:
        if not isinstance(value, LakeSettings):
            raise InvalidArgumentError("settings must be a LakeSettings, "
                                       f"got {type(value).__name__}")
        self._client.settings = value

    # -- settings (``self.settings``; kept readable and replaceable one by one) -------
    @staticmethod
    def _setting(name: str, doc: str) -> property:  # runs at class creation
        def get(self: Lake) -> Any:
            return getattr(self.settings, name)

        def put(self: Lake, value: Any) -> None:
            self.settings = self.settings.with_(**{name: value})
        return property(get, put, doc=doc)

    marker_ttl = _setting("marker_ttl",
                          "seconds after which an unrefreshed marker counts as stalled")
    commit_mode = _setting("commit_mode", "tail or in_place")
    shift_timeout = _setting("shift_timeout", "rule IV's patience (seconds)")
    max_retries = _setting("max_retries", "lost commit races before an abort")
    max_shifts = _setting("max_shifts", "rule IV shifts before an abort")
    poll_max = _setting("poll_max", "longest pause between two looks at a predecessor, per "
                                    "transaction queued ahead")
    gvl_keep = _setting("gvl_keep", "global-log entries clean-up keeps")
    delete_sublogs = _setting("delete_sublogs",
                              "remove a finished transaction's sublogs right away")
    max_transaction_age = _setting("max_transaction_age",
                                   "seconds after its start a transaction may commit")
    group_commit = _setting("group_commit", "one-table commits to a crowded table go in one "
                                            "version together (lead or ride) instead of racing")
    del _setting

    @property
    def wait_timeout(self) -> float:
        """Seconds a commit waits for earlier markers before it aborts (default twice the ttl)."""
        return self.settings.wait_limit

    @wait_timeout.setter
    def wait_timeout(self, value: float | None) -> None:
        self.settings = self.settings.with_(wait_timeout=value)

    def now(self) -> float:
        """The lake's clock (``clock=`` of the constructor; markers expire by it)."""
        return self._client.now()

    def flush(self) -> None:
        """Wait for this client's background work: marker closes after one-table commits,
        checkpoints, sublog deletes (tests and benchmarks call this before counting)."""
        self._client.flush()

    @staticmethod
    def flush_all() -> None:
        """``flush`` every client of this process (e.g. before reporting which markers are
        still open, when several clients committed)."""
        LakeClient.flush_all()

    def close(self) -> None:
        """Stop this client's heartbeats and wait for its background work."""
        self._client.close()

    def __enter__(self) -> Lake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Lake({self.root_uri!r}, engine={getattr(self.engine, 'name', '?')}, "
                f"commit_mode={str(self.commit_mode)!r})")

    # -- tables ------------------------------------------------------------------
    def create_table(self, name: str, schema: Any = None,
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
        self._client.check_writable(f"create_table({name!r})")
        return create_now(self._client, name, schema, partition_by, data=data,
                          properties=properties, if_not_exists=if_not_exists,
                          description=description)

    def table_exists(self, name: str) -> bool:
        """Whether ``name`` has a Delta log (version 0 at least)."""
        return self._client.log(name).latest_version() >= 0

    def version(self, name: str) -> int:
        """The newest version of ``name`` (``TableNotFoundError`` if it does not exist)."""
        log = self._client.log(name)
        v = log.latest_version()
        if v < 0:
            raise not_found(log)
        return v

    def snapshot(self, name: str, version: int | None = None, *,
                 timestamp: dt.datetime | str | None = None) -> Snapshot:
        """The table's state (protocol, metadata, live files) at ``version``, or as of
        ``timestamp`` (the newest version written at or before it), or the newest one.
        ``VersionNotFoundError`` names the versions that exist."""
        log = self._client.log(name)
        if version is not None and timestamp is not None:
            raise InvalidArgumentError("give version or timestamp, not both")
        if timestamp is not None:
            version = history.version_at(log, timestamp)
        elif version is not None and (not isinstance(version, int) or version > log.known_latest()
                                      or version < 0):
            history.check_version(log, version)
        try:
            snap = log.snapshot(version)
        except CorruptLogError:
            if version is not None:  # below what log clean-up kept: say which versions can be read
                history.check_version(log, version)
            raise
        check_readable(name, snap.protocol, snap.metadata)
        return snap

    def schema(self, name: str) -> pa.Schema:
        """The table's newest schema, as pyarrow."""
        return self.snapshot(name).schema

    def history(self, name: str, limit: int | None = None) -> list[HistoryEntry]:
        """The table's versions, newest first (at most ``limit``): version, UTC time, operation,
        metrics, and the lakevilla transaction and features that wrote it where one did."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            raise InvalidArgumentError(f"limit must be a non-negative integer, got {limit!r}")
        return history.history(self._client.log(name), limit)

    def read(self, name: str, where: str | None = None, *, version: int | None = None,
             timestamp: dt.datetime | str | None = None, columns: list[str] | None = None,
             order_by: str | list[str] | None = None, limit: int | None = None) -> Any:
        """Rows of one table at one version (newest by default; ``version=N``, or
        ``timestamp=`` a datetime or ISO-8601 string for the table as of that moment), outside
        any transaction; ``order_by``/``limit`` as in ``Transaction.read``."""
        order = Ordering.parse(order_by, limit)
        snap = self.snapshot(name, version, timestamp=timestamp)
        ctx = TableContext.of(name, self.store, self.root_uri, snap)
        if where is not None:
            self.engine.validate_where(ctx, where)
        return self.engine.scan(ctx, candidates(snap, where), where, columns, order)

    def at(self, when: dt.datetime | str | int | dict[str, int] | LakeAt) -> LakeAt:
        """Every table as of one consistent cut, read only: ``when`` a UTC datetime or ISO-8601
        string (the newest cut no later than that moment in which every multi-table transaction
        is whole: seen on all of its tables or none), a global-log position (an int: that
        entry's cut), or a cut an earlier view gave (``LakeAt.cut()``: table -> version, e.g.
        a consumer's stored offset). ``.read(table, where=, columns=)``, ``.cut()``,
        ``.tables()``. A moment
        older than clean-up and log retention kept is ``MomentTooOldError`` naming the oldest
        one that can be served. ``past/cut.py`` says how the cut is found."""
        client = self._client
        recs = RecordCache(self.store)
        return open_at(when, moment_cut=lambda m: MomentCut(client.log, recs, m, client.gvl),
                       position_cut=lambda n: PositionCut(client.gvl, client.log, n,
                                                          writable=not client.read_only),
                       reader=self.read, lister=self.tables, missing=self._missing_file)

    def _missing_file(self, name: str, version: int) -> str | None:
        """A data file (or deletion vector file) ``version`` of ``name`` reads that is gone."""
        snap = self.snapshot(name, version)
        for path in snap.files:
            key = data_file_key(name, path, self.root_uri)
            if not self.store.exists(key):
                return key
        return None

    def changes(self, tables: str | list[str], since: Any = None,
                until: Any = None) -> dict[str, Any]:
        """The change rows of ``tables`` after the cut ``since`` up to the cut ``until`` (each a
        moment, a global-log position, a cut or a ``LakeAt``, as for ``at``; ``since=None``:
        from the table's creation, ``until=None``: now), one result per table (a pyarrow
        Table; a DataFrame on the Spark engine, computed by Spark): the row's columns,
        ``_change_type`` (insert, delete, update_preimage, update_postimage),
        ``_commit_version``, ``_commit_timestamp`` and ``_lakevilla_txn``. Both ends are
        consistent cuts, so a multi-table transaction's changes are in the range whole or not
        at all. A commit with a change data feed gives its ``cdc`` files; any other is derived
        from the files it removed (deletes) and added (inserts): an update shows as delete +
        insert."""
        names = [tables] if isinstance(tables, str) else list(tables)
        lo = None if since is None else self.at(since)
        hi = self.at(until if until is not None else dt.datetime.now(dt.UTC))
        return past_changes.changes(self._client.log, self.store, self.root_uri, self.engine,
                                    names, lo, hi, self.snapshot)

    def consumer(self, name: str, tables: str | list[str], *,
                 offsets: str = "lakevilla_offsets") -> ChangeConsumer:
        """A consumer of the changes of ``tables`` that sees each exactly once: ``.run(fn)``
        calls ``fn(txn, changes)`` with the change rows since its last run, in the transaction
        that also stores its new offset (a row of ``offsets``, created when missing). A crash
        or a second run at once never writes outputs twice nor skips a change
        (``past/consumer.py``)."""
        return ChangeConsumer(self, name, [tables] if isinstance(tables, str) else list(tables),
                              offsets)

    def tables(self) -> list[str]:
        """Every Delta table under the root (found by listing; maintenance use)."""
        found = set()
        marker = f"/{LOG_DIR}/"
        for meta in self.store.list(""):
            if meta.key.startswith(LV_DIR + "/"):
                continue
            i = meta.key.find(marker)
            if i > 0:
                found.add(meta.key[:i])
        if not found and not self.store.root_exists():  # looking never creates the root
            raise LakeNotFoundError(f"there is no lake at {self.root_uri}: the folder does not "
                                    "exist (its first write, e.g. create_table, creates it)")
        return sorted(found)

    # -- transactions --------------------------------------------------------------
    def begin(self, features: str | Iterable[str] | None = "R", isolation: str = "serializable",
              slack: int = 0, commit_mode: str | None = None) -> Transaction:
        """A transaction to drive by hand: ``txn.commit()`` or ``txn.abort()``."""
        return Transaction(self._client, parse_features(features), isolation=isolation, slack=slack,
                           commit_mode=commit_mode)

    def transaction(self, features: str | Iterable[str] | None = "R",
                    isolation: str = "serializable", slack: int = 0,
                    commit_mode: str | None = None) -> Transaction:
        """``with lake.transaction(...) as txn:`` commits on exit, aborts on an exception."""
        return self.begin(features, isolation=isolation, slack=slack, commit_mode=commit_mode)

    def run(self, fn: Callable[[Transaction], Any], features: str | Iterable[str] | None = "R", *,
            retries: int = 5, isolation: str = "serializable", slack: int = 0,
            commit_mode: str | None = None) -> Any:
        """Run ``fn(txn)`` in a transaction; re-run it when the transaction aborts.

        With ``features=""`` (no atomicity: each statement commits when it runs) ``fn`` is
        re-run only while none of its statements has committed; after that an abort raises
        ``PartialCommitError`` naming what committed. ``CommitPendingError`` is never retried."""
        if isolation not in ISOLATIONS:
            raise InvalidArgumentError(f"isolation must be one of {ISOLATIONS}")
        delay = 0.01
        for attempt in range(retries + 1):
            txn = self.begin(features, isolation=isolation, slack=slack, commit_mode=commit_mode)
            try:
                with txn:
                    out = fn(txn)
                return out
            except TransactionAborted as e:
                if isinstance(e, SelfWaitError):
                    raise  # re-run, it would wait for the same outer transaction again
                if txn.committed:
                    # features="": each statement committed on its own;
                    # re-running fn would repeat them
                    raise PartialCommitError(
                        f"{e} -- not re-run: with features='' every statement commits on its own, "
                        f"and {', '.join(sorted(txn.committed))} already committed in this run; "
                        "re-running the function would apply those statements twice. Use "
                        "features='R' (or more) for a block that lake.run can retry as a whole",
                        committed=txn.committed, txn_id=txn.id) from e
                if attempt == retries:
                    raise
                time.sleep(random.uniform(0, delay))  # back off before re-running the function
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    def resume(self, txn_id: str) -> Transaction:
        """Continue a transaction whose client crashed, from its sublogs (LV[R])."""
        client = self._client
        return Transaction.resumed(client, txn_id,
                                   resuming.load(client.services(), client.log, client.root_uri,
                                                                    txn_id))

    # -- recovery ---------------------------------------------------------------------
    def recover(self, tables: list[str] | None = None, *, force: bool = False,
                older_than: float | None = None) -> RecoveryReport:
        """Finish or undo every stalled transaction (markers past their expiry, COMMITTING
        records, announced writes not yet in their table). ``force`` ignores expiry: only
        for a lake you know no live client is writing to. ``older_than`` (seconds, 60 at
        least): also roll back every transaction that holds no marker and wrote nothing for
        that long, whose client you declare dead (``status`` shows them ``idle``); one found
        decided is rolled forward."""
        return self.maintenance.recover(tables, force=force, older_than=older_than)

    def status(self, tables: list[str] | None = None, *,
               idle_after: float | None = None) -> LakeStatus:
        """What is going on (read-only): open markers per table; transactions running, waiting,
        stalled, idle (no marker, nothing written for ``idle_after`` seconds, default 60 or the
        marker ttl) or decided but unpublished; the global log's head and horizon. See
        ``status.py``."""
        self.flush()  # markers of our own commits close in the background: report them closed
        return lake_status(self._client, tables, self.tables, idle_after)
