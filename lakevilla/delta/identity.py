"""Identity columns (PROTOCOL.md, "Identity Columns"): what a table's field metadata says, and the
values a writer may take next.

A column is an identity column when its field metadata holds ``delta.identity.start`` and
``delta.identity.step``; ``delta.identity.highWaterMark`` is the last value any writer generated
(absent before the first), ``delta.identity.allowExplicitInsert`` whether the data may give the
column. The mark lives in the table's metadata, so advancing it is a metaData action: two writers
generating at once both change the metadata, which conflicts, and the loser generates again above
the winner's mark (a redo, or an LV[DL] statement run again).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from ..errors import SchemaMismatchError
from .actions import Metadata

START, STEP = "delta.identity.start", "delta.identity.step"
HIGH_WATER_MARK = "delta.identity.highWaterMark"
ALLOW_EXPLICIT = "delta.identity.allowExplicitInsert"


@dataclass(frozen=True)
class IdentityColumn:
    name: str
    start: int
    step: int
    high_water_mark: int | None = None
    allow_explicit_insert: bool = False

    def first(self) -> int:
        """The next value to generate: ``start``, then one step past the mark."""
        return self.start if self.high_water_mark is None else self.high_water_mark + self.step

    def mark_after(self, n: int) -> int | None:
        """The mark once ``n`` more values were generated (the last of them)."""
        return self.high_water_mark if n <= 0 else self.first() + (n - 1) * self.step


def identity_columns(metadata: Metadata | None) -> tuple[IdentityColumn, ...]:
    """The table's identity columns (top-level fields), as its metadata describes them."""
    if metadata is None:
        return ()
    out = []
    for f in json.loads(metadata.schema_string).get("fields") or []:
        md = f.get("metadata") or {}
        if START not in md and STEP not in md:
            continue
        try:
            step = int(md.get(STEP, 1))
            hwm = md.get(HIGH_WATER_MARK)
            col = IdentityColumn(f["name"], int(md.get(START, 1)), step,
                                 None if hwm is None else int(hwm),
                                 str(md.get(ALLOW_EXPLICIT, False)).lower() == "true")
        except (TypeError, ValueError) as e:
            raise SchemaMismatchError(f"identity column {f.get('name')!r}: malformed field "
                                      f"metadata {md!r} ({e})") from None
        if step == 0 or f.get("type") != "long":
            raise SchemaMismatchError(f"identity column {f['name']!r}: Delta's identity columns "
                                      "are of type long (int64) with a step other than 0")
        out.append(col)
    return tuple(out)


def with_marks(metadata: Metadata, marks: dict[str, int]) -> Metadata:
    """``metadata`` with the identity columns' high-water marks set to ``marks``."""
    schema = json.loads(metadata.schema_string)
    changed = False
    for f in schema.get("fields") or []:
        if f["name"] in marks:
            md = dict(f.get("metadata") or {})
            if md.get(HIGH_WATER_MARK) != marks[f["name"]]:
                md[HIGH_WATER_MARK] = marks[f["name"]]
                f["metadata"] = md
                changed = True
    if not changed:
        return metadata
    return dataclasses.replace(metadata, schema_string=json.dumps(schema, separators=(",", ":")))


def field_metadata(start: int = 1, step: int = 1,
                   allow_explicit_insert: bool = False) -> dict[bytes, bytes]:
    """Arrow field metadata making a column an identity column (``lakevilla.identity``)."""
    if step == 0:
        raise SchemaMismatchError("an identity column's step must not be 0")
    return {START.encode(): str(int(start)).encode(), STEP.encode(): str(int(step)).encode(),
            ALLOW_EXPLICIT.encode(): b"true" if allow_explicit_insert else b"false"}
