"""What a transaction needs of the client that made it.

``Lake`` implements it; the transaction core depends on this protocol, not on ``Lake``, so the
facade sits above the core and nothing below imports it (not even for type checking).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .delta.log import DeltaLog
    from .delta.snapshot import Snapshot
    from .heartbeats import Heartbeats
    from .isolation.gvl import GlobalVersionLog
    from .isolation.units import RecordCache
    from .recovery.stalled import Services
    from .settings import LakeSettings
    from .store import ObjectStore


class Client(Protocol):
    store: ObjectStore
    root_uri: str
    engine: Any
    gvl: GlobalVersionLog
    records: RecordCache
    heartbeats: Heartbeats

    @property
    def settings(self) -> LakeSettings: ...

    def now(self) -> float: ...

    def log(self, table: str) -> DeltaLog: ...

    def map(self, fn: Callable, items: Iterable) -> list: ...

    def background(self, fn: Callable[[], None]) -> None: ...

    def services(self) -> Services: ...

    def checkpoint_if_due(self, log: DeltaLog, version: int) -> None: ...

    def create_table(self, name: str, schema: Any = None, partition_by: list[str] | str | None = None, *,
                     data: Any = None, properties: dict[str, str] | None = None, if_not_exists: bool = False,
                     description: str | None = None) -> Snapshot: ...
