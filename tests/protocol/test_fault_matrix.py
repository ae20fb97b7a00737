"""The fault matrix (issue 10): every store request a two-table transaction makes, for each
feature set, times three faults, each checked against what the caller was told.

The cases are generated, not listed: a fault-free run records the transaction's requests
(kind and key, ids and file names normalised); each case then injects one fault at the
n-th occurrence of one such request, so parallel requests reordering between runs do not
move the fault. The faults, under ``RetryingStore`` as S3 clients run:

* ``fail_before``: the request fails and is not applied (a 403, a full disk);
* ``fail_after``: it is applied, then the client sees an error;
* ``exhaust_after``: it is applied, then it and every later request on that key fail
  (the client's retries run out; reading the key back fails too).

The caller gets one of four answers, and no other exception: returned; ``TransactionAborted``
(a store failure before any decision is an abort, ``reason="storage"``); ``PartialCommitError``
(R and ``""`` commit table by table); ``CommitPendingError``. After each case, with a healthy
client, each table shows the transaction entirely or not at all, as the answer said
(returned: visible at once; aborted: absent; partial: what it names; pending: settled by
``recover()``, still all or nothing across the tables of a CT/I transaction); lakevilla and
delta-rs read the same rows; no version names
a missing data file; after ``recover()`` no marker runs, no record is COMMITTING, no
global-log write is pending. Every case on the local store, a sample on S3 and Azure, a
smaller one on GCS (see ``MATRIX_STRIDES``)."""

from __future__ import annotations

import re
import shutil
import time
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import lakevilla as lv
from lakevilla.complex_txn import record as records
from lakevilla.isolation import resolve as gvl_resolve
from lakevilla.markers.marker import RUNNING, marker_of
from lakevilla.store import FaultInjectingStore, FaultPlan, RetryingStore, open_store, settle
from tests.conftest import ON_AZURE_AND_GCS, Backend

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])
FEATURES = ["", "R", "R,CT", "I", "R,CT,I", "R+create", "R,CT+create"]
FAULTS = ("fail_before", "fail_after", "exhaust_after")
BEFORE = {"a": {1: 0, 2: 0}, "b": {11: 0, 12: 0}, "c": None}  # None: the table does not exist
AFTER = {"a": {1: -5, 2: 0}, "b": {11: 5, 12: 0}, "c": {21: 5}}
# a case costs ~1 s on moto: every 32nd on S3 and Azure, every 64th on GCS (coprime to 3: every
# fault kind); locally every one
MATRIX_STRIDE_S3 = 32
MATRIX_STRIDES = {"local": 1, "s3": MATRIX_STRIDE_S3, "azure": MATRIX_STRIDE_S3, "gcs": 64}
_IDS = re.compile(r"[0-9a-f]{13}-[0-9a-f]{16}(\.\d+)?"
                  r"|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _norm(key: str) -> str:
    return _IDS.sub("*", key)


@pytest.fixture(autouse=True)
def _fast_settle(monkeypatch):
    # the read-back rounds stay, their backoff shrinks
    monkeypatch.setattr(settle, "FIRST_DELAY", 0.001)


def _populate(lake: lv.Lake) -> None:
    for i, t in enumerate(("a", "b")):
        lake.create_table(t, T)
        with lake.transaction("") as txn:
            txn.insert(t, {"id": [10 * i + 1, 10 * i + 2], "value": [0, 0]})


class Lakes:
    """Fresh identical lakes, one per case, copied from one template: a folder locally, a
    prefix on a cloud (objects copied through the store)."""

    def __init__(self, backend: Backend, tmp: Path) -> None:
        self.backend = backend
        self.template = tmp / "template"
        if backend.kind == "local":
            _populate(lv.Lake("file://" + str(self.template)))
        else:
            template = Backend(backend.kind, f"{backend.uri}/template", backend.storage_options)
            _populate(template.lake())
            src = template.store()
            self.objects = [(m.key, src.get(m.key).data) for m in src.list("")]

    def fresh(self) -> Backend:
        name = uuid.uuid4().hex[:10]
        if self.backend.kind == "local":
            path = self.template.parent / name
            shutil.copytree(self.template, path)
            return Backend("local", "file://" + str(path))
        # a bucket per case: moto's LIST scans the whole bucket, which would grow with every case
        b = self.backend.fresh()
        dst = b.store()
        for key, data in self.objects:
            dst.put(key, data)
        return b


def _variant(features: str) -> tuple[str, tuple[str, str]]:
    """The feature set and the two tables of a case: ``+create`` moves the money into a table
    the transaction creates (its name reserved, then released or published)."""
    if features.endswith("+create"):
        return features[:-len("+create")], ("a", "c")
    return features, ("a", "b")


def _transaction(lake: lv.Lake, features: str, returned: list[str]):
    features, (_, second) = _variant(features)
    with lake.transaction(features) as txn:
        txn.update("a", set={"value": "value - 5"}, where="id = 1")
        returned.append("a")
        if second == "c":
            txn.create_table("c", T, data={"id": [21], "value": [5]})
        else:
            txn.update("b", set={"value": "value + 5"}, where="id = 11")
        returned.append(second)
    return txn


def _faulty_lake(b: Backend, plan: FaultPlan | None,
                 wrap=lambda store: store) -> tuple[lv.Lake, FaultInjectingStore]:
    inner = open_store(b.uri, b.storage_options or None)
    if isinstance(inner, RetryingStore):
        inner = inner.inner  # the fault goes below the retries, as a real one would
    faulty = FaultInjectingStore(inner, plan or FaultPlan())
    store = RetryingStore(faulty, attempts=3, base_delay=0.001, max_delay=0.004)
    return lv.Lake(b.uri, storage_options=b.storage_options or None, store=wrap(store),
                   marker_ttl=60.0), faulty


def requests_of(lakes: Lakes, features: str) -> list[tuple[str, str, int]]:
    """(kind, normalised key, occurrence) of every request of a fault-free run."""
    b = lakes.fresh()
    lake, probe = _faulty_lake(b, None)
    _transaction(lake, features, [])
    lake.flush()
    lake.close()
    seen: Counter = Counter()
    out = []
    for _n, kind, key in probe.log:
        if key.startswith("_lakevilla/probe/"):
            continue  # a cloud store's one-off check that conditional writes are honoured
        nk = _norm(key)
        seen[(kind, nk)] += 1
        out.append((kind, nk, seen[(kind, nk)]))
    return out


def _state(lake: lv.Lake, table: str) -> str:
    got = ({r["id"]: r["value"] for r in lake.read(table).to_pylist()}
           if lake.table_exists(table) else None)
    if got == AFTER[table]:
        return "visible"
    assert got == BEFORE[table], f"{table} shows a partial transaction: {got}"
    return "absent"


def _expected(features: str, outcome: str, err: BaseException | None,
              returned: list[str]) -> dict[str, str]:
    """What the caller was told, per table: visible, absent or either (settled by recovery)."""
    features, tables = _variant(features)
    if outcome == "returned":
        return dict.fromkeys(tables, "visible")
    if features == "":  # no atomicity: each statement is its own transaction
        failed = next(t for t in tables if t not in returned)
        exp = {t: "visible" if t in returned else "absent" for t in tables}
        if isinstance(err, lv.CommitPendingError):
            exp[failed] = "either"
        return exp
    if isinstance(err, lv.PartialCommitError):
        return {t: "visible" if t in err.committed else "absent" for t in tables}
    if isinstance(err, lv.CommitPendingError):
        if "CT" in features or "I" in features:
            return dict.fromkeys(tables, "same")  # all or nothing, settled by recovery
        return {t: "visible" if t in err.committed else "either" for t in tables}
    return dict.fromkeys(tables, "absent")


def _check_case(b: Backend, features: str, outcome: str, err: BaseException | None,
                returned: list[str], label: str) -> None:
    tables = _variant(features)[1]
    if outcome == "returned":  # visible at once, before anyone recovers anything
        assert {t: _state(b.lake(), t) for t in tables} == dict.fromkeys(tables, "visible"), label
    rec = b.lake(marker_ttl=60.0, clock=lambda: time.time() + 10_000)
    rec.recover()
    fresh = b.lake()
    got = {t: _state(fresh, t) for t in tables}
    for t, exp in _expected(features, outcome, err, returned).items():
        if exp == "same":
            assert len(set(got.values())) == 1, f"{label}: half a transaction: {got}"
        elif exp != "either":
            assert got[t] == exp, f"{label}: {outcome} ({err!r}) but {t} is {got[t]}"
    if got.get("c") == "absent":  # not created: the name is free again once recover() ran
        rec.create_table("c", T)  # (raises TableExistsError if a reservation outlived its owner)
        tables = ("a",)
    store = b.store()
    for t in tables:
        assert fresh.read(t).sort_by("id").to_pylist() == b.delta_rows(t), label
        log = fresh._client.log(t)
        present = {m.key for m in store.list(t + "/")}
        for v, c in log.commits_between(-1, log.latest_version()):
            assert not ((m := marker_of(c)) and m.state == RUNNING), (
                f"{label}: {t}@{v} still running")
            for a in c.adds:
                assert f"{t}/{a.path}" in present, f"{label}: {t}@{v} references a missing file"
    for meta in store.list("_lakevilla/txns/"):
        if "/" not in meta.key[len("_lakevilla/txns/"):]:
            r = records.read(store, meta.key[len("_lakevilla/txns/"):-5])
            assert r is None or r.state != records.COMMITTING, f"{label}: record left COMMITTING"
    head = fresh._client.gvl.head()
    for t, p in (head.pending.items() if head is not None else ()):
        assert gvl_resolve.find_pending(fresh._client.log(t), p) is not None, (
            f"{label}: announced write to {t} not done")


def _run_case(b: Backend, features: str, fault: str, kind: str, nkey: str,
              occ: int) -> tuple[str, BaseException | None, list[str], bool]:
    plan = FaultPlan(predicate=lambda k, key: k == kind and _norm(key) == nkey, **{fault: {occ}})
    lake, faulty = _faulty_lake(b, plan)
    returned: list[str] = []
    err: BaseException | None = None
    try:
        _transaction(lake, features, returned)
        outcome = "returned"
    except lv.CommitPendingError as e:
        outcome, err = "pending", e
    except lv.PartialCommitError as e:
        outcome, err = "partial", e
    except lv.TransactionAborted as e:
        outcome, err = "aborted", e
    lake.flush()
    lake.close()
    return outcome, err, returned, bool(faulty.injected)


@pytest.mark.parametrize("features", FEATURES, ids=lambda f: f or "DL")
@ON_AZURE_AND_GCS
def test_fault_matrix(backend, tmp_path, features):
    lakes = Lakes(backend, tmp_path)
    reqs = requests_of(lakes, features)
    stride = MATRIX_STRIDES[backend.kind]
    outcomes: Counter = Counter()
    i = 0
    for kind, nkey, occ in reqs:
        for fault in FAULTS:
            i += 1
            if (i - 1) % stride:
                continue
            b = lakes.fresh()
            label = f"[{features or 'DL'}] {fault} at {kind} {nkey} #{occ}"
            outcome, err, returned, hit = _run_case(b, features, fault, kind, nkey, occ)
            assert hit, (f"{label}: the request never came"
                         " (the run diverged from the fault-free one)")
            _check_case(b, features, outcome, err, returned, label)
            outcomes[outcome] += 1
    print(f"\nfault matrix {backend.kind} [{features or 'DL'}]: {len(reqs)} requests, "
          f"{sum(outcomes.values())} cases: {dict(outcomes)}")
    # every case: all answers occur (DL's statements decide nothing pending but their own
    # commits)
    if backend.kind == "local":
        assert outcomes["returned"] > 0 and outcomes["aborted"] > 0, outcomes
        assert outcomes["pending"] > 0, outcomes


# -- group commit: every request of a leader carrying a rider, and of the rider -------------------
GROUP_WORK = {"leader": ("value - 5", 1), "rider": ("value + 5", 2)}  # on a: id 1 -5, id 2 +5


def _group_case(b: Backend, who: str, plan: FaultPlan | None):
    """A leader and a rider of table a in one version (``RideGates`` lines them up), ``who``'s
    store faulty as ``plan`` says; the outcome of each, and ``who``'s faulty store."""
    from tests.helpers import RideGates, run_group

    gates = RideGates()
    lakes, probe = {}, None
    for role in GROUP_WORK:
        lake, faulty = _faulty_lake(b, plan if role == who else None,
                                    lambda store, role=role: gates.store(store, role))
        lakes[role] = lake
        if role == who:
            probe = faulty

    def work(role):
        return lambda txn: txn.update("a", set={"value": GROUP_WORK[role][0]},
                                      where=f"id = {GROUP_WORK[role][1]}")

    out = run_group(lakes, gates, "a", {role: work(role) for role in GROUP_WORK})
    assert probe is not None
    return out, probe


def _check_group_case(b: Backend, out: dict, label: str) -> None:
    rec = b.lake(marker_ttl=60.0, clock=lambda: time.time() + 10_000)
    rec.recover()
    fresh = b.lake()
    got = {r["id"]: r["value"] for r in fresh.read("a").to_pylist()}
    assert fresh.read("a").sort_by("id").to_pylist() == b.delta_rows("a"), label
    for role, (_, id_) in GROUP_WORK.items():
        done = {1: -5, 2: 5}[id_]
        assert got[id_] in (0, done), f"{label}: {role}'s update applied twice or half: {got}"
        answer = out[role]
        if isinstance(answer, lv.CommitResult):
            assert got[id_] == done, f"{label}: {role} was told committed, but {got}"
        elif isinstance(answer, lv.TransactionAborted):
            assert got[id_] == 0, f"{label}: {role} was told aborted, but {got}"
        else:
            assert isinstance(answer, lv.CommitPendingError), f"{label}: {role}: {answer!r}"
    store = b.store()
    log = fresh._client.log("a")
    present = {m.key for m in store.list("a/")}
    for v, c in log.commits_between(-1, log.latest_version()):
        assert not ((m := marker_of(c)) and m.state == RUNNING), f"{label}: a@{v} still running"
        for a in c.adds:
            assert f"a/{a.path}" in present, f"{label}: a@{v} references a missing file"


@pytest.mark.parametrize("who", list(GROUP_WORK))
def test_fault_matrix_of_a_group_commit(backend, tmp_path, who, monkeypatch):
    """Every request of a group commit's leader (its request, lead, LIST, the rider's request, the
    rider's statement run again, the commit) or of its rider (its request, lead, polls), times
    the three faults: each side's answer holds after ``recover()`` (returned: its update is
    there; aborted: it is not; pending: either), and no update is ever there twice."""
    from lakevilla.core import riding

    monkeypatch.setattr(riding, "RIDE_TIMEOUT", 0.3)
    lakes = Lakes(backend, tmp_path)
    out, probe = _group_case(lakes.fresh(), who, None)
    assert all(isinstance(out[r], lv.CommitResult) for r in GROUP_WORK), out
    assert out["leader.txn"].stats["riders_carried"] == 1
    seen: Counter = Counter()
    reqs = []
    for _n, kind, key in probe.log:
        if key.startswith("_lakevilla/probe/"):
            continue
        nk = _norm(key)
        seen[(kind, nk)] += 1
        reqs.append((kind, nk, seen[(kind, nk)]))
    stride = MATRIX_STRIDE_S3 if backend.kind == "s3" else 1
    outcomes: Counter = Counter()
    i = 0
    for kind, nkey, occ in reqs:
        for fault in FAULTS:
            i += 1
            if (i - 1) % stride:
                continue
            b = lakes.fresh()
            label = f"[group {who}] {fault} at {kind} {nkey} #{occ}"
            plan = FaultPlan(predicate=lambda k, key, kind=kind, nkey=nkey: (
                k == kind and _norm(key) == nkey), **{fault: {occ}})
            out, faulty = _group_case(b, who, plan)
            if not faulty.injected:  # a rider's polls vary in number from run to run
                assert kind == "get", f"{label}: the request never came"
                outcomes["not reached"] += 1
                continue
            _check_group_case(b, out, label)
            outcomes[type(out[who]).__name__] += 1
    print(f"\nfault matrix {backend.kind} [group {who}]: {len(reqs)} requests, "
          f"{sum(outcomes.values())} cases: {dict(outcomes)}")
    if backend.kind == "local":
        assert outcomes["CommitResult"] > 0 and outcomes["CommitPendingError"] > 0, outcomes
