"""The parts a transaction is made of, chosen once from its features and commit mode.

| part | ``""`` (DL) | R | CT | I |
|---|---|---|---|---|
| decider | each statement | each table | one record (several tables) | one global-log entry |
| runner | commits each statement | runs against views | same | same, reads at one cut |
| journal (sublogs) | none | with R; at the tail behind each statement | same (**) | with R |
| conflict policy | abort | redo with R | redo with R | redo with R |
| wait policy | - | markers | markers + DAG | markers + DAG |
| markers claimed | never | tail: only to queue; in place: first write | at commit (*) | at commit |
| overtaking | - | one table at the tail | never | never |
| a first read waits for | - | - | running writers that will change its rows | - (its cut) |

(*) CT writing one table at the tail: as R (only to queue).
(**) A record-deciding commit waits for every entry before it claims.

This table is the only place that reads the feature flags; the transaction and its parts ask
each other, never which features they run with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .. import logs
from ..complex_txn.decider import ByRecord
from ..complex_txn.wait import DagWait
from ..core.client import LakeClient
from ..core.context import TxnContext
from ..core.deciding import Decider
from ..core.markerset import MarkerSet
from ..core.per_statement import EachCommits, PerStatement
from ..core.per_table import PerTable
from ..core.read_wait import NoReadWait, WaitForChangers
from ..core.runner import ClaimAtFirstWrite, ClaimLater, NewestReader, Reader, StatementRunner
from ..core.validate import Validator
from ..isolation.cut import Cut
from ..isolation.decide import GlobalDecider
from ..isolation.decider import ByGlobalLog, CutReader
from ..isolation.unannounced import UnannouncedCut
from ..markers.overtake import overtake_policy
from ..markers.wait import MarkerWait
from ..recovery.journal import Journal, JournalContext, NoJournal
from ..recovery.redo import RedoContext, conflict_policy
from ..vocab import CommitMode, Decision


@dataclass
class Parts:
    ctx: TxnContext
    markers: MarkerSet
    journal: Journal
    decider: Decider
    runner: StatementRunner
    reader: Reader


def build(client: LakeClient, ctx: TxnContext, watch: Callable[[], None],
          sublog_seq: int = 0) -> Parts:
    """The parts of the transaction ``ctx`` describes (``watch``: start its heartbeats)."""
    features = ctx.features
    r, ct, i = "R" in features, "CT" in features, "I" in features
    # dependency lists and marker shifts wherever a commit waits on several tables at once
    dag = ct or i
    # R alone at the tail is optimistic: it claims a marker only when it has to queue; in place
    # it claims at its first write, since the fill goes into the marker's version. Where the DAG
    # orders the markers (CT, I) a transaction claims them at commit, all at once (a CT commit
    # of one table at the tail excepted: it commits as R does, complex_txn/decider.py).
    optimistic = r and not dag and ctx.mode == CommitMode.TAIL
    # entries go out behind the statements where a one-table commit at the tail may be its own
    # decision (R; R,CT, whose record waits for them before it claims); I announces them
    behind = r and not i and ctx.mode == CommitMode.TAIL
    journal = (Journal if r else NoJournal)(JournalContext(
        txn_id=ctx.id, store=client.store, attempt=lambda: ctx.attempt, features=ctx.label,
        isolation=ctx.isolation, mode=ctx.mode, count=ctx.count),
        seq=sublog_seq, behind=behind)
    overtake = overtake_policy(ctx.decision, ctx.mode, ctx.count, client.map, client.background)
    markers = MarkerSet(ctx, DagWait() if dag else MarkerWait(), overtake, watch)
    redo = RedoContext(
        txn_id=ctx.id, engine=client.engine, write_sublog=journal.write, count=ctx.count,
        redone=lambda table, version, why, ops: logs.redone(ctx, table, version, why, ops))
    validator = Validator(ctx, markers, conflict_policy(r), redo)
    reader: Reader = NewestReader()
    decider: Decider
    if not features:
        decider = PerStatement(ctx)
        runner: StatementRunner = EachCommits(ctx, markers, journal, ClaimLater(markers, journal),
                                              reader, True)
        return Parts(ctx, markers, journal, decider, runner, reader)
    if i:
        cut = (UnannouncedCut if client.read_only else Cut)(client.gvl, client.log, client.records,
                                                            txn_id=ctx.id)
        global_ = GlobalDecider(client.gvl, client.log, client.records, cut)
        markers.on_claim = global_.note_claim
        ctx.gvl_base = lambda: global_.base
        reader = CutReader(cut)
        decider = ByGlobalLog(ctx, markers, validator, journal, overtake, global_=global_)
    elif ct:
        decider = ByRecord(ctx, markers, validator, journal, overtake)
    else:
        decider = PerTable(ctx, markers, validator, journal, overtake)
    at_first_write = r and not dag and not optimistic
    claims = ClaimAtFirstWrite(markers, journal) if at_first_write else ClaimLater(markers, journal)
    # a marker claimed at the first write cannot say what the statements after it will change,
    # and it may be held through a long transaction: followers must not wait to read for it
    markers.says_changes = not at_first_write
    # CT reads the newest version while it holds no marker (it claims them at commit)
    read_wait = WaitForChangers(ctx) if ct and not i else NoReadWait()
    runner = StatementRunner(ctx, markers, journal, claims, reader, decider.creates_tables,
                             read_wait)
    return Parts(ctx, markers, journal, decider, runner, reader)


def decision_of(features: frozenset[str]) -> str:
    """What makes a commit durable (``vocab.Decision``): the global log (I), the record (CT),
    each table."""
    return (Decision.GVL if "I" in features else Decision.RECORD if "CT" in features
            else Decision.TABLE)
