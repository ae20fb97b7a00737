"""The leader's side of group commit: which riders one version can carry, and its commit.

A rider validated its statements up to some version before ours by itself (its request says
which); the leader, which validated up to the version before ours, checks them against the
commits after that one. Inside the version each member comes after the ones before it, so a
rider is then checked against what the version carries so far (the leader's commit, then the
riders taken before it) with the test validation uses: nothing conflicts, and its files go in
as they are; a write conflicts, and its statements from there on run again on the version's
state so far, as a redo after those commits would run them; a read conflicts, and it is left
out (its rows were not kept, so it cannot be compared), as is a rider whose statements cannot
be run again. The files the leader writes for riders are its own (``Group.written``); a
rider's replaced files stay the rider's. (``docs/protocol.md``, "Group commit".)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..delta.actions import AddFile, Commit, RemoveFile
from ..delta.snapshot import Snapshot, SnapshotBuilder
from ..engines.api import Engine, TableContext, data_file_key
from ..errors import LakeVillaError
from ..markers.marker import marker_of
from ..scan.conflicts import first_conflict
from ..statements import registry
from ..statements.read_results import ReadChanged
from ..statements.view import TableWork
from .rides import RideRequest

# the statement kinds a rider may have: what a leader can take as they are or run again
RIDING_KINDS = frozenset({"read", "insert", "update", "delete"})


class NotCarried(Exception):  # noqa: N818 - an outcome of a check, internal
    """This rider cannot go in this version (why: the message)."""


@dataclass
class Group:
    """One version's commit and whom it carries besides its leader."""

    commit: Commit
    riders: list[RideRequest] = field(default_factory=list)
    rerun: int = 0  # riders whose statements the leader ran again
    written: set[str] = field(default_factory=set)  # keys of files the leader wrote for riders
    left_out: dict[str, str] = field(default_factory=dict)  # attempt -> why

    def riders_json(self) -> list[dict[str, Any]]:
        return [{"txn": r.txn, "attempt": r.attempt, "features": r.features} for r in self.riders]


def named_paths(commit: Commit) -> set[str]:
    """The files ``commit`` names (paths under the table): its adds' data files and the files
    written for them (a deletion vector's own file), its change data files."""
    return {p for a in commit.adds for p in (a.path, *a.written_files)} | {
        c.path for c in commit.cdc}


def rebuild(req: RideRequest, tw: TableWork, base: Snapshot, store: Any,
            root_uri: str) -> TableWork:
    """The rider's statements on the table, in order, as of ``base`` (the version before
    ours, up to which the rider validated them): the view ``resume`` would build."""
    out = TableWork(req.table, tw.log, base, TableContext.of(req.table, store, root_uri, base))
    for seq, (kind, item) in enumerate(req.entries(), start=1):
        if kind == "read":
            op = registry.read_of(seq, req.table, item.get("where"), set(item.get("files") or []))
        else:
            if item.op not in RIDING_KINDS:
                raise NotCarried(f"a {item.op} statement")
            op = registry.decode(item.op, item.op_seq, req.table, item.statement,
                                 item.added_files(),
                                 removed=[AddFile.from_json(r) for r in item.removed],
                                 read_files=set(item.read_files),
                                 logical=item.kind == "logical")
            op.cdc = item.cdc_files()
            if item.predicate is not None and (item.statement is None
                                               or "where" not in item.statement):
                op.where = item.predicate
        out.adopt(op)
    if out.metadata is not None or out.protocol is not None:
        raise NotCarried("it changes the table's metadata")
    return out


def _view(base: Snapshot, version: int, adds: list[AddFile], removes: list[RemoveFile]) -> Snapshot:
    """The table as the version carries it so far (the state a re-run rider runs on)."""
    b = SnapshotBuilder(base.table, base)
    b.apply(version, Commit(adds=list(adds), removes=list(removes)))
    return b.build()


def join(adds: list[AddFile], removes: list[RemoveFile], more_adds: list[AddFile],
         more_removes: list[RemoveFile]) -> None:
    """Append a later member's actions: a file an earlier member added and this one removes
    was never in the table, so both actions go (the file is garbage)."""
    for r in more_removes:
        i = next((j for j, a in enumerate(adds) if a.path == r.path and a.dv_id == r.dv_id), None)
        if i is not None:
            del adds[i]
        else:
            removes.append(r)
    adds.extend(more_adds)


def _files(tw: TableWork, ops: list[Any]) -> set[str]:
    return {data_file_key(tw.name, p, tw.ctx.lake_uri) for op in ops for a in op.added
            for p in a.written_files} | {data_file_key(tw.name, c.path, tw.ctx.lake_uri)
                                         for op in ops for c in op.cdc}


def _take(req: RideRequest, leader: TableWork, base: Snapshot, version: int,
          adds: list[AddFile], removes: list[RemoveFile], engine: Engine,
          group: Group) -> TableWork:
    """Check one rider against what the version carries so far; run its statements again
    where they conflict. Returns its view (its actions join the version); ``NotCarried``."""
    rtw = rebuild(req, leader, base, leader.ctx.store, leader.ctx.lake_uri)
    so_far = Commit(adds=list(adds), removes=list(removes))
    # the commits the rider has not validated against (it rides on from a version it missed;
    # the leader validated up to ours), then what the version carries before it
    between = [(v, c) for v, c in leader.log.commits_between(req.validated_upto, version - 1)
               if marker_of(c) is None]
    hit = first_conflict(rtw.footprints(), [*between, (version, so_far)], rtw.schema,
                         base.partition_columns)
    if hit is None:
        return rtw
    k, _, why = hit
    if any(op.consumed or not op.redoable for op in rtw.ops[k:]):
        raise NotCarried(f"a statement it cannot run again conflicts ({why})")
    theirs = _files(rtw, rtw.ops)
    try:
        rtw.redo(engine, k, _view(base, version, adds, removes))
    except (LakeVillaError, ReadChanged) as e:
        group.written |= _files(rtw, rtw.ops[k:]) - theirs
        raise NotCarried(f"running it again failed ({e})") from None
    group.written |= _files(rtw, rtw.ops[k:]) - theirs
    group.rerun += 1
    return rtw


def build(leader: TableWork, commit: Commit, version: int, reqs: list[RideRequest],
          engine: Engine, *, now: float, max_age: float, max_riders: int,
          deadline: float) -> Group:
    """``commit`` (the leader's, for ``version``) with every rider of ``reqs`` it can carry,
    in order; stops taking riders at ``deadline`` (monotonic), before they give up on us."""
    base = leader.log.snapshot(version - 1, list_log=False)
    adds, removes = list(commit.adds), list(commit.removes)
    group = Group(commit)
    mine = leader.updated_columns()
    updated = set(mine) if mine else None
    blind = bool((commit.commit_info or {}).get("isBlindAppend"))
    now_ms = int(time.time() * 1000)
    for req in reqs:
        if len(group.riders) >= max_riders or time.monotonic() > deadline:
            group.left_out[req.attempt] = "the version is full"
            continue
        if now - req.started > max_age:
            group.left_out[req.attempt] = "older than max_transaction_age"
            continue
        try:
            rtw = _take(req, leader, base, version, adds, removes, engine, group)
        except NotCarried as e:
            group.left_out[req.attempt] = str(e)
            continue
        more_adds, more_removes = rtw.net_actions(now_ms)
        join(adds, removes, more_adds, more_removes)
        group.riders.append(req)
        theirs = rtw.updated_columns()
        updated = updated | set(theirs) if updated is not None and theirs else None
        blind = blind and all(op.blind for op in rtw.ops if op.is_write)
    if not group.riders:
        return group
    info = dict(commit.commit_info or {})
    lv = dict(info.get("lakevilla") or {})
    lv["riders"] = group.riders_json()
    if updated is not None:
        lv["updated"] = sorted(updated)
    else:
        lv.pop("updated", None)
    info["lakevilla"] = lv
    info["isBlindAppend"] = blind
    group.commit = Commit(protocol=commit.protocol, metadata=commit.metadata, adds=adds,
                          removes=removes, txns=list(commit.txns), commit_info=info,
                          other=list(commit.other), cdc=list(commit.cdc))
    return group
