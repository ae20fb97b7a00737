"""What every benchmark shares: where the lake lives, how requests are slowed and
counted, which systems are compared, and how results are printed, saved and plotted.

Latency is simulated in one of two ways, chosen so that every system in a run pays
the same: on the local store by ``LatencyStore`` (lakevilla only; delta-rs then runs
unslowed and the table says so), on S3 by an HTTP proxy in front of moto that delays
every request by kind, so lakevilla and delta-rs cross the same slow link.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import multiprocessing as mp
import os
import queue
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlparse

import lakevilla as lv
from benchmarks import clouds
from benchmarks.http_kinds import classify_http
from lakevilla.store import (
    CLOUD_PROFILES,
    S3_SAME_REGION,
    CountingStore,
    LatencyProfile,
    LatencyStore,
    ObjectStore,
    open_store,
    uniform_latency,
)

# name -> lakevilla features ("" is plain Delta through lakevilla); None is delta-rs alone
SYSTEMS: dict[str, str | None] = {
    "delta-rs": None,
    "LV[DL]": "",
    "LV[R]": "R",
    "LV[R,CT]": "R,CT",
    "LV[I]": "I",
    "LV[R,CT,I]": "R,CT,I",
}


def add_common_args(p: argparse.ArgumentParser, default_out: str) -> None:
    p.add_argument("--quick", action="store_true", help="tiny sizes: seconds, for the test suite")
    p.add_argument("--store", choices=["local", "s3", "azure", "gcs"], default="local",
                   help="s3, azure, gcs: moto, Azurite or fake-gcs-server on 127.0.0.1")
    p.add_argument("--endpoint", default=None,
                   help="S3 endpoint (default: a moto server on 127.0.0.1)")
    p.add_argument("--latency", default="none",
                   help="'none', 's3' (a same-region S3 profile), a cloud's profile ('aws-s3', "
                        "'azure' (Premium), 'azure-standard', 'gcs': published conditional-write "
                        "latencies), 'cloud' (that of --store) or milliseconds per request")
    p.add_argument("--out", default=default_out, help="results folder (JSON + PNG)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help="comma-separated subset of " + ",".join(SYSTEMS))


CLOUD_OF_STORE = {"s3": "aws-s3", "azure": "azure", "gcs": "gcs"}


def latency_profile(spec: str, store: str = "local") -> LatencyProfile | None:
    if spec in ("none", "0", ""):
        return None
    if spec == "s3":
        return S3_SAME_REGION
    if spec == "cloud":
        if store not in CLOUD_OF_STORE:
            raise SystemExit("--latency cloud needs --store s3, azure or gcs")
        spec = CLOUD_OF_STORE[store]
    if spec == "s3-cw":  # the name group commit's figures were first measured under
        spec = "aws-s3"
    if spec in CLOUD_PROFILES:
        return CLOUD_PROFILES[spec]
    try:
        return uniform_latency(float(spec) / 1000.0)
    except ValueError:
        raise SystemExit(f"--latency {spec!r}: use none, s3, {', '.join(CLOUD_PROFILES)}, cloud "
                         "or milliseconds") from None


def _without(path: str, params: tuple[str, ...]) -> str:
    """``path`` without the query parameters ``params``."""
    if not params or "?" not in path:
        return path
    base, _, query = path.partition("?")
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in params]
    return f"{base}?{urlencode(kept)}" if kept else base


class QuietHTTPServer(ThreadingHTTPServer):
    """A proxy's server: a client or target that drops its connection (a test's client closed,
    an emulator stopped) is no error worth a traceback on stderr."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class LatencyProxy:
    """A loopback HTTP proxy that sleeps per request kind before forwarding to ``target``:
    S3, Azure Blob Storage or GCS (``http_kinds.py`` tells the kinds apart).

    ``profile=None`` forwards without delay; ``drop_headers`` are removed from requests and
    ``drop_query`` from their query strings (the tests use them to make an endpoint that
    ignores conditional writes). ``faults``, called with (method, path, headers) for every
    request, injects failures by answering with an action: ``"conflict"`` replies S3's
    ``409 ConditionalRequestConflict`` without forwarding; ``"truncate"`` forwards, then sends
    only half of the response body and drops the connection; ``(status, body)`` replies that
    (JSON) without forwarding (a 401 or 403 as a cloud sends them); None forwards normally."""

    def __init__(self, target: str, profile: LatencyProfile | None = None,
                 drop_headers: tuple[str, ...] = (), faults: Any = None,
                 drop_query: tuple[str, ...] = ()) -> None:
        dropped = {"host", "connection", *(h.lower() for h in drop_headers)}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                u = urlparse(outer.target)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                action = (outer.faults(self.command, self.path, self.headers) if outer.faults
                          else None)
                if isinstance(action, tuple):
                    self._reply(action[0], action[1], [("Content-Type", "application/json")])
                    return
                if action == "conflict":
                    self._reply(409,
                                b"<?xml version='1.0' encoding='UTF-8'?><Error>"
                                b"<Code>ConditionalRequestConflict</Code>"
                                b"<Message>A conflicting operation occurred.</Message></Error>",
                                [("Content-Type", "application/xml")])
                    return
                # the simulation
                time.sleep(outer.profile.delay(classify_http(self.command, self.path,
                                                             self.headers)))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in dropped}
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
                conn.request(self.command, _without(self.path, drop_query), body=body or None,
                             headers=headers)
                r = conn.getresponse()
                data = r.read()
                conn.close()
                # a HEAD's Content-Length is the object's size: passed on, not recomputed
                ours = ("transfer-encoding", "connection") + (
                    () if self.command == "HEAD" else ("content-length",))
                hdrs = [(k, v) for k, v in r.getheaders() if k.lower() not in ours]
                self._reply(r.status, data, hdrs, truncate=action == "truncate")

            def _reply(self, status: int, data: bytes, headers: list,
                       truncate: bool = False) -> None:
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                if not any(k.lower() == "content-length" for k, _ in headers):
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                if truncate:  # the body breaks off: the client sees the connection drop mid-read
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

            def log_message(self, *args: Any) -> None:
                pass

        self.target = target
        self.faults = faults
        self.profile = profile or LatencyProfile()
        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()


@dataclass
class Env:
    """A benchmark's storage: a root URI, options for lakevilla and delta-rs, latency."""

    kind: str
    root: str
    storage_options: dict[str, str] = field(default_factory=dict)
    profile: LatencyProfile | None = None
    latency_label: str = "none"
    _cleanup: list = field(default_factory=list, repr=False)

    def fresh_root(self, name: str) -> str:
        """A new, empty lake under this environment."""
        return f"{self.root}/{name}-{uuid.uuid4().hex[:8]}"

    def store(self, root: str) -> ObjectStore:
        """The store lakevilla uses: latency (local only; S3 pays it in the
        proxy), then counting."""
        s = open_store(root, self.storage_options or None)
        if self.kind == "local" and self.profile is not None:
            s = LatencyStore(s, self.profile)
        return s

    def lake(self, root: str, steps: bool = False,
             **kw: Any) -> tuple[lv.Lake, AreaCountingStore]:
        """A ``Lake`` over this environment's store, and the store that counts its requests
        (``steps``: also by protocol step)."""
        counting = AreaCountingStore(self.store(root), steps=steps)
        return lv.Lake(root, storage_options=self.storage_options or None, store=counting,
                       **kw), counting

    @property
    def delta_rs_slowed(self) -> bool:
        return self.kind in ("s3", "azure") or self.profile is None

    @property
    def delta_rs_runs(self) -> bool:
        """Whether delta-rs can work on this store here (no emulator serves its GCS)."""
        return self.kind != "gcs"

    def close(self) -> None:
        for fn in reversed(self._cleanup):
            try:
                fn()
            except Exception:  # noqa: BLE001
                pass


def make_env(args: argparse.Namespace) -> Env:
    profile = latency_profile(args.latency, args.store)
    if args.store == "local":
        d = tempfile.mkdtemp(prefix="lakevilla-bench-")
        env = Env("local", "file://" + d, {}, profile, args.latency)
        env._cleanup.append(lambda: shutil.rmtree(d, ignore_errors=True))
        return env
    if args.store in clouds.CLOUDS:
        return _cloud_env(args.store, profile, args.latency)[0]
    endpoint = args.endpoint
    env = Env("s3", "", {}, profile, args.latency)
    if endpoint is None:
        import logging

        from moto.server import ThreadedMotoServer

        from .moto_server import make_conditional_puts_atomic

        make_conditional_puts_atomic()  # moto's own check-then-store races (moto_server.py)
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        env._cleanup.append(server.stop)
    if profile is not None:
        proxy = LatencyProxy(endpoint, profile)
        env._cleanup.append(proxy.close)
        endpoint = proxy.url
    opts = {"AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
            "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
            "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    import boto3

    bucket = f"lv-bench-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                 aws_access_key_id=opts["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=opts["AWS_SECRET_ACCESS_KEY"]).create_bucket(Bucket=bucket)
    env.root = f"s3://{bucket}/bench"
    env.storage_options = opts
    return env


def _cloud_env(kind: str, profile: LatencyProfile | None, label: str,
               counting: bool = False) -> tuple[Env, CountingLatencyProxy | None, dict[str, str]]:
    """An Azure or GCS environment on its emulator: the env (through a proxy when there is a
    profile, or ``counting``), the counting proxy if any, and the options that reach the
    emulator directly."""
    env = Env(kind, "", {}, profile, label)
    endpoint, stop = clouds.start(kind)
    env._cleanup.append(stop)
    proxy: CountingLatencyProxy | None = None
    slow: LatencyProxy | None = None
    if counting:
        slow = proxy = CountingLatencyProxy(endpoint, profile)
    elif profile is not None:
        slow = LatencyProxy(endpoint, profile)
    reach = endpoint
    if slow is not None:
        env._cleanup.append(slow.close)
        reach = slow.url
    env.root = clouds.new_root(kind, endpoint, "bench")
    env.storage_options = clouds.options(kind, reach)
    return env, proxy, clouds.direct_options(kind, endpoint)


def percentile(values: Sequence[float], p: float) -> float:
    if not values:
        return float("nan")
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def progress(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="op", leave=False, dynamic_ncols=True)


def print_table(rows: list[dict[str, Any]], columns: list[str], title: str = "") -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
        return str(v)

    widths = {c: max(len(c), *(len(fmt(r.get(c, ""))) for r in rows)) if rows else len(c)
              for c in columns}
    lines = []
    if title:
        lines.append(title)
    lines.append("  ".join(c.ljust(widths[c]) for c in columns))
    lines.append("  ".join("-" * widths[c] for c in columns))
    for r in rows:
        lines.append("  ".join(fmt(r.get(c, "")).ljust(widths[c]) for c in columns))
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def write_json(out_dir: str | Path, name: str, payload: dict[str, Any]) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=_json_default))
    return path


def _json_default(o: Any) -> Any:
    if hasattr(o, "__dataclass_fields__"):
        return asdict(o)
    if isinstance(o, set | frozenset):
        return sorted(o)
    return str(o)


def run_info(args: argparse.Namespace, env: Env) -> dict[str, Any]:
    return {"store": env.kind, "latency": env.latency_label, "quick": bool(args.quick),
            "seed": args.seed, "delta_rs_pays_latency": env.delta_rs_slowed,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


def plot(out_dir: str | Path, name: str, draw) -> Path:
    """Save a matplotlib figure drawn by ``draw(fig)`` (Agg backend, no screen needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig = plt.figure(figsize=(8, 4.5))
    draw(fig)
    fig.tight_layout()
    path = out / f"{name}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------
# Request counting that also sees delta-rs, and counting by where a request goes.
# (Added for ycsb.py / costs.py / tables.py; the helpers above are unchanged.)
# ---------------------------------------------------------------------------------------

READ_KINDS = ("get", "head", "list")
WRITE_KINDS = ("put", "put_if_absent", "put_if_match", "delete")


class CountingLatencyProxy(LatencyProxy):
    """``LatencyProxy`` that also counts the requests crossing it, by kind.

    delta-rs talks to S3 through its own Rust client, so this is the only honest place
    to observe its requests; lakevilla's cross it too (a check on CountingStore).
    ``profile=None`` forwards without delay.
    """

    def __init__(self, target: str, profile: LatencyProfile | None = None) -> None:
        super().__init__(target, profile)
        from collections import Counter

        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        outer = self
        base = self.server.RequestHandlerClass

        class Counted(base):  # type: ignore[misc, valid-type]
            # LatencyProxy writes headers and body in two sends; with Nagle on, the body
            # waits for the client's delayed ACK (~40 ms per request on loopback)
            disable_nagle_algorithm = True

            def _forward(self) -> None:
                outer._count(classify_http(self.command, self.path, self.headers))
                super()._forward()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        self.server.RequestHandlerClass = Counted

    def _count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1

    def reset(self) -> dict[str, int]:
        with self._lock:
            old, self.counts = dict(self.counts), type(self.counts)()
        return old

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


@dataclass
class CountedEnv:
    """An ``Env`` whose S3 traffic crosses a counting proxy (which also applies the latency).

    ``direct_options`` reach the store unslowed and uncounted: for setting up big fixtures
    (a 1,000-commit table) without paying the simulation. On the local store there is no
    proxy: delta-rs' requests are not observable there (reported as n/a).
    """

    env: Env
    proxy: CountingLatencyProxy | None
    direct_options: dict[str, str]

    def direct_store(self, root: str) -> ObjectStore:
        return open_store(root, self.direct_options or None)

    @property
    def judge_options(self) -> dict[str, str]:
        """What delta-rs, the judge, opens the lake with: directly where it can; on Azure
        through the environment's Azurite URL (delta-rs' endpoint options fail there)."""
        if self.env.kind == "azure":
            return self.env.storage_options
        return self.direct_options or self.env.storage_options

    def close(self) -> None:
        self.env.close()


def clients_kind(workers: str) -> Any:
    """What a benchmark's clients run in and talk through (``Process``, ``Queue``, ``Event``,
    ``Barrier``): spawned processes (``processes``), or daemon threads of this process
    (``threads``: no ~1.5 CPU s of imports per client, for the suite's quick runs)."""
    if workers == "threads":
        return SimpleNamespace(Process=functools.partial(threading.Thread, daemon=True),
                               Queue=queue.Queue, Event=threading.Event,
                               Barrier=threading.Barrier)
    return mp.get_context("spawn")


def start_moto_process(timeout: float = 60.0) -> tuple[str, Any]:
    """moto's S3 server in its own process: in-process it shares the benchmark's GIL with
    the latency proxy, and under many clients the two of them become the bottleneck."""
    import sys

    from benchmarks.emulators import free_port, serve

    port = free_port()
    stop = serve([sys.executable, "-m", "benchmarks.moto_server", "-H", "127.0.0.1", "-p",
                  str(port)], port, "/", "moto", timeout)
    return f"http://127.0.0.1:{port}", stop


def make_counted_env(args: argparse.Namespace) -> CountedEnv:
    """Like ``make_env``, but S3 requests of every client (delta-rs included) are counted,
    and a moto server we start runs in its own process."""
    if args.store in clouds.CLOUDS:
        profile = latency_profile(args.latency, args.store)
        env, proxy, direct = _cloud_env(args.store, profile, args.latency, counting=True)
        return CountedEnv(env, proxy, direct)
    raw = argparse.Namespace(**{**vars(args), "latency": "none"})
    stop_moto = None
    if args.store == "s3" and args.endpoint is None:
        raw.endpoint, stop_moto = start_moto_process()
    env = make_env(raw)
    if stop_moto is not None:
        env._cleanup.insert(0, stop_moto)  # cleanups run in reverse: moto stops last
    profile = latency_profile(args.latency, args.store)
    env.profile, env.latency_label = profile, args.latency
    if env.kind != "s3":
        return CountedEnv(env, None, {})
    direct = dict(env.storage_options)
    proxy = CountingLatencyProxy(direct["AWS_ENDPOINT_URL"], profile)
    env._cleanup.append(proxy.close)
    env.storage_options = {**direct, "AWS_ENDPOINT_URL": proxy.url}
    return CountedEnv(env, proxy, direct)


def request_area(key: str, detail: bool = False) -> str:
    """Which layer a key belongs to: the Delta log, lakevilla's own folders, or table data.
    ``detail`` splits the first two by what the request is for (where a benchmark's requests
    go): log commits and markers, checkpoints, the checkpoint hint; sublogs, transaction
    records, the global log, other lakevilla objects."""
    k = "/" + key
    if "/_delta_log/" in k or k.endswith("/_delta_log"):
        if not detail:
            return "log"
        name = k.rsplit("/", 1)[-1]
        if name == "_last_checkpoint":
            return "log:hint"
        return "log:checkpoint" if ".checkpoint" in name else "log:commit"
    if "/_lakevilla/" in k or k.endswith("/_lakevilla") or key.startswith("_lakevilla"):
        if not detail:
            return "lakevilla"
        if "/_lakevilla/gvl/" in k:
            return "lakevilla:gvl"
        # txns/<attempt>.json is a record, txns/<txn>/<seq>.json a sublog
        if "/_lakevilla/txns/" in k:
            rest = k.split("/_lakevilla/txns/", 1)[1]
            return "lakevilla:sublog" if "/" in rest else "lakevilla:record"
        return "lakevilla:other"
    return "data"


# The protocol step a request serves, told by the functions on the asking thread's stack (the
# first rule that matches wins): what a crowd's requests are spent on (issue 56's split).
_STEP_RULES: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("cleanup", "/core/deletes.py", frozenset()),
    ("checkpoint", "/markers/checkpoints.py", frozenset()),
    ("checkpoint", "/delta/checkpoint.py", frozenset()),
    ("redo", "/recovery/redo.py", frozenset({"on_conflict"})),
    ("redo", "/statements/view.py", frozenset({"redo"})),
    ("sublog", "/recovery/journal.py", frozenset()),
    ("marker", "/markers/marker.py", frozenset({"claim", "rewrite"})),
    ("marker", "/markers/heartbeats.py", frozenset()),
    ("read_wait", "/core/read_wait.py", frozenset()),
    ("wait_probe", "/core/markerset.py", frozenset({"_landed_above"})),
    ("wait", "/markers/wait.py", frozenset()),
    ("wait", "/core/markerset.py", frozenset({"running_predecessors"})),
    ("commit", "/markers/publish.py", frozenset()),
    ("commit", "/complex_txn/record.py", frozenset()),
    ("commit", "/delta/log.py", frozenset({"write_commit"})),
    ("commit", "/isolation/decide.py", frozenset()),
    ("lost_race", "/core/per_table.py", frozenset({"catch_up"})),
    ("validate", "/core/validate.py", frozenset()),
    ("global_log", "/isolation/", frozenset()),
    ("statements", "/statements/", frozenset()),
    ("statements", "/engines/", frozenset()),
    ("log_reads", "/delta/", frozenset()),
)


def request_step(depth: int = 3) -> str:
    """The protocol step the calling thread's request serves (``_STEP_RULES``), else
    ``other`` (snapshot loads outside a statement, the client's own upkeep)."""
    import sys

    best = len(_STEP_RULES)
    f = sys._getframe(depth)
    while f is not None:
        code = f.f_code
        rule = _RULE_OF.get(code)
        if rule is None:
            rule = _RULE_OF[code] = _rule_of(code.co_filename.replace("\\", "/"), code.co_name)
        best = min(best, rule)
        f = f.f_back  # type: ignore[assignment]
    return _STEP_RULES[best][0] if best < len(_STEP_RULES) else "other"


_RULE_OF: dict[Any, int] = {}  # code object -> the first rule it matches (len: none)


def _rule_of(filename: str, name: str) -> int:
    if "/lakevilla/" in filename:
        for i, (_, where, names) in enumerate(_STEP_RULES):
            if where in filename and (not names or name in names):
                return i
    return len(_STEP_RULES)


class AreaCountingStore(CountingStore):
    """``CountingStore`` that also counts by (kind, area): the paper's Figure 14 counts only
    metadata requests (log + lakevilla), not data-file reads and writes. It counts wherever
    ``CountingStore`` counts, so that every request has an area. ``steps``: also by the
    protocol step that asked (``request_step``: a walk of the stack per request)."""

    def __init__(self, inner: ObjectStore, detail: bool = False, steps: bool = False) -> None:
        super().__init__(inner)
        from collections import Counter

        self.by_area: Counter[tuple[str, str]] = Counter()
        self.by_step: Counter[str] = Counter()
        self._detail = detail
        self._steps = steps

    def _tally(self, kind: str, key: str) -> None:
        self.by_area[(kind, request_area(key, self._detail))] += 1
        if self._steps:
            self.by_step[request_step()] += 1

    def reset(self):
        with self._lock:
            self.by_area = type(self.by_area)()
            self.by_step = type(self.by_step)()
        return super().reset()

    def area_snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self.by_area)

    def step_snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.by_step)


def reads_writes(counts: dict[str, int] | Any) -> tuple[int, int]:
    """(GET+HEAD+LIST, PUT+conditional PUTs+DELETE) of a per-kind count."""
    return (sum(counts.get(k, 0) for k in READ_KINDS), sum(counts.get(k, 0) for k in WRITE_KINDS))


def per(counts: dict[str, int] | Any, n: float) -> dict[str, float]:
    """Per-unit averages of a per-kind count (every kind present, zeros included)."""
    n = max(n, 1)
    return {k: counts.get(k, 0) / n for k in (*READ_KINDS, *WRITE_KINDS)}


def finite_or_none(x: float) -> float | None:
    """JSON has no NaN: missing measurements become null."""
    return None if x != x or x in (float("inf"), float("-inf")) else float(x)


def parse_systems(spec: str) -> dict[str, str | None]:
    """``--systems`` as a dict, splitting on the commas outside brackets
    ("LV[R,CT]" is one name)."""
    names, depth, cur = [], 0, ""
    for ch in spec:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            names.append(cur.strip())
            cur = ""
        else:
            cur += ch
    names.append(cur.strip())
    names = [n for n in names if n]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise SystemExit(f"unknown systems {unknown}; choose from {list(SYSTEMS)}")
    return {n: SYSTEMS[n] for n in names}


def parse_with_quick(p: argparse.ArgumentParser, argv: list[str] | None,
                     quick: dict[str, Any]) -> argparse.Namespace:
    """Parse ``argv``; with ``--quick``, every option the user left at its default takes
    the quick value instead (an explicit option always wins)."""
    args = p.parse_args(argv)
    if args.quick:
        defaults = p.parse_args([])
        for name, v in quick.items():
            if getattr(args, name) == getattr(defaults, name):
                setattr(args, name, v)
    return args


def add_commit_mode_arg(p: argparse.ArgumentParser) -> None:
    """DESIGN section 4: benchmarks run in both commit modes (tail is lakevilla's default)."""
    p.add_argument("--commit-mode", choices=["tail", "in_place"], default="tail",
                   help="where lakevilla's marker-based commits go (tail: a new version; "
                        "in_place: the marker's)")
