"""Which store-layer request kind (the names ``CountingStore`` uses) one HTTP request is, on
S3, Azure Blob Storage and GCS' JSON API: what the latency proxy slows and counts, so that
delta-rs' requests (which no wrapper of ours sees) are counted and slowed like lakevilla's."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlparse

_GCS_PATHS = ("/storage/v1/", "/upload/storage/", "/download/storage/")


def classify_http(method: str, path: str, headers: Any) -> str:
    """The kind of one request to any of the three stores."""
    if urlparse(path).path.startswith(_GCS_PATHS):
        return _gcs(method, path)
    if headers.get("x-ms-version"):  # every Azure Storage request names its API version
        return _azure(method, path, headers)
    return _s3(method, path, headers)


def _conditional(method: str, headers: Any) -> str:
    if headers.get("If-None-Match"):
        return "put_if_absent"
    if headers.get("If-Match"):
        return "put_if_match"
    return "put"


def _s3(method: str, path: str, headers: Any) -> str:
    query = urlparse(path).query
    if method == "GET":
        return "list" if "list-type" in query or query.startswith("prefix=") else "get"
    if method == "HEAD":
        return "head"
    if method == "DELETE" or (method == "POST" and "delete" in query):
        return "delete"
    if method in ("PUT", "POST"):
        return _conditional(method, headers)
    return method.lower()


def _azure(method: str, path: str, headers: Any) -> str:
    query = parse_qs(urlparse(path).query)
    comp = query.get("comp", [""])[0]
    if method == "GET":
        return "list" if comp == "list" else "get"
    if method == "HEAD":
        return "head"
    if method == "DELETE" or (method == "POST" and comp == "batch"):
        return "delete"  # a blob batch deletes up to 256 blobs in one request
    if method == "PUT":
        return _conditional(method, headers)
    return method.lower()


def _gcs(method: str, path: str) -> str:
    u = urlparse(path)
    query = parse_qs(u.query)
    if method == "GET":
        if u.path.startswith("/download/") or query.get("alt") == ["media"]:
            return "get"
        return "list" if u.path.rstrip("/").endswith("/o") else "head"
    if method == "DELETE":
        return "delete"
    if method == "POST" and u.path.startswith("/upload/"):
        generation = query.get("ifGenerationMatch", [None])[0]
        if generation is None:
            return "put"
        return "put_if_absent" if generation == "0" else "put_if_match"
    return method.lower()
