"""``Lake``: the entry point. Holds the store, the engine, caches and settings."""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .delta.actions import Commit, Metadata, Protocol
from .delta.features import check_readable
from .delta.log import LOG_DIR, DeltaLog, VersionExists
from .delta.schema import schema_to_json
from .delta.snapshot import Snapshot
from .engine_api import data_file_key
from .errors import (
    InvalidArgumentError,
    SchemaMismatchError,
    TableExistsError,
    TableNotFoundError,
    TransactionAborted,
)
from .isolation.gvl import GlobalVersionLog
from .isolation.units import RecordCache
from .markers import ENGINE_INFO, RUNNING, is_final, marker_of
from .names import LV_DIR, check_table_name
from .parallel import SHARED, pmap
from .store import ObjectStore, open_store
from .transaction import ISOLATIONS, Transaction, parse_features


@dataclass
class RecoveryReport:
    """What ``Lake.recover`` found and did."""

    committed: list[tuple[str, int, str]] = field(default_factory=list)  # (table, marker version, txn attempt)
    freed: list[tuple[str, int, str]] = field(default_factory=list)
    running: list[tuple[str, int, str]] = field(default_factory=list)  # alive: left alone
    records_rolled_forward: list[str] = field(default_factory=list)
    pending_resolved: list[tuple[str, str]] = field(default_factory=list)
    tables_scanned: int = 0

    @property
    def acted(self) -> int:
        return len(self.committed) + len(self.freed) + len(self.records_rolled_forward) + len(self.pending_resolved)

    def __str__(self) -> str:
        return (f"recovery: {len(self.committed)} rolled forward, {len(self.freed)} rolled back, "
                f"{len(self.running)} still running, {len(self.records_rolled_forward)} records completed, "
                f"{len(self.pending_resolved)} global-log writes completed, {self.tables_scanned} tables scanned")


def _to_schema(schema: Any) -> pa.Schema:
    if isinstance(schema, pa.Schema):
        return schema
    if isinstance(schema, dict):
        return pa.schema(list(schema.items()))
    if isinstance(schema, list | tuple):
        return pa.schema(schema)
    raise SchemaMismatchError(f"schema must be a pyarrow.Schema, a dict or a list of fields, got {type(schema).__name__}")


class Lake:
    """A folder (``file://``) or bucket prefix (``s3://``) holding Delta tables.

    ``marker_ttl``: seconds after which an unrefreshed marker counts as stalled.
    ``commit_mode``: ``"tail"`` (default: table commits go to a new version, the marker
    stays an empty version) or ``"in_place"`` (the paper's fill of the marker version).
    ``wait_timeout``: how long a commit waits for earlier markers before aborting (default
    ``2 * marker_ttl``). ``shift_timeout``: how long a CT commit waits without progress before
    shifting its markers (the paper's rule IV). ``clock``: a time source, for tests and
    simulations of expiry.
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
        clock: Callable[[], float] | None = None,
    ) -> None:
        if commit_mode not in ("tail", "in_place"):
            raise InvalidArgumentError("commit_mode must be 'tail' or 'in_place'")
        if marker_ttl <= 0:
            raise InvalidArgumentError("marker_ttl must be positive")
        self.store = store if store is not None else open_store(root, storage_options)
        if "://" not in root:
            import os

            root = "file://" + os.path.abspath(root)
        self.root_uri = root.rstrip("/")
        self.storage_options = dict(storage_options or {})
        self.marker_ttl = float(marker_ttl)
        self.commit_mode = commit_mode
        self.wait_timeout = float(wait_timeout) if wait_timeout is not None else 2 * self.marker_ttl
        self.shift_timeout = float(shift_timeout)
        self.max_retries = max_retries
        self.max_shifts = max_shifts
        self.poll_max = poll_max
        self.gvl_keep = gvl_keep
        self.delete_sublogs = delete_sublogs
        self._clock = clock or time.time
        self._pool = SHARED
        self._bg = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakevilla-bg")
        self._bg_futures: list[Future] = []
        self._logs: dict[str, DeltaLog] = {}
        self._lock = threading.Lock()
        self.gvl = GlobalVersionLog(self.store)
        self.records = RecordCache(self.store)  # decided transaction records, for LV[I] cuts
        if engine is None:
            from .engines.embedded import EmbeddedEngine

            engine = EmbeddedEngine(self._pool)
        self.engine = engine
        if hasattr(engine, "attach"):
            engine.attach(self)
        self._watched: weakref.WeakSet[Transaction] = weakref.WeakSet()
        self._hb_thread: threading.Thread | None = None
        self._hb_stop = threading.Event()

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
        """Wait for background clean-up (tests and benchmarks call this before counting)."""
        with self._lock:
            futs = list(self._bg_futures)
        for f in futs:
            f.result()

    def services(self):
        from .recovery.stalled import Services

        return Services(store=self.store, log_for=self.log, gvl=self.gvl, now=self.now)

    def close(self) -> None:
        self._hb_stop.set()
        self.flush()
        self._bg.shutdown(wait=True)

    def __enter__(self) -> Lake:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Lake({self.root_uri!r}, engine={getattr(self.engine, 'name', '?')}, commit_mode={self.commit_mode!r})"

    # -- heartbeats ----------------------------------------------------------------
    def _watch(self, txn: Transaction) -> None:
        with self._lock:
            self._watched.add(txn)
            if self._hb_thread is None or not self._hb_thread.is_alive():
                self._hb_stop.clear()
                self._hb_thread = threading.Thread(target=self._heartbeat_loop, name="lakevilla-heartbeat",
                                                   daemon=True)
                self._hb_thread.start()

    def _forget(self, txn: Transaction) -> None:
        with self._lock:
            self._watched.discard(txn)

    def _heartbeat_loop(self) -> None:
        interval = max(min(self.marker_ttl / 4, 2.0), 0.01)
        while not self._hb_stop.wait(interval):
            with self._lock:
                txns = list(self._watched)
                if not txns:  # nothing to keep alive: the next watched transaction restarts us
                    self._hb_thread = None
                    return
            for t in txns:
                try:
                    t._heartbeat_if_due()
                except BaseException:  # noqa: BLE001 - a dead store (simulated crash) ends this txn's beats
                    self._forget(t)

    # -- tables ------------------------------------------------------------------
    def create_table(self, name: str, schema: Any, partition_by: list[str] | str | None = None, *,
                     properties: dict[str, str] | None = None, if_not_exists: bool = False,
                     description: str | None = None) -> Snapshot:
        """Create a plain Delta table at ``<root>/<name>`` (protocol 1/2, no table features)."""
        check_table_name(name)
        schema = _to_schema(schema)
        if len(schema) == 0:
            raise SchemaMismatchError("a table needs at least one column")
        names = [f.name for f in schema]
        if len({n.lower() for n in names}) != len(names):
            raise SchemaMismatchError(f"duplicate column names in {names}")
        parts = [partition_by] if isinstance(partition_by, str) else list(partition_by or [])
        for p in parts:
            if p not in names:
                raise SchemaMismatchError(f"partition column {p!r} is not in the schema {names}")
        if parts and len(parts) == len(names):
            raise SchemaMismatchError("a table needs at least one column that is not a partition column")
        schema_json = schema_to_json(schema)  # raises SchemaMismatchError for unsupported types
        log = self.log(name)
        if log.latest_version() >= 0:
            if if_not_exists:
                return log.snapshot()
            raise TableExistsError(f"table {name!r} already exists")
        now_ms = int(time.time() * 1000)
        commit = Commit(
            commit_info={"timestamp": now_ms, "operation": "CREATE TABLE",
                         "operationParameters": {"partitionBy": str(parts)}, "isBlindAppend": True,
                         "engineInfo": ENGINE_INFO, "lakevilla": {"v": 1, "kind": "create"}},
            protocol=Protocol(1, 2),
            metadata=Metadata(id=str(uuid.uuid4()), schema_string=schema_json, partition_columns=parts,
                              configuration={str(k): str(v) for k, v in (properties or {}).items()},
                              created_time=now_ms, name=None, description=description),
        )
        try:
            log.write_commit(0, commit)
        except VersionExists:
            if if_not_exists:
                return log.snapshot()
            raise TableExistsError(f"table {name!r} already exists") from None
        return log.snapshot(0)

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
             columns: list[str] | None = None) -> Any:
        """Rows of one table at one version (newest by default), outside any transaction."""
        from .engine_api import TableContext
        from .expr import parse_predicate, prune

        snap = self.snapshot(name, version)
        ctx = TableContext(name, self.store, self.root_uri, snap.schema, tuple(snap.partition_columns))
        if where is not None:
            self.engine.validate_where(ctx, where)
        files = prune(parse_predicate(where), list(snap.files.values()), snap.schema, snap.partition_columns)
        return self.engine.scan(ctx, files, where, columns)

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
        return sorted(found)

    # -- transactions --------------------------------------------------------------
    def begin(self, features: str | Iterable[str] | None = "R", isolation: str = "serializable", slack: int = 0,
              commit_mode: str | None = None) -> Transaction:
        """A transaction to drive by hand: ``txn.commit()`` or ``txn.abort()``."""
        return Transaction(self, parse_features(features), isolation=isolation, slack=slack,
                           commit_mode=commit_mode)

    def transaction(self, features: str | Iterable[str] | None = "R", isolation: str = "serializable",
                    slack: int = 0, commit_mode: str | None = None) -> Transaction:
        """``with lake.transaction(...) as txn:`` commits on exit, aborts on an exception."""
        return self.begin(features, isolation=isolation, slack=slack, commit_mode=commit_mode)

    def run(self, fn: Callable[[Transaction], Any], features: str | Iterable[str] | None = "R", *,
            retries: int = 5, isolation: str = "serializable", slack: int = 0,
            commit_mode: str | None = None) -> Any:
        """Run ``fn(txn)`` in a transaction; re-run it when the transaction aborts."""
        if isolation not in ISOLATIONS:
            raise InvalidArgumentError(f"isolation must be one of {ISOLATIONS}")
        delay = 0.01
        for attempt in range(retries + 1):
            txn = self.begin(features, isolation=isolation, slack=slack, commit_mode=commit_mode)
            try:
                with txn:
                    out = fn(txn)
                return out
            except TransactionAborted:
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
    def _maybe_checkpoint(self, log: DeltaLog, version: int) -> None:
        try:
            snap = log.snapshot(version, list_log=False)
        except Exception:  # noqa: BLE001 - checkpoints are an optimisation
            return
        if not log.checkpoint_due(version, snap.metadata.configuration):
            return
        lo = max(log.last_checkpoint_version(), version - 500)
        for _v, c in log.commits_between(lo, version):
            m = marker_of(c)
            if m is not None and m.state == RUNNING:
                return  # never checkpoint at or above an open marker
        log.write_checkpoint(snap)

    def checkpoint(self, name: str) -> int:
        """Write a checkpoint at the newest version (refused above an open marker)."""
        log = self.log(name)
        v = log.latest_version()
        snap = log.snapshot(v)
        lo = max(log.last_checkpoint_version(), v - 500)
        for mv, c in log.commits_between(lo, v):
            m = marker_of(c)
            if m is not None and m.state == RUNNING:
                raise InvalidArgumentError(f"{name}@{mv} is an open marker; a checkpoint now could hide its commit")
        log.write_checkpoint(snap)
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
                roll_forward_record(svc, rec)
                report.records_rolled_forward.append(rec.attempt)
        head = self.gvl.head()
        if head is not None:
            for t, p in head.pending.items():
                if gvl_resolve.find_pending(self.log(t), p) is None:
                    gvl_resolve.resolve(self.log(t), head, t, patience=0.0)
                    report.pending_resolved.append((t, p.attempt))
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
        return report

    def abandoned_files(self, table: str | None = None, *, min_age: float | None = None) -> list[tuple[str, str]]:
        """Data files that no version references and no running transaction will: what
        aborted and crashed transactions left behind. ``min_age`` (seconds, default
        ``2 * marker_ttl``) protects files of transactions still writing."""
        min_age = 2 * self.marker_ttl if min_age is None else min_age
        now = time.time()
        out = []
        for t in ([table] if table else self.tables()):
            log = self.log(t)
            latest = log.latest_version()
            if latest < 0:
                continue
            snap = log.snapshot(latest)
            referenced = set(snap.files) | set(snap.tombstones)
            lo = max(-1, log.last_checkpoint_version() - 1)
            for _v, c in log.commits_between(lo, latest):
                referenced.update(a.path for a in c.adds)
                referenced.update(r.path for r in c.removes)
            keys = {data_file_key(t, p, self.root_uri) for p in referenced}
            prefix = t + "/"
            for meta in self.store.list(prefix):
                k = meta.key
                if f"/{LOG_DIR}/" in "/" + k[len(prefix) - 1:] or not k.endswith(".parquet"):
                    continue
                rest = k[len(prefix):]
                if "/" in rest and any(rest.startswith(o + "/") for o in self._nested_tables(t)):
                    continue
                if k in keys:
                    continue
                if meta.last_modified is not None and now - meta.last_modified < min_age:
                    continue
                out.append((t, k))
        return out

    def cleanup(self, *, older_than: float = 24 * 3600.0, keep_global: int | None = None) -> dict[str, int]:
        """Delete finished transaction records (and sublogs of finished transactions) older than
        ``older_than`` seconds, and global log entries beyond the newest ``keep_global``."""
        from .complex_txn import record as records
        from .names import TXN_DIR

        now = time.time()
        done = {"records": 0, "sublogs": 0, "global_entries": 0}
        metas = list(self.store.list(f"{TXN_DIR}/"))
        finished_txns = set()
        for meta in metas:
            rest = meta.key[len(TXN_DIR) + 1:]
            if "/" in rest or not rest.endswith(".json"):
                continue
            if meta.last_modified is not None and now - meta.last_modified < older_than:
                continue
            rec = records.read(self.store, rest[:-5])
            if rec is not None and rec.state in (records.COMMITTED, records.ABORTED):
                self.store.delete(meta.key)
                done["records"] += 1
                finished_txns.add(rec.txn)
        for meta in metas:
            rest = meta.key[len(TXN_DIR) + 1:]
            if "/" in rest and rest.split("/", 1)[0] in finished_txns:
                self.store.delete(meta.key)
                done["sublogs"] += 1
        done["global_entries"] = self.gvl.cleanup(keep_global if keep_global is not None else self.gvl_keep)
        return done

    def _nested_tables(self, table: str) -> list[str]:
        return []

    def delete_abandoned_files(self, table: str | None = None, *, min_age: float | None = None,
                               dry_run: bool = False) -> list[tuple[str, str]]:
        files = self.abandoned_files(table, min_age=min_age)
        if not dry_run:
            for _t, k in files:
                self.store.delete(k)
        return files

    def iter_history(self, name: str) -> Iterator[tuple[int, Commit]]:
        log = self.log(name)
        yield from log.commits_between(-1, log.latest_version())
