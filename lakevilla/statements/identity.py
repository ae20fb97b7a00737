"""Statements that write new rows (insert, overwrite) into a table with identity columns.

The engine numbers the identity columns the data lacks from the view's high-water marks
(``engines/identity.py``); the statement then advances the marks in the view's metadata, so the
commit carries them in a metaData action. That action conflicts with every concurrent commit
that changes the metadata, another writer's marks included: the loser's redo runs on the
winner's snapshot and numbers its rows again, above the winner's marks. New rows are otherwise
kept across a redo (their files are the statement's source); numbered ones are read back
without their numbers and written anew, and the old files become garbage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..delta.actions import AddFile
from ..engines import identity
from .base import Statement
from .evolution import data_fields

if TYPE_CHECKING:
    from ..engines.api import Engine
    from .view import TableWork


@dataclass(eq=False, kw_only=True)
class Marks(Statement):
    """A statement that may number identity columns: the marks it leaves join the view on its
    run, on a rebase and on a resume (``change_view``), and its sublog entry carries them."""

    marks: dict[str, int] = field(default_factory=dict)  # identity high-water marks after it

    def change_view(self, tw: TableWork) -> None:
        super().change_view(tw)
        if self.marks:
            tw.advance_identity(self.marks)

    def reset_for_redo(self) -> None:
        super().reset_for_redo()
        self.marks = {}  # numbered again on the new snapshot

    def options(self) -> dict[str, Any]:
        return {**({"identity": self.marks} if self.marks else {}), **super().options()}

    @classmethod
    def decode(cls, seq: int, table: str, statement: dict[str, Any],
               added: list[AddFile]) -> Statement:
        st = super().decode(seq, table, statement, added)
        marks = (statement.get("options") or {}).get("identity") or {}
        if isinstance(st, Marks):
            st.marks = {str(k): int(v) for k, v in marks.items()}
        return st


@dataclass(eq=False, kw_only=True)
class NewRows(Marks):
    """Insert and overwrite: rows the data gives, numbered by the engine where it lacks them."""

    numbered: list[str] = field(default_factory=list)  # identity columns it generated

    def write_rows(self, tw: TableWork, engine: Engine, data: Any) -> list[AddFile]:
        """Write ``data`` as new files, numbering what it lacks, and advance the marks."""
        cols = identity.absent(tw.ctx, [f.name for f in data_fields(data)]) if tw.ctx.identity \
            else []
        files = engine.write(tw.ctx, data)
        self.numbered = [c.name for c in cols]
        self._advance(tw, files)
        return files

    def renumber(self, tw: TableWork, engine: Engine, files: list[AddFile]) -> list[AddFile]:
        """A redo's new rows: ``files`` again when nothing was numbered, else their rows
        without the numbers, written anew and numbered from the view's marks."""
        if not self.numbered:
            return files
        keep = [f.name for f in tw.ctx.schema if f.name not in self.numbered]
        rows = engine.scan(tw.ctx, files, None, keep) if files else None
        new = engine.write(tw.ctx, rows) if rows is not None else []
        self._advance(tw, new)
        return new

    def _advance(self, tw: TableWork, files: list[AddFile]) -> None:
        n = sum(a.num_records or 0 for a in files)
        by_name = {c.name: c for c in tw.ctx.identity}
        marks = {c: by_name[c].mark_after(n) for c in self.numbered}
        self.marks = {c: m for c, m in marks.items() if m is not None}

    @property
    def kept_files(self) -> set[str]:
        """Numbered rows are numbered again by a redo: their files are not kept."""
        return set() if self.numbered else {a.path for a in self.new_files}

    @property
    def new_files(self) -> list[AddFile]:
        raise NotImplementedError

    @classmethod
    def decode(cls, seq: int, table: str, statement: dict[str, Any],
               added: list[AddFile]) -> Statement:
        st = super().decode(seq, table, statement, added)
        if isinstance(st, NewRows):
            st.numbered = list(st.marks)
        return st
