"""lakevilla: multi-statement, multi-table transactions over plain Delta Lake tables.

    import lakevilla as lv
    lake = lv.Lake("file:///data/lake")
    with lake.transaction(features="R,CT,I") as txn:
        txn.update("accounts", set={"balance": "balance - 200"}, where="id = 2")
"""

import logging as _logging

from .delta.history import HistoryEntry
from .delta.identity import field_metadata as identity
from .engines.merge_plan import MergeResult
from .errors import (
    BucketNotFoundError,
    CommitPendingError,
    ConditionalWritesUnsupportedError,
    ConstraintViolationError,
    CorruptLogError,
    CreateConflictError,
    DataOutsidePredicateError,
    DuplicateMatchError,
    InvalidArgumentError,
    InvalidExpressionError,
    InvalidTableNameError,
    LakeNotFoundError,
    LakeVillaError,
    MomentTooOldError,
    PartialCommitError,
    ReadOnlyLakeError,
    SchemaEvolutionError,
    SchemaMismatchError,
    SelfWaitError,
    StorageCredentialsError,
    StorageError,
    StoragePermissionError,
    TableExistsError,
    TableNotFoundError,
    TransactionAborted,
    TransactionStateError,
    UnsupportedTableFeatureError,
    VersionNotFoundError,
)
from .lake import Lake, RecoveryReport
from .past.view import LakeAt
from .settings import LakeSettings
from .txn.transaction import CommitResult, Transaction


def __getattr__(name: str):
    if name == "SparkEngine":  # imported lazily: pyspark is an optional dependency
        from .engines.spark import SparkEngine

        return SparkEngine
    if name == "EmbeddedEngine":
        from .engines.embedded import EmbeddedEngine

        return EmbeddedEngine
    raise AttributeError(name)


# silent unless the application logs
_logging.getLogger(__name__).addHandler(_logging.NullHandler())

__version__ = "0.1.0"

__all__ = [
    "identity",
    "Lake", "LakeSettings", "Transaction", "CommitResult", "RecoveryReport", "LakeVillaError",
    "TransactionAborted", "PartialCommitError", "CommitPendingError", "TableNotFoundError",
    "TableExistsError", "CreateConflictError", "InvalidTableNameError", "SchemaMismatchError",
    "ConstraintViolationError",
    "InvalidExpressionError", "UnsupportedTableFeatureError", "CorruptLogError",
    "TransactionStateError", "InvalidArgumentError", "ConditionalWritesUnsupportedError",
    "StorageError", "DataOutsidePredicateError", "SchemaEvolutionError", "VersionNotFoundError",
    "ReadOnlyLakeError", "HistoryEntry", "DuplicateMatchError", "SparkEngine", "EmbeddedEngine",
    "StoragePermissionError", "StorageCredentialsError", "LakeNotFoundError", "MomentTooOldError",
    "LakeAt", "MergeResult", "SelfWaitError", "BucketNotFoundError",
]
