"""One client's run (its operations, retried like an application would) and a batch of
clients run as threads of one worker."""

from __future__ import annotations

import random
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..runner import Gate
from .sessions import ClientSpec, LvSession, open_session
from .workload import Op, fill, insert_row


@dataclass
class ClientResult:
    client: int
    done: Counter = field(default_factory=Counter)          # committed operations by kind
    failed: Counter = field(default_factory=Counter)        # given up after --retries
    latency: dict[str, list[float]] = field(default_factory=dict)
    aborts: int = 0
    abort_reasons: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)         # anything that is not an abort
    stats: Counter = field(default_factory=Counter)
    requests: dict[str, int] = field(default_factory=dict)
    requests_by_area: dict[str, int] = field(default_factory=dict)  # lakevilla clients only
    start: float = 0.0
    end: float = 0.0
    # (key, field, token)
    committed_updates: list[tuple[int, str, str]] = field(default_factory=list)
    failed_updates: list[tuple[int, str, str]] = field(default_factory=list)
    committed_inserts: list[int] = field(default_factory=list)
    failed_inserts: list[int] = field(default_factory=list)
    rmw_committed: int = 0
    reads_found: int = 0
    reads_missing: int = 0

    def to_dict(self) -> dict[str, Any]:
        # not dataclasses.asdict: it rebuilds a Counter from (key, count) pairs, counting the pairs
        return {k: dict(v) if isinstance(v, Counter) else v for k, v in vars(self).items()}


def _do(sess: Any, txn: Any, op: Op) -> int:
    if op.kind == "read":
        return sess.read(txn, op.key)
    if op.kind == "scan":
        return sess.scan(txn, op.key, op.n)
    if op.kind == "update":
        sess.update(txn, op.key, op.field, fill(op.token))
        return 1
    if op.kind == "insert":
        sess.insert(txn, insert_row(op.key, op.token))
        return 1
    if op.kind == "rmw":
        return int(sess.rmw(txn, op.key, op.token))
    raise ValueError(op.kind)


def _record(res: ClientResult, ops: Sequence[Op], found: list[int], ok: bool) -> None:
    for op, n in zip(ops, found if ok else []):
        if op.kind == "read":
            res.reads_found += n > 0
            res.reads_missing += n == 0
    for op in ops:
        (res.done if ok else res.failed)[op.kind] += 1
        if op.kind == "update":
            (res.committed_updates if ok else res.failed_updates).append(
                (op.key, op.field, op.token))
        elif op.kind == "insert":
            (res.committed_inserts if ok else res.failed_inserts).append(op.key)
        elif op.kind == "rmw" and ok:
            res.rmw_committed += 1


def _backoff(delay: float) -> float:
    time.sleep(random.uniform(0, delay))  # jittered backoff before a retry, as lake.run does
    return min(delay * 2, 1.0)


def _unit(sess: Any, ops: Sequence[Op], res: ClientResult, retries: int,
          shared: Any = None) -> None:
    """Run ``ops`` as one transaction (or in ``shared``), retrying on aborts."""
    lat = res.latency
    t_unit = time.perf_counter()
    delay = 0.01
    for _attempt in range(retries + 1):
        txn = shared if shared is not None else sess.begin()
        found: list[int] = []
        try:
            for op in ops:
                t0 = time.perf_counter()
                found.append(_do(sess, txn, op))
                if len(ops) > 1:
                    lat.setdefault(op.kind, []).append(time.perf_counter() - t0)
            if shared is None:
                t0 = time.perf_counter()
                sess.commit(txn)
                if len(ops) > 1:
                    lat.setdefault("commit", []).append(time.perf_counter() - t0)
        except sess.aborts as e:
            res.aborts += 1
            res.abort_reasons[getattr(e, "reason", type(e).__name__)] += 1
            if shared is None:
                sess.rollback(txn)
            delay = _backoff(delay)
            continue
        except Exception as e:  # noqa: BLE001 - a failure of the system under test is a result
            res.errors.append(f"{type(e).__name__}: {e}"[:500])
            if shared is None:
                sess.rollback(txn)
            break
        if len(ops) == 1:
            lat.setdefault(ops[0].kind, []).append(time.perf_counter() - t_unit)
        _record(res, ops, found, ok=True)
        return
    _record(res, ops, [0] * len(ops), ok=False)


def run_ops(sess: Any, spec: ClientSpec, res: ClientResult, tick: Callable[[int], None]) -> None:
    if spec.mode == "client" and not sess.per_op_commit:
        _unit(sess, spec.ops, res, spec.retries)
        tick(len(spec.ops))
        return
    shared = sess.begin() if (spec.mode == "client" and isinstance(sess, LvSession)) else None
    for op in spec.ops:
        _unit(sess, [op], res, spec.retries, shared=shared)
        tick(1)
    if shared is not None:
        sess.commit(shared)


def run_batch(specs: list[ClientSpec], gate: Gate,
              tick: Callable[[int], None]) -> list[dict[str, Any]]:
    """Open and warm every client, pass the gate (the parent resets its counters once every
    worker is set up), run the clients in threads, then collect their results."""
    results = [ClientResult(client=s.client) for s in specs]
    sessions: list[Any] = []
    for s, r in zip(specs, results):
        try:
            sess = open_session(s)
            sess.warm(s.ops[0].key if s.ops else 0)
            sessions.append(sess)
        except Exception as e:  # noqa: BLE001
            r.errors.append(f"setup: {type(e).__name__}: {e}"[:500])
            sessions.append(None)
    start = threading.Event()

    def client(i: int) -> None:
        start.wait()
        sess, spec, res = sessions[i], specs[i], results[i]
        res.start = time.time()
        if sess is not None:
            try:
                run_ops(sess, spec, res, tick)
            except Exception as e:  # noqa: BLE001
                res.errors.append(f"{type(e).__name__}: {e}\n{traceback.format_exc()}"[:2000])
        res.end = time.time()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(len(specs))]
    for t in threads:
        t.start()
    gate()
    start.set()
    for t in threads:
        t.join()
    for sess, res in zip(sessions, results):
        if sess is None:
            continue
        try:
            res.requests = sess.finish()
            res.requests_by_area = sess.areas() if hasattr(sess, "areas") else {}
        except Exception as e:  # noqa: BLE001
            res.errors.append(f"finish: {type(e).__name__}: {e}"[:500])
        res.stats = Counter(sess.stats)
    return [r.to_dict() for r in results]
