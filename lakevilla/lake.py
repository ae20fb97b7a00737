"""``Lake``: the entry point. Holds the store, the engine, caches and settings."""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from . import logs, reservations
from .creation import creation_commit, new_metadata
from .delta.actions import Commit
from .delta.features import check_readable
from .delta.log import LOG_DIR, DeltaLog, VersionExists
from .delta.snapshot import Snapshot
from .engine_api import data_file_key
from .errors import (
    CorruptLogError,
    CreateConflictError,
    InvalidArgumentError,
    LakeNotFoundError,
    PartialCommitError,
    TableExistsError,
    TableNotFoundError,
    TransactionAborted,
)
from .heartbeats import Heartbeats
from .isolation.gvl import GlobalVersionLog
from .isolation.units import RecordCache
from .markers import RUNNING, is_final, marker_of
from .names import LV_DIR, check_table_name
from .ordering import Ordering
from .parallel import SHARED, pmap
from .plain import DeltaTransaction
from .schemas import table_spec
from .settings import DEFAULT_MAX_TRANSACTION_AGE, LakeSettings
from .store import NotFound, ObjectStore, open_store
from .transaction import ISOLATIONS, Transaction, parse_features

# Maintenance keeps what it might delete for this long by default: Delta VACUUM's default retention.
DEFAULT_RETENTION = 7 * 24 * 3600.0


_LAKES: weakref.WeakSet[Lake] = weakref.WeakSet()  # every client of this process, for flush_all


@dataclass
class RecoveryReport:
    """What ``Lake.recover`` found and did."""

    committed: list[tuple[str, int, str]] = field(default_factory=list)  # (table, marker version, txn attempt)
    freed: list[tuple[str, int, str]] = field(default_factory=list)
    running: list[tuple[str, int, str]] = field(default_factory=list)  # alive: left alone
    records_rolled_forward: list[str] = field(default_factory=list)
    pending_resolved: list[tuple[str, str]] = field(default_factory=list)
    tables_scanned: int = 0
    names_released: list[str] = field(default_factory=list)  # reservations of dead or finished creators
    create_conflicts: list[str] = field(default_factory=list)  # decided creates a foreign writer pre-empted

    def to_json(self) -> dict[str, Any]:
        """Rows as named objects (``lakevilla recover --json``); fields added later pass through."""
        from dataclasses import asdict

        d: dict[str, Any] = asdict(self)
        for k in ("committed", "freed", "running"):
            d[k] = [{"table": t, "version": v, "attempt": a} for t, v, a in getattr(self, k)]
        d["pending_resolved"] = [{"table": t, "attempt": a} for t, a in self.pending_resolved]
        d["acted"] = self.acted
        return d

    @property
    def acted(self) -> int:
        return (len(self.committed) + len(self.freed) + len(self.records_rolled_forward) + len(self.pending_resolved)
                + len(self.names_released))

    def __str__(self) -> str:
        return (f"recovery: {len(self.committed)} rolled forward, {len(self.freed)} rolled back, "
                f"{len(self.running)} still running, {len(self.records_rolled_forward)} records completed, "
                f"{len(self.pending_resolved)} global-log writes completed, {self.tables_scanned} tables scanned"
                + (f", {len(self.names_released)} name reservations released" if self.names_released else "")
                + (f", CREATE CONFLICTS (a client outside lakevilla created a table a decided transaction "
                   f"creates): {self.create_conflicts}" if self.create_conflicts else ""))


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
    tests and simulations of expiry. The settings are checked once, into ``lake.settings`` (a
    ``LakeSettings``); assigning one of them on the lake replaces it with a checked copy.
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
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.settings = LakeSettings(
            marker_ttl=marker_ttl, commit_mode=commit_mode, wait_timeout=wait_timeout, shift_timeout=shift_timeout,
            max_retries=max_retries, max_shifts=max_shifts, poll_max=poll_max, gvl_keep=gvl_keep,
            delete_sublogs=delete_sublogs, max_transaction_age=max_transaction_age)
        self.store = store if store is not None else open_store(root, storage_options)
        if "://" not in root:
            import os

            root = "file://" + os.path.abspath(root)
        self.root_uri = root.rstrip("/")
        self.storage_options = dict(storage_options or {})
        self._clock = clock or time.time
        self._missed_checkpoints: set[str] = set()
        self._pool = SHARED
        self._bg = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakevilla-bg")
        self._bg_futures: list[Future] = []
        self._logs: dict[str, DeltaLog] = {}
        self._lock = threading.Lock()
        self.gvl = GlobalVersionLog(self.store)
        self.records = RecordCache(self.store)  # decided transaction records, for LV[I] cuts
        if engine is None:
            from .engines.embedded import EmbeddedEngine

            engine = EmbeddedEngine()
        self.engine = engine
        if hasattr(engine, "attach"):
            engine.attach(self)
        # keeps this client's markers alive; a TTL set later takes effect at the next round
        self.heartbeats = Heartbeats(lambda: max(min(self.marker_ttl / 4, 2.0), 0.01))
        _LAKES.add(self)

    # -- settings (``self.settings``; kept readable and replaceable one by one) -------
    def _setting(name: str, doc: str) -> property:  # noqa: N805 - runs at class creation
        def get(self: Lake) -> Any:
            return getattr(self.settings, name)

        def put(self: Lake, value: Any) -> None:
            self.settings = self.settings.with_(**{name: value})
        return property(get, put, doc=doc)

    marker_ttl = _setting("marker_ttl", "seconds after which an unrefreshed marker counts as stalled")
    commit_mode = _setting("commit_mode", "tail or in_place")
    shift_timeout = _setting("shift_timeout", "rule IV's patience (seconds)")
    max_retries = _setting("max_retries", "lost commit races before an abort")
    max_shifts = _setting("max_shifts", "rule IV shifts before an abort")
    poll_max = _setting("poll_max", "longest pause between two looks at a predecessor, per transaction queued ahead")
    gvl_keep = _setting("gvl_keep", "global-log entries clean-up keeps")
    delete_sublogs = _setting("delete_sublogs", "remove a finished transaction's sublogs right away")
    max_transaction_age = _setting("max_transaction_age", "seconds after its start a transaction may commit")
    del _setting

    @property
    def wait_timeout(self) -> float:
        return self.settings.wait_limit

    @wait_timeout.setter
    def wait_timeout(self, value: float | None) -> None:
        self.settings = self.settings.with_(wait_timeout=value)

    # -- plumbing ----------------------------------------------------------------
    def now(self) -> float:
        return self._clock()

    def log(self, table: str) -> DeltaLog:
        check_table_name(table)
        with self._lock:
            lg = self._logs.get(table)
            if lg is None:
                lg = DeltaLog(self.store, table, executor=self._pool, is_final=is_final)
                self._logs[table] = lg
            return lg

    def map(self, fn: Callable, items: Iterable) -> list:
        return pmap(fn, items)

    def background(self, fn: Callable[[], None]) -> None:
        """Best-effort clean-up off the commit's latency path."""
        def safe() -> None:
            with contextlib.suppress(BaseException):  # includes a simulated crash of this client
                fn()

        with self._lock:
            self._bg_futures = [f for f in self._bg_futures if not f.done()]
            self._bg_futures.append(self._bg.submit(safe))

    def flush(self) -> None:
        """Wait for this client's background work: marker closes after one-table commits,
        checkpoints, sublog deletes (tests and benchmarks call this before counting)."""
        with self._lock:
            futs = list(self._bg_futures)
        for f in futs:
            f.result()

    @staticmethod
    def flush_all() -> None:
        """``flush`` every ``Lake`` of this process (e.g. before reporting which markers are
        still open, when several clients committed)."""
        for lake in list(_LAKES):
            lake.flush()

    def services(self):
        from .recovery.stalled import Services

        return Services(store=self.store, log_for=self.log, gvl=self.gvl, now=self.now)

    def close(self) -> None:
        self.heartbeats.stop()
        self.flush()
        self._bg.shutdown(wait=True)

    def __enter__(self) -> Lake:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Lake({self.root_uri!r}, engine={getattr(self.engine, 'name', '?')}, commit_mode={str(self.commit_mode)!r})"

    # -- tables ------------------------------------------------------------------
    def create_table(self, name: str, schema: Any = None, partition_by: list[str] | str | None = None, *,
                     data: Any = None, properties: dict[str, str] | None = None, if_not_exists: bool = False,
                     description: str | None = None) -> Snapshot:
        """Create a plain Delta table at ``<root>/<name>`` (protocol 1/2, no table features).

        ``schema``: a pyarrow schema, a dict or list of fields, a Spark ``StructType`` or a
        DataFrame (its schema; see ``lakevilla.schemas``). ``data``: rows to create the table
        with (the schema defaults to theirs): the engine writes the data files first, then
        version 0 holds protocol, metadata and every file in one put-if-absent, so the table
        appears whole or not at all. A concurrent creator of the same name gets
        ``TableExistsError`` and its files are deleted."""
        check_table_name(name)
        schema, parts = table_spec(name, schema, partition_by, data)
        metadata = new_metadata(schema, parts, properties, description)  # raises for unsupported types
        log = self.log(name)
        if log.latest_version() >= 0:
            if if_not_exists:
                return log.snapshot()
            raise TableExistsError(f"table {name!r} already exists")
        table_id = metadata.id
        adds = []
        if data is not None:
            from .engine_api import TableContext

            ctx = TableContext(name, self.store, self.root_uri, schema, tuple(parts))
            adds = self.engine.write(ctx, data)
        commit = creation_commit(metadata, adds, with_data=data is not None)
        # hold the name (reservations.py): a transaction creating it too must not decide meanwhile
        started = self.now()
        res = reservations.Reservation(table=name, holder=f"create-{table_id}", txn=f"create-{table_id}",
                                       kind="table", created=started, expires=started + self.max_transaction_age)
        try:
            reservations.hold(self.store, res, lambda: log.latest_version() >= 0, now=started)
        except TableExistsError:
            self._discard_files(name, adds)
            if if_not_exists and log.latest_version() >= 0:
                return log.snapshot()
            raise
        except Exception:
            self._discard_files(name, adds)
            raise
        try:
            return self._write_version_zero(log, name, commit, table_id, adds, if_not_exists, res.expires)
        finally:
            reservations.release(self.store, name, res.holder, "done")

    def _write_version_zero(self, log: DeltaLog, name: str, commit: Commit, table_id: str, adds: list,
                            if_not_exists: bool, deadline: float) -> Snapshot:
        if self.now() > deadline:  # our reservation may have been taken over: we must not decide
            self._discard_files(name, adds)
            raise TransactionAborted(f"creating {name!r} took longer than max_transaction_age; nothing was created",
                                     reason="too-old")
        try:
            log.write_commit(0, commit)
        except VersionExists:
            self._discard_files(name, adds)
            if if_not_exists:
                return log.snapshot()
            raise TableExistsError(f"table {name!r} already exists (created concurrently)") from None
        except Exception:
            # the put may have been applied although it reported a failure: learn whose version 0
            # exists before touching the data files it may reference
            owner = self._creator(log, table_id)
            if owner == "theirs":
                self._discard_files(name, adds)
                if if_not_exists:
                    return log.snapshot()
                raise TableExistsError(f"table {name!r} already exists (created concurrently)") from None
            if owner != "ours":
                if owner == "absent":
                    self._discard_files(name, adds)
                raise
        return log.snapshot(0)

    @staticmethod
    def _creator(log: DeltaLog, table_id: str) -> str:
        """Who wrote version 0: "ours", "theirs", "absent" or "unknown" (the read failed too)."""
        try:
            c, _ = log.read_commit_raw(0)
        except NotFound:
            return "absent"
        except Exception:  # noqa: BLE001 - the store is failing: the outcome stays unknown
            return "unknown"
        return "ours" if c.metadata is not None and c.metadata.id == table_id else "theirs"

    def _discard_files(self, table: str, adds: list) -> None:
        """Best effort: data files no version references (abandoned-file clean-up catches misses)."""
        for a in adds:
            with contextlib.suppress(Exception):
                self.store.delete(data_file_key(table, a.path, self.root_uri))

    def table_exists(self, name: str) -> bool:
        return self.log(name).latest_version() >= 0

    def version(self, name: str) -> int:
        v = self.log(name).latest_version()
        if v < 0:
            raise TableNotFoundError(f"table {name!r} does not exist")
        return v

    def snapshot(self, name: str, version: int | None = None) -> Snapshot:
        snap = self.log(name).snapshot(version)
        check_readable(name, snap.protocol, snap.metadata)
        return snap

    def schema(self, name: str) -> pa.Schema:
        return self.snapshot(name).schema

    def read(self, name: str, where: str | None = None, *, version: int | None = None,
             columns: list[str] | None = None, order_by: str | list[str] | None = None,
             limit: int | None = None) -> Any:
        """Rows of one table at one version (newest by default), outside any transaction;
        ``order_by``/``limit`` as in ``Transaction.read``."""
        from .engine_api import TableContext

        order = Ordering.parse(order_by, limit)
        snap = self.snapshot(name, version)
        ctx = TableContext(name, self.store, self.root_uri, snap.schema, tuple(snap.partition_columns))
        if where is not None:
            self.engine.validate_where(ctx, where)
        return self.engine.scan(ctx, snap.candidates(where), where, columns, order)

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
    def begin(self, features: str | Iterable[str] | None = "R", isolation: str = "serializable", slack: int = 0,
              commit_mode: str | None = None) -> Transaction:
        """A transaction to drive by hand: ``txn.commit()`` or ``txn.abort()``."""
        feats = parse_features(features)
        kind = Transaction if feats else DeltaTransaction  # plain Delta: every statement commits alone
        return kind(self, feats, isolation=isolation, slack=slack, commit_mode=commit_mode)

    def transaction(self, features: str | Iterable[str] | None = "R", isolation: str = "serializable",
                    slack: int = 0, commit_mode: str | None = None) -> Transaction:
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
                if not txn.uses_markers and txn._dl_versions:
                    # features="": each statement committed on its own; re-running fn would repeat them
                    raise PartialCommitError(
                        f"{e} -- not re-run: with features='' every statement commits on its own, and "
                        f"{', '.join(sorted(txn._dl_versions))} already committed in this run; re-running the "
                        "function would apply those statements twice. Use features='R' (or more) for a block "
                        "that lake.run can retry as a whole", committed=dict(txn._dl_versions), txn_id=txn.id) from e
                if attempt == retries:
                    raise
                time.sleep(random.uniform(0, delay))  # back off before re-running the function
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    def resume(self, txn_id: str) -> Transaction:
        """Continue a transaction whose client crashed, from its sublogs (LV[R])."""
        from .transaction import resume_transaction

        return resume_transaction(self, txn_id)

    # -- checkpoints ---------------------------------------------------------------
    def checkpoint_if_due(self, log: DeltaLog, version: int) -> None:
        """After a commit: a checkpoint when one is due, or when an earlier one failed (retried
        by the next commit of this client). Raises if writing it fails (the caller counts it)."""
        try:
            config = log.snapshot(version, list_log=False).metadata.configuration
        except Exception:  # noqa: BLE001 - checkpoints are an optimisation
            return
        if not (log.checkpoint_due(version, config) or log.table in self._missed_checkpoints):
            return
        if self._open_marker(log, version) is not None:
            return  # never checkpoint at or above an open marker
        try:
            log.write_checkpoint(log.snapshot(version, list_log=False))
        except BaseException:
            self._missed_checkpoints.add(log.table)
            raise
        self._missed_checkpoints.discard(log.table)
        logs.maintenance("checkpoint", "checkpoint of %s at version %d", log.table, version, level=logging.DEBUG)

    @staticmethod
    def _open_marker(log: DeltaLog, version: int) -> int | None:
        """A running marker at or below ``version`` (since the last checkpoint), read fresh.

        Called *before* the checkpoint's snapshot is built: if every version read here is
        final (no running marker), none of them can change any more, so the snapshot built
        afterwards is exact. Built the other way round, an in-place fill landing between the
        snapshot and this check would be hidden by the checkpoint."""
        lo = max(log.last_checkpoint_version(), version - 500)
        for v, c in log.commits_between(lo, version):
            m = marker_of(c)
            if m is None or m.state != RUNNING:
                continue
            try:  # a cached marker may have closed since (a tail marker's content is cached as final)
                m = marker_of(log.read_commit_raw(v)[0])
            except NotFound:
                continue
            if m is not None and m.state == RUNNING:
                return v
        return None

    def checkpoint(self, name: str) -> int:
        """Write a checkpoint at the newest version (refused above an open marker)."""
        self.flush()  # our own last commit's marker closes in the background: not an open one
        log = self.log(name)
        v = log.latest_version()
        mv = self._open_marker(log, v)
        if mv is not None:
            raise InvalidArgumentError(f"{name}@{mv} is an open marker; a checkpoint now could hide its commit")
        log.write_checkpoint(log.snapshot(v))
        return v

    # -- recovery and maintenance -----------------------------------------------------
    def recover(self, tables: list[str] | None = None, *, force: bool = False) -> RecoveryReport:
        """Finish or undo every stalled transaction (markers past their expiry, COMMITTING
        records, announced writes not yet in their table). ``force`` ignores expiry: only
        for a lake you know no live client is writing to."""
        from .complex_txn import record as records
        from .isolation import resolve as gvl_resolve
        from .names import TXN_DIR
        from .recovery.stalled import resolve_marker, roll_forward_record

        report = RecoveryReport()
        svc = self.services()
        for meta in list(self.store.list(f"{TXN_DIR}/")):
            rest = meta.key[len(TXN_DIR) + 1:]
            if "/" in rest or not rest.endswith(".json"):
                continue
            rec = records.read(self.store, rest[:-5])
            if rec is not None and rec.state == records.COMMITTING:
                try:
                    roll_forward_record(svc, rec)
                except CreateConflictError as e:
                    report.create_conflicts.append(f"{rec.attempt}: {e}")
                    logs.maintenance("create_conflict", "%s", e, level=logging.ERROR)
                    continue
                report.records_rolled_forward.append(rec.attempt)
        head = self.gvl.head()
        if head is not None:
            for t, p in head.pending.items():
                if gvl_resolve.find_pending(self.log(t), p) is None:
                    gvl_resolve.resolve(self.log(t), head, t, patience=0.0)
                    report.pending_resolved.append((t, p.attempt))
        now = self.now()
        for res, _etag in reservations.all_reservations(self.store):
            if res.state != reservations.HELD or (tables is not None and res.table not in tables):
                continue
            if self.log(res.table).latest_version() >= 0 or reservations.dead(self.store, res, now, force=force):
                reservations.release(self.store, res.table, res.holder, "recovered")
                report.names_released.append(res.table)
        for t in (tables if tables is not None else self.tables()):
            log = self.log(t)
            latest = log.latest_version()
            if latest < 0:
                continue
            report.tables_scanned += 1
            lo = max(-1, latest - 1000, log.last_checkpoint_version() - 1)
            for v, c in log.commits_between(lo, latest):
                m = marker_of(c)
                if m is None or m.state != RUNNING:
                    continue
                res = resolve_marker(svc, t, v, force=force)
                row = (t, v, res.attempt)
                if res.outcome == "committed":
                    report.committed.append(row)
                elif res.outcome == "freed":
                    report.freed.append(row)
                elif res.outcome == "running":
                    report.running.append(row)
        logs.maintenance("recovery_report", "%s", report, level=logging.INFO if report.acted else logging.DEBUG, **report.to_json())
        return report

    def status(self, tables: list[str] | None = None):
        """What is going on (read-only): open markers per table; transactions running, waiting,
        stalled or decided but unpublished; the global log's head and horizon. See ``status.py``."""
        from .status import lake_status

        self.flush()  # markers of our own commits close in the background: report them closed
        return lake_status(self, tables)

    # -- maintenance that deletes: it consults live state and keeps a retention --------------
    def _check_retention(self, seconds: float, what: str, force: bool) -> float:
        seconds = float(seconds)
        if seconds < 0:
            raise InvalidArgumentError(f"{what} must be >= 0 seconds")
        if seconds < self.max_transaction_age and not force:
            raise InvalidArgumentError(
                f"{what}={seconds:g}s is shorter than this lake's max_transaction_age ({self.max_transaction_age:g}s): "
                "a transaction still running could lose its files or its records. Pass force=True only if every "
                f"client writing to this lake uses a max_transaction_age below {seconds:g}s")
        return seconds

    def _live_files(self) -> set[str]:
        """Keys of data files that live or decided transactions name but that no version may
        reference yet: files in sublogs still present, in COMMITTING records, in pending
        global-log writes. Read *before* the table logs: a decision published meanwhile then
        shows up in one or the other, never in neither."""
        from .complex_txn import record as records
        from .names import TXN_DIR
        from .recovery.sublog import SublogEntry

        keys: set[str] = set()

        def add_commit(table: str, commit_text: str) -> None:
            for a in Commit.from_bytes(commit_text.encode()).adds:
                keys.add(data_file_key(table, a.path, self.root_uri))

        for meta in list(self.store.list(f"{TXN_DIR}/")):
            rest = meta.key[len(TXN_DIR) + 1:]
            if not rest.endswith(".json"):
                continue
            if "/" in rest:  # a sublog entry: its owner deletes it only once finished
                try:
                    e = SublogEntry.from_json(json.loads(self.store.get(meta.key).data))
                except NotFound:
                    continue
                except (ValueError, TypeError) as err:
                    raise CorruptLogError(f"sublog {meta.key} is damaged ({err}); maintenance will not guess "
                                          "which files it protects") from None
                for a in e.added:
                    keys.add(data_file_key(e.table, a["path"], self.root_uri))
                continue
            rec = records.read(self.store, rest[:-5])
            if rec is not None and rec.state == records.COMMITTING:
                for t, intent in rec.tables.items():
                    add_commit(t, intent.commit)
        head = self.gvl.head()
        if head is not None:
            for t, p in head.pending.items():
                add_commit(t, p.commit)
        return keys

    def abandoned_files(self, table: str | None = None, *, min_age: float | None = None,
                        force: bool = False) -> list[tuple[str, str]]:
        """Data files that no version references and no live transaction names: what aborted
        and crashed transactions left behind, as (table, key).

        ``min_age`` (seconds, default ``DEFAULT_RETENTION``: 7 days, Delta VACUUM's default)
        keeps younger files: a transaction may have written a file and not yet logged it.
        A value below ``max_transaction_age`` is refused unless ``force=True``. Files named
        by sublogs, COMMITTING records or pending global-log writes are never listed, nor
        files of tables nested inside ``table``."""
        retention = self._check_retention(DEFAULT_RETENTION if min_age is None else min_age, "min_age", force)
        live = self._live_files()
        now = self.now()
        out = []
        # names a transaction reserved to create: files of a table never created (aborted, or its
        # creator died) live under a folder without a log; younger than the retention they may
        # still be a live transaction's, older ones no transaction can commit any more
        reserved = {r.table for r, _ in reservations.all_reservations(self.store)}
        for t in ([table] if table else sorted(set(self.tables()) | reserved)):
            log = self.log(t)
            latest = log.latest_version()
            referenced: set[str] = set()
            if latest < 0 and t not in reserved:
                continue
            if latest >= 0:
                snap = log.snapshot(latest)
                referenced = set(snap.files) | set(snap.tombstones)
                lo = max(-1, log.last_checkpoint_version() - 1)
                for _v, c in log.commits_between(lo, latest):
                    referenced.update(a.path for a in c.adds)
                    referenced.update(r.path for r in c.removes)
            keys = {data_file_key(t, p, self.root_uri) for p in referenced}
            prefix = t + "/"
            metas = list(self.store.list(prefix))
            marker = f"/{LOG_DIR}/"
            nested = {m.key[len(prefix):][:i] + "/" for m in metas
                      if (i := m.key[len(prefix):].find(marker)) > 0}  # roots of tables inside t
            for meta in metas:
                k = meta.key
                rest = k[len(prefix):]
                if ("/" + rest).startswith(marker) or not k.endswith(".parquet"):
                    continue
                if any(rest.startswith(n) for n in nested):
                    continue
                if k in keys or k in live:
                    continue
                if meta.last_modified is None or now - meta.last_modified < retention:
                    continue
                out.append((t, k))
        return out

    def delete_abandoned_files(self, table: str | None = None, *, min_age: float | None = None,
                               dry_run: bool = False, force: bool = False) -> list[tuple[str, str]]:
        """Delete what ``abandoned_files`` lists (same arguments); returns it."""
        files = self.abandoned_files(table, min_age=min_age, force=force)
        if not dry_run:
            self.store.delete_many([k for _t, k in files])  # S3: one request per 1,000 files
            logs.maintenance("abandoned_deleted", "deleted %d abandoned data file(s)", len(files), files=len(files))
        return files

    def _live_txns(self) -> set[str]:
        """Transactions holding a running marker that has not expired (read fresh)."""
        now = self.now()
        live: set[str] = set()
        for t in self.tables():
            log = self.log(t)
            latest = log.latest_version()
            if latest < 0:
                continue
            lo = max(-1, latest - 1000, log.last_checkpoint_version() - 1)
            for v, c in log.commits_between(lo, latest):
                m = marker_of(c)
                if m is None or m.state != RUNNING or m.txn in live:
                    continue
                try:
                    m = marker_of(log.read_commit_raw(v)[0])  # the cached copy may predate heartbeats
                except NotFound:
                    continue
                if m is not None and m.state == RUNNING and not m.expired(now):
                    live.add(m.txn)
        return live

    def cleanup(self, *, older_than: float | None = None, keep_global: int | None = None,
                force: bool = False) -> dict[str, int]:
        """Delete what finished transactions leave under ``_lakevilla/``: sublogs, and
        COMMITTED/ABORTED records, older than ``older_than`` seconds (default 7 days; below
        ``max_transaction_age`` only with ``force=True``: an ABORTED record is what stops a
        stalled owner from committing, sublogs are what ``resume`` and abandoned-file deletion
        read). Never a COMMITTING record or the sublogs of its transaction, nor those of a
        transaction holding a live marker. Also global log entries beyond the newest
        ``keep_global`` that are older than ``max_transaction_age`` (or ``older_than``, if
        forced below it): an entry that young may be the slot a running transaction is about
        to contend for, and deleting it would let that transaction fork the log."""
        from .complex_txn import record as records
        from .names import TXN_DIR

        older_than = self._check_retention(DEFAULT_RETENTION if older_than is None else older_than,
                                           "older_than", force)
        now = self.now()
        done = {"records": 0, "sublogs": 0, "global_entries": 0}
        recs: dict[str, list] = {}
        subs: dict[str, list] = {}
        for meta in list(self.store.list(f"{TXN_DIR}/")):
            rest = meta.key[len(TXN_DIR) + 1:]
            if "/" in rest:
                subs.setdefault(rest.split("/", 1)[0], []).append(meta)
            elif rest.endswith(".json"):
                recs.setdefault(rest[:-5].rsplit(".", 1)[0], []).append(meta)
        states: dict[str, str | None] = {}

        def old(meta) -> bool:
            return meta.last_modified is not None and now - meta.last_modified >= older_than

        def state(meta) -> str | None:
            if meta.key not in states:
                rec = records.read(self.store, meta.key[len(TXN_DIR) + 1:-5])
                states[meta.key] = rec.state if rec is not None else None
            return states[meta.key]

        candidates = [txn for txn, ms in subs.items() if all(old(m) for m in ms)]
        live = self._live_txns() if candidates else set()
        kept_sublogs = set(subs)
        for txn in candidates:
            if txn in live or any(state(m) == records.COMMITTING for m in recs.get(txn, [])):
                continue
            self.store.delete_many([m.key for m in subs[txn]])
            done["sublogs"] += len(subs[txn])
            kept_sublogs.discard(txn)
        for txn, ms in recs.items():
            if txn in kept_sublogs:
                continue  # resume still reads them: the records say how its attempts ended
            for m in ms:
                if old(m) and state(m) in (records.COMMITTED, records.ABORTED):
                    self.store.delete(m.key)
                    done["records"] += 1
        # entries younger than max_transaction_age stay (gvl.cleanup says why), unless forced below it
        done["global_entries"] = self.gvl.cleanup(keep_global if keep_global is not None else self.gvl_keep,
                                                  min_age=min(older_than, self.max_transaction_age), now=now)
        logs.maintenance("cleanup", "cleanup deleted %s", done, **done)
        return done

    def iter_history(self, name: str) -> Iterator[tuple[int, Commit]]:
        log = self.log(name)
        latest = log.latest_version()
        if latest < 0:
            raise TableNotFoundError(f"table {name!r} does not exist in {self.root_uri} (no Delta "
                                     f"log at {name}/{LOG_DIR}/)")
        yield from log.commits_between(-1, latest)
