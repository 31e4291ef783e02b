"""`switchyard bench router --engines 2,64,256,1024`: what one router costs as its fleet grows.

For each engine count N: N mock engines served from one process (switchyard_bench/mock_fleet.py;
synthetic tokens, NO model: this measures the router, not engines), and one `switchyard router`
in front of them (default --poll-s, as a user starts it), started with round_robin's logic
registered as a Python policy (switchyard_bench/policies/round_robin_py.py) so that
`PUT /admin/policy` can switch it between that and the Rust built-ins, as an operator would. Per N:
- idle: the router's CPU (user + system, its process tree) over --idle-s seconds with no
  requests, once every engine is healthy in GET /admin/engines, as % of one core, and its
  resident memory then (RSS: the engine table, prefix index, one connection and KV event
  stream per engine);
- per policy (round_robin, cache_aware, the Python policy): wrk at --concurrency streaming
  --max-tokens-token completions for --duration seconds: req/s, p50/p99 and router CPU per
  request, and the router's RSS after the run (the prefix index filled by the requests).
Rounds (--repeat) run every N once each, interleaved; the table gives medians, the min-max
spread, and each figure's ratio to the same policy's at the smallest N.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

import requests

from switchyard_bench.bench_procs import SWITCHYARD, Procs, free_port, spawn, started_procs
from switchyard_bench.policies import round_robin_py
from switchyard_bench.proc_cpu import tree_cpu_s, tree_rss_mb
from switchyard_bench.wrk_runner import ensure_wrk, measure_http

POLICIES = ("round_robin", "cache_aware", round_robin_py.NAME)


@dataclass(slots=True)
class FleetBenchConfig:
    engines: list[int]
    duration_s: float = 6.0
    concurrency: int = 32
    max_tokens: int = 16
    repeat: int = 1
    idle_s: float = 5.0
    json_out: str = ""
    policies: tuple[str, ...] = POLICIES
    router_flags: tuple[str, ...] = ()  # appended to the router's command line

    def __post_init__(self) -> None:
        if not self.engines or min(self.engines) < 1 or self.repeat < 1 or self.idle_s <= 0:
            raise ValueError("engine counts >= 1, repeat >= 1 and idle_s > 0 required")


@dataclass(slots=True)
class FleetRow:
    engines: int
    policy: str
    round: int
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    router_cpu_ms: float | None
    idle_core_pct: float
    ready_s: float
    idle_rss_mb: float = float("nan")
    rss_mb: float = float("nan")  # after this policy's run


@dataclass(slots=True)
class FleetRouter:
    url: str
    proc: Procs = field(default_factory=list)


def parse_engine_counts(text: str) -> list[int]:
    counts = [int(x) for x in text.split(",") if x.strip()]
    if not counts or min(counts) < 1:
        raise ValueError("--engines wants counts >= 1, e.g. 2,64,256,1024")
    return counts


def start_fleet(started: Procs, count: int, cache_blocks: int = 0) -> list[int]:
    """`count` mock engines from one process (their prefix caches evict beyond `cache_blocks`
    blocks each; 0: never); their ports once all serve."""
    ports_file = os.path.join(tempfile.mkdtemp(prefix="switchyard-fleet-"), "ports.json")
    proc = spawn(started, [sys.executable, "-m", "switchyard_bench.mock_fleet",
                           "--count", str(count), "--ports-file", ports_file,
                           "--cache-blocks", str(cache_blocks)])
    deadline = time.monotonic() + 120
    while not os.path.exists(ports_file):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the mock fleet of {count} engines did not start")
        time.sleep(0.1)
    with open(ports_file) as f:
        ports: list[int] = json.load(f)
    return ports


def start_router(started: Procs, ports: list[int], flags: tuple[str, ...] = ()) -> FleetRouter:
    port = free_port()
    argv = [*SWITCHYARD, "router", "--port", str(port), "--policy-file", round_robin_py.__file__,
            "--policy", round_robin_py.NAME, *flags]
    for p in ports:
        argv += ["--engine", f"127.0.0.1:{p}"]
    return FleetRouter(f"http://127.0.0.1:{port}", [spawn(started, argv)])


def _healthy_engines(router: FleetRouter) -> int:
    try:
        body = requests.get(f"{router.url}/admin/engines", timeout=10).json()
    except (requests.RequestException, ValueError):
        return 0
    engines = body.get("engines", []) if isinstance(body, dict) else body
    return sum(1 for e in engines if e.get("healthy"))


def wait_healthy(router: FleetRouter, count: int, timeout_s: float = 300) -> float:
    began = time.monotonic()
    while _healthy_engines(router) < count:
        if router.proc[0].poll() is not None or time.monotonic() - began > timeout_s:
            raise RuntimeError(f"the router never saw {count} healthy engines")
        time.sleep(0.5)
    return time.monotonic() - began


def switch_policy(router: FleetRouter, policy: str) -> None:
    r = requests.put(f"{router.url}/admin/policy", json={"policy": policy, "params": {}},
                     timeout=10)
    r.raise_for_status()


def _body(cfg: FleetBenchConfig) -> dict[str, object]:
    return {"model": "default", "prompt": "Hello, my name is", "max_tokens": cfg.max_tokens,
            "stream": True, "ignore_eos": True, "temperature": 0}


def _one_round(cfg: FleetBenchConfig, count: int, rnd: int) -> list[FleetRow]:
    rows: list[FleetRow] = []
    with started_procs() as started:
        ports = start_fleet(started, count)
        router = start_router(started, ports, cfg.router_flags)
        ready_s = wait_healthy(router, count)
        pids = [p.pid for p in router.proc]
        time.sleep(1.0)  # the start-up's last Stats and KV snapshots land
        before = tree_cpu_s(pids)
        time.sleep(cfg.idle_s)
        idle_pct = (tree_cpu_s(pids) - before) / cfg.idle_s * 100
        idle_rss = tree_rss_mb(pids)
        url = f"{router.url}/v1/completions"
        for policy in cfg.policies:
            switch_policy(router, policy)
            measure_http(url, _body(cfg), cfg.concurrency, 1.0)  # warm-up, not counted
            before = tree_cpu_s(pids)
            m = measure_http(url, _body(cfg), cfg.concurrency, cfg.duration_s)
            cpu_ms = (tree_cpu_s(pids) - before) * 1000 / m.requests if m.requests else None
            rss = tree_rss_mb(pids)
            rows.append(FleetRow(count, policy, rnd, m.rps, m.p50_ms, m.p99_ms, m.errors,
                                 cpu_ms, idle_pct, ready_s, idle_rss, rss))
            cpu = f"{cpu_ms:.3f}" if cpu_ms is not None else "-"
            print(f"  round {rnd} N={count:<5} {policy:<16} {m.rps:8.0f} req/s  p50 "
                  f"{m.p50_ms:7.2f} ms  p99 {m.p99_ms:7.2f} ms  errors {m.errors}  router CPU "
                  f"{cpu} ms/req  idle {idle_pct:5.1f}% of a core  RSS {idle_rss:.0f} -> "
                  f"{rss:.0f} MB  ready in {ready_s:.1f} s",
                  flush=True)
    return rows


def _ratio(value: float, base: list[float]) -> str:
    """value over the median of `base` ("-" when the smallest fleet has no figure)."""
    return f"{value / statistics.median(base):.2f}x" if base else "-"


def _fmt(value: float) -> str:
    """req/s as integers, CPU ms and percentages to three significant places."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _spread(values: list[float]) -> str:
    return f" ({_fmt(min(values))}–{_fmt(max(values))})" if len(values) > 1 else ""


def _with_span(head: str, values: list[float]) -> str:
    """`head (ratio; min–max)` over several rounds, `head (ratio)` over one."""
    if len(values) < 2:
        return head + ")"
    return f"{head}; {_fmt(min(values))}–{_fmt(max(values))})"


def fleet_table(rows: list[FleetRow], counts: list[int], policies: tuple[str, ...]) -> str:
    """Medians (min–max) per engine count and policy, with ratios to the smallest count."""
    def med(n: int, p: str, attr: str) -> list[float]:
        return [v for r in rows if r.engines == n and r.policy == p
                and (v := getattr(r, attr)) is not None]

    lines = ["| engines | policy | c=32 streaming req/s (vs smallest N) | router CPU ms/req "
             "(vs smallest N) | p50 / p99 ms | router CPU idle, % of a core | router RSS MB, "
             "idle / after the run |",
             "|---|---|---|---|---|---|---|"]
    base = min(counts)
    for n in counts:
        for p in policies:
            rps, cpu, p50, p99 = (med(n, p, a) for a in ("rps", "router_cpu_ms", "p50_ms",
                                                        "p99_ms"))
            idle = med(n, p, "idle_core_pct")
            idle_rss, rss = med(n, p, "idle_rss_mb"), med(n, p, "rss_mb")
            if not rps:
                continue
            r0, c0 = med(base, p, "rps"), med(base, p, "router_cpu_ms")
            rps_m = statistics.median(rps)
            cpu_m = statistics.median(cpu) if cpu else float("nan")
            rps_ratio = _ratio(rps_m, r0)
            cpu_ratio = _ratio(cpu_m, c0)
            lines.append(
                f"| {n} | {p} | {_with_span(f'{rps_m:.0f} ({rps_ratio}', rps)} | "
                f"{_with_span(f'{cpu_m:.3f} ({cpu_ratio}', cpu)} | "
                f"{statistics.median(p50):.1f} / {statistics.median(p99):.1f} | "
                f"{statistics.median(idle):.1f}{_spread(idle)} | "
                f"{statistics.median(idle_rss):.0f} / {statistics.median(rss):.0f} |")
    return "\n".join(lines)


def run_fleet(cfg: FleetBenchConfig) -> int:
    if ensure_wrk() is None:
        print("wrk unavailable: the Python load generator is used (it costs more CPU than the "
              "router it measures; figures are not comparable with wrk's)", flush=True)
    load_before = os.getloadavg()
    rows: list[FleetRow] = []
    for rnd in range(cfg.repeat):
        for count in cfg.engines:
            rows += _one_round(cfg, count, rnd)
    load_after = os.getloadavg()
    print(fleet_table(rows, cfg.engines, cfg.policies))
    print(f"load average before {' '.join(f'{x:.2f}' for x in load_before)}, after "
          f"{' '.join(f'{x:.2f}' for x in load_after)}; {os.cpu_count()} CPUs")
    if cfg.json_out:
        with open(cfg.json_out, "w") as f:
            json.dump({"rows": [asdict(r) for r in rows], "load_before": load_before,
                       "load_after": load_after}, f, indent=1)
    return 0
