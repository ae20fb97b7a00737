"""Parquet data files fetched through the store by ranged GETs, scanned by pyarrow natively.

Every byte comes from ``store.get_range`` on lakevilla's threads (so it is counted,
slowed and fault-injected, and its exceptions reach the caller), and pyarrow decodes
from memory on its own threads without calling back into Python. Per file:

1. the footer, by one suffix GET (a second only for a footer longer than the guess);
   a file no larger than ``WHOLE_FILE_BYTES``, or any file of a scan that needs every
   column and has no filter to skip row groups by, is fetched whole by one GET instead;
2. the row groups the pushed filter cannot rule out, decided by pyarrow from the
   footer's statistics (``ParquetFileFragment.subset``);
3. the column chunks of the needed columns in those row groups, coalesced into few
   ranged GETs, written at their offsets into a buffer of the file's size (pages
   never written are never touched, so never resident); or, when they make up most of
   the file (``WHOLE_SHARE``), the whole file by one GET, used as it comes.

A string column whose chunks are dictionary-encoded throughout (``dictionary_columns``)
is decoded as a dictionary when the caller allows it: indices instead of one string per
row, so a filter on other columns discards rows before any string is built; the caller
casts what survives back to ``string``.

pyarrow then reads only those ranges from the buffer. (A Python file system handed
to pyarrow would call back into Python from pyarrow's threads, which makes the
interpreter abort at exit now and then; fetching ourselves avoids that.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ..store import NotFound, ObjectStore
from . import parquet_read

FOOTER_GUESS = 64 * 1024
WHOLE_FILE_BYTES = 1 << 20  # one GET of a file this small costs about one round trip
COALESCE_GAP = 64 * 1024  # ranges closer than this are fetched by one GET
PADDING = 1024  # old writers under-report a chunk's length (PARQUET-816): read a little past it
# files are fetched and decoded in batches of about this many bytes (the next batch is fetched
# while one decodes)
BATCH_BYTES = 32 << 20
# a file whose needed chunks are this share of its size is fetched whole after its footer: its
# bytes serve pyarrow as they come (a buffer of chunks costs an allocation and a copy of each)
WHOLE_SHARE = 0.9
# the first batch is small (about one file), so that decoding starts after one file's fetch
FIRST_BATCH_BYTES = 4 << 20

FORMAT = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"))
# data pages of dictionary indices take a few bytes a value; plain strings at least 4 (the length)
DICTIONARY_BYTES_PER_VALUE = 3.5


def file_format(dictionary: tuple[str, ...] = ()) -> ds.ParquetFileFormat:
    """The Parquet format for a scan (``dictionary``: columns decoded as dictionaries)."""
    if not dictionary:
        return FORMAT
    return ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us",
                                                                   dictionary_columns=list(dictionary)))


def _dictionary_encoded(md: pq.FileMetaData, name: str) -> bool:
    """Every chunk of top-level column ``name`` is dictionary-encoded (did not fall back to plain
    pages, which would make pyarrow hash every value into a dictionary)."""
    leaf = next((i for i in range(md.num_columns) if md.schema.column(i).path == name), None)
    if leaf is None:
        return True  # absent from this file: read as nulls
    for g in range(md.num_row_groups):
        cc = md.row_group(g).column(leaf)
        if not cc.has_dictionary_page or not cc.dictionary_page_offset or cc.num_values <= 0:
            return False
        dict_page = max(0, cc.data_page_offset - cc.dictionary_page_offset)
        if (cc.total_uncompressed_size - dict_page) / cc.num_values > DICTIONARY_BYTES_PER_VALUE:
            return False
    return True


class MissingDataFile(FileNotFoundError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class NotParquet(ValueError):
    def __init__(self, key: str, why: str) -> None:
        super().__init__(f"{key}: {why}")
        self.key = key


@dataclass
class Source:
    """One data file to scan: its key, size and partition expression."""

    key: str
    size: int
    partition: Any = None
    buffer: pa.Buffer | None = None
    complete: bool = False  # the buffer holds the whole file
    fragment: Any = None
    ranges: list[tuple[int, int]] = field(default_factory=list)


def _get(store: ObjectStore, key: str, start: int, length: int | None = None) -> bytes:
    try:
        return store.get_range(key, start, length)
    except NotFound:
        raise MissingDataFile(key) from None


def _open(store: ObjectStore, src: Source, whole: bool = False) -> None:
    """Fetch the footer (or the whole file: small, or ``whole``) into a buffer of the file's
    size; nothing when an earlier scan of the same file left it whole."""
    if src.complete:
        return
    if src.size <= WHOLE_FILE_BYTES or whole:
        data = _get(store, src.key, 0)
        src.buffer, src.complete = pa.py_buffer(data), True
        return
    tail = _get(store, src.key, -min(src.size, FOOTER_GUESS))
    if len(tail) < 12 or tail[-4:] != b"PAR1":
        raise NotParquet(src.key, "no PAR1 footer")
    n = int.from_bytes(tail[-8:-4], "little")
    if n + 8 > len(tail):
        if n + 8 > src.size:
            raise NotParquet(src.key, "footer longer than the file")
        tail = _get(store, src.key, -(n + 8))
    buf = pa.allocate_buffer(src.size)
    memoryview(buf).cast("B")[src.size - len(tail):] = tail
    src.buffer = buf


def _chunk_ranges(md: pq.FileMetaData, groups: list[int], columns: set[str] | None,
                  footer_start: int) -> list[tuple[int, int]]:
    """Byte ranges of the column chunks of ``columns`` (top-level names;
    None: all) in ``groups``."""
    leaves = [i for i in range(md.num_columns)
              if columns is None or md.schema.column(i).path.split(".", 1)[0] in columns]
    out = []
    for g in groups:
        rg = md.row_group(g)
        for i in leaves:
            cc = rg.column(i)
            start = cc.data_page_offset
            if (cc.has_dictionary_page and cc.dictionary_page_offset
                    and 0 < cc.dictionary_page_offset < start):
                start = cc.dictionary_page_offset
            end = min(start + cc.total_compressed_size + PADDING, footer_start)
            out.append((start, end))
    out.sort()
    merged: list[tuple[int, int]] = []
    for s, e in out:
        if merged and s <= merged[-1][1] + COALESCE_GAP:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def _metadata(src: Source) -> pq.FileMetaData:
    try:
        return pq.ParquetFile(pa.BufferReader(src.buffer)).metadata
    except (pa.ArrowInvalid, OSError) as e:
        raise NotParquet(src.key, str(e).splitlines()[0]) from None


def _bounded(fmt: ds.ParquetFileFormat, src: Source, md: pq.FileMetaData, groups: list[int],
             schema: pa.Schema, columns: set[str], frag: Any) -> Any:
    """``frag`` with what its footer bounds for ``columns`` added to its guarantee
    (``parquet_read.bounds``), so that pyarrow simplifies the filter before evaluating it."""
    known = parquet_read.bounds(md, groups, schema, columns)
    if known is None:
        return frag
    guarantee = known if src.partition is None else src.partition & known
    return fmt.make_fragment(src.buffer, partition_expression=guarantee, row_groups=groups)


def prepare(store: ObjectStore, sources: list[Source], schema: pa.Schema, columns: list[str],
            pushed: Any, pmap: Callable,
            dictionary: tuple[str, ...] = ()) -> tuple[list[Any], tuple[str, ...]]:
    """Fetch what a scan of ``columns`` under ``pushed`` needs from each source; the fragments
    to scan (files whose row groups all fail the filter are left out), and which of the
    ``dictionary`` columns they decode as dictionaries (those encoded so in every file)."""
    # a scan of every column with nothing to skip needs all of each file: one GET, no footer first
    whole = pushed is None and set(schema.names) <= set(columns)
    pmap(lambda s: _open(store, s, whole), sources)
    wanted = set(columns)
    if dictionary:
        metas = [_metadata(src) for src in sources]
        dictionary = tuple(c for c in dictionary if all(_dictionary_encoded(md, c) for md in metas))
    fmt = file_format(dictionary)
    jobs = []
    for src in sources:
        frag = fmt.make_fragment(src.buffer, partition_expression=src.partition) \
            if src.partition is not None else fmt.make_fragment(src.buffer)
        try:
            md = frag.metadata
            if pushed is not None:
                frag = frag.subset(filter=pushed, schema=schema)
        except (pa.ArrowInvalid, OSError) as e:
            raise NotParquet(src.key, str(e).splitlines()[0]) from None
        groups = [rg.id for rg in frag.row_groups]
        if pushed is not None and groups:
            frag = _bounded(fmt, src, md, groups, schema, wanted, frag)
        src.fragment = frag
        if not groups or src.complete:
            continue
        assert src.buffer is not None  # _open filled it
        footer_start = src.size - 8 - int.from_bytes(
            memoryview(src.buffer).cast("B")[-8:-4].tobytes(), "little")
        src.ranges = _chunk_ranges(md, groups, wanted, footer_start)
        if WHOLE_SHARE and sum(e - s for s, e in src.ranges) >= WHOLE_SHARE * src.size:
            jobs.append((src, 0, -1))  # most of the file: all of it, as it is stored
        else:
            jobs += [(src, s, e) for s, e in src.ranges]

    def fetch(job: tuple[Source, int, int]) -> None:
        src, s, e = job
        if e < 0:
            src.buffer, src.complete = pa.py_buffer(_get(store, src.key, 0)), True
            src.fragment = fmt.make_fragment(src.buffer,
                                             partition_expression=src.fragment.partition_expression,
                                             row_groups=[rg.id for rg in src.fragment.row_groups])
            return
        data = _get(store, src.key, s, e - s)
        assert src.buffer is not None
        memoryview(src.buffer).cast("B")[s:s + len(data)] = data

    pmap(fetch, jobs)
    return [s.fragment for s in sources
            if s.fragment is not None and s.fragment.row_groups], dictionary


def batches(sources: list[Source]) -> list[list[Source]]:
    """Sources in batches of about ``BATCH_BYTES`` (a full scan of a big table is fetched and
    decoded batch by batch, not held compressed all at once), the first of about
    ``FIRST_BATCH_BYTES``; one batch when they all fit in one (a scan that small gains less
    from overlapping its fetch and decode than the pipeline's threads cost it)."""
    if sum(s.size for s in sources) <= BATCH_BYTES:  # nothing worth overlapping: one batch
        return [sources] if sources else []
    out: list[list[Source]] = []
    size = 0
    first = min(FIRST_BATCH_BYTES, BATCH_BYTES)
    for s in sources:
        if not out or size + s.size > (first if len(out) == 1 else BATCH_BYTES):
            out.append([])
            size = 0
        out[-1].append(s)
        size += s.size
    return out
