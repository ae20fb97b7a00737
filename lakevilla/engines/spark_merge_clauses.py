"""The Spark columns a MERGE's clauses compute: which clause applies to a row (the first whose
condition holds) and the values it gives each target column. Target columns are renamed
``__lv_t<k>`` and source columns ``__lv_s<j>`` so a name both sides have stays unambiguous in
the joined frame."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..scan import expressions as E
from . import spark_expr
from .api import TableContext

# Spark's check that a value is not NULL where its column may not hold one (spark.py)
NotNull = Callable[[Column, T.StructField, str, str], Column]


class MergeClauses:
    def __init__(self, ctx: TableContext, cm: Any, spec: Any, source: pa.Table,
                 tfields: list[T.StructField], what: str, not_null: NotNull) -> None:
        self.ctx, self.cm, self.spec, self.tfields, self.what = ctx, cm, spec, tfields, what
        self._not_null = not_null
        self.tcols = [f"__lv_t{k}" for k in range(len(tfields))]
        sfields = list(source.schema)
        self.src_arrow = pa.table([c.combine_chunks() for c in source.columns],
                                  names=[f"__lv_s{j}" for j in range(len(sfields))]) \
            .append_column("__lv_sid", pa.array(range(source.num_rows), pa.int64()))
        self._s_index = {f.name: j for j, f in enumerate(sfields)}
        self._t_index = {f.name: k for k, f in enumerate(tfields)}

    def ref(self, r: E.ColumnRef, source_only: bool = False) -> Column:
        in_target = r.relation == 0 and not source_only  # insert clauses see the source alone
        c = (F.col(self.tcols[self._t_index[r.column]]) if in_target
             else F.col(f"__lv_s{self._s_index[r.column]}"))
        for f in r.fields:
            c = c.getField(f)
        return c

    def _ref_of(self, i: int) -> Callable[[E.ColumnRef], Column]:
        return self.ref if self.spec.clauses[i].matched else (lambda r: self.ref(r, True))

    def _cond(self, i: int) -> Column:
        c = self.cm.conditions[i]
        return (F.lit(True) if c is None
                else F.coalesce(spark_expr.condition(c, self._ref_of(i)), F.lit(False)))

    def clause_of(self, ids: list[int]) -> Column:
        """The first of ``ids`` whose condition holds, -1 for none."""
        out = None
        for i in ids:
            out = (F.when(self._cond(i), F.lit(i)) if out is None
                   else out.when(self._cond(i), F.lit(i)))
        return (out.otherwise(F.lit(-1)) if out is not None else F.lit(-1)).cast("int")

    def values(self, ids: list[int], default: Callable[[int, T.StructField], Column]
               ) -> list[Column]:
        """Each target column as the applying clause of ``ids`` sets it (``default`` where it
        does not), named ``__lv_t<k>``."""
        cols = []
        for k, f in enumerate(self.tfields):
            out = None
            for i in ids:
                v = (self.cm.values[i] or {}).get(f.name)
                val = default(k, f) if v is None else self._not_null(
                    spark_expr.assigned(v, self.ctx.schema.field(f.name).type, self._ref_of(i)),
                    f, "schema", f"{self.what}: {f.name}={v.text!r}")
                out = F.when(self._cond(i), val) if out is None else out.when(self._cond(i), val)
            cols.append((out.otherwise(default(k, f)) if out is not None
                         else default(k, f)).alias(self.tcols[k]))
        return cols
