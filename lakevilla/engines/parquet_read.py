"""Fetch and decode of a scan's batches as one pipeline, without a barrier between batches.

A scan fetches its files in batches (``ranged.batches``) and pyarrow decodes each batch on
its own CPU threads. Decoding batch i and only then batch i+1 leaves a core idle at the end
of every batch (its last file decodes alone) and holds the first decode back until the first
fetch is whole. Here the fetches run in order on one thread of their own (a fetch fans out
over the store's I/O pool, which a task already in that pool could not do), each fetched
batch is handed at once to one of ``DECODERS`` threads that decode side by side, and at most
``DECODERS + 1`` batches are fetched and not yet decoded (memory stays a few batches).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

B = TypeVar("B")
G = TypeVar("G")

DECODERS = 2  # batches decoding at once: enough that one batch's tail overlaps the next


def pipelined(batches: list[B], fetch: Callable[[B], G],
              decode: Callable[[G], list[pa.Table]]) -> list[pa.Table]:
    """``decode(fetch(b))`` for every batch, in order, fetches ahead of decodes."""
    if len(batches) <= 1:
        return [t for b in batches for t in decode(fetch(b))]
    fetcher = ThreadPoolExecutor(1, thread_name_prefix="lakevilla-scan")
    decoder = ThreadPoolExecutor(DECODERS, thread_name_prefix="lakevilla-decode")
    try:
        fetches: list[Future[G]] = []
        decodes: list[Future[list[pa.Table]]] = []
        for i in range(len(batches)):
            # a batch is fetched only once the one DECODERS + 1 before it is decoded
            while len(fetches) < len(batches) and len(fetches) <= i + 1:
                fetches.append(fetcher.submit(fetch, batches[len(fetches)]))
            decodes.append(decoder.submit(decode, fetches[i].result()))
            if i >= DECODERS:
                decodes[i - DECODERS].result()
        return [t for d in decodes for t in d.result()]
    finally:
        fetcher.shutdown(wait=True, cancel_futures=True)
        decoder.shutdown(wait=True, cancel_futures=True)


def bounds(md: pq.FileMetaData, groups: list[int], schema: pa.Schema,
           columns: set[str]) -> Any:
    """What the footer says holds for every row of ``groups``: ``lo <= c <= hi`` (or NULL) for
    each integer or date column of ``columns``, as a dataset guarantee (None: nothing known).

    pyarrow skips row groups by their statistics but still evaluates the filter on every row
    it reads; given this guarantee it simplifies the filter first, so a range that covers a
    whole file costs no per-row comparison (delta-rs gets the same from the add actions'
    statistics). Only integers and dates: their Parquet minima and maxima are exact, where a
    writer may truncate strings' and Delta's timestamps are in milliseconds."""
    out = None
    for i in range(md.num_columns):
        col = md.schema.column(i)
        name = col.path
        if name not in columns or name not in schema.names:
            continue
        typ = schema.field(name).type
        if not (pa.types.is_integer(typ) or pa.types.is_date32(typ)):
            continue
        logical = ("DATE",) if pa.types.is_date32(typ) else ("NONE", "INT")
        got = _column_bounds(md, groups, i, logical)
        if got is None:
            continue
        lo, hi, nulls = got
        try:
            e = (pc.field(name) >= pa.scalar(lo, typ)) & (pc.field(name) <= pa.scalar(hi, typ))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
            continue  # a value the table's type cannot hold: nothing to simplify with
        if nulls:
            e = e | pc.field(name).is_null()
        out = e if out is None else out & e
    return out


def _column_bounds(md: pq.FileMetaData, groups: list[int], leaf: int,
                   logical: tuple[str, ...]) -> tuple[Any, Any, bool] | None:
    """min, max and whether a NULL may occur in leaf column ``leaf`` over ``groups`` (None: a
    group without them, or stored as another type than a signed integer of ``logical``)."""
    if md.schema.column(leaf).physical_type not in ("INT32", "INT64"):
        return None
    lo = hi = None
    nulls = False
    for g in groups:
        st = md.row_group(g).column(leaf).statistics
        if st is None or not st.has_min_max:
            return None
        kind = st.logical_type
        if kind.type not in logical or '"isSigned":false' in kind.to_json().replace(" ", ""):
            return None
        lo = st.min if lo is None else min(lo, st.min)
        hi = st.max if hi is None else max(hi, st.max)
        nulls = nulls or not st.has_null_count or st.null_count != 0
    return None if lo is None else (lo, hi, nulls)
