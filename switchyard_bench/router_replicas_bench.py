"""`switchyard bench router --replicas 1,2,4`: how router replicas scale, and what joining them
costs per request.

For each replica count N: N `switchyard router` processes (round_robin, the front's fast path)
over the same two mock engines (`engine.mock`, as in the plain bench), and for N > 1 the same N
replicas again, peered: each names the others with --peer, so they stream dispatch deltas to each
other and read each other's admin changes. The load is one total concurrency (the largest
--concurrency) split evenly over the replicas' ports, one load generator per replica, all running
at once: what a round-robin TCP balancer in front of them gives. Streamed completions of
--max-tokens tokens.

Per setup: the aggregate req/s (the generators' sum), its scaling against the smallest replica
count (ideal N x), the routers' and the engines' CPU per request (user + system time of their
process trees over every request served) and, for a peered setup, what the peer stream costs per
request: its router CPU per request minus the unpeered replicas'. Every setup is started once and
stays up (idle but for the one measured); --repeat R measures each R times, interleaved, and
reports medians and the min-max spread (switchyard_bench/router_replicas_table.py).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

from switchyard_bench.bench_procs import (
    Procs,
    free_port,
    spawn,
    start_router_replicas,
    started_procs,
)
from switchyard_bench.proc_cpu import tree_cpu_s
from switchyard_bench.router_bench_tables import load_line
from switchyard_bench.router_replicas_table import (
    ReplicaRun,
    baseline,
    cores_note,
    replicas_table,
    setups,
    split_concurrency,
    summarize,
)
from switchyard_bench.wrk_runner import ensure_wrk, measure_http

_PEER_STREAMS_UP = "switchyard:router_peer_streams_up"


@dataclass(slots=True)
class ReplicaBenchConfig:
    replicas: list[int]
    concurrency: int = 32  # in all, split over the replicas
    duration_s: float = 10.0
    max_tokens: int = 16
    repeat: int = 1
    json_out: str = ""

    def __post_init__(self) -> None:
        if not self.replicas or min(self.replicas) < 1:
            raise ValueError("replica counts must be >= 1")
        if self.concurrency < max(self.replicas):
            raise ValueError(f"concurrency {self.concurrency} cannot be split over "
                             f"{max(self.replicas)} replicas")
        if self.duration_s <= 0 or self.max_tokens < 1 or self.repeat < 1:
            raise ValueError("duration > 0, max_tokens >= 1 and repeat >= 1 required")


def parse_replicas(text: str) -> list[int]:
    """--replicas: comma-separated counts ("1,2,4"), each measured once per round, in order."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of replica counts: {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"replica counts must be >= 1: {text!r}")
    return sorted(set(counts))


@dataclass(slots=True)
class Setup:
    replicas: int
    peered: bool
    ports: list[int]
    routers: Procs


def _peer_streams_up(port: int) -> float:
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return next((s.value for family in text_string_to_metric_families(text)
                 for s in family.samples if s.name == _PEER_STREAMS_UP), 0.0)


def wait_peered(ports: list[int], timeout_s: float = 60) -> None:
    """Until every replica's stream to each of the others is up (before that, a run would
    measure the peered replicas partly unpeered)."""
    deadline = time.monotonic() + timeout_s
    for port in ports:
        while _peer_streams_up(port) < len(ports) - 1:
            if time.monotonic() > deadline:
                raise TimeoutError(f"router on {port}: peer streams not up in {timeout_s:.0f} s")
            time.sleep(0.2)


def measure_setup(setup: Setup, engines: Procs, cfg: ReplicaBenchConfig, round_: int
                  ) -> ReplicaRun:
    """One run: a load generator per replica, all at once, and the CPU both sides spent."""
    body = {"model": "default", "prompt": "Hello, my name is", "max_tokens": cfg.max_tokens,
            "stream": True, "ignore_eos": True, "temperature": 0}
    loads = list(zip(setup.ports, split_concurrency(cfg.concurrency, setup.replicas),
                     strict=True))
    router_pids, engine_pids = [p.pid for p in setup.routers], [p.pid for p in engines]
    router_before, engine_before = tree_cpu_s(router_pids), tree_cpu_s(engine_pids)
    with ThreadPoolExecutor(len(loads)) as pool:
        measures = list(pool.map(lambda load: measure_http(
            f"http://127.0.0.1:{load[0]}/v1/completions", body, load[1], cfg.duration_s), loads))
    run = ReplicaRun(setup.replicas, setup.peered, measures,
                     tree_cpu_s(router_pids) - router_before,
                     tree_cpu_s(engine_pids) - engine_before, round_)
    cpu = "".join(f"  {label} CPU {v:.3f} ms/req" for label, v in
                  (("router", run.per_request_ms(run.router_cpu_s)),
                   ("backend", run.per_request_ms(run.backend_cpu_s))) if v is not None)
    name = f"{setup.replicas} replica{'s' if setup.replicas > 1 else ''}" + (
        ", peered" if setup.peered else "")
    print(f"  round {round_ + 1}: {name:<20} {run.rps:8.0f} req/s (per replica "
          f"{', '.join(f'{m.rps:.0f}' for m in measures)})  errors {run.errors}{cpu}  "
          f"({measures[0].tool})", flush=True)
    return run


def run_replica_bench(cfg: ReplicaBenchConfig) -> list[ReplicaRun]:
    """Start the engines and every setup's replicas, measure each setup once per round, stop
    them all (on every exit path)."""
    log_dir = Path(tempfile.mkdtemp(prefix="switchyard-bench-replicas-"))
    print(f"logs in {log_dir}", flush=True)
    runs: list[ReplicaRun] = []
    with started_procs() as started:
        ports = [free_port(), free_port()]
        engines = [spawn(started, [sys.executable, "-m", "engine.mock", "--port", str(p)],
                         log_path=log_dir / f"engine-{p}.log") for p in ports]
        addresses = [f"127.0.0.1:{p}" for p in ports]
        ready = []
        for n, peered in setups(cfg.replicas):
            replica_ports, routers = start_router_replicas(
                started, n, addresses, peered, ["--policy", "round_robin"], log_dir)
            if peered:
                wait_peered(replica_ports)
            ready.append(Setup(n, peered, replica_ports, routers))
        for round_ in range(cfg.repeat):
            for setup in ready:
                runs.append(measure_setup(setup, engines, cfg, round_))
    return runs


def run_replicas(cfg: ReplicaBenchConfig) -> int:
    """The mode's entry (router_bench.run hands --replicas here): measure, print, write."""
    if ensure_wrk() is None:
        print("wrk unavailable: the Python load generator is used (it costs more CPU than the "
              "routers it measures, and its threads share one interpreter)", flush=True)
    print(f"{cfg.concurrency} connections in all, split over each setup's replicas; "
          f"{cfg.duration_s:g} s per run, {cfg.repeat} round(s)", flush=True)
    load_before = os.getloadavg()
    runs = run_replica_bench(cfg)
    load_after = os.getloadavg()
    summaries = summarize(runs)
    print(replicas_table(summaries, baseline(runs)), flush=True)
    print(load_line(load_before, load_after, os.cpu_count()), flush=True)
    print(cores_note(os.cpu_count(), cfg.replicas), flush=True)
    if cfg.json_out:
        with open(cfg.json_out, "w", encoding="utf-8") as f:
            json.dump({"runs": [asdict(r) for r in runs],
                       "summary": [asdict(s) for s in summaries], "config": asdict(cfg),
                       "load_before": load_before, "load_after": load_after,
                       "cpu_count": os.cpu_count()}, f, indent=1)
    return 0
