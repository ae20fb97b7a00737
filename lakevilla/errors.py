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


class CreateConflictError(TableExistsError):
    """A decided transaction could not write version 0 of a table it creates: a client outside
    lakevilla's protocol (delta-rs, Spark's Delta writer) created that table meanwhile. Its other
    tables are committed; recovery reports it and never overwrites the other table."""


class InvalidTableNameError(LakeVillaError):
    """The name is not a plain relative path inside the lake root."""


class SchemaMismatchError(LakeVillaError):
    pass


class ConstraintViolationError(LakeVillaError):
    """A row breaks a table's CHECK constraint or column invariant, or gives a generated column a
    value other than its generation expression's; nothing was written."""

    def __init__(self, table: str, rule: str, expression: str, row: dict) -> None:
        self.table = table
        self.rule = rule
        self.expression = expression
        self.row = row
        super().__init__(f"{rule} of table {table!r} ({expression}) is violated by the row "
                         f"{row}; nothing was written")


class InvalidExpressionError(LakeVillaError):
    """A ``where`` or ``set`` expression does not parse or bind against the table schema."""


class DuplicateMatchError(LakeVillaError):
    """Several source rows match one target row of a merge that updates or deletes (Delta's
    rule: which source row would win is undefined)."""


class UnsupportedTableFeatureError(LakeVillaError):
    """The table uses a Delta reader/writer feature lakevilla cannot honour."""

    def __init__(self, table: str, feature: str, detail: str = "") -> None:
        self.table = table
        self.feature = feature
        msg = (f"table {table!r} uses the Delta feature {feature!r}, "
               "which lakevilla does not support")
        if detail:
            msg += f" ({detail})"
        msg += "; nothing was written to it"
        super().__init__(msg)


class CorruptLogError(LakeVillaError):
    """A commit, checkpoint or lakevilla record on storage cannot be parsed."""


class TransactionAborted(LakeVillaError):
    """The transaction did not commit; nothing of it is visible. ``lake.run`` retries these."""

    def __init__(self, message: str, *, txn_id: str | None = None,
                 reason: str = "conflict") -> None:
        self.txn_id = txn_id
        self.reason = reason
        super().__init__(message)


class SelfWaitError(TransactionAborted):
    """The transaction would wait for a marker of a transaction that is open further up its own
    thread (a ``with`` block around it), which cannot finish while this one waits: it fails at
    once instead of at the wait timeout. Nothing of it is visible; ``lake.run`` does not re-run
    it (it would wait again)."""

    def __init__(self, message: str, *, txn_id: str | None = None) -> None:
        super().__init__(message, txn_id=txn_id, reason="self-wait")


class PartialCommitError(LakeVillaError):
    """Some tables committed and a later one could not (features without CT
    commit table by table)."""

    def __init__(self, message: str, *, committed: dict[str, int],
                 txn_id: str | None = None) -> None:
        self.committed = committed
        self.txn_id = txn_id
        super().__init__(message)


class CommitPendingError(LakeVillaError):
    """The commit's outcome is settled by recovery, not by this call. Nothing was undone.

    ``decided=True``: the transaction is committed (its decision is durable) but not every
    table shows it yet; any client (``lake.recover()``, or a transaction that meets its
    markers) writes the missing table commits. ``decided=False``: the deciding write was
    sent but the store's reply was lost and reading it back failed too, so it may or may not
    have committed; ``lake.recover()`` settles it once its markers expire. Do not re-run it
    blindly. ``committed``: tables (-> version) known to show it already."""

    def __init__(self, message: str, *, txn_id: str | None = None, decided: bool = True,
                 committed: dict[str, int] | None = None) -> None:
        self.txn_id = txn_id
        self.decided = decided
        self.committed = dict(committed or {})
        super().__init__(message)


class TransactionStateError(LakeVillaError):
    """An operation on a transaction that is already committed or aborted."""


class InvalidArgumentError(LakeVillaError):
    pass


class ConditionalWritesUnsupportedError(LakeVillaError):
    """The object store ignores If-None-Match / If-Match, so markers cannot be atomic."""


class StorageError(LakeVillaError):
    """The object store failed in a way retries could not fix."""


class StoragePermissionError(StorageError):
    """The store refused the request: a read-only file system, a folder this process may not
    write, S3's AccessDenied. Retrying will not help; the lake's permissions must change."""


class ReadOnlyLakeError(LakeVillaError):
    """A write through a lake opened with ``read_only=True``: refused before any request."""


class StorageCredentialsError(StorageError):
    """No usable credentials for the object store (none found, or rejected by it): set them in
    ``storage_options`` (delta-rs' keys) or in the environment."""


class BucketNotFoundError(StorageError):
    """The lake's bucket (S3, GCS) or container (Azure) does not exist. lakevilla never creates
    one: create it with the cloud's tools, or correct the URI or account."""


class VersionNotFoundError(LakeVillaError):
    """The table has no such version (or none at or before the moment asked for): the
    message names the versions that can be read."""


class LakeNotFoundError(TableNotFoundError):
    """The lake root does not exist. Looking (reads, status, history, listing tables) never
    creates it; the first write does. A ``TableNotFoundError`` too: no table can be there, and
    code that handles a missing table handles a missing lake alike."""


class DataOutsidePredicateError(InvalidArgumentError):
    """``overwrite(where=...)`` was given rows the predicate does not select
    (Delta's replaceWhere rule)."""


class SchemaEvolutionError(SchemaMismatchError):
    """A schema change lakevilla does not make: only new nullable columns can be added."""


class MomentTooOldError(VersionNotFoundError):
    """``lake.at`` or ``lake.changes`` asked for a moment (or global-log position) older than
    what clean-up and log retention kept: a needed commit, checkpoint, data file or global-log
    entry is gone. ``oldest`` names the oldest moment (a UTC datetime) or position (an int) that
    can still be served."""

    def __init__(self, message: str, *, oldest: object = None) -> None:
        self.oldest = oldest
        super().__init__(message)
