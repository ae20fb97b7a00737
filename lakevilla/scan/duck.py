"""The one way lakevilla opens DuckDB: one in-memory database per process, locked down,
a connection (cursor) of it per thread.

DuckDB evaluates user expressions (``where``, ``set``) and statistics predicates
over arrow data we hand it. It never needs a file, the network or an extension,
so those are switched off before any user text reaches it, and the
configuration is locked so that no statement can switch them back on. This is
the second line of defence; the first is the expression grammar
(``lakevilla.scan.expressions``), which never lets a table function or a subquery
through. The settings and the lock belong to the database, so every thread's
cursor inherits them; opening a database costs ~30 ms of CPU, a cursor ~10 us,
and the I/O pool's threads each need one (a database per thread cost 32
threads a second of CPU per process).
"""

from __future__ import annotations

import threading

import pyarrow as pa

_local = threading.local()
_db = None  # the process's locked-down database (every connection is a cursor of it)
_db_lock = threading.Lock()

# settings fixed for every connection; lock_configuration comes last
LOCKED_CONFIG = {
    "enable_external_access": False,  # no file system, no network, no ATTACH, no COPY
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
}
# GLOBAL: a plain SET is the session's own, and a cursor would start from the machine's zone
SESSION = ("SET GLOBAL TimeZone='UTC'", "SET GLOBAL threads=1", "SET lock_configuration=true")


def _database():
    global _db
    with _db_lock:
        if _db is None:
            import duckdb

            db = duckdb.connect(":memory:", config=dict(LOCKED_CONFIG))
            for stmt in SESSION:
                db.execute(stmt)
            _db = db
        return _db


def connection():
    """This thread's DuckDB connection (created on first use)."""
    con = getattr(_local, "con", None)
    if con is None:
        con = _local.con = _database().cursor()
    return con


def to_arrow(rel_or_cur) -> pa.Table:
    for name in ("to_arrow_table", "fetch_arrow_table", "arrow"):
        fn = getattr(rel_or_cur, name, None)
        if fn is not None:
            out = fn()
            return out.read_all() if isinstance(out, pa.RecordBatchReader) else out
    raise RuntimeError("unsupported duckdb version")


def query(sql: str, tables: dict[str, pa.Table] | None = None,
          params: list | None = None) -> pa.Table:
    """Run one SELECT with ``tables`` registered under their names for its duration."""
    con = connection()
    tables = tables or {}
    for name, t in tables.items():
        con.register(name, t)
    try:
        if params:
            return to_arrow(con.execute(sql, params))
        return to_arrow(con.sql(sql))
    finally:
        for name in tables:
            con.unregister(name)


def rows(sql: str, tables: dict[str, pa.Table] | None = None,
         params: list | None = None) -> list[tuple]:
    con = connection()
    tables = tables or {}
    for name, t in tables.items():
        con.register(name, t)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        for name in tables:
            con.unregister(name)
