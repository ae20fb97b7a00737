"""Every error lakevilla raises on purpose derives from LakeVillaError.

Store-level conditions (not found, precondition failed) are separate, lower-level
exceptions in ``lakevilla.store``; they never escape the public API unwrapped.
"""

from __future__ import annotations


class LakeVillaError(Exception):
    """Base class: catch this to handle anything lakevilla reports."""


class TableNotFoundError(LakeVillaError):
    pass


class TableExistsError(LakeVillaError):
    pass


class InvalidTableNameError(LakeVillaError):
    """The name is not a plain relative path inside the lake root."""


class SchemaMismatchError(LakeVillaError):
    pass


class InvalidExpressionError(LakeVillaError):
    """A ``where`` or ``set`` expression does not parse or bind against the table schema."""


class UnsupportedTableFeatureError(LakeVillaError):
    """The table uses a Delta reader/writer feature lakevilla cannot honour."""

    def __init__(self, table: str, feature: str, detail: str = "") -> None:
        self.table = table
        self.feature = feature
        msg = f"table {table!r} uses the Delta feature {feature!r}, which lakevilla does not support"
        if detail:
            msg += f" ({detail})"
        msg += "; nothing was written to it"
        super().__init__(msg)


class CorruptLogError(LakeVillaError):
    """A commit, checkpoint or lakevilla record on storage cannot be parsed."""


class TransactionAborted(LakeVillaError):
    """The transaction did not commit; nothing of it is visible. ``lake.run`` retries these."""

    def __init__(self, message: str, *, txn_id: str | None = None, reason: str = "conflict") -> None:
        self.txn_id = txn_id
        self.reason = reason
        super().__init__(message)


class PartialCommitError(LakeVillaError):
    """Some tables committed and a later one could not (features without CT commit table by table)."""

    def __init__(self, message: str, *, committed: dict[str, int], txn_id: str | None = None) -> None:
        self.committed = committed
        self.txn_id = txn_id
        super().__init__(message)


class CommitPendingError(LakeVillaError):
    """The transaction is committed (its decision is durable) but not every table shows it yet.

    Do not re-run it. Its markers expire and any client (``lake.recover()``, or a transaction
    that meets them) writes the missing table commits from the decision record."""

    def __init__(self, message: str, *, txn_id: str | None = None) -> None:
        self.txn_id = txn_id
        super().__init__(message)


class TransactionStateError(LakeVillaError):
    """An operation on a transaction that is already committed or aborted."""


class InvalidArgumentError(LakeVillaError):
    pass


class ConditionalWritesUnsupportedError(LakeVillaError):
    """The object store ignores If-None-Match / If-Match, so markers cannot be atomic."""


class StorageError(LakeVillaError):
    """The object store failed in a way retries could not fix."""
