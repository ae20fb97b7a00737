"""DELETE, UPDATE and MERGE by deletion vectors on the Spark engine: Spark finds the rows that
go, each named by its file and its index in the file (``_metadata.row_index``, as Delta's DVs
name rows); lakevilla builds the DVs and commits them (``dv_rewrite.mark``, shared with the
embedded engine). Only updated and inserted rows are written, by Spark."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..delta.actions import AddFile
from . import dv_rewrite
from .api import RewriteResult, TableContext, data_file_key

HIT = "__lv_dv_hit"


def marks(ctx: TableContext, files: list[AddFile], rows: DataFrame, file_col: str,
          row_col: str, hit: Column, key_of: Callable[[str], str]) -> list[dv_rewrite.Marks]:
    """For each of ``files`` where ``hit`` holds for a row: the file, its live rows and the
    indexes in the file of the hit ones. ``rows``: the live rows of ``files``, each with its file
    as Spark names it (``file_col``) and its index in the file (``row_col``). One job; the
    indexes come to the driver, where the DVs are built."""
    got = (rows.select(file_col, row_col, hit.alias(HIT)).groupBy(file_col)
           .agg(F.count(F.lit(1)).alias("live"),
                F.collect_list(F.when(F.col(HIT), F.col(row_col))).alias("hit"))
           .collect())
    by_key = {data_file_key(ctx.name, a.path, ctx.lake_uri): a for a in files}
    out = []
    for r in got:
        if r["hit"]:
            out.append((by_key[key_of(r[file_col])], int(r["live"]),
                        np.asarray(r["hit"], dtype=np.int64)))
    return out


def merge_marks(ctx: TableContext, files: list[AddFile], target: DataFrame, applied: DataFrame,
                file_col: str, key_of: Callable[[str], str]) -> list[dv_rewrite.Marks]:
    """``marks`` of a MERGE: the ``target`` rows (by file and ``__lv_ri``) that a clause
    ``applied`` to (deleted or updated)."""
    hit = applied.select(file_col, "__lv_ri", F.lit(True).alias("__lv_applied"))
    return marks(ctx, files, target.join(hit, [file_col, "__lv_ri"], "left"), file_col,
                 "__lv_ri", F.col("__lv_applied").isNotNull(), key_of)


def rewrite(ctx: TableContext, marked: list[dv_rewrite.Marks],
            write: Callable[[], list[AddFile]]) -> RewriteResult:
    """Mark the rows of ``marked``; ``write`` writes the new rows (updated, inserted) first."""
    if not marked:
        return RewriteResult()
    res = dv_rewrite.mark(ctx, marked, write)
    res.rows = sum(len(np.unique(h)) for _, _, h in marked)
    return res
