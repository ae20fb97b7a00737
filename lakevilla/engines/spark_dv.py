"""DELETE, UPDATE and MERGE by deletion vectors on the Spark engine (tables that ask for them).

Spark finds the rows that go, each named by its file and its index in the file (as Delta's
DVs name rows); the executors build each file's new DV from them (``spark_tasks.
BuildDeletionVectors``: the old DV's rows and the new ones, inline when small, else in a DV
file the task writes), and the driver gets one descriptor per file. Only updated and inserted
rows are written, by Spark, before the rows are marked; if marking fails they are deleted
again (a DV file a failed task wrote is left to the abandoned-file sweep: nothing names it).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..delta.actions import AddFile
from ..delta.deletion_vectors import DeletionVector
from .api import RewriteResult, TableContext, data_file_key
from .dv_rewrite import loose_stats
from .spark_names import RID_COL, ROW_BITS
from .spark_tasks import MARKS_DDL, BuildDeletionVectors, FileMarks
from .spark_write import delete_files


def mark(ctx: TableContext, files: list[AddFile], hits: DataFrame,
         write: Callable[[], list[AddFile]], places: list[AddFile] | None = None
         ) -> RewriteResult:
    """Mark the rows ``hits`` names (``RID_COL``: a file's place in ``places``, default
    ``files``, and the row's index) deleted in ``files``: each file they touch is removed and,
    unless no row of it is left, added back with its new DV. ``write`` writes the statement's
    new rows first (it checks the table's rules before any write). One job; O(files) to the
    driver."""
    places = files if places is None else places
    mine = {data_file_key(ctx.name, a.path, ctx.lake_uri) for a in files}
    info = {i: FileMarks(a.path, a.num_records,
                         json.dumps(a.deletion_vector.to_json()) if a.deletion_vector else None)
            for i, a in enumerate(places)
            if data_file_key(ctx.name, a.path, ctx.lake_uri) in mine}
    task = BuildDeletionVectors(ctx.store.address(), ctx.name, ctx.lake_uri, info)
    res = RewriteResult()
    res.added = write()
    place = F.shiftright(F.col(RID_COL), ROW_BITS)
    try:
        got = (hits.select(RID_COL).repartition(place).sortWithinPartitions(RID_COL)
               .mapInArrow(task, MARKS_DDL).collect())
    except BaseException:
        delete_files(ctx, res.added)  # best effort: no version references them
        raise
    for r in got:
        add = places[int(r["file"])]
        res.removed.append(add)
        res.rows += int(r["hits"])
        if not r["all"]:
            dv = DeletionVector.from_json(json.loads(r["dv"]))
            res.added.append(dataclasses.replace(add, deletion_vector=dv,
                                                 stats=loose_stats(add.stats), data_change=True))
    return res
