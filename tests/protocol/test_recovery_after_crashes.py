"""Recovery after a crash at every store call of an R transaction (at the tail, in place, queued):
``recover()`` leaves the table all or nothing, closes or frees every marker, and the crashed
client resumes from its sublogs and finishes; ``resume`` alone does the same. The crash sweeps of
the other feature sets sit with them (test_multi_table_commits.py, test_isolation.py,
test_plain_delta.py, statements/test_overwrite.py, test_create_in_txn.py, test_merge.py)."""

from __future__ import annotations

import time
from collections import Counter

import pytest

import lakevilla as lv
from tests.conftest import ON_AZURE_AND_GCS, rows
from tests.helpers import (
    count_calls,
    crash_plans,
    crash_stride,
    numbered_table,
    open_markers,
    r_transaction_on,
    run_crashing,
)

LATER = 10_000.0  # seconds: a recovering client whose clock is past every marker's expiry
MODES = ["tail", "in_place"]


def _later_clock():
    return time.time() + LATER


@pytest.mark.parametrize("mode", MODES)
@ON_AZURE_AND_GCS
def test_crash_at_every_store_call_of_an_r_transaction(backend, mode):
    """After a crash anywhere, recovery leaves all or nothing, frees every marker past its
    expiry, and the crashed client can resume from its sublogs and finish."""
    _sweep_r_transaction(backend, mode, queued=False)


def test_crash_at_every_store_call_of_a_queued_r_transaction(local_backend):
    """The same for an R transaction at the tail that queued (as after lost commit races): its
    marker is claimed before its commit and closed after it, so a crash between the two leaves a
    running marker whose commit landed, which recovery must close, not free."""
    _sweep_r_transaction(local_backend, "tail", queued=True)


def _sweep_r_transaction(backend, mode, queued):
    base = backend.store()
    steps = [
        lambda t, name: t.update(name, set={"value": "value + 1"}, where="id = 1"),
        lambda t, name: t.insert(name, {"id": [8], "value": [80]}),
        lambda t, name: t.delete(name, where="id = 3"),
    ]
    holder: dict = {}
    action_on = r_transaction_on(steps, holder, queued=queued)

    def make(store):
        return backend.lake(store=store, commit_mode=mode, marker_ttl=5.0)

    numbered_table(backend, name="probe", n=3)
    before = backend.delta_rows("probe")
    n = count_calls(base, make, action_on("probe"))
    after = backend.delta_rows("probe")
    assert after != before
    seen = Counter()
    for i, (label, plan) in enumerate(crash_plans(n, every=crash_stride(backend, tables="one"))):
        name = f"t{i}"
        # identical history, so call numbers mean the same thing
        numbered_table(backend, name=name, n=3)
        run_crashing(base, plan, make, action_on(name))
        recoverer = backend.lake(commit_mode=mode, marker_ttl=5.0, clock=_later_clock)
        report = recoverer.recover(tables=[name])
        assert open_markers(recoverer, name) == [], label
        got = rows(recoverer.read(name))
        assert got == backend.delta_rows(name), label
        assert got in (before, after), f"{label}: partial state {got}"
        if got == after:
            assert report.freed == [], (
                f"{label}: a committed transaction's marker was freed, not closed")
            # resuming a transaction that committed must refuse (or find nothing to resume)
            with pytest.raises((lv.TransactionStateError, lv.LakeVillaError)) as info:
                backend.lake(commit_mode=mode, marker_ttl=5.0, clock=_later_clock).resume(
                    holder["id"])
            assert "already committed" in str(info.value) or "no sublogs" in str(info.value), label
            assert rows(recoverer.read(name)) == after == backend.delta_rows(name), label
            seen["committed"] += 1
            continue
        try:
            resumed = backend.lake(commit_mode=mode, marker_ttl=5.0).resume(holder["id"])
        except lv.LakeVillaError as e:
            assert "no sublogs" in str(e), label  # died before its first sublog: re-run instead
            seen["re-run"] += 1
            continue
        done = len(resumed.operations)
        for step in steps[done:]:  # the client issues what the sublogs do not hold
            step(resumed, name)
        resumed.commit()
        resumed.lake.flush()  # its marker closes in the background
        assert rows(recoverer.read(name)) == after, label
        assert open_markers(recoverer, name) == [], label
        seen["resumed"] += 1
    assert seen["resumed"] > 0 and seen["committed"] > 0 and seen["re-run"] > 0, (n, seen)


@pytest.mark.parametrize("mode", MODES)
def test_resume_without_recover_at_every_crash_point(local_backend, mode):
    """No ``recover()`` first: ``resume`` alone settles the crashed client's markers, refuses
    a transaction whose commit landed (its data stays), and otherwise finishes it, leaving
    no open marker; plain readers and delta-rs see all or nothing throughout."""
    backend = local_backend
    base = backend.store()
    steps = [
        lambda t, name: t.update(name, set={"value": "value + 1"}, where="id = 1"),
        lambda t, name: t.insert(name, {"id": [8], "value": [80]}),
    ]
    holder: dict = {}
    action_on = r_transaction_on(steps, holder)

    def make(store):
        return backend.lake(store=store, commit_mode=mode, marker_ttl=5.0, delete_sublogs=False)

    numbered_table(backend, name="probe", n=3)
    before = backend.delta_rows("probe")
    n = count_calls(base, make, action_on("probe"))
    after = backend.delta_rows("probe")
    seen = Counter()
    for i, (label, plan) in enumerate(crash_plans(n)):
        name = f"t{i}"
        numbered_table(backend, name=name, n=3)
        holder.pop("id", None)
        run_crashing(base, plan, make, action_on(name))
        state = backend.delta_rows(name)
        assert state in (before, after), f"{label}: partial state {state}"
        if "id" not in holder:
            continue
        later = backend.lake(commit_mode=mode, marker_ttl=5.0, clock=_later_clock)
        try:
            resumed = later.resume(holder["id"])
        except lv.TransactionStateError as e:
            assert state == after, f"{label}: refused to resume an uncommitted transaction: {e}"
            assert "already committed" in str(e), label
            later.flush()
            assert backend.delta_rows(name) == after, f"{label}: a refused resume changed the table"
            seen["refused"] += 1
            continue
        except lv.LakeVillaError as e:
            assert "no sublogs" in str(e), label
            if state == after:
                # R alone at the tail: its commit is its own decision and goes out beside the
                # entries still on their way behind the statements, so a crash can land it
                # without them (seen under load in CI). Committed, then, with nothing to resume
                assert mode == "tail", f"{label}: committed without its entries"
                log = later._client.log(name)
                txns = {(c.lakevilla or {}).get("txn")
                        for _, c in log.commits_between(-1, log.latest_version())}
                assert holder["id"] in txns, (
                    f"{label}: the table changed without a commit of the transaction")
            seen["nothing"] += 1
            continue
        assert state == before, f"{label}: resumed a transaction whose commit had landed"
        for step in steps[len(resumed.operations):]:
            step(resumed, name)
        resumed.commit()
        later.flush()
        assert backend.delta_rows(name) == after == rows(later.read(name)), label
        assert open_markers(later, name) == [], (
            f"{label}: resume left the crashed client's marker open")
        seen["resumed"] += 1
    assert seen["resumed"] > 0 and seen["refused"] > 0 and seen["nothing"] > 0, seen


@pytest.mark.parametrize("who", ["leader", "rider"])
def test_crash_at_every_store_call_of_a_group_commit(backend, who, monkeypatch):
    """A leader carrying a rider in one version (group commit), one of the two dying at each of
    its store calls while the other goes on: the survivor's answer holds, and after
    ``recover()`` each transaction's update is in the table exactly once or not at all (never
    twice: a request names one version, and a rider commits by itself only above it or by
    fencing it). The dead one is then settled by ``resume``: refused if its update landed
    (carried, or its own put), else finished from its sublogs."""
    from lakevilla.core import riding
    from lakevilla.store import FaultInjectingStore
    from tests.helpers import CrashSweep, RideGates, run_group

    monkeypatch.setattr(riding, "RIDE_TIMEOUT", 0.3)
    base = backend.store()
    work = {"leader": lambda t: t.update(t_name[0], set={"value": "value + 5"}, where="id = 1"),
            "rider": lambda t: t.update(t_name[0], set={"value": "value + 5"}, where="id = 2")}
    t_name = ["t"]
    sweep = CrashSweep(every=crash_stride(backend, tables="one"))
    seen: Counter = Counter()
    for i, (label, plan) in enumerate(sweep):
        t_name[0] = name = f"t{i}"
        numbered_table(backend, name=name, n=3)
        gates = RideGates()
        dying = FaultInjectingStore(base, plan)
        lakes = {role: backend.lake(store=gates.store(dying if role == who else base, role),
                                    marker_ttl=5.0) for role in ("leader", "rider")}
        out = run_group(lakes, gates, name, work)
        sweep.record(dying.crashed)
        other = "rider" if who == "leader" else "leader"
        row = {"leader": 1, "rider": 2}
        recoverer = backend.lake(marker_ttl=5.0, clock=_later_clock)
        recoverer.recover(tables=[name])
        got = {r["id"]: r["value"] for r in rows(recoverer.read(name))}
        assert rows(recoverer.read(name)) == backend.delta_rows(name), label
        for role in ("leader", "rider"):
            assert got[row[role]] in (10 * row[role], 10 * row[role] + 5), f"{label}: {got}"
        if isinstance(out[other], lv.CommitResult):
            assert got[row[other]] == 10 * row[other] + 5, f"{label}: acknowledged, not there"
        elif isinstance(out[other], lv.TransactionAborted):
            assert got[row[other]] == 10 * row[other], f"{label}: aborted, but there"
        else:
            assert isinstance(out[other], lv.CommitPendingError), f"{label}: {out[other]!r}"
        if not dying.crashed:
            assert isinstance(out[who], lv.CommitResult), f"{label}: {out[who]!r}"
            seen["no crash"] += 1
            continue
        landed = got[row[who]] == 10 * row[who] + 5
        txn_id = out[who + ".txn"].id if who + ".txn" in out else None
        if txn_id is None:
            seen["died before it began"] += 1
            continue
        try:
            resumed = backend.lake(marker_ttl=5.0, clock=_later_clock).resume(txn_id)
        except lv.TransactionStateError as e:
            assert landed and "already committed" in str(e), f"{label}: {e}"
            seen["carried or committed"] += 1
            continue
        except lv.LakeVillaError as e:
            assert "no sublogs" in str(e), label
            seen["nothing to resume"] += 1
            continue
        assert not landed, f"{label}: resumed a transaction whose update landed"
        if not resumed.operations:
            work[who](resumed)
        resumed.commit()
        resumed.lake.flush()
        assert {r["id"]: r["value"] for r in rows(recoverer.read(name))}[row[who]] == (
            10 * row[who] + 5), label
        seen["resumed"] += 1
    print(f"\ngroup commit crash sweep [{who}]: {sweep.runs} runs, {dict(seen)}")
    if backend.kind == "local":  # every point: both ends of the crash occur
        assert seen["carried or committed"] > 0 and seen["resumed"] > 0, seen
