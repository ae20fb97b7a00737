"""Module #4.2: validating a transaction against the head of the global log.

The authors' rules, in terms of table versions, refined to data files:

* R1 (stale read, serializable only): a commit between the version a table was
  read at and the head's version, older than the newest ``slack`` versions,
  invalidates a read (removed a file read, or added one that can match its
  predicate).
* R2 (write version taken): our table commit cannot go where the head says
  another transaction's commit is (or will be): it must follow every pending
  write on that table.
* R3 (lost update): every commit below our write version must have been checked
  against our writes; one we did not account for aborts or redoes us.

Markers keep other lakevilla writers off our written tables until we resolve,
so R2/R3 mostly hold by construction; the checks here are the proof.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..delta.actions import Commit
from ..scan.conflicts import Footprint, first_conflict


@dataclass
class Violation:
    rule: str
    table: str
    version: int
    reason: str

    def __str__(self) -> str:
        return f"{self.rule} on {self.table}@{self.version}: {self.reason}"


def r1_stale_reads(
    table: str, footprints: list[Footprint], commits: list[tuple[int, Commit]], hidden: int,
    slack: int, schema, partition_columns,
) -> Violation | None:
    considered = [(v, c) for v, c in commits if v <= hidden - slack]
    hit = first_conflict([f for f in footprints if not f.blind], considered, schema,
                         partition_columns)
    if hit:
        return Violation("R1", table, hit[1], hit[2])
    return None


def r3_unvalidated_write(written: Iterable[str], base_of: Callable[[str], int | None],
                         validated_upto: Callable[[str], int]) -> str | None:
    """R3: the first table we write where the global log names a commit below our write
    version that we never validated against our operations (None: there is none).
    ``base_of`` is the table's version in the head entry (resolved lazily, in order)."""
    for name in written:
        b = base_of(name)
        if b is not None and b > validated_upto(name):  # R3: someone committed below our write
            return name
    return None
