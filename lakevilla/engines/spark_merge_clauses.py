"""The Spark columns a MERGE's clauses compute: which clause applies to a row (the first whose
condition holds) and the values it gives each target column. Target columns are renamed
``__lv_t<k>`` and source columns ``__lv_s<j>`` so a name both sides have stays unambiguous in
the joined frame."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..scan import expressions as E
from . import spark_expr
from .api import TableContext
from .merge_plan import MergePlan
from .spark_types import col, not_null


class MergeClauses:
    def __init__(self, ctx: TableContext, plan: MergePlan, source: pa.Schema,
                 tfields: list[T.StructField], what: str) -> None:
        self.ctx, self.plan, self.tfields, self.what = ctx, plan, tfields, what
        self.tcols = [f"__lv_t{k}" for k in range(len(tfields))]
        self._snames = list(source.names)
        self._s_index = {n: j for j, n in enumerate(self._snames)}
        self._t_index = {f.name: k for k, f in enumerate(tfields)}

    def source_frame(self, df: DataFrame) -> DataFrame:
        """The source with its columns renamed ``__lv_s<j>``."""
        return df.select(*[col(n).alias(f"__lv_s{j}") for j, n in enumerate(self._snames)])

    def ref(self, r: E.ColumnRef, source_only: bool = False) -> Column:
        in_target = r.relation == 0 and not source_only  # insert clauses see the source alone
        c = (F.col(self.tcols[self._t_index[r.column]]) if in_target
             else F.col(f"__lv_s{self._s_index[r.column]}"))
        for f in r.fields:
            c = c.getField(f)
        return c

    def _ref_of(self, i: int) -> Callable[[E.ColumnRef], Column]:
        return self.ref if self.plan.clauses[i].matched else (lambda r: self.ref(r, True))

    def _cond(self, i: int) -> Column:
        c = self.plan.conditions[i]
        return (F.lit(True) if c is None
                else F.coalesce(spark_expr.condition(c, self._ref_of(i)), F.lit(False)))

    def clause_of(self, ids: list[int]) -> Column:
        """The first of ``ids`` whose condition holds, -1 for none."""
        out = None
        for i in ids:
            out = (F.when(self._cond(i), F.lit(i)) if out is None
                   else out.when(self._cond(i), F.lit(i)))
        return (out.otherwise(F.lit(-1)) if out is not None else F.lit(-1)).cast("int")

    def values(self, ids: list[int], default: Callable[[int, T.StructField], Column],
               named: bool = True) -> list[Column]:
        """Each target column as the applying clause of ``ids`` sets it (``default`` where it
        does not), named ``__lv_t<k>`` (``named``)."""
        cols = []
        for k, f in enumerate(self.tfields):
            out = None
            for i in ids:
                v = (self.plan.values[i] or {}).get(f.name)
                val = default(k, f) if v is None else not_null(
                    spark_expr.assigned(v, self.ctx.schema.field(f.name).type, self._ref_of(i)),
                    f, "schema", f"{self.what}: {f.name}={v.text!r}")
                out = F.when(self._cond(i), val) if out is None else out.when(self._cond(i), val)
            value = out.otherwise(default(k, f)) if out is not None else default(k, f)
            cols.append(value.alias(self.tcols[k]) if named else value)
        return cols
