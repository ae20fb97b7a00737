"""Table names, and where lakevilla keeps its own objects under the lake root."""

from __future__ import annotations

import os
import re
import secrets
import time

from .errors import InvalidTableNameError

# "delta-0.8.0", "sales.v2": dots inside a segment are common in Delta table names; a segment
# starting with a dot ("..", ".hidden") is not a table
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
LV_DIR = "_lakevilla"
TXN_DIR = f"{LV_DIR}/txns"
GVL_DIR = f"{LV_DIR}/gvl"
RIDES_DIR = f"{LV_DIR}/rides"


def check_table_name(name: str) -> str:
    """A table is a plain relative path of simple segments inside the lake root.

    Absolute paths, ``..``, URLs, empty segments and names starting with ``_`` (reserved
    for ``_delta_log`` and ``_lakevilla``) are refused, so no table can escape the root
    or shadow lakevilla's own folders.
    """
    if not isinstance(name, str) or not name:
        raise InvalidTableNameError(f"table name must be a non-empty string, got {name!r}")
    if "://" in name or name.startswith(("/", "\\")) or "\\" in name or os.path.isabs(name):
        raise InvalidTableNameError(f"table name {name!r} must be a path relative to the lake root")
    segments = name.split("/")
    for seg in segments:
        if seg in ("", ".", ".."):
            raise InvalidTableNameError(f"table name {name!r} escapes or leaves the lake root "
                                        f"({seg!r} segment)")
        if not _SEGMENT.fullmatch(seg):
            raise InvalidTableNameError(
                f"table name {name!r}: segment {seg!r} must start with a letter or digit and use "
                "only letters, digits, '_', '-' and '.'")
    return name


def new_txn_id() -> str:
    """Globally unique and roughly time-ordered: milliseconds then 64 random bits."""
    return f"{int(time.time() * 1000):013x}-{secrets.token_hex(8)}"


def attempt_id(txn_id: str, attempt: int) -> str:
    return f"{txn_id}.{attempt}"


def record_key(attempt: str) -> str:
    return f"{TXN_DIR}/{attempt}.json"


def sublog_prefix(txn_id: str) -> str:
    return f"{TXN_DIR}/{txn_id}/"


def sublog_key(txn_id: str, seq: int) -> str:
    return f"{sublog_prefix(txn_id)}{seq:08d}.json"


def staged_prefix(txn_id: str, seq: int) -> str:
    """Where statement ``seq`` stages what a redo in another process needs (a merge's source):
    beside the transaction's sublogs, so maintenance deletes them together; readers of that
    folder parse only its ``.json`` entries. One ``<prefix>.parquet`` file, or files under
    ``<prefix>/`` when an engine's executors write them."""
    return f"{sublog_prefix(txn_id)}merge-source-{seq:08d}"


def rides_prefix(table: str) -> str:
    """Where group commit keeps the leads and requests of ``table``'s versions."""
    return f"{RIDES_DIR}/{table}/"


def ride_prefix(table: str, version: int) -> str:
    return f"{rides_prefix(table)}{version:020d}/"


def lead_key(table: str, version: int) -> str:
    return f"{ride_prefix(table, version)}lead.json"


def request_key(table: str, version: int, attempt: str) -> str:
    return f"{ride_prefix(table, version)}{attempt}.json"
