"""Mutation check of the protocol: break one step at a time, run the tests that should notice.

    python -m tests.mutations                 # every mutation, one at a time
    python -m tests.mutations --list          # names, files, what each breaks
    python -m tests.mutations --only NAME     # one (or a comma-separated few); --jobs N in parallel

Each mutation names the protocol file, an exact snippet of its source and the replacement
(a snippet that is not found exactly once fails loudly, so mutations cannot rot silently
when the code moves), and the tests that must fail. The runner copies the repository
(``lakevilla``, ``tests``, ``benchmarks``, ``pyproject.toml``) into a scratch directory
under /tmp, applies the mutation there, runs the selected tests with a time limit and
reports ``killed`` (a selected test failed), ``survived`` (they all passed: the tests do
not check that step), ``timeout`` or ``error`` (pytest could not run them). It first runs
every selected test on the unmutated copy: a kill means nothing if that baseline fails.
A table goes to stdout, JSON to ``results/mutations.json``. Not collected by pytest and
not part of ``make test``: it runs the selections ~50 times (see tests/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPY = ("lakevilla", "tests", "benchmarks", "pyproject.toml")


@dataclass(frozen=True)
class Mutation:
    name: str
    area: str
    file: str  # relative to the repository root
    # (snippet, replacement) or (file, snippet, replacement), each once
    edits: tuple[tuple[str, ...], ...]
    tests: tuple[str, ...]  # pytest arguments: node ids, or "-k", "expr"
    breaks: str  # the protocol step it breaks, in words
    equivalent: str = ""  # why surviving is expected (no test can tell), if it is

    def changes(self) -> list[tuple[str, str, str]]:
        return [(self.file, *e) if len(e) == 2 else tuple(e) for e in self.edits]  # type: ignore[misc]


def M(name, area, file, find, replace, tests, breaks, *more, equivalent=""):  # noqa: N802 - a table row
    return Mutation(name, area, file, ((find, replace), *more), tuple(tests), breaks, equivalent)


MK = "tests/protocol/test_markers.py::"
SR = "tests/protocol/test_sublogs_and_redo.py::"
RT = "tests/protocol/test_r_commit_at_the_tail.py::"
WO = "tests/protocol/test_waiting_and_overtaking.py::"
LS = ("tests/unit/test_store.py::"
      "test_a_local_listing_is_the_keys_after_its_start_in_byte_order")
SHAPE_TEST = ("tests/unit/test_expressions.py::"
              "test_a_text_parsed_through_its_shape_gets_the_tree_duckdb_gives_the_text")
CO = "tests/protocol/test_ct_one_table.py::"
GC = "tests/protocol/test_group_commit.py::"
FR = "tests/protocol/test_first_reads_wait.py::"
FRW = FR + "test_a_first_read_of_rows_a_queued_writer_will_change_waits_for_it"
FRN = FR + "test_a_first_read_does_not_wait_for_a_writer_that_cannot_change_it"
RC = "tests/protocol/test_recovery_after_crashes.py::"
RR = "tests/protocol/test_recovery_by_recover.py::"
RS = "tests/protocol/test_recovery_by_resume.py::"
AS = "tests/interop/test_spark_at_scale.py::"
RX = "tests/protocol/test_recovery_of_stalled_transactions.py::"
C = "tests/protocol/test_multi_table_commits.py::"
I = "tests/protocol/test_isolation.py::"  # noqa: E741
CW = "tests/statements/test_column_mapped_writes.py::"
NL = "tests/protocol/test_nothing_lost.py::"
OC = "tests/protocol/test_one_cut.py::"
MT = "tests/protocol/test_maintenance.py::"
CF = "tests/statements/test_change_data_feed.py::"
DW = "tests/statements/test_deletion_vector_writes.py::"
IT = "tests/protocol/test_recovery_of_idle_transactions.py::"
FOLDS = "tests/unit/test_folds.py::"
BC = "tests/unit/test_big_checkpoints.py::"
TX = "lakevilla/txn/transaction.py"
OVERTAKE = "lakevilla/markers/overtake.py"
LK = "lakevilla/maintenance.py"
CKPT = "lakevilla/markers/checkpoints.py"
ICT = "tests/statements/test_in_commit_timestamps.py::"
V2 = "tests/statements/test_v2_checkpoints.py::"
ST = "lakevilla/recovery/stalled.py"
GV = "lakevilla/isolation/gvl.py"
GD = "lakevilla/isolation/decide.py"

MUTATIONS: list[Mutation] = [
    # -- markers ------------------------------------------------------------------------------
    M("marker-never-expires", "markers", "lakevilla/markers/marker.py",
      "return self.state == RUNNING and now > self.expires", "return False",
      [MK + "test_a_marker_is_stalled_only_after_marker_ttl",
       RC + "test_crash_at_every_store_call_of_an_r_transaction[local-tail]"],
      "a stalled marker never counts as expired"),
    M("marker-expires-at-once", "markers", "lakevilla/markers/marker.py",
      "return self.state == RUNNING and now > self.expires", "return self.state == RUNNING",
      [MK + "test_a_marker_is_stalled_only_after_marker_ttl",
       NL + "test_resume_refuses_while_the_owners_marker_is_alive"],
      "a live marker counts as expired (marker_ttl ignored)"),
    M("marker-expiry-off-by-ttl", "markers", "lakevilla/markers/marker.py",
      "return self.state == RUNNING and now > self.expires",
      "return self.state == RUNNING and now > self.expires - 2.0",
      [MK + "test_a_marker_is_stalled_only_after_marker_ttl"],
      "markers expire 2 s early (the TTL boundary)"),
    M("rewrite-loss-unnoticed", "markers", "lakevilla/markers/marker.py",
      "            h.lost = True\n            raise MarkerLost(\n"
      "                f\"marker {h.table}@{h.version} was changed by another client\") from None",
      "            pass",
      [RX + "test_a_late_in_place_owner_whose_marker_was_freed_commits_at_the_tail",
       RX + "test_expired_marker_is_freed_and_the_late_owner_continues[local-in_place]"],
      "a late owner does not notice that recovery took its marker"),
    M("free-stalled-unconditional", "markers", "lakevilla/markers/marker.py",
      "log.rewrite_commit(version, payload.to_commit(), etag)",
      "log.store.put(log.commit_key(version), payload.to_commit().to_bytes())",
      [MK + "test_freeing_a_marker_that_moved_fails"],
      "recovery overwrites a marker without its etag (clobbers a heartbeat or a fill)"),
    M('heartbeat-does-not-extend', "markers", 'lakevilla/core/markerset.py',
      'h.payload.expires = now + ctx.settings.marker_ttl',
      'h.payload.expires = h.payload.expires',
      [MK + "test_heartbeat_keeps_a_slow_transaction_alive"],
      "the heartbeat rewrites the marker without moving its expiry"),
    M('close-marker-skipped', "markers", 'lakevilla/core/markerset.py',
      '            h.payload.state = COMMITTED\n'
      '            h.payload.commit_version = version\n            try:',
      '            return\n            try:',
      [MK + "test_markers_are_empty_versions_for_delta_rs[local]"],
      "a committed transaction leaves its marker open"),
    M('follower-waits-for-close', "markers", 'lakevilla/core/markerset.py',
      '            ended, out = _without_landed(out, landed)',
      '            pass',
      [WO + "test_a_follower_does_not_wait_for_the_close_of_a_marker_whose_commit_landed"],
      "a follower waits for the close of a marker whose owner's commit has already landed"),
    M('holder-ignores-landed-commits', "markers", 'lakevilla/core/markerset.py',
      '            ended, candidates = _without_landed(candidates, landed)',
      '            pass',
      [WO + "test_a_waiting_marker_holder_reads_its_predecessors_marker_only_at_full_reads"],
      "a waiting marker holder keeps waiting for a predecessor whose commit it probed until a "
      "full read of the marker"),
    M('wait-scan-ignores-cleared-range', "markers", 'lakevilla/core/markerset.py',
      '        start = scan_start(tw.log, max(-1, m - MARKER_SCAN_WINDOW,',
      '        start = (lambda log, lo: lo)(tw.log, max(-1, m - MARKER_SCAN_WINDOW,',
      [WO + "test_a_waiters_scans_start_past_what_earlier_scans_cleared"],
      "every wait round scans for running markers from the last checkpoint it knows of: under "
      "a crowd ~200 versions a round"),
    M('cleared-range-never-recorded', "markers", 'lakevilla/core/markerset.py',
      '        scanned(tw.log, start, min([v for v, _ in out] + ours + [m]))\n',
      '',
      [WO + "test_a_waiters_scans_start_past_what_earlier_scans_cleared"],
      "the scans clear nothing, so every one reads its whole window"),
    M('checkpoint-check-ignores-cleared-range', "maintenance", CKPT,
      '    lo = scan_start(log, max(log.last_checkpoint_version(), version - 500))\n',
      '    lo = max(log.last_checkpoint_version(), version - 500)\n',
      [WO + "test_a_waiters_scans_start_past_what_earlier_scans_cleared"],
      "a due checkpoint re-reads every marker the client caches as running, also those whose "
      "owner's commit a wait has seen"),
    M('cleared-range-merges-across-a-gap', "markers", 'lakevilla/markers/floor.py',
      '            if running >= r.base:',
      '            if True:',
      ["tests/unit/test_scan_floor.py"],
      "a scan that found a running marker below the cleared range still extends the range over "
      "it: a later scan skips that marker"),
    M('cleared-range-used-below-its-base', "markers", 'lakevilla/markers/floor.py',
      '        if r is None or lo + 1 < r.base:',
      '        if r is None:',
      ["tests/unit/test_scan_floor.py"],
      "a scan whose window starts below the cleared range jumps to its top, skipping what lies "
      "between its window's start and the range"),
    M('update-of-other-columns-conflicts', "conflicts", 'lakevilla/scan/conflicts.py',
      '            if changed is not None and changed.isdisjoint(self.columns):',
      '            if False:',
      [SR + "test_a_read_of_columns_a_concurrent_update_left_alone_is_not_in_conflict"],
      "a read of w_tax conflicts with every Payment's update of w_ytd of the same row: a "
      "consumed read aborts, a kept one is run again"),
    M('updated-columns-claimed-beside-inserts', "conflicts", 'lakevilla/statements/view.py',
      '                or any(not op.keeps_rows or not op.assignments_to_check() '
      'for op in writes)):',
      '                or False):',
      [SR + "test_a_read_of_columns_a_concurrent_update_left_alone_is_not_in_conflict"],
      "a commit that updates and inserts names the updated columns alone: a read whose "
      "predicate the new rows match misses them (a phantom)"),
    M('read-columns-without-its-filter', "conflicts", 'lakevilla/statements/read.py',
      '            names |= {n for node in E.walk(pred.node) if node.get("class") == "COLUMN_REF"',
      '            names |= {n for node in [] if node.get("class") == "COLUMN_REF"',
      [SR + "test_a_read_of_columns_a_concurrent_update_left_alone_is_not_in_conflict"],
      "a read filtered by ytd < 5 takes no conflict from an update of ytd: rows leave its "
      "result unseen"),
    M('string-literal-bound-by-its-text', "expressions", 'lakevilla/scan/expressions.py',
      '            return node if strings_read else {**node, "literal": _ANY_STRING}',
      '            return node',
      ["tests/unit/test_expressions.py::"
       "test_texts_that_differ_only_in_their_strings_are_bound_once_and_run_their_own"],
      "each new string (c_last = 'BARBAR...', YCSB's field values) binds its expression in "
      "DuckDB again (~3 ms)"),
    M('strings-under-string-functions-bound-by-text', "expressions",
      'lakevilla/scan/expressions.py',
      '                                        and FUNCTIONS.get(name, ("",))[0] '
      'not in STRING_BLIND)',
      '                                        and True)',
      ["tests/unit/test_expressions.py::"
       "test_texts_that_differ_only_in_their_strings_are_bound_once_and_run_their_own"],
      "Payment's SET c_data = substr('<note>' || c_data, 1, 500) binds in DuckDB anew each time"),
    M('footprint-columns-any-iterable', "conflicts", 'lakevilla/scan/conflicts.py',
      '        if d.get("columns") is not None and not isinstance(d["columns"], list):',
      '        if False:',
      ["tests/unit/test_pruning.py::"
       "test_a_published_footprint_keeps_its_columns_and_refuses_malformed_ones"],
      "a marker's footprint with columns \"is\" is read as the columns i and s"),
    M('file-statistics-parsed-per-table', "pruning", 'lakevilla/scan/statcols.py',
      '            st = _parsed(text)',
      '            st = json.loads(text)',
      ["tests/unit/test_pruning.py::"
       "test_a_files_statistics_are_parsed_once_in_every_table_that_holds_it"],
      "every new snapshot of a busy table parses the statistics of each file added since its "
      "checkpoint again, and every waiter those of each landed commit"),
    M('action-rows-built-whole', "pruning", 'lakevilla/delta/files.py',
      '    whole_at = 0  # field by field, always',
      '    whole_at = 1 << 16',
      ["tests/unit/test_delta_log.py::"
       "test_a_table_of_action_objects_makes_a_field_a_column_only_when_asked"],
      "every new snapshot's overlay and every landed commit's files are made eleven columns "
      "where a prune reads two"),
    M('action-values-through-arrow', "pruning", 'lakevilla/delta/files.py',
      '                return self._lazy.values(name)',
      '                return self.column(name).to_pylist()',
      ["tests/unit/test_delta_log.py::"
       "test_a_table_of_action_objects_makes_a_field_a_column_only_when_asked"],
      "a prune of a small table of action objects makes their statistics an Arrow column, then "
      "Python strings again"),
    M('snapshot-schema-kept-across-metadata', "snapshots", 'lakevilla/delta/by_identity.py',
      '            if got is not None and all(a is b for a, b in zip(got[0], objects, '
      'strict=True)):',
      '            if got is not None:',
      ["tests/statements/test_evolution.py::test_evolution_matches_delta_rs"],
      "a snapshot after a metadata change keeps the schema of the snapshot before it (values kept "
      "by identity are found for other objects)",
      ('        key = tuple(id(o) for o in objects)', '        key = ()')),
    M('dependency-list-kept-when-changed', "dag", 'lakevilla/complex_txn/dag.py',
      '            new[t] = deps if deps is not None and old_lists.get(t) == got '
      'else frozenset(got)',
      '            new[t] = deps if deps is not None else frozenset(got)',
      ["tests/unit/test_dependency_lists.py::"
       "test_a_list_read_again_unchanged_is_not_made_again",
       "tests/unit/test_dependency_lists.py::"
       "test_the_published_list_is_what_the_latest_rounds_lists_make"],
      "rule II: a predecessor that republished a longer list is still known by its old one"),
    M('dependency-list-never-worked-out-again', "dag", 'lakevilla/complex_txn/dag.py',
      '        if new != old:\n            self._transitive = None\n',
      '',
      ["tests/unit/test_dependency_lists.py::"
       "test_the_published_list_is_what_the_latest_rounds_lists_make"],
      "rule II: the published list stays the one worked out first, whatever the rounds read"),
    M('first-read-never-waits', "markers", 'lakevilla/core/read_wait.py',
      '        writers = self.changers(log, snap, op)\n',
      '        writers: Writers = []\n',
      [FRW + "[update]"],
      "CT: a first read of rows a queued writer will change reads them as they are, and its "
      "transaction aborts at commit"),
    M('first-read-waits-for-other-columns', "markers", 'lakevilla/scan/conflicts.py',
      '        return self.columns is None or columns is None or not columns.isdisjoint(',
      '        return True or columns is None or not columns.isdisjoint(',
      [FRN + "[other-columns]"],
      "CT: a first read waits for a writer that changes only columns it does not depend on"),
    M('first-read-waits-for-other-rows', "markers", 'lakevilla/scan/conflicts.py',
      '        return self.where is None or bool(prune(',
      '        return True or bool(prune(',
      [FRN + "[other-rows]"],
      "CT: a first read waits for a writer whose where matches none of the files it reads"),
    M('appends-claim-changes', "markers", 'lakevilla/statements/insert.py',
      '        return None  # new rows only',
      '        return Change()',
      [FRN + "[appends-only]"],
      "CT: a first read waits for a writer that only appends"),
    M('deletes-claim-no-column', "markers", 'lakevilla/statements/update.py',
      '        return Change(self.where)\n',
      '        return Change(self.where, ())\n',
      [FRW + "[delete]"],
      "CT: a first read of rows a queued delete will remove does not wait for it"),
    M('new-columns-claim-no-change', "markers", 'lakevilla/statements/view.py',
      '        if self.creating is not None or self.metadata is not None or self.protocol '
      'is not None:\n            return [Change().to_json()]  # every read meets a change of '
      'the table\'s schema\n',
      '',
      [FRW + "[new-column]"],
      "CT: a first read does not wait for a queued writer that adds columns as it appends"),
    M('first-read-wait-misses-an-abort', "markers", 'lakevilla/core/read_wait.py',
      '            if writers and time.monotonic() - read_at >= FULL_READ_EVERY:',
      '            if False:',
      [FR + "test_a_first_read_stops_waiting_when_the_writer_aborts"],
      "CT: a first read waits out its limit for a writer that aborted"),
    M('first-read-waits-without-limit', "markers", 'lakevilla/core/read_wait.py',
      '            if time.monotonic() > deadline:\n',
      '            if False:\n',
      [FR + "test_a_first_read_waits_no_longer_than_the_wait_limit"],
      "CT: a first read waits as long as a writer's marker runs"),
    M('markers-claimed-at-first-write-say-changes', "markers", 'lakevilla/txn/parts.py',
      '    markers.says_changes = not at_first_write',
      '    markers.says_changes = True',
      [FRN + "[in-place-writer]"],
      "CT: a first read waits for an R writer in place, whose marker, claimed at its first "
      "write, is held while it runs its statements"),
    M('first-read-waits-in-every-feature-set', "markers", 'lakevilla/txn/parts.py',
      '    read_wait = WaitForChangers(ctx) if ct and not i else NoReadWait()',
      '    read_wait = WaitForChangers(ctx)',
      [FRN + "[R]", FRN + "[R,CT,I]"],
      "a marker holder (R) or a reader at its cut (I) waits before reading too"),
    M('overtake-decides-by-file', "markers", 'lakevilla/markers/overtake.py',
      '        ours = (tw.build_commit({"lakevilla": CommitInfo().to_json()})',
      '        ours = (tw.build_commit({})',
      [WO + "test_a_follower_that_updates_columns_a_waiting_predecessor_only_read_overtakes_it"],
      "a follower that only updates columns a queued predecessor did not read waits for it "
      "anyway (its commit is checked without the columns it updated)"),
    M('phantom-check-not-kept', "conflicts", 'lakevilla/scan/conflicts.py',
      '    if got is not None and (got[0] is schema or got[0].equals(schema, '
      'check_metadata=True)):',
      '    if False:',
      ["tests/unit/test_pruning.py::test_a_commit_is_pruned_once_per_predicate_whoever_asks_again"],
      "a waiter prunes each landed commit's new files for its predicates in every round, at "
      "validation and for each re-run read"),
    M('phantom-check-kept-across-schemas', "conflicts", 'lakevilla/scan/conflicts.py',
      '    if got is not None and (got[0] is schema or got[0].equals(schema, '
      'check_metadata=True)):',
      '    if got is not None:',
      ["tests/unit/test_pruning.py::test_a_commit_is_pruned_once_per_predicate_whoever_asks_again"],
      "a commit pruned under one schema answers for another (column mapping's physical names "
      "differ)"),
    M('claim-reads-cached-markers', "markers", 'lakevilla/core/markerset.py',
      '            tw.markers_read_at = time.monotonic()\n',
      '            pass\n',
      [WO + "test_a_waiting_marker_holder_reads_its_predecessors_marker_only_at_full_reads"],
      "a claim re-reads every marker it has cached as running"),
    M('holder-reads-markers-every-round', "markers", 'lakevilla/core/markerset.py',
      '        blocked, clock = not full and holder, ctx.now()',
      '        blocked, clock = False, ctx.now()',
      [WO + "test_a_waiting_marker_holder_reads_its_predecessors_marker_only_at_full_reads"],
      "a waiting marker holder re-reads its predecessors' markers every round"),
    M('full-read-reads-every-marker', "markers", 'lakevilla/core/markerset.py',
      '                blocked = not whole and p.footprint is None',
      '                blocked = False',
      [WO + "test_a_full_read_reads_markers_only_up_to_the_lowest_one_it_must_wait_for"],
      "a wait's full read re-reads every running predecessor's marker, not only up to the "
      "lowest one it must wait for"),
    M('whole-read-never', "markers", 'lakevilla/core/markerset.py',
      '        whole = full and tw.full_reads % WHOLE_READ_EVERY == 0',
      '        whole = False',
      [WO + "test_a_full_read_reads_markers_only_up_to_the_lowest_one_it_must_wait_for"],
      "a waiter never re-reads the markers above the lowest predecessor: a cycle, an abort or "
      "a shift there shows only once the ones below have gone"),
    M('cached-expired-kept', "markers", 'lakevilla/core/markerset.py',
      '            if blocked and not cached.expired(clock):',
      '            if blocked:',
      [WO + "test_a_waiter_never_takes_a_live_predecessors_marker_for_expired"],
      "a waiter keeps a cached marker state that looks expired and recovers it (a live "
      "marker it has not re-read, each round)"),
    M("optimistic-commit-past-unwaited-marker", "markers", "lakevilla/core/per_table.py",
      "            if tw.marker is not None or tw.log.known_latest() <= tw.waited_upto:\n"
      "                return",
      "            return",
      ["tests/protocol/test_waiting.py::"
       "test_an_optimistic_writer_waits_for_a_marker_claimed_while_it_waited"],
      "a writer without a marker commits above a marker claimed while it waited (its last round's "
      "probe found a predecessor's commit above it), never waiting for it",
      ("lakevilla/core/per_table.py",
       "upto = (max(tw.log.known_latest(), tw.marker.version) if tw.marker\n"
       "                            else tw.waited_upto)",
       "upto = max(tw.log.known_latest(), tw.marker.version if tw.marker else -1)")),
    M("overtake-ignores-footprint", "markers", OVERTAKE,
      "            if fps is not None and ours is not None and first_conflict(\n"
      "                    fps, [(v, ours)], tw.schema, tw.base.partition_columns) is None:",
      "            if fps is not None:",
      [WO + "test_a_follower_whose_commit_would_conflict_still_waits"],
      "a follower commits before a waiting predecessor whose footprint its commit invalidates"),
    M("overtake-never", "markers", OVERTAKE,
      "    if decision == Decision.TABLE and mode == CommitMode.TAIL:\n"
      "        return Overtake(count, pmap, background)",
      "    if False:\n        return Overtake(count, pmap, background)",
      [WO + "test_a_follower_whose_commit_cannot_conflict_commits_before_a_waiting_predecessor"],
      "a follower queues behind a waiting predecessor it cannot conflict with"),
    M('overtake-not-rechecked', "markers", 'lakevilla/core/per_table.py',
      '            if self.overtake.revoked_by(tw, commit):',
      '            if False:',
      [WO + "test_an_overtaking_follower_that_redoes_into_the_predecessors_files_"
            "waits_after_all"],
      "a follower whose redo made its commit conflict with an overtaken predecessor still "
      "overtakes it"),
    M('lost-race-no-relist', "markers", 'lakevilla/core/per_table.py',
      "again\n    tw.log.latest_version()\n",
      "again\n    pass\n",
      [RT + "test_a_commit_far_behind_the_tail_lists_the_log_after_one_lost_race",
       RT + "test_after_a_lost_race_a_commit_reads_forward_to_the_first_free_version_and_puts_"
            "there[4]",
       "tests/statements/test_optimize.py::"
       "test_compaction_beside_concurrent_writers_loses_and_duplicates_nothing"],
      "a writer that waited while others committed walks up the log one read per version "
      "instead of one LIST"),
    M('lost-race-reads-only-the-winner', "markers", 'lakevilla/core/per_table.py',
      '    for version in range(lost_at, lost_at + RELIST_AFTER_LOST):',
      '    for version in range(lost_at, lost_at + 1):',
      [RT + "test_after_a_lost_race_a_commit_reads_forward_to_the_first_free_version_and_puts_"
            "there[2]"],
      "a commit that lost a race reads only the winner's commit, then LISTs (a serial round trip "
      "where one more read finds the free version)"),
    M('lost-race-puts-blind', "markers", 'lakevilla/core/per_table.py',
      '                catch_up(tw, v)',
      '                tw.log.read_commit_raw(v)',
      [RT + "test_after_a_lost_race_a_commit_reads_forward_to_the_first_free_version_and_puts_"
            "there[2]"],
      "a commit that lost a race puts at the next version blindly (one lost put per version "
      "others took meanwhile)"),
    M('lost-race-no-back-off', "markers", 'lakevilla/core/per_table.py',
      '                    back_off(lost, time.monotonic() - put_at)',
      '                    pass',
      [RT + "test_after_a_lost_race_a_commit_reads_forward_to_the_first_free_version_and_puts_"
            "there[2]"],
      "every writer that lost a race puts at the next version at once, together with the others"),
    M('back-off-unbounded', "markers", 'lakevilla/core/per_table.py',
      '    time.sleep(random.uniform(0, min(lost, BACK_OFF_LOSSES) * put_took))',
      '    time.sleep(random.uniform(0, lost * put_took))',
      [RT + "test_a_back_off_after_lost_races_pauses_at_most_losses_times_the_lost_put"],
      "a writer that lost many races pauses ever longer (the tail stands idle)"),
    M('queued-writer-backs-off', "markers", 'lakevilla/core/per_table.py',
      '                if tw.marker is None:  # a queued turn backs off for nobody',
      '                if True:  # a queued turn backs off for nobody',
      [RT + "test_a_queued_r_writer_gets_the_whole_retry_budget_after_it_queues[budget]"],
      "a queued writer pauses after a lost race while the followers it holds up wait for it"),
    M("overtake-no-withdraw", "markers", OVERTAKE,
      "        self._withdrawn.add(tw.name)\n"
      "        self._set_footprint(tw, None, \"footprints_withdrawn\")",
      "        return",
      [WO + "test_a_predecessor_that_loses_a_race_is_not_overtaken_again"],
      "a published transaction that lost a commit race keeps being overtaken (it can starve)"),
    M('r-claims-at-first-write', "markers", 'lakevilla/txn/parts.py',
      '    optimistic = r and not dag and ctx.mode == CommitMode.TAIL',
      '    optimistic = False',
      [RT + "test_an_r_writer_nobody_precedes_commits_without_a_marker[local]"],
      "a lone R writer at the tail claims (and closes) a marker nobody needed: two log versions "
      "per commit"),
    M('optimistic-never-queues', "markers", 'lakevilla/core/per_table.py',
      '            if spent and tw.marker is None:',
      '            if False:',
      [RT + "test_an_r_writer_that_keeps_losing_the_commit_race_queues_with_its_footprints"],
      "an optimistic R writer races for the tail forever (no turn is guaranteed: it can starve)"),
    M('queue-ignores-conflicts', "markers", 'lakevilla/core/per_table.py',
      '                if tw.marker is None and conflicted >= QUEUE_AFTER_CONFLICTS:',
      '                if False:',
      [RT + "test_an_r_writer_queues_early_only_after_races_lost_to_"
            "conflicting_commits[conflicting]"],
      "an optimistic R writer that keeps losing to conflicting commits redoes for its whole budget "
      "before it queues"),
    M('blind-losses-queue-early', "markers", 'lakevilla/core/per_table.py',
      '                conflicted += bool(lost and redone)',
      '                conflicted += bool(lost)',
      [RT + "test_an_r_writer_queues_early_only_after_races_lost_to_conflicting_commits[blind]"],
      "races lost to commits that did not conflict queue the writer early (a marker everyone "
      "pays for)"),
    M('queued-turn-inherits-budget', "markers", 'lakevilla/core/per_table.py',
      "                tries = 1  # the queue's turn gets the whole budget: "
      "the races lost before it were",
      "                pass  # the queue's turn gets the whole budget: "
      "the races lost before it were",
      [RT + "test_a_queued_r_writer_gets_the_whole_retry_budget_after_it_queues[budget]"],
      "a queued R writer keeps only the tries its lost races left: writers that ignore markers "
      "abort it sooner"),
    M('leftovers-deleted-one-by-one', "markers", 'lakevilla/core/deletes.py',
      'self._store.delete_many(keys[i:i + BATCH])',
      '[self._store.delete(k) for k in keys[i:i + BATCH]]',
      [SR + "test_a_committed_r_writer_deletes_its_sublogs_and_redone_files_in_one_request[local]"],
      "a finished transaction deletes its sublogs and redone files one request each"),
    M('leftovers-deleted-per-transaction', "markers", 'lakevilla/core/deciding.py',
      'ctx.client.deletes.add(doomed + (keys if ctx.settings.delete_sublogs else []))',
      'delete_keys(ctx, doomed + (keys if ctx.settings.delete_sublogs else []))',
      [SR + "test_a_client_deletes_what_its_finished_transactions_leave_in_one_request[local]"],
      "each finished transaction of a client deletes what it leaves with a request of its own"),
    M('leftovers-wait-for-a-flush', "markers", 'lakevilla/core/deletes.py',
      '                self._arm()',
      '                pass',
      [SR + "test_a_batch_of_deletes_nobody_adds_to_goes_by_itself"],
      "the keys of a client's last transactions wait until its next commit or flush"),
    M('commit-reads-beside-its-put', "markers", 'lakevilla/core/per_table.py',
      '                parallel.together(*flush, lambda: tw.log.write_commit(v, c))  # noqa: B023',
      '                parallel.together(lambda: catch_up(tw, v), *flush,  # noqa: B023\n'
      '                                  lambda: tw.log.write_commit(v, c))  # noqa: B023',
      [RT + "test_an_r_writer_nobody_precedes_commits_without_a_marker[local]"],
      "every commit attempt at the tail reads its version beside its put, the one that wins too "
      "(a GET for nothing per commit)"),
    M('queue-claim-unpublished', "markers", 'lakevilla/core/markerset.py',
      '                    payload.footprint = self.overtake.claim_footprint(tw)',
      '                    payload.footprint = None',
      [RT + "test_an_r_writer_that_keeps_losing_the_commit_race_queues_with_its_footprints"],
      "a writer that queues after its statements hides its footprints: followers that cannot "
      "conflict wait for it"),
    M("unmarked-overtaker-not-counted", "markers", OVERTAKE,
      "(winner.marker is None or winner.marker > h.version)",
      "(winner.marker is not None and winner.marker > h.version)",
      [WO + "test_a_predecessor_that_loses_a_race_is_not_overtaken_again"],
      "races lost to optimistic followers (no marker) never make a published writer withdraw "
      "(it can starve)"),
    M('unmarked-probe-skips-a-version', "markers", 'lakevilla/core/markerset.py',
      '        top = m if tw.marker is not None else m - 1',
      '        top = m',
      [WO + "test_a_waiting_writer_whose_consumed_read_was_invalidated_aborts_without_"
            "finishing_its_wait[tail-rows-kept]"],
      "a writer waiting without a marker probes past the first version it does not know and "
      "misses a commit there"),
    M("expression-bound-per-caller", "expressions", "lakevilla/scan/expressions.py",
      "        return _checked(text, scope)\n",
      "        return _check_as(text, scope, what)\n",
      ["tests/unit/test_expressions.py::"
       "test_an_expression_is_bound_once_whoever_checks_it_and_errors_keep_the_callers_name"],
      "a statement's where is bound by DuckDB again by every caller that checks it "
      "(validate, plan, prune)"),
    M("number-typed-by-its-kind", "expressions", "lakevilla/scan/expressions.py",
      "            return lit if n is None else "
      "{\"kind\": \"INTEGER\", \"text\": str((1 << n) - 1)}",
      "            return {\"kind\": \"INTEGER\", \"text\": \"1\"}",
      ["tests/unit/test_expressions.py::"
       "test_texts_that_differ_only_in_their_numbers_are_bound_once_per_shape",
       "tests/unit/test_expressions.py::test_a_shape_bound_before_types_each_text_as_duckdb_would"],
      "an integer that fits fewer types (t8 + 1000) is given the types bound for a small one "
      "of its shape"),
    M("shape-locations-not-moved", "expressions", "lakevilla/scan/literal_shapes.py",
      "            start = where(loc)\n",
      "            start = loc\n",
      [SHAPE_TEST],
      "a text parsed through its shape keeps the shape's query locations: an error quotes the "
      "wrong part of the user's text"),
    M("shape-negated-literal-loses-its-sign", "expressions", "lakevilla/scan/literal_shapes.py",
      '            lit["text"] = "-" + s.value',
      '            lit["text"] = s.value',
      [SHAPE_TEST],
      "a negative number in a text parsed through its shape (c_balance = -10) comes back "
      "positive"),
    M("shape-any-word-before-a-literal", "expressions", "lakevilla/scan/literal_shapes.py",
      "            if prev_word is not None and prev_word.lower() not in _BEFORE_LITERAL:\n",
      "            if False:\n",
      [SHAPE_TEST],
      "an escape string (E'a\\n') is parsed through a plain string's shape and keeps the "
      "backslash where DuckDB reads a newline; a typed literal (DATE '...') through a shape "
      "whose parse may depend on its value"),
    M("function-arguments-lose-their-value", "expressions", "lakevilla/scan/expressions.py",
      "        under_function = under_function or name not in OPERATORS",
      "        pass",
      ["tests/unit/test_expressions.py::"
       "test_texts_that_differ_only_in_their_numbers_are_bound_once_per_shape"],
      "round(dec, 2) is given the types bound for round(dec, 1)"),
    M("compared-literal-any-column", "expressions", "lakevilla/scan/expressions.py",
      "        return (scope.relations[ref.relation].schema.field(ref.column).type\n"
      "                in (pa.int32(), pa.int64()))",
      "        return True",
      ["tests/unit/test_expressions.py::"
       "test_texts_that_differ_only_in_their_numbers_are_bound_once_per_shape",
       "tests/unit/test_expressions.py::test_a_shape_bound_before_types_each_text_as_duckdb_would"],
      "an integer compared with a TINYINT column (t8 IN (5, 600)) is given the types bound "
      "for one that fits it"),
    M("compared-literal-by-its-size", "expressions", "lakevilla/scan/expressions.py",
      "    compared = frozenset(id(c) for n in nodes for c in _compared_with_wide(n, wide))",
      "    compared = frozenset()",
      ["tests/unit/test_expressions.py::"
       "test_texts_that_differ_only_in_their_numbers_are_bound_once_per_shape"],
      "s_i_id IN (5, 500) and IN (500, 5) bind apart: TPC-C's NewOrder binds its stock where "
      "and SET anew almost every time"),
    M("set-one-query-per-column", "expressions", "lakevilla/engines/embedded.py",
      "            values = self._assigned_all(ctx, matched, assignments)",
      "            values = {n: self._assigned(ctx, matched, n, c, ctx.schema.field(n)) "
      "for n, c in assignments.items()}",
      ["tests/unit/test_exact_predicates.py::"
       "test_a_set_of_several_columns_is_one_query_and_a_failure_names_its_assignment"],
      "an update computes each SET column in its own DuckDB query (~3 ms each, "
      "paid again on every redo)"),
    M("set-one-query-per-file", "expressions", "lakevilla/engines/embedded.py",
      "            values = self._assigned_all(ctx, matched, assignments)",
      "            values = {n: pa.concat_arrays("
      "[self._assigned_all(ctx, t.filter(m), assignments)[n]\n"
      "                                       for _, t, m, _ in selected]) for n in assignments}",
      ["tests/unit/test_exact_predicates.py::"
       "test_a_set_of_several_columns_is_one_query_and_a_failure_names_its_assignment"],
      "an update computes its SET values in one DuckDB query per file it rewrites (NewOrder's "
      "stock update: ~10 files, ~10 ms each)"),
    M("set-failure-unattributed", "expressions", "lakevilla/engines/embedded.py",
      "                self._assigned(ctx, matched, n, assignments[n], ctx.schema.field(n))",
      "                pass",
      ["tests/unit/test_exact_predicates.py::"
       "test_a_set_of_several_columns_is_one_query_and_a_failure_names_its_assignment"],
      "a failing SET of several columns does not say which assignment failed"),
    M("commit-parsed-per-footprint", "conflicts", "lakevilla/scan/conflicts.py",
      "    hits = prune(parse_predicate(predicate), adds, schema, partition_columns, table) "
      "if adds else []",
      "    hits = prune(parse_predicate(predicate), adds, schema, partition_columns) "
      "if adds else []",
      ["tests/unit/test_pruning.py::test_a_commit_is_parsed_once_for_every_footprint_it_is_checked_against"],
      "each footprint a landed commit is checked against parses the commit's statistics again"),
    M("mask-always-by-duckdb", "expressions", "lakevilla/engines/embedded.py",
      "        # the filter keeps exactly the selected rows: arrow decides, ~0.3 ms against ~3 ms\n"
      "        if exact:",
      "        # the filter keeps exactly the selected rows: arrow decides, ~0.3 ms against ~3 ms\n"
      "        if False:",
      ["tests/unit/test_exact_predicates.py::test_an_update_whose_where_arrow_decides_exactly_runs_no_duckdb_mask"],
      "an update or delete asks DuckDB (~3 ms a query, again on every redo) which rows a plain "
      "equality selects"),
    M("arrow-mask-off-by-one", "expressions", "lakevilla/engines/embedded.py",
      "            mask[kept.to_numpy()] = True",
      "            mask[kept.to_numpy()[1:]] = True",
      ["tests/unit/test_pruning.py::test_reads_updates_and_deletes_see_every_matching_row"],
      "an update or delete whose where arrow decides misses one of the selected rows"),
    M("checkpoint-rows-misread", "delta", "lakevilla/delta/files.py",
      "                local = want[lo:hi] - start",
      "                local = want[lo:hi] - 0",
      [BC + "test_a_few_rows_of_a_big_checkpoint_are_the_rows_a_whole_read_has[interleaved]"],
      "a few rows read from a big checkpoint's row groups are taken at their table row number, "
      "not their place in their part: the files a point read finds are other files"),
    M("checkpoint-columns-kept-whole", "delta", "lakevilla/delta/files.py",
      "        return (isinstance(self._lazy, LazyRows) and self._rows > EAGER_ROWS\n"
      "                and name not in self._columns)",
      "        return False",
      [BC + "test_a_big_checkpoint_prunes_as_a_whole_read_does[ours]"],
      "a prune of a big checkpoint decodes its statistics (and the files it keeps, every column) "
      "whole and keeps them: ~2x the resident memory of a point read of 10^5 files"),
    M("other-case-statistics-ignored", "expressions", "lakevilla/scan/statcols.py",
      '                f"ELSE FALSE END AS c{k}_ci"]',
      '                f"ELSE FALSE END AND FALSE AS c{k}_ci"]',
      ["tests/unit/test_pruning.py::"
       "test_statistics_naming_a_column_in_another_case_prune_as_its_own"],
      "statistics that name a column in another case are not read: those files are never pruned"),
    M('resume-misses-fills', "recovery", 'lakevilla/recovery/resume.py',
      '    tw.recheck |= _filled_in_place(log, base_v)',
      '    pass',
      ["tests/statements/test_merge.py::test_resumed_merge_is_redone_from_its_staged_source"],
      "a resumed transaction misses a predecessor's in-place fill of a version its crashed "
      "client read empty"),
    M('sublog-before-statement-returns', "recovery", 'lakevilla/txn/parts.py',
      '        seq=sublog_seq, behind=behind)',
      '        seq=sublog_seq, behind=False)',
      [SR + "test_an_r_writers_sublog_entries_go_out_behind_its_statements",
       SR + "test_a_ct_writers_entries_go_out_behind_its_statements_and_land_before_its_markers"],
      "an optimistic R writer waits for each statement's sublog entry before it goes on "
      "(a round trip each)"),
    M("ct-entries-not-landed-before-claim", "recovery", "lakevilla/complex_txn/decider.py",
      "        self.journal.flush(must_land=True)\n",
      "",
      [SR + "test_a_ct_writers_entries_go_out_behind_its_statements_and_land_before_its_markers"],
      "a CT commit claims its markers (and writes its record) while its sublog entries, written "
      "behind its statements, are still on their way: a recovering client finds a marker and no "
      "entry to undo or finish it by"),
    M("sublog-entries-unordered", "recovery", "lakevilla/recovery/journal.py",
      "            before.join()  # in statement order",
      "            pass",
      [SR + "test_an_r_writers_sublog_entries_go_out_behind_its_statements"],
      "entries written behind their statements land in any order (a crash can leave "
      "a gap, not a prefix)"),
    M("poll-ignores-queue", "markers", "lakevilla/markers/wait.py",
      "min(ctx.poll_max * queue, POLL_CAP)", "ctx.poll_max",
      [WO + "test_a_waiter_pauses_longer_the_longer_the_queue_ahead_of_it[2-0.1]"],
      "a waiter polls a long queue as often as a single predecessor"),
    M("waiting-ignores-doom", "markers", "lakevilla/markers/wait.py",
      "            ctx.abort_if_doomed(tws)  "
      "# a predecessor's commit may already have sealed our fate",
      "            pass",
      [WO + "test_a_waiting_writer_whose_consumed_read_was_invalidated_aborts_without_"
            "finishing_its_wait[tail-rows-not-kept]"],
      "a writer whose consumed read a landed commit invalidated waits out its predecessors "
      "before it aborts"),
    M("self-wait-waited-out", "markers", "lakevilla/markers/wait.py",
      "            self.refuse_self_wait(ctx, pending)\n", "",
      ["tests/protocol/test_waiting.py::"
       "test_a_transaction_nested_in_one_holding_its_table_in_place_fails_at_once"],
      "a transaction waits for a marker of one open further up its own thread (a with-block "
      "around it) until the wait timeout, though that one cannot finish while it waits"),
    M('redoable-counts-as-doomed', "markers", 'lakevilla/recovery/redo.py',
      '        return any(op.consumed or not op.redoable for op in tw.ops[k:])',
      '        return True',
      [WO + "test_a_waiting_writer_with_a_redoable_conflict_waits_and_redoes_once[tail]"],
      "a waiting writer aborts on a conflict that a redo would fix"),
    M("reads-never-kept", "redo", "lakevilla/statements/read_results.py",
      "    if isinstance(result, pa.Table) and result.num_rows <= KEEP_MAX_ROWS:\n"
      "        return result\n",
      "",
      [SR + "test_a_read_whose_rows_a_conflicting_commit_left_unchanged_is_redone_not_"
            "aborted[local-tail]"],
      "a read that returned rows aborts on every conflict, even when a redo returns the same rows"),
    M("redone-read-not-compared", "redo", "lakevilla/statements/read_results.py",
      "    if first.num_rows != again.num_rows:\n        return False\n",
      "    return True\n",
      [SR + "test_a_read_whose_rows_changed_still_aborts_with_its_redo"],
      "a redone read that returns other rows than the client consumed is accepted"),
    M('ordered-read-redone-unordered', "redo", 'lakevilla/statements/read.py',
      '        result = engine.scan(tw.ctx, cands, self.where, self.columns, self.order)',
      '        result = engine.scan(tw.ctx, cands, self.where, self.columns, '
      'None if redo else self.order)',
      [SR + "test_a_read_of_the_first_rows_is_redone_when_a_conflict_leaves_them_"
            "first[newer-order]"],
      "a redone read with order_by/limit is compared on every row its predicate matches, "
      "not its first rows"),
    M('redo-logged-before-commit', "redo", 'lakevilla/core/per_table.py',
      "                with self.journal.deferred():  "
      "# a redo's entries go out beside the put below",
      '                if True:',
      [SR + "test_after_a_redo_the_commit_logs_beside_its_put_and_deletes_the_replaced_files_"
            "after_it[R,CT]"],
      "a redo's sublog entry is written before a one-table commit's put, not beside it "
      "(one round trip more)"),
    M('redo-deletes-replaced-files-first', "redo", 'lakevilla/core/per_table.py',
      '            ctx.check_age()\n'
      '            ctx.in_doubt = f"the commit to {tw.name}@{latest + 1}"',
      '            from ..engines.api import data_file_key\n'
      '            from .deciding import delete_keys\n'
      '            delete_keys(ctx, [data_file_key(tw.name, p, ctx.client.root_uri) '
      'for p in sorted(tw.garbage)])\n'
      '            tw.garbage.clear()\n'
      '            ctx.check_age()\n'
      '            ctx.in_doubt = f"the commit to {tw.name}@{latest + 1}"',
      [SR + "test_after_a_redo_the_commit_logs_beside_its_put_and_deletes_the_replaced_files_"
            "after_it"],
      "the files a redo replaced are deleted before the commit (a round trip on its path, and an "
      "entry not yet replaced names a missing file)"),
    M("group-rider-taken-unchecked", "group", "lakevilla/recovery/group.py",
      "    hit = first_conflict(rtw.footprints(), [*between, (version, so_far)], rtw.schema,\n"
      "                         base.partition_columns)\n",
      "    hit = None\n",
      [GC + "test_a_leader_carries_its_riders_in_one_version[local-one-file]"],
      "a leader takes a rider's files as they are though they conflict with what the version "
      "carries before it (a lost update)"),
    M("group-conflicting-read-carried", "group", "lakevilla/recovery/group.py",
      "    if any(op.consumed or not op.redoable for op in rtw.ops[k:]):",
      "    if False:",
      [GC + "test_a_rider_whose_read_the_version_changes_is_left_out"],
      "a rider whose read the version changes is carried (its statements run again past a read "
      "whose rows it already used)",
      equivalent="a rider's reads come without their rows, and the re-run of such a read raises "
                 "ReadChanged, which leaves the rider out as well: the check spares the re-run's "
                 "requests, and every rider statement is redoable (updates and deletes are sent "
                 "logical, inserts keep their files)"),
    M("group-missed-versions-unchecked", "group", "lakevilla/recovery/group.py",
      "    between = [(v, c) for v, c in leader.log.commits_between("
      "req.validated_upto, version - 1)\n"
      "               if marker_of(c) is None]\n",
      "    between = []\n",
      [GC + "test_a_rider_that_missed_a_version_rides_the_next_checked_against_it"],
      "a rider that rides on past a version it missed is not checked against that version's "
      "commit (a lost update when its files go in as they are)"),
    M("group-request-before-the-idle-check", "group", "lakevilla/core/riding.py",
      "            ctx.check_age()  # the request is a deciding write: a leader may carry it\n",
      "",
      [IT + "test_a_rider_alive_after_all_learns_it_was_rolled_back_before_its_request"],
      "an owner an operator rolled back while it was idle writes a ride request, which any "
      "leader may carry: committed after recovery reported it rolled back"),
    M("group-fence-with-a-stale-commit", "group", "lakevilla/core/riding.py",
      "        body = commit if ours else self._fence_commit(tw)",
      "        body = commit",
      [GC + "test_a_rider_that_rode_on_fences_a_stalled_version_with_an_empty_one"],
      "a rider that rode on past a version it missed fences a stalled version with its own "
      "commit, which never saw the version it missed (a lost update)"),
    M("group-version-names-no-riders", "group", "lakevilla/recovery/group.py",
      '    lv["riders"] = group.riders_json()', '    lv["riders"] = []',
      [GC + "test_a_leader_carries_its_riders_in_one_version[local-one-file]"],
      "a group commit does not name its riders: they cannot tell they committed, and commit "
      "again"),
    M("group-join-keeps-replaced-adds", "group", "lakevilla/recovery/group.py",
      "        if i is not None:\n            del adds[i]",
      "        if False:\n            del adds[i]",
      [GC + "test_a_leader_carries_its_riders_in_one_version[local-one-file]"],
      "a file one member adds and a later one removes stays in the version (rows twice)"),
    M("group-lost-version-carried-higher", "group", "lakevilla/core/riding.py",
      "        except VersionExists:\n"
      "            ctx.client.deletes.add(sorted(group.written) + keys)\n",
      "        except VersionExists:\n"
      "            higher = tw.log.probe_versions(version) + 1\n"
      "            tw.log.write_commit(higher, group.commit)\n"
      "            ctx.landed(tw, higher)\n"
      "            return higher\n",
      [GC + "test_a_version_taken_by_another_writer_carries_nobody"],
      "a leader that lost its version puts its riders' statements at a later one: riders that "
      "went on by themselves are applied twice"),
    M("group-lost-leaves-rerun-files", "group", "lakevilla/core/riding.py",
      "            ctx.client.deletes.add(sorted(group.written) + keys)\n"
      '            ctx.count("leads_lost")',
      "            ctx.client.deletes.add(keys)\n"
      '            ctx.count("leads_lost")',
      [GC + "test_a_version_taken_by_another_writer_carries_nobody"],
      "a leader that lost its version leaves the files it wrote for its riders behind"),
    M("group-leader-replaced-file-kept", "group", "lakevilla/core/riding.py",
      "ctx.client.deletes.add(sorted((group.written | mine) - named) + keys)",
      "ctx.client.deletes.add(sorted(group.written - named) + keys)",
      [GC + "test_a_leader_carries_its_riders_in_one_version[local-one-file]"],
      "a leader's own file that a rider's re-run replaced inside the version is left behind"),
    M("group-rider-gives-up-without-fence", "group", "lakevilla/core/riding.py",
      '                ctx.count("rides_timed_out")\n'
      '                return self._fence(tw, target, commit)',
      '                ctx.count("rides_timed_out")\n                ctx.in_doubt = None\n'
      "                return None",
      [GC + "test_a_rider_whose_leader_never_puts_fences_the_version_with_its_own_commit"],
      "a rider whose leader never put goes on above the version without fencing it: the leader "
      "may still carry it there"),
    M("group-carried-rider-deletes-named-files", "group", "lakevilla/statements/view.py",
      "        self.garbage = written - named\n", "        self.garbage = written\n",
      [GC + "test_a_leader_carries_its_riders_in_one_version[local-two-files]"],
      "a carried rider deletes its files the version names (data loss)"),
    M("group-resume-ignores-riders", "group", "lakevilla/vocab.py",
      "        return self.txn == txn or any(isinstance(r, dict) and r.get(\"txn\") == txn\n"
      "                                      for r in self.riders or [])",
      "        return self.txn == txn",
      [GC + "test_a_rider_that_died_after_its_request_is_carried_and_resume_says_so"],
      "resume of a carried rider re-executes it (its update twice)"),
    M("group-lone-writer-rides", "group", "lakevilla/core/riding.py",
      "                and not self.overtake.overtook(tw)\n"
      "                and self.ctx.client.contention.active(tw.name))",
      "                and not self.overtake.overtook(tw))",
      [GC + "test_a_lone_writer_never_rides"],
      "a writer that met no crowd pays a lead, a request and a LIST for every commit"),
    M("redo-garbage-left-by-an-abort", "redo", "lakevilla/core/deciding.py",
      "| {c.path for op in tw.ops for c in op.cdc} | tw.garbage)]",
      "| {c.path for op in tw.ops for c in op.cdc})]",
      [SR + "test_a_transaction_that_redoes_and_then_aborts_leaves_no_file_of_either_run["
            "plain-R]",
       SR + "test_a_transaction_that_redoes_and_then_aborts_leaves_no_file_of_either_run["
            "deletion-vectors-R,CT]",
       SR + "test_a_transaction_that_redoes_and_then_aborts_leaves_no_file_of_either_run["
            "change-data-feed-R]"],
      "a transaction that redoes and then aborts leaves the files its statements' first runs "
      "wrote (data, DV and change data files) for the abandoned-file sweep"),
    M("parallel-error-before-all-end", "redo", "lakevilla/parallel.py",
      "    futures = [pool.submit(fn, x) for x in items]\n    wait_futures(futures)\n",
      "    return list(pool.map(fn, items))\n    futures = []\n",
      [SR + "test_an_abort_on_one_table_waits_for_a_redo_still_running_on_another"],
      "an error in one of several parallel calls (a table's abort) is raised while another still "
      "runs (a table's redo), so the abort's undo misses the files that redo writes after it"),
    M("small-file-fetched-twice", "reads", "lakevilla/engines/embedded.py",
      "        fetched.update((a.path, s) for a, s in zip(files, sources, strict=True)\n"
      "                       if s.size <= ranged.WHOLE_FILE_BYTES)",
      "        pass",
      ["tests/statements/test_reads.py::test_a_small_file_an_update_or_delete_rewrites_is_fetched_once[local-update]"],
      "an update fetches a small file whole to find its rows, then again to rewrite it"),
    M('waiting-read-not-rerun', "markers", 'lakevilla/core/validate.py',
      '        return any(changed is True for changed in self._reread(tw, k, fps, landed, upto))',
      '        return False',
      [WO + "test_a_waiting_writer_whose_consumed_read_was_invalidated_aborts_without_"
            "finishing_its_wait[tail-rows-kept]"],
      "a waiting writer whose kept read a landed commit changed waits out its predecessors "
      "before it aborts"),
    # -- sublogs ------------------------------------------------------------------------------
    M("sublog-not-written", "sublogs", "lakevilla/recovery/journal.py",
      "        sublogs.write(self.ctx.store, e)\n", "        pass\n",
      [SR + "test_sublogs_physical_then_logical_and_blind_appends_stay_physical",
       RC + "test_resume_without_recover_at_every_crash_point[tail]"],
      "operations are not logged to sublogs"),
    M("redo-not-logged", "sublogs", "lakevilla/recovery/redo.py",
      "            ctx.write_sublog(tw, op, True)", "            pass",
      [SR + "test_conflict_undoes_to_the_first_conflicting_op_and_redoes[local-tail]"],
      "a redone operation's new files are not logged"),
    M('sublog-drops-statement', "sublogs", 'lakevilla/recovery/sublog.py',
      '        statement=op.encode(logical),',
      '        statement=None,',
      [SR + "test_sublogs_physical_then_logical_and_blind_appends_stay_physical",
       SR + "test_conflict_undoes_to_the_first_conflicting_op_and_redoes[local-tail]"],
      "logical sublog entries lose their statement (resume cannot redo)"),
    M("sublog-oldest-entry-wins", "sublogs", "lakevilla/recovery/sublog.py",
      "        latest[e.op_seq] = e", "        latest.setdefault(e.op_seq, e)",
      [SR + "test_conflict_undoes_to_the_first_conflicting_op_and_redoes[local-tail]"],
      "resume replays an operation's first entry, not its latest redo"),
    # -- redo -----------------------------------------------------------------------------------
    M('validation-ignores-conflicts', "redo", 'lakevilla/core/validate.py',
      '            if hit is None:\n                tw.validated_upto = latest',
      '            if True:\n                tw.validated_upto = latest',
      [SR + "test_conflict_undoes_to_the_first_conflicting_op_and_redoes[local-tail]"],
      "commits since the read are not checked (lost update)"),
    M("redo-skips-first-conflicting-op", "redo", "lakevilla/recovery/redo.py",
      "redone = tw.redo(ctx.engine, k, snap)", "redone = tw.redo(ctx.engine, k + 1, snap)",
      [SR + "test_conflict_undoes_to_the_first_conflicting_op_and_redoes[local-tail]"],
      "undo/redo starts after the first conflicting operation"),
    M("consumed-read-redone", "redo", "lakevilla/recovery/redo.py",
      "        if consumed:\n", "        if False:\n",
      [RT + "test_partial_commit_keeps_what_committed"],
      "a read whose result was returned and not kept is redone instead of aborting at once",
      equivalent="since validation by value (issue 13) a redone read whose rows were not kept "
                 "fails its comparison (ReadChanged) and aborts anyway; the check only spares "
                 "the redo's work"),
    M("physical-conflict-redone", "redo", "lakevilla/recovery/redo.py",
      "        if stuck and not consumed:\n", "        if False:\n",
      [RC + "test_crash_at_every_store_call_of_an_r_transaction[local-tail]",
       RS + "test_resumed_physical_operation_that_conflicts_aborts"],
      "a resumed physical operation that conflicts is committed anyway"),
    # -- recovery (R) ------------------------------------------------------------------------------
    M("recover-frees-a-committed-marker", "recovery", ST,
      "    found = find_commit(log, m.attempt, version, latest)\n"
      "    # the owner's table commit landed",
      "    found = None\n    # the owner's table commit landed",
      # at the tail R queues to hold one
      [RC + "test_crash_at_every_store_call_of_a_queued_r_transaction"],
      "recovery undoes (frees) a transaction whose table commit landed"),
    M("recover-scans-no-markers", "recovery", LK,
      "                res = resolve_marker(svc, t, v, force=force)", "                continue",
      [RC + "test_crash_at_every_store_call_of_an_r_transaction[local-in_place]"],
      "recover() leaves stalled markers alone"),
    M("waiter-does-not-recover", "recovery", "lakevilla/markers/wait.py",
      "                    outcome = ctx.recover(tw.name, v)\n",
      "                    continue\n",
      [RX + "test_expired_marker_is_freed_and_the_late_owner_continues[local-tail]"],
      "a transaction waits forever behind an expired marker"),
    # -- recovery of CT and I decisions ------------------------------------------------------------
    M("ct-abort-not-persisted", "record", ST,
      'records.abort(svc.store, m.attempt, m.txn, "stalled marker")',
      'records.TxnRecord(m.attempt, m.txn, records.ABORTED)',
      [C + "test_stalled_transaction_before_its_decision_is_rolled_back"],
      "recovery frees an undecided CT marker without writing the ABORTED record"),
    M("ct-marker-closed-without-roll-forward", "record", ST,
      "            roll_forward_record(svc, rec)\n"
      "            return _close(log, version, m, etag, table)",
      "            return _close(log, version, m, etag, table)",
      [RX + "test_a_transaction_meeting_an_expired_ct_marker_finishes_or_undoes_it"],
      "a decided CT marker is closed without writing its table commits"),
    M("recover-skips-committing-records", "record", LK,
      "            if rec is not None and rec.state == records.COMMITTING:\n                try:\n"
      "                    roll_forward_record(svc, rec)",
      "            if False:\n                try:\n"
      "                    roll_forward_record(svc, rec)",
      [C + "test_recovery_rolls_a_committing_record_forward",
       MT + "test_cli_recovers_a_crashed_commit_and_cleans_up"],
      "recover() does not roll COMMITTING records forward"),
    M("record-decide-ignores-existing", "record", "lakevilla/complex_txn/record.py",
      "            raise CorruptLogError(f\"record {rec.attempt} vanished while deciding\") "
      "from None\n        return existing",
      "            raise CorruptLogError(f\"record {rec.attempt} vanished while deciding\") "
      "from None\n        return rec",
      [C + "test_stalled_transaction_before_its_decision_is_rolled_back"],
      "an owner that lost the record race believes it decided COMMITTING"),
    M("record-not-finished", "record", ST,
      "    if rec.state != records.COMMITTED:\n        records.finish(svc.store, rec)",
      "    if False:\n        records.finish(svc.store, rec)",
      [MT + "test_cli_recovers_a_crashed_commit_and_cleans_up"],
      "a rolled-forward record stays COMMITTING"),
    M("publish-without-looking", "record", "lakevilla/markers/publish.py",
      "        found = find_commit(log, attempt, lower, latest)\n", "        found = None\n",
      [C + "test_crash_at_every_store_call_of_a_two_table_commit[local-tail]",
       RX + "test_a_transaction_meeting_an_expired_ct_marker_finishes_or_undoes_it"],
      "a decided commit is published again where it already landed (twice)"),
    M("unannounced-cut-forgets-its-takes", "isolation", "lakevilla/isolation/cut.py",
      "        return {**entry_map(self.last), **self.taken}",
      "        return entry_map(self.last)",
      ["tests/api/test_read_only.py::test_read_only_auditors_beside_transfers_always_see_the_total"],
      "a reader that cannot append grows its cut from the log's head, forgetting what it took in "
      "itself (tables it took along restart from nothing: totals of half transfers)"),
    M("recover-skips-announced-i-commits", "recovery", ST,
      'if state == "committed" and entry is not None and table in entry.pending',
      'if False and entry is not None and table in entry.pending',
      [I + "test_crash_at_every_store_call_of_an_isolated_two_table_commit[local-R,CT,I]"],
      "recover() skips announced-but-unwritten I commits and frees their markers as if aborted "
      "(issue 18, point 1)",
      (LK, "                if gvl_resolve.find_pending(self._client.log(t), p) is None:",
       "                if False:")),
    M("marker-of-announced-i-commit-freed", "recovery", ST,
      'if state == "committed" and entry is not None and table in entry.pending',
      'if False and entry is not None and table in entry.pending',
      [RX + "test_a_transaction_meeting_the_expired_marker_of_an_announced_i_commit_"
            "writes_that_commit"],
      "a transaction meeting an announced I commit's expired marker frees it as if aborted"),
    M("recover-skips-pending-at-head", "recovery", LK,
      "                if gvl_resolve.find_pending(self._client.log(t), p) is None:",
      "                if False:",
      [RR + "test_recover_writes_the_commits_the_global_logs_head_announced_before_their_"
            "markers_expire"],
      "recover() leaves the head's announced writes unwritten"),
    M("gvl-abort-not-recorded", "recovery", ST,
      "        nxt.aborts = [attempt]\n", "        nxt.aborts = []\n",
      [I + "test_recovery_aborts_a_stalled_isolated_transaction_through_the_log"],
      "recovery of an unannounced I transaction appends no abort"),
    # -- resume ---------------------------------------------------------------------------------
    M('resume-redoes-a-committed-txn', "resume", 'lakevilla/recovery/resume.py',
      'if info is not None and info.is_commit and info.names_txn(txn_id):',
      'if False:',
      [RC + "test_resume_without_recover_at_every_crash_point[tail]"],
      "resume re-runs a transaction whose commit landed (issue 18, point 2)"),
    M('resume-leaves-old-markers', "resume", 'lakevilla/recovery/resume.py',
      '        res = resolve_marker(svc, table, v)\n        if res.outcome',
      '        continue\n        if res.outcome',
      [RC + "test_resume_without_recover_at_every_crash_point[in_place]"],
      "resume neither frees nor settles the crashed attempt's markers (issue 18, point 2)"),
    M('resume-stops-at-first-decided-marker', "resume", 'lakevilla/recovery/resume.py',
      '            decided.append(f"{table}@{v}")\n',
      '            decided.append(f"{table}@{v}")\n            break\n',
      [RS + "test_resume_rolls_an_announced_isolated_transaction_forward"],
      "resume reports an I decision rolled forward after writing only its first table"),
    M('resume-ignores-live-marker', "resume", 'lakevilla/recovery/resume.py',
      '            if not m.expired(now):\n                raise TransactionStateError(',
      '            if False:\n                raise TransactionStateError(',
      [NL + "test_resume_refuses_while_the_owners_marker_is_alive"],
      "resume races a client whose marker is still alive"),
    M('resume-ignores-committing-record', "resume", 'lakevilla/recovery/resume.py',
      '        if rec.state == records.COMMITTING:\n            roll_forward_record(svc, rec)',
      '        if False:\n            roll_forward_record(svc, rec)',
      [NL + "test_resume_rolls_a_decided_transaction_forward_instead_of_re_running_it",
       NL + "test_cleanup_keeps_the_sublogs_of_a_decided_unpublished_transaction"],
      "resume re-runs a transaction its record decided",
      equivalent="resume settles the crashed attempt's markers next: a COMMITTING record's "
      "running marker is rolled forward there (resolve_marker) and refused the same way; with "
      "every marker closed, every table commit landed and the commit scan refuses"),
    # -- the DAG (cycles) --------------------------------------------------------------------------
    M("no-cycle-detected", "dag", "lakevilla/complex_txn/dag.py",
      "        if self.tag not in pred.deps and self.me not in pred.deps:\n"
      "            return False",
      "        if True:\n            return False",
      [C + "test_a_three_way_cycle_is_broken_by_a_shift",
       C + "test_figure5_opposite_transfers_shift_instead_of_deadlocking[local-tail]"],
      "rule III: a predecessor waiting for us is not seen as a cycle"),
    M("stale-epoch-is-a-cycle", "dag", "lakevilla/complex_txn/dag.py",
      "        if self.tag not in pred.deps and self.me not in pred.deps:\n"
      "            return False",
      "        if not any(d.split(EPOCH_SEP)[0] == self.me for d in pred.deps):\n"
      "            return False",
      [C + "test_a_list_naming_our_markers_from_before_a_shift_is_no_cycle"],
      "rule III: a list naming our markers from before our last shift still counts as a cycle"),
    M("free-stalled-changes-the-read-marker", "markers", "lakevilla/markers/marker.py",
      "    payload = replace(payload, state=state, reason=reason, commit_version=commit_version,\n"
      "                      rev=payload.rev + 1)\n",
      "    payload.state, payload.reason, payload.commit_version = state, reason, commit_version\n"
      "    payload.rev += 1\n",
      [MK + "test_freeing_a_marker_that_moved_fails"],
      "freeing a stalled marker changes the marker as read (shared by every reader of that "
      "commit)"),
    M("deps-not-transitive", "dag", "lakevilla/complex_txn/dag.py",
      "                out.update(deps)\n", "                pass\n",
      [C + "test_a_three_way_cycle_is_broken_by_a_shift"],
      "rule II: dependency lists do not carry the predecessors' own lists"),
    M('deps-never-published', "dag", 'lakevilla/core/markerset.py',
      '        if not self.deps.needs_publish():\n            return\n        deps',
      '        if True:\n            return\n        deps',
      [C + "test_a_three_way_cycle_is_broken_by_a_shift",
       C + "test_figure5_opposite_transfers_shift_instead_of_deadlocking[local-tail]"],
      "rule II: markers never carry dependency lists"),
    M("wait-reads-every-table", "dag", "lakevilla/markers/wait.py",
      "            polled = blocked[:1] if blocked and now_held == held else tws\n",
      "            polled = tws\n",
      [C + "test_a_waiting_commit_reads_only_the_table_it_is_blocked_on"],
      "a wait round re-reads every table while one of them is still blocked"),
    M('ct-claims-at-first-write', "dag", 'lakevilla/txn/parts.py',
      '    at_first_write = r and not dag and not optimistic\n',
      '    at_first_write = r or ct\n',
      [C + "test_figure5_opposite_transfers_shift_instead_of_deadlocking[local-tail]",
       C + "test_g1c_circular_information_flow_across_tables[local-tail]"],
      "CT claims its markers statement by statement instead of at commit, all at once"),
    M('ct-one-table-claims', "dag", 'lakevilla/complex_txn/decider.py',
      '        if len(written) == 1 and self.ctx.mode == CommitMode.TAIL:\n',
      '        if False:\n',
      [CO + "test_a_one_table_ct_commit_at_the_tail_takes_one_log_version_and_no_marker",
       CO + "test_a_one_table_ct_commit_does_not_queue_behind_a_writer_it_cannot_conflict_with"],
      "a CT transaction that wrote one table claims a marker at the tail: it queues behind every "
      "running writer of the table, conflicting or not, and takes two log versions"),
    M('ct-unmarked-wait-shifts', "dag", 'lakevilla/complex_txn/wait.py',
      '        if all(tw.marker is None for tw in tws):\n',
      '        if False:\n',
      [CO + "test_a_one_table_ct_commit_waiting_without_a_marker_never_shifts[R,CT]"],
      "a one-table CT commit waiting without a marker 'shifts' under rule IV (no marker to move) "
      "and aborts only after max_shifts timeouts"),
    M("older-one-shifts", "dag", "lakevilla/complex_txn/dag.py",
      "    return a > b\n", "    return a < b\n",
      [C + "test_figure5_opposite_transfers_shift_instead_of_deadlocking[local-tail]"],
      "rule IV: the older transaction shifts instead of the younger"),
    # -- the global log ----------------------------------------------------------------------------
    M("append-ignores-taken-slot", "gvl", GV,
      "        except PreconditionFailed:\n            return TAKEN\n"
      "        except StorageError as e:",
      "        except PreconditionFailed:\n            return APPENDED\n"
      "        except StorageError as e:",
      [I + "test_an_announcement_that_loses_its_slot_is_validated_again"],
      "an announcement that lost its slot counts as appended"),
    M("announce-ignores-aborts", "gvl", GD,
      "            if txn.attempt in e.aborts:\n", "            if False:\n",
      [I + "test_recovery_aborts_a_stalled_isolated_transaction_through_the_log"],
      "an I writer commits although recovery appended its abort"),
    M("hint-write-unconditional", "gvl", GV,
      "        return self.store.put_if_match(HINT_KEY, body, cur.etag)",
      "        return self.store.put(HINT_KEY, body)",
      [OC + "test_hint_never_moves_backwards[local]"],
      "the hint is overwritten without its etag (can move back to an older entry)"),
    M("cleanup-keeps-too-few", "gvl", GV,
      "cutoff = head.seq - max(keep, 0)", "cutoff = head.seq - max(keep, 0) + 1",
      [MT + "test_cleanup_keeps_exactly_keep_global_entries_before_the_head"],
      "global-log clean-up keeps one entry fewer than keep_global"),
    M("cleanup-horizon-not-moved-first", "gvl", GV,
      "        state = self.move_hint(head.seq, cutoff)\n",
      "        state = self.move_hint(head.seq, 0)\n",
      [OC + "test_cleanup_never_lets_a_long_transaction_fork_the_log[local-True]",
       MT + "test_cleanup_keeps_exactly_keep_global_entries_before_the_head"],
      "clean-up does not raise the horizon before deleting",
      ("            if seq < state.horizon:", "            if seq < cutoff:")),
    M("gvl-cleanup-ignores-age", "gvl", GV,
      "now - meta.last_modified < min_age:", "now - meta.last_modified < 0:",
      [OC + "test_a_reader_never_walks_into_a_fork_written_below_the_horizon[False]"],
      "global-log clean-up deletes entries younger than max_transaction_age (a stale announcer "
      "can fork the log)"),
    M("absent-hint-read-again", "gvl", GV,
      "            self.last_hint = Hint(-1, 0, None)\n            return self.last_hint\n",
      "            return Hint(-1, 0, None)\n",
      [I + "test_the_first_entry_creates_the_hint_without_reading_its_absence_again"],
      "the first append into a lake without a global log reads the absent hint again before "
      "creating it (one GET more)"),
    M("walk-trusts-its-first-horizon", "gvl", GV,
      "                if out and after < self.read_hint().horizon - 1:",
      "                if False:",
      [OC + "test_a_reader_never_walks_into_a_fork_written_below_the_horizon[True]"],
      "a reader's walk does not re-read the horizon (takes a fork written under a forced clean-up "
      "for the log)"),
    M("hint-skips-announced-head", "gvl", GV,
      "            seq, entry = seq + 1, nxt\n",
      "            return entry\n",
      [I + "test_a_writer_finds_the_head_past_a_hint_its_appender_never_moved",
       I + "test_a_stalled_announcement_is_completed_by_whoever_finds_it"],
      "the head is taken from the hint without probing past it"),
    # -- validation (I) ----------------------------------------------------------------------------
    M("r1-skipped", "validation", GD,
      "            if viol is not None:\n                txn.count(\"r1\")",
      "            if False:\n                txn.count(\"r1\")",
      [I + "test_write_skew_prevented_when_serializable_occurs_under_snapshot[local-I]"],
      "serializable writers do not validate their reads (R1)"),
    M("r1-never-by-value", "validation", GD,
      "            if viol is not None and txn.reads_hold(name, commits, hidden):",
      "            if False:",
      [I + "test_a_read_whose_rows_did_not_change_is_not_stale[I]"],
      "R1 aborts a read whose rows the conflicting commit did not change (no validation by value)"),
    M('r1-rows-not-compared', "validation", 'lakevilla/core/validate.py',
      '        return all(changed is False\n'
      '                   for changed in self._reread(tw, 0, tw.footprints(), commits, version))',
      '        return all(changed is not None\n'
      '                   for changed in self._reread(tw, 0, tw.footprints(), commits, version))',
      [I + "test_slack_tolerates_recent_versions"],
      "R1 by value passes a read without comparing its rows"),
    M("slack-disables-validation", "validation", "lakevilla/isolation/validation.py",
      "    considered = [(v, c) for v, c in commits if v <= hidden - slack]",
      "    considered = [] if slack else [(v, c) for v, c in commits if v <= hidden - slack]",
      [I + "test_slack_tolerates_recent_versions"],
      "any slack > 0 turns off stale-read validation (issue 18, point 3)"),
    M("slack-off-by-one", "validation", "lakevilla/isolation/validation.py",
      "if v <= hidden - slack]", "if v < hidden - slack]",
      [I + "test_slack_tolerates_recent_versions"],
      "a read exactly slack+1 versions stale passes"),
    M("r3-skipped", "validation", "lakevilla/isolation/validation.py",
      "        if b is not None and b > validated_upto(name):  # R3", "        if False:  # R3",
      [I + "test_an_isolated_writer_checks_a_commit_the_log_took_in_below_its_write"],
      "R3: a commit below our write that we never validated is not checked"),
    M("snapshot-validates-reads", "validation", GD,
      'check_reads = txn.isolation != "snapshot"', "check_reads = True",
      [I + "test_write_skew_prevented_when_serializable_occurs_under_snapshot[local-I]"],
      "snapshot isolation validates reads too (aborts what it should commit)"),
    # -- the one cut -------------------------------------------------------------------------------
    M("closure-ignores-other-tables", "one-cut", "lakevilla/isolation/closure.py",
      "        for w in sorted(tables - {s.table}):\n"
      "            verdict = self._other(w, u.attempt)",
      "        for w in sorted(set()):\n            verdict = self._other(w, u.attempt)",
      [OC + "test_half_published_transfer_is_seen_whole_or_not_at_all[local-R,CT]",
       OC + "test_isolated_reader_never_sees_half_of_a_ct_transfer_on_tables_the_log_does_"
            "not_know[local-x]"],
      "a multi-table commit is taken on one table without its other half"),
    M("closure-new-table-from-checkpoint", "one-cut", "lakevilla/isolation/closure.py",
      "    start = newest\n    while start in present:\n"
      "        start -= 1\n",
      "    start = max(checkpoints, default=-1)\n",
      [OC + "test_a_table_joined_at_a_checkpoint_never_shows_half_of_a_transfer_whose_other_"
            "table_was_read[local-delta-rs]"],
      "a table new to the cut whose checkpoint promises nothing (written by delta-rs) is examined "
      "from its newest checkpoint on: the half of a transfer the checkpoint holds is taken "
      "although the other table, already read, cannot take its half"),
    M("join-starts-at-the-checkpoint", "one-cut", "lakevilla/isolation/closure.py",
      "        checkpoint, start = hint\n",
      "        checkpoint, start = hint[0], hint[0]\n",
      [OC + "test_a_table_joined_at_a_checkpoint_never_shows_half_of_a_transfer_whose_other_"
            "table_was_read[local-lakevilla]",
       OC + "test_a_transfer_half_published_below_a_checkpoint_is_never_seen_half_by_a_join"
            "[local-y]"],
      "a table new to the cut is examined from its checkpoint on, not from where the checkpoint's "
      "promise ends: a transfer's half between the two is taken unexamined"),
    M("join-promise-covers-multi-table-commits", "one-cut", "lakevilla/isolation/join_from.py",
      "                    break  # the first commit a join must examine",
      "                    pass",
      [OC + "test_a_transfer_half_published_below_a_checkpoint_is_never_seen_half_by_a_join"
            "[local-y]"],
      "a checkpoint promises that a multi-table commit below it needs no examination: a join "
      "takes a transfer's half whose other half is not written yet"),
    M("join-reads-the-whole-log", "one-cut", "lakevilla/isolation/closure.py",
      "            joined = self._join(t, log, limit)\n",
      "            joined = None\n",
      [OC + "test_a_table_new_to_the_cut_joins_it_with_the_same_reads_whatever_its_log_length"
            "[local]"],
      "cost only: a table new to the cut is examined over its whole log although its checkpoint "
      "promises where to start (a GET per commit)"),
    M("closure-new-table-starts-nowhere", "one-cut", "lakevilla/isolation/closure.py",
      "        if self._landed_by(w, attempt, sw.start):",
      "        if self._landed_by(w, attempt, sw.base):",
      [OC + "test_a_table_new_to_the_cut_joins_it_whole_when_its_checkpoint_holds_the_other_"
            "half[local-cleaned-up-log-too]"],
      "a table new to the cut whose older commits were cleaned up: the half of a transfer below "
      "where its scan starts is not counted as taken, so the other half is left out"),
    M("closure-reads-below-its-floor", "one-cut", "lakevilla/isolation/closure.py",
      "        caps = {t: s.cap for t, s in self.scans.items() if s.cap >= s.floor}",
      "        caps = {t: s.cap for t, s in self.scans.items()}",
      [OC + "test_a_table_that_cannot_be_read_without_half_a_transfer_does_not_join_the_"
            "cut[local]"],
      "a table new to the cut joins below the oldest version its cleaned log can be read at"),
    M("closure-reloads-for-ever", "one-cut", "lakevilla/isolation/closure.py",
      "        if self.roll_forward and (w, attempt) not in self._finished "
      "and self._finish(w, attempt):",
      "        if self.roll_forward and self._finish(w, attempt):",
      [OC + "test_a_table_new_to_the_cut_joins_it_whole_when_its_checkpoint_holds_the_other_"
            "half[local-kept]"],
      "a table is reloaded again and again for one commit written or found on it",
      equivalent="a commit found on w after a reload is in the reloaded range, at or below where "
      "its scan starts (counted as taken), or above its cap (which _beyond sees): nothing "
      "reloads twice. The guard bounds the search should a store ever show otherwise (the "
      "kept-record test looped for ever when a table new to the cut was examined from its "
      "checkpoint and that was not counted)"),
    M("closure-committed-record-reads-below", "one-cut", "lakevilla/isolation/closure.py",
      "        if rec is None or w not in rec.tables or rec.state == records.COMMITTED:",
      "        if rec is None or w not in rec.tables:",
      [OC + "test_a_table_new_to_the_cut_joins_it_whole_when_its_checkpoint_holds_the_other_"
            "half[local-kept-log-cleaned-up]"],
      "a finished transaction's commit is looked for between its marker and the scan's start, "
      "which a Delta log clean-up may have deleted (the read fails with CorruptLogError)"),
    M("closure-creates-on-a-foreign-table", "one-cut", "lakevilla/isolation/closure.py",
      "        # version 0 or nothing: never on top of a table a foreign client created meanwhile\n"
      "        if it.create:",
      "        # version 0 or nothing: never on top of a table a foreign client created meanwhile\n"
      "        if False:",
      [OC + "test_a_reader_writes_a_created_tables_version_0_and_never_over_a_foreign_"
            "table[local-True]"],
      "a reader finishing a decided create appends it to a table a foreign client created "
      "meanwhile"),
    M("closure-takes-announced-commits", "one-cut", "lakevilla/isolation/closure.py",
      "            return _CAP  # only its global-log entry takes it in",
      "            return _OK",
      [OC + "test_half_published_transfer_is_seen_whole_or_not_at_all[local-I]",
       OC + "test_reader_sees_all_or_nothing_of_a_transfer_between_its_reads"
            "[local-serializable-I]"],
      "a commit announced in the global log is taken in before its entry",
      equivalent="an I commit reaches a table only after its announcement entry; a closure that "
      "meets it was computed from a head at or after that entry (which took it in), or its "
      "append loses the slot (TAKEN) and is recomputed; a reader that leaves an entry out blocks "
      "its tables. The cap is defence in depth: no test found that tells it apart"),
    M("cut-ignores-what-it-read", "one-cut", "lakevilla/isolation/cut.py",
      "                if part.touched & self.blocked "
      "or any(t in self.finals for t in part.changes):",
      "                if False:",
      [OC + "test_reader_sees_all_or_nothing_of_a_transfer_between_its_reads"
            "[local-serializable-I]",
       OC + "test_reader_sees_all_or_nothing_of_a_transfer_between_its_reads"
            "[local-serializable-R,CT]"],
      "an entry moving a table already read is taken in for the tables not yet read"),
    # -- maintenance -------------------------------------------------------------------------------
    M("abandoned-lists-nothing", "maintenance", LK,
      "                out.append((t, k))", "                pass",
      [MT + "test_cli_recovers_a_crashed_commit_and_cleans_up"],
      "abandoned files are never listed or deleted (issue 18, point 5)"),
    M("abandoned-ignores-live-files", "maintenance", LK,
      "                if k in keys or k in live:", "                if k in keys:",
      [NL + "test_forced_deletion_still_keeps_files_that_live_transactions_name"],
      "files named by sublogs, records or pending writes are deleted"),
    M("abandoned-ignores-min-age", "maintenance", LK,
      "if meta.last_modified is None or now - meta.last_modified < retention:",
      "if meta.last_modified is None:",
      [MT + "test_abandoned_files_of_a_crashed_transaction_are_found_and_deleted"],
      "young unreferenced files (a live writer's) are deleted"),
    M("abandoned-ignores-table-features", "maintenance", LK,
      "            try:\n                self._check_features(log, check_sweepable)\n"
      "            except UnsupportedTableFeatureError as e:",
      "            try:\n                pass\n"
      "            except UnsupportedTableFeatureError as e:",
      [MT + "test_maintenance_never_restates_a_table_with_a_feature_it_cannot_write"],
      "the abandoned-file sweep lists the files of a table whose features it does not write "
      "(row tracking's, at writer version 7)"),
    M("abandoned-ignores-change-files", "maintenance", LK,
      "                keys |= self._change_files(log, t, latest)",
      "                keys |= set()",
      [MT + "test_the_sweep_keeps_the_change_files_commits_name"],
      "the abandoned-file sweep deletes a change data feed's files (named by cdc actions only)"),
    M("checkpoint-ignores-table-features", "maintenance", LK,
      "        self._check_features(log, check_writable)  # a checkpoint is a write of the "
      "table's log",
      "        pass",
      [MT + "test_maintenance_never_restates_a_table_with_a_feature_it_cannot_write"],
      "a checkpoint restates the log of a table with a feature lakevilla does not write"),
    M("cleanup-ignores-retention", "maintenance", LK,
      "return meta.last_modified is not None and now - meta.last_modified >= older_than",
      "return meta.last_modified is not None",
      [MT + "test_cleanup_deletes_sublogs_and_records_only_past_their_retention"],
      "clean-up deletes sublogs and records younger than its retention"),
    M("cleanup-ignores-live-txns", "maintenance", LK,
      "            if txn in live or any(state(m) == records.COMMITTING",
      "            if any(state(m) == records.COMMITTING",
      [NL + "test_cleanup_keeps_committing_records_and_live_sublogs"],
      "clean-up deletes the sublogs of a transaction holding a live marker"),
    M("cleanup-ignores-committing", "maintenance", LK,
      "any(state(m) == records.COMMITTING for m in recs.get(txn, []))", "False",
      [NL + "test_cleanup_keeps_the_sublogs_of_a_decided_unpublished_transaction"],
      "clean-up deletes the sublogs of a decided, unpublished transaction"),
    M("retention-never-refused", "maintenance", LK,
      "        if seconds < self._settings.max_transaction_age and not force:", "        if False:",
      [NL + "test_a_retention_shorter_than_the_longest_transaction_is_refused_unless_forced"],
      "a retention shorter than max_transaction_age is accepted without force"),
    M("checkpoint-above-open-marker", "maintenance", CKPT,
      "        version = lowest - 1\n",
      "        pass\n",
      [MT + "test_automatic_checkpoint_waits_below_an_open_marker"],
      "the automatic checkpoint covers an open marker (could hide its fill)"),
    M("overlay-never-folded", "maintenance", "lakevilla/delta/files.py",
      "FOLD_AT = 64\n",
      "FOLD_AT = 4096\n",
      ["tests/unit/test_delta_log.py::"
       "test_a_long_lived_clients_snapshots_fold_the_commits_they_replay"],
      "a long-lived client's snapshots keep every file since the checkpoint as an overlay, "
      "rebuilt and parsed again for each new snapshot"),
    M("fold-copies-every-column", "maintenance", "lakevilla/delta/files.py",
      "        if len(parts) >= FOLD_PARTS or old.rows + new > FOLD_KEEPS",
      "        if True or len(parts) >= FOLD_PARTS or old.rows + new > FOLD_KEEPS",
      [FOLDS + "test_a_fold_copies_no_column_but_the_paths"],
      "a fold makes every column of the rows it keeps (from action objects too), in every "
      "client, every few dozen changes"),
    M("fold-keeps-every-part", "maintenance", "lakevilla/delta/files.py",
      "        if len(parts) >= FOLD_PARTS or old.rows + new > FOLD_KEEPS",
      "        if False and len(parts) >= FOLD_PARTS or old.rows + new > FOLD_KEEPS",
      [FOLDS + "test_a_fold_of_folds_holds_what_a_fresh_table_holds",
       FOLDS + "test_a_fold_parses_only_the_files_it_adds"],
      "a fold of folds keeps every table it was folded from: what a client keeps grows with "
      "the changes it followed, not with the files live"),
    M("fold-parses-statistics-again", "maintenance", "lakevilla/scan/statcols.py",
      "    pieces = table.pieces\n",
      "    pieces = None\n",
      [FOLDS + "test_a_fold_parses_only_the_files_it_adds"],
      "a folded table parses every file's statistics again, not only the files it added"),
    M("fold-made-without-statistics", "maintenance", "lakevilla/delta/files.py",
      "        out.cache = {k: pieces.gather([c[k] for c in caches]) for k in shared}",
      "        out.cache = {}",
      [FOLDS + "test_a_fold_parses_only_the_files_it_adds"],
      "older parts made one table lose their parsed statistics"),
    M("fold-rows-out-of-order", "maintenance", "lakevilla/delta/files.py",
      "        back = pa.array(np.argsort(order, kind=\"stable\"))\n"
      "        return {n: got.column(n).take(back) for n in names}",
      "        back = pa.array(np.arange(len(order)))\n"
      "        return {n: got.column(n).take(back) for n in names}",
      [FOLDS + "test_a_fold_of_folds_holds_what_a_fresh_table_holds"],
      "a few rows of a folded table come back grouped by the table they were folded from, "
      "not in the order asked"),
    M("fold-actions-from-wrong-rows", "maintenance", "lakevilla/delta/files.py",
      "self.parts[k].actions(at[where] - self.starts[k])",
      "self.parts[k].actions(at[where])",
      [FOLDS + "test_a_fold_of_folds_holds_what_a_fresh_table_holds"],
      "a folded table's action objects are taken from the wrong rows of their part"),
    M("action-objects-rebuilt", "maintenance", "lakevilla/delta/files.py",
      "        if isinstance(lazy, ActionColumns):  # the objects themselves",
      "        if False:  # the objects themselves",
      [FOLDS + "test_a_fold_copies_no_column_but_the_paths"],
      "a table of action objects asked for a few of them makes their columns and new objects "
      "from those"),
    M("checkpoint-refused-under-open-marker", "maintenance", CKPT,
      "        version = lowest - 1\n",
      "        return\n",
      [MT + "test_a_due_checkpoint_goes_just_below_the_lowest_open_marker"],
      "a due checkpoint that finds an open marker is not written below it: a crowd that always "
      "has a marker open leaves the table without checkpoints"),
    M('max-age-not-enforced', "maintenance", 'lakevilla/core/context.py',
      '    def check_age(self, started: float | None = None) -> None:\n',
      '    def check_age(self, started: float | None = None) -> None:\n        return\n',
      [NL + "test_a_transaction_older_than_max_transaction_age_cannot_commit"],
      "a transaction older than max_transaction_age still commits"),
    # -- decisions: nothing lost, warnings ---------------------------------------------------------
    M('abort-after-decision-deletes', "decision", 'lakevilla/txn/transaction.py',
      '        except BaseException as e:\n            if ctx.decided or ctx.in_doubt:',
      '        except BaseException as e:\n            if False:',
      [NL + "test_an_r_commit_whose_outcome_is_unknown_deletes_nothing[tail]",
       NL + "test_a_multi_table_decision_whose_outcome_is_unknown_is_settled_by_recovery"],
      "an error after the deciding write undoes (deletes files of) a commit that may stand"),
    M('block-exit-undoes-in-doubt-commit', "decision", 'lakevilla/txn/transaction.py',
      'if (ctx.state in (State.COMMITTED, State.ABORTED, State.DECIDED, State.IN_DOUBT)\n'
      '                or ctx.decided or ctx.in_doubt):',
      'if ctx.state in (State.COMMITTED, State.ABORTED):',
      [NL + "test_leaving_the_block_after_an_in_doubt_commit_undoes_nothing"],
      "leaving a with block after an in-doubt commit undoes it"),
    M('no-warning-after-decision', "decision", 'lakevilla/core/deciding.py',
      '                if hit is not None and marker_of(c) is None:\n'
      '                    ctx.count("conflicts_after_decision")',
      '                if False:\n                    ctx.count("conflicts_after_decision")',
      [C + "test_a_conflict_by_a_marker_ignoring_client_after_the_decision_is_warned"],
      "a conflict after the decision passes silently"),
    # -- ids and stores ----------------------------------------------------------------------------
    M("ids-per-process-counter", "ids", "lakevilla/names.py",
      'return f"{int(time.time() * 1000):013x}-{secrets.token_hex(8)}"',
      "return f\"{next(new_txn_id.__dict__.setdefault("
      "'n', __import__('itertools').count())):013x}-{0:016x}\"",
      [C + "test_transaction_ids_are_globally_unique"],
      "transaction ids are a per-process counter (issue 18, point 4)"),
    M("fsync-ignored", "store", "lakevilla/store/local.py",
      "            if self.fsync:\n", "            if False:\n",
      ["tests/unit/test_store.py::test_local_store_fsync_syncs_every_write"],
      "LocalStore(fsync=True) does not sync"),
    M("list-start-not-passed-into-folders", "store", "lakevilla/store/local.py",
      "                          after if a is not None and a.startswith(sub) else None, out)",
      "                          None, out)",
      [LS], "a local LIST from a key inside a folder lists that folder from its start again "
      "(pages repeat)"),
    M("list-folders-sort-as-their-names", "store", "lakevilla/store/local.py",
      'picked += [c for i, ch in enumerate(first + "/") if ch <= "/" and (c := first[:i])',
      'picked += [c for i, ch in enumerate(first + "/") if ch == "/" and (c := first[:i])',
      [LS], "a local LIST skips a folder whose name sorts before start_after although its keys "
      "sort after it ('0/x' after '0.json')",
      ("            if not e.is_dir() or (n + \"/\" <= a and not a.startswith(n + \"/\")):",
       "            if not e.is_dir() or not a.startswith(n + \"/\"):")),
    M("list-start-past-the-prefix-kept", "store", "lakevilla/store/local.py",
      "                return []  # it sorts past every key in the folder",
      "                pass  # it sorts past every key in the folder",
      [LS], "a local LIST whose start_after sorts past the prefix's folder still lists keys"),
    M("duckdb-settings-per-session", "store", "lakevilla/scan/duck.py",
      "SESSION = (\"SET GLOBAL TimeZone='UTC'\", \"SET GLOBAL threads=1\",",
      "SESSION = (\"SET TimeZone='UTC'\", \"SET threads=1\",",
      ["tests/unit/test_expressions.py::test_duckdb_runs_locked_down[another]"],
      "the DuckDB time zone is set for the first connection only: other threads' cursors use "
      "the machine's"),
    # -- row rules (CHECK constraints, invariants) -------------------------------------------
    M("rules-not-checked", "rules", "lakevilla/engines/embedded.py",
      "        if ctx.constraints:\n            self.check_rules(ctx, [t for t, _ in jobs])",
      "        if False:\n            self.check_rules(ctx, [t for t, _ in jobs])",
      ["tests/statements/test_constraints.py::test_a_row_that_breaks_a_check_constraint_is_"
       "refused_and_nothing_is_written[update-R]"],
      "the embedded engine writes rows that break a CHECK constraint"),
    M("rules-let-null-pass", "rules", "lakevilla/engines/embedded.py",
      "                ok = self._mask(ctx, t, checked)  # NULL counts as no",
      "                ok = pc.invert(self._mask(ctx, t, E.check_where(\n"
      "                    f\"NOT ({checked.text})\", ctx.schema)))",
      ["tests/statements/test_constraints.py::test_a_row_that_breaks_a_check_constraint_is_"
       "refused_and_nothing_is_written[insert-null-]"],
      "a rule whose value is NULL lets the row pass (SQL's CHECK, not Delta's)"),
    M("spark-rules-not-checked", "rules", "lakevilla/engines/spark_rows.py",
      "    rules = checked_rules(ctx) if ctx.constraints else []",
      "    rules = []",
      ["tests/interop/test_spark_statements.py::test_spark_refuses_rows_that_break_a_check_"
       "constraint[classic]"],
      "the Spark engine writes rows that break a CHECK constraint"),
    M("constraints-read-from-nowhere", "rules", "lakevilla/engines/api.py",
      "            constraints=constraints_of(metadata),",
      "            constraints=(),",
      ["tests/statements/test_constraints.py::test_a_constraint_delta_rs_added_is_enforced_"
       "like_delta_rs_does"],
      "a table's context does not take the table's rules along"),
    M("redo-keeps-stale-rules", "rules", "lakevilla/statements/view.py",
      "        self.ctx = self.ctx.following(snapshot.protocol, snapshot.metadata, "
      "snapshot.schema,\n                                      tuple(snapshot.partition_columns))",
      "        self.ctx = dataclasses.replace(self.ctx, schema=snapshot.schema,\n"
      "                                       partition_columns=tuple(snapshot.partition_columns))",
      ["tests/statements/test_constraints.py::test_a_redo_onto_a_table_that_gained_a_"
       "constraint_meanwhile_enforces_it"],
      "a redo onto a newer snapshot checks rows by the rules of the snapshot it left"),
    M("kept-rows-not-rechecked", "rules", "lakevilla/statements/insert.py",
      "        else:\n            self.recheck_kept(tw, engine, self.inserted)",
      "        else:\n            pass",
      ["tests/statements/test_constraints.py::test_a_redo_onto_a_table_that_gained_a_"
       "constraint_meanwhile_enforces_it"],
      "an insert redone onto a table that gained a constraint keeps its rows unchecked"),
    M("new-constraint-skips-existing-rows", "rules", "lakevilla/statements/set_properties.py",
      "        if new:  # the rows already there must keep the new rules",
      "        if False:",
      ["tests/statements/test_constraints.py::test_a_constraint_the_rows_already_there_break_"
       "is_refused_and_nothing_is_written"],
      "a constraint is added to a table whose rows break it"),
    M("new-constraint-footprint-blind", "rules", "lakevilla/statements/set_properties.py",
      "        if self.read_files:\n            return Footprint(read_files=set(self.read_files), "
      "full_scan=True)",
      "        if False:\n            return Footprint(read_files=set(self.read_files), "
      "full_scan=True)",
      ["tests/statements/test_constraints.py::test_a_row_added_while_a_constraint_waits_to_"
       "commit_is_checked_by_its_redo"],
      "a constraint commits past a concurrent append of a row that breaks it"),
    M("properties-entry-dropped", "rules", "lakevilla/statements/set_properties.py",
      "        return {\"properties\": dict(self.properties), **super().options()}",
      "        return super().options()",
      ["tests/statements/test_constraints.py::test_a_resumed_transaction_keeps_the_properties_"
       "it_set"],
      "a sublog entry forgets the properties its statement set (resume loses them)"),
    M("protocol-not-upgraded", "rules", "lakevilla/statements/view.py",
      "        if protocol != self.base.protocol:\n            self.protocol = protocol",
      "        if False:\n            self.protocol = protocol",
      ["tests/statements/test_constraints.py::test_set_properties_adds_a_constraint_delta_rs_"
       "then_enforces_too[R]"],
      "a constraint is added without the writer version Delta requires for it"),
    M("property-feature-unchecked", "rules", "lakevilla/statements/view.py",
      "        check_writable(self.name, protocol, md)\n        if protocol",
      "        if protocol",
      ["tests/statements/test_constraints.py::test_a_property_enabling_a_feature_lakevilla_does_"
       "not_write_is_refused[delta.feature.icebergCompatV2-supported]"],
      "a property enabling a feature lakevilla does not write (icebergCompatV2) is committed"),
    M("mapped-read-keeps-deleted-rows", "read", "lakevilla/engines/mapped_read.py",
      "            if t is not None and add.deletion_vector is not None:",
      "            if t is not None and add.deletion_vector is not None and False:",
      ["tests/statements/test_column_mapped_reads.py::test_a_column_mapped_table_with_deletion_"
       "vectors_drops_the_deleted_rows[name-False]"],
      "the embedded read of a column-mapped table returns rows its deletion vectors delete"),
    M("spark-mapped-keeps-deleted-rows", "read", "lakevilla/engines/spark_mapped.py",
      "        if deleted or always:\n            df = live(df, group)",
      "        if always:\n            df = live(df, group)",
      ["tests/interop/test_spark.py::test_spark_reads_a_column_mapped_table_with_deletion_"
       "vectors"],
      "the Spark read of a column-mapped table returns rows its deletion vectors delete"),
    # -- column-mapped tables, written ------------------------------------------------------------
    M("mapped-partition-values-logical", "mapping", "lakevilla/delta/column_mapping.py",
      "    return {physical_key(schema, c): v for c, v in values.items()}",
      "    return dict(values)",
      [CW + "test_every_statement_writes_physical_names_and_delta_rs_reads_the_logical_rows"
       "[local-name]"],
      "a column-mapped table's new files key partitionValues by logical name"),
    M("mapped-files-logical", "mapping", "lakevilla/delta/column_mapping.py",
      "    return (to_physical(schema, data), [",
      "    return (data, [",
      [CW + "test_every_statement_writes_physical_names_and_delta_rs_reads_the_logical_rows"
       "[local-id]"],
      "a column-mapped table's new files name their columns logically"),
    M("mapped-new-ids-reused", "mapping", "lakevilla/delta/mapping_changes.py",
      "    _number(out, max_column_id(metadata), keep_names=False)",
      "    _number(out, 0, keep_names=False)",
      [CW + "test_add_columns_gives_new_ids_after_the_greatest_and_col_uuid_names[id]"],
      "a new column of a column-mapped table is numbered from 0, reusing ids"),
    M("mapped-enabling-renames-files", "mapping", "lakevilla/statements/view.py",
      "            return mapping_changes.mapped(after, keep_names=True)",
      "            return mapping_changes.mapped(after, keep_names=False)",
      [CW + "test_enabling_name_mapping_keeps_the_files_and_maps_the_columns_by_their_names"
       "[local]"],
      "enabling column mapping gives existing columns new physical names their files lack"),
    M("rename-keeps-partition-columns", "mapping", "lakevilla/delta/mapping_changes.py",
      "    parts = [new if p == was else p for p in metadata.partition_columns]",
      "    parts = list(metadata.partition_columns)",
      [CW + "test_rename_and_drop_change_metadata_only_and_every_reader_sees_the_new_names"
       "[local]"],
      "renaming a partition column leaves partitionColumns naming the old name"),
    # -- tables with deletion vectors, written ---------------------------------------------------
    M("remove-drops-its-dv", "dv", "lakevilla/delta/actions.py",
      "            extended_file_metadata=True, deletion_vector=self.deletion_vector,",
      "            extended_file_metadata=True, deletion_vector=None,",
      ["tests/statements/test_deletion_vectors.py::test_every_statement_writes_a_table_with_"
       "deletion_vectors_and_deleted_rows_stay_deleted[update-R]"],
      "a statement that rewrites a file with a DV removes (path) without its DV: the old file "
      "stays live beside the new one"),
    M("optimize-leaves-dvs", "dv", "lakevilla/statements/optimize.py",
      "    return [b for b in out if len(b) > 1 or b[0].deletion_vector is not None] + alone",
      "    return [b for b in out if len(b) > 1] + alone",
      ["tests/statements/test_deletion_vectors.py::test_every_statement_writes_a_table_with_"
       "deletion_vectors_and_deleted_rows_stay_deleted[optimize-R]"],
      "OPTIMIZE leaves a lone file's deletion vector in place (deleted rows never purged)"),
    M("spark-merge-matches-deleted-rows", "dv", "lakevilla/engines/spark_read.py",
      "    if not marked:\n        return df\n",
      "    if True:\n        return df\n",
      ["tests/interop/test_spark.py::test_spark_writes_a_table_with_deletion_vectors_and_"
       "deleted_rows_stay_deleted[merge]"],
      "Spark's MERGE matches source rows against target rows a deletion vector deleted"),
    M("dv-property-without-feature", "dv", "lakevilla/delta/features.py",
      "    if cfg.get(\"delta.enabledeletionvectors\", \"false\").lower() == \"true\":\n"
      "        protocol = as_table_features(protocol)",
      "    if False:\n        protocol = as_table_features(protocol)",
      ["tests/statements/test_deletion_vectors.py::test_enabling_deletion_vectors_upgrades_the_"
       "protocol_as_delta_prescribes"],
      "delta.enableDeletionVectors is set without the deletionVectors feature in the protocol"),
    M("generated-not-computed", "rules", "lakevilla/engines/embedded.py",
      "    return generated.fill(ctx, table, absent)",
      "    return table",
      ["tests/statements/test_generated_columns.py::test_an_insert_without_generated_columns_"
       "stores_what_delta_rs_stores"],
      "an insert that does not give a generated column leaves it NULL instead of computing it"),
    M("generated-value-not-checked", "rules", "lakevilla/engines/rules.py",
      '    return (f"{E.quote_ident(field.name)} IS NOT DISTINCT FROM "\n'
      '            f"CAST(({rule.expression}) AS {E.duckdb_type(field.type)})")',
      '    return "TRUE"',
      ["tests/statements/test_generated_columns.py::test_a_generated_value_that_differs_from_"
       "its_expression_is_refused[insert-R]"],
      "a generated column's value given by the data is written without comparing it to the "
      "expression"),
    M("generated-check-not-null-safe", "rules", "lakevilla/engines/rules.py",
      '    return (f"{E.quote_ident(field.name)} IS NOT DISTINCT FROM "',
      '    return (f"{E.quote_ident(field.name)} = "',
      ["tests/statements/test_generated_columns.py::test_generated_columns_are_computed_or_"
       "checked_in_every_statement[R]"],
      "a generated value is compared with = (a NULL expression refuses every row), not "
      "Delta's NULL-safe <=>"),
    M("generated-not-recomputed-on-update", "rules", "lakevilla/engines/generated.py",
      "    cols = [c for c in sorted(generated_columns(ctx.constraints)) if c not in values]",
      "    cols: list[str] = []",
      ["tests/statements/test_generated_columns.py::test_generated_columns_are_computed_or_"
       "checked_in_every_statement[R]"],
      "an update that sets a column a generated column reads keeps the stale generated value"),
    M("merge-generated-not-computed", "rules", "lakevilla/engines/embedded_merge.py",
      "            ins = generated.by_clause(ctx, ins, clause, cm.values)",
      "            ins = ins",
      ["tests/statements/test_generated_columns.py::test_generated_columns_are_computed_or_"
       "checked_in_every_statement[R]"],
      "a merge insert clause that leaves a generated column out inserts NULL instead of "
      "computing it"),
    M("spark-generated-not-computed", "rules", "lakevilla/engines/spark_write.py",
      "    gen = arrow_generated.missing(ctx, df.columns)",
      "    gen: list[str] = []",
      ["tests/interop/test_spark_statements.py::test_spark_computes_and_checks_generated_"
       "columns[classic]"],
      "the Spark engine leaves a generated column a DataFrame lacks NULL instead of computing it"),
    M("dv-undo-deletes-the-marked-file", "dv", "lakevilla/core/deciding.py",
      "for p in sorted({p for op in tw.ops for a in op.added for p in a.written_files}",
      "for p in sorted({p for op in tw.ops for a in op.added for p in (a.path,)}",
      ["tests/statements/test_deletion_vectors.py::test_an_aborted_delete_by_deletion_vector_"
       "keeps_the_file_it_marked"],
      "an aborted transaction deletes the data file its deletion vector marked (rows lost)"),
    M("dv-redo-garbage-is-the-marked-file", "dv", "lakevilla/statements/view.py",
      "                self.garbage.update(p for p in a.written_files if p not in kept)",
      "                self.garbage.update(p for p in (a.path,) if p not in kept)",
      ["tests/statements/test_deletion_vectors.py::test_concurrent_deletes_by_deletion_vector_on_"
       "one_file_both_land"],
      "a redo takes the file its undone deletion vector marked for garbage and deletes it"),
    M("dv-forgets-the-old-deletions", "dv", "lakevilla/engines/dv_rewrite.py",
      "    rows = [np.concatenate([_gone(ctx, add), hit]) for add, hit in partial]",
      "    rows = [hit for add, hit in partial]",
      ["tests/statements/test_deletion_vectors.py::test_every_statement_writes_a_table_with_"
       "deletion_vectors_and_deleted_rows_stay_deleted[delete-R]",
       "tests/protocol/test_concurrent_deletion_vectors.py::test_two_writers_marking_one_file_"
       "both_land_and_no_row_comes_back[local-R,CT]"],
      "a new deletion vector holds only the statement's rows: rows deleted before (by a "
      "concurrent winner, for a redo) come back"),
    M("dv-positions-of-live-rows", "dv", "lakevilla/engines/dv_rewrite.py",
      "    return np.flatnonzero(keep)[places]",
      "    return places",
      ["tests/statements/test_deletion_vectors.py::test_every_statement_writes_a_table_with_"
       "deletion_vectors_and_deleted_rows_stay_deleted[delete-R]"],
      "a deletion vector marks rows by their place among the live rows, not in the file"),
    M("dv-dropped-statement-deletes-the-marked-file", "dv", "lakevilla/core/per_statement.py",
      "                                         for p in a.written_files])",
      "                                         for p in (a.path,)])",
      ["tests/statements/test_deletion_vectors.py::test_a_plain_delta_delete_that_loses_to_a_"
       "conflict_keeps_the_file_it_marked"],
      "a plain-Delta statement dropped after a conflict deletes the file its DV marked"),
    M("dv-file-checksum-wrong", "dv", "lakevilla/delta/deletion_vectors.py",
      '        blob += struct.pack(">i", len(raw)) + raw + struct.pack(">I", zlib.crc32(raw))',
      '        blob += struct.pack(">i", len(raw)) + raw + struct.pack(">I", zlib.crc32(raw) ^ 1)',
      [DW + "test_a_deletion_vector_too_large_to_inline_is_written_to_a_dv_file[local]"],
      "a DV file's checksum does not match its bitmap (delta-rs and Spark refuse the table)"),
    M("dv-file-left-by-an-abort", "dv", "lakevilla/core/deciding.py",
      "for p in sorted({p for op in tw.ops for a in op.added for p in a.written_files}",
      "for p in sorted({a.path for op in tw.ops for a in op.added if not a.deletion_vector}",
      [DW + "test_an_aborted_transaction_deletes_its_dv_file_not_the_file_it_marked[R]"],
      "an aborted transaction leaves the DV file it wrote behind"),
    M("dv-file-left-by-a-redo", "dv", "lakevilla/statements/view.py",
      "                self.garbage.update(p for p in a.written_files if p not in kept)",
      "                self.garbage.update(p for p in a.written_files if p.endswith('.parquet'))",
      [DW + "test_a_redone_delete_leaves_only_the_dv_file_its_commit_names"],
      "a redo leaves the DV file of the undone statement behind"),
    M("dv-file-replaced-in-a-transaction-kept", "dv", "lakevilla/statements/view.py",
      "        written = {p for op in self.ops for a in op.added for p in a.written_files}",
      "        written = {a.path for op in self.ops for a in op.added if not a.deletion_vector}",
      [DW + "test_a_transaction_that_marks_a_file_twice_commits_only_its_last_dv_file"],
      "a DV file a later statement of the transaction replaced is left behind"),
    M("dv-file-left-by-a-dropped-statement", "dv", "lakevilla/core/per_statement.py",
      "                                         for p in a.written_files])",
      "                                         for p in a.written_files "
      "if p.endswith('.parquet')])",
      [DW + "test_a_plain_delta_delete_dropped_after_a_conflict_deletes_its_dv_file"],
      "a plain-Delta statement dropped after a conflict leaves its DV file behind"),
    M("dv-file-swept-under-a-live-sublog", "dv", LK,
      "                    keys.update(data_file_key(e.table, p, self._client.root_uri)\n"
      "                                for p in (a.path, *a.written_files))",
      "                    keys.update(data_file_key(e.table, p, self._client.root_uri)\n"
      "                                for p in (a.path,))",
      [DW + "test_a_crash_anywhere_leaves_no_dv_file_the_sweep_would_not_clean[local]"],
      "the abandoned-file sweep deletes the DV file a crashed transaction's sublog names: its "
      "resume cannot commit"),
    M("resume-ignores-the-dv-file", "dv", "lakevilla/recovery/resume.py",
      "             for p in (a.written_files if isinstance(a, AddFile) else (a.path,))}",
      "             for p in ((a.path,) if isinstance(a, AddFile) else (a.path,))}",
      [DW + "test_resuming_a_transaction_whose_dv_file_is_gone_aborts_as_lost_data"],
      "a resumed transaction commits an add whose DV file is gone (no reader can apply it)"),
    M("merge-rewrites-on-a-dv-table", "dv", "lakevilla/engines/embedded_merge.py",
      "        by_dv = ctx.write_dvs\n",
      "        by_dv = False\n",
      [DW + "test_a_merge_marks_the_rows_it_updates_and_deletes_and_writes_only_new_rows[few-R]"],
      "MERGE on a table that asks for DVs rewrites the files it touches"),
    M("merge-dv-places-across-files", "dv", "lakevilla/engines/embedded_merge.py",
      "mine - starts[fi])))",
      "mine)))",
      [DW + "test_a_merge_marks_the_rows_it_updates_and_deletes_and_writes_only_new_rows[few-R]"],
      "MERGE marks a row by its place among all the target's rows, not in its own file"),
    M("spark-rewrites-on-a-dv-table", "dv", "lakevilla/engines/spark.py",
      "            if ctx.write_dvs:  # Spark finds the rows, the executors mark them "
      "(spark_dv.py)",
      "            if False:",
      ["tests/interop/test_spark_statements.py::test_spark_deletes_updates_and_merges_by_"
       "deletion_vectors[classic]"],
      "the Spark engine's DELETE and UPDATE on a table that asks for DVs rewrite their files"),
    M("spark-merge-rewrites-on-a-dv-table", "dv", "lakevilla/engines/spark_merge.py",
      "        if ctx.write_dvs and touched:\n", "        if False:\n",
      ["tests/interop/test_spark_statements.py::test_spark_deletes_updates_and_merges_by_"
       "deletion_vectors[classic]"],
      "the Spark engine's MERGE on a table that asks for DVs rewrites the files it touches",
      ("kind.isin([UPDATED] if ctx.write_dvs else [KEPT, UPDATED])", "kind.isin([KEPT, UPDATED])"),
      ("removed=[] if ctx.write_dvs else touched", "removed=touched")),
    # -- change data feed (issue 37) --------------------------------------------------------------
    M("cdf-redo-keeps-old-change-files", "cdf", "lakevilla/statements/view.py",
      "self.garbage.update(c.path for c in op.cdc)", "pass",
      [CF + "test_a_redone_update_logs_the_rows_it_changes_on_the_newer_table"],
      "an undone statement's change data files are left behind (a redo writes new ones)"),
    M("cdf-sublog-omits-change-files", "cdf", "lakevilla/recovery/sublog.py",
      "        cdc=[c.to_json() for c in op.cdc],", "        cdc=[],",
      [CF + "test_a_crashed_transactions_change_files_are_named_by_its_sublog[commit]"],
      "a sublog entry does not name its statement's change data files (a resume loses them)"),
    M("cdf-abort-keeps-change-files", "cdf", "lakevilla/core/deciding.py",
      "| {c.path for op in tw.ops for c in op.cdc} ", "",
      [CF + "test_an_aborted_transaction_leaves_no_change_file"],
      "an aborted transaction's change data files are left behind"),
    M("cdf-earlier-inserts-uncovered", "cdf", "lakevilla/statements/view.py",
      "        for o in bare:  # attached to ``op``", "        for o in []:  # attached to ``op``",
      [CF + "test_statements_of_one_transaction_all_log_their_changes"],
      "an insert before an update in one commit is missing from the feed (readers ignore adds "
      "once a commit has cdc files)"),
    M("cdf-dropped-statement-keeps-change-files", "cdf", "lakevilla/core/per_statement.py",
      "changes = [data_file_key(op.table, c.path, root) for c in op.cdc]", "changes = []",
      [CF + "test_a_plain_delta_statement_that_loses_a_conflict_drops_its_change_files"],
      "a plain-Delta statement dropped after a conflict leaves its change data files behind"),
    M("cdf-dv-removes-derived", "cdf", "lakevilla/statements/view.py",
      "(dv or self._earlier_cdc(op))", "self._earlier_cdc(op)",
      [CF + "test_an_overwrite_of_files_with_deleted_rows_logs_only_their_live_rows"],
      "an overwrite removing files with deletion vectors leaves its changes to be derived from "
      "its removes (readers then take the DV-deleted rows for deletes)"),
    M("cdf-updates-not-netted", "cdf", "lakevilla/engines/change_data.py",
      "net_updates(ctx, res.changes) if update else res.changes", "res.changes",
      [CF + "test_an_update_logs_no_row_it_leaves_as_it_was"],
      "an update logs rows it left as they were (delta-rs logs preimages EXCEPT ALL postimages)"),
    # -- MERGE (issue 14) --------------------------------------------------------------------------
    M('merge-footprint-blind', "merge", 'lakevilla/statements/merge.py',
      '    kind: ClassVar[str] = "merge"\n',
      '    kind: ClassVar[str] = "merge"\n\n    def footprint(self):\n'
      '        from ..scan.conflicts import Footprint\n\n        return Footprint(blind=True)\n\n',
      ["tests/statements/test_merge.py::test_concurrent_insert_of_a_matching_key_is_a_conflict",
       "tests/statements/test_merge.py::test_concurrent_merges_apply_every_batch_exactly_once_under_r"],
      "a merge conflicts with nothing (its reads and its 'not matched' are not validated)"),
    M("merge-bound-too-narrow", "merge", "lakevilla/engines/merge_plan.py",
      'parts.append(f"{name} BETWEEN {lo} AND {hi}")',
      'parts.append(f"{name} BETWEEN {lo} AND {hi} - 1")',
      ["tests/statements/test_merge.py::test_merge_matches_delta_rs",
       "tests/statements/test_merge.py::test_concurrent_insert_of_a_matching_key_is_a_conflict"],
      "the key bound misses the source's largest key: a matching file is pruned, a phantom missed"),
    M("merge-source-not-staged", "merge", "lakevilla/engines/arrow_source.py",
      "        ctx.store.put(key, buf.getvalue())\n", "",
      ["tests/statements/test_merge.py::test_resumed_merge_is_redone_from_its_staged_source"],
      "a logical merge entry names a source that was never written: resume cannot redo it"),
    # -- MERGE on Spark at cluster scale (issue 55) ------------------------------------------------
    M("spark-merge-source-not-fixed", "merge", "lakevilla/engines/spark_source.py",
      "        if self.fixed:\n            return self\n",
      "        if True:\n            return self\n",
      [AS + "test_a_conflict_redoes_a_spark_merge_from_its_staged_source[classic]"],
      "a Spark MERGE's source is computed anew by every job and by the redo: a source that is not "
      "the same each time it is computed merges other rows than it staged"),
    M("spark-merge-source-not-staged", "merge", "lakevilla/engines/spark_source.py",
      "        if stage_at is not None:\n            return self.stage(ctx, stage_at)\n", "",
      [AS + "test_an_executor_killed_in_the_middle_of_a_merge_changes_nothing_but_the_time"
            "[classic]"],
      "a Spark MERGE under R holds its source in executor memory (checkpointed), not in staged "
      "files: an executor lost in the middle of the merge loses source rows, and the merge fails "
      "instead of Spark retrying its tasks"),
    M("spark-merge-schema-checked-late", "merge", "lakevilla/statements/merge.py",
      "        p = self._plan(tw, self._source(tw, engine))\n",
      "        return\n        p = self._plan(tw, self._source(tw, engine))\n",
      [AS + "test_a_source_of_the_wrong_schema_is_refused_before_any_job_runs[classic]"],
      "a merge's source is checked against the target only when it runs: a wrong schema costs "
      "Spark jobs (staging, key bounds) before it is refused"),
    M("spark-failed-write-leaves-files", "merge", "lakevilla/engines/spark_write.py",
      "    except BaseException:\n        delete_all(ctx, prefix)\n        raise\n",
      "    except BaseException:\n        raise\n",
      [AS + "test_files_spark_wrote_but_could_not_describe_are_deleted[classic]"],
      "a Spark write that fails after Spark wrote its files (their footers unreadable) leaves "
      "them for the abandoned-file sweep"),
    # -- statements: overwrite, optimize (issue 14) ------------------------------------------------
    M("overwrite-redo-drops-its-rows", "redo", "lakevilla/statements/view.py",
      "                self.garbage.update(p for p in a.written_files if p not in kept)",
      '                self.garbage.update(p for p in a.written_files if op.kind != "insert")',
      ["tests/statements/test_overwrite.py::test_a_conflicting_overwrite_is_redone_under_r[local]",
       "tests/statements/test_overwrite.py::test_a_resumed_overwrite_is_redone_from_its_sublog"],
      "undoing an overwrite for a redo deletes the files holding its new rows"),
    M('overwrite-footprint-blind', "conflicts", 'lakevilla/statements/overwrite.py',
      '    kind: ClassVar[str] = "overwrite"\n',
      '    kind: ClassVar[str] = "overwrite"\n\n    def footprint(self):\n'
      '        from ..scan.conflicts import Footprint\n\n        return Footprint(blind=True)\n\n',
      ["tests/statements/test_overwrite.py::test_a_conflicting_overwrite_is_redone_under_r[local]"],
      "an overwrite is checked like a blind append (a concurrent append into its range survives)"),
    M('overwrite-sublog-drops-new-rows', "sublogs", 'lakevilla/statements/overwrite.py',
      '        return {"inserted": [a.to_json() for a in self.inserted]}'
      '  # written once, kept across redos',
      '        return {"inserted": []}',
      ["tests/statements/test_overwrite.py::test_a_resumed_overwrite_is_redone_from_its_sublog"],
      "a logical overwrite entry does not name its new rows (resume redoes it without them)"),
    M('optimize-footprint-empty', "conflicts", 'lakevilla/statements/optimize.py',
      '        return Footprint(read_files={a.path for a in self.removed},\n'
      '                         removed_files={a.path for a in self.removed})',
      '        return Footprint()',
      ["tests/statements/test_optimize.py::test_optimize_conflicts_only_on_its_own_files[local-R]",
       "tests/statements/test_optimize.py::test_compaction_beside_concurrent_writers_loses_and_duplicates_nothing"],
      "a compaction does not see a concurrent change to the files it compacted (rows duplicated)"),
    M('evolution-physical-entry-drops-columns', "sublogs", 'lakevilla/statements/base.py',
      '        if not (logical and self.can_be_logical) and not opts:',
      '        if not (logical and self.can_be_logical):',
      ["tests/statements/test_evolution.py::test_a_resumed_transaction_keeps_the_columns_it_added"],
      "a physical sublog entry forgets the columns its operation added (resume loses them)"),
    M("evolution-redo-keeps-stale-schema", "redo", "lakevilla/statements/view.py",
      "        self.metadata, self.protocol, self._schema = None, None, None\n", "",
      ["tests/statements/test_evolution.py::test_a_concurrent_metadata_change_conflicts_with_ours[local-R]"],
      "a redo keeps the schema built on the old snapshot (a concurrent column is dropped)"),
    # -- V2 checkpoints (issue 38, reading only) ---------------------------------------------------
    M("v2-sidecars-ignored", "read", "lakevilla/delta/checkpoint.py",
      "    if out.sidecars:\n        if sidecars is None:",
      "    if False:\n        if sidecars is None:",
      ["tests/statements/test_v2_checkpoints.py::test_every_version_reads_as_the_json_commits_"
       "replay_it[listed]",
       "tests/statements/test_v2_checkpoints.py::test_hand_built_v2_checkpoints_read_as_the_"
       "commits_replay[classic-2]"],
      "a V2 checkpoint's sidecar files are not read: the files they add are missing"),
    M("v2-smallest-uuid-chosen", "read", "lakevilla/delta/log.py",
      "            return [max(self.v2_checkpoints[version])]",
      "            return [min(self.v2_checkpoints[version])]",
      ["tests/statements/test_v2_checkpoints.py::test_of_several_checkpoints_at_one_version_the_"
       "greatest_uuid_named_one_is_read"],
      "of several UUID-named checkpoints at one version, another than the documented one is read"),
    M("v2-classic-chosen-first", "read", "lakevilla/delta/log.py",
      "        if version in self.v2_checkpoints:\n",
      "        if version in self.v2_checkpoints and version not in self.checkpoints:\n",
      ["tests/statements/test_v2_checkpoints.py::test_of_several_checkpoints_at_one_version_the_"
       "greatest_uuid_named_one_is_read"],
      "the classic checkpoint is read before a UUID-named one at the same version"),
    M("v2-hint-path-ignored", "read", "lakevilla/delta/log.py",
      "            if isinstance(v2_path, str) and _V2_CKPT_RE.match(v2_path) \\\n",
      "            if False and isinstance(v2_path, str) and _V2_CKPT_RE.match(v2_path) \\\n",
      ["tests/statements/test_v2_checkpoints.py::test_a_last_checkpoint_hint_names_a_uuid_"
       "checkpoint"],
      "a _last_checkpoint naming a UUID-named checkpoint is not followed (a GET of a classic "
      "file that is not there, and a full LIST)"),
    # -- in-commit timestamps, V2 checkpoints written, clustering (issue 38) --------------------
    M("ict-not-stamped", "delta", "lakevilla/delta/log.py",
      "        commit = self.stamp(version, self._row_ids(version, commit))\n",
      "        commit = self._row_ids(version, commit)\n",
      [ICT + "test_every_commit_carries_an_increasing_timestamp_first[local]"],
      "a commit put on a table with in-commit timestamps carries none"),
    M("ict-not-after-previous", "delta", "lakevilla/delta/ict.py",
      "return stamped(commit, max(now, (of(prev) or 0) + 1))", "return stamped(commit, now)",
      [ICT + "test_a_commit_retried_at_another_version_is_stamped_for_that_version"],
      "the timestamp is the clock's, not later than the previous version's"),
    M("ict-previous-never-fetched", "delta", "lakevilla/delta/ict.py",
      "        if prev is None and off_at != version - 1:", "        if False:",
      [ICT + "test_a_writer_that_has_not_read_the_previous_commit_fetches_it_to_stamp"],
      "a writer that has not read the previous commit (recovery's roll-forward) stamps nothing"),
    M("ict-rewrite-restamps", "delta", "lakevilla/delta/log.py",
      "        commit = self.stamp(version, self._row_ids(version, commit), rewrite=True)",
      "        commit = self.stamp(version, self._row_ids(version, commit))",
      [ICT + "test_every_commit_carries_an_increasing_timestamp_first[local]"],
      "a marker's rewrite or in-place fill takes a new timestamp, later than the versions above"),
    M("ict-enablement-unrecorded", "delta", "lakevilla/delta/ict.py",
      "    return stamped(commit, max(now, floor), enabled_at=version)",
      "    return stamped(commit, max(now, floor))",
      [ICT + "test_enabling_them_records_the_version_and_timestamp_and_upgrades_the_protocol"
       "[local]"],
      "enabling on an existing table does not record the enablement version and timestamp"),
    M("ict-enabled-in-place", "delta", "lakevilla/core/deciding.py",
      "            return False  # the markers above ours",
      "            pass  # the markers above ours",
      [ICT + "test_enabling_them_in_place_above_markers_goes_to_the_tail"],
      "the enabling commit fills its marker: markers above it are later versions without one"),
    M("ict-time-travel-by-file-times", "delta", "lakevilla/delta/history.py",
      "    stamped = _by_commit_time(log, sorted(ok), moment)", "    stamped = None",
      [ICT + "test_time_travel_and_history_go_by_the_timestamps"],
      "time travel by timestamp ignores the in-commit timestamps"),
    M("v2-written-classic", "delta", "lakevilla/delta/log.py",
      "        v2 = writes_v2_checkpoints(snap.protocol, snap.metadata)", "        v2 = False",
      [V2 + "test_a_v2_table_gets_a_uuid_named_v2_checkpoint_that_readers_use_alone[local]"],
      "a table asking for V2 checkpoints gets a classic one"),
    M("v2-no-checkpoint-metadata", "delta", "lakevilla/delta/checkpoint.py",
      "        rows.append({\"checkpointMetadata\": {\"version\": v2_version, \"tags\": None}})",
      "        pass",
      [V2 + "test_a_v2_table_gets_a_uuid_named_v2_checkpoint_that_readers_use_alone[local]"],
      "a UUID-named checkpoint without its checkpointMetadata action"),
    M("checkpoint-domains-dropped", "delta", "lakevilla/delta/checkpoint.py",
      "    for d in (domains or {}).values():", "    for d in ():",
      ["tests/statements/test_clustering.py::test_writes_keep_the_clustering_domain_through_"
       "commits_and_a_checkpoint"],
      "a checkpoint loses the domain metadata (the clustering columns)"),
    # -- the past across tables (lake.at, lake.changes) ----------------------------------------
    M("listing-gap-counts-as-cleaned", "delta", "lakevilla/delta/log.py",
      "        _fill_listing_gaps(self, out)\n", "",
      ["tests/unit/test_delta_log.py::test_a_listing_that_missed_a_commit_between_newer_ones_"
       "does_not_make_it_gone"],
      "a commit a LIST missed below newer ones counts as cleaned up (time travel, lake.at and "
      "lake.changes refuse versions that exist)"),
    M("consumer-offset-read-outside-the-transaction", "past", "lakevilla/past/consumer.py",
      "            mine = txn.read(self.offsets, where=self._where)",
      "            mine = self._lake.read(self.offsets, where=self._where)",
      ["tests/api/test_consumer.py::test_two_runs_at_once_never_consume_a_change_twice[R,CT]"],
      "a consumer reads its offset beside its transaction: two runs at once both consume the "
      "same changes"),
    M("at-no-fixpoint", "past", "lakevilla/past/cut.py",
      "if not all(self._holds(w, m, cut) for w in m.tables if w != t):",
      "if False:",
      ["tests/api/test_lake_at.py::test_every_moment_sees_the_money_of_concurrent_two_table_"
       "transfers_conserved[local-tail]",
       "tests/api/test_changes.py::test_a_range_boundary_between_a_transfers_two_commits_never_"
       "splits_it"],
      "each table is read at its own newest commit by the moment: half of a transfer shows"),
    M("at-single-pass", "past", "lakevilla/past/cut.py",
      "                        cut[t] = tl.below(v)\n                        changed = True",
      "                        cut[t] = tl.below(v)\n                        changed = False",
      ["tests/api/test_lake_at.py::test_lowering_one_table_takes_transactions_out_of_others_"
       "until_nothing_changes"],
      "one pass over the tables: a table checked before another was lowered keeps a transaction "
      "the lowering took out"),
    M("at-unwritten-counts-as-landed", "past", "lakevilla/past/cut.py",
      "            return False  # never written there (yet): decided, not rolled forward",
      "            return True",
      ["tests/api/test_lake_at.py::test_a_transfer_decided_but_half_published_is_not_seen_then_"
       "or_ever_at_that_moment[local-R,CT]"],
      "a decided transaction's commit not written yet counts as seen: half of it shows"),
    M("at-cleaned-partner-counts-as-missing", "past", "lakevilla/past/cut.py",
      "return find_commit(log, m.attempt, tl.newest, log.probe_versions(tl.newest)) is None",
      "return False",
      ["tests/api/test_lake_at.py::test_a_transfer_whose_other_half_log_clean_up_removed_is_"
       "still_seen_whole"],
      "a transaction whose other half lies below what log clean-up kept counts as unwritten: "
      "the table that still shows its half is lowered for nothing"),
    M("at-uncreated-table-counts-as-held", "past", "lakevilla/past/cut.py",
      "            return not self._committing(m, w)",
      "            return True",
      ["tests/api/test_lake_at.py::test_a_table_a_decided_transaction_creates_but_has_not_"
       "written_yet_holds_back_the_rest"],
      "a table a decided transaction creates, not written yet, counts as holding its half: the "
      "other table shows its half alone"),
    M("at-base-entry-with-pending", "past", "lakevilla/past/cut.py",
      "            if e is not None and e.v >= 2 and not e.pending:",
      "            if e is not None and e.v >= 2:",
      ["tests/api/test_lake_at.py::test_a_global_log_entry_without_pending_writes_bounds_the_"
       "scan_and_changes_nothing"],
      "a global-log entry with pending writes bounds the scan: its versions may hold one half "
      "of an announced transaction, whose other half below them is never looked at"),
    M("at-based-partner-counts-as-landed", "past", "lakevilla/past/cut.py",
      "        if tl.complete or tl.based:",
      "        if tl.complete:",
      ["tests/api/test_lake_at.py::test_a_transfer_decided_but_half_published_is_not_seen_then_"
       "or_ever_at_that_moment[local-R,CT,I]"],
      "on a table scanned from a global-log entry, a commit not found above it counts as landed "
      "below it (it cannot be: it is not written yet)"),
    M("identity-mark-not-advanced", "rules", "lakevilla/statements/view.py",
      "        md = with_marks(current, marks)\n",
      "        md = current\n",
      ["tests/statements/test_identity_columns.py::test_inserts_number_the_identity_column_from_"
       "start_by_step[1-1-R]"],
      "a statement numbers identity values without writing the new high-water mark"),
    M("identity-sublog-drops-marks", "resume", "lakevilla/statements/identity.py",
      '        return {**({"identity": self.marks} if self.marks else {}), **super().options()}\n',
      "        return super().options()\n",
      ["tests/statements/test_identity_columns.py::test_a_resumed_transaction_keeps_the_marks_"
       "its_inserts_left"],
      "a sublog entry forgets the identity marks its statement left (a resume reuses values)"),
    M("identity-redo-keeps-numbers", "redo", "lakevilla/statements/identity.py",
      "        if not self.numbered:\n            return files\n",
      "        if True:\n            self._advance(tw, files)\n            return files\n",
      ["tests/statements/test_identity_columns.py::test_an_r_insert_that_loses_to_a_concurrent_"
       "insert_is_numbered_again_above_it[local]"],
      "an R insert redone after a concurrent insert keeps the identity values both took"),
    M("identity-dl-retry-keeps-numbers", "plain", "lakevilla/core/per_statement.py",
      '                if hit is not None and getattr(op, "numbered", None):\n',
      "                if False:\n",
      ["tests/statements/test_identity_columns.py::test_a_plain_delta_insert_that_loses_the_"
       "race_is_numbered_again"],
      "an LV[DL] insert whose identity mark moved is dropped instead of numbered again"),
    M("row-ids-from-a-stale-snapshot", "commit", "lakevilla/delta/row_tracking.py",
      "    return assign(commit, version, before() if version > 0 else None)\n",
      "    return assign(commit, version, base if base is not None else (\n"
      "        before() if version > 0 else None))\n",
      ["tests/statements/test_row_tracking.py::test_an_r_commit_that_lands_later_is_given_ids_"
       "at_that_version[local]"],
      "row ids are assigned from the snapshot the writer read, not the version below its commit"),
    M("row-ids-remove-forgets-ids", "commit", "lakevilla/delta/actions.py",
      '            extra={k: self.extra[k] for k in ("baseRowId", "defaultRowCommitVersion")\n'
      "                   if k in self.extra},\n",
      "",
      ["tests/statements/test_row_tracking.py::test_every_new_file_gets_fresh_row_ids_at_the_"
       "version_it_lands[R-rewrite]"],
      "a remove does not carry its add's row ids"),
    M("row-tracking-no-backfill", "commit", "lakevilla/delta/row_tracking.py",
      "            or enabled(before.metadata)):\n",
      "            or True):\n",
      ["tests/statements/test_row_tracking.py::test_enabling_row_tracking_gives_every_file_ids_"
       "in_that_version[R]"],
      "the version enabling row tracking leaves files without row ids"),
    M("idle-owner-not-fenced", "recovery", "lakevilla/core/context.py",
      '        if ("R" not in self.features\n',
      '        if (True\n',
      [IT + "test_an_owner_alive_after_all_learns_it_was_rolled_back_before_it_commits[R]"],
      "an R owner idle past half the idle floor commits at the tail without looking for the "
      "final record an operator's recover(older_than=) wrote: a transaction reported rolled "
      "back commits"),
    M("idle-abort-not-final", "recovery", "lakevilla/recovery/idle.py",
      "        final=True))\n", "        final=False))\n",
      [IT + "test_a_killed_client_shows_idle_and_recover_older_than_rolls_it_back[R]",
       IT + "test_an_owner_alive_after_all_learns_it_was_rolled_back_before_it_commits[R,CT]"],
      "the record that rolls an idle transaction back fences one attempt only: resume brings "
      "it back, a CT owner retries under a new attempt and commits"),
    M("idle-decided-not-rolled-forward", "recovery", "lakevilla/recovery/idle.py",
      "    if rec.state == records.COMMITTING:\n"
      "        roll_forward_record(svc, rec)  # its owner decided after all: never undo a "
      "decision\n"
      "    return ROLLED_FORWARD if rec.state in (records.COMMITTING, records.COMMITTED) "
      "else ROLLED_BACK\n",
      "    return ROLLED_BACK\n",
      [IT + "test_an_idle_transaction_found_decided_is_rolled_forward_not_back"],
      "an idle transaction whose owner decided between recovery's look and its ABORTED "
      "record is reported rolled back and left half published, its record COMMITTING"),
    M("idle-shown-running", "recovery", "lakevilla/status.py",
      "             else IDLE if quiet <= max_age else ABANDONED)",
      "             else RUNNING_STATE if quiet <= max_age else ABANDONED)",
      [IT + "test_a_killed_client_shows_idle_and_recover_older_than_rolls_it_back[R]"],
      "status shows a client that wrote nothing for longer than idle_after as running"),
]


def _select(muts: list[Mutation], only: str | None) -> list[Mutation]:
    if not only:
        return muts
    names = {n.strip() for n in only.split(",") if n.strip()}
    unknown = names - {m.name for m in muts}
    if unknown:
        raise SystemExit(f"unknown mutation(s): {sorted(unknown)} (see --list)")
    return [m for m in muts if m.name in names]


def _copy_repo(dst: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in COPY:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=ignore)
        else:
            shutil.copy2(src, dst / name)


def apply(m: Mutation, root: Path) -> None:
    """Apply ``m`` to the copy under ``root``; every snippet must occur exactly once."""
    for file, find, replace in m.changes():
        path = root / file
        text = path.read_text()
        n = text.count(find)
        if n != 1:
            raise SystemExit(f"mutation {m.name}: snippet found {n} times in {file} (expected "
                             f"exactly once); update the mutation to the current code:\n{find}")
        path.write_text(text.replace(find, replace))


def check_all_apply(muts: list[Mutation]) -> None:
    """Fail before running anything if a snippet has rotted."""
    for m in muts:
        for file, find, _ in m.changes():
            n = (ROOT / file).read_text().count(find)
            if n != 1:
                raise SystemExit(f"mutation {m.name}: snippet found {n} times in {file} "
                                 f"(expected exactly once); update it to the current "
                                 f"code:\n{find}")


def _pytest(root: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, float, str, str]:
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1",
               SPARK_LOCAL_IP="127.0.0.1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-o",
           "addopts=-rfE", "--timeout", str(int(timeout)), *tests]
    t0 = time.monotonic()
    try:
        out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True,
                             timeout=timeout + 30)
    except subprocess.TimeoutExpired as e:
        text = ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes)
                else (e.stdout or ""))
        return "timeout", time.monotonic() - t0, "", text[-3000:]
    dt = time.monotonic() - t0
    text = out.stdout + out.stderr
    failed = [ln.split(" ", 1)[1].split(" - ")[0] for ln in text.splitlines()
              if ln.startswith(("FAILED ", "ERROR "))]
    if out.returncode == 0:
        status = "survived"
    elif out.returncode == 1:
        status = "killed"
    elif "Timeout" in text and failed:
        status = "timeout"
    else:
        status = "error"
    return status, dt, failed[0] if failed else "", text[-3000:]


def _verify_import(root: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(root))
    got = subprocess.run([sys.executable, "-c", "import lakevilla; print(lakevilla.__file__)"],
                         cwd=root, env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    if not got.startswith(str(root)):
        raise SystemExit(f"the scratch copy does not import its own lakevilla ({got}); "
                         "cannot run mutations")


def run_one(m: Mutation, timeout: float, keep: bool = False,
            tests: tuple[str, ...] | None = None) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix=f"lv-mut-{m.name}-", dir="/tmp"))
    try:
        _copy_repo(scratch)
        apply(m, scratch)
        status, dt, failed, tail = _pytest(scratch, tests or m.tests, timeout)
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
    if status == "survived" and m.equivalent:
        status = "equivalent"
    return {"name": m.name, "area": m.area, "file": m.file, "breaks": m.breaks,
            "tests": list(m.tests),
            "status": status, "killed_by": failed or m.equivalent, "seconds": round(dt, 1),
            "output": tail if status != "killed" else ""}


def baseline(muts: list[Mutation], timeout: float) -> float:
    scratch = Path(tempfile.mkdtemp(prefix="lv-mut-baseline-", dir="/tmp"))
    try:
        _copy_repo(scratch)
        _verify_import(scratch)
        tests = []
        for m in muts:
            tests += [t for t in m.tests if t not in tests]
        status, dt, failed, tail = _pytest(scratch, tuple(tests), timeout * 4)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if status != "survived":
        raise SystemExit(f"baseline: the selected tests do not pass unmutated "
                         f"({status}, {failed}):\n{tail}")
    return dt


def _short(test: str) -> str:
    return re.sub(r"^tests/", "", test)


def table(results: list[dict]) -> str:
    rows = [("mutation", "file", "status", "killed by", "s")]
    for r in results:
        by = "(see its reason)" if r["status"] == "equivalent" else _short(r["killed_by"])
        rows.append((r["name"], r["file"].replace("lakevilla/", ""), r["status"], by,
                     f"{r['seconds']:.0f}"))
    w = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [" | ".join(c.ljust(w[i]) for i, c in enumerate(row)) for row in rows]
    lines.insert(1, "-+-".join("-" * x for x in w))
    return "\n".join(lines)


def markdown(results: list[dict]) -> str:
    """The table for tests/README.md."""
    out = ["| mutation | file | what it breaks | result | killed by | s |",
           "|---|---|---|---|---|---|"]
    for r in results:
        by = f"`{_short(r['killed_by'])}`" if r["status"] != "equivalent" else r["killed_by"]
        out.append(f"| `{r['name']}` | {r['file'].replace('lakevilla/', '')} | {r['breaks']} | "
                   f"{r['status']} | {by} | {r['seconds']:.0f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.mutations",
                                description=__doc__.splitlines()[0])
    p.add_argument("--only", help="comma-separated mutation names")
    p.add_argument("--list", action="store_true", help="list the mutations and exit")
    p.add_argument("--jobs", type=int, default=1, help="mutations run in parallel (default 1)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per mutation's test run")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip the unmutated run of the selected tests")
    p.add_argument("--keep", action="store_true",
                   help="keep the scratch copies (to debug a survivor)")
    p.add_argument("--tests", help="run these pytest arguments instead of each mutation's own "
                   "selection (space-separated; to look for a test that kills a survivor)")
    p.add_argument("--out", default=str(ROOT / "results" / "mutations.json"))
    args = p.parse_args(argv)
    muts = _select(MUTATIONS, args.only)
    if args.list:
        for m in muts:
            print(f"{m.name:40} {m.file:36} {m.breaks}")
        return 0
    check_all_apply(muts)
    t0 = time.monotonic()
    base = None if args.no_baseline or args.tests else baseline(muts, args.timeout)
    if base is not None:
        print(f"baseline: the selected tests pass unmutated ({base:.0f} s)", flush=True)
    results: list[dict] = []

    def one(m: Mutation) -> dict:
        r = run_one(m, args.timeout, args.keep, tuple(args.tests.split()) if args.tests else None)
        print(f"{r['status']:9} {r['seconds']:6.1f}s  {m.name}  {_short(r['killed_by'])}",
              flush=True)
        return r

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(one, muts))
    total = time.monotonic() - t0
    print()
    print(table(results))
    counts = {s: sum(r["status"] == s for r in results)
              for s in ("killed", "timeout", "survived", "equivalent", "error")}
    print(f"\n{len(results)} mutations: " + ", ".join(f"{n} {s}" for s, n in counts.items()) +
          f"; {total / 60:.1f} min")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"total_seconds": round(total, 1), "baseline_seconds": base,
                               "counts": counts, "results": results}, indent=1))
    out.with_suffix(".md").write_text(markdown(results) + "\n")
    print(f"written {out} and {out.with_suffix('.md')}")
    return 0 if counts["survived"] == 0 and counts["error"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
