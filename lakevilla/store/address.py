"""How another process opens the store a lake was opened with: a Spark executor that reads
and writes deletion vectors through lakevilla's store layer where its rows are.

An address is the lake's root and storage options, nothing else: the wrappers of the opening
process (counting, latency, injected faults) stay there, so an executor's requests are its
own, counted by nobody. ``store.open_address`` opens one store per address per process.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StoreAddress:
    uri: str
    options: tuple[tuple[str, str], ...] = ()
    read_only: bool = False
