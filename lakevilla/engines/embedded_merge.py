"""MERGE on the embedded engine: the join and the clauses in DuckDB, the rewrite in pyarrow.

Target rows are numbered, joined with the source by ``on``, and each matched row takes the
first clause whose condition holds; a target row matched by several source rows is an error
when a clause updates or deletes (Delta's rule). Only files where a clause applied are
rewritten; inserted rows become new files. Everything is computed before anything is
written, so bad input leaves storage untouched.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..delta.actions import AddFile
from ..errors import DuplicateMatchError, InvalidExpressionError, SchemaMismatchError
from ..parallel import pmap
from ..scan import duck
from ..scan import expressions as E
from . import change_data, dv_rewrite, generated, identity
from .api import RewriteResult, TableContext
from .duck_sql import assignment_cast, first_line
from .merge_plan import MergePlan, MergeResult


class Engine(Protocol):
    """What the merge uses of the embedded engine: reading a file, splitting rows by partition,
    writing files."""

    def read_file(self, ctx: TableContext, add: AddFile, columns: list[str] | None) -> pa.Table: ...

    def split_by_partition(self, ctx: TableContext,
                           table: pa.Table) -> list[tuple[pa.Table, dict[str, str | None]]]: ...

    def write_all(self, ctx: TableContext,
                  jobs: list[tuple[pa.Table, dict[str, Any]]]) -> list[AddFile]: ...


def merge(engine: Engine, ctx: TableContext, files: list[AddFile], cm: MergePlan,
          source: pa.Table) -> tuple[RewriteResult, MergeResult]:
    """Join ``source`` with the rows of ``files`` in DuckDB, apply the clauses; rewrite only the
    files where a clause applied, write the inserted rows as new files. Everything is
    computed before anything is written, so bad input leaves storage untouched."""
    spec = cm.spec
    parts = pmap(lambda a: engine.read_file(ctx, a, None), files)
    target = pa.concat_tables(parts) if parts else ctx.schema.empty_table()
    file_of = np.repeat(np.arange(len(parts), dtype=np.int64), [p.num_rows for p in parts]) \
        if parts else np.zeros(0, dtype=np.int64)
    n = target.num_rows
    tgt = target.append_column("__lv_row", pa.array(np.arange(n, dtype=np.int64)))
    src = source.append_column("__lv_srow", pa.array(np.arange(source.num_rows, dtype=np.int64)))
    ta, sa = E.quote_ident(spec.target_alias), E.quote_ident(spec.source_alias)
    frm = f"FROM __lv_tgt AS {ta} JOIN __lv_src AS {sa} ON ({cm.on.sql})"
    tables = {"__lv_tgt": tgt, "__lv_src": src}
    matched, inserts = cm.ids(True), cm.ids(False)

    def cond(i: int) -> str:
        c = cm.conditions[i]
        return "TRUE" if c is None else f"coalesce(({c.sql}), false)"

    def cases(ids: list[int], value, default) -> str:
        return "(CASE " + " ".join(f"WHEN {cond(i)} THEN {value(i)}"
                                   for i in ids) + f" ELSE {default} END)"

    def run(sql: str, what: str) -> pa.Table:
        try:
            return duck.query(sql, tables)
        except Exception as e:  # noqa: BLE001 - a runtime error of the user's expression
            raise InvalidExpressionError(
                f"merge into {ctx.name!r}: {what}: {first_line(e)}") from None

    cols = [f"{ta}.__lv_row AS __lv_row", f"{sa}.__lv_srow AS __lv_srow"]
    if matched:
        cols.append(cases(matched, str, "-1") + " AS __lv_clause")
        for k, f in enumerate(ctx.schema):
            own = f"{ta}.{E.quote_ident(f.name)}"

            def val(i: int, f=f, own=own) -> str:
                v = (cm.values[i] or {}).get(f.name)
                return own if v is None else assignment_cast(v.sql, f)
            cols.append(cases(matched, val, own) + f" AS __lv_c{k}")
    joined = run(f"SELECT {', '.join(cols)} {frm}", "on/when_matched")
    rows = joined.column("__lv_row").to_numpy()
    srows = joined.column("__lv_srow").to_numpy()
    if matched and not cm.only_deletes and len(rows):
        uniq, counts = np.unique(rows, return_counts=True)
        if (counts > 1).any():
            r = int(uniq[np.argmax(counts > 1)])
            key = ({c: target.column(c)[r].as_py() for c, _ in cm.keys}
                   or target.slice(r, 1).to_pylist()[0])
            raise DuplicateMatchError(
                f"merge into {ctx.name!r}: {int((counts > 1).sum())} target row(s) are matched by "
                f"several source rows (e.g. the row {key} by {int(counts.max())}); a merge that "
                "updates or deletes needs at most one source row per target row: "
                "deduplicate the source")
    updated = deleted = 0
    res = RewriteResult()
    jobs: list[tuple[pa.Table, dict]] = []
    marks: list[dv_rewrite.Marks] = []
    fresh: list[pa.Table] = []
    if matched and len(rows):
        clause = joined.column("__lv_clause").to_numpy()
        applied = clause >= 0
        is_del = np.zeros(len(clause), dtype=bool)
        for i in matched:
            if spec.clauses[i].kind == "delete":
                is_del |= clause == i
        upd = applied & ~is_del
        deleted_rows = np.unique(rows[applied & is_del])
        updated, deleted = int(upd.sum()), len(deleted_rows)
        keep = np.ones(n, dtype=bool)
        keep[deleted_rows] = False
        index = np.arange(n, dtype=np.int64)
        index[rows[upd]] = n + np.arange(int(upd.sum()), dtype=np.int64)
        new_cols = []
        upd_idx = pa.array(np.nonzero(upd)[0])
        vs = []
        for k, f in enumerate(ctx.schema):
            v = joined.column(f"__lv_c{k}").take(upd_idx).combine_chunks()
            vs.append(v if v.type.equals(f.type) else pc.cast(v, f.type))
        # a generated column its clause does not set follows the new row (Delta recomputes it)
        new_rows = generated.by_clause(ctx, pa.table(vs, schema=ctx.schema), clause[upd],
                                       cm.values)
        for k, f in enumerate(ctx.schema):
            v = new_rows.column(k).combine_chunks()
            if not f.nullable and v.null_count:
                raise SchemaMismatchError(f"merge into {ctx.name!r} writes NULL into non-nullable "
                                          f"column {f.name!r}")
            new_cols.append(pa.chunked_array([*target.column(k).chunks, v], f.type))
        combined = pa.table(new_cols, schema=ctx.schema)  # the target's rows, then the updated
        if ctx.write_cdf:  # each updated row before and after, each deleted row
            res.changes += [(target.take(pa.array(rows[upd])), change_data.PREIMAGE),
                            (new_rows, change_data.POSTIMAGE),
                            (target.take(pa.array(deleted_rows)), change_data.DELETE)]
        touched = np.unique(file_of[rows[applied]])
        by_dv = ctx.write_dvs
        if by_dv:  # the applied rows are marked in DVs; only updated rows are written
            starts = np.cumsum([0] + [p.num_rows for p in parts])
            hit = np.unique(rows[applied])
            for fi in touched:
                mine = hit[file_of[hit] == fi]
                add, live = files[int(fi)], parts[int(fi)].num_rows
                marks.append((add, live, dv_rewrite.in_file(ctx, add, live, mine - starts[fi])))
            if updated:
                fresh.append(combined.slice(n))
        for fi in touched if not by_dv else ():
            sel = np.nonzero((file_of == fi) & keep)[0]
            res.removed.append(files[int(fi)])
            if len(sel):
                jobs.extend(engine.split_by_partition(ctx, combined.take(pa.array(index[sel]))))
    inserted = 0
    if inserts:
        hit = np.zeros(source.num_rows, dtype=bool)
        hit[srows] = True
        tables["__lv_src"] = src.filter(pa.array(~hit))
        icols = [cases(inserts, str, "-1") + " AS __lv_clause"]
        for k, f in enumerate(ctx.schema):

            def ival(i: int, f=f) -> str:
                v = (cm.values[i] or {}).get(f.name)
                return assignment_cast(None if v is None else v.sql, f)
            icols.append(cases(inserts, ival, assignment_cast(None, f)) + f" AS __lv_c{k}")
        got = run(f"SELECT {', '.join(icols)} FROM __lv_src AS {sa}", "when_not_matched_insert")
        got = got.filter(pc.greater_equal(got.column("__lv_clause"), 0))
        if got.num_rows:
            out = []
            for k, f in enumerate(ctx.schema):
                v = got.column(f"__lv_c{k}").combine_chunks()
                out.append(v if v.type.equals(f.type) else pc.cast(v, f.type))
            # a generated column its clause does not give is computed from the inserted row
            clause = got.column("__lv_clause").to_numpy()
            ins, res.marks = identity.by_clause(ctx, pa.table(out, schema=ctx.schema), clause,
                                                cm.values)
            ins = generated.by_clause(ctx, ins, clause, cm.values)
            for f, v in zip(ctx.schema, ins.columns, strict=True):
                if not f.nullable and v.null_count:
                    raise SchemaMismatchError(f"merge into {ctx.name!r} inserts NULL into "
                                              f"non-nullable column {f.name!r}")
            inserted = ins.num_rows
            res.changes += [(ins, change_data.INSERT)] if ctx.write_cdf else []
            fresh.append(ins)
    if fresh:  # updated rows (by DV) and inserted ones: new files together
        jobs.extend(engine.split_by_partition(ctx, pa.concat_tables(fresh)))
    if marks:
        done = res  # the change rows and identity marks gathered above stay
        res = dv_rewrite.mark(ctx, marks, lambda: engine.write_all(ctx, jobs))
        res.changes, res.marks = done.changes, done.marks
    else:
        res.added = engine.write_all(ctx, jobs)
    res.rows = updated + deleted + inserted
    return res, MergeResult(source.num_rows, updated, deleted, inserted, len(res.added),
                            len(res.removed))
