"""What a read returned, kept so that a redo can tell whether it would return the same rows.

A read whose rows the client has consumed cannot be redone blindly: the client computed
with them. But if the read, run again on the newer snapshot, returns exactly the rows it
returned first, the client computed with what the newer snapshot holds as well, and the
transaction may move there (validation by value, the way Hekaton repeats its scans at
commit). So a conflict that only a file rewrite made (another writer changed other columns
or other rows of the file) is redone instead of aborting the transaction. Only small
embedded results (Arrow tables) are kept; any other read still aborts on a conflict.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

KEEP_MAX_ROWS = 10_000  # rows of one read kept for the comparison (the client holds them anyway)


class ReadChanged(Exception):
    """A redone read returned other rows than the client consumed (internal: the conflict
    policy turns it into an abort)."""


def keep(result: Any) -> pa.Table | None:
    """The result to compare a redo with, or None when it cannot be compared."""
    if isinstance(result, pa.Table) and result.num_rows <= KEEP_MAX_ROWS:
        return result
    return None


def same_rows(first: pa.Table, again: Any) -> bool:
    """The same multiset of rows, in any order, with the same columns and types."""
    if (not isinstance(again, pa.Table)
            or not first.schema.equals(again.schema, check_metadata=False)):
        return False
    if first.num_rows != again.num_rows:
        return False
    if first.num_rows == 0 or first.num_columns == 0:
        return True
    keys = [(name, "ascending") for name in first.column_names]
    try:
        return first.sort_by(keys).equals(again.sort_by(keys))
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return first.equals(again)  # a type Arrow cannot sort by: same order or not the same
