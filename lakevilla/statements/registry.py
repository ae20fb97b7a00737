"""The statement kinds by the name their sublog entries carry.

Adding a statement kind is one module with its class plus one line here. The only place that
turns a kind's name into behaviour: everything else asks the statement itself.
"""

from __future__ import annotations

from typing import Any

from ..delta.actions import AddFile
from ..errors import CorruptLogError
from .add_columns import AddColumns
from .base import Statement
from .drop_columns import DropColumns
from .insert import Insert
from .merge import Merge
from .optimize import Optimize
from .overwrite import Overwrite
from .read import Read
from .rename_column import RenameColumn
from .set_properties import SetProperties
from .update import Delete, Update

KINDS: dict[str, type[Statement]] = {cls.kind: cls for cls in (
    Read, Insert, Update, Delete, Merge, Overwrite, Optimize, AddColumns, SetProperties,
    RenameColumn, DropColumns,
)}


def decode(kind: str, seq: int, table: str, statement: dict[str, Any] | None, added: list[AddFile],
           *, removed: list[AddFile], read_files: set[str], logical: bool) -> Statement:
    """The statement a sublog entry describes. A physical entry names files only: the
    statement is not redoable, except an insert, whose files are its whole input."""
    cls = KINDS.get(kind)
    if cls is None:
        raise CorruptLogError(f"sublog entry of an unknown statement kind {kind!r} (written by a "
                              "newer lakevilla?)")
    st = cls.decode(seq, table, statement or {}, added)
    st.removed, st.read_files, st.logical = removed, read_files, logical
    st.redoable = logical or not cls.can_be_logical
    return st


def read_of(seq: int, table: str, where: str | None, files: set[str]) -> Statement:
    """A read recorded in a sublog entry (its rows were not kept: a resumed run cannot compare)."""
    return Read(seq=seq, table=table, where=where, read_files=files)
