"""`switchyard bench router`: what the router adds on top of backends that cost (almost) nothing.

Switchyard's router stands in front of two `switchyard engine --mock` processes; the anchors,
vllm-router and SGLang's router (`smg`), stand in front of two OpenAI-style HTTP mock workers.
Both mocks are Rust servers in router_core (tonic / axum), so the two sides' backends cost
alike, and the bench measures that too: each row reports its router's CPU per request and its
backends' CPU per request (user + system time of the process trees during the run, divided by
the requests served). Each target is driven by the same HTTP load generator (wrk; the set-up
installs Debian's package when it can) with 16-token completions: streaming at concurrency 1 and
32, non-streaming at 32. "direct" is the same load sent to one mock worker with no router,
"direct-grpc" the same requests streamed from one mock engine over gRPC (a grpc.aio client).
The anchors are installed by the set-up into their own venv (switchyard_bench/anchors.py).

Switchyard runs three times. "switchyard": its mock engines send, in each StartGenerate message,
every token already produced (as engine/server/servicer.py does); they cost nothing, so one
message carries all 16 tokens. "switchyard-16msg": the mock engines send one message per token
(`--no-coalesce`). Under round_robin both take the front's fast path (picked in Rust, no Python
per request). "switchyard-py": the same round_robin loaded as a policy file under another name,
so its Python runs once per request. In all, the router sends one SSE event per token, as the
anchors' workers do; the table says how many events and gRPC messages each response carried
(counted, not assumed).

--tracing measures what tracing costs the router instead (switchyard_bench/router_bench_tracing.py);
--replicas 1,2,4 measures router replicas instead (switchyard_bench/router_replicas_bench.py);
--repeat N measures every target N times, interleaved, and reports medians.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

import requests

from switchyard_bench.anchors import anchor_argv, ensure_anchors
from switchyard_bench.bench_procs import Procs, free_port, spawn, started_procs
from switchyard_bench.grpc_direct import count_messages, measure_grpc
from switchyard_bench.policies import round_robin_py
from switchyard_bench.proc_cpu import tree_cpu_s
from switchyard_bench.router_bench_tables import (
    Row,
    engine_twin,
    issue_table,
    load_line,
    summarize,
)
from switchyard_bench.router_bench_tracing import (
    NO_TRACING,
    median_rows,
    tracing_cost,
    tracing_variants,
)
from switchyard_bench.router_churn_bench import ChurnConfig, run_churn
from switchyard_bench.router_fleet_bench import (
    FleetBenchConfig,
    parse_engine_counts,
    run_fleet,
)
from switchyard_bench.router_replicas_bench import (
    ReplicaBenchConfig,
    parse_replicas,
    run_replicas,
)
from switchyard_bench.wrk_runner import Measure, ensure_wrk, measure_http

_PY = sys.executable


@dataclass(slots=True)
class RouterBenchConfig:
    duration_s: float = 10.0
    concurrencies: list[int] = field(default_factory=lambda: [1, 32])
    max_tokens: int = 16
    anchor_bin: str = "/tmp/anchors/bin"
    skip_anchors: bool = False
    non_streaming: bool = True
    json_out: str = ""
    tracing: bool = False  # compare routers with tracing off / on / sampled instead
    repeat: int = 1        # rounds; every target is measured once per round

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or self.max_tokens < 1 or not self.concurrencies or min(
                self.concurrencies) < 1 or self.repeat < 1:
            raise ValueError("duration > 0, max_tokens >= 1, concurrencies >= 1 and repeat >= 1 "
                             "required")


@dataclass(slots=True)
class Target:
    """One thing the load goes to: an HTTP url or a gRPC address, the router process(es) in
    front (none for the direct baselines) and the backend processes behind it."""

    name: str
    url: str = ""
    grpc_address: str = ""
    router: Procs = field(default_factory=list)
    backends: Procs = field(default_factory=list)


def _wait_serving(url: str, body: dict[str, object], timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException):
            if requests.post(url, data=json.dumps(body), timeout=2,
                             headers={"Content-Type": "application/json"}).status_code == 200:
                return True
        time.sleep(0.2)
    return False


def _body(cfg: RouterBenchConfig, stream: bool) -> dict[str, object]:
    return {"model": "default", "prompt": "Hello, my name is", "max_tokens": cfg.max_tokens,
            "stream": stream, "ignore_eos": True, "temperature": 0}


def count_sse_events(url: str, body: dict[str, object]) -> int:
    """`data:` events in one streamed response, [DONE] excluded."""
    with requests.post(url, data=json.dumps(body), stream=True, timeout=10,
                       headers={"Content-Type": "application/json"}) as r:
        return sum(1 for line in r.iter_lines() if line.startswith(b"data:")
                   and line.strip() != b"data: [DONE]")


# Switchyard variants: (row suffix, extra mock-engine flags, router environment, Python policy:
# round_robin from a policy file, so no fast path takes it).
_VARIANTS: tuple[tuple[str, list[str], dict[str, str], bool], ...] = (
    ("", [], NO_TRACING, False),
    ("-16msg", ["--no-coalesce"], NO_TRACING, False),
    ("-py", [], NO_TRACING, True))
PYTHON_POLICY = round_robin_py.NAME


def _python_policy_file() -> str:
    return round_robin_py.__file__

def _start_switchyard(started: Procs, suffix: str, flags: list[str],
                      env: dict[str, str], python_policy: bool = False) -> list[Target]:
    """A router in front of two mock engines, and the direct-grpc row of its first engine (the
    Python-policy router's engines are the same kind: no row of their own)."""
    ports = [free_port(), free_port()]
    engines = [spawn(started, [_PY, "-m", "engine.mock", "--port", str(p), *flags])
               for p in ports]
    router_port = free_port()
    policy = (["--policy-file", _python_policy_file(), "--policy", PYTHON_POLICY]
              if python_policy else ["--policy", "round_robin"])
    router = spawn(started, [_PY, "-m", "pyrouter.cli", "router", "--port", str(router_port),
                              *policy,
                              *[a for p in ports for a in ("--engine", f"127.0.0.1:{p}")]], env)
    routed = Target(f"switchyard{suffix}", url=f"http://127.0.0.1:{router_port}/v1/completions",
                    router=[router], backends=engines)
    if python_policy:
        return [routed]
    return [routed, Target(f"direct-grpc{suffix}", grpc_address=f"127.0.0.1:{ports[0]}",
                           backends=engines[:1])]


def _start_tracing_targets(started: Procs, span_dir: str) -> list[Target]:
    """--tracing compares routers with each other only: no direct HTTP row, no anchors; the
    untraced router's direct-grpc row stays (the per-response shape names it)."""
    targets: list[Target] = []
    for suffix, env, python_policy in tracing_variants(span_dir):
        pair = _start_switchyard(started, suffix, [], env, python_policy)
        targets += pair if not suffix else pair[:1]
    return targets


def _start_targets(cfg: RouterBenchConfig, started: Procs) -> list[Target]:
    worker_ports = [free_port(), free_port()]
    workers = [spawn(started, [_PY, "-m", "switchyard_bench.mock_openai_worker", "--port", str(p)])
               for p in worker_ports]
    worker_urls = [f"http://127.0.0.1:{p}" for p in worker_ports]
    targets = [Target("direct", url=f"{worker_urls[0]}/v1/completions", backends=workers[:1])]
    for suffix, flags, env, python_policy in _VARIANTS:
        targets += _start_switchyard(started, suffix, flags, env, python_policy)
    anchors = {} if cfg.skip_anchors else ensure_anchors(cfg.anchor_bin)
    for name, binary in anchors.items():
        port = free_port()
        proc = spawn(started, anchor_argv(name, binary, port, worker_urls, free_port()))
        targets.append(Target(name, url=f"http://127.0.0.1:{port}/v1/completions",
                              router=[proc], backends=workers))
    return targets


def _per_request_ms(cpu_s: float, m: Measure) -> float | None:
    return cpu_s * 1000 / m.requests if m.requests else None


def _measure(cfg: RouterBenchConfig, t: Target, stream: bool, c: int) -> Row:
    pids = ([p.pid for p in t.router], [p.pid for p in t.backends])
    router_before, backend_before = tree_cpu_s(pids[0]), tree_cpu_s(pids[1])
    if t.grpc_address:
        m = measure_grpc(t.grpc_address, c, cfg.duration_s, cfg.max_tokens)
    else:
        m = measure_http(t.url, _body(cfg, stream), c, cfg.duration_s)
    router_ms = _per_request_ms(tree_cpu_s(pids[0]) - router_before, m) if t.router else None
    backend_ms = _per_request_ms(tree_cpu_s(pids[1]) - backend_before, m)
    row = Row(t.name, stream, c, m, router_ms, backend_ms)
    cpu = "".join(f"  {label} CPU {v:.3f} ms/req" for label, v in
                  (("router", router_ms), ("backend", backend_ms)) if v is not None)
    print(f"  {t.name:<17} stream={stream!s:<5} c={c:<3} {m.rps:8.0f} req/s  p50 "
          f"{m.p50_ms:7.2f} ms  p99 {m.p99_ms:7.2f} ms  errors {m.errors}{cpu}  ({m.tool})",
          flush=True)
    return row


def run_bench(cfg: RouterBenchConfig) -> tuple[list[Row], dict[str, str]]:
    """The measured rows, and per target how many SSE events (or gRPC messages) a response has."""
    results: list[Row] = []
    shape: dict[str, str] = {}
    if ensure_wrk() is None:
        print("wrk unavailable: the Python load generator is used (it costs more CPU than the "
              "routers it measures; figures are not comparable with wrk's)", flush=True)
    span_dir = tempfile.mkdtemp(prefix="switchyard-bench-spans-")
    with started_procs() as started:
        targets = (_start_tracing_targets(started, span_dir) if cfg.tracing
                   else _start_targets(cfg, started))
        for t in list(targets):
            if t.grpc_address:
                n = count_messages(t.grpc_address, cfg.max_tokens)
                shape[t.name] = f"{n} gRPC msg{'' if n == 1 else 's'}"
            elif _wait_serving(t.url, _body(cfg, False)):
                shape[t.name] = f"{count_sse_events(t.url, _body(cfg, True))} SSE events"
            else:
                print(f"{t.name}: never answered; skipped", flush=True)
                targets.remove(t)
        for t in targets:
            if t.name.startswith("switchyard"):
                shape[t.name] += f" ({shape.get(engine_twin(t.name), '?')} from the engine)"
        print("per response: " + ", ".join(f"{k}: {v}" for k, v in shape.items()), flush=True)
        for _ in range(cfg.repeat):
            for stream in ([True, False] if cfg.non_streaming else [True]):
                for c in cfg.concurrencies:
                    if not stream and c == min(cfg.concurrencies) and len(cfg.concurrencies) > 1:
                        continue  # the non-streaming comparison is a throughput one
                    for t in targets:
                        if stream or not t.grpc_address:
                            results.append(_measure(cfg, t, stream, c))
    shutil.rmtree(span_dir, ignore_errors=True)
    return results, shape


def run(args: argparse.Namespace) -> int:
    p = argparse.ArgumentParser(prog="switchyard bench router", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--anchor-bin", default="/tmp/anchors/bin",
                   help="bin/ of the anchors' venv (created and filled when they are missing)")
    p.add_argument("--skip-anchors", action="store_true")
    p.add_argument("--streaming-only", action="store_true")
    p.add_argument("--json", default="", help="also write the raw rows here")
    p.add_argument("--tracing", action="store_true",
                   help="compare the router with tracing off, on (100%%) and sampled (10%%, 1%%), "
                        "and the Python-policy router off and at 100%%")
    p.add_argument("--repeat", type=int, default=1,
                   help="measure every target this many times, interleaved; report medians")
    p.add_argument("--replicas", type=parse_replicas, default=None, metavar="N,N,...",
                   help="measure N router replicas (peered and not) over two mock engines "
                        "instead, the largest --concurrency split over them "
                        "(switchyard_bench/router_replicas_bench.py)")
    p.add_argument("--engines", type=parse_engine_counts, default=None, metavar="N,N,...",
                   help="measure one router over N mock engines from one process, for each N: "
                        "throughput, CPU per request, p50/p99 and idle CPU, fast path and a "
                        "Python policy (switchyard_bench/router_fleet_bench.py)")
    p.add_argument("--idle-s", type=float, default=5.0,
                   help="with --engines: seconds the idle router's CPU is measured over")
    p.add_argument("--router-flags", default="",
                   help="with --engines: more `switchyard router` flags, one string")
    p.add_argument("--churn-s", type=float, default=0.0,
                   help="with --engines N (one count): instead, the router's memory over this "
                        "many seconds of KV churn — every prompt different, every engine's "
                        "prefix cache full and evicting (switchyard_bench/router_churn_bench.py)")
    p.add_argument("--cache-blocks", type=int, default=4096,
                   help="with --churn-s: blocks each mock engine's prefix cache holds")
    a = p.parse_args(getattr(args, "rest", None) or [])
    if a.churn_s > 0:
        if not a.engines or len(a.engines) != 1:
            p.error("--churn-s wants one engine count: --engines N")
        return run_churn(ChurnConfig(a.engines[0], a.churn_s, a.cache_blocks,
                                     max_tokens=a.max_tokens, json_out=a.json,
                                     router_flags=tuple(shlex.split(a.router_flags))))
    if a.engines:
        return run_fleet(FleetBenchConfig(a.engines, a.duration, max(a.concurrency),
                                          a.max_tokens, a.repeat, a.idle_s, a.json,
                                          router_flags=tuple(shlex.split(a.router_flags))))
    if a.replicas:
        return run_replicas(ReplicaBenchConfig(a.replicas, max(a.concurrency), a.duration,
                                               a.max_tokens, a.repeat, a.json))
    cfg = RouterBenchConfig(a.duration, a.concurrency, a.max_tokens, a.anchor_bin,
                            a.skip_anchors, not a.streaming_only, a.json, a.tracing, a.repeat)
    load_before = os.getloadavg()
    results, shape = run_bench(cfg)
    load_after = os.getloadavg()
    medians = median_rows(results)
    print(summarize(medians, shape), flush=True)
    print(issue_table(medians), flush=True)
    for line in tracing_cost(results):
        print(line, flush=True)
    print(load_line(load_before, load_after, os.cpu_count()), flush=True)
    if cfg.json_out:
        with open(cfg.json_out, "w", encoding="utf-8") as f:
            json.dump({"rows": [asdict(r) for r in results], "per_response": shape,
                       "load_before": load_before, "load_after": load_after}, f, indent=1)
    return 0
