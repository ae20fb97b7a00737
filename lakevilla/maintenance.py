"""Maintenance of a lake: recovery of stalled transactions, clean-up, abandoned files, checkpoints.

``lake.maintenance`` (and ``lakevilla recover/cleanup/abandoned/checkpoint``). Every step runs
beside live transactions: what it might delete it first checks against live state (running
markers, sublogs, COMMITTING records, pending global-log writes), and it keeps a retention at
least as long as the lake's ``max_transaction_age``, which is what makes deleting by age safe.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from . import logs
from .complex_txn import record as records
from .complex_txn import reservations
from .core.client import LakeClient
from .delta.actions import Commit, Metadata, Protocol
from .delta.deletion_vectors import DeletionVector, is_dv_file
from .delta.deletion_vectors import file_key as dv_file_key
from .delta.features import check_sweepable, check_writable
from .delta.log import LOG_DIR, DeltaLog
from .engines.api import data_file_key
from .engines.change_data import CHANGE_DIR
from .errors import (
    CorruptLogError,
    CreateConflictError,
    InvalidArgumentError,
    UnsupportedTableFeatureError,
)
from .isolation import resolve as gvl_resolve
from .isolation.join_from import checkpoint_tags
from .markers import checkpoints
from .markers.marker import RUNNING, marker_of
from .names import TXN_DIR
from .recovery import idle, rides
from .recovery.stalled import resolve_marker, roll_forward_record
from .recovery.sublog import SublogEntry
from .settings import LakeSettings
from .store import NotFound

# Maintenance keeps what it might delete for this long by default: Delta VACUUM's default retention.
DEFAULT_RETENTION = 7 * 24 * 3600.0


@dataclass
class RecoveryReport:
    """What ``Lake.recover`` found and did."""

    # (table, marker version, txn attempt)
    committed: list[tuple[str, int, str]] = field(default_factory=list)
    freed: list[tuple[str, int, str]] = field(default_factory=list)
    running: list[tuple[str, int, str]] = field(default_factory=list)  # alive: left alone
    records_rolled_forward: list[str] = field(default_factory=list)
    pending_resolved: list[tuple[str, str]] = field(default_factory=list)
    tables_scanned: int = 0
    # reservations of dead or finished creators
    names_released: list[str] = field(default_factory=list)
    # decided creates a foreign writer pre-empted
    create_conflicts: list[str] = field(default_factory=list)
    # recover(older_than=): idle transactions (sublogs only, no marker) settled, as
    # {"txn", "attempt", "features", "tables", "kept", "idle"} (kept: tables an R transaction
    # had already committed to, each deciding alone)
    idle_rolled_back: list[dict[str, Any]] = field(default_factory=list)
    idle_rolled_forward: list[dict[str, Any]] = field(default_factory=list)  # decided after all

    def to_json(self) -> dict[str, Any]:
        """Rows as named objects (``lakevilla recover --json``); fields added later pass through."""
        d: dict[str, Any] = asdict(self)
        for k in ("committed", "freed", "running"):
            d[k] = [{"table": t, "version": v, "attempt": a} for t, v, a in getattr(self, k)]
        d["pending_resolved"] = [{"table": t, "attempt": a} for t, a in self.pending_resolved]
        d["acted"] = self.acted
        return d

    @property
    def acted(self) -> int:
        """How many things recovery did (0: the lake needed nothing)."""
        return (len(self.committed) + len(self.freed) + len(self.records_rolled_forward)
                + len(self.pending_resolved) + len(self.names_released)
                + len(self.idle_rolled_back) + len(self.idle_rolled_forward))

    def __str__(self) -> str:
        return (f"recovery: {len(self.committed)} rolled forward, {len(self.freed)} rolled back, "
                f"{len(self.running)} still running, {len(self.records_rolled_forward)} records "
                f"completed, {len(self.pending_resolved)} global-log writes "
                f"completed, {self.tables_scanned} tables scanned"
                + (f", {len(self.names_released)} name reservations released" if self.names_released
                   else "")
                + (f", {len(self.idle_rolled_back)} idle transactions rolled back"
                   if self.idle_rolled_back else "")
                + (f", {len(self.idle_rolled_forward)} idle transactions found decided and rolled "
                   "forward" if self.idle_rolled_forward else "")
                + (", CREATE CONFLICTS (a client outside lakevilla created a table a decided "
                   f"transaction creates): {self.create_conflicts}" if self.create_conflicts
                   else ""))


class Maintenance:
    """The maintenance of one lake (``lake.maintenance``); ``tables`` lists the lake's tables."""

    def __init__(self, client: LakeClient, tables: Callable[[], list[str]]) -> None:
        self._client = client
        self._tables = tables

    @property
    def _settings(self) -> LakeSettings:
        return self._client.settings

    def checkpoint(self, name: str) -> int:
        """Write a checkpoint of ``name`` at its newest version (refused above an open marker)."""
        self._client.check_writable("checkpoint")
        # our own last commit's marker closes in the background: not an open one
        self._client.flush()
        log = self._client.log(name)
        self._check_features(log, check_writable)  # a checkpoint is a write of the table's log
        return checkpoints.checkpoint_now(log, checkpoint_tags)

    @staticmethod
    def _check_features(log: DeltaLog, check: Callable[[str, Protocol, Metadata], None]) -> None:
        """``check`` on the table's newest protocol and metadata (nothing for a table not yet
        created)."""
        latest = log.latest_version()
        if latest >= 0:
            snap = log.snapshot(latest)
            check(log.table, snap.protocol, snap.metadata)

    def recover(self, tables: list[str] | None = None, *, force: bool = False,
                older_than: float | None = None) -> RecoveryReport:
        """Finish or undo every stalled transaction (markers past their expiry, COMMITTING
        records, announced writes not yet in their table). ``force`` ignores expiry: only
        for a lake you know no live client is writing to. ``older_than`` (seconds): also settle
        every transaction that holds no marker and wrote nothing for that long, which an
        operator declares dead (no heartbeat says whether its client lives): rolled back, or
        forward if it turns out decided (``recovery/idle.py``); at least the settings'
        ``idle_floor`` (60 s, or the marker ttl) unless ``force``."""
        self._client.check_writable("recover")
        if older_than is not None:
            older_than = idle.check_older_than(older_than, self._settings.idle_floor, force)

        report = RecoveryReport()
        svc = self._client.services()
        for meta in list(self._client.store.list(f"{TXN_DIR}/")):
            rest = meta.key[len(TXN_DIR) + 1:]
            if "/" in rest or not rest.endswith(".json"):
                continue
            rec = records.read(self._client.store, rest[:-5])
            if rec is not None and rec.state == records.COMMITTING:
                try:
                    roll_forward_record(svc, rec)
                except CreateConflictError as e:
                    report.create_conflicts.append(f"{rec.attempt}: {e}")
                    logs.maintenance("create_conflict", "%s", e, level=logging.ERROR)
                    continue
                report.records_rolled_forward.append(rec.attempt)
        head = self._client.gvl.head()
        if head is not None:
            for t, p in head.pending.items():
                if gvl_resolve.find_pending(self._client.log(t), p) is None:
                    gvl_resolve.resolve(self._client.log(t), head, t, patience=0.0)
                    report.pending_resolved.append((t, p.attempt))
        now = self._client.now()
        for rsv, _etag in reservations.all_reservations(self._client.store):
            if rsv.state != reservations.HELD or (tables is not None and rsv.table not in tables):
                continue
            if (self._client.log(rsv.table).latest_version() >= 0
                    or reservations.dead(self._client.store, rsv, now, force=force)):
                reservations.release(self._client.store, rsv.table, rsv.holder, "recovered")
                report.names_released.append(rsv.table)
        for t in (tables if tables is not None else self._tables()):
            log = self._client.log(t)
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
        if older_than is not None:  # after the markers: one freed above can be among them
            for outcome, settled in idle.settle_idle(svc, self._client.now(), older_than, tables):
                (report.idle_rolled_back if outcome == idle.ROLLED_BACK
                 else report.idle_rolled_forward).append(settled)
        logs.maintenance("recovery_report", "%s", report,
                         level=logging.INFO if report.acted else logging.DEBUG, **report.to_json())
        return report


    # -- maintenance that deletes: it consults live state and keeps a retention --------------
    def _check_retention(self, seconds: float, what: str, force: bool) -> float:
        seconds = float(seconds)
        if seconds < 0:
            raise InvalidArgumentError(f"{what} must be >= 0 seconds")
        if seconds < self._settings.max_transaction_age and not force:
            raise InvalidArgumentError(
                f"{what}={seconds:g}s is shorter than this lake's max_transaction_age "
                f"({self._settings.max_transaction_age:g}s): a transaction still running could "
                "lose its files or its records. Pass force=True only if every client writing to "
                f"this lake uses a max_transaction_age below {seconds:g}s")
        return seconds

    def _live_files(self) -> set[str]:
        """Keys of data files that live or decided transactions name but that no version may
        reference yet: files in sublogs still present, in COMMITTING records, in pending
        global-log writes. Read *before* the table logs: a decision published meanwhile then
        shows up in one or the other, never in neither."""

        keys: set[str] = set()

        def add_commit(table: str, commit_text: str) -> None:
            c = Commit.from_bytes(commit_text.encode())
            for a in c.adds:
                keys.update(data_file_key(table, p, self._client.root_uri)
                            for p in (a.path, *a.written_files))
            keys.update(data_file_key(table, f.path, self._client.root_uri) for f in c.cdc)

        for meta in list(self._client.store.list(f"{TXN_DIR}/")):
            rest = meta.key[len(TXN_DIR) + 1:]
            if not rest.endswith(".json"):
                continue
            if "/" in rest:  # a sublog entry: its owner deletes it only once finished
                try:
                    e = SublogEntry.from_json(json.loads(self._client.store.get(meta.key).data))
                except NotFound:
                    continue
                except (ValueError, TypeError) as err:
                    raise CorruptLogError(f"sublog {meta.key} is damaged ({err}); maintenance will "
                                          "not guess which files it protects") from None
                for a in e.added_files():  # a DV's file too: it is the entry's to commit
                    keys.update(data_file_key(e.table, p, self._client.root_uri)
                                for p in (a.path, *a.written_files))
                keys.update(data_file_key(e.table, c["path"], self._client.root_uri)
                            for c in e.cdc)
                continue
            rec = records.read(self._client.store, rest[:-5])
            if rec is not None and rec.state == records.COMMITTING:
                for t, intent in rec.tables.items():
                    add_commit(t, intent.commit)
        head = self._client.gvl.head()
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
        retention = self._check_retention(DEFAULT_RETENTION if min_age is None else min_age,
                                          "min_age", force)
        live = self._live_files()
        now = self._client.now()
        out = []
        # names a transaction reserved to create: files of a table never created (aborted, or its
        # creator died) live under a folder without a log; younger than the retention they may
        # still be a live transaction's, older ones no transaction can commit any more
        reserved = {r.table for r, _ in reservations.all_reservations(self._client.store)}
        for t in ([table] if table else sorted(set(self._tables()) | reserved)):
            log = self._client.log(t)
            latest = log.latest_version()
            referenced: set[str] = set()
            if latest < 0 and t not in reserved:
                continue
            try:
                self._check_features(log, check_sweepable)
            except UnsupportedTableFeatureError as e:
                if table:
                    raise
                logs.maintenance("abandoned_skipped", "%s", e, level=logging.WARNING, table=t)
                continue
            dvs: list[DeletionVector] = []
            if latest >= 0:
                snap = log.snapshot(latest)
                referenced = set(snap.files) | set(snap.tombstones)
                lo = max(-1, log.last_checkpoint_version() - 1)
                if "deletionVectors" in (snap.protocol.reader_features or []):
                    dvs = snap.files.deletion_vectors() + snap.tombstones.deletion_vectors()
                    lo = min(lo, self._first_recent_commit(log, now - retention) - 1)
                for _v, c in log.commits_between(lo, latest):
                    referenced.update(a.path for a in c.adds)
                    referenced.update(r.path for r in c.removes)
                    dvs.extend(a.deletion_vector for a in c.adds if a.deletion_vector is not None)
                    dvs.extend(r.deletion_vector for r in c.removes
                               if r.deletion_vector is not None)
            keys = {data_file_key(t, p, self._client.root_uri) for p in referenced}
            keys.update(k for dv in dvs
                        if (k := dv_file_key(t, dv, self._client.root_uri)) is not None)
            prefix = t + "/"
            metas = list(self._client.store.list(prefix))
            if latest >= 0 and any(m.key[len(prefix):].startswith(CHANGE_DIR + "/")
                                   for m in metas):
                keys |= self._change_files(log, t, latest)
            marker = f"/{LOG_DIR}/"
            nested = {m.key[len(prefix):][:i] + "/" for m in metas
                      if (i := m.key[len(prefix):].find(marker)) > 0}  # roots of tables inside t
            for meta in metas:
                k = meta.key
                rest = k[len(prefix):]
                if ("/" + rest).startswith(marker) or not (k.endswith(".parquet")
                                                            or is_dv_file(rest)):
                    continue
                if any(rest.startswith(n) for n in nested):
                    continue
                if k in keys or k in live:
                    continue
                if meta.last_modified is None or now - meta.last_modified < retention:
                    continue
                out.append((t, k))
        return out

    def _change_files(self, log: DeltaLog, table: str, latest: int) -> set[str]:
        """Keys of the ``_change_data/`` files that a commit still in the log names: only a
        commit names them (never a checkpoint), and a reader of the feed reads any version
        whose commit is there, so they are kept until the log's clean-up drops that commit."""
        first = min(log.list_log().commits, default=latest + 1)
        return {data_file_key(table, f.path, self._client.root_uri)
                for _v, c in log.commits_between(first - 1, latest) for f in c.cdc}

    @staticmethod
    def _first_recent_commit(log: DeltaLog, since: float) -> int:
        """The oldest commit written after ``since`` (s): a deletion vector a commit replaced
        stays referenced through it while time travel may still need it (a tombstone keyed by
        path alone would forget it when the file's next DV is replaced)."""
        listing = log.list_log()
        recent = [v for v in listing.commits if listing.written.get(v, since) >= since]
        return min(recent, default=max(listing.commits, default=0))

    def delete_abandoned_files(self, table: str | None = None, *, min_age: float | None = None,
                               dry_run: bool = False, force: bool = False) -> list[tuple[str, str]]:
        """Delete what ``abandoned_files`` lists (same arguments); returns it. ``dry_run``: only
        list them."""
        if not dry_run:
            self._client.check_writable("delete_abandoned_files")
        files = self.abandoned_files(table, min_age=min_age, force=force)
        if not dry_run:
            # S3: one request per 1,000 files
            self._client.store.delete_many([k for _t, k in files])
            logs.maintenance("abandoned_deleted", "deleted %d abandoned data file(s)", len(files),
                             files=len(files))
        return files

    def _live_txns(self) -> set[str]:
        """Transactions holding a running marker that has not expired (read fresh)."""
        now = self._client.now()
        live: set[str] = set()
        for t in self._tables():
            log = self._client.log(t)
            latest = log.latest_version()
            if latest < 0:
                continue
            lo = max(-1, latest - 1000, log.last_checkpoint_version() - 1)
            for v, c in log.commits_between(lo, latest):
                m = marker_of(c)
                if m is None or m.state != RUNNING or m.txn in live:
                    continue
                try:
                    # the cached copy may predate heartbeats
                    m = marker_of(log.read_commit_raw(v)[0])
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
        self._client.check_writable("cleanup")

        older_than = self._check_retention(DEFAULT_RETENTION if older_than is None else older_than,
                                           "older_than", force)
        now = self._client.now()
        done = {"records": 0, "sublogs": 0, "global_entries": 0, "ride_objects": 0}
        recs: dict[str, list] = {}
        subs: dict[str, list] = {}
        for meta in list(self._client.store.list(f"{TXN_DIR}/")):
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
                rec = records.read(self._client.store, meta.key[len(TXN_DIR) + 1:-5])
                states[meta.key] = rec.state if rec is not None else None
            return states[meta.key]

        candidates = [txn for txn, ms in subs.items() if all(old(m) for m in ms)]
        live = self._live_txns() if candidates else set()
        kept_sublogs = set(subs)
        for txn in candidates:
            if txn in live or any(state(m) == records.COMMITTING for m in recs.get(txn, [])):
                continue
            self._client.store.delete_many([m.key for m in subs[txn]])
            done["sublogs"] += len(subs[txn])
            kept_sublogs.discard(txn)
        for txn, ms in recs.items():
            if txn in kept_sublogs:
                continue  # resume still reads them: the records say how its attempts ended
            for m in ms:
                if old(m) and state(m) in (records.COMMITTED, records.ABORTED):
                    self._client.store.delete(m.key)
                    done["records"] += 1
        # group commit's leads and requests of decided versions (or too old to be carried)
        stale = rides.stale(self._client.store, lambda t: self._client.log(t).latest_version(),
                            now, min(older_than, self._settings.max_transaction_age))
        if stale:
            self._client.store.delete_many(stale)
            done["ride_objects"] = len(stale)
        # entries younger than max_transaction_age stay (gvl.cleanup says why),
        # unless forced below it
        done["global_entries"] = self._client.gvl.cleanup(
            keep_global if keep_global is not None else self._settings.gvl_keep,
            min_age=min(older_than, self._settings.max_transaction_age), now=now)
        logs.maintenance("cleanup", "cleanup deleted %s", done, **done)
        return done
