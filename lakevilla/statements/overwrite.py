"""Overwrite: replace the whole table, or the rows a predicate selects (Delta's ``replaceWhere``).

With a predicate, every new row must satisfy it (a row where it is false or NULL is an
error, as in Delta and delta-rs), and only the rows it selects go: a file holding some
of them is rewritten with the others, a file holding none stays. The new rows are written
once, as the table's own data files, before anything is removed; a redo on a newer
snapshot keeps them and re-runs only the removal, so the statement's source never has to
be held anywhere else (the sublog names the files, ``Overwrite.inserted``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..delta.actions import AddFile
from ..engines.api import data_file_key
from ..errors import DataOutsidePredicateError
from .identity import NewRows

if TYPE_CHECKING:
    from ..engines.api import Engine
    from ..store import ObjectStore
    from .view import TableWork


def outside(where: str) -> str:
    """The rows ``where`` does not select (NULL counts as not selected)."""
    return f"NOT coalesce(({where}), false)"


@dataclass(eq=False, kw_only=True)
class Overwrite(NewRows):
    kind: ClassVar[str] = "overwrite"
    operation: ClassVar[str] = "WRITE"

    inserted: list[AddFile] = field(default_factory=list)  # the files holding the new rows

    def check_input(self, tw: TableWork, engine: Engine, store: ObjectStore) -> None:
        if self.where is not None:
            engine.validate_where(tw.ctx, self.where)

    def execute(self, tw: TableWork, engine: Engine, data: Any, redo: bool) -> Any:
        if data is not None:
            self.inserted = self.write_rows(tw, engine, data)
            self.rules_checked = tw.ctx.constraints
            if self.where is not None and self.inserted:
                self._check_inside(tw, engine)
        elif self.numbered:  # a redo numbers its rows again, above the marks it now sees
            self.inserted = self.renumber(tw, engine, self.inserted)
            self.rules_checked = tw.ctx.constraints
        else:
            self.recheck_kept(tw, engine, self.inserted)
        cands = tw.candidates(self.where)
        self.read_files = {a.path for a in cands}
        if self.where is None:  # the whole table goes: no file needs reading
            self.removed, rewritten = list(cands), []
        else:
            rr = engine.rewrite(tw.ctx, cands, self.where, None)
            self.removed, rewritten = rr.removed, rr.added
            # the rows it deleted are in change data files: its new rows must be too
            self.cdc = [*rr.cdc, *(engine.change_data(tw.ctx, [], self.inserted) if rr.cdc
                                   else [])]
        self.added = [*rewritten, *self.inserted]
        self.rows = sum(a.num_records or 0 for a in self.inserted)
        return None

    def _check_inside(self, tw: TableWork, engine: Engine) -> None:
        assert self.where is not None
        found = engine.scan(tw.ctx, self.inserted, outside(self.where), None)
        bad = engine.num_rows(found)
        if bad < 0:  # a lazy frame (Spark): count it
            bad = found.count()
        if not bad:
            return
        for a in self.inserted:
            try:
                tw.ctx.store.delete(data_file_key(tw.ctx.name, a.path, tw.ctx.lake_uri))
            except Exception:  # noqa: BLE001 - best effort: no version references them
                pass
        self.inserted = []
        raise DataOutsidePredicateError(
            f"overwrite of {tw.name!r} where {self.where!r}: {bad} row(s) of the new data do not "
            "satisfy the predicate (false or NULL); replaceWhere only writes rows it replaces. "
            "Nothing was written")

    @property
    def new_files(self) -> list[AddFile]:
        return self.inserted

    def encode_more(self) -> dict[str, Any]:
        return {"inserted": [a.to_json() for a in self.inserted]}  # written once, kept across redos

    @classmethod
    def decode_more(cls, statement: dict[str, Any], added: list[AddFile]) -> dict[str, Any]:
        return {"inserted": [AddFile.from_json(a) for a in statement.get("inserted") or []]}
