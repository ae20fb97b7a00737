"""Spark sessions for the demo, the tests and the benchmarks (production passes its own).

``local_session``: one JVM (``local[n]``). ``cluster_session``: a real cluster on this
machine (``local-cluster[executors,cores,memory]``): a driver JVM and executor JVMs of their
own, so closures are pickled to other processes and rows are where executors put them, as on
a cluster; it needs ``SPARK_HOME``, which the pip-installed pyspark serves. Both: UTC session
time zone (so timestamp literals mean what the statistics mean), no console progress bar, no
UI, quiet logs, bound to 127.0.0.1, Python workers running this interpreter.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def _jvm_launch_without_preexec_fn() -> Iterator[None]:
    """pyspark starts its JVM with ``Popen(preexec_fn=...)``, which forces a full fork()
    that runs every library's at-fork handlers and Python code in the child. In a busy
    process (delta-rs' tokio runtime, arrow, thread pools all live) that child can
    segfault before exec. ``start_new_session`` keeps Ctrl-C away from the JVM just as
    well and lets CPython spawn with vfork, which runs no handlers."""
    from pyspark import java_gateway

    real = java_gateway.Popen

    def popen(cmd: Any, **kwargs: Any) -> Any:
        kwargs.pop("preexec_fn", None)
        return real(cmd, start_new_session=True, **kwargs)

    # pyspark's name for subprocess.Popen, a class to mypy: a function stands in for it here
    java_gateway.Popen = popen  # type: ignore[misc, assignment]
    try:
        yield
    finally:
        java_gateway.Popen = real  # type: ignore[misc]


def _session(master: str, app_name: str, extra: dict[str, str] | None) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run our code too
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    for k, v in (extra or {}).items():
        builder = builder.config(k, v)
    with _jvm_launch_without_preexec_fn():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def local_session(app_name: str = "lakevilla", cores: int | str = "*",
                  extra: dict[str, str] | None = None) -> Any:
    """A local-mode SparkSession: driver and executor in one JVM."""
    return _session(f"local[{cores}]", app_name, extra)


def cluster_session(app_name: str = "lakevilla", executors: int = 2, cores: int = 1,
                    memory_mb: int = 1024, extra: dict[str, str] | None = None) -> Any:
    """A SparkSession on a cluster of this machine: ``executors`` executor JVMs of ``cores``
    cores and ``memory_mb`` MB each, beside the driver."""
    import pyspark

    os.environ.setdefault("SPARK_HOME", os.path.dirname(pyspark.__file__))
    return _session(f"local-cluster[{executors},{cores},{memory_mb}]", app_name, extra)
