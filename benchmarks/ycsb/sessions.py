"""One client's connection to one system: a lakevilla ``Lake`` or a delta-rs ``DeltaTable``."""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from .workload import FIELDS, TABLE, Op, counter_of, counter_value


@dataclass
class ClientSpec:
    system: str
    features: str | None            # None: delta-rs alone
    root: str
    storage_options: dict[str, str]
    store_kind: str
    latency: str
    mode: str
    client: int
    ops: list[Op]
    retries: int
    slack: int = 0
    commit_mode: str = "tail"


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


class LvSession:
    """A lakevilla client: its own Lake over its own counting store."""

    per_op_commit = False

    def __init__(self, spec: ClientSpec) -> None:
        import lakevilla as lv
        from lakevilla.store import LatencyStore, open_store

        from ..common import AreaCountingStore, latency_profile

        self.lv = lv
        self.aborts: tuple[type[BaseException], ...] = (lv.TransactionAborted,)
        inner = open_store(spec.root, spec.storage_options or None)
        profile = latency_profile(spec.latency)
        if spec.store_kind == "local" and profile is not None:
            inner = LatencyStore(inner, profile, seed=spec.client)
        self.store = AreaCountingStore(inner, detail=True)
        self.lake = lv.Lake(spec.root, storage_options=spec.storage_options or None,
                            store=self.store, commit_mode=spec.commit_mode)
        self.features = spec.features or ""
        self.slack = spec.slack
        self.per_op_commit = not self.features
        self.stats: Counter[str] = Counter()

    def warm(self, key: int) -> None:
        with self.lake.transaction(features=self.features) as txn:
            txn.read(TABLE, where=f"key = {key}")
        self.lake.flush()
        self.store.reset()

    def begin(self) -> Any:
        return self.lake.begin(features=self.features, slack=self.slack)

    def commit(self, txn: Any) -> None:
        try:
            txn.commit()
        finally:
            self.stats.update(txn.stats)

    def rollback(self, txn: Any) -> None:
        with contextlib.suppress(Exception):
            txn.abort()
        self.stats.update(txn.stats)

    def read(self, txn: Any, key: int) -> int:
        return txn.read(TABLE, where=f"key = {key}").num_rows

    def scan(self, txn: Any, key: int, n: int) -> int:
        return txn.read(TABLE, where=f"key >= {key} AND key < {key + n}").num_rows

    def update(self, txn: Any, key: int, fld: str, value: str) -> None:
        txn.update(TABLE, set={fld: _sql_str(value)}, where=f"key = {key}")

    def insert(self, txn: Any, row: dict[str, Any]) -> None:
        import pyarrow as pa

        txn.insert(TABLE, pa.Table.from_pylist([row], schema=usertable_schema()))

    def rmw(self, txn: Any, key: int, token: str) -> bool:
        t = txn.read(TABLE, where=f"key = {key}", columns=["field0"])
        if t.num_rows == 0:
            return False
        n = counter_of(t.column("field0")[0].as_py())
        txn.update(TABLE, set={"field0": _sql_str(counter_value(n + 1, token))},
                   where=f"key = {key}")
        return True

    def finish(self) -> dict[str, int]:
        self.lake.flush()
        counts = dict(self.store.snapshot())
        self.lake.close()
        return counts

    def areas(self) -> dict[str, int]:
        """Requests by kind and area ("get log:commit"): where they went, for the report."""
        return {f"{kind} {area}": n
                for (kind, area), n in sorted(self.store.area_snapshot().items())}


class DeltaRsSession:
    """A delta-rs client: its own DeltaTable, refreshed before every operation, its own
    writer; a CommitFailedError is an abort the application retries."""

    per_op_commit = True

    def __init__(self, spec: ClientSpec) -> None:
        from deltalake import DeltaTable
        from deltalake.exceptions import CommitFailedError

        self.aborts = (CommitFailedError,)
        self.dt = DeltaTable(f"{spec.root}/{TABLE}", storage_options=spec.storage_options or None)
        self.stats: Counter[str] = Counter()

    def warm(self, key: int) -> None:
        self.read(self.begin(), key)

    def begin(self) -> Any:
        self.dt.update_incremental()
        return None

    def commit(self, txn: Any) -> None:
        pass

    def rollback(self, txn: Any) -> None:
        pass

    def _rows(self, filters: list, columns: list[str] | None = None):
        import pyarrow as pa

        return pa.table(self.dt.to_pyarrow_table(columns=columns, filters=filters))

    def read(self, txn: Any, key: int) -> int:
        return self._rows([("key", "=", key)]).num_rows

    def scan(self, txn: Any, key: int, n: int) -> int:
        return self._rows([("key", ">=", key), ("key", "<", key + n)]).num_rows

    def update(self, txn: Any, key: int, fld: str, value: str) -> None:
        self.dt.update(updates={fld: _sql_str(value)}, predicate=f"key = {key}")

    def insert(self, txn: Any, row: dict[str, Any]) -> None:
        import pyarrow as pa
        from deltalake import write_deltalake

        write_deltalake(self.dt, pa.Table.from_pylist([row], schema=usertable_schema()),
                        mode="append")

    def rmw(self, txn: Any, key: int, token: str) -> bool:
        t = self._rows([("key", "=", key)], columns=["field0"])
        if t.num_rows == 0:
            return False
        n = counter_of(t.column("field0")[0].as_py())
        # no refresh in between: delta-rs checks the commits since the version it read
        self.dt.update(updates={"field0": _sql_str(counter_value(n + 1, token))},
                       predicate=f"key = {key}")
        return True

    def finish(self) -> dict[str, int]:
        return {}


def usertable_schema():
    import pyarrow as pa

    return pa.schema([("key", pa.int64())] + [(f, pa.string()) for f in FIELDS])


def open_session(spec: ClientSpec) -> Any:
    return DeltaRsSession(spec) if spec.features is None else LvSession(spec)
