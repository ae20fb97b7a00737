"""Reading and writing one table's Delta log, with a snapshot cache.

Commits are immutable in plain Delta, but lakevilla's in-place mode rewrites a
marker version once. The caller tells the log which commits may still change
(``is_final``); those are re-read whenever a snapshot spans them, and the cached
base snapshot never advances past them.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from urllib.parse import unquote

from ..errors import CorruptLogError, LakeNotFoundError, StorageError, TableNotFoundError
from ..store import NotFound, ObjectStore, PreconditionFailed, settle_create, settle_replace
from . import ict, row_tracking
from .actions import Commit
from .checkpoint import (
    last_checkpoint_json,
    read_checkpoint_bytes,
    write_checkpoint_table,
    writes_v2_checkpoints,
)
from .snapshot import Snapshot, SnapshotBuilder

LOG_DIR = "_delta_log"
_COMMIT_RE = re.compile(r"^(\d{20})\.json$")
_CKPT_RE = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")
# a UUID-named (V2) checkpoint: n.checkpoint.<uuid>.json or .parquet
_V2_CKPT_RE = re.compile(r"^(\d{20})\.checkpoint\.[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-"
                         r"[0-9a-fA-F]{12}\.(?:json|parquet)$")
SIDECAR_DIR = "_sidecars"
DEFAULT_CHECKPOINT_INTERVAL = 10
_DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000


class VersionExists(Exception):
    """put-if-absent on a commit file lost: someone else holds that version."""

    def __init__(self, version: int) -> None:
        super().__init__(f"version {version} exists")
        self.version = version


@dataclass
class LogListing:
    commits: list[int] = field(default_factory=list)
    checkpoints: dict[int, dict[int, str]] = field(default_factory=dict)  # version -> {part: key}
    checkpoint_parts: dict[int, int] = field(default_factory=dict)  # version -> number of parts
    v2_checkpoints: dict[int, list[str]] = field(default_factory=dict)  # version -> UUID-named
    # commit version -> its file's last-modified (s)
    written: dict[int, float] = field(default_factory=dict)

    def complete_checkpoints(self) -> list[int]:
        return sorted({v for v, parts in self.checkpoints.items()
                       if len(parts) == self.checkpoint_parts[v]} | set(self.v2_checkpoints))

    def has_checkpoint(self, version: int) -> bool:
        return version in self.checkpoints or version in self.v2_checkpoints

    def checkpoint_keys(self, version: int) -> list[str]:
        """The files of the checkpoint to read at ``version``. The protocol lets a reader pick
        any of several; we pick deterministically: a UUID-named one (the greatest name), written
        by a V2-aware writer, before the classic file or parts."""
        if version in self.v2_checkpoints:
            return [max(self.v2_checkpoints[version])]
        return [self.checkpoints[version][p] for p in sorted(self.checkpoints[version])]


def _retention_ms(configuration: dict[str, str]) -> int:
    raw = {k.lower(): v for k, v in configuration.items()}.get("delta.deletedfileretentionduration")
    if not raw:
        return _DEFAULT_RETENTION_MS
    m = re.fullmatch(r"\s*interval\s+(\d+)\s+"
                     r"(day|days|hour|hours|minute|minutes|second|seconds)\s*", raw.lower())
    if not m:
        return _DEFAULT_RETENTION_MS
    unit = {"day": 86400, "hour": 3600, "minute": 60, "second": 1}[m.group(2).rstrip("s")]
    return int(m.group(1)) * unit * 1000


T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    """What the log needs of an executor: ``map``, to read commits at once
    (``lakevilla.parallel.Executor``, or any ``concurrent.futures`` one)."""

    def map(self, fn: Callable[[T], R], items: Iterable[T], /) -> Iterable[R]: ...


class DeltaLog:
    def __init__(
        self,
        store: ObjectStore,
        table: str,
        executor: Executor | None = None,
        is_final: Callable[[Commit], bool] | None = None,
        cache_size: int = 4096,
    ) -> None:
        self.store = store
        self.table = table
        self.prefix = f"{table}/{LOG_DIR}/"
        self.executor = executor
        self.is_final = is_final or (lambda c: True)
        self._lock = threading.RLock()
        self._commits: OrderedDict[int, Commit] = OrderedDict()
        self._cache_size = cache_size
        self._unstable: set[int] = set()
        self._base: Snapshot | None = None
        self._latest = -1
        self._last_checkpoint_version = -1
        self.hints_read: deque[dict | None] = deque(maxlen=1)  # _last_checkpoint, once read
        # (version, whether in-commit timestamps are on there) of the newest snapshot built: a
        # write just after it needs no GET of the previous commit to know
        self._ict_at: tuple[int, bool] = (-1, False)

    # -- keys ----------------------------------------------------------------
    def commit_key(self, version: int) -> str:
        return f"{self.prefix}{version:020d}.json"

    def checkpoint_key(self, version: int) -> str:
        return f"{self.prefix}{version:020d}.checkpoint.parquet"

    @property
    def last_checkpoint_key(self) -> str:
        return f"{self.prefix}_last_checkpoint"

    # -- low-level reads -----------------------------------------------------
    def _map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        items = list(items)
        if self.executor is None or len(items) <= 1:
            return [fn(i) for i in items]
        return list(self.executor.map(fn, items))

    def read_commit_raw(self, version: int) -> tuple[Commit, str]:
        """GET one commit (uncached) with its etag; raises NotFound."""
        got = self.store.get(self.commit_key(version))
        commit = Commit.from_bytes(got.data, where=f"{self.table} version {version}")
        self._remember(version, commit)
        return commit, got.etag

    def _cached(self, version: int) -> Commit | None:
        """A cached commit that can no longer change (final), freshened in the LRU;
        call under the lock."""
        c = self._commits.get(version)
        if c is None or version in self._unstable:
            return None
        self._commits.move_to_end(version)
        return c

    def read_commit(self, version: int) -> Commit:
        with self._lock:
            c = self._cached(version)
        return c if c is not None else self.read_commit_raw(version)[0]

    def _remember(self, version: int, commit: Commit) -> None:
        with self._lock:
            self._commits[version] = commit
            self._commits.move_to_end(version)
            if self.is_final(commit):
                self._unstable.discard(version)
            else:
                self._unstable.add(version)
            while len(self._commits) > self._cache_size:
                old, _ = self._commits.popitem(last=False)
                self._unstable.discard(old)
            if version > self._latest:
                self._latest = version

    def commits_between(self, lo: int, hi: int) -> list[tuple[int, Commit]]:
        """Commits in (lo, hi], fetched in parallel where not cached."""
        versions = list(range(lo + 1, hi + 1))
        with self._lock:  # waiters scan the same window every round: serve what is cached inline
            got = {v: c for v in versions if (c := self._cached(v)) is not None}
        missing = [v for v in versions if v not in got]
        try:
            got.update(zip(missing, self._map(self.read_commit, missing)))
        except NotFound as e:
            raise CorruptLogError(f"table {self.table!r}: commit missing "
                                  f"between {lo} and {hi} ({e})") from None
        return [(v, got[v]) for v in versions]

    def list_log(self, after: int | None = None) -> LogListing:
        start = self.commit_key(after) if after is not None and after >= 0 else None
        out = LogListing()
        for meta in self.store.list(self.prefix, start_after=start):
            name = meta.key[len(self.prefix):]
            m = _COMMIT_RE.match(name)
            if m:
                out.commits.append(int(m.group(1)))
                if meta.last_modified is not None:
                    out.written[int(m.group(1))] = meta.last_modified
                continue
            m = _CKPT_RE.match(name)
            if m:
                v = int(m.group(1))
                part, parts = (int(m.group(2)), int(m.group(3))) if m.group(2) else (1, 1)
                out.checkpoints.setdefault(v, {})[part] = meta.key
                out.checkpoint_parts[v] = parts
                continue
            m = _V2_CKPT_RE.match(name)
            if m:
                out.v2_checkpoints.setdefault(int(m.group(1)), []).append(meta.key)
        out.commits.sort()
        _fill_listing_gaps(self, out)
        return out

    def read_last_checkpoint(self) -> dict | None:
        try:
            hint = _parse_hint(self.store.get(self.last_checkpoint_key).data)
        except NotFound:
            hint = None
        self.hints_read.append(hint)  # the newest one read last (what a checkpoint extends)
        return hint

    def _load_checkpoint(self, version: int, keys: list[str]) -> SnapshotBuilder:
        try:
            parts = self._map(lambda k: self.store.get_range(k, 0), keys)  # one GET each
        except NotFound as e:
            raise CorruptLogError(f"table {self.table!r}: checkpoint {version} is "
                                  f"incomplete ({e})") from None
        cp = read_checkpoint_bytes(parts, where=f"{self.table} checkpoint {version}",
                                   sidecars=self._sidecars)
        b = SnapshotBuilder(self.table)
        b.apply_checkpoint(version, cp)
        return b

    def _sidecars(self, paths: list[str]) -> list[bytes]:
        """A V2 checkpoint's sidecar files, fetched at once. They live in ``_delta_log/_sidecars``
        whatever the path says (a bare name, or a URI into that directory). A missing one is a
        ``CorruptLogError``: no older checkpoint is tried instead."""
        keys = [f"{self.prefix}{SIDECAR_DIR}/{unquote(p.rsplit('/', 1)[-1])}" for p in paths]

        def get(key: str) -> bytes:
            try:
                return self.store.get_range(key, 0)
            except NotFound:
                raise CorruptLogError(f"table {self.table!r}: checkpoint sidecar {key} "
                                      "is missing") from None
        return self._map(get, keys)

    def _with_commits(self, load: Callable[[], SnapshotBuilder], lo: int,
                      hi: int) -> tuple[SnapshotBuilder, dict[int, Commit]]:
        """``load()`` (a checkpoint) while the commits in (lo, hi] are fetched, so that a cold
        snapshot costs one round trip for both, not one after the other. A commit that is
        missing is left out (``commits_between`` fetches it again and reports it)."""
        def commit(v: int) -> Commit | None:
            try:
                return self.read_commit_raw(v)[0]
            except NotFound:
                return None

        jobs: list[Callable[[], Any]] = [load,
                                         *[lambda v=v: commit(v) for v in range(lo + 1, hi + 1)]]
        got = self._map(lambda job: job(), jobs)
        return got[0], {v: c for v, c in enumerate(got[1:], lo + 1) if c is not None}

    def unstable_versions(self, upto: int) -> set[int]:
        """Cached versions <= ``upto`` that may still change (open in-place markers)."""
        with self._lock:
            return {v for v in self._unstable if v <= upto}

    # -- version discovery ---------------------------------------------------
    def latest_version(self) -> int:
        """Newest version by LIST (from what we already know); -1 if the table has no log."""
        with self._lock:
            known = self._latest
        if known < 0:
            hint = self.read_last_checkpoint()
            after = int(hint["version"]) - 1 if hint else None
            listing = self.list_log(after=after)
            if hint and not listing.commits and not listing.checkpoints:
                listing = self.list_log()
        else:
            listing = self.list_log(after=known)
        newest = max(listing.commits, default=-1)
        cks = listing.complete_checkpoints()
        if cks:
            newest = max(newest, cks[-1])
            with self._lock:
                self._last_checkpoint_version = max(self._last_checkpoint_version, cks[-1])
        with self._lock:
            self._latest = max(self._latest, newest)
            return self._latest

    def known_latest(self) -> int:
        """The newest version this client has seen (no request)."""
        with self._lock:
            return self._latest

    def newest(self) -> int:
        """Newest version: GET-probe forward from what we know (one GET when nothing is new,
        instead of a LIST); LIST only when we know nothing about the table yet."""
        known = self.known_latest()
        if known < 0:
            return self.latest_version()
        return self.probe_versions(known)

    def probe_versions(self, after: int) -> int:
        """Newest version by GET-probing forward from ``after`` (no LIST)."""
        v = after
        while True:
            try:
                self.read_commit_raw(v + 1)
            except NotFound:
                return v
            v += 1

    def exists(self) -> bool:
        return self.latest_version() >= 0

    # -- snapshots -----------------------------------------------------------
    def snapshot(self, version: int | None = None, *, list_log: bool = True) -> Snapshot:
        """The snapshot at ``version`` (newest by LIST when None).

        ``list_log=False`` builds it from GETs alone (the caller knows the version,
        e.g. from the global version log), LISTing only when no checkpoint hint
        covers it and nothing is cached.
        """
        builder: SnapshotBuilder | None = None
        base: Snapshot | None = None
        fetched: dict[int, Commit] = {}  # commits read together with the checkpoint (fresh)
        if version is None:
            with self._lock:
                cold = self._base is None
            if cold:
                builder, version, fetched = self._cold_latest()  # one hint GET and one LIST
            else:
                version = self.latest_version()
        if version < 0:
            raise not_found(self)
        if builder is None:
            with self._lock:
                base = (self._base if self._base is not None and self._base.version <= version
                        else None)
            if base is None:
                builder = self._cold_builder(version, list_log=list_log)
            else:
                builder = SnapshotBuilder(self.table, base)
        with self._lock:
            stale = [v for v in self._unstable
                     if builder.version < v <= version and v not in fetched]
        for v in stale:  # in-place markers may have been filled since we read them
            self.read_commit_raw(v)
        unstable = False
        # newest snapshot below the first commit that may still change
        prefix: Snapshot | None = None
        if fetched and all(v in fetched for v in range(builder.version + 1, version + 1)):
            commits = sorted(fetched.items())
        else:
            commits = self.commits_between(builder.version, version)
        for v, c in commits:
            if not unstable and not self.is_final(c):
                unstable = True
                prefix = builder.build() if builder.version >= 0 else None
            builder.apply(v, c)
        snap = builder.build()
        new_base = prefix if unstable else snap
        with self._lock:
            if snap.version >= self._ict_at[0]:
                self._ict_at = (snap.version, ict.enabled(snap.metadata))
            if new_base is not None and (self._base is None
                                         or new_base.version > self._base.version):
                self._base = new_base
        return snap

    def _cold_latest(self) -> tuple[SnapshotBuilder, int, dict[int, Commit]]:
        """First load of the newest version: the checkpoint hint, then one LIST from it, then the
        checkpoint and the commits after it together."""
        hint = self.read_last_checkpoint()
        hv = int(hint["version"]) if hint else -1
        listing = self.list_log(after=hv - 1 if hv >= 0 else None)
        if hv >= 0 and not listing.has_checkpoint(hv):
            listing = self.list_log()  # the hint names a checkpoint that is gone
        cks = listing.complete_checkpoints()
        latest = max(listing.commits + cks, default=-1)
        with self._lock:
            self._latest = max(self._latest, latest)
            if cks:
                self._last_checkpoint_version = max(self._last_checkpoint_version, cks[-1])
        if latest < 0:
            return SnapshotBuilder(self.table), -1, {}
        if cks:
            cv = cks[-1]
            return self._cold_from(cv, listing.checkpoint_keys(cv), latest)
        if listing.commits and listing.commits[0] != 0:
            raise CorruptLogError(f"table {self.table!r}: log starts at "
                                  f"version {listing.commits[0]} without a checkpoint")
        return SnapshotBuilder(self.table), latest, {}

    def _cold_from(self, cv: int, keys: list[str],
                   latest: int) -> tuple[SnapshotBuilder, int, dict[int, Commit]]:
        builder, fetched = self._with_commits(lambda: self._load_checkpoint(cv, keys), cv, latest)
        return builder, latest, fetched

    def _cold_builder(self, version: int, *, list_log: bool) -> SnapshotBuilder:
        hint = self.read_last_checkpoint()
        if hint is not None and int(hint["version"]) <= version:
            hv = int(hint["version"])
            parts = int(hint.get("parts") or 1)
            v2 = hint.get("v2Checkpoint")
            v2_path = v2.get("path") if isinstance(v2, dict) else None
            if isinstance(v2_path, str) and _V2_CKPT_RE.match(v2_path) \
                    and v2_path.startswith(f"{hv:020d}."):
                keys = [self.prefix + v2_path]  # a UUID-named checkpoint
            elif parts == 1:
                keys = [self.checkpoint_key(hv)]
            else:
                keys = [f"{self.prefix}{hv:020d}.checkpoint.{i:010d}.{parts:010d}.parquet"
                        for i in range(1, parts + 1)]
            try:
                if list_log:  # a newer complete checkpoint than the hint may exist: LIST meanwhile
                    jobs: list[Callable[[], Any]] = [lambda: self._load_checkpoint(hv, keys),
                                                     lambda: self.list_log(after=hv)]
                    b, listing = self._map(lambda job: job(), jobs)
                else:
                    b = self._load_checkpoint(hv, keys)
                with self._lock:
                    self._last_checkpoint_version = max(self._last_checkpoint_version, hv)
                if list_log:
                    newer = [v for v in listing.complete_checkpoints() if hv < v <= version]
                    if newer:
                        nv = newer[-1]
                        b = self._load_checkpoint(nv, listing.checkpoint_keys(nv))
                    for v in listing.commits:
                        with self._lock:
                            self._latest = max(self._latest, v)
                return b
            except (NotFound, CorruptLogError):
                pass  # hint points at a deleted checkpoint
        if not list_log and hint is None:
            return SnapshotBuilder(self.table)  # replay from version 0 by GETs
        listing = self.list_log()
        cks = [v for v in listing.complete_checkpoints() if v <= version]
        if cks:
            cv = cks[-1]
            return self._load_checkpoint(cv, listing.checkpoint_keys(cv))
        if listing.commits and listing.commits[0] != 0:
            raise CorruptLogError(
                f"table {self.table!r}: log starts at version {listing.commits[0]} and no "
                f"checkpoint covers version {version}"
            )
        return SnapshotBuilder(self.table)

    # -- writing -------------------------------------------------------------
    def write_commit(self, version: int, commit: Commit) -> str:
        """put-if-absent of ``version``; ``VersionExists`` if another writer holds it.

        A write that reports an error is settled by reading it back (``store.settle``):
        an error never hides a version we did write. ``OutcomeUnknown`` if that fails too.
        On a table with in-commit timestamps the commit is stamped for ``version`` first, on one
        with row tracking its new files get their row ids there (``row_tracking.py``)."""
        commit = self.stamp(version, self._row_ids(version, commit))
        key, data = self.commit_key(version), commit.to_bytes()
        etag: str | None
        try:
            etag = self.store.put_if_absent(key, data)
        except PreconditionFailed:
            raise VersionExists(version) from None
        except StorageError as e:
            etag = settle_create(self.store, key, data, e)
            if etag is None:
                raise VersionExists(version) from None
        self._remember(version, commit)
        return etag

    def rewrite_commit(self, version: int, commit: Commit, etag: str) -> str:
        """Conditional overwrite of a version we hold (a marker); PreconditionFailed if it moved.
        Settled like ``write_commit`` when the store reports an error. The version keeps the
        in-commit timestamp it was first written with (the versions after it are later)."""
        commit = self.stamp(version, self._row_ids(version, commit), rewrite=True)
        key, data = self.commit_key(version), commit.to_bytes()
        new: str | None
        try:
            new = self.store.put_if_match(key, data, etag)
        except StorageError as e:
            new = settle_replace(self.store, key, data, etag, e)
            if new is None:
                raise PreconditionFailed(key) from None
        self._remember(version, commit)
        return new

    def _row_ids(self, version: int, commit: Commit) -> Commit:
        """Row ids are decided where the version is: a commit retried higher gets them anew."""
        return row_tracking.at_version(commit, version, self._base,
                                       lambda: self.snapshot(version - 1, list_log=False))

    def stamp(self, version: int, commit: Commit, *, rewrite: bool = False) -> Commit:
        """``commit`` as put at ``version`` (``ict.stamp``: with an in-commit timestamp where
        the table has them). A GET of the previous commit only when neither the cache nor the
        newest snapshot (at that version, without them) tells."""
        with self._lock:
            at, on = self._ict_at
        return ict.stamp(version, commit, rewrite=rewrite, known=self._commits.get,
                         fetch=self._fetch, off_at=at if not on else -2,
                         file_time=lambda v: self.store.head(self.commit_key(v)).last_modified)

    def _fetch(self, version: int) -> Commit | None:
        try:
            return self.read_commit_raw(version)[0]
        except NotFound:
            return None

    # -- checkpoints ---------------------------------------------------------
    def last_checkpoint_version(self) -> int:
        with self._lock:
            return self._last_checkpoint_version

    def checkpoint_due(self, version: int, snapshot_config: dict[str, str]) -> bool:
        cfg = {k.lower(): v for k, v in snapshot_config.items()}
        try:
            interval = int(cfg.get("delta.checkpointinterval", DEFAULT_CHECKPOINT_INTERVAL))
        except ValueError:
            interval = DEFAULT_CHECKPOINT_INTERVAL
        return interval > 0 and version > 0 and version % interval == 0

    def write_checkpoint(self, snap: Snapshot, now_ms: int | None = None,
                         tags: dict[str, str] | None = None) -> None:
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        keep_after = now_ms - _retention_ms(snap.metadata.configuration)
        files = snap.files.table()
        v2 = writes_v2_checkpoints(snap.protocol, snap.metadata)
        data, rows = write_checkpoint_table(snap.protocol, snap.metadata, files,
                                            snap.tombstones.table_kept(keep_after, now_ms),
                                            snap.app_txns, snap.domains,
                                            v2_version=snap.version if v2 else None)
        # a V2 one under a fresh UUID name (a classic name would do too, but older clients then
        # fail on the checkpointMetadata rather than on the protocol)
        name = f"{snap.version:020d}.checkpoint.{uuid.uuid4()}.parquet" if v2 else None
        self.store.put(self.prefix + name if name else self.checkpoint_key(snap.version), data)
        self.store.put(self.last_checkpoint_key,
                       last_checkpoint_json(snap.version, rows, len(data), files.num_rows,
                                            v2_name=name, now_ms=now_ms, tags=tags))
        with self._lock:
            self._last_checkpoint_version = max(self._last_checkpoint_version, snap.version)


def _parse_hint(data: bytes) -> dict | None:
    try:
        d = json.loads(data)
        int(d["version"])
        return d
    except (ValueError, KeyError, TypeError):
        return None  # a damaged hint is only a hint: fall back to listing


def _fill_listing_gaps(log: DeltaLog, out: LogListing) -> None:
    """A listing taken while commits are written can miss one below a newer one (a local
    directory is read in hash order, not by name). Clean-up deletes from the oldest end only, so
    a hole between two listed commits is asked for (one HEAD) before it counts as gone."""
    c = out.commits
    if not c or c[-1] - c[0] + 1 == len(c):
        return  # no hole (the usual case: checked without walking the listing)
    have = set(c)
    found = [v for v in range(c[0] + 1, c[-1])
             if v not in have and log.store.exists(log.commit_key(v))]
    if found:
        out.commits = sorted(have | set(found))


def not_found(log: DeltaLog) -> TableNotFoundError:
    """The error for a table without a log: ``LakeNotFoundError`` when the lake's root folder
    itself is missing (a mistyped path), which one more look, on this path only, tells."""
    if not log.store.root_exists():
        root = log.store.root_uri or "this root"
        return LakeNotFoundError(f"there is no lake at {root}: the folder does not exist, so "
                                 f"there is no table {log.table!r} (its first write, e.g. "
                                 "create_table, creates the lake)")
    return TableNotFoundError(f"table {log.table!r} does not exist (no Delta log "
                              f"at {log.prefix})")
