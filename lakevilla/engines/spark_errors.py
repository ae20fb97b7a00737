"""Spark's exceptions as lakevilla errors, and the checks our own columns raise inside jobs.

A check that must look at every row (a value that does not fit its column, a NULL where none
may be, identity numbers past a partition's count) fails the Spark job with a tagged message
(``fail``); ``spark_errors`` finds the tag in the job's error and raises our error class with
the message, so a user sees what their data did wrong, not a Java stack.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import InvalidExpressionError, LakeVillaError, SchemaMismatchError, StorageError

CHECK_TAG = "lakevilla-check"  # marks the errors our own runtime checks raise inside Spark jobs
_CHECK_RE = re.compile(re.escape(CHECK_TAG) + r"\[(schema|expr|input)\]: (.*?)(?: SQLSTATE: \w+)?$")
_KINDS: dict[str, type[LakeVillaError]] = {"schema": SchemaMismatchError,
                                           "expr": InvalidExpressionError,
                                           "input": StorageError}
# storage, not expressions
_IO_CONDITIONS = {"PATH_NOT_FOUND", "FAILED_READ_FILE", "TASK_WRITE_FAILED"}


def fail(kind: str, message: str, t: T.DataType) -> Column:
    """A column that fails the Spark job with ``message`` when evaluated (``kind``: schema,
    expr or input, the error class ``spark_errors`` raises for it)."""
    return F.raise_error(F.lit(f"{CHECK_TAG}[{kind}]: {message}")).cast(t)


def first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__


def _condition(e: BaseException) -> tuple[str | None, str | None]:
    cond = getattr(e, "getCondition", None) or getattr(e, "getErrorClass", None)
    state = getattr(e, "getSqlState", None)
    try:
        return (cond() if cond else None), (state() if state else None)
    except Exception:  # noqa: BLE001 - a Py4J error without a Spark condition
        return None, None


def is_spark_error(e: BaseException) -> bool:
    mod = type(e).__module__
    return mod.startswith(("pyspark", "py4j"))


def own_check(e: BaseException) -> LakeVillaError | None:
    """The error one of our tagged checks raised inside the job, if ``e`` carries one."""
    for line in str(e).splitlines():
        m = _CHECK_RE.search(line)
        if m is not None:
            return _KINDS[m.group(1)](m.group(2).strip())
    return None


@contextmanager
def spark_errors(what: str, data_error: type[LakeVillaError] | None) -> Iterator[None]:
    """Spark's exceptions as lakevilla errors: our own checks, data errors (SQLSTATE 22,
    e.g. a division by zero in a ``set``) when ``data_error`` is given, and analysis
    errors; anything else (I/O, a lost executor, the user's own DataFrame) passes unchanged."""
    try:
        yield
    except LakeVillaError:
        raise
    except Exception as e:
        if not is_spark_error(e):
            raise
        own = own_check(e)
        if own is not None:
            raise own from None
        cond, state = _condition(e)
        if cond and cond.split(".")[0] in _IO_CONDITIONS:
            raise StorageError(f"{what}: {first_line(e)}") from e
        if data_error is not None and state and state.startswith("22"):
            raise data_error(f"{what}: {first_line(e)}") from None
        if type(e).__name__ in ("AnalysisException", "ParseException"):
            raise InvalidExpressionError(f"{what}: {first_line(e)}") from None
        raise
