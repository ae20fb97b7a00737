"""Where Spark finds a lake's files, and which store key a file Spark names is.

Spark reads and writes through its Hadoop file systems (``s3://`` lakes as ``s3a://``;
``abfss://`` and ``gs://`` as they are, the ABFS and GCS connectors' own schemes); the log names
files by URI-encoded paths under the table; Spark names the files it read by URI-encoded
absolute paths (``input_file_name()``, ``inputFiles()``). These are the only conversions
between the three.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from ..delta.actions import AddFile
from .api import TableContext

SCHEME_MAP = {"s3": "s3a"}
_GLOB_CHARS = re.compile(r"([\\{}\[\]*?])")


@dataclass(frozen=True)
class SparkPaths:
    scheme_map: dict[str, str] = field(default_factory=lambda: dict(SCHEME_MAP))

    def spark_uri(self, uri: str) -> str:
        scheme, sep, rest = uri.partition("://")
        return f"{self.scheme_map.get(scheme, scheme)}{sep}{rest}" if sep else uri

    def file_uri(self, ctx: TableContext, add: AddFile) -> str:
        """The file's location as Spark reads it: literal (not URI-encoded) text, globs escaped."""
        path = unquote(add.path) if "://" in add.path else f"{ctx.location_uri}/{unquote(add.path)}"
        return self.glob_escaped(self.spark_uri(path))

    @staticmethod
    def glob_escaped(uri: str) -> str:
        return _GLOB_CHARS.sub(r"\\\1", uri)

    def key_uri(self, ctx: TableContext, key: str) -> str:
        """A store key of the lake as Spark reads or writes it."""
        return self.spark_uri(f"{ctx.lake_uri.rstrip('/')}/{key}")

    @staticmethod
    def key_of(ctx: TableContext, spark_file_path: str) -> str:
        """The store key of a file as Spark names it (``input_file_name()``,
        ``inputFiles()``: URI-encoded)."""
        return key_in(ctx.lake_uri, spark_file_path)


def key_in(lake_uri: str, spark_file_path: str) -> str:
    """The store key, under the lake ``lake_uri``, of a file as Spark names it (also on an
    executor: nothing but text)."""
    path = re.sub("/+", "/", unquote(urlsplit(spark_file_path).path))
    root = re.sub("/+", "/", urlsplit(lake_uri).path).rstrip("/") + "/"
    return path[len(root):] if path.startswith(root) else path
